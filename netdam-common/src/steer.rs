//! The AF_XDP client's receive steering (docs/client.md, "The AF_XDP
//! client"): which frames reaching a client host's interface are answers to
//! one of its AF_XDP transfers. The XDP program `netdam_client_rx`
//! (netdam-ebpf/src/bin/netdam-client-xdp.rs) runs this on every frame; the
//! host tests run it on frames built by hand.

use crate::wire::{ETH_P_IPV4, IPPROTO_UDP};

/// Bytes of the headers steering reads: Ethernet, IPv4 without options, UDP.
pub const STEER_LEN: usize = 14 + 20 + 8;

/// Transfers one client host can steer at once (the flow table's size).
pub const FLOW_SLOTS: u32 = 64;

/// Receive queues the client's socket map covers.
pub const QUEUE_SLOTS: u32 = 64;

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
    pub _reserved: [u8; 2],
}

impl ClientFlow {
    pub const fn new(node_ip: [u8; 4], node_port: u16) -> ClientFlow {
        ClientFlow {
            node_ip,
            node_port: node_port.to_be_bytes(),
            _reserved: [0; 2],
        }
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

    const FLOW: ClientFlow = ClientFlow::new([10, 0, 0, 1], 7000);

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
