//! `xsd:dateTime` as WS-Security timestamps use it: parsing any offset, writing UTC.

/// Milliseconds since the Unix epoch of an `xsd:dateTime` (`2026-11-21T10:00:00.123Z`); a
/// missing zone is read as UTC, as WS-Security requires UTC anyway.
pub fn parse_datetime(s: &str) -> Option<i64> {
    let s = s.trim();
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        if !t.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        t.parse().ok()
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 24 || minute > 59 {
        return None;
    }
    if second > 60 || (hour == 24 && (minute, second) != (0, 0)) {
        return None;
    }
    let mut rest = &s[19..];
    let mut millis = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        for (i, c) in frac[..digits].bytes().take(3).enumerate() {
            millis += i64::from(c - b'0') * [100, 10, 1][i];
        }
        rest = &frac[digits..];
    }
    let offset_min = match rest {
        "" | "Z" => 0,
        _ => {
            let rb = rest.as_bytes();
            if rb.len() != 6 || rb[3] != b':' || !(rb[0] == b'+' || rb[0] == b'-') {
                return None;
            }
            let h: i64 = rest[1..3].parse().ok()?;
            let m: i64 = rest[4..6].parse().ok()?;
            let v = h * 60 + m;
            if rb[0] == b'-' {
                -v
            } else {
                v
            }
        }
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_min * 60;
    Some(secs * 1000 + millis)
}

/// `2026-11-21T10:00:00.123Z` for milliseconds since the epoch.
pub fn format_datetime(millis: i64) -> String {
    let secs = millis.div_euclid(1000);
    let ms = millis.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = busbar_core::calendar::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

// Howard Hinnant's calendar algorithms (public-domain arithmetic on the proleptic Gregorian
// calendar).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Now, in milliseconds since the epoch.
pub fn now_millis(now: std::time::SystemTime) -> i64 {
    now.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_utc_with_and_without_fraction() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_datetime("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(
            parse_datetime("2026-11-21T10:00:00.123Z"),
            Some(1_795_255_200_123)
        );
        assert_eq!(
            parse_datetime("2026-11-21T10:00:00"),
            parse_datetime("2026-11-21T10:00:00Z")
        );
    }

    #[test]
    fn applies_offsets() {
        assert_eq!(
            parse_datetime("2026-11-21T12:00:00+02:00"),
            parse_datetime("2026-11-21T10:00:00Z")
        );
        assert_eq!(
            parse_datetime("2026-11-21T05:30:00-04:30"),
            parse_datetime("2026-11-21T10:00:00Z")
        );
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-11-21 10:00:00Z",
            "2026-11-21T10:00:00.Z",
            "2026-11-21T10:00:00+0200",
            "2026-11-21T1a:00:00Z",
        ] {
            assert_eq!(parse_datetime(bad), None, "{bad}");
        }
    }

    #[test]
    fn formats_what_it_parses() {
        for ms in [0, 1_795_255_200_123, 951_782_400_000, 4_102_444_799_999] {
            assert_eq!(parse_datetime(&format_datetime(ms)), Some(ms));
        }
        assert_eq!(
            format_datetime(1_795_255_200_123),
            "2026-11-21T10:00:00.123Z"
        );
    }
}
