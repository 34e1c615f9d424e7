//! Segment routing (PROTOCOL.md section 6): the SR header, the checks a
//! CHAIN hop makes in the order of section 5, and the ring all-reduce
//! program with its fixed chunking.
//!
//! Written once for the XDP chain program, the reference model and the
//! collective engine of the client.

use crate::{
    config::MAX_PAYLOAD,
    region::{perm, Region},
    validate::check_vector_type,
    wire::{Alu, Dtype, NetdamHdr, Opcode, Status, CARRIER_LEN, HDR_LEN, VERSION, VERSION_2},
};

/// Bytes of the SR header before the segments.
pub const SR_FIXED_LEN: usize = 16;
/// Bytes of one segment.
pub const SEGMENT_LEN: usize = 8;
/// Bytes a version-2 SR header has after its segments: the call word, then
/// the chunk's cell address (the trailer).
pub const SR_CELL_LEN: usize = 8;
/// Offset of the call word in the trailer (u32, big-endian).
pub const TRAILER_CALL: usize = 0;
/// Offset of the cell address in the trailer (u32, big-endian: NetDAM
/// memory is at most 2 GiB, `config::MEM_MAX`).
pub const TRAILER_CELL_ADDR: usize = 4;

/// The completion cell of a version-2 CHAIN (docs/PROTOCOL.md, version 2):
/// byte offsets of its fields from `cell_addr`, little-endian in memory.
pub mod cell {
    /// u32: the generation whose result the node stored last.
    pub const DONE: u64 = 0;
    /// u32: the generation of the partial held in `HOLD`.
    pub const HELD: u64 = 4;
    /// u32: seq of the held packet.
    pub const HELD_SEQ: u64 = 8;
    /// u8: SR idx of the held hop.
    pub const HELD_IDX: u64 = 12;
    /// u16: the held packet's origin_port.
    pub const HELD_PORT: u64 = 14;
    /// u32: the held packet's call word (4 zero bytes follow it).
    pub const HELD_CALL: u64 = 16;
    /// The held partial, len bytes.
    pub const HOLD: u64 = 24;
    /// Bytes before the held partial.
    pub const HDR_LEN: u64 = 24;
    /// Alignment of `cell_addr`.
    pub const ALIGN: u64 = 8;
}

/// A version-2 CHAIN's cell address, or none (version 1). A pair, not an
/// `Option`: the XDP verifier refuses to read an `Option`'s unset payload,
/// which the compiler may load anyway. (The trailer's call word goes to
/// readiness, `check_ready`.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CellAddr {
    pub present: bool,
    pub addr: u64,
}

impl CellAddr {
    pub const NONE: CellAddr = CellAddr {
        present: false,
        addr: 0,
    };

    pub const fn at(addr: u64) -> CellAddr {
        CellAddr { present: true, addr }
    }
}

/// Segments an SR header holds at most.
pub const MAX_SEGMENTS: usize = 15;
/// Members of a ring all-reduce at most (its program has 2(N-1) segments).
pub const MAX_RING: usize = 8;
/// Times one node may be named in a program (docs/conformance.md 20): a
/// ring names every member at most twice, and the bound keeps one frame
/// from making a node transmit more than twice (no ping-pong amplifier).
pub const MAX_NAMED: u32 = 2;

/// The first 16 bytes of the SR header, as on the wire.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrFixed {
    pub n: u8,
    pub idx: u8,
    origin_port: [u8; 2],
    origin_ip: [u8; 4],
    dst_addr: [u8; 8],
}

const _: () = assert!(core::mem::size_of::<SrFixed>() == SR_FIXED_LEN);

impl SrFixed {
    pub const fn new(n: u8, idx: u8, origin_ip: u32, origin_port: u16, dst_addr: u64) -> Self {
        SrFixed {
            n,
            idx,
            origin_port: origin_port.to_be_bytes(),
            origin_ip: origin_ip.to_be_bytes(),
            dst_addr: dst_addr.to_be_bytes(),
        }
    }
    pub const fn origin_port(&self) -> u16 {
        u16::from_be_bytes(self.origin_port)
    }
    /// The origin's IPv4 address, host order.
    pub const fn origin_ip(&self) -> u32 {
        u32::from_be_bytes(self.origin_ip)
    }
    pub const fn dst_addr(&self) -> u64 {
        u64::from_be_bytes(self.dst_addr)
    }
    /// Reads the fixed part from the start of `b`; `None` if shorter than 16 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b = b.get(..SR_FIXED_LEN)?;
        Some(SrFixed {
            n: b[0],
            idx: b[1],
            origin_port: [b[2], b[3]],
            origin_ip: [b[4], b[5], b[6], b[7]],
            dst_addr: b[8..16].try_into().ok()?,
        })
    }
    pub fn to_bytes(&self) -> [u8; SR_FIXED_LEN] {
        let mut b = [0u8; SR_FIXED_LEN];
        b[0] = self.n;
        b[1] = self.idx;
        b[2..4].copy_from_slice(&self.origin_port);
        b[4..8].copy_from_slice(&self.origin_ip);
        b[8..16].copy_from_slice(&self.dst_addr);
        b
    }
}

/// One segment: a node (IPv4, port) and the op it runs, as on the wire.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    ip: [u8; 4],
    port: [u8; 2],
    pub op: u8,
    /// Zero in version 1, ignored.
    pub seg_flags: u8,
}

const _: () = assert!(core::mem::size_of::<Segment>() == SEGMENT_LEN);

impl Segment {
    pub const fn new(ip: u32, port: u16, op: HopOp) -> Self {
        Segment {
            ip: ip.to_be_bytes(),
            port: port.to_be_bytes(),
            op: op as u8,
            seg_flags: 0,
        }
    }
    /// IPv4 address, host order.
    pub const fn ip(&self) -> u32 {
        u32::from_be_bytes(self.ip)
    }
    pub const fn port(&self) -> u16 {
        u16::from_be_bytes(self.port)
    }
    /// Whether the segment names node `me` (section 6: its IPv4 address and P).
    #[inline(always)]
    pub const fn names(&self, me: Me) -> bool {
        self.ip() == me.ip && self.port() == me.port
    }
    /// Reads a segment from the start of `b`; `None` if shorter than 8 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b = b.get(..SEGMENT_LEN)?;
        Some(Segment {
            ip: [b[0], b[1], b[2], b[3]],
            port: [b[4], b[5]],
            op: b[6],
            seg_flags: b[7],
        })
    }
    pub fn to_bytes(&self) -> [u8; SEGMENT_LEN] {
        [
            self.ip[0],
            self.ip[1],
            self.ip[2],
            self.ip[3],
            self.port[0],
            self.port[1],
            self.op,
            self.seg_flags,
        ]
    }
}

/// The ops a hop can run (section 6).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HopOp {
    Nop = 0x00,
    Write = 0x01,
    Accumulate = 0x03,
    Reduce = 0x07,
    ReduceWrite = 0x0B,
}

impl HopOp {
    pub const ALL: &'static [HopOp] = &[
        HopOp::Nop,
        HopOp::Write,
        HopOp::Accumulate,
        HopOp::Reduce,
        HopOp::ReduceWrite,
    ];

    #[inline(always)]
    pub const fn from_u8(v: u8) -> Option<Self> {
        match v {
            0x00 => Some(HopOp::Nop),
            0x01 => Some(HopOp::Write),
            0x03 => Some(HopOp::Accumulate),
            0x07 => Some(HopOp::Reduce),
            0x0B => Some(HopOp::ReduceWrite),
            _ => None,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            HopOp::Nop => "NOP",
            HopOp::Write => "WRITE",
            HopOp::Accumulate => "ACCUMULATE",
            HopOp::Reduce => "REDUCE",
            HopOp::ReduceWrite => "REDUCE_WRITE",
        }
    }

    /// Whether the hop combines the payload with memory (needs dtype and alu).
    pub const fn is_vector(self) -> bool {
        matches!(self, HopOp::Accumulate | HopOp::Reduce | HopOp::ReduceWrite)
    }

    /// Permissions the hop needs (section 3).
    pub const fn perms(self) -> u32 {
        match self {
            HopOp::Nop => 0,
            HopOp::Write => perm::WRITE,
            HopOp::Reduce => perm::READ,
            HopOp::ReduceWrite => perm::READ | perm::WRITE,
            HopOp::Accumulate => perm::ATOMIC,
        }
    }

    /// Whether the final answer carries the payload (last hop REDUCE or NOP).
    pub const fn answer_carries_payload(self) -> bool {
        matches!(self, HopOp::Reduce | HopOp::Nop)
    }
}

/// Bytes of the SR header of a CHAIN of `version` with `n` segments.
pub const fn sr_len_of(version: u8, n: usize) -> usize {
    SR_FIXED_LEN
        + SEGMENT_LEN * n
        + match version {
            VERSION_2 => SR_CELL_LEN,
            _ => 0,
        }
}

/// Offset of a version-2 SR header's trailer (call word, cell address)
/// from the header's start.
pub const fn trailer_off(n: u8) -> usize {
    SR_FIXED_LEN + SEGMENT_LEN * n as usize
}

/// A version-2 trailer's (call word, cell address), from its 8 bytes.
pub const fn parse_trailer(b: [u8; SR_CELL_LEN]) -> (u32, u64) {
    let call = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let cell_addr = u32::from_be_bytes([b[4], b[5], b[6], b[7]]) as u64;
    (call, cell_addr)
}

/// A version-2 trailer's 8 bytes.
pub const fn trailer_bytes(call: u32, cell_addr: u32) -> [u8; SR_CELL_LEN] {
    let c = call.to_be_bytes();
    let a = cell_addr.to_be_bytes();
    [c[0], c[1], c[2], c[3], a[0], a[1], a[2], a[3]]
}

/// Where a CHAIN packet's SR header says it is, once its shape is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrShape {
    pub n: u8,
    pub idx: u8,
}

impl SrShape {
    /// Whether the hop at `idx` forwards (another segment follows).
    pub const fn forwards(&self) -> bool {
        self.idx + 1 < self.n
    }
}

/// The first CHAIN checks, on the NetDAM header alone: version, opcode and
/// sr_len (section 5 order). Failures here are answered to the sender.
#[inline(always)]
pub fn check_chain_preamble(h: &NetdamHdr) -> Result<(), Status> {
    if h.version != VERSION && h.version != VERSION_2 {
        return Err(Status::BadVersion);
    }
    if h.opcode != Opcode::Chain as u8 {
        return Err(Status::BadOpcode);
    }
    crate::validate::check_sr_len(Opcode::Chain, h.sr_len)
}

/// The SR header's own consistency: n matches sr_len (of the CHAIN's
/// `version`) and idx < n. The origin cannot be trusted before this holds,
/// so a failure is answered to the sender.
#[inline(always)]
pub fn check_sr_shape(version: u8, sr_len: u8, sr: &SrFixed) -> Result<SrShape, Status> {
    let n = sr.n as usize;
    if n == 0 || n > MAX_SEGMENTS || sr_len_of(version, n) != sr_len as usize || sr.idx >= sr.n {
        return Err(Status::BadSr);
    }
    Ok(SrShape { n: sr.n, idx: sr.idx })
}

/// This node, as segments name nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Me {
    /// IPv4, host order.
    pub ip: u32,
    pub port: u16,
}

/// What the remaining checks established about a hop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckedHop {
    pub op: HopOp,
    /// dtype and alu for vector hops.
    pub vector: Option<(Dtype, Alu)>,
}

/// Everything a hop checks after the SR shape, in section 5 order, except
/// readiness and the window: the segment names this node, its op is known,
/// the next segment is a peer on port P and not this node again, and the
/// program names this node at most MAX_NAMED times (BAD_SR); dtype and alu
/// (BAD_DTYPE); length (BAD_LENGTH, TOO_LARGE); alignment (MISALIGNED);
/// rkey, permission and both ranges, for every hop op including NOP
/// (docs/conformance.md 20). `next_is_peer` is whether the next segment's
/// node may be forwarded to (true at the last segment); `times_named` is
/// how many of the program's segments name this node. `cell_addr`: a
/// version-2 CHAIN's cell, aligned (MISALIGNED) and with room for the held
/// partial inside the region (OUT_OF_BOUNDS) for every hop but NOP.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn check_hop(
    h: &NetdamHdr,
    sr: &SrFixed,
    cell_addr: CellAddr,
    shape: SrShape,
    here: &Segment,
    next: &Segment,
    next_is_peer: bool,
    times_named: u32,
    me: Me,
    mtu: u32,
    region: Option<&Region>,
) -> Result<CheckedHop, Status> {
    if !here.names(me) {
        return Err(Status::BadSr);
    }
    let op = match HopOp::from_u8(here.op) {
        Some(op) => op,
        None => return Err(Status::BadSr),
    };
    // A segment on another port names no NetDAM node of this fabric: the
    // packet would be relayed to some other service of a peer.
    if shape.forwards() && (!next_is_peer || next.port() != me.port || next.ip() == me.ip) {
        return Err(Status::BadSr);
    }
    if times_named > MAX_NAMED {
        return Err(Status::BadSr);
    }
    let vector = if op.is_vector() {
        Some(check_vector_type(h.dtype, h.alu)?)
    } else {
        None
    };
    let len = h.len() as u32;
    if len == 0 {
        return Err(Status::BadLength);
    }
    // The forwarded packet and the answer are never larger than the request.
    let ip_len = (CARRIER_LEN - 14 + HDR_LEN) as u32 + h.sr_len as u32 + len;
    if len as usize > MAX_PAYLOAD || ip_len > mtu {
        return Err(Status::TooLarge);
    }
    if let Some((dtype, _)) = vector {
        let w = dtype.width();
        if !(h.addr() as u32).is_multiple_of(w) || !len.is_multiple_of(w) {
            return Err(Status::Misaligned);
        }
    }
    let has_cell = cell_addr.present && !matches!(op, HopOp::Nop);
    if has_cell && !cell_addr.addr.is_multiple_of(cell::ALIGN) {
        return Err(Status::Misaligned);
    }
    // NOP too: a key is what makes a node forward a stranger's bytes.
    let region = match region {
        Some(r) => r,
        None => return Err(Status::BadKey),
    };
    if !region.permits(op.perms()) {
        return Err(Status::Forbidden);
    }
    if !region.contains(h.addr(), len as u64) || !region.contains(sr.dst_addr(), len as u64) {
        return Err(Status::OutOfBounds);
    }
    if has_cell && !region.contains(cell_addr.addr, cell::HDR_LEN + len as u64) {
        return Err(Status::OutOfBounds);
    }
    Ok(CheckedHop { op, vector })
}

/// What readiness lets a hop do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ready {
    /// Run the hop (tag equals the generation, or a NOP).
    Run,
    /// Version 2, tag one past the generation, REDUCE or REDUCE_WRITE: hold
    /// the partial in the cell until this node's host contributes.
    Hold,
}

/// Readiness (section 6; version 2 in docs/PROTOCOL.md). Version 1: a hop
/// other than NOP runs only if tag equals the region's generation; a later
/// tag is NOT_READY, an earlier one STALE. Version 2 also holds a REDUCE or
/// REDUCE_WRITE one ahead (WRITE, ACCUMULATE: NOT_READY), and a hop at the
/// generation whose trailer's `call` differs from the region's is MISMATCH
/// (its member runs another call: count, type or operator). `call` is
/// ignored in version 1.
#[inline(always)]
pub const fn check_ready(version: u8, op: HopOp, tag: u32, call: u32, now: Readiness) -> Result<Ready, Status> {
    let generation = now.generation;
    if matches!(op, HopOp::Nop) {
        return Ok(Ready::Run);
    }
    if tag == generation {
        if version == VERSION_2 && call != now.call {
            return Err(Status::Mismatch);
        }
        return Ok(Ready::Run);
    }
    if version == VERSION_2
        && generation != u32::MAX
        && tag == generation + 1
        && matches!(op, HopOp::Reduce | HopOp::ReduceWrite)
    {
        return Ok(Ready::Hold);
    }
    if tag > generation {
        Err(Status::NotReady)
    } else {
        Err(Status::Stale)
    }
}

/// A region's readiness (section 6, and version 2's call word): what its
/// host set last, together, when it raised the generation. The value of
/// the node's generations map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    pub generation: u32,
    /// The call the host contributed to at `generation` (version 2); 0 when
    /// raised without one.
    pub call: u32,
}

impl Readiness {
    pub const fn new(generation: u32, call: u32) -> Self {
        Readiness { generation, call }
    }
}

/// The call word of a ring all-reduce of `count` elements of `dtype` under
/// `alu`: what every member must agree on, folded into 32 bits. Equal calls
/// give equal words; unequal ones give unequal words but for a chance of
/// 2^-32 (the bits are mixed, so counts one apart or 2^32 apart differ too).
pub const fn ring_call_word(count: u64, dtype: Dtype, alu: Alu) -> u32 {
    // splitmix64's finalizer over the three arguments.
    let mut z = count
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(((dtype as u64) << 8 | alu as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z ^ (z >> 32)) as u32
}

/// Whether a hop runs through the at-most-once window (section 7): the
/// non-idempotent ACCUMULATE with ADD or XOR.
#[inline(always)]
pub const fn hop_needs_window(h: &CheckedHop) -> bool {
    matches!((h.op, h.vector), (HopOp::Accumulate, Some((_, Alu::Add | Alu::Xor))))
}

/// Bytes of the SR header of a ring all-reduce of `members` nodes: a
/// version-2 CHAIN (docs/PROTOCOL.md, version 2), which the engine sends.
pub const fn ring_sr_len(members: usize) -> usize {
    sr_len_of(VERSION_2, 2 * (members - 1))
}

/// Bytes from one chunk's cell to the next in the cell area of a ring of
/// `members` at `mtu`: the cell's head and room for the largest chunk any
/// dtype has there (MTU - 60 - sr_len), rounded up to the cell's alignment.
/// The group's, not the call's: calls of other dtypes and counts find their
/// cells at the same addresses, so a partial held for the next call never
/// lands on a head of this one's.
pub const fn ring_cell_stride(mtu: u32, members: usize) -> u64 {
    let room = mtu as u64 - 60 - ring_sr_len(members) as u64;
    cell::HDR_LEN + room.next_multiple_of(cell::ALIGN)
}

/// Elements per chunk packet of the version-2 ring: as many as fit
/// (MTU - 60 - sr_len bytes), rounded down to whole 8-byte words, so that
/// every chunk of an 8-aligned vector starts 8-aligned and the nodes fold
/// its 4-byte elements two to a word (section 6 of version 1 has
/// floor((MTU - 60 - sr_len) / w), which is odd for 4-byte elements at MTU
/// 3498 and 9000: every other chunk then took the element-wise path).
pub const fn ring_chunk_elems(mtu: u32, members: usize, width: u32) -> u32 {
    let room = mtu - 60 - ring_sr_len(members) as u32;
    if room < 8 {
        return room / width;
    }
    room / 8 * 8 / width
}

/// The member that originates chunk `k`: k mod N.
pub const fn ring_originator(chunk: u32, members: usize) -> usize {
    chunk as usize % members
}

/// The hop op of segment `i` of the ring program of `members` nodes:
/// REDUCE N-2 times, REDUCE_WRITE, then WRITE N-1 times.
pub const fn ring_hop(i: usize, members: usize) -> HopOp {
    if i + 2 < members {
        HopOp::Reduce
    } else if i + 2 == members {
        HopOp::ReduceWrite
    } else {
        HopOp::Write
    }
}

/// The member that segment `i` of originator `o`'s version-2 ring program
/// names: o+1, ..., o+N-1, then o+1, ..., o+N-2, o (mod N). The WRITE pass
/// ends at the originator's own node, so the last hop's answer is handed to
/// the originator's stack there and crosses no link (version 1's section 6
/// writes o, ..., o+N-2, whose last node answers across the fabric).
pub const fn ring_member(origin: usize, i: usize, members: usize) -> usize {
    if i < members - 1 {
        (origin + 1 + i) % members
    } else if i + 1 < 2 * (members - 1) {
        (origin + 1 + i - (members - 1)) % members
    } else {
        origin
    }
}

/// The result a ring all-reduce (section 6) must produce, for checking one:
/// `inputs` holds one little-endian vector per member in group order, each
/// covering the same elements as `out`, and `first_elem` is the index of
/// `out`'s first element in the whole vector (so a large result can be
/// checked a window at a time). Element e of chunk k = e / chunk_elems is
/// ((x_o + x_(o+1)) + ...) + x_(o+N-1) with o = k mod N, `+` being `alu`:
/// the order the ring's REDUCE hops fold it in, which fixes the f32 bits.
pub fn ring_result(dtype: Dtype, alu: Alu, inputs: &[&[u8]], chunk_elems: u32, first_elem: u64, out: &mut [u8]) {
    let n = inputs.len();
    let w = dtype.width() as u64;
    let e = chunk_elems.max(1) as u64;
    let mut at = 0usize;
    while at < out.len() {
        // The run of `out` inside one chunk.
        let elem = first_elem + at as u64 / w;
        let chunk = elem / e;
        let run = (((chunk + 1) * e - elem) * w).min((out.len() - at) as u64) as usize;
        let origin = (chunk % n as u64) as usize;
        let span = at..at + run;
        out[span.clone()].copy_from_slice(&inputs[origin][span.clone()]);
        for j in 1..n {
            crate::alu::combine_into(
                dtype,
                alu,
                &mut out[span.clone()],
                &inputs[(origin + j) % n][span.clone()],
            );
        }
        at += run;
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    #[test]
    fn sr_fixed_layout_is_the_wire_layout() {
        let s = SrFixed::new(3, 1, 0xC612_0001, 0x1234, 0x0102_0304_0506_0708);
        // SAFETY: repr(C) of byte arrays, 16 bytes.
        let b: [u8; 16] = unsafe { core::mem::transmute(s) };
        assert_eq!(b, [3, 1, 0x12, 0x34, 0xC6, 0x12, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(s.to_bytes(), b);
        assert_eq!(SrFixed::from_bytes(&b), Some(s));
        let g = Segment::new(0xC612_0002, 4793, HopOp::ReduceWrite);
        // SAFETY: as above, 8 bytes.
        let b: [u8; 8] = unsafe { core::mem::transmute(g) };
        assert_eq!(b, [0xC6, 0x12, 0, 2, 0x12, 0xB9, 0x0B, 0]);
        assert_eq!(g.to_bytes(), b);
        assert_eq!(Segment::from_bytes(&b), Some(g));
    }

    #[test]
    fn ring_program_is_the_version_2_ring() {
        // N = 4, origin 1: 2:REDUCE 3:REDUCE 0:REDUCE_WRITE 2:WRITE 3:WRITE 1:WRITE
        let members: [usize; 6] = core::array::from_fn(|i| ring_member(1, i, 4));
        let ops: [HopOp; 6] = core::array::from_fn(|i| ring_hop(i, 4));
        assert_eq!(members, [2, 3, 0, 2, 3, 1]);
        use HopOp::*;
        assert_eq!(ops, [Reduce, Reduce, ReduceWrite, Write, Write, Write]);
        // N = 3, origin 2: 0:REDUCE 1:REDUCE_WRITE 0:WRITE 2:WRITE.
        let three: [usize; 4] = core::array::from_fn(|i| ring_member(2, i, 3));
        assert_eq!(three, [0, 1, 0, 2]);
        // N = 2: o+1:REDUCE_WRITE, o:WRITE.
        assert_eq!([ring_member(0, 0, 2), ring_member(0, 1, 2)], [1, 0]);
        // Every member is written once, the originator last.
        for n in 2..=MAX_RING {
            for o in 0..n {
                let mut written = [0u8; MAX_RING];
                for i in n - 1..2 * (n - 1) {
                    written[ring_member(o, i, n)] += 1;
                }
                written[(o + n - 1) % n] += 1; // REDUCE_WRITE
                assert!(written[..n].iter().all(|&w| w == 1), "n {n} o {o}");
                assert_eq!(ring_member(o, 2 * (n - 1) - 1, n), o);
            }
        }
        assert_eq!([ring_hop(0, 2), ring_hop(1, 2)], [ReduceWrite, Write]);
        // The largest ring fits 15 segments.
        const { assert!(2 * (MAX_RING - 1) <= MAX_SEGMENTS) };
        assert_eq!(ring_chunk_elems(1500, 4, 4), (1500 - 60 - 72) / 4);
        // Whole 8-byte words: 3498 and 9000 leave an odd number of 4-byte elements.
        assert_eq!(ring_chunk_elems(3498, 4, 4), 840);
        assert_eq!(ring_chunk_elems(9000, 4, 4), 2216);
        assert_eq!(ring_chunk_elems(9000, 4, 8), 1108);
        assert_eq!(ring_chunk_elems(9000, 8, 4), (9000 - 60 - 136) / 8 * 2);
    }

    #[test]
    fn shape_and_readiness() {
        let sr = SrFixed::new(2, 1, 1, 1, 0);
        assert_eq!(check_sr_shape(VERSION, 32, &sr), Ok(SrShape { n: 2, idx: 1 }));
        assert_eq!(check_sr_shape(VERSION, 40, &sr), Err(Status::BadSr));
        // Version 2: the cell address follows the segments.
        assert_eq!(check_sr_shape(VERSION_2, 40, &sr), Ok(SrShape { n: 2, idx: 1 }));
        assert_eq!(check_sr_shape(VERSION_2, 32, &sr), Err(Status::BadSr));
        assert_eq!(
            check_sr_shape(VERSION, 32, &SrFixed::new(2, 2, 1, 1, 0)),
            Err(Status::BadSr)
        );
        assert_eq!(
            check_sr_shape(VERSION, 16, &SrFixed::new(0, 0, 1, 1, 0)),
            Err(Status::BadSr)
        );
        use Ready::*;
        let at = |g| Readiness::new(g, 9);
        for v in [VERSION, VERSION_2] {
            assert_eq!(check_ready(v, HopOp::Reduce, 5, 9, at(5)), Ok(Run));
            assert_eq!(check_ready(v, HopOp::Nop, 4, 9, at(5)), Ok(Run));
            assert_eq!(check_ready(v, HopOp::Reduce, 7, 9, at(5)), Err(Status::NotReady));
            assert_eq!(check_ready(v, HopOp::Write, 3, 9, at(5)), Err(Status::Stale));
        }
        assert_eq!(check_ready(VERSION, HopOp::Reduce, 6, 9, at(5)), Err(Status::NotReady));
        assert_eq!(check_ready(VERSION, HopOp::Write, 4, 9, at(5)), Err(Status::Stale));
        // Version 2: one ahead holds REDUCE and REDUCE_WRITE only; one behind is STALE as in version 1.
        assert_eq!(check_ready(VERSION_2, HopOp::Reduce, 6, 9, at(5)), Ok(Hold));
        assert_eq!(check_ready(VERSION_2, HopOp::ReduceWrite, 6, 9, at(5)), Ok(Hold));
        assert_eq!(check_ready(VERSION_2, HopOp::Write, 6, 9, at(5)), Err(Status::NotReady));
        assert_eq!(
            check_ready(VERSION_2, HopOp::Accumulate, 6, 9, at(5)),
            Err(Status::NotReady)
        );
        for op in [HopOp::Reduce, HopOp::ReduceWrite, HopOp::Write, HopOp::Accumulate] {
            assert_eq!(check_ready(VERSION_2, op, 4, 9, at(5)), Err(Status::Stale));
            // The call word: compared at the generation only, in version 2 only, never for NOP.
            assert_eq!(check_ready(VERSION_2, op, 5, 8, at(5)), Err(Status::Mismatch));
            assert_eq!(check_ready(VERSION, op, 5, 8, at(5)), Ok(Run));
            assert_eq!(check_ready(VERSION_2, op, 4, 8, at(5)), Err(Status::Stale));
        }
        assert_eq!(check_ready(VERSION_2, HopOp::Reduce, 6, 8, at(5)), Ok(Hold));
        assert_eq!(check_ready(VERSION_2, HopOp::Nop, 5, 8, at(5)), Ok(Run));
        // No wrap-around at either end.
        assert_eq!(
            check_ready(VERSION_2, HopOp::Reduce, u32::MAX, 9, at(0)),
            Err(Status::NotReady)
        );
        assert_eq!(
            check_ready(VERSION_2, HopOp::Reduce, 0, 9, at(u32::MAX)),
            Err(Status::Stale)
        );
    }

    #[test]
    fn call_words_differ_for_different_calls() {
        let w = |c, d, a| ring_call_word(c, d, a);
        let base = w(1000, Dtype::I32, Alu::Add);
        assert_eq!(base, w(1000, Dtype::I32, Alu::Add));
        assert_ne!(base, w(1001, Dtype::I32, Alu::Add));
        assert_ne!(base, w(1000 + (1 << 32), Dtype::I32, Alu::Add));
        assert_ne!(base, w(1000, Dtype::F32, Alu::Add));
        assert_ne!(base, w(1000, Dtype::U32, Alu::Add));
        assert_ne!(base, w(1000, Dtype::I32, Alu::Max));
        // No two of a small sweep of calls share a word.
        let mut all = Vec::new();
        for count in 1..300u64 {
            for d in Dtype::ALL {
                for a in [Alu::Add, Alu::Min, Alu::Max] {
                    all.push(w(count, *d, a));
                }
            }
        }
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
    }

    #[test]
    fn trailer_layout() {
        let b = trailer_bytes(0x0102_0304, 0x0A0B_0C0D);
        assert_eq!(b, [1, 2, 3, 4, 0x0A, 0x0B, 0x0C, 0x0D]);
        assert_eq!(parse_trailer(b), (0x0102_0304, 0x0A0B_0C0D));
    }

    #[test]
    fn cells_and_the_version_2_ring() {
        assert_eq!(sr_len_of(VERSION_2, 6), 16 + 48 + 8);
        assert_eq!(trailer_off(6), 64);
        assert_eq!(ring_sr_len(4), 72);
        assert_eq!(ring_cell_stride(1500, 4), 24 + 1368);
        // Room 1379: i32 chunks of 1376 bytes, u64 of 1376, f32 of 1376; the stride covers any.
        assert_eq!(ring_cell_stride(1499, 3), 24 + 1384);
    }

    #[test]
    fn hop_checks_in_order() {
        let me = Me {
            ip: 0xC612_0002,
            port: 4793,
        };
        let rw = Region {
            base: 0,
            size: 4096,
            perms: perm::ALL,
            _reserved: 0,
        };
        let mut h = NetdamHdr::request(Opcode::Chain);
        h.sr_len = 32;
        h.set_len(8);
        h.dtype = Dtype::I32 as u8;
        h.alu = Alu::Add as u8;
        let sr = SrFixed::new(2, 0, 0xC612_0001, 40000, 64);
        let shape = check_sr_shape(VERSION, 32, &sr).unwrap();
        let here = Segment::new(me.ip, me.port, HopOp::ReduceWrite);
        let next = Segment::new(0xC612_0001, 4793, HopOp::Write);
        let check = |h: &NetdamHdr, here: &Segment, next: &Segment, peer: bool, r: Option<&Region>| {
            check_hop(h, &sr, CellAddr::NONE, shape, here, next, peer, 1, me, 1500, r)
        };
        assert!(check(&h, &here, &next, true, Some(&rw)).is_ok());
        assert_eq!(check(&h, &here, &next, false, Some(&rw)), Err(Status::BadSr));
        assert_eq!(check(&h, &here, &here, true, Some(&rw)), Err(Status::BadSr));
        let elsewhere = Segment::new(me.ip + 5, me.port, HopOp::Reduce);
        assert_eq!(check(&h, &elsewhere, &next, true, Some(&rw)), Err(Status::BadSr));
        let mut bad_op = here;
        bad_op.op = 0x02;
        assert_eq!(check(&h, &bad_op, &next, true, Some(&rw)), Err(Status::BadSr));
        let mut hd = h;
        hd.alu = Alu::Xor as u8;
        hd.dtype = Dtype::F32 as u8;
        assert_eq!(check(&hd, &here, &next, true, None), Err(Status::BadDtype));
        let mut hl = h;
        hl.set_len(6);
        assert_eq!(check(&hl, &here, &next, true, Some(&rw)), Err(Status::Misaligned));
        hl.set_len(0);
        assert_eq!(check(&hl, &here, &next, true, Some(&rw)), Err(Status::BadLength));
        hl.set_len(1500);
        assert_eq!(check(&hl, &here, &next, true, Some(&rw)), Err(Status::TooLarge));
        assert_eq!(check(&h, &here, &next, true, None), Err(Status::BadKey));
        let ro = Region {
            perms: perm::READ,
            ..rw
        };
        assert_eq!(check(&h, &here, &next, true, Some(&ro)), Err(Status::Forbidden));
        let small = Region { size: 64, ..rw };
        // dst_addr 64 + 8 bytes is past a 64-byte region although [0, 8) is inside.
        assert_eq!(check(&h, &here, &next, true, Some(&small)), Err(Status::OutOfBounds));
        // A next segment on another port than P is BAD_SR, even at a peer.
        let other_port = Segment::new(0xC612_0001, 53, HopOp::Write);
        assert_eq!(check(&h, &here, &other_port, true, Some(&rw)), Err(Status::BadSr));
        // A program may name this node twice (a ring does), not three times.
        let named = |times: u32| {
            check_hop(
                &h,
                &sr,
                CellAddr::NONE,
                shape,
                &here,
                &next,
                true,
                times,
                me,
                1500,
                Some(&rw),
            )
        };
        assert!(named(2).is_ok());
        assert_eq!(named(3), Err(Status::BadSr));
        // NOP needs a key and in-bounds ranges but no permission; WRITE needs no dtype.
        let nop = Segment::new(me.ip, me.port, HopOp::Nop);
        assert_eq!(check(&h, &nop, &next, true, None), Err(Status::BadKey));
        assert_eq!(check(&h, &nop, &next, true, Some(&small)), Err(Status::OutOfBounds));
        let none = Region { perms: 0, ..rw };
        assert!(check(&h, &nop, &next, true, Some(&none)).is_ok());
        let mut hw = h;
        hw.dtype = 0;
        let write = Segment::new(me.ip, me.port, HopOp::Write);
        assert!(check(&hw, &write, &next, true, Some(&rw)).is_ok());
        // Version 2's cell: aligned, with room for the held partial, except for NOP.
        let cell = |c: u64, here: &Segment, r: &Region| {
            check_hop(&h, &sr, CellAddr::at(c), shape, here, &next, true, 1, me, 1500, Some(r))
        };
        assert!(cell(4096 - 32, &here, &rw).is_ok());
        assert_eq!(cell(4096 - 28, &here, &rw), Err(Status::Misaligned));
        assert_eq!(cell(4096 - 24, &here, &rw), Err(Status::OutOfBounds));
        assert!(cell(4096 - 28, &nop, &rw).is_ok());
        assert!(cell(u32::MAX as u64, &nop, &rw).is_ok());
    }
    #[test]
    fn ring_result_folds_in_the_ring_order_of_each_chunk() {
        // f32 addition is not associative: 1e8 + 1 rounds back to 1e8.
        let x: [f32; 3] = [1e8, 1.0, -1e8];
        let bytes: Vec<[u8; 12]> = x
            .iter()
            .map(|v| {
                let mut b = [0u8; 12];
                for e in 0..3 {
                    b[e * 4..e * 4 + 4].copy_from_slice(&v.to_le_bytes());
                }
                b
            })
            .collect();
        let inputs: Vec<&[u8]> = bytes.iter().map(|b| &b[..]).collect();
        let mut out = [0u8; 12];
        // One element per chunk: element k starts at member k mod 3.
        ring_result(Dtype::F32, Alu::Add, &inputs, 1, 0, &mut out);
        let got: Vec<f32> = out
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        // (1e8 + 1) - 1e8 = 0; (1 - 1e8) + 1e8 = 0; (-1e8 + 1e8) + 1 = 1.
        assert_eq!(got, [0.0, 0.0, 1.0]);
        // A window of the same result: elements 1 and 2 only.
        let mut tail = [0u8; 8];
        let shifted: Vec<&[u8]> = bytes.iter().map(|b| &b[4..]).collect();
        ring_result(Dtype::F32, Alu::Add, &shifted, 1, 1, &mut tail);
        assert_eq!(tail, out[4..]);
        // Two elements per chunk: both elements of chunk 0 start at member 0.
        ring_result(Dtype::F32, Alu::Add, &inputs, 2, 0, &mut out);
        let got: Vec<f32> = out
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, [0.0, 0.0, 0.0]);
        // 64-bit integers: signed MIN across members.
        let a = (-5i64).to_le_bytes();
        let b = 3i64.to_le_bytes();
        let mut m = [0u8; 8];
        ring_result(Dtype::I64, Alu::Min, &[&a[..], &b[..]], 4, 0, &mut m);
        assert_eq!(i64::from_le_bytes(m), -5);
    }
}
