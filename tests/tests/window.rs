//! Tier 2: the atomics and the at-most-once window (PROTOCOL.md section 7)
//! of the XDP program, through BPF_PROG_TEST_RUN.

use std::time::Duration;

use netdam_common::{
    counters::Event,
    frame::{netdam_frame, parse_udp, Endpoint},
    NetdamHdr, Opcode, Status,
};
use netdam_tests::{progrun::*, PinDir};

fn atomic(op: Opcode, addr: u64, seq: u32, operands: &[u64], from: &Endpoint) -> Vec<u8> {
    let mut h = NetdamHdr::request(op);
    h.set_rkey(RKEY_RW);
    h.set_addr(addr);
    h.set_len((operands.len() * 8) as u16);
    h.set_seq(seq);
    let payload: Vec<u8> = operands.iter().flat_map(|v| v.to_le_bytes()).collect();
    netdam_frame(from, &NODE, &h, &payload)
}

/// (status, old value) of an atomic's answer.
fn answer(o: &Outcome) -> (Status, Option<u64>) {
    assert_eq!(o.action, XDP_TX, "atomics always answer");
    let (h, payload) = parse_udp(&o.frame)
        .unwrap()
        .netdam()
        .map(|(h, p)| (h, p.to_vec()))
        .unwrap();
    let old = (payload.len() == 8).then(|| u64::from_le_bytes(payload[..8].try_into().unwrap()));
    (Status::from_u8(h.status).unwrap(), old)
}

fn word(node: &netdam_user::Node, addr: u64) -> u64 {
    let mut b = [0u8; 8];
    node.memory().read_into(addr, &mut b).unwrap();
    u64::from_le_bytes(b)
}

#[test]
fn fetch_add_swap_cas_return_the_old_value() {
    let node = load(&spec());
    let a = RW.base + 64;
    node.memory().write(a, &100u64.to_le_bytes()).unwrap();
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 1, &[5], &CLIENT))),
        (Status::Ok, Some(100))
    );
    assert_eq!(word(&node, a), 105);
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 2, &[u64::MAX], &CLIENT))),
        (Status::Ok, Some(105))
    );
    assert_eq!(word(&node, a), 104, "wrapping add");
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::Swap, a, 3, &[7], &CLIENT))),
        (Status::Ok, Some(104))
    );
    assert_eq!(word(&node, a), 7);
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::Cas, a, 4, &[6, 9], &CLIENT))),
        (Status::Ok, Some(7))
    );
    assert_eq!(word(&node, a), 7, "CAS with the wrong expectation changes nothing");
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::Cas, a, 5, &[7, 9], &CLIENT))),
        (Status::Ok, Some(7))
    );
    assert_eq!(word(&node, a), 9);
    // Validation: alignment and length.
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a + 4, 6, &[1], &CLIENT))).0,
        Status::Misaligned
    );
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::Cas, a, 7, &[1], &CLIENT))).0,
        Status::BadLength
    );
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::Swap, RW.base + RW.size, 8, &[1], &CLIENT))).0,
        Status::OutOfBounds
    );
}

#[test]
fn repeats_stale_and_reordering_follow_section_7() {
    let node = load(&spec());
    let a = RW.base + 128;
    // A retransmission is answered with the first answer and not executed again.
    let f = atomic(Opcode::FetchAdd, a, 1000, &[1], &CLIENT);
    assert_eq!(answer(&run(&node, &f)), (Status::Ok, Some(0)));
    assert_eq!(
        answer(&run(&node, &f)),
        (Status::Ok, Some(0)),
        "the repeat gets the stored old value"
    );
    assert_eq!(word(&node, a), 1);
    // Reordering inside the window: a later seq first, then an earlier one, both execute.
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 1010, &[1], &CLIENT))),
        (Status::Ok, Some(1))
    );
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 1005, &[1], &CLIENT))),
        (Status::Ok, Some(2))
    );
    assert_eq!(word(&node, a), 3);
    // 1000 + 1024 takes slot 1000 over; 1000 itself is now STALE and not executed.
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 2024, &[1], &CLIENT))),
        (Status::Ok, Some(3))
    );
    assert_eq!(answer(&run(&node, &f)).0, Status::Stale);
    assert_eq!(word(&node, a), 4);
    // Another source has its own window: the same seq executes.
    let other = Endpoint {
        port: CLIENT.port + 1,
        ..CLIENT
    };
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 1000, &[1], &other))),
        (Status::Ok, Some(4))
    );
    assert_eq!(word(&node, a), 5);
}

#[test]
fn a_full_window_table_refuses_new_sources_and_idle_windows_expire() {
    let mut node = load(&netdam_user::NodeSpec {
        window_sources: 1,
        ..spec()
    });
    let a = RW.base + 256;
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 1, &[1], &CLIENT))).0,
        Status::Ok
    );
    let other = Endpoint {
        port: CLIENT.port + 1,
        ..CLIENT
    };
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 1, &[1], &other))).0,
        Status::Stale
    );
    assert_eq!(word(&node, a), 1, "a refused source executes nothing");
    assert_eq!(node.counters().unwrap()[Event::WindowFull as usize], 1);
    // Idempotent ops need no window and still work for that source.
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 1, &[1], &other))).0,
        Status::Stale
    );
    assert_eq!(
        node.expire_windows(Duration::from_secs(3600)).unwrap(),
        0,
        "nothing idle for an hour"
    );
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(node.expire_windows(Duration::from_millis(10)).unwrap(), 1);
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 1, &[1], &other))).0,
        Status::Ok,
        "room again"
    );
    assert_eq!(word(&node, a), 2);
}

#[test]
fn fetch_add_totals_are_exact_under_two_cpus() {
    netdam_tests::require_root();
    let dir = PinDir(std::path::PathBuf::from(format!(
        "/sys/fs/bpf/netdam-test-{}-fadd",
        std::process::id()
    )));
    let s = spec();
    let nodes = [
        netdam_user::Node::load(&s, Some(&dir.0)).unwrap(),
        netdam_user::Node::load(&s, Some(&dir.0)).unwrap(),
    ];
    let a = RW.base + 512;
    const PER_THREAD: u32 = 20_000;
    std::thread::scope(|scope| {
        for (t, node) in nodes.iter().enumerate() {
            scope.spawn(move || {
                let from = Endpoint {
                    port: 50_000 + t as u16,
                    ..CLIENT
                };
                let mut olds = Vec::with_capacity(PER_THREAD as usize);
                for seq in 0..PER_THREAD {
                    let (st, old) = answer(&run(node, &atomic(Opcode::FetchAdd, a, seq, &[1], &from)));
                    assert_eq!(st, Status::Ok);
                    olds.push(old.unwrap());
                }
                // Each thread sees strictly increasing old values.
                assert!(olds.windows(2).all(|w| w[0] < w[1]));
            });
        }
    });
    assert_eq!(
        word(&nodes[0], a),
        2 * PER_THREAD as u64,
        "every FETCH_ADD counted exactly once"
    );
}
