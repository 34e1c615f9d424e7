//! Per-CPU counters of the data path: one per (opcode, status) of the
//! requests it validated, then one per reason a frame was dropped or handed on.

use crate::wire::{Opcode, Status};

/// Status counter slots per opcode: room for the statuses to come, so that
/// a new status does not move the event counters after them.
pub const STATUS_SLOTS: u32 = 32;
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
    /// An answer or a forward could not be built in place (a helper failed).
    DropTxFailed,
    /// An idempotent ACCUMULATE lost its compare-and-swap to other CPUs 64
    /// times on one element and was answered NOT_READY (the sender retries).
    CasContended,
    /// A repeat of a non-idempotent request whose first copy is still executing.
    DropInFlight,
    /// A non-idempotent request from a new source while the window table is full (answered STALE).
    WindowFull,
    /// A CHAIN whose origin is never answered or, with a peer table, is not a peer.
    DropBadOrigin,
    /// A CHAIN packet to forward or answer to a peer with no MAC bound yet
    /// (the controller has not resolved it); the origin retransmits.
    DropPeerUnresolved,
    /// A CHAIN packet forwarded to its next segment.
    ChainForwarded,
    /// A CHAIN answer to an origin on this very host, handed to its stack.
    PassLocalAnswer,
    /// An MSG larger than a UMEM frame (`split::UMEM_FRAME_MAX`): dropped, not truncated.
    DropTooLargeForUmem,
    /// A datagram to a split port, split and handed to the AF_XDP socket.
    Split,
    /// A datagram to a split port passed untouched: no AF_XDP socket on its
    /// queue, no ring, or the kept part too large for a UMEM frame.
    PassSplitUnserved,
    /// A datagram to port P from a peer's IPv4 address whose Ethernet source
    /// is not the MAC bound to that peer (or no MAC is bound yet): a spoofed peer.
    DropPeerMac,
    /// A datagram to port P whose IPv4 source is the node's own address:
    /// never sent from the wire by anyone honest.
    DropOwnAddress,
    /// A CHAIN while the peer table is empty: no node is trusted to be
    /// forwarded to or answered, so a CHAIN could only relay.
    DropChainNoPeers,
    /// A WRITE, REDUCE_WRITE or WRITE_NOTIFY whose copy between the frame
    /// and NetDAM memory failed (a helper refused it): dropped, not answered.
    DropMemCopyFailed,
    /// A request that would be answered BAD_KEY from a source past its
    /// `--bad-key-limit` answers per second: dropped, not answered (key
    /// guessing; docs/conformance.md 21).
    BadKeyLimited,
    /// A request from a source whose BAD_KEY bucket is dry: dropped before
    /// validation, whatever its key (a right guess must not be answered
    /// either, or silence still says "wrong"; docs/conformance.md 21).
    DropBadKeyLockout,
    /// A datagram to a split port from a non-peer while the peer table is
    /// not empty: passed to the kernel whole, not split (only peers fill
    /// the ring; docs/conformance.md 22).
    PassSplitStranger,
    /// A non-idempotent request from a new source whose IPv4 address already
    /// holds `--window-per-source` windows (answered STALE, not executed):
    /// one address spraying source ports or CHAIN origin ports.
    WindowSourceFull,
    /// A non-idempotent request whose window the sweep was removing at that
    /// instant: dropped, not executed; the retransmission gets a new window
    /// (docs/conformance.md 12).
    DropWindowRetiring,
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
        Event::DropBadOrigin,
        Event::DropPeerUnresolved,
        Event::ChainForwarded,
        Event::PassLocalAnswer,
        Event::DropTooLargeForUmem,
        Event::Split,
        Event::PassSplitUnserved,
        Event::DropPeerMac,
        Event::DropOwnAddress,
        Event::DropChainNoPeers,
        Event::DropMemCopyFailed,
        Event::BadKeyLimited,
        Event::DropBadKeyLockout,
        Event::PassSplitStranger,
        Event::WindowSourceFull,
        Event::DropWindowRetiring,
    ];
    /// The event with the highest counter index.
    const LAST: Event = Event::DropWindowRetiring;

    /// The event with counter index `v`.
    #[inline(always)]
    pub const fn from_u32(v: u32) -> Option<Event> {
        if v < Event::DropTruncated as u32 || v > Event::LAST as u32 {
            return None;
        }
        // SAFETY: the discriminants are contiguous from DropTruncated to
        // LAST (asserted below); no table lookup, which the
        // verifier could not bound.
        Some(unsafe { core::mem::transmute::<u32, Event>(v) })
    }

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
            Event::DropBadOrigin => "drop_bad_origin",
            Event::DropPeerUnresolved => "drop_peer_unresolved",
            Event::ChainForwarded => "chain_forwarded",
            Event::PassLocalAnswer => "pass_local_answer",
            Event::DropTooLargeForUmem => "drop_too_large_for_umem",
            Event::Split => "split",
            Event::PassSplitUnserved => "pass_split_unserved",
            Event::DropPeerMac => "drop_peer_mac",
            Event::DropOwnAddress => "drop_own_address",
            Event::DropChainNoPeers => "drop_chain_no_peers",
            Event::DropMemCopyFailed => "drop_mem_copy_failed",
            Event::BadKeyLimited => "bad_key_limited",
            Event::DropBadKeyLockout => "drop_bad_key_lockout",
            Event::PassSplitStranger => "pass_split_stranger",
            Event::WindowSourceFull => "window_source_full",
            Event::DropWindowRetiring => "drop_window_retiring",
        }
    }
}

const _: () = {
    let mut i = 0;
    while i < Event::ALL.len() {
        assert!(Event::ALL[i] as u32 == Event::DropTruncated as u32 + i as u32);
        i += 1;
    }
    assert!(Event::ALL[Event::ALL.len() - 1] as u32 == Event::LAST as u32);
};

/// Entries of the counter map.
pub const COUNTER_SLOTS: u32 = 512;
const _: () = assert!((Event::LAST as u32) < COUNTER_SLOTS);

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
        for e in Event::ALL {
            assert_eq!(Event::from_u32(*e as u32), Some(*e));
        }
        assert_eq!(Event::from_u32(0), None);
        assert_eq!(Event::from_u32(COUNTER_SLOTS), None);
    }
}
