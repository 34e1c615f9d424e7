//! The at-most-once window (PROTOCOL.md section 7) in the data path, the
//! cap on windows per source IPv4 address (--window-per-source) and the
//! two-phase idle sweep (docs/conformance.md 12).
//!
//! A preallocated hash map reuses a deleted element at once, so a pointer
//! from a lookup may point at another key's value by the time it is used.
//! Where that matters the key is looked up again after the atomic step
//! (`window_of`, `reserve`): the element is still the key's, or the request
//! is dropped (`Claimed::Retiring`) and its retransmission starts afresh.

use core::ptr::{addr_of, addr_of_mut};

use aya_ebpf::{
    bindings::{xdp_action, BPF_NOEXIST},
    cty::c_void,
    helpers::generated::{bpf_for_each_map_elem, bpf_ktime_get_ns, bpf_xdp_load_bytes, bpf_xdp_store_bytes},
    programs::XdpContext,
};
use netdam_common::window::{
    expiry, judge, state, sweep_step, tag, Slot, SourceKey, SweepFrame, SweepStep, Verdict, Window, COUNT_REMOVING,
    SLOTS,
};

use crate::{
    atomic::{cmpxchg64, fetch_add64, xchg64},
    maps::{WINDOWS, WINDOW_IPS, ZERO_WINDOW},
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
    /// The source's IPv4 address holds --window-per-source windows: STALE, not executed.
    SourceFull,
    /// The sweep is removing the source's window (or its address's count)
    /// at this instant: dropped, not executed; the sender retransmits.
    Retiring,
}

#[inline(always)]
pub fn claim(source: &SourceKey, seq: u32, per_source: u32) -> Claimed {
    let win = match window_of(source, per_source) {
        Ok(w) => w,
        Err(refused) => return refused,
    };
    // SAFETY: `win` is the source's live map value; the slot index is masked into the array.
    unsafe {
        let slot: *mut Slot = &mut (*win).slots[seq as usize & (SLOTS - 1)];
        for _ in 0..4 {
            let t = addr_of!((*slot).tag).read_volatile();
            match judge(t, seq) {
                Verdict::Claim => {
                    if cmpxchg64(addr_of_mut!((*slot).tag), t, tag(seq, state::EXECUTING)) == t {
                        return Claimed::Execute(slot);
                    }
                }
                Verdict::Repeat => return Claimed::Repeat(addr_of!((*slot).old).read_volatile()),
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
        addr_of_mut!((*slot).old).write_volatile(old);
        cmpxchg64(
            addr_of_mut!((*slot).tag),
            tag(seq, state::EXECUTING),
            tag(seq, state::DONE),
        );
    }
}

/// The source's window, made if new, and kept from the sweep: its last use
/// stamped and its expiry mark cleared.
#[inline(always)]
fn window_of(source: &SourceKey, per_source: u32) -> Result<*mut Window, Claimed> {
    let win = match WINDOWS.get_ptr_mut(source) {
        Some(w) => w,
        None => insert(source, per_source)?,
    };
    // SAFETY: a map value (or one removed since the lookup: checked below).
    // The stamp is an atomic store, a full barrier: a sweep that marks the
    // window after this reads the new time, so the sweep after that does not
    // find it idle (docs/conformance.md 12).
    let mut e = unsafe {
        xchg64(addr_of_mut!((*win).last_used_ns), bpf_ktime_get_ns());
        addr_of!((*win).expiry).read_volatile()
    };
    if e == expiry::MARKED {
        // SAFETY: as above. Races the sweep's MARKED -> REMOVING: one wins.
        e = match unsafe { cmpxchg64(addr_of_mut!((*win).expiry), expiry::MARKED, expiry::LIVE) } {
            expiry::MARKED => expiry::LIVE,
            seen => seen,
        };
    }
    if e != expiry::LIVE || WINDOWS.get_ptr_mut(source) != Some(win) {
        return Err(Claimed::Retiring);
    }
    Ok(win)
}

/// Inserts the window of a new source, within its address's cap.
#[inline(always)]
fn insert(source: &SourceKey, per_source: u32) -> Result<*mut Window, Claimed> {
    let zero = ZERO_WINDOW.get_ptr(0).ok_or(Claimed::Full)?;
    let count = reserve(source.ip_be, per_source)?;
    // SAFETY: `zero` is the never-written zero window. By reference: by value
    // it would be a 16 KiB copy on the 512-byte BPF stack.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let inserted = WINDOWS.insert(source, unsafe { &*zero }, BPF_NOEXIST as u64);
    if inserted.is_err() {
        // The table is full, or another CPU inserted this source first (its
        // reservation counts the window).
        // SAFETY: `count` holds our reservation, so nobody removes it.
        unsafe { fetch_add64(count, u64::MAX) };
    }
    WINDOWS.get_ptr_mut(source).ok_or(Claimed::Full)
}

/// Takes one of the `per_source` windows of `ip_be`: an atomic add, so two
/// CPUs never both take the last one. Returns the count that holds it.
#[inline(always)]
fn reserve(ip_be: u32, per_source: u32) -> Result<*mut u64, Claimed> {
    let count = match WINDOW_IPS.get_ptr_mut(ip_be) {
        Some(c) => c,
        None => {
            // NOEXIST: another CPU may have made it meanwhile.
            let _ = WINDOW_IPS.insert(ip_be, 0, BPF_NOEXIST as u64);
            WINDOW_IPS.get_ptr_mut(ip_be).ok_or(Claimed::Full)?
        }
    };
    // SAFETY: a map value (or one removed since the lookup: checked below).
    let before = unsafe { fetch_add64(count, 1) };
    if before >= COUNT_REMOVING {
        // At 0 and being removed by the sweep, which deletes it whatever we add.
        return Err(Claimed::Retiring);
    }
    if WINDOW_IPS.get_ptr_mut(ip_be) != Some(count) {
        // Removed and reused for another address since the lookup: give it back.
        // SAFETY: as above.
        unsafe { fetch_add64(count, u64::MAX) };
        return Err(Claimed::Retiring);
    }
    if before >= per_source as u64 {
        // SAFETY: `count` is ip_be's, held by our reservation until this.
        unsafe { fetch_add64(count, u64::MAX) };
        return Err(Claimed::SourceFull);
    }
    Ok(count)
}

/// The sweep's state, the context of its map callbacks.
#[repr(C)]
struct Sweeping {
    frame: SweepFrame,
    now_ns: u64,
}

/// One sweep (the controller runs it through BPF_PROG_TEST_RUN with a
/// `SweepFrame`): every window, then every windows-per-IP count. XDP_PASS
/// with the frame's counts filled in; XDP_ABORTED if a helper failed.
#[inline(always)]
pub fn sweep(ctx: &XdpContext) -> u32 {
    let mut given = SweepFrame::default();
    let len = SweepFrame::LEN as u32;
    // SAFETY: a helper that copies from this program's frame to our stack.
    if unsafe { bpf_xdp_load_bytes(ctx.ctx, 0, addr_of_mut!(given) as *mut c_void, len) } != 0 {
        return xdp_action::XDP_ABORTED;
    }
    let mut s = Sweeping {
        frame: SweepFrame {
            idle_ns: given.idle_ns,
            ..SweepFrame::default()
        },
        // SAFETY: a helper without arguments.
        now_ns: unsafe { bpf_ktime_get_ns() },
    };
    let s_ptr = addr_of_mut!(s);
    let windows = addr_of!(WINDOWS) as *mut c_void;
    let ips = addr_of!(WINDOW_IPS) as *mut c_void;
    // SAFETY: the callbacks get `s` only while bpf_for_each_map_elem runs;
    // the store copies from our stack to this program's frame.
    unsafe {
        if bpf_for_each_map_elem(windows, sweep_window as *mut c_void, s_ptr as *mut c_void, 0) < 0
            || bpf_for_each_map_elem(ips, sweep_ip as *mut c_void, s_ptr as *mut c_void, 0) < 0
            || bpf_xdp_store_bytes(ctx.ctx, 0, addr_of_mut!((*s_ptr).frame) as *mut c_void, len) != 0
        {
            return xdp_action::XDP_ABORTED;
        }
    }
    xdp_action::XDP_PASS
}

/// Marks an idle live window; removes a window still marked and idle, and
/// gives its address the window back (`sweep_step`).
unsafe extern "C" fn sweep_window(_map: *mut c_void, key: *mut SourceKey, win: *mut Window, s: *mut Sweeping) -> i64 {
    // SAFETY: the kernel's key and value of a live element and our Sweeping.
    unsafe {
        let s = &mut *s;
        let last = addr_of!((*win).last_used_ns).read_volatile();
        let st = addr_of!((*win).expiry).read_volatile();
        let e = addr_of_mut!((*win).expiry);
        match sweep_step(st, s.now_ns.saturating_sub(last) > s.frame.idle_ns) {
            SweepStep::Keep => {}
            SweepStep::Mark => {
                if cmpxchg64(e, expiry::LIVE, expiry::MARKED) == expiry::LIVE {
                    s.frame.marked += 1;
                }
            }
            SweepStep::Remove => {
                // A request that clears the mark first keeps the window.
                if st == expiry::MARKED && cmpxchg64(e, expiry::MARKED, expiry::REMOVING) != expiry::MARKED {
                    return 0;
                }
                let key = *key;
                if WINDOWS.remove(key).is_ok() {
                    s.frame.removed += 1;
                    if let Some(count) = WINDOW_IPS.get_ptr_mut(key.ip_be) {
                        // Held by the window just removed, so not being removed itself.
                        fetch_add64(count, u64::MAX);
                    }
                }
            }
        }
    }
    0
}

/// Removes the count of an address that holds no window any more (0 ->
/// COUNT_REMOVING -> deleted; one found COUNT_REMOVING, whose delete
/// failed before, is deleted again). Only the sweep removes counts, so no
/// other CPU deletes a newer entry of the same address meanwhile.
unsafe extern "C" fn sweep_ip(_map: *mut c_void, key: *mut u32, count: *mut u64, _s: *mut Sweeping) -> i64 {
    // SAFETY: the kernel's key and value of a live element.
    unsafe {
        let n = count.read_volatile();
        if (n == 0 && cmpxchg64(count, 0, COUNT_REMOVING) == 0) || n >= COUNT_REMOVING {
            let _ = WINDOW_IPS.remove(*key);
        }
    }
    0
}
