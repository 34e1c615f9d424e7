//! The benchmarks' frame generator: one whole frame sent over and over out
//! of an interface through an AF_PACKET socket that bypasses the qdisc, 64
//! frames per sendmmsg.
//!
//! It replaces BPF_PROG_TEST_RUN with live frames (one system call per
//! 65,536 frames), which the kernel of this project's VM refuses with EPERM
//! whatever the flags, context or program: a hardening check that mainline
//! Linux does not have (BENCHMARKS.md, "64 MiB WRITE/READ through the client:
//! stripes and the AF_XDP path").

use std::{io, os::fd::AsRawFd, os::fd::FromRawFd, os::fd::OwnedFd};

/// Frames per sendmmsg.
const BATCH: usize = 64;

/// Sends `frame` (Ethernet header included) out of `iface`, in the calling
/// thread's network namespace, while `go()` says so; returns the frames sent.
pub fn blast(iface: &str, frame: &[u8], mut go: impl FnMut() -> bool) -> io::Result<u64> {
    let ifindex = nix::net::if_::if_nametoindex(iface).map_err(|e| io::Error::other(format!("{iface}: {e}")))?;
    // SAFETY: plain socket(2); protocol 0: the socket only sends.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor that nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    let one: libc::c_int = 1;
    // SAFETY: an int option of the right size on our own socket.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a zeroed sockaddr_ll is valid; the fields set below name the interface.
    let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    to.sll_family = libc::AF_PACKET as u16;
    to.sll_ifindex = ifindex as i32;
    to.sll_halen = 6;
    to.sll_addr[..6].copy_from_slice(&frame[..6]);
    let mut iov = libc::iovec {
        iov_base: frame.as_ptr() as *mut libc::c_void,
        iov_len: frame.len(),
    };
    let mut msgs: Vec<libc::mmsghdr> = (0..BATCH)
        .map(|_| {
            // SAFETY: a zeroed mmsghdr is valid; it points at the live iovec and address.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = &mut iov;
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_name = (&mut to as *mut libc::sockaddr_ll).cast();
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            m
        })
        .collect();
    let mut sent = 0u64;
    while go() {
        // SAFETY: BATCH headers over the live frame and address.
        let r = unsafe { libc::sendmmsg(sock.as_raw_fd(), msgs.as_mut_ptr(), BATCH as u32, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            // The device's queue is full: the frames did not go; try again.
            if e.raw_os_error() == Some(libc::ENOBUFS) {
                continue;
            }
            return Err(e);
        }
        sent += r as u64;
    }
    Ok(sent)
}
