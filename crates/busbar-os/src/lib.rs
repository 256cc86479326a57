//! busbar's calls into the operating system that no safe crate offers, each behind a safe
//! function.

// The workspace denies `unsafe_code`. This crate is an audited exception, as busbar-libxml and
// busbar-awslc are: each call is preceded by a `SAFETY:` comment (enforced below).
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// What the kernel's TCP state of a socket says (`TCP_INFO`, Linux).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpState {
    /// Sequence space the peer has acknowledged since the connection opened: the payload
    /// bytes, plus one for the SYN (and one for a FIN). Compare two readings, not a count.
    pub bytes_acked: u64,
    /// The peer closed its side (a FIN was received), or the connection is gone.
    pub peer_closed: bool,
}

/// The TCP state of `socket`, or an error when the socket is not TCP or the kernel does not
/// say (not Linux).
pub fn tcp_state(socket: BorrowedFd<'_>) -> io::Result<TcpState> {
    #[cfg(target_os = "linux")]
    {
        let mut info = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `info`, which has that many; the
        // descriptor is borrowed, so it stays open for the call.
        let r = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                info.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        // `bytes_acked` came with Linux 4.1; an older kernel fills less and says so in `len`.
        let acked_end = std::mem::offset_of!(libc::tcp_info, tcpi_bytes_acked) + 8;
        if (len as usize) < acked_end {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the kernel's TCP_INFO has no bytes_acked",
            ));
        }
        // SAFETY: zeroed first, then filled by the kernel: every field is initialised.
        let info = unsafe { info.assume_init() };
        // 1 is TCP_ESTABLISHED (include/net/tcp_states.h); every later state means a FIN
        // came, or was sent, or the connection is gone.
        Ok(TcpState {
            bytes_acked: info.tcpi_bytes_acked,
            peer_closed: info.tcpi_state != 1,
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = socket.as_raw_fd();
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "TCP_INFO is read on Linux only",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn acknowledged_bytes_and_the_peers_close_are_seen() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (mut server, _) = listener.accept().expect("accept");
        let fresh = tcp_state(client.as_fd()).expect("tcp_info");
        assert!(!fresh.peer_closed);
        // The SYN counts as one: busbar relies on it.
        assert_eq!(fresh.bytes_acked, 1);
        client.write_all(b"hello").expect("write");
        let mut got = [0u8; 5];
        server.read_exact(&mut got).expect("read");
        // The acknowledgement comes back over loopback at once; allow the kernel a moment.
        let mut acked = 0;
        for _ in 0..100 {
            acked = tcp_state(client.as_fd()).expect("tcp_info").bytes_acked - fresh.bytes_acked;
            if acked == 5 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(acked, 5);
        drop(server);
        let mut closed = false;
        for _ in 0..100 {
            closed = tcp_state(client.as_fd()).expect("tcp_info").peer_closed;
            if closed {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(closed, "the peer's close is seen");
    }
}
