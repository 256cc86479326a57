//! Listening sockets: one per worker on the same address (`SO_REUSEPORT`), so the kernel
//! spreads connections over the workers' event loops.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Backlog of every listening socket (tokio's default of 128 drops connections under bursts).
const BACKLOG: i32 = 4096;

/// Binds `count` sockets to `addr`; with port 0 the first picks a port and the rest share it.
pub fn bind_reuseport(addr: SocketAddr, count: usize) -> io::Result<Vec<TcpListener>> {
    let mut out = Vec::with_capacity(count.max(1));
    let mut addr = addr;
    for _ in 0..count.max(1) {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_tcp_nodelay(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        socket.listen(BACKLOG)?;
        let listener: TcpListener = socket.into();
        addr = listener.local_addr()?;
        out.push(listener);
    }
    Ok(out)
}

/// Binds one socket (admin, echo, tests).
pub fn bind_one(addr: SocketAddr) -> io::Result<TcpListener> {
    let mut v = bind_reuseport(addr, 1)?;
    v.pop()
        .ok_or_else(|| io::Error::other("no socket was bound"))
}
