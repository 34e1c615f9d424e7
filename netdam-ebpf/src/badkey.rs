//! The per-source BAD_KEY limit (`--bad-key-limit`, docs/conformance.md 21).
//! BAD_KEY tells a sender that a guessed rkey is wrong, so each source IPv4
//! address gets at most `NodeConfig::bad_key_limit` of them a second;
//! beyond it the request is dropped (`bad_key_limited`) and the source is
//! locked out: every request from it is dropped (`drop_bad_key_lockout`)
//! until its bucket refills, right keys too, or an answered right guess
//! would still tell silence from success.

use aya_ebpf::{bindings::BPF_NOEXIST, helpers::generated::bpf_ktime_get_ns};
use netdam_common::{
    config::{BadKeyBucket, BAD_KEY_DRY_WATCH_NS},
    NodeConfig,
};

use crate::maps::{BAD_KEY, BAD_KEY_DRY};

/// Whether a BAD_KEY answer to the source `src_be` (IPv4, network order)
/// is within the limit; takes it from the source's bucket if so, and notes
/// the time when that leaves the bucket dry (`locked_out` looks sources up
/// only within a second after). CPUs update a bucket without a lock: a race lets an answer more
/// or fewer through, never a flood. Not inlined: its bucket gets a stack
/// frame of its own (the verifier's 512 bytes along a call chain).
#[inline(never)]
pub fn allowed(cfg: &NodeConfig, src_be: u32) -> bool {
    let limit = cfg.bad_key_limit;
    if limit == 0 {
        return true;
    }
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let (ok, dry) = match BAD_KEY.get_ptr_mut(src_be) {
        // SAFETY: a live value of the map (plain integers).
        Some(b) => unsafe { ((*b).take(now, limit), (*b).dry(now, limit)) },
        None => {
            let mut b = BadKeyBucket::full(now);
            let ok = b.take(now, limit);
            // Another CPU may have inserted this source meanwhile: NOEXIST leaves its bucket alone.
            let _ = BAD_KEY.insert(src_be, b, BPF_NOEXIST as u64);
            (ok, b.dry(now, limit))
        }
    };
    if dry {
        if let Some(dry) = BAD_KEY_DRY.get_ptr_mut(0) {
            // SAFETY: index 0 of an array map; a plain u64 any CPU may overwrite.
            unsafe { *dry = now };
        }
    }
    ok
}

/// Whether the source `src_be` is locked out: its bucket is dry. Costs an
/// array read while no bucket has run dry for a second, a hash lookup
/// after one has.
#[inline(always)]
pub fn locked_out(cfg: &NodeConfig, src_be: u32) -> bool {
    let limit = cfg.bad_key_limit;
    let last_dry = BAD_KEY_DRY.get(0).copied().unwrap_or(0);
    if limit == 0 || last_dry == 0 {
        return false;
    }
    bucket_dry(limit, last_dry, src_be)
}

/// `locked_out`'s lookup. Not inlined: kept out of the parser's frame.
#[inline(never)]
fn bucket_dry(limit: u32, last_dry: u64, src_be: u32) -> bool {
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    if now.wrapping_sub(last_dry) > BAD_KEY_DRY_WATCH_NS {
        return false;
    }
    // SAFETY: a lookup in a hash map of plain values.
    unsafe { BAD_KEY.get(src_be) }.is_some_and(|b| b.dry(now, limit))
}
