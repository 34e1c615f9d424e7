//! Per-CPU counters of the data path: one per (opcode, status) of the
//! requests it validated, then one per reason a frame was dropped or handed on.

use crate::wire::{Opcode, Status};

pub const STATUS_SLOTS: u32 = 16;
/// Opcode slots: 0x00..=0x09 by value, CHAIN, then every unknown opcode.
pub const OP_SLOTS: u32 = 12;
const CHAIN_SLOT: u32 = 10;
const UNKNOWN_SLOT: u32 = 11;

/// Index of the counter of requests with `opcode` that ended with `status`.
#[inline(always)]
pub const fn op_status(opcode: u8, status: Status) -> u32 {
    let slot = match opcode {
        0x00..=0x09 => opcode as u32,
        0x10 => CHAIN_SLOT,
        _ => UNKNOWN_SLOT,
    };
    slot * STATUS_SLOTS + status as u32
}

/// Frames that were not executed as requests, by reason.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Too short for its UDP, NetDAM or SR header, or UDP length past the frame.
    DropTruncated = OP_SLOTS * STATUS_SLOTS,
    DropBadMagic,
    /// `len` says more payload than the datagram holds.
    DropLenPastDatagram,
    /// A first IP fragment to port P.
    DropFragment,
    /// A source that is never answered (0/8, 127/8, multicast, broadcast).
    DropBadSource,
    /// The peer table is not empty and the source is not in it.
    DropNotPeer,
    DropBadChecksum,
    /// A RESP packet handed to the host.
    PassResponse,
    /// An answer could not be built in place (a helper failed).
    DropTxFailed,
    /// An idempotent ACCUMULATE lost its compare-and-swap to other CPUs 64
    /// times on one element and was answered NOT_READY (the sender retries).
    CasContended,
    /// A repeat of a non-idempotent request whose first copy is still executing.
    DropInFlight,
    /// A non-idempotent request from a new source while the window table is full (answered STALE).
    WindowFull,
}

impl Event {
    pub const ALL: &'static [Event] = &[
        Event::DropTruncated,
        Event::DropBadMagic,
        Event::DropLenPastDatagram,
        Event::DropFragment,
        Event::DropBadSource,
        Event::DropNotPeer,
        Event::DropBadChecksum,
        Event::PassResponse,
        Event::DropTxFailed,
        Event::CasContended,
        Event::DropInFlight,
        Event::WindowFull,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Event::DropTruncated => "drop_truncated",
            Event::DropBadMagic => "drop_bad_magic",
            Event::DropLenPastDatagram => "drop_len_past_datagram",
            Event::DropFragment => "drop_fragment",
            Event::DropBadSource => "drop_bad_source",
            Event::DropNotPeer => "drop_not_peer",
            Event::DropBadChecksum => "drop_bad_checksum",
            Event::PassResponse => "pass_response",
            Event::DropTxFailed => "drop_tx_failed",
            Event::CasContended => "cas_contended",
            Event::DropInFlight => "drop_in_flight",
            Event::WindowFull => "window_full",
        }
    }
}

/// Entries of the counter map.
pub const COUNTER_SLOTS: u32 = 256;
const _: () = assert!((Event::WindowFull as u32) < COUNTER_SLOTS);

/// Name of the opcode that owns op-counter `slot` (0..OP_SLOTS).
pub fn op_slot_name(slot: u32) -> &'static str {
    match slot {
        CHAIN_SLOT => Opcode::Chain.name(),
        UNKNOWN_SLOT => "unknown",
        s => match Opcode::from_u8(s as u8) {
            Some(op) => op.name(),
            None => "unknown",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_distinct_and_in_range() {
        let mut seen = [false; COUNTER_SLOTS as usize];
        for op in 0u8..=255 {
            for s in Status::ALL {
                let i = op_status(op, *s);
                assert!(i < Event::DropTruncated as u32);
                seen[i as usize] = true;
            }
        }
        for e in Event::ALL {
            assert!(!seen[*e as usize]);
            seen[*e as usize] = true;
        }
        assert_eq!(op_slot_name(1), "WRITE");
        assert_eq!(op_slot_name(10), "CHAIN");
        assert_eq!(op_status(0x42, Status::BadOpcode), op_status(0xFF, Status::BadOpcode));
    }
}
