//! Listening sockets: one per worker on the same address (`SO_REUSEPORT`), so the kernel
//! spreads connections over the workers' event loops.
//!
//! `SO_REUSEPORT` would also let a second process bind the same address and take part of the
//! traffic without a word; [`bind_group`] refuses an address another socket listens on unless
//! the port is shared on purpose.

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

/// Fails with [`io::ErrorKind::AddrInUse`] when a socket (of this process or another) already
/// listens on `addr`: a socket without `SO_REUSEPORT` cannot bind there then.
pub fn check_free(addr: SocketAddr) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // Connections of an earlier process in TIME_WAIT do not count.
    probe.set_reuse_address(true)?;
    probe.bind(&addr.into()).map_err(|e| {
        if e.kind() == io::ErrorKind::AddrInUse {
            io::Error::new(io::ErrorKind::AddrInUse, "address already in use")
        } else {
            e
        }
    })
}

/// Binds `count` sockets to `addr` like [`bind_reuseport`], first refusing an address already
/// listened on unless `shared` (the port is shared with another process on purpose).
pub fn bind_group(addr: SocketAddr, count: usize, shared: bool) -> io::Result<Vec<TcpListener>> {
    if !shared {
        check_free(addr)?;
    }
    bind_reuseport(addr, count)
}

/// Binds one socket (admin, echo, tests), refusing an address already listened on.
pub fn bind_one(addr: SocketAddr) -> io::Result<TcpListener> {
    let mut v = bind_group(addr, 1, false)?;
    v.pop()
        .ok_or_else(|| io::Error::other("no socket was bound"))
}
