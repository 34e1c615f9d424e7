//! Tier 2: the ALU of the XDP program (REDUCE) against the host's, through BPF_PROG_TEST_RUN.

use netdam_common::{
    config::MEM_CHUNK,
    frame::{netdam_frame, parse_udp},
    wire::{Alu, Dtype},
    NetdamHdr, Opcode, Status,
};
use netdam_tests::{progrun::*, PinDir, Rng};

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
            let mut after = vec![0u8; mem.len()];
            node.memory().read(addr, &mut after).unwrap();
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

#[test]
fn verifier_cost_is_reported() {
    netdam_tests::require_root();
    let t = std::time::Instant::now();
    let node = load(&spec());
    let load_time = t.elapsed();
    let info = node.program().info().expect("program info");
    let insns = info.verified_instruction_count().unwrap_or(0);
    println!(
        "netdam XDP program: {insns} instructions verified, loaded in {:.1} ms",
        load_time.as_secs_f64() * 1e3
    );
    assert!(insns > 0);
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
            let mut after = vec![0u8; mem.len()];
            node.memory().read(addr, &mut after).unwrap();
            assert_eq!(
                after,
                expected(dtype, alu, &mem, &v),
                "{dtype:?} {alu:?}: mem[i] = alu(mem[i], v[i])"
            );
            // Idempotent: applying the same request again changes nothing.
            run(&node, &accumulate_frame(dtype, alu, addr, &v, pairs));
            let mut again = vec![0u8; mem.len()];
            node.memory().read(addr, &mut again).unwrap();
            assert_eq!(again, after, "{dtype:?} {alu:?} applied twice");
            // The neighbours of the vector are untouched.
            let mut edges = [0u8; 8];
            node.memory().read(addr - 4, &mut edges[..4]).unwrap();
            node.memory().read(addr + 1440, &mut edges[4..]).unwrap();
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
            let mut after = vec![0u8; mem.len()];
            node.memory().read(addr, &mut after).unwrap();
            assert_eq!(after, expected(dtype, alu, &mem, &v), "{dtype:?} {alu:?}");
            // The retransmission (same seq) is a DUPLICATE and changes nothing.
            assert_eq!(status_of(&run(&node, &f)), Some(Status::Duplicate), "{dtype:?} {alu:?}");
            let mut again = vec![0u8; mem.len()];
            node.memory().read(addr, &mut again).unwrap();
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
        let mut m = vec![0u8; (REGIONS * 1440) as usize];
        nodes[0].memory().read(base, &mut m).unwrap();
        let full = if w == 8 { u64::MAX } else { u32::MAX as u64 };
        for (i, word) in m.chunks(w).enumerate() {
            let mut b = [0u8; 8];
            b[..w].copy_from_slice(word);
            assert_eq!(u64::from_le_bytes(b), full, "{dtype:?} word {i} lost an update");
        }
    }
}
