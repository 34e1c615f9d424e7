//! Tier 3: the ring all-reduce of PROTOCOL.md section 6 done by the nodes'
//! data paths on the testbed, every member's output checked bit for bit
//! against the ring's defined result (`chain::ring_result`, the order in
//! which the REDUCE hops fold each chunk).

use std::time::{Duration, Instant};

use netdam_common::{
    chain::{ring_chunk_elems, ring_result},
    wire::{Alu, Dtype},
};
use netdam_lab::testbed::{Chaos, Testbed};
use netdam_tests::{
    netdam_bin, require_root,
    ring::{Answer, Call, Ring, RKEY},
    unique_prefix, Rng,
};
use netdam_user::{
    collective::{inputs::member_input, Allreduce, CollectiveConfig, Report, TxPath},
    controller::LocalNode,
    stats::Stats,
};

/// Where every member keeps its input and output (the sync area is at 0).
const INPUT: u64 = 4096;

fn op(count: u64, dtype: Dtype, alu: Alu) -> Allreduce {
    let bytes = count * dtype.width() as u64;
    let output_addr = (INPUT + bytes).next_multiple_of(4096);
    Allreduce {
        rkey: RKEY,
        input_addr: INPUT,
        output_addr,
        cells_addr: (output_addr + bytes).next_multiple_of(4096),
        count,
        dtype,
        alu,
    }
}

/// Seeded inputs of every member: random finite f32 of many magnitudes, so
/// that another summation order gives other bits; random integers.
fn inputs(seed: u64, members: usize, op: &Allreduce) -> Vec<Vec<u8>> {
    (0..members)
        .map(|r| {
            let mut v = vec![0u8; (op.count * op.dtype.width() as u64) as usize];
            member_input(seed, r, op.dtype, 0, &mut v);
            v
        })
        .collect()
}

/// Runs `op` on the ring and checks every member's output against the ring's result.
fn check(ring: &Ring, op: &Allreduce, seed: u64) {
    let n = ring.ips().len();
    let ins = inputs(seed, n, op);
    let views: Vec<&[u8]> = ins.iter().map(|v| &v[..]).collect();
    let mut expected = vec![0u8; ins[0].len()];
    let e = ring_chunk_elems(1500, n, op.dtype.width());
    ring_result(op.dtype, op.alu, &views, e, 0, &mut expected);
    for (rank, answer) in ring.allreduce(op, &ins).into_iter().enumerate() {
        let what = format!(
            "{n} members, {} x {} {}, member {rank}",
            op.count,
            op.dtype.name(),
            op.alu.name()
        );
        let (report, out) = answer.unwrap_or_else(|e| panic!("{what}: {e}"));
        let w = op.dtype.width() as usize;
        if let Some(i) = (0..out.len() / w).find(|&i| out[i * w..(i + 1) * w] != expected[i * w..(i + 1) * w]) {
            panic!(
                "{what}: element {i} is {:02x?}, the ring's result is {:02x?} (generation {})",
                &out[i * w..(i + 1) * w],
                &expected[i * w..(i + 1) * w],
                report.generation
            );
        }
    }
}

/// `op` with seeded inputs for `members`.
fn call(op: Allreduce, seed: u64, members: usize) -> Call {
    Call {
        op,
        inputs: inputs(seed, members, &op),
    }
}

/// Every member's answer to every call of `calls` is the ring's result, bit
/// for bit; their reports, per member, per call.
fn exact(calls: &[Call], answers: &[Vec<Answer>]) -> Vec<Vec<Report>> {
    exact_at(1500, calls, answers)
}

/// `exact` for a ring chunked at `mtu`.
fn exact_at(mtu: u32, calls: &[Call], answers: &[Vec<Answer>]) -> Vec<Vec<Report>> {
    answers
        .iter()
        .enumerate()
        .map(|(rank, mine)| {
            assert_eq!(mine.len(), calls.len(), "member {rank} stopped early: {mine:?}");
            mine.iter()
                .zip(calls)
                .enumerate()
                .map(|(c, (answer, call))| {
                    let n = call.inputs.len();
                    let views: Vec<&[u8]> = call.inputs.iter().map(|v| &v[..]).collect();
                    let mut expected = vec![0u8; views[0].len()];
                    let e = ring_chunk_elems(mtu, n, call.op.dtype.width());
                    ring_result(call.op.dtype, call.op.alu, &views, e, 0, &mut expected);
                    let (report, out) = answer
                        .as_ref()
                        .unwrap_or_else(|e| panic!("member {rank}, call {c} ({:?}): {e}", call.op));
                    assert!(
                        *out == expected,
                        "member {rank}, call {c} ({:?}): not the ring's result (generation {})",
                        call.op,
                        report.generation
                    );
                    *report
                })
                .collect()
        })
        .collect()
}

/// Every dtype and sum, min, max, at the edge sizes: one element, one
/// chunk and one element either side of it, 1 MiB.
fn every_dtype_op_and_size(n: usize) {
    let ring = Ring::new(n, "4MiB", CollectiveConfig::default());
    let mut seed = Rng(0xC0FFEE + n as u64);
    for dtype in Dtype::ALL.iter().copied() {
        let e = ring_chunk_elems(1500, n, dtype.width()) as u64;
        let mib = (1 << 20) / dtype.width() as u64;
        for alu in [Alu::Add, Alu::Min, Alu::Max] {
            for count in [1, e - 1, e, e + 1, mib] {
                check(&ring, &op(count, dtype, alu), seed.next_u64());
            }
        }
    }
}

#[test]
fn two_members_every_dtype_op_and_size() {
    every_dtype_op_and_size(2);
}

#[test]
fn three_members_every_dtype_op_and_size() {
    every_dtype_op_and_size(3);
}

#[test]
fn four_members_every_dtype_op_and_size() {
    every_dtype_op_and_size(4);
}

#[test]
fn eight_members_every_dtype_op_and_size() {
    every_dtype_op_and_size(8);
}

/// The version-2 ring ends its WRITE pass at the originator's own node
/// (docs/PROTOCOL.md, version 2), which hands the answer to its host: every
/// chunk a member originates is answered by its own node, and no answer of
/// a completed chunk crosses the fabric.
#[test]
fn every_chunk_is_answered_by_its_originators_own_node() {
    let ring = Ring::new(4, "4MiB", CollectiveConfig::default());
    let event = |i: usize, name: &str| -> u64 {
        Stats::read_pinned(&ring.tb.hosts[i].pin_dir)
            .expect("the node's counters")
            .events
            .iter()
            .find(|e| e.event == name)
            .map_or(0, |e| e.count)
    };
    let counts = |name: &str| -> Vec<u64> { (0..4).map(|i| event(i, name)).collect() };
    let (local0, wire0) = (counts("pass_local_answer"), counts("pass_response"));
    // 293 chunks: 74 or 73 a member.
    let op = op(100_000, Dtype::I32, Alu::Add);
    let answers = ring.allreduce(&op, &inputs(11, 4, &op));
    let (local1, wire1) = (counts("pass_local_answer"), counts("pass_response"));
    for (rank, answer) in answers.into_iter().enumerate() {
        let (report, _) = answer.unwrap_or_else(|e| panic!("member {rank}: {e}"));
        assert!(report.own_chunks >= 73, "member {rank}: {report:?}");
        let local = local1[rank] - local0[rank];
        assert!(
            (report.own_chunks..=report.sent).contains(&local),
            "member {rank}: its node answered {local} chunks to it, it originated {} and sent {} requests",
            report.own_chunks,
            report.sent
        );
        // Only early answers (HELD, NOT_READY) come from other members' nodes.
        let wire = wire1[rank] - wire0[rank];
        assert!(
            wire <= report.held + report.not_ready,
            "member {rank}: {wire} answers came across the fabric, {} HELD and {} NOT_READY",
            report.held,
            report.not_ready
        );
    }
}

#[test]
fn sixty_four_mib_on_four_members() {
    // Sync area in the first 4 KiB, then 64 MiB of input, 64 MiB of output
    // and the cells (a 24-byte head and room for a held chunk per chunk).
    let ring = Ring::new(4, "196MiB", CollectiveConfig::default());
    let count = (64 << 20) / 4;
    check(&ring, &op(count, Dtype::I32, Alu::Add), 1);
    check(&ring, &op(count, Dtype::F32, Alu::Add), 2);
}

/// A 3-member ring whose chunks leave by `path`: bit-exact at one chunk, a
/// member's last chunk cut short, and many per member, and the reports say
/// the chunks went that way.
fn chunks_leave_bit_exact_by(path: TxPath, cfg: CollectiveConfig, many: u64) {
    let ring = Ring::new(3, "4MiB", cfg);
    for (dtype, alu) in [(Dtype::I32, Alu::Add), (Dtype::F32, Alu::Add), (Dtype::U64, Alu::Min)] {
        let e = ring_chunk_elems(1500, 3, dtype.width()) as u64;
        for count in [1, 3 * e + 1, many] {
            check(&ring, &op(count, dtype, alu), count);
        }
    }
    let ins = inputs(9, 3, &op(100, Dtype::I32, Alu::Add));
    for answer in ring.allreduce(&op(100, Dtype::I32, Alu::Add), &ins) {
        assert_eq!(answer.expect("all-reduce").0.transmit, path, "how the chunks left");
    }
}

/// Through the injector where the kernel runs it; where it refuses (Linux
/// 6.18.44 answers EPERM to the injector's live-frames run, 2026-12-06,
/// cause not found), that refusal and nothing else, and the fallback to the
/// socket, bit-exact and reported as such.
#[test]
fn chunks_sent_through_the_injector_are_bit_exact() {
    use netdam_user::collective::MemberNode;
    let cfg = CollectiveConfig {
        inject: true,
        ..CollectiveConfig::default()
    };
    let probe = Ring::new(2, "4MiB", CollectiveConfig::default()).on_member(0, |c| {
        let mut injector = c
            .node()
            .injector()
            .expect("an XDP node has one")
            .expect("open the injector");
        injector.probe().map_err(|e| e.to_string())
    });
    match probe {
        Ok(()) => chunks_leave_bit_exact_by(TxPath::Injector, cfg, 10_000),
        Err(e) => {
            assert!(
                e.contains("Operation not permitted"),
                "the injector failed otherwise: {e}"
            );
            eprintln!("this kernel refuses the injector ({e}): checking the fallback to the socket instead");
            chunks_leave_bit_exact_by(TxPath::Socket, cfg, 10_000);
        }
    }
}

#[test]
fn chunks_sent_through_an_af_xdp_tx_ring_are_bit_exact() {
    let cfg = CollectiveConfig {
        afxdp_tx: true,
        ..CollectiveConfig::default()
    };
    chunks_leave_bit_exact_by(TxPath::AfXdp, cfg, 100_000);
}

/// The floor (`nop_hops`): the ring's frames go round and every chunk is
/// answered, but no node reduces or writes anything, so the outputs stay
/// as they were (zero).
#[test]
fn the_nop_floor_sends_every_chunk_and_writes_nothing() {
    let cfg = CollectiveConfig {
        nop_hops: true,
        ..CollectiveConfig::default()
    };
    let ring = Ring::new(3, "4MiB", cfg);
    let op = op(100_000, Dtype::I32, Alu::Add);
    let ins = inputs(3, 3, &op);
    for answer in ring.allreduce(&op, &ins) {
        let (report, out) = answer.expect("the floor's run");
        assert_eq!(report.chunks, 100_000u64.div_ceil(ring_chunk_elems(1500, 3, 4) as u64));
        assert!(report.sent >= report.own_chunks && report.own_chunks > 0, "{report:?}");
        assert!(out.iter().all(|&b| b == 0), "a NOP hop wrote the output");
    }
}

#[test]
fn generations_follow_each_other_and_a_member_ahead_is_caught_up() {
    let ring = Ring::new(3, "4MiB", CollectiveConfig::default());
    let o = op(1000, Dtype::U32, Alu::Add);
    check(&ring, &o, 1);
    check(&ring, &o, 2);
    // A member that finished a round the others failed (as when a member
    // dies mid-round) starts the next at a later generation: the others
    // adopt it when its node answers STALE. Its own sync slot (the first u64
    // area, 8 x rank) says it finished generation 40.
    let node = LocalNode::open(&ring.tb.hosts[1].pin_dir).expect("member 1's node");
    node.memory()
        .write(8, &40u64.to_le_bytes())
        .expect("member 1's sync slot");
    let ins = inputs(3, 3, &o);
    let answers = ring.allreduce(&o, &ins);
    let gens: Vec<u32> = answers
        .iter()
        .map(|a| a.as_ref().expect("all-reduce after a member ran ahead").0.generation)
        .collect();
    assert_eq!(gens, [41, 41, 41], "every member adopted member 1's generation");
    check(&ring, &o, 4);
}

#[test]
fn a_member_whose_program_is_detached_mid_run_fails_the_others_clearly() {
    let cfg = CollectiveConfig {
        timeout: Duration::from_millis(50),
        retries: 4,
        patience: Duration::from_secs(5),
        ..CollectiveConfig::default()
    };
    let mut ring = Ring::new(3, "50MiB", cfg);
    let o = op((16 << 20) / 4, Dtype::I32, Alu::Add);
    let ins = inputs(5, 3, &o);
    let silent = ring.ips()[2];
    // Detach member 2's node shortly after the collective starts.
    let node = ring.served.pop().expect("member 2's node");
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        node.stop()
    });
    let t = Instant::now();
    let answers = ring.allreduce(&o, &ins);
    assert!(stopper.join().unwrap(), "member 2's node detached cleanly");
    let took = t.elapsed();
    for (rank, a) in answers.iter().enumerate().take(2) {
        let err = match a {
            Err(e) => e,
            Ok(_) => panic!("member {rank} finished although member 2's node was detached"),
        };
        assert!(
            err.contains("got no answer") && err.contains(&silent.to_string()),
            "member {rank}: the error names the chunks and the silent member: {err}"
        );
    }
    assert!(took < Duration::from_secs(20), "failed in {took:?}, not hung");
}

/// Every link drops, duplicates and reorders `fraction` of the NetDAM frames
/// each: the all-reduce still finishes, bit-exact on every member, and
/// members that disagree still all fail with the mismatch.
fn under_chaos(fraction: f64, seed: u64) {
    let cfg = CollectiveConfig {
        timeout: Duration::from_millis(20),
        retries: 50,
        ..CollectiveConfig::default()
    };
    let ring = Ring::new(4, "4MiB", cfg);
    let chaos = Chaos {
        loss: fraction,
        dup: fraction,
        reorder: fraction,
        seed,
    };
    ring.tb.impair(&chaos).expect("chaos element");
    let mut seeds = Rng(seed);
    for (dtype, alu) in [(Dtype::I32, Alu::Add), (Dtype::F32, Alu::Add), (Dtype::U64, Alu::Max)] {
        let e = ring_chunk_elems(1500, 4, dtype.width()) as u64;
        for count in [1, e + 1, (1 << 20) / dtype.width() as u64] {
            check(&ring, &op(count, dtype, alu), seeds.next_u64());
        }
    }
    // Lost, repeated and late frames do not turn a mismatch into a timeout
    // (the failed word is written reliably) or a wrong result.
    disagreeing_members_all_fail_then_go_on(&ring);
    let s = ring.tb.chaos_stats().expect("chaos counters").expect("chaos attached");
    let share = |n: u64| n as f64 / s.seen as f64;
    for (what, n) in [("dropped", s.dropped), ("duplicated", s.duplicated), ("held", s.held)] {
        assert!(
            share(n) > fraction / 2.0 && share(n) < fraction * 2.0,
            "{what} {n} of {} frames, not about {fraction}: {s:?}",
            s.seen
        );
    }
    assert!(s.released > 0, "held frames were released behind later ones: {s:?}");
}

#[test]
fn one_percent_loss_duplication_and_reordering() {
    under_chaos(0.01, 11);
}

#[test]
fn five_percent_loss_duplication_and_reordering() {
    under_chaos(0.05, 55);
}

#[test]
fn the_sweep_prints_the_nccl_table_and_writes_json_and_svg() {
    require_root();
    let prefix = unique_prefix();
    let dir = std::env::temp_dir().join(format!("netdam-sweep-{prefix}"));
    let out = std::process::Command::new(netdam_tests::netdam_lab_bin())
        .args(["testbed", "allreduce", "--nodes", "3", "--dtype", "f32", "--op", "max"])
        .args(["--max-bytes", "64KiB", "--iters", "2", "--prefix", &prefix])
        .arg("--out")
        .arg(&dir)
        .output()
        .expect("run netdam-lab testbed allreduce");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong"]
    );
    let rows: Vec<Vec<&str>> = lines.skip(1).map(|l| l.split_whitespace().collect()).collect();
    // 4 B to 64 KiB, doubling: 15 sizes, every one checked and right.
    assert_eq!(rows.len(), 15, "{stdout}");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r[0], (4u64 << i).to_string());
        assert_eq!(r[1], (1u64 << i).to_string());
        assert_eq!((r[2], r[3], r[7]), ("f32", "max", "0"), "{stdout}");
        assert!(r[4].parse::<f64>().unwrap() > 0.0);
    }
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("allreduce-3-f32-max.json")).unwrap()).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 15);
    let svg = std::fs::read_to_string(dir.join("allreduce-3-f32-max.svg")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(svg.starts_with("<svg") && svg.matches("<circle").count() == 15);
    assert!(
        !std::path::Path::new(&format!("/run/netns/{prefix}sw")).exists(),
        "the sweep tore its testbed down"
    );
}

#[test]
fn allreduce_refuses_bad_groups_and_layouts_and_names_a_refused_step() {
    require_root();
    let tb = Testbed::up(&unique_prefix(), 2, 1500).expect("testbed up");
    // READ only: a chunk's REDUCE runs, its REDUCE_WRITE is refused.
    let mut args: Vec<String> = ["--mem-size", "1MiB", "--region", "0x77:0:1MiB:r", "--mode", "native"]
        .map(String::from)
        .to_vec();
    for h in &tb.hosts {
        args.extend(["--peer".to_string(), h.ip.to_string()]);
    }
    let _served: Vec<_> = (0..2)
        .map(|i| tb.serve(i, &netdam_bin(), &args).expect("serve"))
        .collect();
    let ips: Vec<String> = tb.hosts.iter().map(|h| h.ip.to_string()).collect();
    let run = |host: usize, group: &str, extra: &[&str]| {
        let pin = tb.hosts[host].pin_dir.to_str().unwrap().to_string();
        let mut c = tb.command(host, netdam_bin()).unwrap();
        c.args([
            "allreduce",
            "--group",
            group,
            "--pin-dir",
            &pin,
            "--rkey",
            "0x77",
            "--count",
            "1000",
        ])
        .args(["--timeout-ms", "50", "--retries", "2", "--patience", "3"])
        .args(extra);
        c
    };
    let fails_with = |mut c: std::process::Command, text: &str| {
        let out = c.output().expect("run netdam allreduce");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(text), "want {text:?} in: {err}");
    };
    fails_with(run(0, &ips[0], &[]), "a group has 2 to 8 members, not 1");
    fails_with(run(0, "198.18.0.7,198.18.0.8", &[]), "is not in the group");
    fails_with(
        run(0, &ips.join(","), &["--output-addr", "4200"]),
        "overlaps the output",
    );
    // Both members run, each with chunks of its own (1,000 i32 are 3 chunks
    // of a 2-member ring); REDUCE_WRITE needs WRITE, which the region does not permit.
    let both = ips.join(",");
    let mut members: Vec<std::process::Child> = (0..2)
        .map(|i| {
            let mut c = run(i, &both, &[]);
            c.stderr(std::process::Stdio::piped());
            c.spawn().expect("start netdam allreduce")
        })
        .collect();
    for m in members.drain(..) {
        let out = m.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("refused by") && err.contains("FORBIDDEN"),
            "the refused hop is named with its status: {err}"
        );
    }
}

/// A member that contributes 50 ms after the others: the chunks that reach
/// its node before it has raised are held there (version 2) and continued
/// when it does, so none is refused or resent, and the frames are counted:
/// each chunk sent once and answered HELD at most once.
#[test]
fn a_member_contributing_50_ms_late_is_held_for_not_flooded() {
    let ring = Ring::new(4, "4MiB", CollectiveConfig::default());
    // 16 Ki f32: 48 chunks of 342, 12 per member, all inside the windows (32).
    let o = op(16 << 10, Dtype::F32, Alu::Add);
    let calls = [call(o, 7, 4)];
    let late = Duration::from_millis(50);
    let answers = ring.run(&calls, |rank, _| if rank == 2 { late } else { Duration::ZERO });
    let reports: Vec<Report> = exact(&calls, &answers).into_iter().map(|r| r[0]).collect();
    let chunks = reports[0].chunks;
    let sum = |f: fn(&Report) -> u64| reports.iter().map(f).sum::<u64>();
    assert_eq!(sum(|r| r.sent), chunks, "every chunk sent once: {reports:#?}");
    assert_eq!(sum(|r| r.resent), 0, "no chunk resent after a timeout: {reports:#?}");
    // A partial held in the instant its member raises is answered NOT_READY and resent once.
    assert!(sum(|r| r.not_ready) <= 3, "no NOT_READY storm: {reports:#?}");
    // Every chunk of the others passes member 2's REDUCE (or REDUCE_WRITE)
    // before it raised: each was held there once and continued by it.
    let others = chunks - reports[2].own_chunks;
    assert_eq!(
        reports[2].continued, others,
        "member 2 continued every partial its node held: {reports:#?}"
    );
    // HELD answers: one per chunk per member that was not ready for it
    // (members 0, 1 and 3 start within a thread's start-up of each other).
    assert!(
        sum(|r| r.held) >= others,
        "the others' chunks were answered HELD at member 2: {reports:#?}"
    );
}

/// Members that start each call at random offsets of 0 to 2 ms, back to
/// back over sizes from 8 bytes to 1 MiB: every result bit-exact, and no
/// chunk resent after a timeout (what NOT_READY's back-off cost in version 1).
#[test]
fn members_starting_up_to_2_ms_apart_are_exact_without_resends() {
    let ring = Ring::new(4, "8MiB", CollectiveConfig::default());
    let mut rng = Rng(27);
    let mut calls = Vec::new();
    for _ in 0..3 {
        for bytes in [8u64, 1 << 10, 4 << 10, 64 << 10, 1 << 20] {
            // The group's one cell area, whatever the size (docs/collective.md).
            let o = Allreduce {
                cells_addr: 4 << 20,
                ..op(bytes / 4, Dtype::I32, Alu::Add)
            };
            calls.push(call(o, rng.next_u64(), 4));
        }
    }
    let offsets: Vec<Vec<Duration>> = (0..4)
        .map(|_| {
            (0..calls.len())
                .map(|_| Duration::from_micros(rng.below(2000)))
                .collect()
        })
        .collect();
    let answers = ring.run(&calls, |rank, c| offsets[rank][c]);
    let reports = exact(&calls, &answers);
    let resent: u64 = reports.iter().flatten().map(|r| r.resent).sum();
    assert_eq!(resent, 0, "no chunk resent after a timeout: {reports:#?}");
}

/// Calls of other sizes, dtypes and operators back to back, on the same
/// input and the group's one cell area, members moving on as soon as their
/// own call returns (and one lagging): no call's chunks, cells or held
/// partials mix with another's. (The cells stay where they are from call to
/// call: a partial held for the next call lands in them while this call's
/// output is still being read, docs/collective.md.)
#[test]
fn back_to_back_calls_of_other_sizes_dtypes_and_ops_do_not_mix() {
    let ring = Ring::new(3, "4MiB", CollectiveConfig::default());
    let e = ring_chunk_elems(1500, 3, 4) as u64;
    let mut calls = Vec::new();
    for (i, (count, dtype, alu)) in [
        (3 * e + 5, Dtype::I32, Alu::Add),
        (1, Dtype::U64, Alu::Xor),
        (10_000, Dtype::F32, Alu::Add),
        (e, Dtype::U32, Alu::Min),
        (2 * e + 1, Dtype::I64, Alu::Max),
        (10_000, Dtype::F32, Alu::Max),
    ]
    .into_iter()
    .enumerate()
    {
        let o = Allreduce {
            cells_addr: 3 << 20,
            ..op(count, dtype, alu)
        };
        calls.push(call(o, 100 + i as u64, 3));
    }
    let answers = ring.run(&calls, |rank, c| match (rank, c % 2) {
        (1, 0) => Duration::from_millis(3),
        _ => Duration::ZERO,
    });
    exact(&calls, &answers);
}

/// Members that disagree about the count, the dtype or the operator (one
/// member each time, on a 4-member ring; also a one-chunk vector, which
/// only member 0 originates, so that members 1 and 3 have no chunk to be
/// refused): every member fails with the mismatch, which the call word in
/// every chunk and beside every generation finds (docs/PROTOCOL.md, version
/// 2), and none returns a result; the group's next call, agreed, is exact.
/// The patience is 60 s, so a member that only timed out would fail the
/// test with another error, and the test would take minutes.
#[test]
fn members_that_disagree_on_count_dtype_or_op_all_fail_with_mismatch_then_go_on() {
    let cfg = CollectiveConfig {
        patience: Duration::from_secs(60),
        ..CollectiveConfig::default()
    };
    disagreeing_members_all_fail_then_go_on(&Ring::new(4, "4MiB", cfg));
}

/// The cases of the test above on `ring` (4 members, 4 MiB).
fn disagreeing_members_all_fail_then_go_on(ring: &Ring) {
    let e = ring_chunk_elems(1500, 4, 4) as u64;
    // One layout for every call, whatever its count.
    let at = |count, dtype, alu| Allreduce {
        input_addr: INPUT,
        output_addr: 1 << 20,
        cells_addr: 3 << 20,
        ..op(count, dtype, alu)
    };
    let agreed = at(5 * e + 3, Dtype::I32, Alu::Add);
    let one_chunk = at(8, Dtype::I32, Alu::Add);
    let cases = [
        (
            "a count one element longer",
            1,
            at(5 * e + 4, Dtype::I32, Alu::Add),
            agreed,
        ),
        ("a count 35 chunks longer", 3, at(40 * e, Dtype::I32, Alu::Add), agreed),
        (
            "f32 where the others have i32",
            0,
            at(5 * e + 3, Dtype::F32, Alu::Add),
            agreed,
        ),
        (
            "max where the others add",
            2,
            at(5 * e + 3, Dtype::I32, Alu::Max),
            agreed,
        ),
        ("min on one chunk", 2, at(8, Dtype::I32, Alu::Min), one_chunk),
    ];
    for (seed, (what, odd_rank, odd, agreed)) in cases.into_iter().enumerate() {
        let ops: Vec<Allreduce> = (0..4).map(|r| if r == odd_rank { odd } else { agreed }).collect();
        let ins: Vec<Vec<u8>> = ops
            .iter()
            .enumerate()
            .map(|(r, o)| inputs(seed as u64, 4, o).swap_remove(r))
            .collect();
        for (rank, answer) in ring.allreduce_each(&ops, &ins).iter().enumerate() {
            match answer {
                Ok((report, _)) => panic!(
                    "{what} (member {odd_rank}): member {rank} returned a result at generation {}",
                    report.generation
                ),
                Err(e) => assert!(
                    e.contains("not running the same call"),
                    "{what} (member {odd_rank}): member {rank} failed otherwise: {e}"
                ),
            }
        }
        let next = [call(agreed, 50 + seed as u64, 4)];
        exact(&next, &ring.run(&next, |_, _| Duration::ZERO));
    }
}

/// Jumbo frames (MTU 9000, multi-buffer XDP on veth): chunks of 8.9 KB,
/// held partials copied out of fragmented frames, bit-exact, f32 included,
/// with one member contributing late so that partials are held.
#[test]
fn jumbo_chunks_at_mtu_9000_are_exact_and_held_whole() {
    const MTU: u32 = 9000;
    let cfg = CollectiveConfig {
        mtu: MTU,
        ..CollectiveConfig::default()
    };
    let ring = Ring::with_mtu(4, "8MiB", cfg, MTU);
    let mut calls = Vec::new();
    for (i, (dtype, alu)) in [(Dtype::F32, Alu::Add), (Dtype::I64, Alu::Max)].into_iter().enumerate() {
        let e = ring_chunk_elems(MTU, 4, dtype.width()) as u64;
        for count in [e + 1, (1 << 20) / dtype.width() as u64] {
            let o = Allreduce {
                cells_addr: 6 << 20,
                ..op(count, dtype, alu)
            };
            calls.push(call(o, 40 + i as u64, 4));
        }
    }
    let answers = ring.run(&calls, |rank, _| match rank {
        3 => Duration::from_millis(5),
        _ => Duration::ZERO,
    });
    let reports = exact_at(MTU, &calls, &answers);
    let continued: u64 = reports[3].iter().map(|r| r.continued).sum();
    assert!(
        continued > 0,
        "member 3 continued partials held from jumbo frames: {reports:#?}"
    );
}
