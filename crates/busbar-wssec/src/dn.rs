//! Distinguished names: a certificate's subject as attributes and as an RFC 4514 string, and
//! the rule a trusted signer's subject must satisfy ([`SubjectRule`]).
//!
//! Why not a regular expression over the rendered subject: attribute values may contain `,`
//! and `=` (a certificate for `O=CN=client, CN=mallory` renders with `CN=client` inside it),
//! and an unanchored pattern accepts `CN=client2`. A [`DnRule`] compares attributes as parsed
//! from the certificate, never text.

use std::fmt;

use x509_parser::x509::X509Name;

/// One attribute of a Name: its type as a dotted OID, and its value when it is a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    pub oid: String,
    pub value: Option<String>,
}

/// RFC 4514's short names (and a few common aliases accepted in rules), by OID.
const NAMES: &[(&str, &str, &[&str])] = &[
    ("2.5.4.3", "CN", &[]),
    ("2.5.4.7", "L", &[]),
    ("2.5.4.8", "ST", &["S"]),
    ("2.5.4.10", "O", &[]),
    ("2.5.4.11", "OU", &[]),
    ("2.5.4.6", "C", &[]),
    ("2.5.4.9", "STREET", &[]),
    ("0.9.2342.19200300.100.1.25", "DC", &[]),
    ("0.9.2342.19200300.100.1.1", "UID", &[]),
    ("2.5.4.5", "SERIALNUMBER", &[]),
    ("1.2.840.113549.1.9.1", "EMAILADDRESS", &["E", "EMAIL"]),
];

/// The attributes of `name`, in encoding order, and its RFC 4514 string (last RDN first,
/// RDNs joined by `,`, multi-valued ones by `+`, special characters escaped, types by their
/// RFC 4514 short name or dotted OID, non-string values as `#` and hex).
pub(crate) fn read_name(name: &X509Name<'_>) -> (Vec<Attribute>, String) {
    let mut attrs = Vec::new();
    let mut rdns = Vec::new();
    for rdn in name.iter_rdn() {
        let mut parts = Vec::new();
        for atv in rdn.iter() {
            let oid = atv.attr_type().to_id_string();
            let value = atv.as_str().ok().map(str::to_owned);
            let short = NAMES
                .iter()
                .find(|(o, n, _)| *o == oid && *n != "SERIALNUMBER" && *n != "EMAILADDRESS")
                .map_or(oid.clone(), |(_, n, _)| (*n).to_owned());
            let rendered = match &value {
                Some(v) => escape(v),
                None => {
                    let hex: String = atv
                        .attr_value()
                        .data
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect();
                    format!("#{hex}")
                }
            };
            parts.push(format!("{short}={rendered}"));
            attrs.push(Attribute { oid, value });
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    (attrs, rdns.join(","))
}

fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        if c == '\0' {
            out.push_str("\\00");
        } else {
            out.push(c);
        }
    }
    out
}

/// Values are compared as LDAP's caseIgnoreMatch does, in short: leading and trailing spaces
/// dropped, inner runs of white space as one space, case folded.
fn normalize(v: &str) -> String {
    v.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// A subject written as a DN (`CN=client, O=busbar test`; RFC 4514 syntax, any RDN order).
///
/// A certificate satisfies it when, for every attribute type the rule names, the subject's
/// values of that type are exactly the rule's values of that type (compared after
/// normalisation: case and surrounding or repeated white space do not matter). Attribute
/// types the rule does not name are not looked at. So `CN=client` accepts
/// `CN=client,O=busbar test` and refuses `CN=client2`, `CN=client+CN=mallory` and
/// `O=CN=client,CN=mallory`.
#[derive(Clone, PartialEq, Eq)]
pub struct DnRule {
    /// (OID, normalised value), sorted.
    attrs: Vec<(String, String)>,
    text: String,
}

impl DnRule {
    /// Parses a DN in RFC 4514 syntax. Types are RFC 4514 short names (case-insensitive; also
    /// SERIALNUMBER, EMAILADDRESS/E/EMAIL and S) or dotted OIDs; values may escape special
    /// characters with `\` or as `\XX` hex pairs.
    pub fn parse(text: &str) -> Result<DnRule, String> {
        let mut attrs = Vec::new();
        for pair in split_unescaped(text)? {
            let (ty, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("'{}' is not TYPE=value", pair.trim()))?;
            let ty = ty.trim();
            let oid = oid_of(ty).ok_or_else(|| format!("unknown attribute type '{ty}'"))?;
            let value = value.trim_start();
            if value.starts_with('#') {
                return Err(format!("{ty}: hex-encoded values are not supported"));
            }
            let value = unescape(value)?;
            if value.trim().is_empty() {
                return Err(format!("{ty}: empty value"));
            }
            attrs.push((oid, normalize(&value)));
        }
        if attrs.is_empty() {
            return Err("an empty DN".to_owned());
        }
        attrs.sort();
        Ok(DnRule {
            attrs,
            text: text.to_owned(),
        })
    }

    /// Whether a subject with these attributes satisfies the rule.
    pub fn matches(&self, subject: &[Attribute]) -> bool {
        let mut i = 0;
        while i < self.attrs.len() {
            let oid = &self.attrs[i].0;
            let wanted: Vec<&str> = self.attrs[i..]
                .iter()
                .take_while(|(o, _)| o == oid)
                .map(|(_, v)| v.as_str())
                .collect();
            i += wanted.len();
            let mut have: Vec<Option<String>> = subject
                .iter()
                .filter(|a| &a.oid == oid)
                .map(|a| a.value.as_deref().map(normalize))
                .collect();
            have.sort();
            let equal = have.len() == wanted.len()
                && have
                    .iter()
                    .zip(&wanted)
                    .all(|(h, w)| h.as_deref() == Some(*w));
            if !equal {
                return false;
            }
        }
        true
    }
}

impl fmt::Debug for DnRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DnRule({:?})", self.text)
    }
}

fn oid_of(ty: &str) -> Option<String> {
    let upper = ty.to_ascii_uppercase();
    if let Some((oid, _, _)) = NAMES
        .iter()
        .find(|(_, n, aliases)| *n == upper || aliases.contains(&upper.as_str()))
    {
        return Some((*oid).to_owned());
    }
    let dotted = ty
        .strip_prefix("OID.")
        .or_else(|| ty.strip_prefix("oid."))
        .unwrap_or(ty);
    let is_oid = !dotted.is_empty()
        && dotted
            .split('.')
            .all(|arc| !arc.is_empty() && arc.bytes().all(|b| b.is_ascii_digit()))
        && dotted.contains('.');
    is_oid.then(|| dotted.to_owned())
}

/// Splits at `,`, `;` and `+` that are not escaped.
fn split_unescaped(text: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '"' {
            return Err("quoted values are not supported: escape the special characters".into());
        } else if matches!(c, ',' | ';' | '+') {
            out.push(&text[start..i]);
            start = i + 1;
        }
    }
    if escaped {
        return Err("a trailing '\\'".to_owned());
    }
    out.push(&text[start..]);
    Ok(out)
}

fn unescape(value: &str) -> Result<String, String> {
    let mut bytes = Vec::with_capacity(value.len());
    let raw = value.as_bytes();
    let mut i = 0;
    while i < raw.len() {
        if raw[i] != b'\\' {
            bytes.push(raw[i]);
            i += 1;
            continue;
        }
        let hex = |b: u8| (b as char).to_digit(16);
        match (raw.get(i + 1).copied(), raw.get(i + 2).copied()) {
            (Some(h), Some(l)) if hex(h).is_some() && hex(l).is_some() => {
                let (Some(h), Some(l)) = (hex(h), hex(l)) else {
                    return Err("a bad escape".to_owned());
                };
                bytes.push((h * 16 + l) as u8);
                i += 3;
            }
            (Some(c), _) => {
                bytes.push(c);
                i += 2;
            }
            (None, _) => return Err("a trailing '\\'".to_owned()),
        }
    }
    String::from_utf8(bytes).map_err(|_| "an escaped value that is not UTF-8".to_owned())
}

/// Who may sign, by subject Name.
#[derive(Debug, Clone)]
pub enum SubjectRule {
    /// The attributes given must be the subject's (see [`DnRule`]).
    Dn(DnRule),
    /// A regular expression that must match the whole RFC 4514 form of the subject (as
    /// `CN=client,O=busbar test`: last RDN first, no spaces after commas). Built anchored by
    /// [`SubjectRule::pattern`].
    Pattern(regex::Regex),
    /// A regular expression searched anywhere in [`crate::keys::Certificate::subject`]
    /// (x509-parser's rendering, `O=busbar test, CN=client`). Unanchored: what
    /// [`crate::keys::TrustStore::new`] takes; anchor it yourself.
    Search(regex::Regex),
}

impl SubjectRule {
    /// A [`SubjectRule::Pattern`] from `pattern`, anchored at both ends whether or not it
    /// already is.
    pub fn pattern(pattern: &str) -> Result<SubjectRule, regex::Error> {
        regex::Regex::new(&format!("^(?:{pattern})$")).map(SubjectRule::Pattern)
    }

    /// Whether `cert`'s subject satisfies the rule.
    pub fn matches(&self, cert: &crate::keys::Certificate) -> bool {
        match self {
            SubjectRule::Dn(rule) => rule.matches(cert.subject_attributes()),
            SubjectRule::Pattern(re) => re.is_match(cert.subject_rfc4514()),
            SubjectRule::Search(re) => re.is_match(cert.subject()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(pairs: &[(&str, &str)]) -> Vec<Attribute> {
        pairs
            .iter()
            .map(|(t, v)| Attribute {
                oid: oid_of(t).unwrap_or_else(|| panic!("{t}")),
                value: Some((*v).to_owned()),
            })
            .collect()
    }

    fn rule(text: &str) -> DnRule {
        DnRule::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn the_attributes_given_must_be_the_subjects() {
        let client = subject(&[("O", "busbar test"), ("CN", "client")]);
        assert!(rule("CN=client").matches(&client));
        assert!(rule("CN=client, O=busbar test").matches(&client));
        assert!(rule("cn=client,o=busbar test").matches(&client));
        assert!(rule("O=Busbar  Test ; CN= CLIENT").matches(&client));
        assert!(rule("2.5.4.3=client").matches(&client));
        assert!(!rule("CN=client, O=other").matches(&client));
        assert!(!rule("CN=client, OU=x").matches(&client));
        // The two attacks on a searched pattern.
        assert!(!rule("CN=client").matches(&subject(&[("O", "busbar test"), ("CN", "client2")])));
        assert!(!rule("CN=client").matches(&subject(&[("O", "CN=client"), ("CN", "mallory")])));
        // A second value of a type the rule names is refused too.
        assert!(!rule("CN=client").matches(&subject(&[("CN", "client"), ("CN", "mallory")])));
        assert!(
            rule("CN=client+CN=mallory").matches(&subject(&[("CN", "mallory"), ("CN", "client")]))
        );
        // A value that is not a string never matches.
        let odd = vec![Attribute {
            oid: "2.5.4.3".to_owned(),
            value: None,
        }];
        assert!(!rule("CN=client").matches(&odd));
    }

    #[test]
    fn escapes_are_read_and_bad_rules_are_refused() {
        let tricky = subject(&[("O", "a,b+c=d"), ("CN", "x")]);
        assert!(rule(r"O=a\,b\+c\=d").matches(&tricky));
        assert!(rule(r"O=a\2cb\2bc\3dd").matches(&tricky));
        for bad in [
            "",
            "CN",
            "XX=client",
            "CN=",
            "CN=#0403",
            "CN=\"q\"",
            "CN=a\\",
        ] {
            assert!(DnRule::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn names_render_as_rfc_4514() {
        assert_eq!(escape("a,b"), r"a\,b");
        assert_eq!(escape(" x "), r"\ x\ ");
        assert_eq!(escape("#1"), r"\#1");
    }

    #[test]
    fn patterns_are_anchored() {
        let SubjectRule::Pattern(re) =
            SubjectRule::pattern("CN=client").unwrap_or_else(|e| panic!("{e}"))
        else {
            panic!("not a pattern");
        };
        assert!(re.is_match("CN=client"));
        assert!(!re.is_match("CN=client2"));
        assert!(!re.is_match("CN=client,O=x"));
        let SubjectRule::Pattern(re) = SubjectRule::pattern("^CN=client[0-9]*,O=busbar test$")
            .unwrap_or_else(|e| panic!("{e}"))
        else {
            panic!("not a pattern");
        };
        assert!(re.is_match("CN=client7,O=busbar test"));
        assert!(!re.is_match("CN=client,O=busbar test,DC=x"));
    }
}
