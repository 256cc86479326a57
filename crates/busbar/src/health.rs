//! `busbar health URL`: one plain-HTTP GET with a deadline, for container health checks and
//! scripts (the runtime image has no curl).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Exit status 0 when `url` answers 2xx within `timeout`; 1 with a one-line reason otherwise
/// (an answer of another status, no connection, no answer in time); 2, a usage error, for a
/// URL this command cannot use (not `http://host[:port]/path`).
pub fn check(url: &str, timeout: Duration) -> ExitCode {
    let Some((authority, path)) = split(url) else {
        eprintln!("health: '{url}' is not an http:// URL");
        return ExitCode::from(2);
    };
    match get(authority, path, timeout) {
        Ok(status) if (200..300).contains(&status) => {
            println!("healthy ({status})");
            ExitCode::SUCCESS
        }
        Ok(status) => {
            eprintln!("unhealthy: {url} answered {status}");
            ExitCode::FAILURE
        }
        // A read or write past its deadline fails as EAGAIN ("Resource temporarily
        // unavailable") on Linux, a connect as TimedOut: both are the timeout.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ) =>
        {
            eprintln!("unhealthy: {url}: timed out after {timeout:?} without an answer");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("unhealthy: {url}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `http://host:port/path` → (`host:port`, `/path`).
fn split(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    (!authority.is_empty() && !authority.contains('@')).then_some((authority, path))
}

fn get(authority: &str, path: &str, timeout: Duration) -> std::io::Result<u16> {
    let deadline = Instant::now() + timeout;
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let addr = with_port
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("no address"))?;
    let left = |d: Instant| {
        d.checked_duration_since(Instant::now())
            .filter(|t| !t.is_zero())
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"))
    };
    let mut stream = TcpStream::connect_timeout(&addr, left(deadline)?)?;
    stream.set_write_timeout(Some(left(deadline)?))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nUser-Agent: busbar-health\r\n\r\n"
    )?;
    // The status line is all that is needed: `HTTP/1.1 200 OK`.
    let mut head = Vec::with_capacity(64);
    let mut buf = [0u8; 256];
    while !head.contains(&b'\n') && head.len() < 1024 {
        stream.set_read_timeout(Some(left(deadline)?))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|_| line.starts_with("HTTP/1."))
        .ok_or_else(|| std::io::Error::other("not an HTTP answer"))?;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn urls_split_into_authority_and_path() {
        assert_eq!(
            split("http://127.0.0.1:9901/healthz"),
            Some(("127.0.0.1:9901", "/healthz"))
        );
        assert_eq!(split("http://localhost"), Some(("localhost", "/")));
        assert_eq!(split("https://x/healthz"), None);
        assert_eq!(split("http://u:p@x/healthz"), None);
        assert_eq!(split("http:///healthz"), None);
    }
}
