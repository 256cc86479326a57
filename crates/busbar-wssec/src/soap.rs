//! Finding the parts of a SOAP envelope, and small helpers every processor needs.

use base64::Engine as _;

use crate::dom::{Document, NodeId};
use crate::error::{fail, FaultKind, WsseError};
use crate::ns;

pub use busbar_core::SoapVersion as Soap;

/// The structure of an envelope: the real Header and Body, found by position.
#[derive(Debug, Clone, Copy)]
pub struct Envelope {
    /// Its version.
    pub soap: Soap,
    /// The `Envelope` element.
    pub envelope: NodeId,
    /// The `Header`, when there is one.
    pub header: Option<NodeId>,
    /// The `Body`.
    pub body: NodeId,
}

impl Envelope {
    /// Finds the envelope's parts; anything else is an error.
    ///
    /// That includes an element after the Body, in SOAP 1.1 too (which allows one; WS-I Basic
    /// Profile 1.1 R1011 does not): no signature covers it, so a message that carried one would
    /// pass on content nobody vouched for. Comments and white space around the parts are kept.
    pub fn find(doc: &Document) -> Result<Envelope, WsseError> {
        let envelope = doc.root();
        if doc.local_name(envelope) != "Envelope" {
            return fail(
                FaultKind::InvalidSecurity,
                "the document is not a SOAP envelope",
            );
        }
        let soap = match doc.namespace(envelope) {
            ns::SOAP11 => Soap::V11,
            ns::SOAP12 => Soap::V12,
            other => {
                return fail(
                    FaultKind::VersionMismatch,
                    format!("unknown envelope namespace '{other}'"),
                )
            }
        };
        let env_ns = soap.namespace();
        let mut header = None;
        let mut body = None;
        for (i, child) in doc.element_children(envelope).enumerate() {
            let in_env = doc.namespace(child) == env_ns;
            match (in_env, doc.local_name(child), i, body.is_some()) {
                (true, "Header", 0, false) => header = Some(child),
                (true, "Body", _, false) => body = Some(child),
                (true, "Header" | "Body", _, _) => {
                    return fail(
                        FaultKind::InvalidSecurity,
                        format!("misplaced or repeated {}", doc.local_name(child)),
                    )
                }
                _ => {
                    return fail(
                        FaultKind::InvalidSecurity,
                        format!(
                            "unexpected element '{}' in the envelope",
                            doc.local_name(child)
                        ),
                    )
                }
            }
        }
        let Some(body) = body else {
            return fail(FaultKind::InvalidSecurity, "the envelope has no Body");
        };
        Ok(Envelope {
            soap,
            envelope,
            header,
            body,
        })
    }

    /// The role a header block is addressed to: `actor` in SOAP 1.1, `role` in 1.2.
    pub fn role<'d>(&self, doc: &'d Document, block: NodeId) -> Option<&'d str> {
        match self.soap {
            Soap::V11 => doc.attr(block, ns::SOAP11, "actor"),
            Soap::V12 => doc.attr(block, ns::SOAP12, "role"),
        }
    }

    /// Whether a header block is for the node that receives the message: no role (the
    /// ultimate receiver), `next`, or SOAP 1.2's `ultimateReceiver`.
    pub fn for_receiver(&self, doc: &Document, block: NodeId) -> bool {
        receives(self.role(doc, block))
    }
}

/// Whether a header block with `role` is for the node that receives the message.
pub fn receives(role: Option<&str>) -> bool {
    role.is_none_or(|r| {
        r == ns::ACTOR_NEXT_11 || r == ns::ROLE_NEXT_12 || r == ns::ROLE_ULTIMATE_12
    })
}

/// The first element child of `parent` named `{ns}local`.
pub fn child(doc: &Document, parent: NodeId, ns: &str, local: &str) -> Option<NodeId> {
    doc.element_children(parent).find(|&c| doc.is(c, ns, local))
}

/// Exactly one element child named `{ns}local`.
pub fn only_child(
    doc: &Document,
    parent: NodeId,
    ns: &str,
    local: &str,
) -> Result<NodeId, WsseError> {
    let mut found = doc
        .element_children(parent)
        .filter(|&c| doc.is(c, ns, local));
    match (found.next(), found.next()) {
        (Some(c), None) => Ok(c),
        (None, _) => fail(
            FaultKind::InvalidSecurity,
            format!("missing {local} in {}", doc.local_name(parent)),
        ),
        _ => fail(
            FaultKind::InvalidSecurity,
            format!("more than one {local} in {}", doc.local_name(parent)),
        ),
    }
}

/// Base64 content as XML carries it: line breaks and spaces allowed anywhere.
pub fn decode_base64(text: &str) -> Result<Vec<u8>, WsseError> {
    let engine = &base64::engine::general_purpose::STANDARD;
    // Most senders write one line: decoded as it is, without a compacted copy.
    let decoded = if text.bytes().any(|b| b.is_ascii_whitespace()) {
        let mut compact = Vec::with_capacity(text.len());
        compact.extend(text.bytes().filter(|b| !b.is_ascii_whitespace()));
        engine.decode(compact)
    } else {
        engine.decode(text)
    };
    decoded.map_err(|_| WsseError::new(FaultKind::InvalidSecurity, "invalid base64 content"))
}

/// Base64 as we write it: one line.
pub fn encode_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Equality in time independent of where the inputs differ.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A distinguished name as a comparable set of `TYPE=value` parts: Java writes
/// `CN=client,O=busbar test` where x509-parser writes `O=busbar test, CN=client`.
pub fn normalize_dn(dn: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in dn.chars() {
        if escaped {
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' || c == '+' || c == ';' {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    let mut out: Vec<String> = parts
        .into_iter()
        .filter_map(|p| {
            let (t, v) = p.split_once('=')?;
            let t = match t.trim().to_ascii_uppercase().as_str() {
                "EMAILADDRESS" | "E" | "1.2.840.113549.1.9.1" => "EMAIL".to_owned(),
                "S" | "ST" | "2.5.4.8" => "ST".to_owned(),
                "2.5.4.3" => "CN".to_owned(),
                "2.5.4.10" => "O".to_owned(),
                "2.5.4.11" => "OU".to_owned(),
                "2.5.4.6" => "C".to_owned(),
                "2.5.4.7" => "L".to_owned(),
                other => other.to_owned(),
            };
            Some(format!("{t}={}", v.trim()))
        })
        .collect();
    out.sort();
    out
}

/// Escapes text for an attribute value or character data we write.
pub fn escape(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

/// A fresh identifier for an element we create: `PREFIX-` and 32 hex digits.
pub fn new_id(prefix: &str) -> String {
    let mut s = String::with_capacity(prefix.len() + 33);
    s.push_str(prefix);
    s.push('-');
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in crate::crypto::random_bytes(16) {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 15)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dom::Limits;

    fn envelope(ns: &str, after_body: &str) -> Result<Envelope, WsseError> {
        let src = format!(
            "<e:Envelope xmlns:e=\"{ns}\"><e:Header/><e:Body><a/></e:Body>{after_body}</e:Envelope>"
        );
        let doc = Document::parse(src.as_bytes(), &Limits::default())
            .map_err(|e| WsseError::new(FaultKind::InvalidSecurity, e.to_string()))?;
        Envelope::find(&doc)
    }

    #[test]
    fn an_element_after_the_body_is_refused_in_both_versions() {
        for ns in [ns::SOAP11, ns::SOAP12] {
            let e =
                envelope(ns, "<x:Injected xmlns:x=\"urn:x\">UNSIGNED</x:Injected>").expect_err(ns);
            assert_eq!(e.kind, FaultKind::InvalidSecurity, "{ns}");
            assert_eq!(e.detail, "unexpected element 'Injected' in the envelope");
        }
    }

    #[test]
    fn comments_and_white_space_after_the_body_are_kept() {
        for ns in [ns::SOAP11, ns::SOAP12] {
            let env = envelope(ns, "\n  <!-- trailer -->\n").expect(ns);
            assert!(env.header.is_some());
        }
    }

    #[test]
    fn dn_forms_compare_equal() {
        assert_eq!(
            normalize_dn("CN=client,O=busbar test"),
            normalize_dn("O=busbar test, CN=client")
        );
        assert_ne!(normalize_dn("CN=client"), normalize_dn("CN=rogue"));
        assert_eq!(normalize_dn("CN=a\\,b"), vec!["CN=a,b".to_owned()]);
    }

    #[test]
    fn base64_tolerates_line_breaks() {
        assert_eq!(
            decode_base64("aGVs\nbG8=\r\n").ok(),
            Some(b"hello".to_vec())
        );
        assert!(decode_base64("***").is_err());
        // One line, decoded without a copy, the same as with white space around it.
        assert_eq!(decode_base64("aGVsbG8=").ok(), Some(b"hello".to_vec()));
        assert_eq!(decode_base64(" aGVsbG8=\t").ok(), Some(b"hello".to_vec()));
        assert_eq!(decode_base64("").ok(), Some(Vec::new()));
        assert!(decode_base64("aGVsbG8").is_err());
        assert!(decode_base64("aGVs bG8").is_err());
        assert!(decode_base64("aGVsbG8=aGVs").is_err());
    }

    #[test]
    fn ct_eq_compares() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }
}
