//! Tier 2: the atomics and the at-most-once window (PROTOCOL.md section 7)
//! of the XDP program, through BPF_PROG_TEST_RUN.

use std::{collections::HashMap, net::Ipv4Addr, time::Duration};

use netdam_common::{
    counters::Event,
    frame::{netdam_frame, parse_udp, Endpoint},
    NetdamHdr, Opcode, Status,
};
use netdam_tests::{progrun::*, PinDir};
use netdam_user::controller::WindowSweep;

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
    let node = load(&netdam_user::NodeSpec {
        window_sources: 1,
        window_per_source: 1,
        ..spec()
    });
    let a = RW.base + 256;
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 1, &[1], &CLIENT))).0,
        Status::Ok
    );
    let other = Endpoint {
        ip: Ipv4Addr::new(198, 18, 0, 3),
        ..CLIENT
    };
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 1, &[1], &other))).0,
        Status::Stale
    );
    assert_eq!(word(&node, a), 1, "a refused source executes nothing");
    assert_eq!(node.counters().unwrap()[Event::WindowFull as usize], 1);
    assert_eq!(
        node.expire_windows(Duration::from_secs(3600)).unwrap(),
        WindowSweep::default(),
        "nothing idle for an hour"
    );
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(node.expire_windows(Duration::from_millis(10)).unwrap(), marked(1));
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 1, &[1], &other))).0,
        Status::Stale,
        "marked, not removed yet"
    );
    assert_eq!(node.expire_windows(Duration::from_millis(10)).unwrap(), removed(1));
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 1, &[1], &other))).0,
        Status::Ok,
        "room again"
    );
    assert_eq!(word(&node, a), 2);
}

fn marked(n: u32) -> WindowSweep {
    WindowSweep { marked: n, removed: 0 }
}

fn removed(n: u32) -> WindowSweep {
    WindowSweep { marked: 0, removed: n }
}

#[test]
fn expiry_is_two_phase_and_a_window_used_in_between_survives() {
    let node = load(&spec());
    let a = RW.base + 1024;
    let (used, untouched) = (
        CLIENT,
        Endpoint {
            port: CLIENT.port + 1,
            ..CLIENT
        },
    );
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 1, &[1], &used))),
        (Status::Ok, Some(0))
    );
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 1, &[1], &untouched))),
        (Status::Ok, Some(1))
    );
    assert_eq!(node.windows_per_ip().unwrap(), HashMap::from([(CLIENT.ip, 2)]));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        node.expire_windows(Duration::from_millis(10)).unwrap(),
        marked(2),
        "both idle: marked"
    );
    // `used` sends between the sweeps: its mark is cleared.
    let second = atomic(Opcode::FetchAdd, a, 2, &[1], &used);
    assert_eq!(answer(&run(&node, &second)), (Status::Ok, Some(2)));
    std::thread::sleep(Duration::from_millis(20));
    // Both idle again by the clock; only the untouched one was still marked.
    assert_eq!(
        node.expire_windows(Duration::from_millis(10)).unwrap(),
        WindowSweep { marked: 1, removed: 1 }
    );
    assert_eq!(node.windows_per_ip().unwrap(), HashMap::from([(CLIENT.ip, 1)]));
    assert_eq!(
        answer(&run(&node, &second)),
        (Status::Ok, Some(2)),
        "the used window survived: its repeat is answered from it, not executed"
    );
    assert_eq!(word(&node, a), 3);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(node.expire_windows(Duration::from_millis(10)).unwrap(), marked(1));
    assert_eq!(node.expire_windows(Duration::from_millis(10)).unwrap(), removed(1));
    assert!(node.window_keys().unwrap().is_empty());
    assert!(
        node.windows_per_ip().unwrap().is_empty(),
        "an address with no window left has no count"
    );
    // Gone, so the same seq is new again (why senders must stop retransmitting within --window-idle).
    assert_eq!(answer(&run(&node, &second)), (Status::Ok, Some(3)));
}

/// A client at `ip` on `port`.
fn host(ip: Ipv4Addr, port: u16) -> Endpoint {
    Endpoint {
        mac: [0x02, 0xDA, 0, 0, ip.octets()[2], ip.octets()[3]],
        ip,
        port,
    }
}

#[test]
fn one_address_spraying_source_ports_gets_its_cap_and_others_are_served() {
    const CAP: u32 = 8;
    let node = load(&netdam_user::NodeSpec {
        window_sources: 64,
        window_per_source: CAP,
        ..spec()
    });
    let a = RW.base + 2048;
    let spray = |ip: Ipv4Addr, ports: std::ops::Range<u16>| -> Vec<Status> {
        ports
            .map(|p| answer(&run(&node, &atomic(Opcode::FetchAdd, a, 1, &[1], &host(ip, p)))).0)
            .collect()
    };
    let ok = |v: &[Status]| v.iter().filter(|s| **s == Status::Ok).count();
    let sprayer = Ipv4Addr::new(198, 18, 1, 1);
    let answers = spray(sprayer, 1000..1500);
    assert_eq!(ok(&answers), CAP as usize, "{answers:?}");
    assert!(answers[..CAP as usize].iter().all(|s| *s == Status::Ok));
    assert!(answers[CAP as usize..].iter().all(|s| *s == Status::Stale));
    let c = node.counters().unwrap();
    assert_eq!(c[Event::WindowSourceFull as usize], 500 - CAP as u64);
    assert_eq!(c[Event::WindowFull as usize], 0);
    assert_eq!(word(&node, a), CAP as u64, "refused sources execute nothing");
    assert_eq!(node.windows_per_ip().unwrap()[&sprayer], CAP as u64);
    // The sprayer's own windows still work.
    assert_eq!(
        answer(&run(&node, &atomic(Opcode::FetchAdd, a, 2, &[1], &host(sprayer, 1000)))).0,
        Status::Ok
    );
    // Seven more addresses get their cap each: 8 x 8 fill the table; the
    // ninth address finds it full (window_full, not window_source_full).
    for i in 2..=8 {
        assert_eq!(ok(&spray(Ipv4Addr::new(198, 18, 1, i), 1000..1010)), CAP as usize);
    }
    assert_eq!(node.window_keys().unwrap().len(), 64);
    let late = Ipv4Addr::new(198, 18, 1, 9);
    assert_eq!(ok(&spray(late, 1000..1010)), 0);
    let c = node.counters().unwrap();
    assert_eq!(c[Event::WindowSourceFull as usize], 500 - CAP as u64 + 7 * 2);
    assert_eq!(c[Event::WindowFull as usize], 10);
    // Expiry gives every address its windows back.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(node.expire_windows(Duration::from_millis(10)).unwrap(), marked(64));
    assert_eq!(node.expire_windows(Duration::from_millis(10)).unwrap(), removed(64));
    assert!(node.windows_per_ip().unwrap().is_empty());
    assert_eq!(ok(&spray(sprayer, 2000..2100)), CAP as usize);
    assert_eq!(ok(&spray(late, 2000..2100)), CAP as usize);
}

/// Two loads of the program on one pin directory: their test runs execute
/// on two CPUs at once, on the same maps.
fn two_nodes(name: &str, spec: &netdam_user::NodeSpec) -> (PinDir, [netdam_user::Node; 2]) {
    netdam_tests::require_root();
    let dir = PinDir(std::path::PathBuf::from(format!(
        "/sys/fs/bpf/netdam-test-{}-{name}",
        std::process::id()
    )));
    let nodes = [
        netdam_user::Node::load(spec, Some(&dir.0)).unwrap(),
        netdam_user::Node::load(spec, Some(&dir.0)).unwrap(),
    ];
    (dir, nodes)
}

#[test]
fn two_cpus_spraying_one_address_never_pass_its_cap() {
    const CAP: u32 = 8;
    let (_dir, nodes) = two_nodes(
        "cap",
        &netdam_user::NodeSpec {
            window_sources: 64,
            window_per_source: CAP,
            ..spec()
        },
    );
    let a = RW.base + 4096;
    let sprayer = Ipv4Addr::new(198, 18, 1, 1);
    const ROUNDS: u16 = 300;
    const PER_THREAD: u16 = 8;
    // Rounds of fresh ports, started together (a spinning barrier: a
    // sleeping thread wakes too late to race) and expired in between, so
    // that the two CPUs race for the address's last windows again and again.
    let arrived = std::sync::atomic::AtomicU32::new(0);
    let meet = |phase: u32| {
        arrived.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let since = std::time::Instant::now();
        while arrived.load(std::sync::atomic::Ordering::SeqCst) < 2 * phase {
            assert!(since.elapsed() < Duration::from_secs(10), "the other thread stopped");
            std::hint::spin_loop();
        }
    };
    let executed: Vec<Vec<usize>> = std::thread::scope(|scope| {
        let threads: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(t, node)| {
                let meet = &meet;
                scope.spawn(move || {
                    (0..ROUNDS)
                        .map(|round| {
                            meet(2 * round as u32 + 1);
                            let n = (0..PER_THREAD)
                                .filter(|i| {
                                    let port = 1000 + (round * 2 + t as u16) * PER_THREAD + i;
                                    let f = atomic(Opcode::FetchAdd, a, 1, &[1], &host(sprayer, port));
                                    answer(&run(node, &f)).0 == Status::Ok
                                })
                                .count();
                            meet(2 * round as u32 + 2);
                            // Thread 0 checks and expires while thread 1 waits.
                            if t == 0 {
                                assert_eq!(node.window_keys().unwrap().len(), CAP as usize, "round {round}");
                                assert_eq!(node.windows_per_ip().unwrap(), HashMap::from([(sprayer, CAP as u64)]));
                                assert_eq!(node.expire_windows(Duration::ZERO).unwrap(), marked(CAP));
                                assert_eq!(node.expire_windows(Duration::ZERO).unwrap(), removed(CAP));
                            }
                            n
                        })
                        .collect()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for (round, (t0, t1)) in executed[0].iter().zip(&executed[1]).enumerate() {
        assert_eq!(t0 + t1, CAP as usize, "round {round}");
    }
    assert_eq!(word(&nodes[0], a), ROUNDS as u64 * CAP as u64);
}

#[test]
fn per_address_counts_stay_exact_while_the_sweep_runs_beside_the_data_path() {
    let (_dir, nodes) = two_nodes(
        "sweep",
        &netdam_user::NodeSpec {
            window_sources: 64,
            window_per_source: 16,
            ..spec()
        },
    );
    let a = RW.base + 8192;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    let stop = AtomicBool::new(false);
    let answered = AtomicU64::new(0);
    let (sent, sweeps) = std::thread::scope(|scope| {
        // The data path: four addresses, new ports and repeats, as fast as it goes.
        let sender = scope.spawn(|| {
            let mut seq = 0u32;
            while !stop.load(Relaxed) {
                seq += 1;
                let from = host(Ipv4Addr::new(198, 18, 1, 1 + (seq % 4) as u8), 1000 + (seq % 40) as u16);
                let o = run(&nodes[1], &atomic(Opcode::FetchAdd, a, seq, &[1], &from));
                if o.action == XDP_TX {
                    answered.fetch_add(1, Relaxed);
                }
            }
        });
        // The controller: sweeps with no idle time, every window a candidate,
        // at least 2000 times and until both sides have done enough work
        // side by side (a loaded machine may starve either for a while).
        let mut sweeps = WindowSweep::default();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut n = 0;
        while n < 2000
            || ((answered.load(Relaxed) <= 1000 || sweeps.removed <= 100) && std::time::Instant::now() < deadline)
        {
            let s = nodes[0].expire_windows(Duration::ZERO).unwrap();
            sweeps.marked += s.marked;
            sweeps.removed += s.removed;
            n += 1;
        }
        stop.store(true, Relaxed);
        sender.join().unwrap();
        (answered.load(Relaxed), sweeps)
    });
    assert!(sent > 1000 && sweeps.removed > 100, "{sent} answers, {sweeps:?}");
    // With the data path quiet, two sweeps remove every window; a count
    // that drifted either way would be left behind.
    nodes[0].expire_windows(Duration::ZERO).unwrap();
    nodes[0].expire_windows(Duration::ZERO).unwrap();
    assert!(nodes[0].window_keys().unwrap().is_empty());
    assert_eq!(nodes[0].windows_per_ip().unwrap(), HashMap::new());
}

#[test]
fn fetch_add_totals_are_exact_under_two_cpus() {
    let (_dir, nodes) = two_nodes("fadd", &spec());
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
