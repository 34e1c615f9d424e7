//! The at-most-once window (PROTOCOL.md section 7) in the data path.

use aya_ebpf::{bindings::BPF_NOEXIST, helpers::generated::bpf_ktime_get_ns};
use netdam_common::window::{judge, state, tag, Slot, SourceKey, Verdict, SLOTS};

use crate::{
    atomic::cmpxchg64,
    maps::{WINDOWS, ZERO_WINDOW},
};

/// What a non-idempotent request may do.
pub enum Claimed {
    /// Execute, then `complete` the slot.
    Execute(*mut Slot),
    /// Already executed: answer with the stored old value.
    Repeat(u64),
    /// The first copy is still executing on another CPU: drop this one.
    InFlight,
    /// A later seq holds the slot: STALE.
    Stale,
    /// The window table is full: STALE, not executed.
    Full,
}

#[inline(always)]
pub fn claim(source: &SourceKey, seq: u32) -> Claimed {
    let win = match WINDOWS.get_ptr_mut(source) {
        Some(w) => w,
        None => {
            let Some(zero) = ZERO_WINDOW.get_ptr(0) else {
                return Claimed::Full;
            };
            // SAFETY: `zero` is the never-written zero window; another CPU may
            // have inserted the same source meanwhile, which NOEXIST leaves alone.
            let _ = WINDOWS.insert(source, unsafe { &*zero }, BPF_NOEXIST as u64);
            match WINDOWS.get_ptr_mut(source) {
                Some(w) => w,
                None => return Claimed::Full,
            }
        }
    };
    // SAFETY: `win` is a live map value; the slot index is masked into the array.
    unsafe {
        (*win).last_used_ns = bpf_ktime_get_ns();
        let slot: *mut Slot = &mut (*win).slots[seq as usize & (SLOTS - 1)];
        for _ in 0..4 {
            let t = core::ptr::addr_of!((*slot).tag).read_volatile();
            match judge(t, seq) {
                Verdict::Claim => {
                    if cmpxchg64(core::ptr::addr_of_mut!((*slot).tag), t, tag(seq, state::EXECUTING)) == t {
                        return Claimed::Execute(slot);
                    }
                }
                Verdict::Repeat => return Claimed::Repeat(core::ptr::addr_of!((*slot).old).read_volatile()),
                Verdict::InFlight => return Claimed::InFlight,
                Verdict::Stale => return Claimed::Stale,
            }
        }
    }
    // Four lost claims in a row: others are busy with this slot; the sender retries.
    Claimed::InFlight
}

/// Records the old value and marks the seq executed, unless a newer seq took the slot meanwhile.
#[inline(always)]
pub fn complete(slot: *mut Slot, seq: u32, old: u64) {
    // SAFETY: `slot` came from `claim`; the old value is written before the
    // tag says DONE, and cmpxchg is a full barrier.
    unsafe {
        core::ptr::addr_of_mut!((*slot).old).write_volatile(old);
        cmpxchg64(
            core::ptr::addr_of_mut!((*slot).tag),
            tag(seq, state::EXECUTING),
            tag(seq, state::DONE),
        );
    }
}
