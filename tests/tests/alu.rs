//! Tier 2: the ALU of the XDP program (REDUCE) against the host's, through BPF_PROG_TEST_RUN.

use netdam_common::{
    config::MEM_CHUNK,
    frame::{netdam_frame, parse_udp},
    wire::{Alu, Dtype},
    NetdamHdr, Opcode, Status,
};
use netdam_tests::{progrun::*, PinDir, Rng};
use std::sync::atomic::{AtomicU32, Ordering};

trait Elements {
    fn element(&mut self, w: u32) -> u64;
}

impl Elements for Rng {
    /// Mostly random bits, with the f32 special classes mixed in.
    fn element(&mut self, w: u32) -> u64 {
        const F32_SPECIAL: [u32; 8] = [
            0,
            0x8000_0000,
            1,
            0x807F_FFFF,
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0001,
            0x7F7F_FFFF,
        ];
        match self.next_u64() % 8 {
            0 if w == 4 => F32_SPECIAL[(self.next_u64() % 8) as usize] as u64,
            _ => self.next_u64() >> if w == 4 { 32 } else { 0 },
        }
    }
}

/// 1440 bytes (a full MTU-1500 payload) of `dtype` elements from `rng`.
fn random_vector(rng: &mut Rng, dtype: Dtype) -> Vec<u8> {
    let w = dtype.width();
    (0..1440 / w)
        .flat_map(|_| rng.element(w).to_le_bytes()[..w as usize].to_vec())
        .collect()
}

fn reduce_frame(dtype: Dtype, alu: Alu, addr: u64, v: &[u8]) -> Vec<u8> {
    let mut h = NetdamHdr::request(Opcode::Reduce);
    h.dtype = dtype as u8;
    h.alu = alu as u8;
    h.set_rkey(RKEY_RW);
    h.set_addr(addr);
    h.set_len(v.len() as u16);
    h.set_seq(9);
    netdam_frame(&CLIENT, &NODE, &h, v)
}

/// The reference model's element-wise alu(a[i], b[i]).
fn expected(dtype: Dtype, alu: Alu, a: &[u8], b: &[u8]) -> Vec<u8> {
    netdam_common::model::combine(dtype, alu, a, b)
}

#[test]
fn reduce_matches_the_host_alu_for_every_dtype_and_operator() {
    let node = load(&spec());
    let mut rng = Rng(0xC0FFEE);
    // 1440 bytes (360 f32, a full MTU-1500 payload), placed across a chunk boundary.
    let addr = MEM_CHUNK as u64 - 720;
    let mut pairs = 0;
    for &dtype in Dtype::ALL {
        for &alu in Alu::ALL {
            if dtype == Dtype::F32 && alu.is_bitwise() {
                continue;
            }
            pairs += 1;
            let mem = random_vector(&mut rng, dtype);
            let v = random_vector(&mut rng, dtype);
            node.memory().write(addr, &mem).unwrap();
            let req = reduce_frame(dtype, alu, addr, &v);
            let o = run(&node, &req);
            assert_eq!(o.action, XDP_TX, "{dtype:?} {alu:?}");
            let a = parse_udp(&o.frame).unwrap();
            let (h, payload) = a.netdam().unwrap();
            assert_eq!(Status::from_u8(h.status), Some(Status::Ok), "{dtype:?} {alu:?}");
            assert_eq!(
                payload,
                expected(dtype, alu, &v, &mem),
                "{dtype:?} {alu:?}: the data path and the host ALU differ"
            );
            let after = node.memory().read(addr, mem.len()).unwrap();
            assert_eq!(after, mem, "REDUCE leaves memory unchanged");
        }
    }
    // 5 dtypes x 6 operators, less the 3 bitwise ones on f32.
    assert_eq!(pairs, 27);
}

#[test]
fn reduce_validation() {
    let node = load(&spec());
    let cases = [
        (5, 4, 16, 0x1000, Status::BadDtype), // AND on f32
        (9, 1, 16, 0x1000, Status::BadDtype),
        (1, 1, 6, 0x1000, Status::Misaligned),
        (3, 1, 16, 0x1004, Status::Misaligned), // i64 at a 4-aligned address
        (1, 1, 16, RO.base, Status::BadKey),
    ];
    for (dtype, alu, len, addr, want) in cases {
        let mut h = NetdamHdr::request(Opcode::Reduce);
        h.dtype = dtype;
        h.alu = alu;
        h.set_rkey(RKEY_RW);
        h.set_addr(addr);
        h.set_len(len);
        if want == Status::BadKey {
            h.set_rkey(0xBAD);
        }
        let o = run(&node, &netdam_frame(&CLIENT, &NODE, &h, &vec![0; len as usize]));
        let (ah, _) = parse_udp(&o.frame).unwrap().netdam().unwrap();
        assert_eq!(
            Status::from_u8(ah.status),
            Some(want),
            "dtype {dtype} alu {alu} len {len} addr {addr:#x}"
        );
    }
}

/// Verified-instruction budgets: the kernel refuses a program past 1,000,000
/// processed instructions, and these leave room under it for other kernels'
/// verifiers (which prune differently) and for what is still to come. A
/// change that crosses one must say why in docs/conformance.md's verifier
/// figures, or find the instructions back.
const NETDAM_BUDGET: u32 = 400_000;
const CHAIN_BUDGET: u32 = 500_000;

#[test]
fn verifier_cost_is_within_budget() {
    netdam_tests::require_root();
    let t = std::time::Instant::now();
    let node = load(&spec());
    let load_time = t.elapsed();
    let info = node.program().info().expect("program info");
    let insns = info.verified_instruction_count().unwrap_or(0);
    println!(
        "netdam XDP program: {insns} instructions verified, loaded in {:.1} ms (with netdam_chain and netdam_inject)",
        load_time.as_secs_f64() * 1e3
    );
    assert!(
        insns > 0 && insns <= NETDAM_BUDGET,
        "netdam: {insns} verified instructions, budget {NETDAM_BUDGET}"
    );
    // The CHAIN program has a budget of its own (it is tail-called).
    let chain = node.chain_program().info().expect("chain program info");
    let chain_insns = chain.verified_instruction_count().unwrap_or(0);
    println!("netdam_chain XDP program: {chain_insns} instructions verified");
    assert!(
        chain_insns > 0 && chain_insns <= CHAIN_BUDGET,
        "netdam_chain: {chain_insns} verified instructions, budget {CHAIN_BUDGET}"
    );
}

fn accumulate_frame(dtype: Dtype, alu: Alu, addr: u64, v: &[u8], seq: u32) -> Vec<u8> {
    let mut h = NetdamHdr::request(Opcode::Accumulate);
    h.flags = netdam_common::wire::flags::ACK_REQ;
    h.dtype = dtype as u8;
    h.alu = alu as u8;
    h.set_rkey(RKEY_RW);
    h.set_addr(addr);
    h.set_len(v.len() as u16);
    h.set_seq(seq);
    netdam_frame(&CLIENT, &NODE, &h, v)
}

fn status_of(o: &Outcome) -> Option<Status> {
    Status::from_u8(parse_udp(&o.frame)?.netdam()?.0.status)
}

#[test]
fn accumulate_with_idempotent_operators_matches_the_host_alu() {
    let node = load(&spec());
    let mut rng = Rng(0xACC);
    let addr = MEM_CHUNK as u64 - 720;
    let mut pairs = 0;
    for &dtype in Dtype::ALL {
        for alu in [Alu::Min, Alu::Max, Alu::And, Alu::Or] {
            if dtype == Dtype::F32 && alu.is_bitwise() {
                continue;
            }
            pairs += 1;
            let mem = random_vector(&mut rng, dtype);
            let v = random_vector(&mut rng, dtype);
            node.memory().write(addr, &mem).unwrap();
            let o = run(&node, &accumulate_frame(dtype, alu, addr, &v, pairs));
            assert_eq!(o.action, XDP_TX, "{dtype:?} {alu:?}");
            assert_eq!(status_of(&o), Some(Status::Ok), "{dtype:?} {alu:?}");
            let after = node.memory().read(addr, mem.len()).unwrap();
            assert_eq!(
                after,
                expected(dtype, alu, &mem, &v),
                "{dtype:?} {alu:?}: mem[i] = alu(mem[i], v[i])"
            );
            // Idempotent: applying the same request again changes nothing.
            run(&node, &accumulate_frame(dtype, alu, addr, &v, pairs));
            let again = node.memory().read(addr, mem.len()).unwrap();
            assert_eq!(again, after, "{dtype:?} {alu:?} applied twice");
            // The neighbours of the vector are untouched.
            let mut edges = [0u8; 8];
            node.memory().read_into(addr - 4, &mut edges[..4]).unwrap();
            node.memory().read_into(addr + 1440, &mut edges[4..]).unwrap();
            assert_eq!(edges, [0; 8], "{dtype:?} {alu:?}");
        }
    }
    // 4 integer types x 4 operators, f32 x MIN and MAX.
    assert_eq!(pairs, 18);
}

#[test]
fn accumulate_add_and_xor_match_the_host_alu_and_apply_once() {
    let node = load(&spec());
    let mut rng = Rng(0xADD);
    let addr = MEM_CHUNK as u64 - 720;
    for &dtype in Dtype::ALL {
        for alu in [Alu::Add, Alu::Xor] {
            if dtype == Dtype::F32 && alu.is_bitwise() {
                continue;
            }
            let mem = random_vector(&mut rng, dtype);
            let v = random_vector(&mut rng, dtype);
            node.memory().write(addr, &mem).unwrap();
            let seq = rng.next_u64() as u32;
            let f = accumulate_frame(dtype, alu, addr, &v, seq);
            assert_eq!(status_of(&run(&node, &f)), Some(Status::Ok), "{dtype:?} {alu:?}");
            let after = node.memory().read(addr, mem.len()).unwrap();
            assert_eq!(after, expected(dtype, alu, &mem, &v), "{dtype:?} {alu:?}");
            // The retransmission (same seq) is a DUPLICATE and changes nothing.
            assert_eq!(status_of(&run(&node, &f)), Some(Status::Duplicate), "{dtype:?} {alu:?}");
            let again = node.memory().read(addr, mem.len()).unwrap();
            assert_eq!(again, after, "{dtype:?} {alu:?} applied twice");
        }
    }
}

#[test]
fn accumulate_loses_no_update_under_two_cpus() {
    netdam_tests::require_root();
    let dir = PinDir(std::path::PathBuf::from(format!(
        "/sys/fs/bpf/netdam-test-{}-acc",
        std::process::id()
    )));
    let s = spec();
    // Two program instances sharing one memory through the pinned maps, one per CPU.
    let nodes = [
        netdam_user::Node::load(&s, Some(&dir.0)).unwrap(),
        netdam_user::Node::load(&s, Some(&dir.0)).unwrap(),
    ];
    assert!(nodes[1].reused_pins);
    // Every bit is set by exactly one request, so an update lost to a racing
    // write is never set again and shows in the end. Both threads walk the
    // same regions in the same order, so they keep hitting the same words.
    const REGIONS: u64 = 64;
    for (dtype, bits_per_thread, base) in [
        (Dtype::U64, 32u32, RW.base),
        (Dtype::U32, 16u32, RW.base + REGIONS * 1440),
    ] {
        let w = dtype.width() as usize;
        std::thread::scope(|scope| {
            for (t, node) in nodes.iter().enumerate() {
                scope.spawn(move || {
                    for bit in 0..bits_per_thread {
                        let b = 1u64 << (t as u32 * bits_per_thread + bit);
                        let v: Vec<u8> = (0..1440 / w).flat_map(|_| b.to_le_bytes()[..w].to_vec()).collect();
                        for k in 0..REGIONS {
                            let f = accumulate_frame(dtype, Alu::Or, base + k * 1440, &v, bit);
                            let mut o = run(node, &f);
                            // NOT_READY (contention) asks the sender to retry.
                            while status_of(&o) == Some(Status::NotReady) {
                                o = run(node, &f);
                            }
                            assert_eq!(status_of(&o), Some(Status::Ok));
                        }
                    }
                });
            }
        });
        let m = nodes[0].memory().read(base, (REGIONS * 1440) as usize).unwrap();
        let full = if w == 8 { u64::MAX } else { u32::MAX as u64 };
        for (i, word) in m.chunks(w).enumerate() {
            let mut b = [0u8; 8];
            b[..w].copy_from_slice(word);
            assert_eq!(u64::from_le_bytes(b), full, "{dtype:?} word {i} lost an update");
        }
    }
}

/// REDUCE and ACCUMULATE against the host ALU where the data path splits a
/// vector: whole blocks, a shorter rest, a chunk boundary inside or at
/// the edge of a block, and memory that is 4 but not 8 bytes aligned.
#[test]
fn vector_ops_match_the_host_alu_at_every_split() {
    let node = load(&spec());
    let mut rng = Rng(0x5B1);
    let mut seq = 1u32;
    let mut cases = 0;
    for &dtype in Dtype::ALL {
        let w = dtype.width() as u64;
        for &alu in Alu::ALL {
            if dtype == Dtype::F32 && alu.is_bitwise() {
                continue;
            }
            // Element counts around the block sizes (16 or 32 elements of a 128-byte block).
            for elems in [1u64, 2, 3, 15, 16, 17, 31, 32, 33, 64, 65, 97, 180] {
                // Chunk offsets of the start, before a chunk boundary: aligned to 8, or to 4 only.
                for before in [0u64, 4, 8, 60, 128, 132, 4 * elems / 2] {
                    let addr = MEM_CHUNK as u64 - before * w / 4;
                    if !addr.is_multiple_of(w) {
                        continue;
                    }
                    cases += 1;
                    let len = (elems * w) as usize;
                    let mem: Vec<u8> = (0..len / w as usize)
                        .flat_map(|_| rng.element(w as u32).to_le_bytes()[..w as usize].to_vec())
                        .collect();
                    let v: Vec<u8> = (0..len / w as usize)
                        .flat_map(|_| rng.element(w as u32).to_le_bytes()[..w as usize].to_vec())
                        .collect();
                    let what = format!("{dtype:?} {alu:?} {elems} elements at {addr:#x}");
                    node_zero(&node, addr - 8, len + 16);
                    node.memory().write(addr, &mem).unwrap();
                    let o = run(&node, &reduce_frame(dtype, alu, addr, &v));
                    let a = parse_udp(&o.frame).unwrap();
                    let (h, payload) = a.netdam().unwrap();
                    assert_eq!(Status::from_u8(h.status), Some(Status::Ok), "REDUCE {what}");
                    assert_eq!(payload, expected(dtype, alu, &v, &mem), "REDUCE {what}");
                    seq += 1;
                    let o = run(&node, &accumulate_frame(dtype, alu, addr, &v, seq));
                    assert_eq!(status_of(&o), Some(Status::Ok), "ACCUMULATE {what}");
                    let after = node.memory().read(addr, len).unwrap();
                    assert_eq!(after, expected(dtype, alu, &mem, &v), "ACCUMULATE {what}");
                    // The neighbours are untouched.
                    let mut edges = [0u8; 8];
                    node.memory().read_into(addr - 4, &mut edges[..4]).unwrap();
                    node.memory().read_into(addr + len as u64, &mut edges[4..]).unwrap();
                    assert_eq!(edges, [0; 8], "ACCUMULATE {what}");
                }
            }
        }
    }
    assert!(cases > 1000, "{cases} cases");
}

/// ACCUMULATE ADD from two CPUs at once on the same elements: every add
/// lands (the atomic instructions lose no update), for 4- and 8-byte elements.
#[test]
fn accumulate_add_loses_no_update_under_two_cpus() {
    netdam_tests::require_root();
    let dir = PinDir(std::path::PathBuf::from(format!(
        "/sys/fs/bpf/netdam-test-{}-add",
        std::process::id()
    )));
    let s = spec();
    let nodes = [
        netdam_user::Node::load(&s, Some(&dir.0)).unwrap(),
        netdam_user::Node::load(&s, Some(&dir.0)).unwrap(),
    ];
    const ROUNDS: u32 = 2000;
    let next_seq = AtomicU32::new(1);
    let next_seq = &next_seq;
    for (dtype, base) in [(Dtype::U32, RW.base), (Dtype::U64, RW.base + 2048)] {
        let w = dtype.width() as usize;
        node_zero(&nodes[0], base, 1440);
        std::thread::scope(|scope| {
            for (t, node) in nodes.iter().enumerate() {
                scope.spawn(move || {
                    // Element i gets i + 1 per request, from each thread.
                    let v: Vec<u8> = (0..1440 / w)
                        .flat_map(|i| ((i + 1) as u64).to_le_bytes()[..w].to_vec())
                        .collect();
                    for _ in 0..ROUNDS {
                        // Both threads are one source: a seq from the shared counter, and
                        // a new one when a seq went STALE (not executed) because the
                        // other thread got 1024 ahead meanwhile.
                        loop {
                            let seq = next_seq.fetch_add(1, Ordering::Relaxed);
                            let f = accumulate_frame(dtype, Alu::Add, base, &v, seq);
                            match status_of(&run(node, &f)) {
                                Some(Status::Ok) => break,
                                Some(Status::Stale) => continue,
                                other => panic!("{dtype:?} thread {t}: {other:?}"),
                            }
                        }
                    }
                });
            }
        });
        let m = nodes[0].memory().read(base, 1440).unwrap();
        for (i, e) in m.chunks(w).enumerate() {
            let mut b = [0u8; 8];
            b[..w].copy_from_slice(e);
            assert_eq!(
                u64::from_le_bytes(b),
                2 * ROUNDS as u64 * (i as u64 + 1),
                "{dtype:?} element {i} lost an update"
            );
        }
    }
}

/// Zeroes `len` bytes of the node's memory at `addr`.
fn node_zero(node: &netdam_user::Node, addr: u64, len: usize) {
    node.memory().write(addr, &vec![0u8; len]).unwrap();
}
