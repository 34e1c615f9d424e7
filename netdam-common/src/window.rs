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

/// `Window::expiry`: where a window is in its two-phase expiry
/// (docs/conformance.md 12). The sweep moves an idle window LIVE -> MARKED,
/// and at a later sweep, still idle, MARKED -> REMOVING and deletes it; the
/// data path moves MARKED -> LIVE whenever it uses the window, and uses no
/// window it finds REMOVING. Each move is one compare-and-swap.
pub mod expiry {
    pub const LIVE: u64 = 0;
    pub const MARKED: u64 = 1;
    pub const REMOVING: u64 = 2;
}

/// Value of the window table.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// bpf_ktime_get_ns() of the source's last non-idempotent request; the
    /// sweep removes windows idle for longer than --window-idle.
    pub last_used_ns: u64,
    /// `expiry::*`.
    pub expiry: u64,
    pub slots: [Slot; SLOTS],
}

impl Default for Window {
    fn default() -> Self {
        Window {
            last_used_ns: 0,
            expiry: expiry::LIVE,
            slots: [Slot::default(); SLOTS],
        }
    }
}

/// The sweep sets this on a windows-per-IP count at 0 before it deletes
/// the entry: a reservation that meets it is dropped, the sender retries.
pub const COUNT_REMOVING: u64 = 1 << 63;

/// The frame the controller hands the sweep program (`netdam_window_sweep`,
/// BPF_PROG_TEST_RUN): the idle time in, what the sweep did out.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepFrame {
    /// Windows unused for longer than this are marked, and removed at the
    /// sweep after if still unused.
    pub idle_ns: u64,
    /// Windows marked by this sweep.
    pub marked: u32,
    /// Windows removed by this sweep.
    pub removed: u32,
}

// BPF_PROG_TEST_RUN wants at least an Ethernet header's 14 bytes.
const _: () = assert!(SweepFrame::LEN >= 14);

impl SweepFrame {
    pub const LEN: usize = core::mem::size_of::<SweepFrame>();

    /// The frame's bytes as the (little-endian) program reads them.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        b[..8].copy_from_slice(&self.idle_ns.to_le_bytes());
        b[8..12].copy_from_slice(&self.marked.to_le_bytes());
        b[12..].copy_from_slice(&self.removed.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8; Self::LEN]) -> SweepFrame {
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        SweepFrame {
            idle_ns: u64::from(word(0)) | u64::from(word(4)) << 32,
            marked: word(8),
            removed: word(12),
        }
    }
}

/// What the sweep does with a window whose `expiry` is `state`, unused for
/// longer than the idle time or not (`idle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepStep {
    /// Used within the idle time: left alone.
    Keep,
    /// LIVE -> MARKED.
    Mark,
    /// MARKED -> REMOVING, then deleted. A window found REMOVING (its
    /// delete failed at an earlier sweep) is deleted whether idle or not:
    /// the data path uses it no more.
    Remove,
}

#[inline(always)]
pub const fn sweep_step(state: u64, idle: bool) -> SweepStep {
    if state == expiry::REMOVING {
        SweepStep::Remove
    } else if !idle {
        SweepStep::Keep
    } else if state == expiry::LIVE {
        SweepStep::Mark
    } else {
        SweepStep::Remove
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
        assert_eq!(core::mem::size_of::<Window>(), 16 + 16 * SLOTS);
    }

    #[test]
    fn expiry_takes_two_idle_sweeps() {
        use expiry::*;
        assert_eq!(sweep_step(LIVE, false), SweepStep::Keep);
        assert_eq!(sweep_step(MARKED, false), SweepStep::Keep);
        assert_eq!(sweep_step(LIVE, true), SweepStep::Mark);
        assert_eq!(sweep_step(MARKED, true), SweepStep::Remove);
        assert_eq!(sweep_step(REMOVING, true), SweepStep::Remove);
        assert_eq!(sweep_step(REMOVING, false), SweepStep::Remove);
        let f = SweepFrame {
            idle_ns: 0x0102_0304_0506_0708,
            marked: 9,
            removed: 0x0A0B_0C0D,
        };
        assert_eq!(SweepFrame::from_bytes(&f.to_bytes()), f);
        assert_eq!(f.to_bytes()[0], 8);
    }
}
