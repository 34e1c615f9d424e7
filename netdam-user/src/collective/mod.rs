//! The collective engine: a ring all-reduce that the network does
//! (PROTOCOL.md section 6, as version-2 CHAINs: docs/PROTOCOL.md, version 2).
//! Each member places its input in its own NetDAM memory through the mmap,
//! raises its generation, continues the partials its node held for it while
//! it was not ready, and starts the chunks it originates; the nodes' data
//! paths reduce and write every chunk hop by hop, and no host CPU touches an
//! intermediate hop unless it arrived before its member had contributed.
//!
//! Completion is read from memory: every WRITE and REDUCE_WRITE hop stamps
//! the chunk's cell in the member's node with the generation, so a member
//! knows its output is complete when every cell says so. It returns when
//! that holds and its own chunks are answered (the answer follows a chunk's
//! last WRITE, so then no member needs the chunk's resend). No sync round:
//! a resend that meets a member already at the next generation is answered
//! STALE, and the origin repairs the chunk from that member's output
//! (`repairs`, PROTOCOL.md version 2).
//!
//! Generations: every member picks one past the generation it last
//! finished, so members in lockstep agree, and a failed round is retried
//! with the same generation. STALE (a member two generations on) means a
//! member got ahead when others failed mid-round: the origin READs that
//! member's raised-generation cell, adopts it and restarts the round, and
//! the group converges instead of failing forever.
//!
//! The sync area of a group of N: N u64 slots (the generation this member
//! finished, in every slot: each member writes only its own memory's), then
//! one u64 cell (the generation this member raised).

pub mod afxdp_tx;
mod exchange;
pub mod inject;
pub mod inputs;
pub mod ring;
pub mod staged;
pub mod table;

use std::{
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    time::{Duration, Instant},
};

use afxdp_tx::AfXdpTx;
use exchange::{exchange, Answerer, Pacing, Requests, Sent, SocketTx, Stopped};
use inject::{Batch, Injector};
use netdam_common::{
    alu::combine_into,
    chain::{cell, ring_call_word, ring_hop, ring_member, HopOp, Readiness, MAX_RING},
    wire::{flags, Alu, Dtype},
    NetdamHdr, Opcode, Status,
};
use ring::{RingPlan, RingRequest};
use thiserror::Error;

use crate::{
    client::status_hint,
    controller::{ControllerError, LocalNode},
};

/// Bytes of one member's slot in the sync area (a u64 generation).
pub const SYNC_SLOT: u64 = 8;

/// Offset in the sync area's raised cell (the slot after the members') of
/// the failed word: the generation of the last call that failed at this
/// member, written by the member itself before it moves on (so that no
/// origin repairs a chunk from its output), or by another member that
/// found the members' calls differ (so that a member with no chunk of its
/// own stops waiting). The raise writes only the cell's low half, the
/// generation (docs/collective.md).
const FAILED_WORD: u64 = 4;

/// Bytes of the sync area of a group of `members`.
pub const fn sync_len(members: usize) -> u64 {
    SYNC_SLOT * (members as u64 + 1)
}

/// Sets every slot and the raised cell of a sync area of `members` at
/// `sync_addr` in `node`'s memory to `generation`, so that this member's
/// next round runs at `generation + 1`. For members that did not finish
/// their last round together (a job that failed mid-collective leaves the
/// nodes' generations and sync areas apart, and a new job's members would
/// otherwise pick different generations): every member first agrees on G,
/// at least the highest readiness generation of any member's node, then
/// calls this with G before its first round, and none starts before all
/// have (the caller's barrier). A chunk of the new rounds then never meets
/// a node left at an older generation's input.
pub fn restart_sync_area<N: MemberNode>(
    node: &N,
    sync_addr: u64,
    members: usize,
    generation: u32,
) -> Result<(), CollectiveError> {
    if !(2..=MAX_RING).contains(&members) {
        return Err(CollectiveError::GroupSize(members));
    }
    let cells: Vec<u8> = (0..=members).flat_map(|_| (generation as u64).to_le_bytes()).collect();
    Ok(node.write(sync_addr, &cells)?)
}

/// The members of a collective, in group order, and their port P.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub members: Vec<Ipv4Addr>,
    pub port: u16,
}

/// One all-reduce: `count` elements at `input_addr` of every member,
/// combined with `alu`, the result at `output_addr` of every member; both
/// ranges, the cell area at `cells_addr` (`RingPlan::cells_len` bytes,
/// 8-aligned: a completion cell and room for a held partial per chunk) and
/// the sync area inside region `rkey` at every member. A group keeps its
/// cells at one address from call to call, apart from every call's input
/// and output: a partial held for the next call lands there while a member
/// may still be reading this call's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allreduce {
    pub rkey: u32,
    pub input_addr: u64,
    pub output_addr: u64,
    pub cells_addr: u64,
    pub count: u64,
    pub dtype: Dtype,
    pub alu: Alu,
}

impl Allreduce {
    pub fn bytes(&self) -> u64 {
        self.count * self.dtype.width() as u64
    }

    /// The call word of this all-reduce (docs/PROTOCOL.md, version 2):
    /// every member's must be equal, and every hop compares it.
    pub fn call_word(&self) -> u32 {
        ring_call_word(self.count, self.dtype, self.alu)
    }

    /// The first 8-aligned address past the output: where a layout with no
    /// reason to put the cells elsewhere puts them.
    pub fn cells_after_output(&self) -> u64 {
        (self.output_addr + self.bytes()).next_multiple_of(cell::ALIGN)
    }
}

#[derive(Clone, Debug)]
pub struct CollectiveConfig {
    /// IP MTU of every path in the group: fixes the chunking (section 6).
    pub mtu: u32,
    /// Chunks in flight per member (fewer than 1024, section 7); 0: the
    /// group's share of 128, so that all members' chunks together stay
    /// below the 256 frames a veth XDP ring holds.
    pub window: usize,
    /// How long to wait for a chunk's answer before resending it.
    pub timeout: Duration,
    /// Resends of a chunk after timeouts before giving up.
    pub retries: u32,
    /// How long to wait for other members: to contribute (a chunk held at
    /// their node, or NOT_READY) and to complete this member's output.
    pub patience: Duration,
    /// Where the sync area (`sync_len` bytes, 8-aligned) lies in every member's memory.
    pub sync_addr: u64,
    /// Send the first packet of each chunk through the node's injector
    /// (one system call a batch) instead of the socket (one a packet). Off
    /// by default: on Linux 6.18 each live-frames run costs tens of
    /// milliseconds whatever its size, far more than the socket's sends
    /// (docs/collective.md).
    pub inject: bool,
    /// Send the first packet of each chunk as a frame through an AF_XDP
    /// socket's TX ring (a batch of frames per system call). Off by default
    /// (docs/collective.md has the measurement); not with `inject`.
    pub afxdp_tx: bool,
    /// Every hop a NOP: the ring's frames travel the same path with the same
    /// payload, and no node reduces or writes anything (the output is not
    /// written). The floor that moving the frames alone sets, for
    /// benchmarks; not an all-reduce.
    pub nop_hops: bool,
}

impl Default for CollectiveConfig {
    fn default() -> Self {
        CollectiveConfig {
            mtu: 1500,
            window: 0,
            timeout: Duration::from_millis(200),
            retries: 10,
            patience: Duration::from_secs(30),
            sync_addr: 0,
            inject: false,
            afxdp_tx: false,
            nop_hops: false,
        }
    }
}

#[derive(Debug, Error)]
pub enum CollectiveError {
    #[error("a group has 2 to {MAX_RING} members, not {0}")]
    GroupSize(usize),
    #[error("{0} is in the group twice")]
    Duplicate(Ipv4Addr),
    #[error("this node ({me}) is not in the group {group:?}: run the collective on a member, with its own --pin-dir")]
    NotMember { me: Ipv4Addr, group: Vec<Ipv4Addr> },
    #[error("layout: {0}")]
    Layout(String),
    #[error("MTU {mtu} leaves no room for one {dtype} element after the headers of a {members}-member ring")]
    Mtu {
        mtu: u32,
        dtype: &'static str,
        members: usize,
    },
    #[error(
        "all-reduce generation {generation}: {what} got no answer after {attempts} attempt(s) of {timeout:?} each; {}",
        silent_text(silent)
    )]
    Timeout {
        generation: u32,
        what: String,
        attempts: u32,
        timeout: Duration,
        silent: Vec<Ipv4Addr>,
    },
    #[error("all-reduce generation {generation}: {what} refused by {member}: {}{}", status.name(), status_hint(*status))]
    Refused {
        generation: u32,
        what: String,
        member: Ipv4Addr,
        status: Status,
    },
    /// A member is at a later generation; `allreduce` adopts it and does not return this.
    #[error("all-reduce generation {generation}: {member} is already at a later generation (STALE)")]
    Stale { generation: u32, member: Ipv4Addr },
    #[error("all-reduce generation {generation}: {member} did not contribute within {waited:?} (its node held or refused the chunk): is the collective running there?")]
    NotReady {
        generation: u32,
        member: Ipv4Addr,
        waited: Duration,
    },
    #[error(
        "all-reduce generation {generation}: this member's output was not complete within {waited:?}: {missing} \
         not written; they start at {originators:?}: is the collective running there, with the same count, dtype and op?"
    )]
    Incomplete {
        generation: u32,
        missing: String,
        originators: Vec<Ipv4Addr>,
        waited: Duration,
    },
    #[error(
        "all-reduce generation {generation}: the members are not running the same call: {found}; this member's is \
         {count} x {dtype} {alu} (every member must pass the same count, dtype and op)"
    )]
    Mismatch {
        generation: u32,
        /// Who found the difference, and how.
        found: String,
        count: u64,
        dtype: &'static str,
        alu: &'static str,
    },
    #[error(
        "all-reduce generation {generation}: {member} failed this call and moved on (its own error says why), \
         so a chunk it answered STALE cannot be repaired from its output"
    )]
    PeerFailed { generation: u32, member: Ipv4Addr },
    #[error("the node: {0}")]
    Node(#[from] ControllerError),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
}

/// A chunk of this member's to send on from SR idx `idx` with `payload`,
/// the chunk's final value read where a member had moved on.
struct Repair {
    chunk: u64,
    idx: usize,
    payload: Vec<u8>,
}

/// What every chunk request of `op` at `generation` shares, for the member
/// at `origin` (its IPv4 address and socket port).
fn ring_request<'a>(
    group: &'a Group,
    origin: (Ipv4Addr, u16),
    nop_hops: bool,
    op: &Allreduce,
    generation: u32,
) -> RingRequest<'a> {
    RingRequest {
        group: &group.members,
        port: group.port,
        origin,
        rkey: op.rkey,
        input_addr: op.input_addr,
        output_addr: op.output_addr,
        cells_addr: op.cells_addr,
        dtype: op.dtype,
        alu: op.alu,
        call: op.call_word(),
        generation,
        nop_hops,
    }
}

/// "3 chunk(s) (0, 4, 8)": the first 16 of `items`, named by `noun`.
fn list(noun: &str, items: &[String]) -> String {
    let mut s: Vec<&str> = items.iter().take(16).map(String::as_str).collect();
    let more = format!("... {} more", items.len().saturating_sub(16));
    if items.len() > 16 {
        s.push(&more);
    }
    format!("{} {noun}(s) ({})", items.len(), s.join(", "))
}

fn silent_text(silent: &[Ipv4Addr]) -> String {
    if silent.is_empty() {
        "every other member answers a NOP: frames are being lost on the way".into()
    } else {
        format!("members that do not answer a NOP (NetDAM not serving there?): {silent:?}")
    }
}

/// Chunks in flight of the whole group by default.
const GROUP_WINDOW: usize = 128;

/// How long a member looks at its cells between yields of its CPU before it
/// sleeps between looks, and how long it sleeps: a sleep's wake-up cost more
/// than a small all-reduce (50 us of spin then 10 us sleeps: 1 KiB on 4
/// members 182 us; yields for 2 ms: 71 us, BENCHMARKS.md).
const SPIN: Duration = Duration::from_micros(2000);
const POLL: Duration = Duration::from_micros(10);

/// Receive buffer of the collective's socket. Answers that arrive through
/// veth's XDP path cost a page each, so the default 208 KiB holds only
/// about 48, fewer than a window of chunks answers at once.
pub const RECEIVE_BUFFER: usize = 16 << 20;

/// Send buffer of the collective's socket. A datagram stays charged to it
/// until the peer's XDP has taken it off veth's ring, so a window of jumbo
/// chunks (32 of 8.9 KB) overran the default 208 KiB: sendto failed, the
/// chunks were resent after a timeout each (UdpSndbufErrors equal to the
/// resends), and a 4 MiB all-reduce at MTU 9000 took 115 ms instead of 7.
pub const SEND_BUFFER: usize = 16 << 20;

/// Lets this thread's timed waits end within 1 us of their deadline. The
/// engine's waits (NOT_READY pauses from 20 us, the completion poll) are
/// tens of microseconds, and the default 50 us of timer slack would add
/// that much again to each; the setting is per thread, so it is made by the
/// caller: once per thread, not once per call (a system call fewer on a
/// small all-reduce's path).
fn tighten_timer_slack() {
    thread_local! {
        static TIGHTENED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if !TIGHTENED.replace(true) {
        // SAFETY: PR_SET_TIMERSLACK takes a value and touches no memory.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong) };
    }
}

/// Raises the socket's receive buffer to `bytes`: past net.core.rmem_max
/// when privileged (SO_RCVBUFFORCE), else as far as rmem_max allows.
pub fn grow_receive_buffer(sock: &UdpSocket, bytes: usize) {
    grow_buffer(sock, bytes, [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF], "receive");
}

/// Raises the socket's send buffer to `bytes`: past net.core.wmem_max when
/// privileged (SO_SNDBUFFORCE), else as far as wmem_max allows.
pub fn grow_send_buffer(sock: &UdpSocket, bytes: usize) {
    grow_buffer(sock, bytes, [libc::SO_SNDBUFFORCE, libc::SO_SNDBUF], "send");
}

/// Sets the first of `opts` (the privileged option, then the plain one)
/// that the kernel takes to `bytes`.
fn grow_buffer(sock: &UdpSocket, bytes: usize, opts: [libc::c_int; 2], what: &str) {
    use std::os::fd::AsRawFd;
    let v = bytes as libc::c_int;
    for opt in opts {
        // SAFETY: setsockopt with an int option value of the right size on our own socket.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return;
        }
    }
    log::warn!("could not raise a UDP socket's {what} buffer to {bytes} bytes: expect losses");
}

/// What one all-reduce did, as this member saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    pub generation: u32,
    /// Chunks of the whole vector, and how many this member originated.
    pub chunks: u64,
    pub own_chunks: u64,
    /// Chunk requests sent, resends after timeouts, resends after NOT_READY.
    pub sent: u64,
    pub resent: u64,
    pub not_ready: u64,
    /// HELD answers to this member's chunks (a member had not contributed yet).
    pub held: u64,
    /// Partials this member's node held for it, which it continued after raising.
    pub continued: u64,
    /// This member's chunks repaired after a STALE answer (PROTOCOL.md version 2).
    pub repaired: u64,
    /// From the raise of the generation until this member's output is complete.
    pub elapsed: Duration,
    /// How the chunks left.
    pub transmit: TxPath,
}

/// How a member's chunk requests leave the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxPath {
    /// A UDP socket, one system call a request.
    Socket,
    /// The node's XDP injector (BPF_PROG_TEST_RUN with live frames), one call a batch.
    Injector,
    /// An AF_XDP socket's TX ring, one call a batch of 32 (copy mode).
    AfXdp,
}

/// What the engine needs of its member's node: its address, its memory,
/// and the readiness generation of a region. `LocalNode` is the XDP node
/// served on this host; a benchmark can put a userspace node here.
pub trait MemberNode {
    fn ipv4(&self) -> Ipv4Addr;
    /// Bytes of memory.
    fn mem_len(&self) -> usize;
    /// Copies `out.len()` bytes at `addr` out of the node's memory.
    fn read_into(&self, addr: u64, out: &mut [u8]) -> Result<(), ControllerError>;
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), ControllerError>;
    /// Raises region `rkey`'s generation with the call word of the call
    /// this member contributes to (both at once).
    fn set_readiness(&mut self, rkey: u32, now: Readiness) -> Result<(), ControllerError>;
    /// The node's injector, if it has one (an XDP node that pinned it).
    fn injector(&self) -> Option<Result<Injector, ControllerError>> {
        None
    }
    /// An AF_XDP TX socket on the node's interface, if it can have one.
    fn afxdp_tx(&self) -> Option<Result<AfXdpTx, CollectiveError>> {
        None
    }
}

impl MemberNode for LocalNode {
    fn ipv4(&self) -> Ipv4Addr {
        LocalNode::ipv4(self)
    }
    fn mem_len(&self) -> usize {
        self.memory().len()
    }
    fn read_into(&self, addr: u64, out: &mut [u8]) -> Result<(), ControllerError> {
        self.memory().read_into(addr, out)
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), ControllerError> {
        self.memory().write(addr, data)
    }
    fn set_readiness(&mut self, rkey: u32, now: Readiness) -> Result<(), ControllerError> {
        LocalNode::set_readiness(self, rkey, now)
    }
    fn injector(&self) -> Option<Result<Injector, ControllerError>> {
        Some(
            self.interface_index()
                .and_then(|ifindex| Injector::open(self.pin_dir(), ifindex)),
        )
    }
    fn afxdp_tx(&self) -> Option<Result<AfXdpTx, CollectiveError>> {
        Some(AfXdpTx::open(self))
    }
}

/// A member's side of the group's collectives.
pub struct Collective<N: MemberNode = LocalNode> {
    node: N,
    group: Group,
    rank: usize,
    cfg: CollectiveConfig,
    sock: UdpSocket,
    origin: (Ipv4Addr, u16),
    /// The node's injector, when the config asks for it and the node has one.
    injector: Option<Injector>,
    /// The AF_XDP TX socket, when the config asks for it and the node can have one.
    afxdp_tx: Option<AfXdpTx>,
}

impl<N: MemberNode> Collective<N> {
    /// Joins `group` as the member that `node` (served on this host) is.
    pub fn new(node: N, group: Group, cfg: CollectiveConfig) -> Result<Collective<N>, CollectiveError> {
        let n = group.members.len();
        if !(2..=MAX_RING).contains(&n) {
            return Err(CollectiveError::GroupSize(n));
        }
        for (i, m) in group.members.iter().enumerate() {
            if group.members[..i].contains(m) {
                return Err(CollectiveError::Duplicate(*m));
            }
        }
        let me = node.ipv4();
        let rank = group
            .members
            .iter()
            .position(|m| *m == me)
            .ok_or_else(|| CollectiveError::NotMember {
                me,
                group: group.members.clone(),
            })?;
        let sock = UdpSocket::bind(SocketAddrV4::new(me, 0))
            .map_err(|e| CollectiveError::Io(format!("binding a UDP socket on {me}"), e))?;
        grow_receive_buffer(&sock, RECEIVE_BUFFER);
        grow_send_buffer(&sock, SEND_BUFFER);
        // The exchange drains it without blocking, and waits in ppoll.
        sock.set_nonblocking(true)
            .map_err(|e| CollectiveError::Io("making the collective's socket non-blocking".into(), e))?;
        let port = sock
            .local_addr()
            .map_err(|e| CollectiveError::Io("the socket's port".into(), e))?
            .port();
        let injector = match (cfg.inject, node.injector()) {
            (true, Some(Ok(mut i))) => {
                match i.probe() {
                    Ok(()) => Some(i),
                    Err(e) => {
                        log::warn!("the kernel refuses the injector ({e}): chunks leave through the socket, one system call each");
                        None
                    }
                }
            }
            (true, Some(Err(e))) => {
                log::warn!("no injector ({e}): chunks leave through the socket, one system call each");
                None
            }
            _ => None,
        };
        let afxdp_tx = match (cfg.afxdp_tx && injector.is_none(), node.afxdp_tx()) {
            (true, Some(Ok(t))) => Some(t),
            (true, Some(Err(e))) => {
                log::warn!("no AF_XDP TX socket ({e}): chunks leave through the UDP socket");
                None
            }
            _ => None,
        };
        Ok(Collective {
            node,
            group,
            rank,
            cfg,
            sock,
            origin: (me, port),
            injector,
            afxdp_tx,
        })
    }

    /// This member's place in the group.
    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn group(&self) -> &Group {
        &self.group
    }

    pub fn config(&self) -> &CollectiveConfig {
        &self.cfg
    }

    /// This member's node: its memory, where the input goes and the output is read.
    pub fn node(&self) -> &N {
        &self.node
    }

    /// The chunking every member uses for `op`.
    pub fn plan(&self, op: &Allreduce) -> Result<RingPlan, CollectiveError> {
        let n = self.group.members.len();
        RingPlan::new(n, op.dtype, op.count, self.cfg.mtu).ok_or(CollectiveError::Mtu {
            mtu: self.cfg.mtu,
            dtype: op.dtype.name(),
            members: n,
        })
    }

    /// Runs one all-reduce of the input this member has placed at
    /// `op.input_addr`; when it returns, `op.output_addr` holds the result
    /// at this member. The input may be overwritten once it returns.
    pub fn allreduce(&mut self, op: &Allreduce) -> Result<Report, CollectiveError> {
        tighten_timer_slack();
        let plan = self.plan(op)?;
        self.check_layout(op, &plan)?;
        let mut generation = self.next_generation()?;
        match self.attempt(op, &plan, &mut generation) {
            Ok(report) => {
                self.finish(generation)?;
                Ok(report)
            }
            Err(e) => {
                self.give_up(generation);
                Err(e)
            }
        }
    }

    /// `allreduce` from the raise to a complete output, at `generation` or
    /// a later one it adopts.
    fn attempt(&mut self, op: &Allreduce, plan: &RingPlan, generation: &mut u32) -> Result<Report, CollectiveError> {
        let started = Instant::now();
        let mine: Vec<u64> = plan.chunks_of(self.rank).collect();
        let mut continued = 0;
        let chunks = loop {
            self.raise(op, *generation)?;
            if !self.cfg.nop_hops {
                continued += self.continue_held(op, plan, *generation)?;
            }
            if !mine.is_empty() {
                // Members that finished the last call on this CPU get to
                // raise before this member's chunks reach them: a chunk
                // held at a member costs a HELD answer, this member's
                // wake-up and a continuation by that member's host. With
                // four members on two CPUs, 1 KiB calls back to back were
                // held in every call and took 44 us; with this yield, in
                // fewer than 2% and 34 us (docs/collective.md). Where every
                // member has a CPU of its own, nothing else is runnable and
                // the yield returns at once.
                // SAFETY: sched_yield takes no arguments.
                unsafe { libc::sched_yield() };
            }
            match self.run_chunks(op, plan, &mine, *generation) {
                Err(CollectiveError::Refused {
                    member,
                    status: Status::Mismatch,
                    ..
                }) => {
                    return Err(self.mismatch(op, *generation, format!("{member} contributed to another call")));
                }
                Err(CollectiveError::Stale { member, .. }) => {
                    // At least one past ours: the group climbs even if the cell lags the generation.
                    let (raised, _) = self.raised_at(member, op.rkey, *generation)?;
                    let theirs = raised.max(*generation + 1);
                    log::info!(
                        "{member} is at generation {theirs}, ahead of {generation} after an earlier failed run: adopting it"
                    );
                    *generation = theirs;
                }
                other => break other?,
            }
        };
        if !self.cfg.nop_hops {
            self.wait_complete(op, plan, *generation)?;
        }
        Ok(Report {
            generation: *generation,
            chunks: plan.chunks(),
            own_chunks: mine.len() as u64,
            sent: chunks.requests,
            resent: chunks.resent,
            not_ready: chunks.not_ready,
            held: chunks.held,
            continued,
            repaired: chunks.repaired,
            elapsed: started.elapsed(),
            transmit: self.transmit(),
        })
    }

    /// After a failed call at `generation`: marks it failed in the raised
    /// cell (no origin repairs a chunk from this member's output), then
    /// records it finished, so that the next call runs at the next
    /// generation and never meets this one's `done` stamps. Best effort:
    /// the call's own error is what the caller hears.
    fn give_up(&self, generation: u32) {
        let marked = self
            .node
            .write(self.raised_cell() + FAILED_WORD, &generation.to_le_bytes())
            .map_err(CollectiveError::from)
            .and_then(|()| self.finish(generation));
        if let Err(e) = marked {
            log::warn!("recording generation {generation} as failed: {e}");
        }
    }

    /// Raises this member's generation of `op.rkey` with `op`'s call word,
    /// and publishes the generation in the sync area's raised cell (its low
    /// half: the high half is the mismatch word).
    fn raise(&mut self, op: &Allreduce, generation: u32) -> Result<(), CollectiveError> {
        self.node.write(self.raised_cell(), &generation.to_le_bytes())?;
        self.node
            .set_readiness(op.rkey, Readiness::new(generation, op.call_word()))?;
        // The raise before the cells are read (PROTOCOL.md version 2): a
        // partial the node held before it is seen by `continue_held`; one
        // held after it is answered NOT_READY and resent by its origin.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Runs, for every chunk whose partial this member's node held for
    /// `generation`, the hop the node could not run (PROTOCOL.md version 2):
    /// the partial combined with this member's input, stored and stamped at
    /// a REDUCE_WRITE, and sent on to the next segment as the node would
    /// have forwarded it. Returns how many it continued.
    fn continue_held(&self, op: &Allreduce, plan: &RingPlan, generation: u32) -> Result<u64, CollectiveError> {
        let n = plan.members;
        let req = ring_request(&self.group, self.origin, self.cfg.nop_hops, op, generation);
        let stride = plan.cell_stride;
        let mut continued = 0;
        let mut head = [0u8; cell::HDR_LEN as usize];
        let (mut buf, mut input) = (Vec::new(), Vec::new());
        for k in (0..plan.chunks()).filter(|k| (k % n as u64) as usize != self.rank) {
            let at = op.cells_addr + k * stride;
            self.node.read_into(at, &mut head)?;
            let field =
                |off: u64| u32::from_le_bytes(head[off as usize..off as usize + 4].try_into().expect("4 bytes"));
            if field(cell::HELD) != generation {
                continue;
            }
            if field(cell::HELD_CALL) != req.call {
                // Not continued: the origin's resend (it waits one timeout
                // after HELD) meets the raised call and is answered MISMATCH.
                let origin = self.group.members[(k % n as u64) as usize];
                return Err(self.mismatch(
                    op,
                    generation,
                    format!("a partial {origin} sent belongs to another call"),
                ));
            }
            let (seq, idx) = (field(cell::HELD_SEQ), head[cell::HELD_IDX as usize] as usize);
            let port = u16::from_le_bytes([head[cell::HELD_PORT as usize], head[cell::HELD_PORT as usize + 1]]);
            let originator = (k % n as u64) as usize;
            // Only a hop of this member's own in the ring's first pass is held here.
            let hop = ring_hop(idx, n);
            if idx + 1 >= 2 * (n - 1)
                || ring_member(originator, idx, n) != self.rank
                || !matches!(hop, HopOp::Reduce | HopOp::ReduceWrite)
            {
                log::warn!("chunk {k}: cell holds a partial at SR idx {idx}, not a hop of this member: ignored");
                continue;
            }
            let (off, len) = plan.span(k);
            buf.clear();
            let to = req.hop_header(plan, k, seq, (self.group.members[originator], port), idx + 1, &mut buf);
            let payload_at = buf.len();
            buf.resize(payload_at + len, 0);
            self.node.read_into(at + cell::HOLD, &mut buf[payload_at..])?;
            input.resize(len, 0);
            self.node.read_into(op.input_addr + off, &mut input)?;
            combine_into(op.dtype, op.alu, &mut buf[payload_at..], &input);
            if hop == HopOp::ReduceWrite {
                self.node.write(op.output_addr + off, &buf[payload_at..])?;
                self.node.write(at + cell::DONE, &generation.to_le_bytes())?;
            }
            let dest = SocketAddrV4::new(to, self.group.port);
            // A lost send is a lost frame: the origin's resend covers it.
            if let Err(e) = self.sock.send_to(&buf, dest) {
                log::debug!("continuing chunk {k} to {dest}: {e}");
            }
            continued += 1;
        }
        Ok(continued)
    }

    /// Waits until every chunk's cell in this member's node says its result
    /// for `generation` is in the output: yielding the CPU between looks for
    /// `SPIN`, then sleeping `POLL` between them.
    fn wait_complete(&self, op: &Allreduce, plan: &RingPlan, generation: u32) -> Result<(), CollectiveError> {
        let stride = plan.cell_stride;
        let chunks = plan.chunks();
        let deadline = Instant::now() + self.cfg.patience;
        let spin_until = Instant::now() + SPIN;
        let mut next = 0u64;
        let mut done = [0u8; 4];
        loop {
            while next < chunks {
                self.node
                    .read_into(op.cells_addr + next * stride + cell::DONE, &mut done)?;
                if u32::from_le_bytes(done) != generation {
                    break;
                }
                next += 1;
            }
            if next == chunks {
                // The stamps come after their data.
                std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
                return Ok(());
            }
            let now = Instant::now();
            let mut failed = [0u8; 4];
            self.node.read_into(self.raised_cell() + FAILED_WORD, &mut failed)?;
            if u32::from_le_bytes(failed) == generation {
                return Err(self.mismatch(op, generation, "another member found that the calls differ".into()));
            }
            if now > deadline {
                let missing: Vec<u64> = (next..chunks)
                    .filter(|k| {
                        let mut d = [0u8; 4];
                        self.node
                            .read_into(op.cells_addr + k * stride + cell::DONE, &mut d)
                            .is_err()
                            || u32::from_le_bytes(d) != generation
                    })
                    .collect();
                let n = self.group.members.len() as u64;
                let mut originators: Vec<Ipv4Addr> =
                    missing.iter().map(|k| self.group.members[(k % n) as usize]).collect();
                originators.sort();
                originators.dedup();
                return Err(CollectiveError::Incomplete {
                    generation,
                    missing: list("chunk", &missing.iter().map(u64::to_string).collect::<Vec<_>>()),
                    originators,
                    waited: self.cfg.patience,
                });
            }
            if now < spin_until {
                // Yield, not spin: members share the CPUs with the softirqs
                // that carry their chunks (a pure spin took 2 ms a call here).
                // SAFETY: sched_yield takes no arguments.
                unsafe { libc::sched_yield() };
            } else {
                std::thread::sleep(POLL);
            }
        }
    }

    /// Records `generation` as finished in every slot of this member's own
    /// sync area. Every slot, not the one of its rank: groups that share the
    /// node's sync area in another order (MPI's reordered communicators)
    /// read another slot in `next_generation`, and version 1's sync round
    /// left every slot at the generation too.
    fn finish(&self, generation: u32) -> Result<(), CollectiveError> {
        let (sync, _) = self.sync_range();
        let slots: Vec<u8> = (0..self.group.members.len())
            .flat_map(|_| (generation as u64).to_le_bytes())
            .collect();
        Ok(self.node.write(sync, &slots)?)
    }

    /// The generation `member` has raised and the last one that failed
    /// there, READ from its sync area's raised cell.
    fn raised_at(&self, member: Ipv4Addr, rkey: u32, generation: u32) -> Result<(u32, u32), CollectiveError> {
        let raised = self.read_at(member, rkey, self.raised_cell(), 8, generation, "the raised generation")?;
        let word = |at: usize| u32::from_le_bytes(raised[at..at + 4].try_into().expect("4 bytes"));
        Ok((word(0), word(FAILED_WORD as usize)))
    }

    /// The sync area's raised cell: the raised generation (u32), then the failed word.
    fn raised_cell(&self) -> u64 {
        let (sync, _) = self.sync_range();
        sync + SYNC_SLOT * self.group.members.len() as u64
    }

    /// The error of a call whose members' calls differ (`found`: who found
    /// it, how), after telling every other member through its failed word:
    /// a WRITE each, acknowledged and resent as any plain request, so that a
    /// member with no chunk of its own fails with the mismatch too, not at
    /// its patience, also where frames are lost. A member that cannot be
    /// told (one that died) is only logged: the call's error is this.
    fn mismatch(&self, op: &Allreduce, generation: u32, found: String) -> CollectiveError {
        log::warn!("all-reduce generation {generation}: {found}");
        let others: Vec<Ipv4Addr> = (0..self.group.members.len())
            .filter(|&i| i != self.rank)
            .map(|i| self.group.members[i])
            .collect();
        let told = self.plain(
            &others,
            generation,
            &self.pacing(),
            |_| {
                let mut h = NetdamHdr::request(Opcode::Write);
                h.flags |= flags::ACK_REQ;
                h.set_rkey(op.rkey);
                h.set_addr(self.raised_cell() + FAILED_WORD);
                h.set_len(4);
                (h, generation.to_le_bytes().to_vec())
            },
            |_, _| {},
        );
        if let Err(stop) = told {
            let e = self.explain(
                stop,
                generation,
                "the mismatch told to",
                |i| others[i].to_string(),
                |_| 0,
            );
            log::warn!("{e}");
        }
        CollectiveError::Mismatch {
            generation,
            found,
            count: op.count,
            dtype: op.dtype.name(),
            alu: op.alu.name(),
        }
    }

    /// `len` bytes at `addr` of `member`'s memory (region `rkey`), READ
    /// until answered; an error names `what` was read and where.
    fn read_at(
        &self,
        member: Ipv4Addr,
        rkey: u32,
        addr: u64,
        len: usize,
        generation: u32,
        what: &str,
    ) -> Result<Vec<u8>, CollectiveError> {
        let mut out = vec![0u8; len];
        self.plain(
            &[member],
            generation,
            &self.pacing(),
            |_| {
                let mut h = NetdamHdr::request(Opcode::Read);
                h.set_rkey(rkey);
                h.set_addr(addr);
                h.set_len(len as u16);
                (h, vec![0; len])
            },
            |_, got| {
                if got.len() == len {
                    out.copy_from_slice(got);
                }
            },
        )
        .map_err(|stop| {
            self.explain(
                stop,
                generation,
                &format!("READ of {what} at"),
                |_| member.to_string(),
                |_| 0,
            )
        })?;
        Ok(out)
    }

    /// One plain request (`make(i)`: header and payload) to each of `to`,
    /// resent until answered OK; `answered(i, payload)` gets each answer.
    fn plain(
        &self,
        to: &[Ipv4Addr],
        tag: u32,
        pacing: &Pacing,
        make: impl Fn(usize) -> (NetdamHdr, Vec<u8>),
        answered: impl FnMut(usize, &[u8]),
    ) -> Result<Sent, Stopped> {
        let port = self.group.port;
        let reqs = Requests {
            n: to.len(),
            seq_base: rand::random(),
            tag,
            answerer: Answerer::EachTo { to, port },
        };
        let mut tx = SocketTx {
            sock: &self.sock,
            dest: |i: usize| SocketAddrV4::new(to[i], port),
            build: |i: usize, seq: u32, buf: &mut Vec<u8>| {
                let (mut h, payload) = make(i);
                h.set_seq(seq);
                h.set_tag(tag);
                buf.extend_from_slice(&h.to_bytes());
                buf.extend_from_slice(&payload);
            },
            buf: Vec::new(),
        };
        exchange(&self.sock, pacing, reqs, &mut tx, None, answered)
    }

    fn pacing(&self) -> Pacing {
        Pacing {
            window: match self.cfg.window {
                0 => (GROUP_WINDOW / self.group.members.len()).max(1),
                w => w.min(1023),
            },
            timeout: self.cfg.timeout,
            retries: self.cfg.retries,
            patience: self.cfg.patience,
        }
    }

    fn sync_range(&self) -> (u64, u64) {
        (self.cfg.sync_addr, sync_len(self.group.members.len()))
    }

    /// Input, output, cells and sync area inside the memory, apart, and aligned.
    fn check_layout(&self, op: &Allreduce, plan: &RingPlan) -> Result<(), CollectiveError> {
        let size = self.node.mem_len() as u64;
        let bytes = op.bytes();
        let w = op.dtype.width() as u64;
        let (sync, sync_len) = self.sync_range();
        let ranges = [
            ("input", op.input_addr, bytes),
            ("output", op.output_addr, bytes),
            ("cell area", op.cells_addr, plan.cells_len()),
            ("sync area", sync, sync_len),
        ];
        if op.count == 0 {
            return Err(CollectiveError::Layout("count is 0: nothing to reduce".into()));
        }
        for (name, a, n) in ranges {
            if a.checked_add(n).is_none_or(|end| end > size) {
                return Err(CollectiveError::Layout(format!(
                    "the {name} [{a:#x}, +{n:#x}) does not fit the node's {size}-byte NetDAM memory"
                )));
            }
        }
        for (i, (name, a, n)) in ranges.iter().enumerate() {
            for (other, b, m) in &ranges[i + 1..] {
                if a < &(b + m) && b < &(a + n) {
                    return Err(CollectiveError::Layout(format!(
                        "the {name} [{a:#x}, +{n:#x}) overlaps the {other} [{b:#x}, +{m:#x}): the ring is out of place"
                    )));
                }
            }
        }
        if !op.input_addr.is_multiple_of(w)
            || !op.output_addr.is_multiple_of(w)
            || !sync.is_multiple_of(SYNC_SLOT)
            || !op.cells_addr.is_multiple_of(cell::ALIGN)
        {
            return Err(CollectiveError::Layout(format!(
                "input and output must be aligned to the {w}-byte {} elements and the sync and cell areas to 8 bytes",
                op.dtype.name()
            )));
        }
        Ok(())
    }

    /// The finished slots of this member's sync area.
    fn sync_slots(&self) -> Result<Vec<u64>, CollectiveError> {
        let (addr, _) = self.sync_range();
        let mut b = vec![0u8; SYNC_SLOT as usize * self.group.members.len()];
        self.node.read_into(addr, &mut b)?;
        Ok(b.chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }

    /// One past the generation this member last finished (its own slot).
    /// Members in lockstep agree on it; others' slots are no guide, since
    /// a member with no chunk of its own may finish a round before this
    /// one starts it.
    fn next_generation(&self) -> Result<u32, CollectiveError> {
        let own = self.sync_slots()?[self.rank];
        Ok((own as u32).wrapping_add(1).max(1))
    }

    fn run_chunks(
        &mut self,
        op: &Allreduce,
        plan: &RingPlan,
        mine: &[u64],
        generation: u32,
    ) -> Result<Sent, CollectiveError> {
        let req = ring_request(&self.group, self.origin, self.cfg.nop_hops, op, generation);
        let n = self.group.members.len();
        let port = self.group.port;
        // Every chunk a member originates goes first to member o+1.
        let first_hop = SocketAddrV4::new(self.group.members[ring_member(self.rank, 0, n)], port);
        let pacing = self.pacing();
        let segments = 2 * (n - 1);
        let reqs = Requests {
            n: mine.len(),
            seq_base: rand::random(),
            tag: generation,
            answerer: Answerer::Program {
                last: SocketAddrV4::new(self.group.members[ring_member(self.rank, segments - 1, n)], port),
                last_idx: (segments - 1) as u8,
                hops: &self.group.members,
                port,
            },
        };
        let mut read_failed = None;
        let mut parked = Vec::new();
        let node = &self.node;
        let build = |i: usize, seq: u32, buf: &mut Vec<u8>| {
            req.chunk_header(plan, mine[i], seq, buf);
            let (off, len) = plan.span(mine[i]);
            let at = buf.len();
            buf.resize(at + len, 0);
            if let Err(e) = node.read_into(op.input_addr + off, &mut buf[at..]) {
                read_failed.get_or_insert(e);
            }
        };
        let result = match (self.injector.as_mut(), self.afxdp_tx.as_mut(), mine.first()) {
            (Some(injector), _, Some(&first)) => {
                let mut netdam = Vec::new();
                req.chunk_header(plan, first, reqs.seq_base, &mut netdam);
                injector.prepare(&Batch {
                    netdam: &netdam,
                    src: self.origin,
                    dst: (*first_hop.ip(), port),
                    seq_base: reqs.seq_base,
                    first_chunk: self.rank as u32,
                    stride: n as u32,
                    chunk_bytes: plan.chunk_elems * plan.width,
                    total_bytes: op.bytes(),
                    input_addr: op.input_addr,
                    output_addr: op.output_addr,
                    cells_addr: op.cells_addr,
                    cell_stride: plan.cell_stride,
                });
                exchange(&self.sock, &pacing, reqs, injector, Some(&mut parked), |_, _| {})
            }
            (None, Some(xsk), Some(_)) => {
                let mut tx = xsk.to(self.origin.1, first_hop, build)?;
                exchange(&self.sock, &pacing, reqs, &mut tx, Some(&mut parked), |_, _| {})
            }
            _ => {
                let mut tx = SocketTx {
                    sock: &self.sock,
                    dest: |_: usize| first_hop,
                    build,
                    buf: Vec::new(),
                };
                exchange(&self.sock, &pacing, reqs, &mut tx, Some(&mut parked), |_, _| {})
            }
        };
        if let Some(e) = read_failed {
            return Err(e.into());
        }
        let mut sent =
            result.map_err(|stop| self.explain(stop, generation, "chunk", |i| mine[i].to_string(), |i| mine[i]))?;
        // Chunks answered STALE: repaired from the member that moved on, as
        // often as members ahead are met (each round passes at least one).
        let mut stale: Vec<(u64, u8)> = parked.iter().map(|&(i, idx)| (mine[i], idx)).collect();
        for _ in 0..2 * n {
            if stale.is_empty() {
                break;
            }
            let repairs = self.repairs(op, plan, generation, &stale)?;
            sent.repaired += repairs.len() as u64;
            stale.clear();
            if repairs.is_empty() {
                break;
            }
            let reqs = Requests {
                n: repairs.len(),
                seq_base: rand::random(),
                tag: generation,
                answerer: reqs.answerer,
            };
            let members = &self.group.members;
            let mut tx = SocketTx {
                sock: &self.sock,
                dest: |i: usize| SocketAddrV4::new(members[ring_member(self.rank, repairs[i].idx, n)], port),
                build: |i: usize, seq: u32, buf: &mut Vec<u8>| {
                    req.hop_header(plan, repairs[i].chunk, seq, self.origin, repairs[i].idx, buf);
                    buf.extend_from_slice(&repairs[i].payload);
                },
                buf: Vec::new(),
            };
            parked.clear();
            sent += exchange(&self.sock, &pacing, reqs, &mut tx, Some(&mut parked), |_, _| {}).map_err(|stop| {
                self.explain(
                    stop,
                    generation,
                    "repaired chunk",
                    |i| repairs[i].chunk.to_string(),
                    |i| repairs[i].chunk,
                )
            })?;
            stale = parked.iter().map(|&(i, idx)| (repairs[i].chunk, idx)).collect();
        }
        if let Some(&(chunk, idx)) = stale.first() {
            let member = self.group.members[ring_member(self.rank, idx as usize, n)];
            log::warn!("chunk {chunk} still STALE at {member} after {} repair rounds", 2 * n);
            return Err(CollectiveError::Stale { generation, member });
        }
        Ok(sent)
    }

    /// The repairs of this member's chunks answered STALE (chunk, SR idx of
    /// the member that answered): that member has finished `generation`, so
    /// its output holds the chunk's final value; the chunk goes on from the
    /// segment after the last one naming that member, with that value
    /// (PROTOCOL.md version 2). None for a chunk that member ends. A member
    /// two generations on is no repair: `CollectiveError::Stale`, which
    /// `allreduce` answers by adopting its generation.
    fn repairs(
        &self,
        op: &Allreduce,
        plan: &RingPlan,
        generation: u32,
        stale: &[(u64, u8)],
    ) -> Result<Vec<Repair>, CollectiveError> {
        let n = plan.members;
        let segments = 2 * (n - 1);
        let mut repairs = Vec::new();
        for &(chunk, idx) in stale {
            let rank = ring_member(self.rank, idx as usize, n);
            let member = self.group.members[rank];
            // The cell is raised before the generation: at least what the node has.
            let (raised, failed) = self.raised_at(member, op.rkey, generation)?;
            if failed == generation {
                // Its output is not this call's result.
                return Err(CollectiveError::PeerFailed { generation, member });
            }
            if raised != generation + 1 {
                return Err(CollectiveError::Stale { generation, member });
            }
            let last = (0..segments)
                .rfind(|&i| ring_member(self.rank, i, n) == rank)
                .unwrap_or(0);
            if last + 1 == segments {
                continue;
            }
            let (off, len) = plan.span(chunk);
            let payload = self.read_at(
                member,
                op.rkey,
                op.output_addr + off,
                len,
                generation,
                "a finished chunk",
            )?;
            log::debug!(
                "chunk {chunk}: {member} has finished generation {generation}; going on from segment {}",
                last + 1
            );
            repairs.push(Repair {
                chunk,
                idx: last + 1,
                payload,
            });
        }
        Ok(repairs)
    }

    /// How chunks leave.
    pub fn transmit(&self) -> TxPath {
        match (&self.injector, &self.afxdp_tx) {
            (Some(_), _) => TxPath::Injector,
            (None, Some(_)) => TxPath::AfXdp,
            (None, None) => TxPath::Socket,
        }
    }

    /// Turns an exchange that stopped short into the error a person can act on.
    fn explain(
        &self,
        stop: Stopped,
        generation: u32,
        noun: &str,
        what: impl Fn(usize) -> String,
        chunk: impl Fn(usize) -> u64,
    ) -> CollectiveError {
        let n = self.group.members.len();
        // The hop that answered a chunk; the node that answered a plain request.
        let member = |i: usize, sr_idx: Option<u8>, from: Ipv4Addr| match sr_idx {
            Some(idx) => self.group.members[ring_member((chunk(i) % n as u64) as usize, idx as usize, n)],
            None => from,
        };
        match stop {
            Stopped::Timeout { unanswered } => CollectiveError::Timeout {
                generation,
                what: list(noun, &unanswered.iter().map(|&i| what(i)).collect::<Vec<_>>()),
                attempts: self.cfg.retries + 1,
                timeout: self.cfg.timeout,
                silent: self.silent_members(),
            },
            Stopped::Refused {
                index,
                status: Status::Stale,
                sr_idx,
                from,
            } => CollectiveError::Stale {
                generation,
                member: member(index, sr_idx, from),
            },
            Stopped::Refused {
                index,
                status,
                sr_idx,
                from,
            } => CollectiveError::Refused {
                generation,
                what: format!("{noun} {}", what(index)),
                member: member(index, sr_idx, from),
                status,
            },
            Stopped::NotReady { index, sr_idx, from } => CollectiveError::NotReady {
                generation,
                member: member(index, sr_idx, from),
                waited: self.cfg.patience,
            },
            Stopped::Io(e) => CollectiveError::Io("the collective's UDP socket".into(), e),
        }
    }

    /// Members other than this one that do not answer a NOP within the timeout.
    fn silent_members(&self) -> Vec<Ipv4Addr> {
        let others: Vec<(usize, Ipv4Addr)> = self
            .group
            .members
            .iter()
            .copied()
            .enumerate()
            .filter(|(m, _)| *m != self.rank)
            .collect();
        let pacing = Pacing {
            retries: 1,
            ..self.pacing()
        };
        let mut silent = Vec::new();
        for (_, ip) in others {
            let nop = |_| (NetdamHdr::request(Opcode::Nop), Vec::new());
            if self.plain(&[ip], 0, &pacing, nop, |_, _| {}).is_err() {
                silent.push(ip);
            }
        }
        silent
    }
}
