//! Batched datagram I/O of a bulk transfer: many requests per sendmmsg (and,
//! where the kernel has UDP GSO, many requests per message, cut into
//! datagrams once below the socket layer), many answers per recvmmsg.

use std::{
    io,
    net::{Ipv4Addr, SocketAddr},
    os::fd::AsRawFd,
    sync::atomic::{AtomicBool, Ordering},
};

use netdam_common::wire::HDR_LEN;
use tokio::io::Interest;

/// Datagrams per UDP GSO message (the kernel's UDP_MAX_SEGMENTS is 64 or more).
const GSO_SEGMENTS: usize = 64;
/// Bytes per UDP GSO message: below the 65,507 a UDP datagram can carry.
const GSO_BYTES: usize = 65_000;
/// Messages per sendmmsg.
const SEND_MESSAGES: usize = 64;
/// Answers per recvmmsg.
pub(super) const RECV_BATCH: usize = 128;
/// Socket buffers: a window of answers through veth's XDP path costs about a
/// page each (the default 208 KiB holds some 50); raised past rmem_max and
/// wmem_max when privileged (SO_*BUFFORCE), else as far as they allow.
const SOCKET_BUFFER: libc::c_int = 16 << 20;

/// One request: its NetDAM header and its payload.
pub(super) struct Packet<'a> {
    pub hdr: [u8; HDR_LEN],
    pub payload: &'a [u8],
}

impl Packet<'_> {
    fn len(&self) -> usize {
        HDR_LEN + self.payload.len()
    }
}

/// A UDP socket of one transfer, connected to the node.
pub(super) struct BatchSocket {
    sock: tokio::net::UdpSocket,
    /// Whether UDP GSO works here; turned off at its first refusal.
    gso: AtomicBool,
}

impl BatchSocket {
    pub async fn connect(node: Ipv4Addr, port: u16) -> io::Result<BatchSocket> {
        let sock = std::net::UdpSocket::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)))?;
        sock.connect(SocketAddr::from((node, port)))?;
        BatchSocket::from_std(sock)
    }

    /// A socket already connected to the node.
    pub fn from_std(sock: std::net::UdpSocket) -> io::Result<BatchSocket> {
        sock.set_nonblocking(true)?;
        grow_buffers(&sock);
        Ok(BatchSocket {
            sock: tokio::net::UdpSocket::from_std(sock)?,
            gso: AtomicBool::new(true),
        })
    }

    /// Sends every packet, waiting while the socket's buffer is full. An
    /// ICMP error the kernel reports on the way (the node's port is closed)
    /// drops the rest of the batch: the caller's timeouts resend it.
    pub async fn send_all(&self, packets: &[Packet<'_>]) -> io::Result<()> {
        let mut done = 0;
        while done < packets.len() {
            let rest = &packets[done..];
            match self.sock.async_io(Interest::WRITABLE, || self.send(rest)).await {
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One sendmmsg of the first packets of `packets`; how many went.
    fn send(&self, packets: &[Packet<'_>]) -> io::Result<usize> {
        let gso = self.gso.load(Ordering::Relaxed);
        let groups = if gso {
            gso_groups(packets)
        } else {
            vec![1; packets.len()]
        };
        let groups = &groups[..groups.len().min(SEND_MESSAGES)];
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(2 * groups.iter().sum::<usize>());
        for p in &packets[..groups.iter().sum()] {
            iov.push(libc::iovec {
                iov_base: p.hdr.as_ptr() as *mut libc::c_void,
                iov_len: HDR_LEN,
            });
            iov.push(libc::iovec {
                iov_base: p.payload.as_ptr() as *mut libc::c_void,
                iov_len: p.payload.len(),
            });
        }
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;
        let mut control = vec![0u8; space * groups.len()];
        let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(groups.len());
        let (mut first, mut at) = (0, 0);
        for (g, &n) in groups.iter().enumerate() {
            // SAFETY: a zeroed mmsghdr is valid; the pointers set below stay
            // valid (iov and control do not move) until sendmmsg returns.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = iov[2 * first..].as_mut_ptr();
            m.msg_hdr.msg_iovlen = 2 * n;
            if n > 1 {
                let cbuf = &mut control[g * space..(g + 1) * space];
                m.msg_hdr.msg_control = cbuf.as_mut_ptr().cast();
                m.msg_hdr.msg_controllen = space;
                // SAFETY: the control buffer holds one cmsg with a u16.
                unsafe {
                    let c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = libc::UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), packets[first].len() as u16);
                }
            }
            msgs.push(m);
            first += n;
            at += 1;
        }
        // SAFETY: `at` message headers over live iovecs and control buffers.
        let sent = unsafe { libc::sendmmsg(self.sock.as_raw_fd(), msgs.as_mut_ptr(), at as u32, 0) };
        if sent < 0 {
            let e = io::Error::last_os_error();
            // No GSO on this path (EIO: no checksum offload; EINVAL: an old kernel).
            if gso && matches!(e.raw_os_error(), Some(libc::EIO) | Some(libc::EINVAL)) {
                log::debug!("UDP GSO refused ({e}): one datagram per message from now on");
                self.gso.store(false, Ordering::Relaxed);
                return Ok(0);
            }
            return Err(e);
        }
        Ok(groups[..sent as usize].iter().sum())
    }

    /// The answers waiting in the socket, up to `RECV_BATCH`, into `bufs`
    /// (`RecvBufs::get`); returns how many. With `wait`, waits for at least
    /// one; without, returns 0 when there is none.
    pub async fn recv(&self, bufs: &mut RecvBufs, wait: bool) -> io::Result<usize> {
        loop {
            let r = if wait {
                self.sock
                    .async_io(Interest::READABLE, || bufs.recvmmsg(&self.sock))
                    .await
            } else {
                bufs.recvmmsg(&self.sock)
            };
            match r {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && !wait => return Ok(0),
                // A pending ICMP error (the node's port closed): the timeouts report it.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                r => return r,
            }
        }
    }
}

/// Buffers for a batch of answers.
pub(super) struct RecvBufs {
    slot: usize,
    data: Vec<u8>,
    lens: [usize; RECV_BATCH],
}

impl RecvBufs {
    /// Room for `RECV_BATCH` datagrams of up to `max` bytes.
    pub fn new(max: usize) -> RecvBufs {
        RecvBufs {
            slot: max,
            data: vec![0; max * RECV_BATCH],
            lens: [0; RECV_BATCH],
        }
    }

    /// Datagram `k` of the last batch (truncated ones are cut at the slot).
    pub fn get(&self, k: usize) -> &[u8] {
        &self.data[k * self.slot..k * self.slot + self.lens[k].min(self.slot)]
    }

    fn recvmmsg(&mut self, sock: &tokio::net::UdpSocket) -> io::Result<usize> {
        let slot = self.slot;
        let mut iov: Vec<libc::iovec> = self
            .data
            .chunks_mut(slot)
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: slot,
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .map(|v| {
                // SAFETY: a zeroed mmsghdr is valid; it points at its own iovec.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        // SAFETY: RECV_BATCH headers over live slots of `data`.
        let got = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                msgs.len() as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        for (len, m) in self.lens.iter_mut().zip(&msgs[..got as usize]) {
            *len = m.msg_len as usize;
        }
        Ok(got as usize)
    }
}

/// How many packets each GSO message of `packets` carries: runs of equal
/// length (the last of a run may be shorter, as GSO allows), at most
/// GSO_SEGMENTS and GSO_BYTES each.
fn gso_groups(packets: &[Packet<'_>]) -> Vec<usize> {
    let lens: Vec<usize> = packets.iter().map(Packet::len).collect();
    group_lengths(&lens)
}

fn group_lengths(lens: &[usize]) -> Vec<usize> {
    let mut groups = Vec::new();
    let mut i = 0;
    while i < lens.len() {
        let size = lens[i];
        let (mut n, mut bytes) = (1, size);
        while i + n < lens.len() && n < GSO_SEGMENTS && bytes + lens[i + n] <= GSO_BYTES && lens[i + n] <= size {
            bytes += lens[i + n];
            n += 1;
            if lens[i + n - 1] < size {
                break;
            }
        }
        groups.push(n);
        i += n;
    }
    groups
}

/// Raises the socket's buffers to SOCKET_BUFFER, as far as allowed.
pub(super) fn grow_buffers(sock: &std::net::UdpSocket) {
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        if setsockopt(sock, libc::SOL_SOCKET, force, SOCKET_BUFFER).is_err() {
            let _ = setsockopt(sock, libc::SOL_SOCKET, plain, SOCKET_BUFFER);
        }
    }
}

fn setsockopt(sock: &std::net::UdpSocket, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: an int option value of the right size on our own socket.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gso_groups_are_runs_of_one_size_ending_at_a_shorter_packet() {
        assert_eq!(group_lengths(&[]), Vec::<usize>::new());
        assert_eq!(group_lengths(&[1472; 3]), [3]);
        assert_eq!(group_lengths(&[1472, 1472, 100]), [3], "a shorter last segment");
        assert_eq!(group_lengths(&[1472, 100, 1472]), [2, 1], "nothing after a shorter one");
        assert_eq!(group_lengths(&[100, 1472]), [1, 1], "no longer segment");
    }

    #[test]
    fn gso_groups_respect_the_segment_and_byte_limits() {
        // 44 of 1472 bytes fit 65,000; 64 of 100 bytes is the segment limit.
        assert_eq!(group_lengths(&[1472; 100]), [44, 44, 12]);
        assert_eq!(group_lengths(&[100; 130]), [64, 64, 2]);
    }
}
