//! Header split of ordinary UDP datagrams (PROTOCOL.md section 9): the
//! first K payload bytes stay in the frame, the rest goes to the next slot
//! of the split ring in NetDAM memory, a descriptor says where, and the frame
//! goes to the AF_XDP socket. Whatever cannot be served passes untouched.

use aya_ebpf::{
    helpers::generated::{bpf_xdp_adjust_head, bpf_xdp_adjust_tail, bpf_xdp_load_bytes, bpf_xdp_store_bytes},
    programs::XdpContext,
};
use netdam_common::{
    counters::Event,
    split::{generation, split_sizes, stamped_addr, Descriptor, SplitRing, DESCRIPTOR_LEN, STAMP_LEN, UMEM_FRAME_MAX},
    wire::checksum_update16,
};
use network_types::eth::EthHdr;

use crate::{
    atomic::{fetch_add64, xchg64},
    carrier::SplitDatagram,
    handover::{self, frame_len},
    maps::{count_event, SCRATCH, SCRATCH_LEN, SPLIT_RING},
    memory::{self, CopyFailed},
    Verdict,
};

const UNSERVED: Verdict = Verdict::PassCounted(Event::PassSplitUnserved);
const FAILED: Verdict = Verdict::Drop(Event::DropTxFailed);

#[inline(always)]
pub fn run(ctx: &XdpContext, d: &SplitDatagram) -> Result<u32, Verdict> {
    if !handover::has_receiver(ctx) {
        return Err(UNSERVED);
    }
    let shared = SPLIT_RING.get_ptr_mut(0).ok_or(UNSERVED)?;
    // Read once: the controller may rewrite the ring meanwhile, and every
    // decision below must come from one version of it.
    // SAFETY: index 0 of an array map, plain integers.
    let ring = unsafe { core::ptr::read_volatile(shared) };
    let payload_off = d.l4 + 8;
    let payload_len = d.udp_len - 8;
    let (kept, rest) = split_sizes(payload_len, d.keep);
    let new_end = payload_off + kept + DESCRIPTOR_LEN as u32;
    if new_end > UMEM_FRAME_MAX || (rest > 0 && !ring.holds(rest)) {
        return Err(UNSERVED);
    }
    let addr = if rest > 0 {
        // SAFETY: an 8-aligned u64 of a map value, changed only atomically.
        let n = unsafe { fetch_add64(&raw mut (*shared).taken, 1) };
        store_rest(ctx, &ring, n, payload_off + kept, rest).map_err(|_| Verdict::Drop(Event::DropMemCopyFailed))?
    } else {
        0
    };
    let delta = new_end as i32 - frame_len(ctx) as i32;
    // SAFETY: resizes the tail: the rest is already stored; growth stays in the frame's tailroom.
    if delta != 0 && unsafe { bpf_xdp_adjust_tail(ctx.ctx, delta) } != 0 {
        // Too little tailroom (an skb-backed frame): grow at the head instead.
        if delta < 0 {
            return Err(UNSERVED);
        }
        match grow_at_head(ctx, delta as u32, payload_off + kept) {
            Grown::Yes => {}
            Grown::Untouched => return Err(UNSERVED),
            Grown::Broken => return Err(FAILED),
        }
    }
    if rewrite(ctx, d, payload_len, kept, addr) != 0 {
        return Err(FAILED);
    }
    count_event(Event::Split);
    handover::redirect(ctx)
}

/// Stores the `n`-th rest (`rest` bytes at `frame_off`) in its slot; the
/// descriptor's address. With generations the slot's stamp is zeroed
/// before and set after, each with an atomic exchange (a full barrier), so
/// a reader that finds its generation there before and after its copy
/// copied that rest (`split::rebuild`).
#[inline(always)]
fn store_rest(ctx: &XdpContext, ring: &SplitRing, n: u64, frame_off: u32, rest: u32) -> Result<u64, CopyFailed> {
    let slot = ring.slot_addr(n);
    if ring.stamp_len() == 0 {
        memory::frame_to_mem(ctx, frame_off, slot, rest)?;
        return Ok(slot);
    }
    let stamp = memory::word(slot).ok_or(CopyFailed)?;
    let g = generation(n);
    // SAFETY: an 8-aligned word of NetDAM memory (the controller keeps the ring 8-aligned).
    unsafe { xchg64(stamp, 0) };
    memory::frame_to_mem(ctx, frame_off, slot + STAMP_LEN as u64, rest)?;
    // SAFETY: as above.
    unsafe { xchg64(stamp, (g as u64).to_le()) };
    Ok(stamped_addr(slot + STAMP_LEN as u64, g))
}

enum Grown {
    Yes,
    /// Not possible; the frame is as it was.
    Untouched,
    /// Failed half-way; the frame must not go on.
    Broken,
}

/// Makes the frame `delta` bytes longer at the head and moves its first
/// `keep_len` bytes (headers and kept payload) to the new start, so that
/// the descriptor goes where the kept payload ends. Not inlined: its own
/// stack frame.
#[inline(never)]
fn grow_at_head(ctx: &XdpContext, delta: u32, keep_len: u32) -> Grown {
    let Some(buf) = SCRATCH.get_ptr_mut(0) else {
        return Grown::Untouched;
    };
    if keep_len > SCRATCH_LEN as u32 {
        return Grown::Untouched;
    }
    // SAFETY: moves the start into the headroom; the helper checks the room.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, -(delta as i32)) } != 0 {
        return Grown::Untouched;
    }
    let n = netdam_common::verifier::bounded_len(keep_len, SCRATCH_LEN as u32);
    // SAFETY: the per-CPU scratch buffer of SCRATCH_LEN bytes and n <= SCRATCH_LEN.
    let moved = unsafe {
        bpf_xdp_load_bytes(ctx.ctx, delta, buf.cast(), n) == 0 && bpf_xdp_store_bytes(ctx.ctx, 0, buf.cast(), n) == 0
    };
    if moved {
        Grown::Yes
    } else {
        Grown::Broken
    }
}

/// Writes the descriptor and the new lengths. Returns 0 or -1. Not inlined:
/// its buffers get their own stack frame.
#[inline(never)]
fn rewrite(ctx: &XdpContext, d: &SplitDatagram, payload_len: u32, kept: u32, addr: u64) -> i32 {
    let mut desc = Descriptor {
        original_len: payload_len,
        addr,
    }
    .to_bytes();
    let udp_len = (8 + kept + DESCRIPTOR_LEN as u32) as u16;
    let ihl = (d.l4 - EthHdr::LEN as u32) as u16;
    let ip_len = ihl + udp_len;
    let check = checksum_update16(d.ip_check, d.ip_tot_len, ip_len);
    let mut ip_fields = [ip_len.to_be_bytes(), check.to_be_bytes()];
    let mut udp_fields = [udp_len.to_be_bytes(), [0, 0]];
    let ip_off = 14u32;
    // SAFETY: stack buffers of the sizes given; offsets inside the resized frame.
    unsafe {
        if bpf_xdp_store_bytes(
            ctx.ctx,
            d.l4 + 8 + kept,
            desc.as_mut_ptr().cast(),
            DESCRIPTOR_LEN as u32,
        ) != 0
            || bpf_xdp_store_bytes(ctx.ctx, ip_off + 2, ip_fields[0].as_mut_ptr().cast(), 2) != 0
            || bpf_xdp_store_bytes(ctx.ctx, ip_off + 10, ip_fields[1].as_mut_ptr().cast(), 2) != 0
            || bpf_xdp_store_bytes(ctx.ctx, d.l4 + 4, udp_fields.as_mut_ptr().cast(), 4) != 0
        {
            return -1;
        }
    }
    0
}
