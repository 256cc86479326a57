//! A bare HTTP/1.1 forwarder: one thread, one task per client connection, each with its own
//! back-end connection, messages framed by `Content-Length` and passed on byte for byte. No
//! header map, no pool, no hand-off between tasks, no limits, no timeouts: what is left is the
//! least a tokio-based proxy pays per exchange, to tell how far a leaner HTTP path could go.
//!
//! Usage: busbar-ceiling LISTEN UPSTREAM PATH, e.g.
//! `busbar-ceiling 127.0.0.1:8480 127.0.0.1:9000 /service/EchoService`; every request's target
//! is replaced by PATH. Not a proxy to deploy: it refuses chunked bodies and trusts its peers.

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, listen, upstream, path] = args.as_slice() else {
        eprintln!("usage: busbar-ceiling LISTEN UPSTREAM PATH");
        std::process::exit(2);
    };
    let upstream: &'static str = Box::leak(upstream.clone().into_boxed_str());
    let path: &'static [u8] = Box::leak(path.clone().into_bytes().into_boxed_slice());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    rt.block_on(async move {
        let listener = TcpListener::bind(listen.as_str()).await?;
        loop {
            let (client, _) = listener.accept().await?;
            client.set_nodelay(true)?;
            tokio::spawn(async move {
                if let Err(e) = serve(client, upstream, path).await {
                    if e.kind() != io::ErrorKind::UnexpectedEof {
                        eprintln!("connection: {e}");
                    }
                }
            });
        }
    })
}

async fn serve(mut client: TcpStream, upstream: &str, path: &[u8]) -> io::Result<()> {
    let mut back: Option<TcpStream> = None;
    let mut req = Vec::with_capacity(16 * 1024);
    let mut resp = Vec::with_capacity(16 * 1024);
    let mut out = Vec::with_capacity(16 * 1024);
    loop {
        let Some(frame) = read_message(&mut client, &mut req, true).await? else {
            return Ok(());
        };
        // The request line with its target replaced, then the rest as it came.
        out.clear();
        out.extend_from_slice(&req[..frame.method_end]);
        out.push(b' ');
        out.extend_from_slice(path);
        out.extend_from_slice(&req[frame.target_end..frame.len]);
        req.drain(..frame.len);
        let b = match back.as_mut() {
            Some(b) => b,
            None => {
                let s = TcpStream::connect(upstream).await?;
                s.set_nodelay(true)?;
                back.insert(s)
            }
        };
        b.write_all(&out).await?;
        let Some(answer) = read_message(b, &mut resp, false).await? else {
            return Err(io::ErrorKind::UnexpectedEof.into());
        };
        client.write_all(&resp[..answer.len]).await?;
        resp.drain(..answer.len);
    }
}

struct Frame {
    len: usize,
    method_end: usize,
    target_end: usize,
}

/// Reads one whole message (head and `Content-Length` body) into `buf`; `None` at a clean end.
async fn read_message(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    request: bool,
) -> io::Result<Option<Frame>> {
    loop {
        if let Some(frame) = frame(buf, request)? {
            if buf.len() >= frame.len {
                return Ok(Some(frame));
            }
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        if s.read_buf(buf).await? == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
    }
}

fn frame(buf: &[u8], request: bool) -> io::Result<Option<Frame>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let bad = |e: httparse::Error| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
    let (head, hs, method_end, target_end) = if request {
        let mut r = httparse::Request::new(&mut headers);
        match r.parse(buf).map_err(bad)? {
            httparse::Status::Partial => return Ok(None),
            httparse::Status::Complete(n) => {
                let method_end = r.method.map_or(0, str::len);
                let target_end = method_end + 1 + r.path.map_or(0, str::len);
                (n, r.headers.len(), method_end, target_end)
            }
        }
    } else {
        let mut r = httparse::Response::new(&mut headers);
        match r.parse(buf).map_err(bad)? {
            httparse::Status::Partial => return Ok(None),
            httparse::Status::Complete(n) => (n, r.headers.len(), 0, 0),
        }
    };
    let mut body = 0usize;
    for h in &headers[..hs] {
        if h.name.eq_ignore_ascii_case("content-length") {
            body = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad Content-Length"))?;
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "chunked bodies are not forwarded",
            ));
        }
    }
    Ok(Some(Frame {
        len: head + body,
        method_end,
        target_end,
    }))
}
