//! Requests that must each get one OK answer, sent with a bounded window in
//! flight and resent on timeout (every request here is idempotent), over
//! one UDP socket whose address the answers come back to.
//!
//! NOT_READY is not a failure: a member has not raised its generation yet,
//! so the request is resent with a growing pause, for as long as the
//! caller's patience lasts. HELD is not either: the member's node keeps the
//! partial until it contributes, so the request is only resent after a
//! timeout's wait (in case the continuation is lost), not counted as a retry.

use std::{
    cmp::Reverse,
    collections::BinaryHeap,
    io::ErrorKind,
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    time::{Duration, Instant},
};

use netdam_common::{wire::HDR_LEN, NetdamHdr, Status};

/// How requests are paced.
#[derive(Clone, Copy, Debug)]
pub struct Pacing {
    /// Requests in flight at once.
    pub window: usize,
    /// How long to wait for each answer before resending.
    pub timeout: Duration,
    /// Resends after a timeout before giving up.
    pub retries: u32,
    /// How long a request may keep being answered NOT_READY.
    pub patience: Duration,
}

/// What one exchange did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    pub requests: u64,
    /// Resends after a timeout.
    pub resent: u64,
    /// Resends after NOT_READY.
    pub not_ready: u64,
    /// HELD answers: a member's node holds the partial until it contributes.
    pub held: u64,
    /// Chunks sent on again from a member that had finished them (STALE).
    pub repaired: u64,
}

impl std::ops::AddAssign for Sent {
    fn add_assign(&mut self, o: Sent) {
        self.requests += o.requests;
        self.resent += o.resent;
        self.not_ready += o.not_ready;
        self.held += o.held;
        self.repaired += o.repaired;
    }
}

/// Why an exchange stopped short.
#[derive(Debug)]
pub enum Stopped {
    /// Request `index` got no answer after every retry; `unanswered` lists
    /// every request in flight then that had timed out at least once.
    Timeout {
        unanswered: Vec<usize>,
    },
    /// Request `index` was answered with `status`; `sr_idx` is the SR idx of
    /// the answer (the hop that answered) for CHAIN requests.
    Refused {
        index: usize,
        status: Status,
        sr_idx: Option<u8>,
        from: Ipv4Addr,
    },
    /// Request `index` was still NOT_READY when patience ran out.
    NotReady {
        index: usize,
        sr_idx: Option<u8>,
        from: Ipv4Addr,
    },
    Io(std::io::Error),
}

/// Bounds of one wait for an answer: at least the resolution timers need,
/// at most what keeps the loop responsive.
const MIN_WAIT: Duration = Duration::from_micros(10);
const MAX_WAIT: Duration = Duration::from_millis(5);

/// Bytes of the buffer answers are received into: any datagram.
const RECEIVE_BUF_LEN: usize = 65536;

thread_local! {
    /// The thread's answer buffer, kept from one exchange to the next: a
    /// small all-reduce took 2.5% of its CPU zeroing a new one every call.
    static RECEIVE_BUF: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Unsent,
    Waiting,
    Done,
}

struct Slot {
    state: State,
    /// Timeouts so far.
    timeouts: u32,
    /// Sends so far: a queued deadline that names an older send is stale.
    sends: u32,
    /// NOT_READY answers so far, and when the first NOT_READY or HELD came.
    not_ready: u32,
    first_not_ready: Option<Instant>,
}

/// Requests `0..n` of one exchange: request i carries seq `seq_base + i`,
/// and its answer carries tag `tag` and comes from `answerer`.
#[derive(Clone, Copy, Debug)]
pub struct Requests<'a> {
    pub n: usize,
    pub seq_base: u32,
    pub tag: u32,
    pub answerer: Answerer<'a>,
}

/// Who may answer (docs/conformance.md 20): an answer from anyone else is
/// ignored, so that a forged OK cannot mark a chunk done.
#[derive(Clone, Copy, Debug)]
pub enum Answerer<'a> {
    /// Request i goes to node `to[i]` on `port`, which answers it.
    EachTo { to: &'a [Ipv4Addr], port: u16 },
    /// Every request runs the same SR program: OK comes only from its last
    /// hop `last` (SR idx `last_idx`); a failure from any of its `hops` on `port`.
    Program {
        last: SocketAddrV4,
        last_idx: u8,
        hops: &'a [Ipv4Addr],
        port: u16,
    },
}

impl Answerer<'_> {
    /// Whether an answer to request `i` with `status` and SR idx `sr_idx` may come from `from`.
    fn accepts(&self, i: usize, status: Status, sr_idx: Option<u8>, from: SocketAddrV4) -> bool {
        match *self {
            Answerer::EachTo { to, port } => from == SocketAddrV4::new(to[i], port),
            Answerer::Program {
                last,
                last_idx,
                hops,
                port,
            } => match status {
                Status::Ok => from == last && sr_idx == Some(last_idx),
                _ => from.port() == port && hops.contains(from.ip()),
            },
        }
    }
}

/// Where requests leave.
pub trait Transmit {
    /// Sends request `i` (seq `seq`), or queues it for `flush`.
    fn send(&mut self, i: usize, seq: u32) -> std::io::Result<()>;
    /// Sends what `send` queued.
    fn flush(&mut self) -> std::io::Result<()>;
}

/// Requests sent one `send_to` each: request i, as `build(i, seq, buf)`
/// appends its UDP payload, to `dest(i)`.
pub struct SocketTx<'a, D, B> {
    pub sock: &'a UdpSocket,
    pub dest: D,
    pub build: B,
    pub buf: Vec<u8>,
}

impl<D, B> Transmit for SocketTx<'_, D, B>
where
    D: Fn(usize) -> SocketAddrV4,
    B: FnMut(usize, u32, &mut Vec<u8>),
{
    fn send(&mut self, i: usize, seq: u32) -> std::io::Result<()> {
        self.buf.clear();
        (self.build)(i, seq, &mut self.buf);
        match self.sock.send_to(&self.buf, (self.dest)(i)) {
            Ok(_) => Ok(()),
            // A full socket buffer loses the datagram as the network would: the timeout resends it.
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock) || e.raw_os_error() == Some(libc::ENOBUFS) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends `reqs` through `tx` until each has an OK answer (whose payload
/// goes to `answered(i, payload)`), reading answers from `sock`. Answers to
/// anything else, or from another node than `reqs.answerer` allows,
/// arriving on the socket are ignored. With `parked`, a request answered
/// STALE is set aside there (index, SR idx of the answer) instead of
/// stopping the exchange: the collective repairs it (docs/PROTOCOL.md,
/// version 2). `sock` must be non-blocking: the answers are drained until
/// it would block.
pub fn exchange(
    sock: &UdpSocket,
    pacing: &Pacing,
    reqs: Requests,
    tx: &mut impl Transmit,
    mut parked: Option<&mut Vec<(usize, u8)>>,
    mut answered: impl FnMut(usize, &[u8]),
) -> Result<Sent, Stopped> {
    let Requests {
        n,
        seq_base,
        tag,
        answerer,
    } = reqs;
    let mut slots: Vec<Slot> = (0..n)
        .map(|_| Slot {
            state: State::Unsent,
            timeouts: 0,
            sends: 0,
            not_ready: 0,
            first_not_ready: None,
        })
        .collect();
    // (when, index, send number): resend deadlines and the ends of NOT_READY pauses.
    let mut deadlines: BinaryHeap<Reverse<(Instant, usize, u32)>> = BinaryHeap::new();
    let mut pauses: BinaryHeap<Reverse<(Instant, usize, u32)>> = BinaryHeap::new();
    let mut sent = Sent::default();
    let mut next_unsent = 0usize;
    let mut in_flight = 0usize;
    let mut done = 0usize;
    let mut rbuf = RECEIVE_BUF.take();
    rbuf.resize(RECEIVE_BUF_LEN, 0);
    // Sends request i; the number of this send.
    fn send(tx: &mut impl Transmit, seq_base: u32, i: usize, slots: &mut [Slot]) -> Result<u32, Stopped> {
        tx.send(i, seq_base.wrapping_add(i as u32)).map_err(Stopped::Io)?;
        slots[i].sends += 1;
        slots[i].state = State::Waiting;
        Ok(slots[i].sends)
    }
    while done < n {
        while in_flight < pacing.window && next_unsent < n {
            let i = next_unsent;
            next_unsent += 1;
            let s = send(tx, seq_base, i, &mut slots)?;
            sent.requests += 1;
            in_flight += 1;
            deadlines.push(Reverse((Instant::now() + pacing.timeout, i, s)));
        }
        tx.flush().map_err(Stopped::Io)?;
        // Wake for the next resend or the end of a pause, whichever is first.
        let next = [deadlines.peek(), pauses.peek()]
            .into_iter()
            .flatten()
            .map(|Reverse((when, _, _))| *when)
            .min();
        let wait = next.map_or(MAX_WAIT, |w| w.saturating_duration_since(Instant::now()));
        wait_readable(sock, wait.clamp(MIN_WAIT, MAX_WAIT)).map_err(Stopped::Io)?;
        // Every answer already waiting, before the window is refilled: refills
        // then leave in batches (one injector run for many chunks).
        loop {
            match sock.recv_from(&mut rbuf) {
                Ok((len, from)) => {
                    let from = match from {
                        std::net::SocketAddr::V4(a) => a,
                        std::net::SocketAddr::V6(_) => continue,
                    };
                    let Some((i, status, sr_idx, payload)) = answer(&rbuf[..len], seq_base, n, tag) else {
                        continue;
                    };
                    if slots[i].state != State::Waiting || !answerer.accepts(i, status, sr_idx, from) {
                        continue;
                    }
                    let from = *from.ip();
                    match status {
                        Status::Ok => {
                            answered(i, payload);
                            slots[i].state = State::Done;
                            done += 1;
                            in_flight -= 1;
                        }
                        Status::Stale if parked.is_some() && sr_idx.is_some() => {
                            if let (Some(p), Some(idx)) = (parked.as_deref_mut(), sr_idx) {
                                p.push((i, idx));
                            }
                            slots[i].state = State::Done;
                            done += 1;
                            in_flight -= 1;
                        }
                        Status::Held => {
                            let now = Instant::now();
                            let first = *slots[i].first_not_ready.get_or_insert(now);
                            if now - first > pacing.patience {
                                return Err(Stopped::NotReady { index: i, sr_idx, from });
                            }
                            sent.held += 1;
                            slots[i].sends += 1;
                            pauses.push(Reverse((now + pacing.timeout, i, slots[i].sends)));
                        }
                        Status::NotReady => {
                            let now = Instant::now();
                            let first = *slots[i].first_not_ready.get_or_insert(now);
                            if now - first > pacing.patience {
                                return Err(Stopped::NotReady { index: i, sr_idx, from });
                            }
                            // 20 us doubling to 1.28 ms: members in lockstep start within
                            // microseconds of each other; one starting late is not flooded.
                            let pause = Duration::from_micros(20 << slots[i].not_ready.min(6));
                            slots[i].not_ready += 1;
                            // The pending resend deadline of this send is dropped by bumping sends.
                            slots[i].sends += 1;
                            pauses.push(Reverse((now + pause, i, slots[i].sends)));
                        }
                        status => {
                            return Err(Stopped::Refused {
                                index: i,
                                status,
                                sr_idx,
                                from,
                            })
                        }
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                Err(e) => return Err(Stopped::Io(e)),
            }
        }
        let now = Instant::now();
        while let Some(&Reverse((when, i, s))) = pauses.peek() {
            if when > now {
                break;
            }
            pauses.pop();
            if slots[i].state == State::Waiting && slots[i].sends == s {
                let s = send(tx, seq_base, i, &mut slots)?;
                sent.not_ready += 1;
                deadlines.push(Reverse((Instant::now() + pacing.timeout, i, s)));
            }
        }
        while let Some(&Reverse((when, i, s))) = deadlines.peek() {
            if when > now {
                break;
            }
            deadlines.pop();
            if slots[i].state != State::Waiting || slots[i].sends != s {
                continue;
            }
            slots[i].timeouts += 1;
            if slots[i].timeouts > pacing.retries {
                let unanswered = (0..n)
                    .filter(|&j| slots[j].state == State::Waiting && slots[j].timeouts > 0)
                    .collect();
                return Err(Stopped::Timeout { unanswered });
            }
            let s = send(tx, seq_base, i, &mut slots)?;
            sent.resent += 1;
            deadlines.push(Reverse((Instant::now() + pacing.timeout, i, s)));
        }
    }
    RECEIVE_BUF.set(rbuf);
    Ok(sent)
}

/// Waits until `sock` has a datagram or `timeout` passes. ppoll, not
/// SO_RCVTIMEO: socket timeouts are rounded up to whole jiffies (4 ms at
/// HZ=250), which alone would set the latency of a small all-reduce.
fn wait_readable(sock: &UdpSocket, timeout: Duration) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut fd = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd, a valid timespec, no signal mask.
    let r = unsafe { libc::ppoll(&mut fd, 1, &ts, std::ptr::null()) };
    match r {
        -1 if std::io::Error::last_os_error().kind() == ErrorKind::Interrupted => Ok(()),
        -1 => Err(std::io::Error::last_os_error()),
        _ => Ok(()),
    }
}

/// The request index, status, SR idx and payload of a NetDAM response to
/// one of requests `0..n`, if `b` is one.
fn answer(b: &[u8], seq_base: u32, n: usize, tag: u32) -> Option<(usize, Status, Option<u8>, &[u8])> {
    let h = NetdamHdr::from_bytes(b)?;
    if !h.is_response() || h.tag() != tag {
        return None;
    }
    let i = h.seq().wrapping_sub(seq_base) as usize;
    if i >= n {
        return None;
    }
    let sr_idx = (h.sr_len > 0).then(|| b.get(HDR_LEN + 1).copied()).flatten();
    let start = HDR_LEN + h.sr_len as usize;
    let payload = b.get(start..start + h.len() as usize)?;
    Some((i, Status::from_u8(h.status)?, sr_idx, payload))
}
