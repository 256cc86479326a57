//! xs:duration and xs:dateTime values for `wait` and `onAlarm`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Parses an xs:duration (`PnYnMnDTnHnMnS`; a year is 365 days, a month 30). Negative
/// durations count as zero.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let s = s.strip_prefix('P')?;
    if s.is_empty() {
        return None;
    }
    let (date, time) = match s.split_once('T') {
        Some((d, t)) if !t.is_empty() => (d, Some(t)),
        Some(_) => return None,
        None => (s, None),
    };
    let mut secs = 0f64;
    let mut take = |part: &str, units: &[(char, f64)]| -> Option<()> {
        let mut num = String::new();
        let mut next = 0;
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                num.push(c);
                continue;
            }
            let i = units[next..].iter().position(|(u, _)| *u == c)? + next;
            if num.is_empty() {
                return None;
            }
            let v: f64 = num.parse().ok()?;
            if num.contains('.') && c != 'S' {
                return None;
            }
            secs += v * units[i].1;
            num.clear();
            next = i + 1;
        }
        num.is_empty().then_some(())
    };
    take(
        date,
        &[
            ('Y', 365.0 * 86400.0),
            ('M', 30.0 * 86400.0),
            ('D', 86400.0),
        ],
    )?;
    if let Some(t) = time {
        take(t, &[('H', 3600.0), ('M', 60.0), ('S', 1.0)])?;
    }
    if neg || secs <= 0.0 {
        return Some(Duration::ZERO);
    }
    Some(Duration::from_secs_f64(secs.min(1e10)))
}

/// Parses an xs:dateTime or xs:date (no zone means UTC) into a point in time.
pub fn parse_datetime(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let (date, rest) = match s.find('T') {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (s, ""),
    };
    let mut dp = date.splitn(3, '-');
    let y: i64 = dp.next()?.parse().ok()?;
    let m: u32 = dp.next()?.parse().ok()?;
    let d_and_zone = dp.next()?;
    let d: u32 = d_and_zone.get(..2)?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let mut zone = if rest.is_empty() {
        &d_and_zone[2..]
    } else {
        ""
    };
    let mut secs_of_day = 0f64;
    if !rest.is_empty() {
        let zi = rest.find(['Z', '+', '-']).unwrap_or(rest.len());
        zone = &rest[zi..];
        let mut tp = rest[..zi].splitn(3, ':');
        let h: f64 = tp.next()?.parse().ok()?;
        let mi: f64 = tp.next()?.parse().ok()?;
        let sec: f64 = tp.next().unwrap_or("0").parse().ok()?;
        if h > 24.0 || mi >= 60.0 || sec >= 61.0 {
            return None;
        }
        secs_of_day = h * 3600.0 + mi * 60.0 + sec;
    }
    let offset = match zone {
        "" | "Z" => 0f64,
        z => {
            let sign = if z.starts_with('-') { -1.0 } else { 1.0 };
            let (hh, mm) = z.get(1..)?.split_once(':')?;
            sign * (hh.parse::<f64>().ok()? * 3600.0 + mm.parse::<f64>().ok()? * 60.0)
        }
    };
    let total =
        busbar_core::calendar::days_from_civil(y, m, d) as f64 * 86400.0 + secs_of_day - offset;
    if total < 0.0 {
        return Some(UNIX_EPOCH);
    }
    Some(UNIX_EPOCH + Duration::from_secs_f64(total))
}

/// How long from now until `t` (zero when past).
pub fn until(t: SystemTime) -> Duration {
    t.duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("PT1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse_duration("PT1.5S"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("P1DT1H"), Some(Duration::from_secs(90000)));
        assert_eq!(parse_duration("PT2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("P"), None);
        assert_eq!(parse_duration("PT"), None);
        assert_eq!(parse_duration("1S"), None);
        assert_eq!(parse_duration("PT1H2H"), None);
        assert_eq!(parse_duration("-PT5S"), Some(Duration::ZERO));
    }

    #[test]
    fn datetimes() {
        let t = parse_datetime("1970-01-02T00:00:01Z").unwrap();
        assert_eq!(t, UNIX_EPOCH + Duration::from_secs(86401));
        let t = parse_datetime("1970-01-02T01:00:00+01:00").unwrap();
        assert_eq!(t, UNIX_EPOCH + Duration::from_secs(86400));
        assert_eq!(
            parse_datetime("2000-03-01").unwrap(),
            UNIX_EPOCH + Duration::from_secs(951868800)
        );
        assert!(parse_datetime("2000-13-01").is_none());
        assert!(parse_datetime("garbage").is_none());
    }
}
