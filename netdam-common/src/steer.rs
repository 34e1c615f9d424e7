//! The AF_XDP client's receive steering (docs/client.md, "The AF_XDP
//! path"): which frames reaching a client host's interface are answers to
//! one of its AF_XDP transfers, and which of those end in the flow's ack
//! slots instead of a socket. The XDP program `netdam_client_rx`
//! (netdam-ebpf/src/bin/netdam-client-xdp.rs) runs this on every frame; the
//! host tests run it on frames built by hand.

use crate::{
    wire::{ETH_P_IPV4, HDR_LEN, IPPROTO_UDP, MAGIC},
    NetdamHdr, Opcode,
};

/// Bytes of the headers steering reads: Ethernet, IPv4 without options, UDP.
pub const STEER_LEN: usize = 14 + 20 + 8;

/// Transfers one client host can steer at once (the flow table's size).
pub const FLOW_SLOTS: u32 = 64;

/// Receive queues the client's socket map covers for each flow.
pub const QUEUE_SLOTS: u32 = 64;

/// Ack slots per flow (NETDAM_CLIENT_ACKS): more than a window (at most
/// 1023 in flight, PROTOCOL.md section 7) holds.
pub const ACK_SLOTS: u32 = 1024;

/// Marks a written ack word (a zeroed slot is none).
const ACK_VALID: u64 = 1 << 8;

/// The node a client's local UDP port talks to: only its answers are
/// delivered to the client's socket (NETDAM_CLIENT_FLOWS, keyed by the local
/// port in host order).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientFlow {
    /// The node's IPv4 address, as on the wire.
    pub node_ip: [u8; 4],
    /// The node's UDP port, as on the wire.
    pub node_port: [u8; 2],
    /// Which run of ACK_SLOTS in NETDAM_CLIENT_ACKS is the flow's, below FLOW_SLOTS.
    pub slot: u16,
}

impl ClientFlow {
    pub const fn new(node_ip: [u8; 4], node_port: u16, slot: u16) -> ClientFlow {
        ClientFlow {
            node_ip,
            node_port: node_port.to_be_bytes(),
            slot,
        }
    }
}

/// Where the flow in `slot` has its socket for receive queue `queue` in
/// NETDAM_CLIENT_XSKS.
pub const fn socket_index(slot: u16, queue: u32) -> u32 {
    (slot as u32 % FLOW_SLOTS) * QUEUE_SLOTS + queue % QUEUE_SLOTS
}

/// Where the ack of `seq` on the flow in `slot` is kept.
pub const fn ack_index(slot: u16, seq: u32) -> u32 {
    (slot as u32 % FLOW_SLOTS) * ACK_SLOTS + seq % ACK_SLOTS
}

/// The ack word of a delivered answer with NetDAM header `hdr`, when it is
/// a WRITE's: seq and status, kept in the flow's ack slot, the frame
/// dropped (the client needs nothing else of it). `None`: to the socket.
pub fn write_ack(hdr: &[u8; HDR_LEN]) -> Option<(u32, u64)> {
    let h = NetdamHdr::from_bytes(hdr)?;
    let ack = h.magic == MAGIC && h.is_response() && h.opcode == Opcode::Write as u8;
    ack.then(|| (h.seq(), (h.seq() as u64) << 32 | ACK_VALID | h.status as u64))
}

/// The status in ack word `word` when it acknowledges `seq`.
pub const fn ack_status(word: u64, seq: u32) -> Option<u8> {
    if word & ACK_VALID != 0 && (word >> 32) as u32 == seq {
        Some(word as u8)
    } else {
        None
    }
}

/// What becomes of a frame at a client host's interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Steer {
    /// Not for an AF_XDP transfer: to the kernel, untouched.
    Pass,
    /// An answer from the transfer's node: to the client's socket.
    Deliver,
    /// Sent to a transfer's port by someone other than its node: dropped,
    /// so that a stranger cannot answer in the node's name.
    Stranger,
}

/// The local UDP port a frame is addressed to, in host order, when it is an
/// unfragmented IPv4 UDP datagram without IP options; `None` otherwise.
pub fn dst_port(head: &[u8; STEER_LEN]) -> Option<u16> {
    let ethertype = u16::from_be_bytes([head[12], head[13]]);
    let ip = &head[14..34];
    // Version 4, IHL 5: the client sends no IP options, so its answers carry none.
    let plain = ethertype == ETH_P_IPV4 && ip[0] == 0x45 && ip[9] == IPPROTO_UDP;
    // More-fragments flag or a fragment offset: not a whole datagram.
    let fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0;
    (plain && !fragment).then(|| u16::from_be_bytes([head[36], head[37]]))
}

/// Steers a frame whose destination port's flow is `flow` (`None`: the
/// port is not a transfer's).
pub fn steer(head: &[u8; STEER_LEN], flow: Option<&ClientFlow>) -> Steer {
    let Some(flow) = flow else { return Steer::Pass };
    let from_node = head[26..30] == flow.node_ip && head[34..36] == flow.node_port;
    if from_node {
        Steer::Deliver
    } else {
        Steer::Stranger
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet, IPv4 and UDP headers from 10.0.0.1:7000 to port 40000.
    fn head() -> [u8; STEER_LEN] {
        let mut h = [0u8; STEER_LEN];
        h[12..14].copy_from_slice(&ETH_P_IPV4.to_be_bytes());
        h[14] = 0x45;
        h[23] = IPPROTO_UDP;
        h[26..30].copy_from_slice(&[10, 0, 0, 1]);
        h[30..34].copy_from_slice(&[10, 0, 0, 2]);
        h[34..36].copy_from_slice(&7000u16.to_be_bytes());
        h[36..38].copy_from_slice(&40000u16.to_be_bytes());
        h
    }

    const FLOW: ClientFlow = ClientFlow::new([10, 0, 0, 1], 7000, 3);

    #[test]
    fn an_answer_from_the_node_is_delivered() {
        assert_eq!(dst_port(&head()), Some(40000));
        assert_eq!(steer(&head(), Some(&FLOW)), Steer::Deliver);
    }

    #[test]
    fn a_port_without_a_transfer_is_the_kernels() {
        assert_eq!(steer(&head(), None), Steer::Pass);
    }

    #[test]
    fn another_source_address_or_port_is_a_stranger() {
        let mut h = head();
        h[29] = 9;
        assert_eq!(steer(&h, Some(&FLOW)), Steer::Stranger);
        let mut h = head();
        h[34..36].copy_from_slice(&7001u16.to_be_bytes());
        assert_eq!(steer(&h, Some(&FLOW)), Steer::Stranger);
    }

    fn answer(op: Opcode, status: u8) -> [u8; HDR_LEN] {
        let mut h = NetdamHdr::request(op);
        h.flags = crate::wire::flags::RESP;
        h.status = status;
        h.set_seq(0xDEAD_BEEF);
        h.to_bytes()
    }

    #[test]
    fn a_writes_answer_becomes_an_ack_word_with_its_seq_and_status() {
        for status in [0, 3] {
            let (seq, word) = write_ack(&answer(Opcode::Write, status)).unwrap();
            assert_eq!(seq, 0xDEAD_BEEF);
            assert_eq!(ack_status(word, seq), Some(status));
            assert_eq!(ack_status(word, seq + 1), None, "another seq's");
        }
        assert_eq!(
            ack_status(0, 0),
            None,
            "an empty slot acknowledges nothing, seq 0 included"
        );
    }

    #[test]
    fn other_answers_requests_and_foreign_headers_go_to_the_socket() {
        assert_eq!(write_ack(&answer(Opcode::Read, 0)), None);
        let mut request = answer(Opcode::Write, 0);
        request[3] = 0; // flags: not a response
        assert_eq!(write_ack(&request), None);
        let mut foreign = answer(Opcode::Write, 0);
        foreign[0] ^= 0xFF; // not NetDAM's magic
        assert_eq!(write_ack(&foreign), None);
    }

    #[test]
    fn each_flow_has_its_own_run_of_ack_slots() {
        assert_eq!(ack_index(0, 5), 5);
        assert_eq!(ack_index(2, ACK_SLOTS + 5), 2 * ACK_SLOTS + 5);
        assert!(ack_index((FLOW_SLOTS - 1) as u16, u32::MAX) < FLOW_SLOTS * ACK_SLOTS);
        assert_eq!(socket_index(2, 1), 2 * QUEUE_SLOTS + 1);
        assert!(socket_index((FLOW_SLOTS - 1) as u16, u32::MAX) < FLOW_SLOTS * QUEUE_SLOTS);
    }

    #[test]
    fn only_whole_plain_ipv4_udp_datagrams_have_a_port() {
        let cases: [(usize, u8); 5] = [
            (12, 0x86), // IPv6 ethertype
            (14, 0x46), // IP options
            (23, 6),    // TCP
            (20, 0x20), // more fragments
            (21, 0x01), // fragment offset
        ];
        for (at, v) in cases {
            let mut h = head();
            h[at] = v;
            assert_eq!(dst_port(&h), None, "byte {at} = {v:#x}");
        }
        let mut h = head();
        h[20] = 0x40; // don't fragment: still whole
        assert_eq!(dst_port(&h), Some(40000));
    }
}
