//! The testbed's chaos element (`netdam_common::chaos`): a tc egress program
//! on the switch side of each testbed link. It drops, duplicates and
//! reorders a configured fraction of NetDAM frames; everything else passes.
//!
//! Reordering needs no delay line: a frame chosen to be held is copied into
//! this link's slot and dropped; the next frame that goes out on the link
//! is cloned out first, and then the skb itself is rewritten into the held
//! frame, which so leaves behind it.

use aya_ebpf::{
    bindings::{TC_ACT_OK, TC_ACT_SHOT},
    helpers::generated::{bpf_clone_redirect, bpf_skb_change_tail, bpf_skb_load_bytes, bpf_skb_store_bytes},
    macros::map,
    maps::{Array, HashMap, PerCpuArray},
    programs::TcContext,
};
use netdam_common::{
    chaos::{stat, xorshift, ChaosConfig, Fate, Held, CHAOS_MARK, HELD_MAX},
    wire::{ETH_P_IPV4, IPPROTO_UDP},
};

use netdam_common::verifier::bounded_len;

#[map(name = "CHAOS_CONFIG")]
static CONFIG: Array<ChaosConfig> = Array::with_max_entries(1, 0);

/// Each CPU's xorshift state, seeded by the testbed.
#[map(name = "CHAOS_RNG")]
static RNG: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// One held frame per link, keyed by the egress ifindex. The testbed sizes
/// the map and inserts an empty slot per link (a value this large cannot
/// be built on the BPF stack).
#[map(name = "CHAOS_HELD")]
static HELD: HashMap<u32, Held> = HashMap::with_max_entries(1, 0);

#[map(name = "CHAOS_STATS")]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::SLOTS, 0);

#[inline(always)]
fn bump(slot: u32) {
    if let Some(c) = STATS.get_ptr_mut(slot) {
        // SAFETY: this CPU's counter.
        unsafe { *c += 1 };
    }
}

/// The verdict for one frame; a frame it cannot parse passes.
#[inline(always)]
pub fn run(ctx: &TcContext) -> i32 {
    try_run(ctx).unwrap_or(TC_ACT_OK)
}

#[inline(always)]
fn try_run(ctx: &TcContext) -> Result<i32, ()> {
    let skb = ctx.skb.skb;
    // SAFETY: the program's own __sk_buff; mark is writable from tc.
    unsafe {
        if (*skb).mark == CHAOS_MARK {
            (*skb).mark = 0;
            return Ok(TC_ACT_OK);
        }
    }
    let cfg = CONFIG.get(0).ok_or(())?;
    if !is_netdam(ctx, cfg.port)? {
        return Ok(TC_ACT_OK);
    }
    bump(stat::SEEN);
    let state = RNG.get_ptr_mut(0).ok_or(())?;
    // SAFETY: this CPU's state.
    let r = xorshift(unsafe { &mut *state });
    // SAFETY: as above.
    let ifindex = unsafe { (*skb).ifindex };
    // A lookup of this link's slot; only this link's egress path uses it.
    let held = HELD.get_ptr_mut(ifindex);
    match cfg.fate(r) {
        Fate::Drop => {
            bump(stat::DROPPED);
            return Ok(TC_ACT_SHOT);
        }
        Fate::Duplicate => {
            if clone_out(ctx, ifindex) == 0 {
                bump(stat::DUPLICATED);
            }
        }
        Fate::Hold => {
            if let Some(h) = held {
                // SAFETY: the slot's value, valid while the program runs.
                if unsafe { (*h).len } == 0 && hold(ctx, h) == 0 {
                    bump(stat::HELD);
                    return Ok(TC_ACT_SHOT);
                }
            }
        }
        Fate::Pass => {}
    }
    if let Some(h) = held {
        // SAFETY: as above.
        if unsafe { (*h).len } != 0 && release(ctx, h, ifindex) == 0 {
            bump(stat::RELEASED);
        }
    }
    Ok(TC_ACT_OK)
}

/// UDP over IPv4 to or from port P.
#[inline(always)]
fn is_netdam(ctx: &TcContext, port: u16) -> Result<bool, ()> {
    let ethertype = u16::from_be(ctx.load::<u16>(12).map_err(|_| ())?);
    if ethertype != ETH_P_IPV4 {
        return Ok(false);
    }
    let ver_ihl: u8 = ctx.load(14).map_err(|_| ())?;
    let proto: u8 = ctx.load(14 + 9).map_err(|_| ())?;
    if proto != IPPROTO_UDP {
        return Ok(false);
    }
    let l4 = 14 + ((ver_ihl & 0x0F) as usize) * 4;
    let ports: [u8; 4] = ctx.load(l4).map_err(|_| ())?;
    let p = port.to_be_bytes();
    Ok(ports[0..2] == p || ports[2..4] == p)
}

/// Sends a copy of the frame out of `ifindex`, marked so it passes. 0 on success.
#[inline(always)]
fn clone_out(ctx: &TcContext, ifindex: u32) -> i64 {
    let skb = ctx.skb.skb;
    // SAFETY: the program's own __sk_buff; the clone carries the mark, the original has it cleared.
    unsafe {
        (*skb).mark = CHAOS_MARK;
        let r = bpf_clone_redirect(skb, ifindex, 0);
        (*skb).mark = 0;
        r
    }
}

/// Copies the frame into the empty slot `h`. 0 on success.
#[inline(always)]
fn hold(ctx: &TcContext, h: *mut Held) -> i64 {
    let len = ctx.len();
    if len == 0 || len as usize > HELD_MAX {
        return -1;
    }
    // SAFETY: len is within the slot's buffer (checked above); the helper reads the skb.
    unsafe {
        let r = bpf_skb_load_bytes(
            ctx.skb.skb.cast(),
            0,
            (*h).data.as_mut_ptr().cast(),
            bounded_len(len, HELD_MAX as u32),
        );
        if r == 0 {
            (*h).len = len;
        }
        r
    }
}

/// Sends this frame out first (a marked clone), then turns the skb into
/// the held frame of slot `h`, which leaves when the program returns. 0 on success.
#[inline(always)]
fn release(ctx: &TcContext, h: *mut Held, ifindex: u32) -> i64 {
    let skb = ctx.skb.skb;
    // SAFETY: the slot's value; its len was set by `hold` and is at most HELD_MAX.
    let len = unsafe { (*h).len };
    if len == 0 || len as usize > HELD_MAX {
        return -1;
    }
    if clone_out(ctx, ifindex) != 0 {
        return -1;
    }
    // SAFETY: resizing and rewriting the program's own skb from the slot's bytes, len bounded above.
    unsafe {
        (*h).len = 0;
        if bpf_skb_change_tail(skb, len, 0) != 0 {
            return -1;
        }
        bpf_skb_store_bytes(
            skb.cast(),
            0,
            (*h).data.as_ptr().cast(),
            bounded_len(len, HELD_MAX as u32),
            0,
        )
    }
}
