//! The systemd notification protocol (`sd_notify`), for a unit of `Type=notify`: `READY=1` once
//! every listener accepts connections, `RELOADING=1` then `READY=1` around a reload, and
//! `STOPPING=1` when a graceful stop begins. Without `NOTIFY_SOCKET` in the environment (not
//! started by systemd) every call does nothing.

use std::os::unix::net::UnixDatagram;

/// Sends `state` (newline-separated `KEY=value` lines) to the service manager, if any.
/// Failures are logged, never fatal: the service manager only loses a status update.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send(&path, state) {
        tracing::warn!(error = %e, socket = ?path, "cannot notify the service manager");
    }
}

fn send(path: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let socket = UnixDatagram::unbound()?;
    let bytes = path.as_bytes();
    // A leading '@' names a socket in the abstract namespace.
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        socket.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        socket.send_to(state.as_bytes(), path)?;
    }
    Ok(())
}
