//! The at-most-once window of PROTOCOL.md section 7: per source, 1024 slots,
//! slot = seq mod 1024, each holding the last seq that claimed it, its state
//! and the old value an atomic returned.

/// Slots per source (section 7).
pub const SLOTS: usize = 1024;

/// `Slot::tag` low bits: the state of the seq in the high 32 bits.
pub mod state {
    pub const EMPTY: u64 = 0;
    pub const EXECUTING: u64 = 1;
    pub const DONE: u64 = 2;
    pub const MASK: u64 = 3;
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slot {
    /// seq << 32 | state, swapped atomically.
    pub tag: u64,
    /// What an atomic returned (little-endian), for the answers to repeats.
    pub old: u64,
}

/// Key of the window table: a source (network-order IPv4 and UDP port) and,
/// for CHAIN hops, which hop (section 7 keys those by origin and idx).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SourceKey {
    pub ip_be: u32,
    pub port_be: u16,
    /// 0 for plain requests; idx + 1 for the hop at segment idx of a CHAIN.
    pub hop: u16,
}

/// Value of the window table.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// bpf_ktime_get_ns() of the source's last non-idempotent request; the
    /// controller removes windows idle for longer than --window-idle.
    pub last_used_ns: u64,
    pub slots: [Slot; SLOTS],
}

impl Default for Window {
    fn default() -> Self {
        Window {
            last_used_ns: 0,
            slots: [Slot::default(); SLOTS],
        }
    }
}

/// RFC 1982 serial-number order on 32 bits: `a` comes before `b`.
#[inline(always)]
pub const fn serial_lt(a: u32, b: u32) -> bool {
    a != b && (b.wrapping_sub(a) as i32) > 0
}

/// What a request finds in its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Empty or an earlier seq: claim it and execute.
    Claim,
    /// The same seq, executed: a repeat.
    Repeat,
    /// The same seq, still executing on another CPU: drop the repeat.
    InFlight,
    /// A later seq holds the slot: STALE, not executed.
    Stale,
}

/// The section 7 rule for a request with `seq` and the slot's `tag`.
#[inline(always)]
pub const fn judge(tag: u64, seq: u32) -> Verdict {
    let st = tag & state::MASK;
    let held = (tag >> 32) as u32;
    if st == state::EMPTY || serial_lt(held, seq) {
        Verdict::Claim
    } else if held == seq {
        if st == state::EXECUTING {
            Verdict::InFlight
        } else {
            Verdict::Repeat
        }
    } else {
        Verdict::Stale
    }
}

#[inline(always)]
pub const fn tag(seq: u32, st: u64) -> u64 {
    (seq as u64) << 32 | st
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_order_wraps() {
        assert!(serial_lt(1, 2));
        assert!(!serial_lt(2, 1));
        assert!(!serial_lt(5, 5));
        assert!(serial_lt(u32::MAX, 0));
        assert!(serial_lt(0xFFFF_FF00, 0x10));
        assert!(!serial_lt(0x10, 0xFFFF_FF00));
        assert!(serial_lt(0, 0x7FFF_FFFF));
        // 2^31 apart is undefined in RFC 1982; here it counts as not earlier.
        assert!(!serial_lt(0, 0x8000_0000));
    }

    #[test]
    fn the_section_7_rule() {
        assert_eq!(judge(0, 7), Verdict::Claim);
        assert_eq!(judge(tag(7u32.wrapping_sub(1024), state::DONE), 7), Verdict::Claim);
        assert_eq!(judge(tag(7, state::DONE), 7), Verdict::Repeat);
        assert_eq!(judge(tag(7, state::EXECUTING), 7), Verdict::InFlight);
        assert_eq!(judge(tag(7 + 1024, state::DONE), 7), Verdict::Stale);
        // An earlier seq still executing is taken over: the slot belongs to the newer seq.
        assert_eq!(judge(tag(7u32.wrapping_sub(1024), state::EXECUTING), 7), Verdict::Claim);
        assert_eq!(core::mem::size_of::<Window>(), 8 + 16 * SLOTS);
    }
}
