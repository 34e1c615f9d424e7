//! The receiving application of each delivery mode, on the node's host. It
//! holds each message for the configured time, then reads all of its
//! payload from wherever the mode left it (its own buffer, UMEM, NetDAM
//! memory), and counts what its receive path handed it.

use std::{
    collections::VecDeque,
    os::fd::AsRawFd,
    path::Path,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use super::{MemwallError, Mode, SOCKET_PORT};
use netdam_user::{
    afxdp::{Delivery, Endpoint, EndpointConfig, HeldFrame},
    controller::NetdamMemory,
};

use crate::testbed::host_ip;

/// What one receiver did during a measurement.
#[derive(Clone, Copy, Debug, Default)]
pub struct Consumed {
    /// Messages read after their hold time.
    pub messages: u64,
    /// Bytes the receive path handed the host (datagrams copied out of the
    /// socket, frames placed in UMEM).
    pub delivered_bytes: u64,
    /// Payload bytes read after the hold, and the nanoseconds those reads took.
    pub read_bytes: u64,
    pub read_ns: u64,
    /// CPU time of the receiving thread (user and system), ns.
    pub cpu_ns: u64,
}

/// CPU time of the calling thread so far, ns.
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Reads `n` bytes at `p` as the application would, in 8-byte words where
/// aligned; volatile, because the data path may write NetDAM memory meanwhile.
fn touch(p: *const u8, n: usize) -> u64 {
    let mut sum = 0u64;
    let mut i = 0;
    // SAFETY (all reads): the caller's range of n readable bytes.
    while i < n && !(p as usize + i).is_multiple_of(8) {
        sum = sum.wrapping_add(unsafe { p.add(i).read_volatile() } as u64);
        i += 1;
    }
    while i + 8 <= n {
        sum = sum.wrapping_add(unsafe { p.add(i).cast::<u64>().read_volatile() });
        i += 8;
    }
    while i < n {
        sum = sum.wrapping_add(unsafe { p.add(i).read_volatile() } as u64);
        i += 1;
    }
    sum
}

/// One message waiting out its hold time.
struct Waiting<T> {
    since: Instant,
    what: T,
}

struct Reader {
    c: Consumed,
    sink: u64,
}

impl Reader {
    fn read(&mut self, parts: &[(*const u8, usize)]) {
        let t = Instant::now();
        for (p, n) in parts {
            self.sink = self.sink.wrapping_add(touch(*p, *n));
            self.c.read_bytes += *n as u64;
        }
        self.c.read_ns += t.elapsed().as_nanos() as u64;
        self.c.messages += 1;
    }
}

/// Runs the receiver of `mode` in the calling thread's namespace until
/// `stop`; calls `ready` once it can receive.
pub fn receive(
    mode: Mode,
    pin_dir: &Path,
    hold: Duration,
    stop: &AtomicBool,
    ready: impl FnOnce(),
) -> Result<Consumed, MemwallError> {
    let mut r = Reader {
        c: Consumed::default(),
        sink: 0,
    };
    let cpu = thread_cpu_ns();
    match mode {
        Mode::Write => {
            // The host is not told of WRITEs: nothing to receive.
            ready();
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Mode::Socket => socket(hold, stop, ready, &mut r)?,
        Mode::AfXdp | Mode::WriteNotify | Mode::Split => afxdp(mode, pin_dir, hold, stop, ready, &mut r)?,
    }
    std::hint::black_box(r.sink);
    r.c.cpu_ns = thread_cpu_ns() - cpu;
    Ok(r.c)
}

/// Slots of the socket receiver's application buffer pool.
const POOL: usize = 4096;
const SLOT: usize = 2048;

fn socket(hold: Duration, stop: &AtomicBool, ready: impl FnOnce(), r: &mut Reader) -> Result<(), MemwallError> {
    let sock = std::net::UdpSocket::bind((host_ip(1), SOCKET_PORT))
        .map_err(|e| MemwallError::Receiver(format!("binding UDP port {SOCKET_PORT}: {e}")))?;
    netdam_user::collective::grow_receive_buffer(&sock, 16 << 20);
    sock.set_read_timeout(Some(Duration::from_millis(5)))
        .map_err(|e| MemwallError::Receiver(e.to_string()))?;
    let mut pool = vec![0u8; POOL * SLOT];
    let mut free: Vec<usize> = (0..POOL).collect();
    let mut waiting: VecDeque<Waiting<(usize, usize)>> = VecDeque::new();
    ready();
    const BATCH: usize = 64;
    // The recvmmsg headers, made once: each batch points them at free slots.
    let mut slots = [0usize; BATCH];
    let mut iov: Vec<libc::iovec> = (0..BATCH)
        .map(|_| libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: SLOT,
        })
        .collect();
    // SAFETY: zeroed mmsghdr are valid; each points at its own iovec, which
    // `iov` keeps in place (it never grows).
    let mut msgs: Vec<libc::mmsghdr> = iov
        .iter_mut()
        .map(|v| {
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();
    while !stop.load(Ordering::Relaxed) {
        let n = free.len().min(BATCH);
        if n > 0 {
            for (k, slot) in free.drain(free.len() - n..).enumerate() {
                slots[k] = slot;
                iov[k].iov_base = pool[slot * SLOT..].as_mut_ptr().cast();
            }
            // SAFETY: n message headers over live pool slots.
            let got = unsafe {
                libc::recvmmsg(
                    sock.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    n as u32,
                    libc::MSG_WAITFORONE,
                    std::ptr::null_mut(),
                )
            };
            let got = got.max(0) as usize;
            let now = Instant::now();
            for k in 0..n {
                if k < got {
                    let len = msgs[k].msg_len as usize;
                    r.c.delivered_bytes += len as u64;
                    waiting.push_back(Waiting {
                        since: now,
                        what: (slots[k], len),
                    });
                } else {
                    free.push(slots[k]);
                }
            }
        } else {
            std::thread::sleep(Duration::from_micros(10));
        }
        while waiting.front().is_some_and(|w| w.since.elapsed() >= hold) {
            let w = waiting.pop_front().expect("front");
            let (slot, len) = w.what;
            r.read(&[(pool[slot * SLOT..].as_ptr(), len)]);
            free.push(slot);
        }
    }
    Ok(())
}

/// What an AF_XDP mode keeps until the hold is over.
enum Kept {
    /// A frame in UMEM (MSG: the message; split: the kept bytes) and, for
    /// split, the rest in NetDAM memory.
    Frame {
        frame: HeldFrame,
        payload_off: usize,
        rest: (u64, usize),
    },
    /// WRITE_NOTIFY: where the payload went (the header frame is released at once).
    Memory { addr: u64, len: usize },
}

fn afxdp(
    mode: Mode,
    pin_dir: &Path,
    hold: Duration,
    stop: &AtomicBool,
    ready: impl FnOnce(),
    r: &mut Reader,
) -> Result<(), MemwallError> {
    let mut ep = Endpoint::open(pin_dir, EndpointConfig::default())?;
    ready();
    let mut waiting: VecDeque<Waiting<Kept>> = VecDeque::new();
    let mut held = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let wait = if waiting.is_empty() {
            Duration::from_millis(5)
        } else {
            Duration::ZERO
        };
        held.clear();
        ep.recv_held(wait, &mut held)?;
        let now = Instant::now();
        let mut release = Vec::new();
        for f in held.drain(..) {
            r.c.delivered_bytes += f.len() as u64;
            let kept = match ep.delivery(&f) {
                Delivery::Message { ipv4, body, .. } => Some((body.as_ptr() as usize - ipv4.as_ptr() as usize, (0, 0))),
                Delivery::Split {
                    kept,
                    descriptor,
                    frame,
                    ..
                } => {
                    let rest = descriptor.original_len as usize - kept.len();
                    Some((
                        kept.as_ptr() as usize - frame.as_ptr() as usize,
                        (descriptor.rest_addr(), rest),
                    ))
                }
                Delivery::Notify { hdr, .. } => {
                    waiting.push_back(Waiting {
                        since: now,
                        what: Kept::Memory {
                            addr: hdr.addr(),
                            len: hdr.len() as usize,
                        },
                    });
                    None
                }
                Delivery::Other(_) => None,
            };
            match kept {
                Some((payload_off, rest)) if mode != Mode::WriteNotify => waiting.push_back(Waiting {
                    since: now,
                    what: Kept::Frame {
                        frame: f,
                        payload_off,
                        rest,
                    },
                }),
                _ => release.push(f),
            }
        }
        while waiting.front().is_some_and(|w| w.since.elapsed() >= hold) {
            let w = waiting.pop_front().expect("front");
            match w.what {
                Kept::Frame {
                    frame,
                    payload_off,
                    rest,
                } => {
                    let bytes = ep.frame(&frame);
                    let mut parts = vec![(bytes[payload_off..].as_ptr(), bytes.len() - payload_off)];
                    if rest.1 > 0 {
                        parts.push((memory_ptr(ep.memory(), rest.0, rest.1)?, rest.1));
                    }
                    r.read(&parts);
                    release.push(frame);
                }
                Kept::Memory { addr, len } => r.read(&[(memory_ptr(ep.memory(), addr, len)?, len)]),
            }
        }
        ep.release(release);
    }
    let rest: Vec<HeldFrame> = waiting
        .into_iter()
        .filter_map(|w| match w.what {
            Kept::Frame { frame, .. } => Some(frame),
            Kept::Memory { .. } => None,
        })
        .collect();
    ep.release(rest);
    Ok(())
}

fn memory_ptr(m: &NetdamMemory, addr: u64, len: usize) -> Result<*const u8, MemwallError> {
    Ok(m.range_ptr(addr, len)?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn touch_reads_every_byte_of_the_range_and_none_outside() {
        for start in 0..9 {
            for n in [0, 1, 7, 8, 9, 50] {
                for k in 0..64 {
                    let mut v = [0u8; 80];
                    v[start + k] = 1;
                    let got = super::touch(v[start..].as_ptr(), n);
                    assert_eq!(got != 0, k < n, "start {start}, {n} bytes, the 1 at {k}");
                }
            }
        }
    }
}
