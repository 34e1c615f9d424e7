//! The systemd readiness protocol (sd_notify(3)) without libsystemd: a
//! datagram of `KEY=VALUE` lines to the socket in $NOTIFY_SOCKET, which
//! systemd sets for a `Type=notify` unit. Without it (not under systemd)
//! nothing is sent.

use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (e.g. "READY=1\nSTATUS=serving eth0") to systemd, if it
/// listens; returns whether it was sent. A failure is logged, never fatal:
/// the node serves either way.
pub fn notify(state: &str) -> bool {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return false;
    };
    match send(&path, state) {
        Ok(()) => true,
        Err(e) => {
            log::warn!(
                "telling systemd {state:?} through NOTIFY_SOCKET={}: {e}",
                path.to_string_lossy()
            );
            false
        }
    }
}

fn send(path: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::{linux::net::SocketAddrExt as _, unix::ffi::OsStrExt as _};
    let bytes = path.as_bytes();
    // A leading '@' names an abstract socket.
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(std::path::Path::new(path))?,
    };
    let socket = UnixDatagram::unbound()?;
    socket.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_reaches_the_socket_path_and_abstract_names() {
        let dir = std::env::temp_dir().join(format!("netdam-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        send(path.as_os_str(), "READY=1\nSTATUS=serving").unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=serving");
        let name = format!("netdam-notify-{}", std::process::id());
        use std::os::linux::net::SocketAddrExt as _;
        let abstract_listener =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        send(std::ffi::OsStr::new(&format!("@{name}")), "RELOADING=1").unwrap();
        let n = abstract_listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"RELOADING=1");
        // Nobody listening is an error for `send` (and a logged warning for `notify`).
        assert!(send(dir.join("absent").as_os_str(), "READY=1").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
