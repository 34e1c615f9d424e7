//! One AF_XDP socket bound to one receive queue, with its own UMEM. All
//! frames not held by the application sit in the fill ring.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use netdam_common::split::UMEM_FRAME;

use super::{ring::Ring, umem::Umem, Backing, XskError};

/// The kernel's drop counters of one socket (XDP_STATISTICS).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct XskStats {
    /// Dropped for reasons other than the two below (e.g. a frame larger than a UMEM frame).
    pub rx_dropped: u64,
    /// Dropped because the RX ring was full (the application is behind).
    pub rx_ring_full: u64,
    /// Dropped because the fill ring was empty (the application holds every frame).
    pub rx_fill_ring_empty: u64,
}

impl std::ops::AddAssign for XskStats {
    fn add_assign(&mut self, o: XskStats) {
        self.rx_dropped += o.rx_dropped;
        self.rx_ring_full += o.rx_ring_full;
        self.rx_fill_ring_empty += o.rx_fill_ring_empty;
    }
}

/// Which way a socket carries frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Receives: every frame starts in the fill ring.
    Rx,
    /// Transmits: every frame starts on the free list.
    Tx,
}

pub struct XskSocket {
    // Dropped first: the kernel stops using the rings and UMEM when the socket closes.
    fd: OwnedFd,
    fill: Ring<u64>,
    /// The RX ring (Rx) or the TX ring (Tx).
    ring: Ring<libc::xdp_desc>,
    completion: Ring<u64>,
    umem: Umem,
    queue: u32,
    zero_copy: bool,
    /// Tx: UMEM frames not queued for transmission.
    free: Vec<u64>,
}

fn setsockopt<T>(fd: &OwnedFd, opt: libc::c_int, v: &T, what: &str) -> Result<(), XskError> {
    // SAFETY: `v` is a live value of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(XskError::last(what));
    }
    Ok(())
}

fn getsockopt<T>(fd: &OwnedFd, opt: libc::c_int, what: &str) -> Result<T, XskError> {
    // SAFETY: the kernel structs read here are plain integers: all-zero is valid.
    let mut v: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is a live value of `len` bytes.
    let r = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::SOL_XDP, opt, (&mut v as *mut T).cast(), &mut len) };
    if r != 0 {
        return Err(XskError::last(what));
    }
    Ok(v)
}

fn new_socket() -> Result<OwnedFd, XskError> {
    // SAFETY: plain socket(2).
    let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => XskError::NotPrivileged(e),
            _ => XskError::Unsupported(e),
        });
    }
    // SAFETY: a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Binds `fd` to the queue with `flags`, sharing the UMEM of the socket
/// `shared` when not 0. A socket closed just before on this queue releases
/// it from a kernel work queue: EBUSY for a moment, then free.
fn bind(fd: &OwnedFd, ifindex: u32, queue: u32, flags: u16, shared: u32) -> std::io::Result<()> {
    let sa = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: shared,
    };
    for _ in 0..100 {
        // SAFETY: a sockaddr_xdp of the size given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_xdp).cast(),
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(e);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(std::io::Error::from_raw_os_error(libc::EBUSY))
}

/// A socket that receives into another socket's UMEM on that socket's
/// queue (XDP_SHARED_UMEM): an RX ring of its own, the frames taken from
/// and given back to the owner's fill ring. An XDP program picks which of
/// the queue's sockets a frame goes to.
pub struct SharedRx {
    fd: OwnedFd,
    rx: Ring<libc::xdp_desc>,
}

impl SharedRx {
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Moves up to `max` received descriptors into `out`; their bytes are
    /// the owner's (`XskSocket::frame`), and go back with `give_back`.
    pub(crate) fn take(&mut self, max: u32, out: &mut Vec<libc::xdp_desc>) -> u32 {
        self.rx.consume(max, out)
    }
}

/// The frames of a socket's UMEM, readable from any thread: a frame
/// received (by the socket or one sharing its UMEM) is the receiver's until
/// it goes back through the fill ring.
pub(crate) struct UmemView {
    area: *const u8,
    len: usize,
}

// SAFETY: plain memory; a received frame is read only by the thread that
// took its descriptor, and the kernel does not write it until it is given back.
unsafe impl Send for UmemView {}
unsafe impl Sync for UmemView {}

impl UmemView {
    /// The `len` bytes at UMEM offset `addr` (from an RX descriptor).
    pub(crate) fn bytes(&self, addr: u64, len: u32) -> &[u8] {
        let (a, n) = (addr as usize, len as usize);
        assert!(
            a.checked_add(n).is_some_and(|end| end <= self.len),
            "descriptor outside the UMEM"
        );
        // SAFETY: inside the mapping (asserted), which outlives the view (`umem_view`).
        unsafe { std::slice::from_raw_parts(self.area.add(a), n) }
    }
}

impl XskSocket {
    /// A socket sharing this one's UMEM and queue, with an RX ring of
    /// `entries` (a power of two).
    pub fn bind_shared_rx(&self, ifindex: u32, entries: u32) -> Result<SharedRx, XskError> {
        let fd = new_socket()?;
        setsockopt(&fd, libc::XDP_RX_RING, &entries, "sizing the RX ring")?;
        let off: libc::xdp_mmap_offsets = getsockopt(&fd, libc::XDP_MMAP_OFFSETS, "reading the ring offsets")?;
        let rx = Ring::<libc::xdp_desc>::map(fd.as_fd(), &off.rx, entries, libc::XDP_PGOFF_RX_RING as u64, "RX")?;
        // A socket sharing a UMEM takes no mode flags: it has the owner's.
        bind(
            &fd,
            ifindex,
            self.queue,
            libc::XDP_SHARED_UMEM,
            self.fd.as_raw_fd() as u32,
        )
        .map_err(|source| XskError::Sys {
            what: format!(
                "binding an AF_XDP socket sharing a UMEM to queue {} of interface index {ifindex}",
                self.queue
            ),
            source,
        })?;
        Ok(SharedRx { fd, rx })
    }

    /// A socket on queue `queue` of interface `ifindex` (in the calling
    /// thread's network namespace) with `frames` UMEM frames and rings of
    /// `frames` entries. Zero-copy where the driver has it, copy mode
    /// otherwise (veth); XDP_USE_NEED_WAKEUP either way.
    pub fn bind(ifindex: u32, queue: u32, frames: u32) -> Result<XskSocket, XskError> {
        XskSocket::bind_for(ifindex, queue, frames, Direction::Rx)
    }

    /// `bind`, for `dir`.
    pub fn bind_for(ifindex: u32, queue: u32, frames: u32, dir: Direction) -> Result<XskSocket, XskError> {
        if !(64..=65536).contains(&frames) || !frames.is_power_of_two() {
            return Err(XskError::Frames(frames));
        }
        let fd = new_socket()?;
        let umem = Umem::new(frames)?;
        let reg = libc::xdp_umem_reg {
            addr: umem.addr(),
            len: umem.len() as u64,
            chunk_size: UMEM_FRAME,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(&fd, libc::XDP_UMEM_REG, &reg, "registering the UMEM")?;
        setsockopt(&fd, libc::XDP_UMEM_FILL_RING, &frames, "sizing the fill ring")?;
        setsockopt(
            &fd,
            libc::XDP_UMEM_COMPLETION_RING,
            &frames,
            "sizing the completion ring",
        )?;
        let (opt, name) = match dir {
            Direction::Rx => (libc::XDP_RX_RING, "RX"),
            Direction::Tx => (libc::XDP_TX_RING, "TX"),
        };
        setsockopt(&fd, opt, &frames, &format!("sizing the {name} ring"))?;
        let off: libc::xdp_mmap_offsets = getsockopt(&fd, libc::XDP_MMAP_OFFSETS, "reading the ring offsets")?;
        let mut fill = Ring::<u64>::map(fd.as_fd(), &off.fr, frames, libc::XDP_UMEM_PGOFF_FILL_RING, "fill")?;
        let completion = Ring::<u64>::map(
            fd.as_fd(),
            &off.cr,
            frames,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            "completion",
        )?;
        let (ring_off, pgoff) = match dir {
            Direction::Rx => (&off.rx, libc::XDP_PGOFF_RX_RING as u64),
            Direction::Tx => (&off.tx, libc::XDP_PGOFF_TX_RING as u64),
        };
        let ring = Ring::<libc::xdp_desc>::map(fd.as_fd(), ring_off, frames, pgoff, name)?;
        let all = (0..frames as u64).map(|i| i * UMEM_FRAME as u64);
        let free = match dir {
            Direction::Rx => {
                fill.produce(all);
                Vec::new()
            }
            Direction::Tx => all.collect(),
        };
        let bind = |flags: u16| bind(&fd, ifindex, queue, flags | libc::XDP_USE_NEED_WAKEUP, 0);
        let zero_copy = match bind(libc::XDP_ZEROCOPY) {
            Ok(()) => true,
            Err(zc) => {
                log::debug!("queue {queue}: no zero-copy AF_XDP ({zc}); copy mode");
                bind(libc::XDP_COPY).map_err(|source| XskError::Sys {
                    what: format!("binding an AF_XDP socket to queue {queue} of interface index {ifindex}"),
                    source,
                })?;
                false
            }
        };
        Ok(XskSocket {
            fd,
            fill,
            ring,
            completion,
            umem,
            queue,
            zero_copy,
            free,
        })
    }

    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// A view of the UMEM's frames for threads that do not hold the socket.
    ///
    /// # Safety
    /// The view must be dropped before the socket.
    pub(crate) unsafe fn umem_view(&self) -> UmemView {
        UmemView {
            area: self.umem.area(),
            len: self.umem.len(),
        }
    }

    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    pub fn backing(&self) -> Backing {
        self.umem.backing()
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Moves up to `max` received descriptors into `out`.
    pub(crate) fn take(&mut self, max: u32, out: &mut Vec<libc::xdp_desc>) -> u32 {
        self.ring.consume(max, out)
    }

    /// The bytes of a received descriptor.
    pub(crate) fn frame(&self, d: &libc::xdp_desc) -> &[u8] {
        self.umem.bytes(d.addr, d.len)
    }

    /// Gives the frames of `descs` back to the kernel through the fill ring.
    pub(crate) fn give_back(&mut self, descs: &[libc::xdp_desc]) {
        // In aligned mode a frame's address is its offset rounded down to the frame size.
        let n = self
            .fill
            .produce(descs.iter().map(|d| d.addr & !(UMEM_FRAME as u64 - 1)));
        debug_assert_eq!(n as usize, descs.len(), "the fill ring holds every frame");
        if self.fill.needs_wakeup() {
            // SAFETY: a zero-length non-blocking recvfrom only wakes the kernel's RX path.
            unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
        }
    }

    /// Tx: copies `frame` into a free UMEM frame and queues it on the TX
    /// ring. False when no frame is free (call `kick`, which reclaims).
    pub fn queue_tx(&mut self, frame: &[u8]) -> bool {
        let max = (UMEM_FRAME - netdam_common::split::UMEM_HEADROOM) as usize;
        assert!(
            frame.len() <= max,
            "a {}-byte frame does not fit a UMEM frame",
            frame.len()
        );
        let Some(addr) = self.free.pop() else { return false };
        self.umem.frame_mut(addr)[..frame.len()].copy_from_slice(frame);
        let desc = libc::xdp_desc {
            addr,
            len: frame.len() as u32,
            options: 0,
        };
        if self.ring.produce([desc]) == 1 {
            true
        } else {
            self.free.push(addr);
            false
        }
    }

    /// Tx: makes the kernel send what is queued (in copy mode it sends a
    /// batch of 32 per call, so this calls until the ring is empty or the
    /// device pushes back) and takes finished frames back.
    pub fn kick(&mut self) -> std::io::Result<()> {
        for _ in 0..1024 {
            if self.ring.pending() == 0 {
                break;
            }
            // SAFETY: a zero-length non-blocking sendto only starts transmission.
            let r = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN | libc::EBUSY) => continue,
                    // The device queue is full: what is left goes with the next kick.
                    Some(libc::ENOBUFS) => break,
                    _ => return Err(e),
                }
            }
        }
        let mut done = Vec::new();
        self.completion.consume(u32::MAX, &mut done);
        self.free.extend(done);
        Ok(())
    }

    pub fn stats(&self) -> Result<XskStats, XskError> {
        let s: libc::xdp_statistics = getsockopt(&self.fd, libc::XDP_STATISTICS, "reading the AF_XDP statistics")?;
        Ok(XskStats {
            rx_dropped: s.rx_dropped,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty: s.rx_fill_ring_empty_descs,
        })
    }
}
