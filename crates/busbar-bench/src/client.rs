//! A lean HTTP/1.x client for load generation: pre-serialized requests, one reused read buffer
//! per connection and a minimal response parser (Content-Length, chunked, close-delimited,
//! HTTP/1.0 and keep-alive negotiation). It never allocates per request once its buffers have
//! grown to the response size.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A parsed `http://host[:port]/path` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// The URL as given.
    pub raw: String,
    /// Host name or address (without brackets for IPv6).
    pub host: String,
    /// TCP port (80 when absent).
    pub port: u16,
    /// Path and query, at least `/`.
    pub path: String,
}

impl Url {
    /// Parses a plain-HTTP URL; https and other schemes are refused with a clear message.
    pub fn parse(raw: &str) -> Result<Url, String> {
        let rest = raw.strip_prefix("http://").ok_or_else(|| {
            format!("URL '{raw}' must start with http:// (https is not supported)")
        })?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(format!("URL '{raw}' has no host"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6
                .find(']')
                .ok_or_else(|| format!("URL '{raw}': unclosed '['"))?;
            let port = v6[end + 1..].strip_prefix(':');
            (&v6[..end], port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        let port = match port {
            Some(p) => p
                .parse::<u16>()
                .map_err(|_| format!("URL '{raw}': bad port '{p}'"))?,
            None => 80,
        };
        Ok(Url {
            raw: raw.to_string(),
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }

    /// The `Host` header value.
    pub fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 80 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// Resolves the host and checks that a TCP connection can be opened, so a run never starts
    /// against an unreachable target.
    pub async fn resolve_reachable(
        &self,
        timeout: std::time::Duration,
    ) -> Result<SocketAddr, String> {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|e| format!("cannot resolve {}: {e}", self.raw))?
            .collect();
        let mut last = format!("cannot resolve {}: no address", self.raw);
        for addr in addrs {
            match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
                Ok(Ok(_)) => return Ok(addr),
                Ok(Err(e)) => last = format!("cannot connect to {} ({addr}): {e}", self.raw),
                Err(_) => last = format!("cannot connect to {} ({addr}): timed out", self.raw),
            }
        }
        Err(last)
    }
}

/// HTTP version the generator speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.1 (keep-alive unless told otherwise).
    Http11,
    /// HTTP/1.0 (keep-alive only when asked with `Connection: keep-alive`).
    Http10,
}

/// Request method: `POST` for everything with a body, `GET` for the read-only scenarios.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// `POST` with a Content-Length body.
    Post,
    /// `GET`, no body.
    Get,
    /// `PUT` with a Content-Length body.
    Put,
}

/// Everything needed to serialize the one request a load run repeats.
#[derive(Clone, Debug)]
pub struct RequestSpec {
    /// Request method.
    pub method: Method,
    /// Target URL (path and Host come from it).
    pub url: Url,
    /// Header lines in order; names compared case-insensitively when overriding.
    pub headers: Vec<(String, String)>,
    /// Request body.
    pub body: Vec<u8>,
    /// HTTP version.
    pub version: Version,
    /// Whether to ask for a persistent connection.
    pub keep_alive: bool,
}

impl RequestSpec {
    /// A classic buyStocks request (docs/scenarios.md): POST, Content-Type, SOAPAction and routing headers.
    pub fn soap(url: Url, body: Vec<u8>, soap_action: String) -> RequestSpec {
        RequestSpec {
            method: Method::Post,
            url,
            headers: vec![
                ("Content-Type".into(), "text/xml; charset=UTF-8".into()),
                ("SOAPAction".into(), soap_action),
                ("routing".into(), crate::payload::ROUTING_VALUE.into()),
            ],
            body,
            version: Version::Http11,
            keep_alive: true,
        }
    }

    /// A JSON `POST` (the integrator scenarios): `Content-Type: application/json` only.
    pub fn json(url: Url, body: Vec<u8>) -> RequestSpec {
        RequestSpec {
            method: Method::Post,
            url,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body,
            version: Version::Http11,
            keep_alive: true,
        }
    }

    /// A `GET` without a body, accepting JSON.
    pub fn get(url: Url) -> RequestSpec {
        RequestSpec {
            method: Method::Get,
            url,
            headers: vec![("Accept".into(), "application/json".into())],
            body: Vec::new(),
            version: Version::Http11,
            keep_alive: true,
        }
    }

    /// Sets a header, replacing any of the same name; an empty value removes it.
    pub fn set_header(&mut self, name: &str, value: &str) {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        if !value.is_empty() {
            self.headers.push((name.to_string(), value.to_string()));
        }
    }

    /// Parses a `-H 'name: value'` option and applies it.
    pub fn apply_header_option(&mut self, line: &str) -> Result<(), String> {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("header '{line}' is not 'name: value'"))?;
        let name = name.trim();
        if name.is_empty() || name.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(format!("header '{line}' has an invalid name"));
        }
        let lowered = name.to_ascii_lowercase();
        if matches!(
            lowered.as_str(),
            "content-length" | "transfer-encoding" | "connection" | "host"
        ) {
            return Err(format!("header '{name}' is managed by the load generator"));
        }
        let value = value.trim();
        if value.bytes().any(|b| b == b'\r' || b == b'\n') {
            return Err(format!("header '{name}' value contains a line break"));
        }
        self.set_header(name, value);
        Ok(())
    }

    /// The exact bytes sent on the wire for every request.
    pub fn to_bytes(&self) -> Vec<u8> {
        let version = match self.version {
            Version::Http11 => "HTTP/1.1",
            Version::Http10 => "HTTP/1.0",
        };
        let method = match self.method {
            Method::Post => "POST",
            Method::Get => "GET",
            Method::Put => "PUT",
        };
        let mut head = format!(
            "{method} {} {version}\r\nHost: {}\r\n",
            self.url.path,
            self.url.host_header()
        );
        for (name, value) in &self.headers {
            head.push_str(name);
            head.push_str(": ");
            head.push_str(value);
            head.push_str("\r\n");
        }
        if self.method != Method::Get || !self.body.is_empty() {
            head.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        match (self.version, self.keep_alive) {
            (Version::Http11, false) => head.push_str("Connection: close\r\n"),
            (Version::Http10, true) => head.push_str("Connection: keep-alive\r\n"),
            _ => {}
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

/// What went wrong in one exchange, by the error classes the reports count.
#[derive(Debug)]
pub enum ExchangeError {
    /// Writing the request failed.
    Write(io::Error),
    /// Reading the response failed or the peer closed early.
    Read(io::Error),
    /// The response was not valid HTTP/1.x.
    Protocol(String),
}

impl std::fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExchangeError::Write(e) => write!(f, "write error: {e}"),
            ExchangeError::Read(e) => write!(f, "read error: {e}"),
            ExchangeError::Protocol(m) => write!(f, "protocol error: {m}"),
        }
    }
}

/// The header lines of a response (after the status line, up to the blank line), as read.
#[derive(Clone, Copy, Debug, Default)]
pub struct Headers<'a>(&'a [u8]);

impl<'a> Headers<'a> {
    /// No header lines.
    pub fn empty() -> Headers<'static> {
        Headers(b"")
    }

    /// Header lines as they came, each ending with CRLF (or LF).
    pub const fn new(lines: &'a [u8]) -> Headers<'a> {
        Headers(lines)
    }

    /// The values of every header line named `name` (ASCII case-insensitive), trimmed, in the
    /// order they came.
    pub fn all<'n>(&self, name: &'n str) -> impl Iterator<Item = &'a [u8]> + 'n
    where
        'a: 'n,
    {
        self.0.split(|&b| b == b'\n').filter_map(move |line| {
            let colon = line.iter().position(|&b| b == b':')?;
            line[..colon]
                .eq_ignore_ascii_case(name.as_bytes())
                .then(|| line[colon + 1..].trim_ascii())
        })
    }

    /// The value of the header named `name` (ASCII case-insensitive), trimmed, when it came
    /// exactly once: `Ok(None)` when it is absent, `Err(values)` when it came more than once.
    /// A check that relies on a header must not pick one of several: which one a client or a
    /// proxy would take is anybody's guess.
    pub fn single(&self, name: &str) -> Result<Option<&'a [u8]>, Vec<&'a [u8]>> {
        let mut values = self.all(name);
        let first = values.next();
        match values.next() {
            None => Ok(first),
            Some(second) => Err(first.into_iter().chain([second]).chain(values).collect()),
        }
    }
}

/// Status and connection fate of one response; its body is in the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseHead {
    /// HTTP status code.
    pub status: u16,
    /// Whether the connection may carry another request.
    pub keep_alive: bool,
}

const MAX_HEAD: usize = 64 * 1024;

/// One client connection with its reused read buffer.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The last response's header lines, kept for the checks (the read buffer moves on).
    headers: Vec<u8>,
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by peer")
}

impl Conn {
    /// Opens a connection with TCP_NODELAY (requests are written in one piece anyway).
    pub async fn connect(addr: SocketAddr) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: vec![0; 16 * 1024],
            start: 0,
            end: 0,
            headers: Vec::with_capacity(512),
        })
    }

    /// Reads more bytes into the buffer (compacting or growing it first); returns 0 at EOF.
    async fn fill(&mut self) -> io::Result<usize> {
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                let grown = self.buf.len() * 2;
                self.buf.resize(grown, 0);
            }
        }
        let n = self.stream.read(&mut self.buf[self.end..]).await?;
        self.end += n;
        Ok(n)
    }

    /// The header lines of the last response [`Conn::exchange`] read.
    pub fn headers(&self) -> Headers<'_> {
        Headers(&self.headers)
    }

    /// Sends `request` and reads one full response, its de-framed body into `body` and its
    /// header lines into [`Conn::headers`].
    pub async fn exchange(
        &mut self,
        request: &[u8],
        body: &mut Vec<u8>,
    ) -> Result<ResponseHead, ExchangeError> {
        self.stream
            .write_all(request)
            .await
            .map_err(ExchangeError::Write)?;
        loop {
            let head = self.read_head().await?;
            body.clear();
            if (100..200).contains(&head.status) {
                continue; // interim response (100 Continue): the real one follows
            }
            let mut head = head;
            match head.framing {
                Framing::None => {}
                Framing::Length(n) => self.read_exact_body(n, body).await?,
                Framing::Chunked => self.read_chunked(body).await?,
                Framing::Eof => {
                    self.read_to_eof(body).await?;
                    head.keep_alive = false;
                }
            }
            return Ok(ResponseHead {
                status: head.status,
                keep_alive: head.keep_alive,
            });
        }
    }

    async fn read_head(&mut self) -> Result<ParsedHead, ExchangeError> {
        let mut scanned = self.start;
        loop {
            if let Some(i) = find(&self.buf[scanned..self.end], b"\r\n\r\n") {
                let head_end = scanned + i + 4;
                let head = &self.buf[self.start..head_end];
                let parsed = parse_head(head)?;
                let lines = head
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(head.len(), |i| i + 1);
                self.headers.clear();
                self.headers.extend_from_slice(&head[lines..]);
                self.start = head_end;
                return Ok(parsed);
            }
            if self.end - self.start > MAX_HEAD {
                return Err(ExchangeError::Protocol(
                    "response head larger than 64 KiB".into(),
                ));
            }
            // Keep 3 bytes of overlap so a terminator split across reads is found.
            let offset = (self.end - self.start).saturating_sub(3);
            let before = self.start;
            if self.fill().await.map_err(ExchangeError::Read)? == 0 {
                return Err(ExchangeError::Read(closed()));
            }
            // fill() may have compacted the buffer: recompute the scan position.
            scanned = self.start + offset;
            debug_assert!(self.start <= before);
        }
    }

    async fn read_exact_body(&mut self, n: usize, body: &mut Vec<u8>) -> Result<(), ExchangeError> {
        let have = (self.end - self.start).min(n);
        body.extend_from_slice(&self.buf[self.start..self.start + have]);
        self.start += have;
        if have < n {
            let from = body.len();
            body.resize(from + (n - have), 0);
            self.stream
                .read_exact(&mut body[from..])
                .await
                .map_err(ExchangeError::Read)?;
        }
        Ok(())
    }

    async fn read_line(&mut self) -> Result<std::ops::Range<usize>, ExchangeError> {
        loop {
            if let Some(i) = find(&self.buf[self.start..self.end], b"\r\n") {
                let range = self.start..self.start + i;
                self.start += i + 2;
                return Ok(range);
            }
            if self.end - self.start > MAX_HEAD {
                return Err(ExchangeError::Protocol("chunk line too long".into()));
            }
            if self.fill().await.map_err(ExchangeError::Read)? == 0 {
                return Err(ExchangeError::Read(closed()));
            }
        }
    }

    async fn read_chunked(&mut self, body: &mut Vec<u8>) -> Result<(), ExchangeError> {
        loop {
            let line = self.read_line().await?;
            let text = &self.buf[line];
            let digits = text.split(|&b| b == b';').next().unwrap_or_default();
            let size = parse_hex(digits)
                .ok_or_else(|| ExchangeError::Protocol("bad chunk size line".into()))?;
            if size == 0 {
                // Trailers until the empty line.
                loop {
                    let line = self.read_line().await?;
                    if line.is_empty() {
                        return Ok(());
                    }
                }
            }
            self.read_exact_body(size, body).await?;
            let crlf = self.read_line().await?;
            if !crlf.is_empty() {
                return Err(ExchangeError::Protocol(
                    "chunk data not followed by CRLF".into(),
                ));
            }
        }
    }

    async fn read_to_eof(&mut self, body: &mut Vec<u8>) -> Result<(), ExchangeError> {
        body.extend_from_slice(&self.buf[self.start..self.end]);
        self.start = self.end;
        self.stream
            .read_to_end(body)
            .await
            .map_err(ExchangeError::Read)?;
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(usize),
    Chunked,
    Eof,
}

#[derive(Debug)]
struct ParsedHead {
    status: u16,
    keep_alive: bool,
    framing: Framing,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn parse_hex(s: &[u8]) -> Option<usize> {
    let s = s.trim_ascii();
    if s.is_empty() || s.len() > 15 {
        return None;
    }
    let mut v = 0usize;
    for &b in s {
        let d = (b as char).to_digit(16)?;
        v = v * 16 + d as usize;
    }
    Some(v)
}

fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

fn parse_head(head: &[u8]) -> Result<ParsedHead, ExchangeError> {
    let bad = |m: &str| ExchangeError::Protocol(m.to_string());
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let status_line = lines.next().ok_or_else(|| bad("empty response"))?;
    let http10 = if status_line.starts_with(b"HTTP/1.1 ") {
        false
    } else if status_line.starts_with(b"HTTP/1.0 ") {
        true
    } else {
        return Err(bad("response does not start with HTTP/1.x"));
    };
    let code = status_line
        .get(9..12)
        .ok_or_else(|| bad("short status line"))?;
    let status = std::str::from_utf8(code)
        .ok()
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| bad("bad status code"))?;
    let mut keep_alive = !http10;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(bad("header line without ':'"));
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = std::str::from_utf8(value)
                .ok()
                .and_then(|s| s.parse::<usize>().ok())
                .ok_or_else(|| bad("bad Content-Length"))?;
            // Two different lengths leave the answer's end unknown (RFC 9112 §6.3).
            if length.is_some_and(|l| l != n) {
                return Err(bad("two different Content-Length values"));
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            chunked = has_token(value, b"chunked");
        } else if name.eq_ignore_ascii_case(b"connection") {
            if has_token(value, b"close") {
                keep_alive = false;
            } else if has_token(value, b"keep-alive") {
                keep_alive = true;
            }
        }
    }
    let framing = if status == 204 || status == 304 || (100..200).contains(&status) {
        Framing::None
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::Eof
    };
    Ok(ParsedHead {
        status,
        keep_alive,
        framing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parsing_handles_ports_paths_and_refuses_https() {
        let u = Url::parse("http://127.0.0.1:8280/service/DirectProxy")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 8280, "/service/DirectProxy")
        );
        let u = Url::parse("http://example").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (u.port, u.path.as_str(), u.host_header().as_str()),
            (80, "/", "example")
        );
        let u = Url::parse("http://[::1]:9/x").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (u.host.as_str(), u.host_header().as_str()),
            ("::1", "[::1]:9")
        );
        assert!(Url::parse("https://x/").is_err());
        assert!(Url::parse("http://x:99999/").is_err());
    }

    #[test]
    fn request_bytes_follow_the_scenarios() {
        let url = Url::parse("http://127.0.0.1:1/p").unwrap_or_else(|e| panic!("{e}"));
        let mut spec = RequestSpec::soap(url, b"<a/>".to_vec(), "\"urn:buyStocks.2\"".into());
        let text = String::from_utf8(spec.to_bytes()).unwrap_or_default();
        assert_eq!(
            text,
            "POST /p HTTP/1.1\r\nHost: 127.0.0.1:1\r\nContent-Type: text/xml; charset=UTF-8\r\n\
             SOAPAction: \"urn:buyStocks.2\"\r\nrouting: xadmin;server1;community#1.0##\r\n\
             Content-Length: 4\r\n\r\n<a/>"
        );
        spec.apply_header_option("routing:")
            .unwrap_or_else(|e| panic!("{e}"));
        spec.apply_header_option("X-A: b")
            .unwrap_or_else(|e| panic!("{e}"));
        spec.keep_alive = false;
        let text = String::from_utf8(spec.to_bytes()).unwrap_or_default();
        assert!(!text.contains("routing"));
        assert!(text.contains("X-A: b\r\n"));
        assert!(text.contains("Connection: close\r\n"));
        assert!(spec.apply_header_option("Content-Length: 3").is_err());
    }

    #[test]
    fn get_requests_carry_no_body_framing_and_json_posts_one_content_type() {
        let url = Url::parse("http://h:2/api/product/P-1").unwrap_or_else(|e| panic!("{e}"));
        let text = String::from_utf8(RequestSpec::get(url.clone()).to_bytes()).unwrap_or_default();
        assert_eq!(
            text,
            "GET /api/product/P-1 HTTP/1.1\r\nHost: h:2\r\nAccept: application/json\r\n\r\n"
        );
        let text = String::from_utf8(RequestSpec::json(url, b"{}".to_vec()).to_bytes())
            .unwrap_or_default();
        assert_eq!(
            text,
            "POST /api/product/P-1 HTTP/1.1\r\nHost: h:2\r\nContent-Type: application/json\r\n\
             Content-Length: 2\r\n\r\n{}"
        );
    }

    #[test]
    fn headers_are_found_by_name_in_any_case_and_trimmed_and_a_repeated_one_is_not_single() {
        let h =
            Headers::new(b"Content-Length: 5\r\nX-Echo-Name:  premium \r\nx-echo-name: b\r\n\r\n");
        assert_eq!(
            h.single("x-echo-name"),
            Err(vec![&b"premium"[..], &b"b"[..]])
        );
        assert_eq!(
            h.all("X-ECHO-NAME").collect::<Vec<_>>(),
            vec![&b"premium"[..], &b"b"[..]]
        );
        assert_eq!(h.single("CONTENT-LENGTH"), Ok(Some(&b"5"[..])));
        assert_eq!(h.single("x-echo"), Ok(None));
        assert_eq!(Headers::default().single("x-echo-name"), Ok(None));
    }

    #[test]
    fn head_parser_reads_framing_and_connection_fate() {
        let h = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (h.status, h.keep_alive, h.framing),
            (200, true, Framing::Length(5))
        );
        let h = parse_head(b"HTTP/1.0 500 X\r\ncontent-length: 0\r\n\r\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!h.keep_alive);
        let h =
            parse_head(b"HTTP/1.0 200 X\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\n")
                .unwrap_or_else(|e| panic!("{e}"));
        assert!(h.keep_alive);
        let h = parse_head(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((h.keep_alive, h.framing), (false, Framing::Chunked));
        let h = parse_head(b"HTTP/1.1 200 OK\r\n\r\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(h.framing, Framing::Eof);
        assert!(parse_head(b"FTP 200\r\n\r\n").is_err());
        assert!(
            parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n")
                .is_err()
        );
        let h = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(h.framing, Framing::Length(5));
        assert_eq!(parse_hex(b"1a"), Some(26));
        assert_eq!(parse_hex(b"zz"), None);
    }
}
