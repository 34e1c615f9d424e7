//! Random NetDAM datagrams from a host that is nobody's peer: every opcode,
//! keys right and wrong, READs that ask for much, and CHAIN programs that
//! ping-pong between nodes, name strangers or other ports, with origins
//! anywhere. For tests that count what nodes send back.

use std::net::Ipv4Addr;

use netdam_common::{
    chain::{HopOp, Segment, SrFixed, MAX_SEGMENTS},
    wire::DEFAULT_PORT,
    NetdamHdr,
};

use crate::Rng;

/// A UDP payload for port P; `nodes` are the testbed's hosts.
pub fn datagram(rng: &mut Rng, nodes: &[Ipv4Addr]) -> Vec<u8> {
    let ops = [0x00u8, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x10, 0x10, 0x10, 0x10];
    let mut h = NetdamHdr::request(netdam_common::Opcode::Nop);
    h.opcode = ops[rng.below(ops.len() as u64) as usize];
    h.dtype = 1 + rng.below(5) as u8;
    h.alu = 1 + rng.below(6) as u8;
    h.set_rkey(if rng.chance(50) { 0x1234 } else { rng.next_u64() as u32 });
    h.set_addr(rng.below(4 << 20) & !7);
    h.set_seq(rng.next_u64() as u32);
    let len = (rng.below(1200) & !7) as u16;
    h.set_len(if h.opcode == 0 { 0 } else { len.max(8) });
    let mut sr = Vec::new();
    if h.opcode == 0x10 {
        let n = 1 + rng.below(MAX_SEGMENTS as u64) as u8;
        let somewhere = |rng: &mut Rng| {
            if rng.chance(80) {
                nodes[rng.below(nodes.len() as u64) as usize]
            } else {
                Ipv4Addr::new(198, 18, 7, rng.below(250) as u8 + 1)
            }
        };
        let origin = somewhere(rng);
        sr.extend_from_slice(
            &SrFixed::new(n, 0, origin.into(), rng.below(65536) as u16, rng.below(4 << 20) & !7).to_bytes(),
        );
        for i in 0..n {
            // Mostly ping-pong between the first two nodes.
            let ip = if rng.chance(70) {
                nodes[i as usize % 2]
            } else {
                somewhere(rng)
            };
            let port = if rng.chance(90) { DEFAULT_PORT } else { 53 };
            let op = HopOp::ALL[rng.below(HopOp::ALL.len() as u64) as usize];
            sr.extend_from_slice(&Segment::new(ip.into(), port, op).to_bytes());
        }
        h.sr_len = sr.len() as u8;
    }
    let mut f = h.to_bytes().to_vec();
    f.extend_from_slice(&sr);
    f.extend((0..h.len()).map(|_| rng.next_u64() as u8));
    f
}
