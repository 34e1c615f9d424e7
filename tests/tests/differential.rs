//! Tier 2: differential fuzzing. A structure-aware generator (valid requests
//! mutated field by field, plus random bytes) feeds the reference model, the
//! real XDP program and the HLS port's C engine (fpga-port) side by side;
//! any difference in verdict, output frame, counters or memory fails with
//! the seed and the frame.
//!
//! NETDAM_FUZZ_FRAMES and NETDAM_FUZZ_SEED override the frame count per
//! variant (50,000) and the seed; runs of many frames print progress lines.
//!
//! Verdicts and frames are compared after every frame; memory and counters
//! every CHECK_EVERY frames, and a difference found there is traced to the
//! first frame after which they differ by replaying the seed.

use std::{
    collections::BTreeMap,
    net::Ipv4Addr,
    time::{Duration, Instant},
};

use netdam_common::{
    chain::{trailer_bytes, HopOp, Readiness, Segment, SrFixed, MAX_SEGMENTS, SR_FIXED_LEN},
    counters::{op_status, Event},
    frame::{udp_frame, Endpoint, Ipv4Opts},
    model::{self, Action, ModelNode},
    wire::{flags, DEFAULT_PORT, HDR_LEN, VERSION_2},
    NetdamHdr, Opcode, Status,
};
use netdam_tests::{
    cengine::CEngine,
    progrun::*,
    runns::{Inside, RunNetns},
    unique_prefix, Rng,
};
use netdam_user::{stats::Stats, Node, NodeSpec};

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
/// The call word raised with GENERATION (version 2): what most version-2
/// CHAIN frames carry in their trailer.
const CALL: u32 = 0x5EED_CA11;
/// The read-write region's readiness on all three.
const READINESS: Readiness = Readiness::new(GENERATION, CALL);

/// A CHAIN program for the header `h`: mostly well formed, naming this node
/// at idx, with next hops that do and do not resolve, origins that are and
/// are not answerable, tags around the generation; sometimes broken. Half
/// are version 2 (docs/PROTOCOL.md, the version-2 section): a trailer after
/// the segments, its call word mostly the region's (else MISMATCH at the
/// generation) and its cell address mostly aligned and in the read-write
/// region, and tags one behind (STALE, as in version 1), one ahead (hold)
/// and further.
fn sr_program(rng: &mut Rng, h: &mut NetdamHdr) -> Vec<u8> {
    let v2 = rng.chance(50);
    if v2 {
        h.version = VERSION_2;
        // Mostly an input inside the read-write region, so that hops get as
        // far as readiness (hold, or STALE one behind) more often than the generic
        // addresses let them.
        if rng.chance(60) {
            h.set_addr(RW.base + (rng.below(RW.size / 2) & !7));
        }
    }
    // Mostly short programs; a fifth up to the 15 segments an SR header holds
    // (version 2 holds 14: its 15 take sr_len to 144, BAD_SR).
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
    let mut dst = anchors[rng.below(anchors.len() as u64) as usize] + (rng.below(512) & !7);
    if v2 && rng.chance(50) {
        dst = RW.base + RW.size / 2 + (rng.below(RW.size / 4) & !7);
    }
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
    if v2 {
        // The call word: mostly the region's; else one bit off, 0 (the word
        // of a region raised without one), or anything.
        let call = if rng.chance(85) {
            CALL
        } else {
            match rng.below(3) {
                0 => CALL ^ 1 << rng.below(32),
                1 => 0,
                _ => rng.next_u64() as u32,
            }
        };
        // The chunk's cell: near the read-write region's start and end (where
        // 24 + len may not fit), in the read-only region, near a chunk
        // boundary of memory; sometimes misaligned, now and then anywhere
        // (32 bits).
        let anchors = [
            RW.base + 0x3000,
            RW.base + 0x3000,
            RW.base + RW.size - 1024,
            RO.base,
            0x10000 - 256,
        ];
        let mut cell = (anchors[rng.below(anchors.len() as u64) as usize] + (rng.below(1024) & !7)) as u32;
        if rng.chance(5) {
            cell += 1 + rng.below(7) as u32;
        }
        if rng.chance(2) {
            cell = rng.next_u64() as u32;
        }
        b.extend_from_slice(&trailer_bytes(call, cell));
    }
    // Mostly the sr_len of the version; the other version's (with or without
    // the cell), too long, or not a multiple of 8 now and then (BAD_SR to the
    // sender, in version 2 too).
    h.sr_len = match rng.below(100) {
        0..=94 => b.len() as u8,
        95..=96 => b.len() as u8 + 8,
        97 => b.len() as u8 - 1 - rng.below(7) as u8,
        _ => b.len() as u8 - 8,
    };
    // Mostly ready; one behind (STALE, in version 2 too), one ahead
    // (NOT_READY, or a version-2 hold) and further.
    h.set_tag(if rng.chance(55) {
        GENERATION
    } else {
        match rng.below(10) {
            0..=3 => GENERATION - 1,
            4..=7 => GENERATION + 1,
            8 => GENERATION + 2 + rng.below(3) as u32,
            _ => GENERATION - 2 - rng.below(3) as u32,
        }
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
    // Version 2 on any opcode (BAD_VERSION but for CHAIN); other versions.
    if rng.chance(3) {
        h.version = if rng.chance(70) {
            VERSION_2
        } else {
            rng.below(256) as u8
        };
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
    // Forty source ports on two addresses (the client and a peer, each
    // from its own MAC): more windows than one address may hold, and
    // together more than the table holds.
    let (ip, mac) = if rng.chance(30) {
        NEIGHBOURS[1]
    } else {
        (CLIENT.ip, CLIENT.mac)
    };
    let mut src = Endpoint {
        mac,
        ip,
        port: CLIENT.port + rng.below(40) as u16,
    };
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

/// Frames between comparisons of memory and counters (a 1 MiB compare and
/// 512 map reads each: per frame they would cost more than the frame).
const CHECK_EVERY: u64 = 2_000;
/// Time between progress lines.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

#[test]
fn model_and_xdp_program_agree_frame_by_frame() {
    fuzz_variant("no peers", &[]);
}

/// With a peer table: CHAIN runs, peers are bound to their MACs, and
/// UNRESOLVED is a peer without one.
#[test]
fn model_and_xdp_program_agree_frame_by_frame_with_a_peer_table() {
    let peers: Vec<Ipv4Addr> = NEIGHBOURS.iter().map(|(ip, _)| *ip).chain([UNRESOLVED]).collect();
    fuzz_variant("peer table", &peers);
}

/// A byte of the XDP program's memory that no request can reach, flipped
/// after one frame: the checkpoint after it must see the difference and
/// the replay must name that frame, not the checkpoint.
#[test]
fn a_memory_difference_is_traced_to_the_frame_after_which_it_appeared() {
    let fault = Fault {
        after: 2_345,
        addr: spec().mem_size - 1,
    };
    let ns = RunNetns::new(&unique_prefix(), NODE.mac, NODE.ip);
    let inside = ns.inside();
    let failure = fuzz(&node_spec(&[]), &inside, 5_000, 0x5EED_0001, Some(fault), "fault")
        .expect_err("a flipped byte of memory went unnoticed");
    assert_eq!(failure.frame, fault.after, "{failure}");
    assert!(failure.what.contains("memory differs first at 0xfffff"), "{failure}");
}

/// The fuzzed node with `peers`.
/// The fuzzed node: a small window table and a cap per address below it:
/// two clients with forty ports each, and CHAIN origins, whose ports and
/// hops make up to 120 windows each, meet both limits.
fn node_spec(peers: &[Ipv4Addr]) -> NodeSpec {
    NodeSpec {
        peers: peers.to_vec(),
        window_sources: 24,
        window_per_source: 16,
        ..spec()
    }
}

/// Frames to fuzz and the seed: NETDAM_FUZZ_FRAMES (50,000) and NETDAM_FUZZ_SEED.
fn fuzz_budget() -> (u64, u64) {
    let var = |name: &str, default: u64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    (var("NETDAM_FUZZ_FRAMES", 50_000), var("NETDAM_FUZZ_SEED", 0x5EED_0001))
}

/// Fuzzes the node configured with `peers` (NETDAM_FUZZ_FRAMES frames from
/// NETDAM_FUZZ_SEED) and prints a summary; the generator must have reached
/// every verdict and, with peers, CHAIN hops.
fn fuzz_variant(label: &str, peers: &[Ipv4Addr]) {
    let (frames, seed) = fuzz_budget();
    let ns = RunNetns::new(&unique_prefix(), NODE.mac, NODE.ip);
    let inside = ns.inside();
    let tally = fuzz(&node_spec(peers), &inside, frames, seed, None, label).unwrap_or_else(|f| panic!("{f}"));
    let stats = Stats::from_counters(&tally.counters);
    let chain_ok = stats.requests("CHAIN", Status::Ok);
    let forwarded = stats.event(Event::ChainForwarded);
    let secs = tally.elapsed.as_secs_f64();
    let [sent, ran, longest_forwarded] = tally.longest;
    let per_source = stats.event(Event::WindowSourceFull);
    let full = stats.event(Event::WindowFull);
    println!(
        "{label}: {frames} frames (seed {seed:#x}) in {secs:.1} s, {:.0} frames/s; {:?}; CHAIN hops OK {chain_ok}, \
         forwarded {forwarded}; CHAIN programs of {MAX_SEGMENTS} segments: {sent} sent, {ran} ran a hop, \
         {longest_forwarded} forwarded; window_source_full {per_source}, window_full {full}",
        frames as f64 / secs,
        tally.verdicts,
    );
    if peers.is_empty() {
        // Without peers no CHAIN runs: each is dropped and counted.
        let refused = stats.event(Event::DropChainNoPeers);
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
        let spoofed = stats.event(Event::DropPeerMac);
        assert!(spoofed > frames / 100, "too few spoofed peers were dropped ({spoofed})");
    }
    // The window limits are met and compared (which one first depends on
    // the seed; the vectors hold each of them).
    assert!(
        per_source + full > frames / 1000,
        "window limits too seldom met: {per_source} window_source_full, {full} window_full"
    );
    // The generator must reach every verdict, or the comparison proves little.
    for v in ["pass", "drop", "tx"] {
        assert!(
            tally.verdicts.get(v).copied().unwrap_or(0) > frames / 50,
            "too few {v} verdicts: {:?}",
            tally.verdicts
        );
    }
}

/// The first frame after which the implementations disagree.
#[derive(Debug)]
struct Failure {
    seed: u64,
    frame: u64,
    what: String,
    hex: String,
}

impl Failure {
    fn new(seed: u64, frame: u64, f: &[u8], what: String) -> Failure {
        Failure {
            seed,
            frame,
            what,
            hex: f.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            out,
            "frame {} of seed {:#x}: {}\nframe: {}",
            self.frame, self.seed, self.what, self.hex
        )
    }
}

/// What a run saw.
#[derive(Debug)]
struct Tally {
    verdicts: BTreeMap<&'static str, u64>,
    /// CHAIN programs of MAX_SEGMENTS segments: sent, ran a hop, forwarded.
    longest: [u64; 3],
    /// The counters, as the model bumped them.
    counters: Vec<u64>,
    elapsed: Duration,
}

/// A difference made on purpose: this byte of the XDP program's memory
/// flipped after this frame.
#[derive(Clone, Copy)]
struct Fault {
    after: u64,
    addr: u64,
}

/// `frames` frames of `seed` through the model, the XDP program and the C
/// engine configured as `s`, with progress lines under `label`.
fn fuzz(
    s: &NodeSpec,
    inside: &Inside,
    frames: u64,
    seed: u64,
    fault: Option<Fault>,
    label: &str,
) -> Result<Tally, Failure> {
    let mut trio = Trio::new(s, fault);
    let mut stream = Frames::new(seed);
    let mut tally = Tally {
        verdicts: BTreeMap::new(),
        longest: [0; 3],
        counters: Vec::new(),
        elapsed: Duration::ZERO,
    };
    let started = Instant::now();
    let mut next_line = started + PROGRESS_EVERY;
    // The last frame after which memory and counters agreed.
    let mut agreed = None;
    for i in 0..frames {
        let f = stream.next();
        let want = trio
            .step(inside, i, &f)
            .map_err(|what| Failure::new(seed, i, &f, what))?;
        *tally.verdicts.entry(verdict_name(want.action)).or_default() += 1;
        if sr_segments(&f) == Some(MAX_SEGMENTS as u8) {
            tally.longest[0] += 1;
            tally.longest[1] += want.counters.contains(&op_status(Opcode::Chain as u8, Status::Ok)) as u64;
            tally.longest[2] += want.counters.contains(&(Event::ChainForwarded as u32)) as u64;
        }
        if (i + 1) % CHECK_EVERY == 0 || i + 1 == frames {
            if let Err(what) = trio.check_state() {
                // One C engine per process: the replay needs this one gone.
                drop(trio);
                return Err(trace(s, inside, seed, fault, agreed, i, what));
            }
            agreed = Some(i);
        }
        if i % 4096 == 0 && Instant::now() >= next_line {
            next_line += PROGRESS_EVERY;
            let secs = started.elapsed().as_secs_f64();
            let rate = i as f64 / secs;
            let eta = ((frames - i) as f64 / rate) as u64;
            println!(
                "{label}: {i}/{frames} frames ({:.1}%), {rate:.0} frames/s, ETA {} min {:02} s",
                100.0 * i as f64 / frames as f64,
                eta / 60,
                eta % 60
            );
        }
    }
    tally.counters = trio.counters;
    tally.elapsed = started.elapsed();
    Ok(tally)
}

/// Memory or counters differed (`what`) at the check after frame `at`, and
/// agreed after frame `agreed`: replays the seed from a fresh start, now
/// checking after every frame past `agreed`, to name the first frame after
/// which they differ.
fn trace(
    s: &NodeSpec,
    inside: &Inside,
    seed: u64,
    fault: Option<Fault>,
    agreed: Option<u64>,
    at: u64,
    what: String,
) -> Failure {
    println!("memory or counters differ after frame {at}: replaying frames 0..={at} to find the first that differs");
    let mut trio = Trio::new(s, fault);
    let mut stream = Frames::new(seed);
    let mut f = Vec::new();
    for i in 0..=at {
        f = stream.next();
        let replayed = trio.step(inside, i, &f).and_then(|_| {
            if agreed.is_none_or(|a| i > a) {
                trio.check_state()
            } else {
                Ok(())
            }
        });
        if let Err(what) = replayed {
            return Failure::new(seed, i, &f, what);
        }
    }
    Failure::new(
        seed,
        at,
        &f,
        format!("{what} (the replay did not reproduce it: not deterministic?)"),
    )
}

fn verdict_name(a: Action) -> &'static str {
    match a {
        Action::Pass => "pass",
        Action::Drop => "drop",
        Action::Tx => "tx",
        Action::Redirect => "redirect",
    }
}

/// The segment count in a CHAIN frame's SR header, if it has one.
fn sr_segments(f: &[u8]) -> Option<u8> {
    let udp = 14 + 4 * (f.get(14)? & 0x0F) as usize;
    let h = NetdamHdr::from_bytes(f.get(udp + 8..)?)?;
    if h.opcode != Opcode::Chain as u8 || (h.sr_len as usize) < SR_FIXED_LEN {
        return None;
    }
    f.get(udp + 8 + HDR_LEN).copied()
}

/// The frames of a seed: new ones, and now and then a recent one again as
/// a retransmission, so that the at-most-once window's repeats and stale
/// answers are compared too.
struct Frames {
    rng: Rng,
    recent: Vec<Vec<u8>>,
}

impl Frames {
    fn new(seed: u64) -> Frames {
        Frames {
            rng: Rng(seed | 1),
            recent: Vec::with_capacity(64),
        }
    }

    fn next(&mut self) -> Vec<u8> {
        let rng = &mut self.rng;
        if !self.recent.is_empty() && rng.chance(10) {
            return self.recent[rng.below(self.recent.len() as u64) as usize].clone();
        }
        let f = generate(rng);
        if self.recent.len() < 64 {
            self.recent.push(f.clone());
        } else {
            self.recent[rng.below(64) as usize] = f.clone();
        }
        f
    }
}

/// The XDP program, the model and the C engine, configured alike.
struct Trio {
    node: Node,
    model: ModelNode,
    engine: CEngine,
    /// The counters as the model bumped them.
    counters: Vec<u64>,
    fault: Option<Fault>,
}

impl Trio {
    fn new(s: &NodeSpec, fault: Option<Fault>) -> Trio {
        let mut node = load(s);
        node.set_readiness(RKEY_RW, READINESS).unwrap();
        node.bind_peer_macs(&NEIGHBOURS).unwrap();
        Trio {
            node,
            model: model_of(s),
            engine: CEngine::new(s, &NEIGHBOURS, &[(RKEY_RW, READINESS)]),
            counters: vec![0; netdam_common::counters::COUNTER_SLOTS as usize],
            fault,
        }
    }

    /// Frame number `i` through all three: the model's outcome, or how the
    /// others differ from it (verdict or output frame).
    fn step(&mut self, inside: &Inside, i: u64, f: &[u8]) -> Result<model::Outcome, String> {
        let want = self.model.process(f);
        let got = inside.run(&self.node, f);
        let differs = |what: &str| {
            Err(format!(
                "{what}\nmodel: {want:?}\nxdp action {} frame {:02x?}",
                got.action, got.frame
            ))
        };
        let action = match got.action {
            XDP_PASS => Action::Pass,
            XDP_DROP => Action::Drop,
            XDP_TX => Action::Tx,
            XDP_REDIRECT => Action::Redirect,
            other => return differs(&format!("unexpected XDP action {other}")),
        };
        if action != want.action {
            return differs("verdicts differ");
        }
        if action != Action::Drop && got.frame != want.frame {
            return differs("output frames differ");
        }
        let (c_action, c_frame) = self.engine.process(f);
        if c_action != want.action {
            return differs(&format!("the C engine's verdict differs: {c_action:?}"));
        }
        if c_action != Action::Drop && c_frame != want.frame {
            return differs(&format!("the C engine's output frame differs: {c_frame:02x?}"));
        }
        for c in &want.counters {
            self.counters[*c as usize] += 1;
        }
        if let Some(fault) = self.fault.filter(|x| x.after == i) {
            let mem = self.node.memory();
            let mut b = [0u8];
            mem.read_into(fault.addr, &mut b).unwrap();
            mem.write(fault.addr, &[!b[0]]).unwrap();
        }
        Ok(want)
    }

    /// The XDP program's and the C engine's memory and counters against
    /// the model's.
    fn check_state(&self) -> Result<(), String> {
        // A memcmp first; the byte-wise search only for the report.
        let first_difference = |mem: &[u8]| {
            (mem != self.model.mem).then(|| mem.iter().zip(&self.model.mem).position(|(a, b)| a != b).unwrap())
        };
        let xdp_mem = self.node.memory().read(0, self.model.mem.len()).unwrap();
        if let Some(at) = first_difference(&xdp_mem) {
            return Err(format!("memory differs first at {at:#x}"));
        }
        if self.node.counters().unwrap() != self.counters {
            return Err("counters differ".into());
        }
        if let Some(at) = first_difference(&self.engine.mem) {
            return Err(format!("the C engine's memory differs first at {at:#x}"));
        }
        if self.engine.counters() != self.counters {
            return Err("the C engine's counters differ".into());
        }
        Ok(())
    }
}

/// The reference model configured as `s`, with the readiness (generation
/// and call word) and the peers' MACs the fuzzed node has.
fn model_of(s: &NodeSpec) -> ModelNode {
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
        s.window_per_source as usize,
    );
    model.generations.insert(RKEY_RW, READINESS);
    model.neighbours.extend(NEIGHBOURS);
    model
}

/// The model and the C engine alone, frame by frame, on both
/// configurations: no XDP program, so no privileges needed (it runs
/// wherever the tests build). With the peer table the generator's
/// version-2 CHAIN programs must have run hops (stamping `done`), held
/// partials, met STALE (one generation behind is STALE in version 2 too)
/// and MISMATCH (another call word at the generation).
#[test]
fn model_and_c_engine_agree_frame_by_frame() {
    let (frames, seed) = fuzz_budget();
    let peers: Vec<Ipv4Addr> = NEIGHBOURS.iter().map(|(ip, _)| *ip).chain([UNRESOLVED]).collect();
    for (label, peers) in [("no peers", &[][..]), ("peer table", &peers[..])] {
        let s = node_spec(peers);
        let mut model = model_of(&s);
        let mut engine = CEngine::new(&s, &NEIGHBOURS, &[(RKEY_RW, READINESS)]);
        let mut counters = vec![0u64; netdam_common::counters::COUNTER_SLOTS as usize];
        let mut stream = Frames::new(seed);
        let (mut v2_ok, mut v2_stale) = (0u64, 0u64);
        for i in 0..frames {
            let f = stream.next();
            let want = model.process(&f);
            let (action, frame) = engine.process(&f);
            let fail = |what: &str| -> ! {
                panic!(
                    "{}\nmodel: {want:?}\nC engine: {action:?} {frame:02x?}",
                    Failure::new(seed, i, &f, format!("{label}: {what}"))
                )
            };
            if action != want.action {
                fail("the C engine's verdict differs");
            }
            if action != Action::Drop && frame != want.frame {
                fail("the C engine's output frame differs");
            }
            for c in &want.counters {
                counters[*c as usize] += 1;
            }
            let chain_ok = want.counters.contains(&op_status(Opcode::Chain as u8, Status::Ok));
            let chain_stale = want.counters.contains(&op_status(Opcode::Chain as u8, Status::Stale));
            let v2 = chain_version(&f) == Some(VERSION_2);
            v2_ok += (chain_ok && v2) as u64;
            v2_stale += (chain_stale && v2) as u64;
            if (i + 1) % CHECK_EVERY == 0 || i + 1 == frames {
                if let Some(at) = (engine.mem != model.mem)
                    .then(|| engine.mem.iter().zip(&model.mem).position(|(a, b)| a != b).unwrap())
                {
                    fail(&format!(
                        "the C engine's memory differs first at {at:#x} (checked every {CHECK_EVERY} frames)"
                    ));
                }
                if engine.counters() != counters {
                    fail(&format!(
                        "the C engine's counters differ (checked every {CHECK_EVERY} frames)"
                    ));
                }
            }
        }
        let stats = Stats::from_counters(&counters);
        let held = stats.requests("CHAIN", Status::Held);
        let mismatch = stats.requests("CHAIN", Status::Mismatch);
        println!(
            "{label}: {frames} frames (seed {seed:#x}): model and C engine agree; version-2 CHAIN hops OK {v2_ok}, \
             held {held}, STALE {v2_stale}, MISMATCH {mismatch}"
        );
        if !peers.is_empty() {
            assert!(
                v2_ok > frames / 1000 && held > 0 && v2_stale > 0 && mismatch > 0,
                "too few version-2 CHAIN hops ran ({v2_ok}), were held ({held}), STALE ({v2_stale}) or MISMATCH \
                 ({mismatch})"
            );
        }
    }
}

/// The NetDAM header's version of a CHAIN frame.
fn chain_version(f: &[u8]) -> Option<u8> {
    let udp = 14 + 4 * (f.get(14)? & 0x0F) as usize;
    let h = NetdamHdr::from_bytes(f.get(udp + 8..)?)?;
    (h.opcode == Opcode::Chain as u8).then_some(h.version)
}
