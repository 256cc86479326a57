//! A bare HTTP/1.1 forwarder: one thread, one task per client connection, each with its own
//! back-end connection, messages framed by `Content-Length` and passed on byte for byte. No
//! header map, no pool, no hand-off between tasks, no limits, no timeouts: what is left is the
//! least a tokio-based proxy pays per exchange, to tell how far a leaner HTTP path could go.
//!
//! Usage: busbar-ceiling LISTEN UPSTREAM PATH [splice|splice-answers], e.g.
//! `busbar-ceiling 127.0.0.1:8480 127.0.0.1:9000 /service/EchoService`; every request's target
//! is replaced by PATH. Not a proxy to deploy: it refuses chunked bodies and trusts its peers.
//!
//! With `splice`, the part of a body that did not come with its head goes from one socket to
//! the other through a pipe (splice(2)) and never enters the process: what a pass-through that
//! leaves the body to the kernel could save. With `splice-answers`, only the answers' bodies are
//! spliced; each request is read whole and written on, as without `splice`.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};

use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::{TcpListener, TcpStream};

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (listen, upstream, path, splice) = match args.as_slice() {
        [_, l, u, p] => (l, u, p, None),
        [_, l, u, p, s] if s == "splice" => (l, u, p, Some(true)),
        [_, l, u, p, s] if s == "splice-answers" => (l, u, p, Some(false)),
        _ => {
            eprintln!("usage: busbar-ceiling LISTEN UPSTREAM PATH [splice|splice-answers]");
            std::process::exit(2);
        }
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
                let served = match splice {
                    Some(requests) => serve_spliced(client, upstream, path, requests).await,
                    None => serve(client, upstream, path).await,
                };
                if let Err(e) = served {
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
    let mut line = Vec::with_capacity(256);
    loop {
        let Some(frame) = read_message(&mut client, &mut req, true).await? else {
            return Ok(());
        };
        let b = match back.as_mut() {
            Some(b) => b,
            None => {
                let s = TcpStream::connect(upstream).await?;
                s.set_nodelay(true)?;
                back.insert(s)
            }
        };
        // The request line with its target replaced, then the rest as it came.
        new_target(&mut line, &req[..frame.method_end], path);
        write_two(b, &line, &req[frame.target_end..frame.len]).await?;
        req.drain(..frame.len);
        let Some(answer) = read_message(b, &mut resp, false).await? else {
            return Err(io::ErrorKind::UnexpectedEof.into());
        };
        client.write_all(&resp[..answer.len]).await?;
        resp.drain(..answer.len);
    }
}

/// The start of a request line with `path` as its target: method, space, path.
fn new_target(line: &mut Vec<u8>, method: &[u8], path: &[u8]) {
    line.clear();
    line.extend_from_slice(method);
    line.push(b' ');
    line.extend_from_slice(path);
}

/// Writes `a` then `b` with as few system calls as the socket allows, copying neither.
async fn write_two(s: &mut TcpStream, mut a: &[u8], mut b: &[u8]) -> io::Result<()> {
    while !a.is_empty() || !b.is_empty() {
        let n = s
            .write_vectored(&[IoSlice::new(a), IoSlice::new(b)])
            .await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let from_a = n.min(a.len());
        a = &a[from_a..];
        b = &b[n - from_a..];
    }
    Ok(())
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
    let Some(frame) = read_head(s, buf, request).await? else {
        return Ok(None);
    };
    while buf.len() < frame.len {
        if fill(s, buf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(Some(frame))
}

/// Reads what `s` has into `buf`, with at least 4 KB of room.
async fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<usize> {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(16 * 1024);
    }
    s.read_buf(buf).await
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

/// A pipe for splice(2), closed on drop.
struct Pipe {
    read: RawFd,
    write: RawFd,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // A larger pipe moves a 100 KB body in one call each way; the default is 64 KB.
        // SAFETY: a plain fcntl on a descriptor this function owns.
        unsafe { libc::fcntl(fds[1], libc::F_SETPIPE_SZ, 256 * 1024) };
        Ok(Pipe {
            read: fds[0],
            write: fds[1],
        })
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        // SAFETY: both descriptors are owned by this pipe and closed once.
        unsafe {
            libc::close(self.read);
            libc::close(self.write);
        }
    }
}

fn splice(from: RawFd, to: RawFd, n: usize) -> io::Result<usize> {
    let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
    // SAFETY: splice between two descriptors this process holds, with no offsets.
    let r = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            n,
            flags,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Moves `left` bytes from `from` to `to` through `pipe`, which is empty before and after. The
/// socket is read only while the pipe holds nothing, so a would-block there is the socket's.
async fn splice_body(
    from: &TcpStream,
    to: &TcpStream,
    pipe: &Pipe,
    mut left: usize,
) -> io::Result<()> {
    let mut held = 0usize;
    while left > 0 || held > 0 {
        if held == 0 {
            match from.try_io(Interest::READABLE, || {
                splice(from.as_raw_fd(), pipe.write, left)
            }) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    left -= n;
                    held += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    from.readable().await?;
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        match to.try_io(Interest::WRITABLE, || {
            splice(pipe.read, to.as_raw_fd(), held)
        }) {
            Ok(n) => held -= n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => to.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads until `buf` holds a whole head; the frame, or `None` at a clean end.
async fn read_head(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    request: bool,
) -> io::Result<Option<Frame>> {
    loop {
        if let Some(frame) = frame(buf, request)? {
            return Ok(Some(frame));
        }
        if fill(s, buf).await? == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
    }
}

/// Serves `client` with answers' bodies spliced, and requests' bodies too when `requests`;
/// otherwise each request is read whole into memory and written on.
async fn serve_spliced(
    mut client: TcpStream,
    upstream: &str,
    path: &[u8],
    requests: bool,
) -> io::Result<()> {
    let pipe = Pipe::new()?;
    let mut back = TcpStream::connect(upstream).await?;
    back.set_nodelay(true)?;
    let mut req = Vec::with_capacity(16 * 1024);
    let mut resp = Vec::with_capacity(16 * 1024);
    let mut line = Vec::with_capacity(256);
    loop {
        let head = if requests {
            read_head(&mut client, &mut req, true).await?
        } else {
            read_message(&mut client, &mut req, true).await?
        };
        let Some(frame) = head else {
            return Ok(());
        };
        let have = req.len().min(frame.len);
        new_target(&mut line, &req[..frame.method_end], path);
        write_two(&mut back, &line, &req[frame.target_end..have]).await?;
        req.drain(..have);
        splice_body(&client, &back, &pipe, frame.len - have).await?;
        let Some(answer) = read_head(&mut back, &mut resp, false).await? else {
            return Err(io::ErrorKind::UnexpectedEof.into());
        };
        let have = resp.len().min(answer.len);
        client.write_all(&resp[..have]).await?;
        resp.drain(..have);
        splice_body(&back, &client, &pipe, answer.len - have).await?;
    }
}
