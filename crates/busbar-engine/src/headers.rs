//! Hop-by-hop header handling (RFC 9110 §7.6.1): these describe one connection, never the
//! message, so a proxy removes them in both directions.

use http::header::{self, HeaderMap, HeaderName};

const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// True for a name that is hop-by-hop whatever the message says (`Connection` included).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name) || matches!(name.as_str(), "keep-alive" | "proxy-connection")
}

/// The names a message's `Connection` fields list: hop-by-hop too, for that message.
fn connection_named(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect()
}

/// The hop-by-hop fields of one message: the fixed names and those its `Connection` fields
/// list.
pub(crate) struct HopByHop {
    named: Vec<HeaderName>,
}

impl HopByHop {
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        // A pass over the names finds no `Connection` field faster than a lookup by hash, and
        // without one there is nothing to list (nor to allocate).
        let named = if headers.keys().any(|name| name == header::CONNECTION) {
            connection_named(headers)
        } else {
            Vec::new()
        };
        HopByHop { named }
    }

    /// True when fields named `name` describe the connection only.
    pub(crate) fn contains(&self, name: &HeaderName) -> bool {
        is_hop_by_hop(name) || self.named.contains(name)
    }
}

/// Removes every hop-by-hop field: the fixed ones and those `Connection` names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one pass over the names is cheaper than nine lookups.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let hop = HopByHop::of(headers);
    let gone: Vec<HeaderName> = headers
        .keys()
        .filter(|name| hop.contains(name))
        .cloned()
        .collect();
    for name in gone {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn connection_named_headers_and_fixed_ones_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-trace"),
        );
        h.insert("x-trace", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/xml"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key(header::CONTENT_TYPE));
    }

    #[test]
    fn each_hop_by_hop_name_alone_is_removed_and_other_headers_stay() {
        let names = [
            "connection",
            "proxy-authenticate",
            "proxy-authorization",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "keep-alive",
            "proxy-connection",
            "Keep-Alive",
        ];
        for name in names {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/xml"));
            h.append(header::ACCEPT, HeaderValue::from_static("a"));
            h.append(header::ACCEPT, HeaderValue::from_static("b"));
            h.insert(
                HeaderName::from_bytes(name.as_bytes()).expect("name"),
                HeaderValue::from_static("x"),
            );
            strip_hop_by_hop(&mut h);
            assert_eq!(h.len(), 3, "{name}");
            assert!(
                h.keys().all(|k| !k.as_str().eq_ignore_ascii_case(name)),
                "{name}"
            );
        }
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/xml"));
        h.insert("x-keep-alive", HeaderValue::from_static("1"));
        let before = h.clone();
        strip_hop_by_hop(&mut h);
        assert_eq!(h, before);
    }
}
