//! Secrets in configs: passwords, user tables, key passphrases, URL credentials.
//!
//! A [`Secret`] reads like the value it wraps but never shows it: `Debug` prints `<redacted>`
//! and serialising it (what `/config` on the admin API does) writes `<redacted>`. The value is
//! reached only through [`Secret::expose`], so every use of a secret is visible in the code.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a secret shows in place of its value.
pub const REDACTED: &str = "<redacted>";

/// A value that is never printed or serialised.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> Self {
        Self(value)
    }

    /// The value itself: only where it is used, never to print it.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl<T> Serialize for Secret<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(REDACTED)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Secret<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Secret)
    }
}

impl From<&str> for Secret<String> {
    fn from(s: &str) -> Self {
        Secret(s.to_owned())
    }
}

/// A URL whose user-info (`user:password@`) is a secret: it serialises as
/// `scheme://<redacted>@host/...` and prints the same way.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// Wraps `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The URL with its credentials, to connect with.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with any credentials replaced by `<redacted>`.
    pub fn redacted(&self) -> String {
        redact_url(&self.0)
    }
}

/// `url` with the user-info part, if any, and the values of query parameters that name a
/// credential ([`names_a_credential`]: `api_key`, `access_token`, `sig`, …) replaced by
/// `<redacted>`.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let mut out = match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}://{REDACTED}@{}", &url[..scheme_end], &rest[at + 1..]),
        None => url.to_owned(),
    };
    let Some(q) = out.find('?') else {
        return out;
    };
    let end = out[q..].find('#').map_or(out.len(), |h| q + h);
    let query: Vec<String> = out[q + 1..end]
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if names_a_credential(name) => format!("{name}={REDACTED}"),
            _ => pair.to_owned(),
        })
        .collect();
    out.replace_range(q + 1..end, &query.join("&"));
    out
}

/// True when a header or query parameter `name` says its value is a credential:
/// `authorization`, `cookie`, or any name containing `auth`, `key`, `token`, `secret`,
/// `password`, `passwd`, `session`, `credential` or `signature` (`sig` whole), in any case.
pub fn names_a_credential(name: &str) -> bool {
    const PARTS: [&str; 9] = [
        "auth",
        "key",
        "token",
        "secret",
        "password",
        "passwd",
        "session",
        "credential",
        "signature",
    ];
    let name = name.trim().to_ascii_lowercase();
    matches!(name.as_str(), "cookie" | "set-cookie" | "sig")
        || PARTS.iter().any(|p| name.contains(p))
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl Serialize for SecretUrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.redacted())
    }
}

impl<'de> Deserialize<'de> for SecretUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(SecretUrl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints_or_serialises_its_value() {
        let s = Secret::new("hunter2".to_owned());
        assert_eq!(format!("{s:?}"), REDACTED);
        assert_eq!(
            serde_json::to_string(&s).ok().as_deref(),
            Some("\"<redacted>\"")
        );
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn url_credentials_are_redacted_and_the_rest_kept() {
        assert_eq!(
            redact_url("http://user:pw@host:1/p?q=a@b"),
            "http://<redacted>@host:1/p?q=a@b"
        );
        assert_eq!(redact_url("https://host/p@x"), "https://host/p@x");
        assert_eq!(redact_url("http://a:b@c@host/"), "http://<redacted>@host/");
        assert_eq!(
            redact_url("https://h/p?a=1&api_key=k&sig=s&access_token=t&b=2#api_key=f"),
            "https://h/p?a=1&api_key=<redacted>&sig=<redacted>&access_token=<redacted>&b=2#api_key=f"
        );
        assert_eq!(redact_url("http://h/p?key"), "http://h/p?key");
        let u = SecretUrl::new("https://u:p@h/x");
        assert_eq!(u.to_string(), "https://<redacted>@h/x");
        assert_eq!(u.expose(), "https://u:p@h/x");
    }
}
