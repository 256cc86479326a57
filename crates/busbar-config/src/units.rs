//! Durations (`500ms`, `30s`, `2m`, `1h`) and sizes (`512`, `64KiB`, `10MiB`, `1GB`) in configs.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A duration written with a unit: `250ms`, `30s`, `2m`, `1h`, `1m30s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Duration(pub std::time::Duration);

impl Duration {
    /// Parses `text`; the error says what is accepted.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let bad = || {
            format!("invalid duration '{text}': expected a number with a unit, like 500ms, 30s, 2m or 1h")
        };
        if t.is_empty() {
            return Err(bad());
        }
        let mut total = std::time::Duration::ZERO;
        let mut rest = t;
        while !rest.is_empty() {
            let digits = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .ok_or_else(bad)?;
            if digits == 0 {
                return Err(bad());
            }
            let value: f64 = rest[..digits].parse().map_err(|_| bad())?;
            rest = &rest[digits..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(rest.len());
            let unit = &rest[..unit_len];
            rest = &rest[unit_len..];
            let secs = match unit {
                "ns" => value / 1e9,
                "us" | "µs" => value / 1e6,
                "ms" => value / 1e3,
                "s" => value,
                "m" => value * 60.0,
                "h" => value * 3600.0,
                _ => return Err(bad()),
            };
            total += std::time::Duration::try_from_secs_f64(secs).map_err(|_| bad())?;
        }
        Ok(Duration(total))
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms.is_multiple_of(1000) {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration with a unit, like 500ms, 30s, 2m or 1h")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                Duration::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
                Err(E::custom(format!(
                    "invalid duration '{v}': a duration needs a unit, like {v}s or {v}ms"
                )))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
                self.visit_u64(v.unsigned_abs())
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A size in bytes: a plain number, or with a unit (`KiB`, `MiB`, `GiB`, `KB`, `MB`, `GB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// Parses `text`; the error says what is accepted.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let bad = || {
            format!("invalid size '{text}': expected bytes, or a number with a unit like 64KiB, 10MiB or 1GB")
        };
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        if split == 0 {
            return Err(bad());
        }
        let value: f64 = t[..split].parse().map_err(|_| bad())?;
        let mult: f64 = match t[split..].trim() {
            "" | "B" => 1.0,
            "KiB" | "k" | "K" => 1024.0,
            "MiB" | "M" => 1024.0 * 1024.0,
            "GiB" | "G" => 1024.0 * 1024.0 * 1024.0,
            "KB" | "kB" => 1e3,
            "MB" => 1e6,
            "GB" => 1e9,
            _ => return Err(bad()),
        };
        let bytes = value * mult;
        if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 || bytes.fract() != 0.0 {
            return Err(bad());
        }
        Ok(ByteSize(bytes as u64))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
            write!(f, "{}MiB", b >> 20)
        } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
            write!(f, "{}KiB", b >> 10)
        } else {
            write!(f, "{b}")
        }
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size, like 65536, 64KiB or 10MiB")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("invalid size '{v}': sizes are not negative")))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration as D;

    #[test]
    fn durations_parse_with_units_and_compounds() {
        assert_eq!(
            Duration::parse("500ms").map(|d| d.0),
            Ok(D::from_millis(500))
        );
        assert_eq!(Duration::parse("30s").map(|d| d.0), Ok(D::from_secs(30)));
        assert_eq!(Duration::parse("1m30s").map(|d| d.0), Ok(D::from_secs(90)));
        assert_eq!(
            Duration::parse("1.5s").map(|d| d.0),
            Ok(D::from_millis(1500))
        );
        assert!(Duration::parse("30").is_err());
        assert!(Duration::parse("3x").is_err());
        assert!(Duration::parse("").is_err());
    }

    #[test]
    fn sizes_parse_binary_and_decimal_units() {
        assert_eq!(ByteSize::parse("64KiB"), Ok(ByteSize(65536)));
        assert_eq!(ByteSize::parse("10MiB"), Ok(ByteSize(10 << 20)));
        assert_eq!(ByteSize::parse("1GB"), Ok(ByteSize(1_000_000_000)));
        assert_eq!(ByteSize::parse("512"), Ok(ByteSize(512)));
        assert!(ByteSize::parse("12parsecs").is_err());
        assert!(ByteSize::parse("-1").is_err());
    }
}
