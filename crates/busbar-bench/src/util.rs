//! Small shared pieces: option parsers, machine description, time stamps.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Parses `30s`, `500ms`, `2m`, `1h` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("bad duration '{s}' (examples: 30s, 500ms, 2m)"))?;
    let secs = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("bad duration unit in '{s}' (use ms, s, m or h)")),
    };
    if !secs.is_finite() || !(0.0..=7.0 * 86_400.0).contains(&secs) {
        return Err(format!("duration '{s}' is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a duration that must be more than zero (a measurement's length, a timeout): `0s`
/// would measure nothing or give up on every request before it is sent.
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("'{s}' must be more than 0 (examples: 30s, 500ms)"));
    }
    Ok(d)
}

/// Parses a size: bytes, or with a `k`/`KiB`/`m`/`MiB` suffix (binary multiples).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num.parse().map_err(|_| format!("bad size '{s}'"))?;
    let mult = match unit {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1024,
        "m" | "mb" | "mib" => 1024 * 1024,
        _ => return Err(format!("bad size unit in '{s}' (use bytes, k or m)")),
    };
    let size = n
        .checked_mul(mult)
        .ok_or_else(|| format!("size '{s}' is too large"))?;
    if size < crate::payload::MIN_SIZE {
        return Err(format!(
            "size '{s}' is below the minimum of {} bytes",
            crate::payload::MIN_SIZE
        ));
    }
    if size > crate::payload::MAX_SIZE {
        return Err(format!(
            "size '{s}' is above the maximum of {} bytes",
            crate::payload::MAX_SIZE
        ));
    }
    Ok(size)
}

/// Parses a comma-separated list with `item`.
pub fn parse_list<T>(s: &str, item: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    let items: Result<Vec<T>, String> = s
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(item)
        .collect();
    let items = items?;
    if items.is_empty() {
        return Err("empty list".into());
    }
    Ok(items)
}

/// A positive count.
pub fn parse_count(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) | Err(_) => Err(format!("'{s}' is not a positive whole number")),
        Ok(n) => Ok(n),
    }
}

/// The machine a run was measured on.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    /// CPU model from /proc/cpuinfo.
    pub cpu_model: String,
    /// Logical CPUs available to the process.
    pub cores: usize,
    /// Kernel release.
    pub kernel: String,
    /// Host name.
    pub hostname: String,
    /// Operating system and architecture the kit was built for.
    pub os_arch: String,
}

impl Machine {
    /// Describes the current machine from /proc (fields read as "unknown" elsewhere).
    pub fn current() -> Machine {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .ok()
        };
        let cpu_model = read("/proc/cpuinfo")
            .and_then(|c| {
                c.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        Machine {
            cpu_model,
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            kernel: read("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
            hostname: read("/proc/sys/kernel/hostname").unwrap_or_else(|| "unknown".into()),
            os_arch: format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
        }
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Rounds to `digits` decimals so result files are stable to diff.
pub fn round(v: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (v * m).round() / m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes_parse_with_units() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert!(parse_duration("5 parsecs").is_err());
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_positive_duration("0s").is_err());
        assert!(parse_positive_duration("0.000ms").is_err());
        assert_eq!(parse_positive_duration("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_size("16k"), Ok(16_384));
        assert_eq!(parse_size("1MiB"), Ok(1_048_576));
        assert!(parse_size("100").is_err());
        assert_eq!(parse_list("1, 2", parse_count), Ok(vec![1, 2]));
        assert!(parse_list("1,0", parse_count).is_err());
    }
}
