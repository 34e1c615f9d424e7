//! CHAIN (PROTOCOL.md section 6): the hop of a segment-routed program that
//! names this node, then the packet forwarded to the next segment or
//! answered to the origin. A program of its own (`netdam_chain`), which
//! `netdam` tail-calls, so that each stays within the verifier's budget.

use aya_ebpf::{bindings::xdp_action, helpers::generated::bpf_xdp_store_bytes, programs::XdpContext};
use netdam_common::{
    chain::{
        cell, check_chain_preamble, check_hop, check_ready, check_sr_shape, hop_needs_window, parse_trailer,
        trailer_off, CellAddr, CheckedHop, HopOp, Me, Readiness, Ready, Segment, SrFixed, SrShape, MAX_SEGMENTS,
        SEGMENT_LEN, SR_CELL_LEN, SR_FIXED_LEN,
    },
    config::{cfg_flags, PeerEntry},
    counters::{op_status, Event, COUNTER_SLOTS},
    window::SourceKey,
    wire::{is_unanswerable_source, CARRIER_LEN, HDR_LEN, VERSION_2},
    NetdamHdr, NodeConfig, Opcode, Status,
};

use crate::{
    atomic::fetch_add64,
    carrier::{self, load, Request},
    maps::{count, count_event, peer_mac, CHAIN_STATE, GENERATIONS, PEERS, REGIONS},
    memory,
    ops::Failure,
    respond::{self, Addressing},
    vector::{self, VectorOp},
    window::{self, Claimed},
    Verdict,
};

/// The CHAIN packet this CPU is handling. In a per-CPU map, not on the
/// stack: the frames along the vector callbacks' call chain may hold at most
/// 512 bytes together.
pub struct ChainState {
    req: Request,
    at: At,
    done: Done,
}

/// Runs the CHAIN hop of the frame in `ctx`; the XDP action.
#[inline(always)]
pub fn run(ctx: &XdpContext, frame_len: u32) -> Result<u32, Verdict> {
    let cfg = crate::maps::CONFIG.get(0).ok_or(Verdict::Pass)?;
    let st = CHAIN_STATE.get_ptr_mut(0).ok_or(Verdict::Pass)?;
    // SAFETY: this CPU's slot; XDP does not preempt itself on one CPU.
    let st = unsafe { &mut *st };
    let code = prepare(ctx, cfg, frame_len, st);
    if code != CONTINUE {
        return decode(code);
    }
    hop(ctx, cfg, &st.req, &st.at, &mut st.done);
    let (req, done) = (&st.req, &st.done);
    if let Some(e) = done.dropped {
        return Err(Verdict::Drop(e));
    }
    let status = Status::from_u8(done.status).unwrap_or(Status::Ok);
    // BAD_KEY answers are rationed per source, here the previous hop or the
    // origin that sent the frame (key guessing; docs/conformance.md 21).
    if matches!(status, Status::BadKey) && !crate::badkey::allowed(cfg, u32::from_ne_bytes(req.ip.src_addr)) {
        return Err(Verdict::Drop(Event::BadKeyLimited));
    }
    let payload_len = done.payload_len;
    count(op_status(Opcode::Chain as u8, status));
    let sent = match done.forwards {
        true => forward(ctx, cfg, req, st.at.shape.idx + 1, done),
        false => {
            let answer = Answer {
                status: status as u8,
                payload_len,
            };
            answer_origin(ctx, cfg, req, &st.at.sr, &answer)
        }
    };
    decode(sent)
}

/// Parses the frame into `st`; CONTINUE when the hop is to run, else what
/// became of the frame (encoded). Not inlined: the parser's locals get a
/// frame of their own, gone before the hop runs.
#[inline(never)]
fn prepare(ctx: &XdpContext, cfg: &NodeConfig, frame_len: u32, st: &mut ChainState) -> u32 {
    match try_prepare(ctx, cfg, frame_len, st) {
        Ok(None) => CONTINUE,
        Ok(Some(action)) => action,
        Err(v) => encode(v),
    }
}

/// `Ok(None)`: the hop runs; `Ok(Some(action))`: answered already.
#[inline(always)]
fn try_prepare(
    ctx: &XdpContext,
    cfg: &NodeConfig,
    frame_len: u32,
    st: &mut ChainState,
) -> Result<Option<u32>, Verdict> {
    if let carrier::Carried::Split(_) = carrier::try_parse(ctx, cfg, frame_len, &mut st.req)? {
        // `netdam` tail-calls only for NetDAM requests.
        return Err(Verdict::Pass);
    }
    let req = &st.req;
    let sr_off = req.payload_off - req.hdr.sr_len as u32;
    let mut sr = SrFixed::default();
    if let Err(s) = check_chain_preamble(&req.hdr) {
        count(op_status(Opcode::Chain as u8, s));
        return respond::status_only(ctx, req, s).map(Some);
    }
    // Without peers nobody may be forwarded to or answered: a CHAIN could only relay.
    if cfg.flags & cfg_flags::PEERS_ONLY == 0 {
        return Err(Verdict::Drop(Event::DropChainNoPeers));
    }
    let shape = match load(ctx, sr_off, &mut sr)
        .map_err(|_| Status::BadSr)
        .and_then(|_| check_sr_shape(req.hdr.version, req.hdr.sr_len, &sr))
    {
        Ok(shape) => shape,
        // The origin cannot be trusted yet: the sender gets the answer.
        Err(s) => {
            count(op_status(Opcode::Chain as u8, s));
            return respond::status_only(ctx, req, s).map(Some);
        }
    };
    let origin_be = sr.origin_ip().to_be();
    // The node's own host may originate; any other origin must be a peer.
    if is_unanswerable_source(sr.origin_ip()) || !(origin_be == cfg.ipv4_be || is_peer(origin_be)) {
        return Err(Verdict::Drop(Event::DropBadOrigin));
    }
    st.at = At { sr, shape, sr_off };
    st.done = Done {
        status: Status::Ok as u8,
        payload_len: 0,
        forwards: false,
        next: Segment::default(),
        next_peer: PeerEntry::default(),
        dropped: None,
    };
    Ok(None)
}

// The non-inlined functions return plain codes: an XDP action (< 0x100),
// or a verdict with its event above that (events are counter indices, below
// COUNTER_SLOTS, which the common crate asserts, so each base is that far
// from the next).
const DROP_BASE: u32 = 0x100;
const PASS_COUNTED_BASE: u32 = DROP_BASE + COUNTER_SLOTS;
const PASS: u32 = PASS_COUNTED_BASE + COUNTER_SLOTS;
/// `prepare`: go on with the hop.
const CONTINUE: u32 = PASS + 1;
const UNRESOLVED: u32 = DROP_BASE + Event::DropPeerUnresolved as u32;
const TX_FAILED: u32 = DROP_BASE + Event::DropTxFailed as u32;

#[inline(always)]
fn encode(v: Verdict) -> u32 {
    match v {
        Verdict::Pass => PASS,
        Verdict::PassCounted(e) => PASS_COUNTED_BASE + e as u32,
        Verdict::Drop(e) => DROP_BASE + e as u32,
    }
}

#[inline(always)]
fn decode(code: u32) -> Result<u32, Verdict> {
    let event = |base: u32| Event::from_u32(code - base).unwrap_or(Event::DropTxFailed);
    match code {
        c if c < DROP_BASE => Ok(c),
        c if c < PASS_COUNTED_BASE => Err(Verdict::Drop(event(DROP_BASE))),
        c if c < PASS => Err(Verdict::PassCounted(event(PASS_COUNTED_BASE))),
        _ => Err(Verdict::Pass),
    }
}

/// The final answer of a hop to the origin.
struct Answer {
    status: u8,
    payload_len: u32,
}

/// Offset of segment `i` in the frame.
#[inline(always)]
fn segment_off(sr_off: u32, i: u8) -> u32 {
    sr_off + SR_FIXED_LEN as u32 + SEGMENT_LEN as u32 * (i as u32 & 15)
}

/// Where the packet is in its SR program.
struct At {
    sr: SrFixed,
    shape: SrShape,
    /// Offset of the SR header in the frame.
    sr_off: u32,
}

/// What became of the hop.
struct Done {
    /// OK, or the status the origin gets.
    status: u8,
    /// Payload bytes of what is sent on.
    payload_len: u32,
    /// Whether the packet goes on to `next`; else the origin is answered.
    forwards: bool,
    next: Segment,
    /// The next segment's peer entry (unresolved if none).
    next_peer: PeerEntry,
    /// Neither executed nor answered: dropped for this reason.
    dropped: Option<Event>,
}

/// Checks and runs this node's hop into `done`. Not inlined: the checks'
/// and the vector op's locals get a frame of their own, apart from the
/// parsed request's, on the call chain of the vector callbacks (at most 512
/// bytes of stack along any chain).
#[inline(never)]
fn hop(ctx: &XdpContext, cfg: &NodeConfig, req: &Request, at: &At, done: &mut Done) {
    match try_hop(ctx, cfg, req, &at.sr, at.shape, at.sr_off, done) {
        Ok(payload_len) => {
            done.payload_len = payload_len;
            done.forwards = at.shape.forwards();
        }
        Err(Failure::Status(s)) => done.status = s as u8,
        Err(Failure::Verdict(Verdict::Drop(e) | Verdict::PassCounted(e))) => done.dropped = Some(e),
        Err(Failure::Verdict(Verdict::Pass)) => done.dropped = Some(Event::DropTruncated),
    }
}

/// The hop's checks in section 5 order, then its op. On success: the
/// payload bytes of what is sent. The next segment and its peer entry go
/// into `done` as they are read (one lookup, used again by `forward`).
#[inline(always)]
fn try_hop(
    ctx: &XdpContext,
    cfg: &NodeConfig,
    req: &Request,
    sr: &SrFixed,
    shape: SrShape,
    sr_off: u32,
    done: &mut Done,
) -> Result<u32, Failure> {
    let h = &req.hdr;
    let mut here = Segment::default();
    load(ctx, segment_off(sr_off, shape.idx), &mut here)?;
    let mut next = here;
    if shape.forwards() {
        load(ctx, segment_off(sr_off, shape.idx + 1), &mut next)?;
    }
    // SAFETY: a lookup in a hash map of plain values.
    let next_peer = match shape.forwards() {
        true => unsafe { PEERS.get(next.ip().to_be()) }.copied(),
        false => None,
    };
    let next_is_peer = !shape.forwards() || next_peer.is_some();
    done.next = next;
    done.next_peer = next_peer.unwrap_or_default();
    let me = Me {
        ip: u32::from_be(cfg.ipv4_be),
        port: cfg.port,
    };
    let named = times_named(ctx, sr_off, shape.n, me)?;
    let mut cell_addr = CellAddr::NONE;
    let mut call = 0;
    if h.version == VERSION_2 {
        let mut be = [0u8; SR_CELL_LEN];
        load(ctx, sr_off + trailer_off(shape.n & 15) as u32, &mut be)?;
        let (c, a) = parse_trailer(be);
        call = c;
        cell_addr = CellAddr::at(a);
    }
    // SAFETY: lookups in hash maps of plain values.
    let region = unsafe { REGIONS.get(h.rkey()) };
    let checked = check_hop(
        h,
        sr,
        cell_addr,
        shape,
        &here,
        &next,
        next_is_peer,
        named,
        me,
        cfg.mtu,
        region,
    )?;
    let ready = check_ready(h.version, checked.op, h.tag(), call, readiness(h.rkey()))?;
    if let Ready::Hold = ready {
        let at = Early {
            cell: cell_addr.addr,
            idx: shape.idx,
            origin_port: sr.origin_port(),
            call,
        };
        return match hold(ctx, req, &at) {
            HELD => Err(Status::Held.into()),
            // Raised while the partial went in: the host may have read the
            // cell before it was held, so the origin resends at once and
            // the resend runs (one path less for the verifier than running here).
            RAISED => Err(Status::NotReady.into()),
            _ => Err(Verdict::Drop(Event::DropMemCopyFailed).into()),
        };
    }
    let slot = if hop_needs_window(&checked) {
        let key = SourceKey {
            ip_be: sr.origin_ip().to_be(),
            port_be: sr.origin_port().to_be(),
            hop: shape.idx as u16 + 1,
        };
        match window::claim(&key, h.seq(), cfg.window_per_source) {
            Claimed::Execute(slot) => Some(slot),
            Claimed::Repeat(_) => return Err(Status::Duplicate.into()),
            Claimed::InFlight => return Err(Verdict::Drop(Event::DropInFlight).into()),
            Claimed::Stale => return Err(Status::Stale.into()),
            Claimed::Full => {
                count_event(Event::WindowFull);
                return Err(Status::Stale.into());
            }
            Claimed::SourceFull => {
                count_event(Event::WindowSourceFull);
                return Err(Status::Stale.into());
            }
            Claimed::Retiring => return Err(Verdict::Drop(Event::DropWindowRetiring).into()),
        }
    } else {
        None
    };
    let ran = execute(ctx, req, &checked, sr.dst_addr());
    if let Some(slot) = slot {
        // Also after a failure: a hop that ran at all must never run again.
        window::complete(slot, h.seq(), 0);
    }
    ran?;
    if cell_addr.present && matches!(checked.op, HopOp::Write | HopOp::ReduceWrite) {
        // After the data: a host that reads `done` reads a whole result.
        set_cell_u32(cell_addr.addr + cell::DONE, h.tag());
    }
    if shape.forwards() || checked.op.answer_carries_payload() {
        Ok(h.len() as u32)
    } else {
        Ok(0)
    }
}

/// The region's readiness generation (section 6) and call word (version
/// 2), read afresh.
#[inline(always)]
fn readiness(rkey: u32) -> Readiness {
    // SAFETY: a lookup in a hash map of plain values.
    unsafe { GENERATIONS.get(rkey) }.copied().unwrap_or_default()
}

/// Stores a u32 cell field at `addr` (4-aligned: cells are 8-aligned).
#[inline(always)]
fn set_cell_u32(addr: u64, v: u32) {
    if let Some(w) = memory::word(addr) {
        let half = (addr & 4) as usize;
        // SAFETY: `w` is an 8-aligned word of a map value; `half` is 0 or 4.
        unsafe { core::ptr::write_volatile(w.cast::<u8>().add(half).cast::<u32>(), v) };
    }
}

/// A version-2 REDUCE or REDUCE_WRITE one generation ahead of this node.
struct Early {
    cell: u64,
    idx: u8,
    origin_port: u16,
    call: u32,
}

/// `hold`: the partial is held; the generation was raised meanwhile; the copy failed.
const HELD: u32 = 0;
const RAISED: u32 = 1;
const HOLD_FAILED: u32 = 2;

/// Holds the packet's partial in its cell (PROTOCOL.md version 2): the
/// payload, then seq, idx and origin port, then the call word, then `held`, then a full barrier
/// (an atomic add of 0 to the seq word), so that the second read of the
/// generation comes after the marker, as the host's read of the cell comes
/// after its raise. Not inlined: the copy's loop is verified once.
#[inline(never)]
fn hold(ctx: &XdpContext, req: &Request, at: &Early) -> u32 {
    let h = &req.hdr;
    let c = at.cell;
    if memory::frame_to_mem(ctx, req.payload_off, c + cell::HOLD, h.len() as u32).is_err() {
        return HOLD_FAILED;
    }
    let Some(seq_word) = memory::word(c + cell::HELD_SEQ) else {
        return HOLD_FAILED;
    };
    let word = h.seq() as u64 | (at.idx as u64) << 32 | (at.origin_port as u64) << 48;
    // SAFETY: an 8-aligned word of a map value: seq, idx, 0, origin port, little-endian.
    unsafe { core::ptr::write_volatile(seq_word, word) };
    let Some(call_word) = memory::word(c + cell::HELD_CALL) else {
        return HOLD_FAILED;
    };
    // SAFETY: as above: the call word, then 4 zero bytes.
    unsafe { core::ptr::write_volatile(call_word, at.call as u64) };
    set_cell_u32(c + cell::HELD, h.tag());
    // SAFETY: as above; adding 0 changes nothing but orders.
    unsafe { fetch_add64(seq_word, 0) };
    match readiness(h.rkey()).generation == h.tag() {
        true => RAISED,
        false => HELD,
    }
}

/// How many of the program's `n` segments name this node.
#[inline(always)]
fn times_named(ctx: &XdpContext, sr_off: u32, n: u8, me: Me) -> Result<u32, Failure> {
    let mut named = 0;
    let mut seg = Segment::default();
    for i in 0..MAX_SEGMENTS as u8 {
        if i >= n {
            break;
        }
        load(ctx, segment_off(sr_off, i), &mut seg)?;
        named += seg.names(me) as u32;
    }
    Ok(named)
}

/// The hop op on the payload in the frame and on memory. One call site per
/// helper, so that the verifier walks each once.
#[inline(always)]
fn execute(ctx: &XdpContext, req: &Request, hop: &CheckedHop, dst_addr: u64) -> Result<(), Failure> {
    let h = &req.hdr;
    let len = h.len() as u32;
    if let Some((dtype, alu)) = hop.vector {
        let op = if hop.op == HopOp::Accumulate {
            VectorOp::Accumulate
        } else {
            VectorOp::Reduce
        };
        vector::run(ctx, op, req.payload_off, h.addr(), len, dtype, alu)?;
    }
    if matches!(hop.op, HopOp::Write | HopOp::ReduceWrite) {
        memory::frame_to_mem(ctx, req.payload_off, dst_addr, len)
            .map_err(|_| Failure::Verdict(Verdict::Drop(Event::DropMemCopyFailed)))?;
    }
    Ok(())
}

/// Sends the packet on to `done.next` with SR idx `idx`, from this node to the
/// segment's node. Not inlined (as `answer_origin`): its buffers get their
/// own stack frame, off the call chain of the vector callbacks.
#[inline(never)]
fn forward(ctx: &XdpContext, cfg: &NodeConfig, req: &Request, idx: u8, done: &Done) -> u32 {
    let (next, len) = (&done.next, req.hdr.len() as u32);
    if !done.next_peer.is_resolved() {
        return UNRESOLVED;
    }
    let dmac = done.next_peer.mac;
    let to = Addressing {
        eth_dst: dmac,
        eth_src: cfg.mac,
        ip_src: cfg.ipv4_be.to_ne_bytes(),
        ip_dst: next.ip().to_be_bytes(),
        udp_src: cfg.port.to_be_bytes(),
        udp_dst: next.port().to_be_bytes(),
    };
    let rewrite = Rewrite {
        answer: false,
        status: 0,
        idx,
        payload_len: len,
    };
    if emit(ctx, req, &to, &rewrite) != 0 {
        return TX_FAILED;
    }
    count_event(Event::ChainForwarded);
    xdp_action::XDP_TX
}

/// Answers the origin, keeping the SR header (idx = this hop).
#[inline(never)]
fn answer_origin(ctx: &XdpContext, cfg: &NodeConfig, req: &Request, sr: &SrFixed, answer: &Answer) -> u32 {
    let origin_be = sr.origin_ip().to_be();
    let local = origin_be == cfg.ipv4_be;
    // The origin on this host gets the answer through its stack.
    let dmac = match local {
        true => cfg.mac,
        false => match peer_mac(origin_be) {
            Some(mac) => mac,
            None => return UNRESOLVED,
        },
    };
    let to = Addressing {
        eth_dst: dmac,
        eth_src: cfg.mac,
        ip_src: cfg.ipv4_be.to_ne_bytes(),
        ip_dst: origin_be.to_ne_bytes(),
        udp_src: cfg.port.to_be_bytes(),
        udp_dst: sr.origin_port().to_be_bytes(),
    };
    let rewrite = Rewrite {
        answer: true,
        status: answer.status,
        idx: sr.idx,
        payload_len: answer.payload_len,
    };
    if emit(ctx, req, &to, &rewrite) != 0 {
        return TX_FAILED;
    }
    if local {
        count_event(Event::PassLocalAnswer);
        return xdp_action::XDP_PASS;
    }
    // Peers are reached through the interface the node serves.
    xdp_action::XDP_TX
}

/// What `emit` makes of a CHAIN packet.
struct Rewrite {
    /// A response with `status`; else the request forwarded as it is.
    answer: bool,
    status: u8,
    /// The SR idx it leaves with.
    idx: u8,
    /// Payload bytes kept.
    payload_len: u32,
}

/// Rewrites the frame in place: IPv4 options dropped, carrier addressed by
/// `to`, NetDAM header and SR idx per `r`. Returns 0 or -1. Not inlined: the
/// header buffers get their own stack frame, off the call chain of the
/// vector callbacks.
#[inline(never)]
fn emit(ctx: &XdpContext, req: &Request, to: &Addressing, r: &Rewrite) -> i32 {
    if respond::turn_around(ctx, req).is_err() {
        return -1;
    }
    let mut hdr: NetdamHdr = req.hdr;
    if r.answer {
        hdr.make_response(Status::from_u8(r.status).unwrap_or(Status::Ok), r.payload_len as u16);
    }
    if respond::store_headers(ctx, req, to, &mut hdr, r.payload_len) != 0 {
        return -1;
    }
    let mut idx = r.idx;
    // SAFETY: one byte from the stack into the SR header (idx at offset 1).
    unsafe {
        bpf_xdp_store_bytes(
            ctx.ctx,
            (CARRIER_LEN + HDR_LEN + 1) as u32,
            (&mut idx as *mut u8).cast(),
            1,
        ) as i32
    }
}

/// Whether `ip_be` may be forwarded to or answered: a CHAIN runs only with
/// a peer table, so only a peer.
#[inline(always)]
fn is_peer(ip_be: u32) -> bool {
    // SAFETY: a lookup in a hash map of plain values.
    unsafe { PEERS.get(ip_be) }.is_some()
}
