//! Tier 2: differential fuzzing. A structure-aware generator (valid requests
//! mutated field by field, plus random bytes) feeds the reference model, the
//! real XDP program and the HLS port's C engine (fpga-port) side by side;
//! any difference in verdict, output frame, counters or memory fails with
//! the seed and the frame.
//!
//! NETDAM_FUZZ_FRAMES and NETDAM_FUZZ_SEED override the frame count (50,000)
//! and the seed.

use std::net::Ipv4Addr;

use netdam_common::{
    chain::{HopOp, Segment, SrFixed, MAX_SEGMENTS},
    frame::{udp_frame, Endpoint, Ipv4Opts},
    model::{Action, ModelNode},
    wire::{flags, DEFAULT_PORT},
    NetdamHdr,
};
use netdam_tests::{cengine::CEngine, progrun::*, runns::RunNetns, unique_prefix, Rng};
use netdam_user::NodeSpec;

const MEM: u64 = 1 << 20;

/// The MACs bound to the fuzzed node's peers: the client and two more
/// hosts; UNRESOLVED (a peer in the peer-table run) has none.
const NEIGHBOURS: [(Ipv4Addr, [u8; 6]); 3] = [
    (CLIENT.ip, CLIENT.mac),
    (Ipv4Addr::new(198, 18, 0, 3), [0x02, 0xDA, 0, 0, 0, 3]),
    (Ipv4Addr::new(198, 18, 0, 4), [0x02, 0xDA, 0, 0, 0, 4]),
];
const UNRESOLVED: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 9);
/// The readiness generation of the read-write region.
const GENERATION: u32 = 5;

/// A CHAIN program for the header `h`: mostly well formed, naming this node
/// at idx, with next hops that do and do not resolve, origins that are and
/// are not answerable, tags around the generation; sometimes broken.
fn sr_program(rng: &mut Rng, h: &mut NetdamHdr) -> Vec<u8> {
    // Mostly short programs; a fifth up to the 15 segments an SR header holds.
    let n = if rng.chance(80) {
        1 + rng.below(6) as u8
    } else {
        1 + rng.below(MAX_SEGMENTS as u64) as u8
    };
    let idx = if rng.chance(95) { rng.below(n as u64) as u8 } else { n };
    let hosts = [
        NODE.ip,
        NEIGHBOURS[0].0,
        NEIGHBOURS[1].0,
        NEIGHBOURS[2].0,
        UNRESOLVED,
        Ipv4Addr::LOCALHOST,
    ];
    let pick = |rng: &mut Rng| hosts[rng.below(hosts.len() as u64) as usize];
    let origin = if rng.chance(70) { pick(rng) } else { NEIGHBOURS[0].0 };
    let anchors = [RW.base, RW.base + RW.size - 64, RO.base, 0x10000];
    let dst = anchors[rng.below(anchors.len() as u64) as usize] + (rng.below(512) & !7);
    let mut b = SrFixed::new(n, idx, origin.into(), 20000 + rng.below(8) as u16, dst)
        .to_bytes()
        .to_vec();
    for i in 0..n {
        let ip = if i == idx && rng.chance(85) { NODE.ip } else { pick(rng) };
        let port = if rng.chance(95) { DEFAULT_PORT } else { DEFAULT_PORT + 1 };
        let op = if rng.chance(90) {
            HopOp::ALL[rng.below(HopOp::ALL.len() as u64) as usize] as u8
        } else {
            rng.below(16) as u8
        };
        let mut seg = Segment::new(ip.into(), port, HopOp::Nop);
        seg.op = op;
        b.extend_from_slice(&seg.to_bytes());
    }
    h.sr_len = if rng.chance(95) {
        b.len() as u8
    } else {
        b.len() as u8 + 8
    };
    // Mostly ready; NOT_READY and STALE too.
    h.set_tag(if rng.chance(70) {
        GENERATION
    } else {
        GENERATION + rng.below(3) as u32 - 1
    });
    if rng.chance(80) {
        h.set_rkey(RKEY_RW);
    }
    b
}

/// One frame: mostly plausible requests, some broken on purpose.
fn generate(rng: &mut Rng) -> Vec<u8> {
    if rng.chance(4) {
        let n = 14 + rng.below(200) as usize;
        let mut f: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
        if rng.chance(50) {
            // Random bytes behind a correct Ethernet/IPv4 start get further.
            f[..6].copy_from_slice(&NODE.mac);
            f[12] = 0x08;
            f[13] = 0;
        }
        return f;
    }
    let ops = [
        0x00u8, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x10, 0x0B, 0x7F,
    ];
    let mut h = NetdamHdr::request(netdam_common::Opcode::Nop);
    // A fifth are CHAIN: its SR programs have many more ways to go.
    h.opcode = if rng.chance(20) {
        0x10
    } else {
        ops[rng.below(ops.len() as u64) as usize]
    };
    if rng.chance(50) {
        h.flags |= flags::ACK_REQ;
    }
    if rng.chance(3) {
        h.flags |= 1 << (2 + rng.below(6));
    }
    h.dtype = if rng.chance(90) {
        1 + rng.below(5) as u8
    } else {
        rng.below(8) as u8
    };
    h.alu = if rng.chance(90) {
        1 + rng.below(6) as u8
    } else {
        rng.below(8) as u8
    };
    if rng.chance(5) {
        h.sr_len = [8u8, 16, 24, 7][rng.below(4) as usize];
    }
    h.set_seq(rng.next_u64() as u32);
    h.set_tag(rng.next_u64() as u32);
    h.set_rkey([RKEY_RW, RKEY_RW, RKEY_RO, 0xBAD][rng.below(4) as usize]);
    // Addresses near the edges of the regions and of the chunks, mostly aligned.
    let anchors = [
        RW.base,
        RW.base + RW.size,
        RO.base,
        RO.base + RO.size,
        0x10000,
        0x20000,
        0,
        MEM,
    ];
    let anchor = anchors[rng.below(anchors.len() as u64) as usize];
    let mut addr = anchor.wrapping_add(rng.below(4096)).wrapping_sub(2048);
    if rng.chance(85) {
        addr &= !7;
    }
    if rng.chance(1) {
        addr = rng.next_u64();
    }
    h.set_addr(addr);
    let mut len = match rng.below(10) {
        0 => 0,
        1 => 1440 + rng.below(8),
        _ => rng.below(1440),
    } as u16;
    if rng.chance(85) {
        len &= !7;
    }
    if h.opcode == 0 && rng.chance(80) {
        len = 0;
    }
    if matches!(h.opcode, 0x04 | 0x06) && rng.chance(70) {
        len = 8;
    }
    h.set_len(len);
    let sr = if h.opcode == 0x10 && rng.chance(90) {
        sr_program(rng, &mut h)
    } else {
        Vec::new()
    };
    let mut payload_len = h.sr_len as usize + len as usize;
    if rng.chance(5) {
        payload_len = payload_len.saturating_sub(1 + rng.below(4) as usize);
    }
    let mut rest: Vec<u8> = (0..payload_len).map(|_| rng.next_u64() as u8).collect();
    let structured = sr.len().min(rest.len());
    rest[..structured].copy_from_slice(&sr[..structured]);
    if rng.chance(2) {
        rest.extend((0..rng.below(40)).map(|_| 0xEE));
    }
    let mut src = CLIENT;
    if rng.chance(3) {
        src.ip = [std::net::Ipv4Addr::LOCALHOST, std::net::Ipv4Addr::new(224, 0, 0, 5)][rng.below(2) as usize];
    }
    // Spoofers: the node's own address, another peer's address, a peer's
    // address from a stranger's MAC.
    if rng.chance(2) {
        src.ip = NODE.ip;
    }
    if rng.chance(3) {
        src.ip = NEIGHBOURS[1 + rng.below(2) as usize].0;
    }
    if rng.chance(4) {
        src.mac = [0x02, 0xBA, 0xD0, 0, 0, rng.below(256) as u8];
    }
    let mut dst = NODE;
    if rng.chance(3) {
        dst = Endpoint {
            port: DEFAULT_PORT + 1,
            ..NODE
        };
    }
    let mut ip = Ipv4Opts::default();
    if rng.chance(5) {
        ip.options = vec![1; 4 * (1 + rng.below(10) as usize)];
    }
    if rng.chance(2) {
        ip.frag = [0x2000u16, 0x2000 | 20, 20][rng.below(3) as usize];
    }
    ip.tos = rng.next_u64() as u8;
    let mut body = h.to_bytes().to_vec();
    body.extend_from_slice(&rest);
    let mut f = udp_frame(&src, &dst, &ip, &body);
    // Field-level mutations of the finished frame.
    if rng.chance(6) {
        let i = rng.below(f.len() as u64) as usize;
        f[i] ^= 1 << rng.below(8);
    }
    if rng.chance(2) {
        let cut = 14 + rng.below((f.len() - 14) as u64) as usize;
        f.truncate(cut);
    }
    f
}

#[test]
fn model_and_xdp_program_agree_frame_by_frame() {
    fuzz(&[]);
}

/// With a peer table: CHAIN runs, peers are bound to their MACs, and
/// UNRESOLVED is a peer without one.
#[test]
fn model_and_xdp_program_agree_frame_by_frame_with_a_peer_table() {
    let peers: Vec<Ipv4Addr> = NEIGHBOURS.iter().map(|(ip, _)| *ip).chain([UNRESOLVED]).collect();
    fuzz(&peers);
}

/// Fuzzes the node configured with `peers` (NETDAM_FUZZ_FRAMES frames from
/// NETDAM_FUZZ_SEED): the XDP program, the model and the C engine must
/// agree on every verdict and frame, and on memory and counters.
fn fuzz(peers: &[Ipv4Addr]) {
    let frames: u64 = std::env::var("NETDAM_FUZZ_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let seed: u64 = std::env::var("NETDAM_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5EED_0001);
    let s = NodeSpec {
        peers: peers.to_vec(),
        ..spec()
    };
    let mut node = load(&s);
    node.set_generation(RKEY_RW, GENERATION).unwrap();
    node.bind_peer_macs(&NEIGHBOURS).unwrap();
    let ns = RunNetns::new(&unique_prefix(), NODE.mac, NODE.ip);
    let mut model = ModelNode::new(
        s.mac,
        s.ipv4,
        s.port,
        s.mtu,
        s.verify_csum,
        s.regions.clone(),
        s.peers.clone(),
        s.mem_size as usize,
        s.window_sources as usize,
    );
    model.generations.insert(RKEY_RW, GENERATION);
    model.neighbours.extend(NEIGHBOURS);
    let mut engine = CEngine::new(&s, &NEIGHBOURS, &[(RKEY_RW, GENERATION)]);
    let mut counters = vec![0u64; netdam_common::counters::COUNTER_SLOTS as usize];
    let mut rng = Rng(seed | 1);
    let mut seen = std::collections::BTreeMap::<&str, u64>::new();
    let started = std::time::Instant::now();
    // Recent frames, resent now and then as retransmissions, so that the
    // at-most-once window's repeats and stale answers are compared too.
    let mut recent: Vec<Vec<u8>> = Vec::new();
    for i in 0..frames {
        let f = if !recent.is_empty() && rng.chance(10) {
            recent[rng.below(recent.len() as u64) as usize].clone()
        } else {
            let f = generate(&mut rng);
            if recent.len() < 64 {
                recent.push(f.clone());
            } else {
                recent[rng.below(64) as usize] = f.clone();
            }
            f
        };
        let want = model.process(&f);
        let got = ns.run(&node, &f);
        let fail = |what: &str| -> ! {
            let hex: String = f.iter().map(|b| format!("{b:02x}")).collect();
            panic!(
                "frame {i} of seed {seed:#x}: {what}\nframe: {hex}\nmodel: {want:?}\nxdp action {} frame {:02x?}",
                got.action, got.frame
            )
        };
        let action = match got.action {
            XDP_PASS => Action::Pass,
            XDP_DROP => Action::Drop,
            XDP_TX => Action::Tx,
            XDP_REDIRECT => Action::Redirect,
            other => fail(&format!("unexpected XDP action {other}")),
        };
        if action != want.action {
            fail("verdicts differ");
        }
        if action != Action::Drop && got.frame != want.frame {
            fail("output frames differ");
        }
        let (c_action, c_frame) = engine.process(&f);
        if c_action != want.action {
            fail(&format!("the C engine's verdict differs: {c_action:?}"));
        }
        if c_action != Action::Drop && c_frame != want.frame {
            fail(&format!("the C engine's output frame differs: {c_frame:02x?}"));
        }
        for c in &want.counters {
            counters[*c as usize] += 1;
        }
        *seen
            .entry(match want.action {
                Action::Pass => "pass",
                Action::Drop => "drop",
                Action::Tx => "tx",
                Action::Redirect => "redirect",
            })
            .or_default() += 1;
        if i % 2_000 == 1_999 || i + 1 == frames {
            let mem = node.memory().read(0, model.mem.len()).unwrap();
            if mem != model.mem {
                let at = mem.iter().zip(&model.mem).position(|(a, b)| a != b).unwrap();
                fail(&format!("memory differs first at {at:#x} (checked after frame {i})"));
            }
            if node.counters().unwrap() != counters {
                fail("counters differ");
            }
            if engine.mem != model.mem {
                let at = engine.mem.iter().zip(&model.mem).position(|(a, b)| a != b).unwrap();
                fail(&format!(
                    "the C engine's memory differs first at {at:#x} (checked after frame {i})"
                ));
            }
            if engine.counters() != counters {
                fail("the C engine's counters differ");
            }
        }
    }
    let stats = netdam_user::stats::Stats::from_counters(&counters);
    let chain_ok = stats.requests("CHAIN", netdam_common::Status::Ok);
    let forwarded = stats.event(netdam_common::counters::Event::ChainForwarded);
    println!(
        "{frames} frames (seed {seed:#x}) in {:.1} s: {seen:?}; CHAIN hops OK {chain_ok}, forwarded {forwarded}",
        started.elapsed().as_secs_f64()
    );
    if peers.is_empty() {
        // Without peers no CHAIN runs: each is dropped and counted.
        let refused = stats.event(netdam_common::counters::Event::DropChainNoPeers);
        assert!(
            chain_ok == 0 && forwarded == 0 && refused > frames / 100,
            "CHAIN without peers: {chain_ok} hops ran, {forwarded} forwarded, {refused} refused"
        );
    } else {
        // Structured SR programs must get past the header checks, run hops
        // and forward (fewer than without the relay rules: spoofed sources,
        // nodes named thrice and unresolved peers stop many).
        assert!(
            chain_ok > frames / 400 && forwarded > frames / 1000,
            "too few CHAIN hops ran ({chain_ok}) or were forwarded ({forwarded})"
        );
        let spoofed = stats.event(netdam_common::counters::Event::DropPeerMac);
        assert!(spoofed > frames / 100, "too few spoofed peers were dropped ({spoofed})");
    }
    // The generator must reach every verdict, or the comparison proves little.
    for v in ["pass", "drop", "tx"] {
        assert!(
            seen.get(v).copied().unwrap_or(0) > frames / 50,
            "too few {v} verdicts: {seen:?}"
        );
    }
}
