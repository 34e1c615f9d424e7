//! Tier 3: a node on a multi-queue testbed (4 queues on every link).
//! Senders run on every CPU; the XDP fabric delivers a frame to the receive
//! queue of the CPU that forwarded it (veth_xdp_xmit), so the node's XDP
//! program runs on several queues and CPUs at once. Checked: traffic really
//! lands on more than one queue (the node's per-queue counts), the
//! at-most-once window and ACCUMULATE stay exact when a request and its
//! retransmission arrive on different queues, and an AF_XDP receiver with
//! a socket on every queue gets every MSG. Plus the per-queue maps' sizing.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    sync::{mpsc, Arc, Barrier},
    time::{Duration, Instant},
};

use netdam_common::{
    counters::Event,
    wire::{flags, Alu, Dtype, HDR_LEN},
    NetdamHdr, Opcode, Status,
};
use netdam_lab::testbed::{host_ip, Served, Testbed, TestbedConfig};
use netdam_tests::{netdam_bin, require_root, unique_prefix, PinDir};
use netdam_user::{
    afxdp::{Delivery, Endpoint, EndpointConfig},
    controller::{
        queues::{queue_frames, rx_queues, RxQueues},
        LocalNode, MAP_QUEUE_FRAMES, MAP_XSKS,
    },
    stats::Stats,
    Node,
};

const QUEUES: u32 = 4;
const RKEY: u32 = 0x1234;
const PORT: u16 = 4793;
/// Where the FETCH_ADD counter and the ACCUMULATE vector live.
const COUNTER: u64 = 0x1000;
const VECTOR: u64 = 0x2000;
/// u64 elements of the ACCUMULATE vector.
const ELEMS: usize = 160;

/// `nodes` hosts; every link has `QUEUES` queues.
fn testbed(nodes: usize) -> Testbed {
    require_root();
    let cfg = TestbedConfig {
        nodes,
        queues: QUEUES,
        ..TestbedConfig::default()
    };
    Testbed::up_with(&unique_prefix(), cfg).expect("testbed up")
}

/// Checks that `serve` sized its per-queue maps from the interface.
fn sized_from_the_interface(served: &Served) {
    assert!(
        served
            .log()
            .contains(&format!("{QUEUES} receive queue(s) of at most {QUEUES}")),
        "serve sizes its maps from the interface:\n{}",
        served.log()
    );
}

/// `senders` hosts and one more that serves.
fn setup(senders: usize) -> (Testbed, Served) {
    let tb = testbed(senders + 1);
    let args: Vec<String> = [
        "--mem-size",
        "1MiB",
        "--region",
        "0x1234:0:1MiB:rwam",
        "--mode",
        "native",
    ]
    .map(String::from)
    .to_vec();
    let served = tb.serve(senders, &netdam_bin(), &args).expect("netdam serve");
    sized_from_the_interface(&served);
    (tb, served)
}

/// The CPUs this process may run on; two at least, or no test here can
/// spread traffic over queues.
fn cpus() -> Vec<usize> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).expect("sched_getaffinity");
    let cpus: Vec<usize> = (0..nix::sched::CpuSet::count())
        .filter(|c| set.is_set(*c).unwrap_or(false))
        .collect();
    assert!(
        cpus.len() >= 2,
        "multi-queue tests need 2 CPUs (veth picks the queue by CPU); this process may use {cpus:?}"
    );
    cpus
}

/// Keeps the calling thread on `cpus`: what it sends from one CPU is
/// forwarded, and so received by the node, on that CPU's queue.
fn run_on(cpus: &[usize]) {
    let mut set = nix::sched::CpuSet::new();
    for &c in cpus {
        set.set(c).expect("cpu index");
    }
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).expect("sched_setaffinity");
}

fn request(op: Opcode, addr: u64, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut h = NetdamHdr::request(op);
    h.flags = flags::ACK_REQ;
    h.set_rkey(RKEY);
    h.set_addr(addr);
    h.set_len(payload.len() as u16);
    h.set_seq(seq);
    if op == Opcode::Accumulate {
        h.dtype = Dtype::U64 as u8;
        h.alu = Alu::Add as u8;
    }
    let mut p = h.to_bytes().to_vec();
    p.extend_from_slice(payload);
    p
}

/// One source (a socket, so one source port) of one host, sending each
/// request once from each of its CPUs at the same moment (a barrier): the
/// node receives the copies, retransmissions of one seq, on different
/// queues and handles them on different CPUs.
struct Source {
    sock: Arc<UdpSocket>,
    /// A sending thread on each CPU; dropping them ends the threads.
    copies: Vec<mpsc::Sender<Arc<Vec<u8>>>>,
    /// Every answer to each seq (status, payload), in arrival order.
    answers: BTreeMap<u32, Vec<(u8, Vec<u8>)>>,
    sends: u64,
}

impl Source {
    fn new(node: Ipv4Addr, cpus: &[usize]) -> Source {
        let sock = UdpSocket::bind("0.0.0.0:0").expect("bind");
        sock.connect(SocketAddrV4::new(node, PORT)).expect("connect");
        sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let sock = Arc::new(sock);
        let together = Arc::new(Barrier::new(cpus.len()));
        let copies = cpus
            .iter()
            .map(|&cpu| {
                let (tx, rx) = mpsc::channel::<Arc<Vec<u8>>>();
                let (sock, together) = (sock.clone(), together.clone());
                std::thread::spawn(move || {
                    run_on(&[cpu]);
                    for packet in rx {
                        together.wait();
                        sock.send(&packet).expect("send");
                    }
                });
                tx
            })
            .collect();
        Source {
            sock,
            copies,
            answers: BTreeMap::new(),
            sends: 0,
        }
    }

    /// Sends `packet` from every CPU of the source at once, then waits for
    /// its first answer, sending again on timeout.
    fn exchange(&mut self, packet: Vec<u8>, seq: u32) -> (u8, Vec<u8>) {
        let packet = Arc::new(packet);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 2048];
        loop {
            assert!(Instant::now() < deadline, "seq {seq}: no answer in 20 s");
            for c in &self.copies {
                c.send(packet.clone()).expect("a sending thread ended");
                self.sends += 1;
            }
            while let Ok(n) = self.sock.recv(&mut buf) {
                let Some(h) = NetdamHdr::from_bytes(&buf[..n]) else {
                    continue;
                };
                let all = self.answers.entry(h.seq()).or_default();
                all.push((h.status, buf[HDR_LEN..n].to_vec()));
                if h.seq() == seq && all.len() == 1 {
                    return all[0].clone();
                }
            }
        }
    }
}

/// What a source adds to element `j` with its request `i`.
fn addend(source: usize, i: u32, j: usize) -> u64 {
    (source as u64 + 1) * 1_000_000 + i as u64 * 100 + j as u64
}

#[test]
fn fetch_add_and_accumulate_stay_exact_with_repeats_on_other_queues() {
    let cpus = cpus();
    const HOSTS: usize = 3;
    const PER_SOURCE: u32 = 300;
    let (tb, served) = setup(HOSTS);
    let node = host_ip(HOSTS);
    // Two sources a host, all at once, each sending from every CPU.
    let mut handles = Vec::new();
    for host in 0..HOSTS {
        for s in 0..2 {
            let index = host * 2 + s;
            let cpus = cpus.clone();
            let (tx, rx) = mpsc::channel();
            tb.in_host(host, move || {
                let _ = tx.send(std::thread::spawn(move || {
                    let mut src = Source::new(node, &cpus);
                    for i in 0..PER_SOURCE {
                        let add = request(Opcode::FetchAdd, COUNTER, 2 * i, &1u64.to_le_bytes());
                        src.exchange(add, 2 * i);
                        let v: Vec<u8> = (0..ELEMS).flat_map(|j| addend(index, i, j).to_le_bytes()).collect();
                        src.exchange(request(Opcode::Accumulate, VECTOR, 2 * i + 1, &v), 2 * i + 1);
                    }
                    // The answers to the last repeats come in before this one's.
                    std::thread::sleep(Duration::from_millis(300));
                    src.exchange(request(Opcode::Nop, 0, 2 * PER_SOURCE, &[]), 2 * PER_SOURCE);
                    src
                }));
            })
            .expect("enter the host");
            handles.push(rx.recv().unwrap());
        }
    }
    let mut olds = BTreeSet::new();
    let (mut sends, mut duplicates) = (0, 0);
    for h in handles {
        let src = h.join().expect("a source failed");
        sends += src.sends;
        for i in 0..PER_SOURCE {
            // A FETCH_ADD's repeats are answered OK with the stored old value.
            let adds = &src.answers[&(2 * i)];
            assert!(adds.iter().all(|a| a == &adds[0]), "FETCH_ADD seq {}: {adds:?}", 2 * i);
            assert_eq!(adds[0].0, Status::Ok as u8, "FETCH_ADD seq {}", 2 * i);
            let old = u64::from_le_bytes(adds[0].1[..8].try_into().unwrap());
            assert!(
                olds.insert(old),
                "old value {old} answered twice: a FETCH_ADD ran twice"
            );
            // An ACCUMULATE's, DUPLICATE (section 7); the first copy's, OK.
            let accs = &src.answers[&(2 * i + 1)];
            let done = |st: u8| st == Status::Ok as u8 || st == Status::Duplicate as u8;
            assert!(accs.iter().all(|a| done(a.0)), "ACCUMULATE seq {}: {accs:?}", 2 * i + 1);
            duplicates += accs.iter().filter(|a| a.0 == Status::Duplicate as u8).count();
        }
    }
    let sources = (HOSTS * 2) as u64;
    let total = sources * PER_SOURCE as u64;
    assert_eq!(
        olds,
        (0..total).collect::<BTreeSet<u64>>(),
        "each FETCH_ADD ran once, in some order"
    );
    let pin_dir = tb.hosts[HOSTS].pin_dir.clone();
    let mem = LocalNode::open(&pin_dir).expect("open the node");
    let word = |addr: u64| u64::from_le_bytes(mem.memory().read(addr, 8).unwrap().try_into().unwrap());
    assert_eq!(word(COUNTER), total, "the counter");
    for j in 0..ELEMS {
        let want: u64 = (0..HOSTS * 2)
            .flat_map(|s| (0..PER_SOURCE).map(move |i| addend(s, i, j)))
            .sum();
        assert_eq!(word(VECTOR + 8 * j as u64), want, "ACCUMULATE element {j}");
    }
    let stats = Stats::read_pinned(&pin_dir).unwrap();
    let busy = stats.busy_queues();
    let handled: u64 = stats.requests.iter().map(|r| r.count).sum();
    let in_flight = stats.event(Event::DropInFlight);
    eprintln!(
        "{sends} frames sent for {} requests: {handled} answered, {in_flight} repeats dropped in flight \
         (first copy still executing), {duplicates} ACCUMULATE repeats answered DUPLICATE; frames by queue {:?}",
        2 * total,
        stats.queues.iter().map(|q| q.frames).collect::<Vec<_>>(),
    );
    assert_eq!(
        handled + in_flight,
        sends,
        "every frame sent was answered or dropped as the repeat of one executing"
    );
    assert_eq!(stats.queues.len(), QUEUES as usize, "a count for every queue");
    let cli = std::process::Command::new(netdam_bin())
        .args(["stats", "--json", "--pin-dir"])
        .arg(&pin_dir)
        .output()
        .expect("run netdam stats");
    let json: serde_json::Value = serde_json::from_slice(&cli.stdout).expect("netdam stats --json");
    let frames = |q: &serde_json::Value| q["frames"].as_u64().unwrap();
    let by_queue: Vec<u64> = json["queues"].as_array().expect("queues").iter().map(frames).collect();
    assert_eq!(by_queue.len(), QUEUES as usize, "{json}");
    assert!(
        by_queue.iter().zip(&stats.queues).all(|(c, q)| *c >= q.frames),
        "the command reads the same counts (frames since, such as ARP, may add): {by_queue:?}"
    );
    assert!(
        busy >= 2.min(cpus.len()),
        "frames from {} CPUs reached {busy} queue(s): {:?}",
        cpus.len(),
        stats.queues
    );
    assert!(served.stop(), "serve exits cleanly");
}

#[test]
fn an_afxdp_receiver_on_every_queue_gets_every_msg() {
    let cpus = cpus();
    const HOSTS: usize = 2;
    const PER_SOURCE: u32 = 200;
    let (tb, _served) = setup(HOSTS);
    let pin_dir = tb.hosts[HOSTS].pin_dir.clone();
    let sources = HOSTS * cpus.len();
    let want = sources * PER_SOURCE as usize;
    let (ready_tx, ready) = mpsc::channel();
    let (stop_tx, stop) = mpsc::channel::<()>();
    let receiver = tb
        .in_host(HOSTS, move || {
            std::thread::spawn(move || {
                let mut ep = Endpoint::open(&pin_dir, EndpointConfig::default()).expect("open the endpoint");
                ready_tx.send(ep.queues()).unwrap();
                let mut bodies = BTreeSet::new();
                let mut per_queue = vec![0usize; ep.queues()];
                let end = Instant::now() + Duration::from_secs(60);
                while stop.try_recv().is_err() && Instant::now() < end {
                    let r = ep.recv(Duration::from_millis(50)).expect("recv");
                    for (q, n) in r.per_queue().into_iter().enumerate() {
                        per_queue[q] += n;
                    }
                    for d in r.iter() {
                        if let Delivery::Message { body, .. } = d {
                            // At least once: a retransmitted MSG may come twice; the body names it.
                            bodies.insert(body.to_vec());
                        }
                    }
                }
                (bodies, per_queue)
            })
        })
        .expect("enter the node's host");
    assert_eq!(ready.recv().unwrap(), QUEUES as usize, "a socket on every queue");
    let node = host_ip(HOSTS);
    let mut senders = Vec::new();
    for host in 0..HOSTS {
        for &cpu in &cpus {
            let (tx, rx) = mpsc::channel();
            tb.in_host(host, move || {
                let _ = tx.send(std::thread::spawn(move || {
                    // Each source stays on its CPU, so on the queue of that CPU.
                    let mut src = Source::new(node, &[cpu]);
                    for i in 0..PER_SOURCE {
                        let body = format!("host {host} cpu {cpu} msg {i}");
                        let (st, _) = src.exchange(request(Opcode::Msg, 0, i, body.as_bytes()), i);
                        assert_eq!(st, Status::Ok as u8, "{body}");
                    }
                }));
            })
            .expect("enter the host");
            senders.push(rx.recv().unwrap());
        }
    }
    for s in senders {
        s.join().expect("a sender failed");
    }
    stop_tx.send(()).unwrap();
    let (bodies, per_queue) = receiver.join().expect("the receiver failed");
    eprintln!("{want} messages; frames by queue {per_queue:?}");
    assert_eq!(bodies.len(), want, "every MSG delivered");
    for host in 0..HOSTS {
        for &cpu in &cpus {
            for i in 0..PER_SOURCE {
                let body = format!("host {host} cpu {cpu} msg {i}");
                assert!(bodies.contains(body.as_bytes()), "{body} never arrived");
            }
        }
    }
    let busy = per_queue.iter().filter(|n| **n > 0).count();
    assert!(
        busy >= 2,
        "messages sent from {} CPUs came on {busy} queue(s): {per_queue:?}",
        cpus.len()
    );
}

#[test]
fn a_ring_allreduce_checks_exact_on_multi_queue_links() {
    let cpus = cpus();
    const MEMBERS: usize = 3;
    let tb = testbed(MEMBERS);
    let ips: Vec<String> = tb.hosts.iter().map(|h| h.ip.to_string()).collect();
    let mut args: Vec<String> = [
        "--mem-size",
        "4MiB",
        "--mode",
        "native",
        "--region",
        "0x1234:0:4MiB:rwa",
    ]
    .map(String::from)
    .to_vec();
    for ip in &ips {
        args.extend(["--peer".to_string(), ip.clone()]);
    }
    let served: Vec<Served> = (0..MEMBERS)
        .map(|i| tb.serve(i, &netdam_bin(), &args).expect("netdam serve"))
        .collect();
    sized_from_the_interface(&served[0]);
    let group = ips.join(",");
    // Members on different CPUs (a child keeps the affinity it is spawned
    // with): a chunk stays on the CPU it left from, hop to hop (XDP_TX and
    // the switch's redirect both pick the queue by CPU), so every node sees
    // several queues.
    let members: Vec<std::process::Child> = (0..MEMBERS)
        .map(|i| {
            run_on(&[cpus[i % cpus.len()]]);
            tb.command(i, netdam_bin())
                .unwrap()
                .args(["allreduce", "--group", &group, "--rkey", "0x1234", "--count", "100000"])
                .args(["--iters", "3", "--check", "--json", "--pin-dir"])
                .arg(&tb.hosts[i].pin_dir)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("run netdam allreduce")
        })
        .collect();
    run_on(&cpus);
    for (i, m) in members.into_iter().enumerate() {
        let out = m.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "member {i}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let row: serde_json::Value = serde_json::from_str(stdout.trim()).expect("a JSON row");
        assert_eq!(row["wrong"], 0, "member {i}: {row}");
    }
    let spread: Vec<Vec<u64>> = tb.hosts.iter().map(|h| queue_frames(&h.pin_dir).unwrap()).collect();
    eprintln!("frames by queue on each member: {spread:?}");
    for (i, queues) in spread.iter().enumerate() {
        let busy = queues.iter().filter(|f| **f > 0).count();
        assert!(busy >= 2, "member {i} saw frames on {busy} queue(s): {queues:?}");
    }
}

/// Loads an unattached node with `slots` queue slots pinned in `dir`.
fn load(dir: &PinDir, slots: u32) -> Node {
    let spec = netdam_user::NodeSpec {
        queue_slots: slots,
        ..netdam_tests::progrun::spec()
    };
    Node::load(&spec, Some(&dir.0)).expect("load")
}

fn max_entries(dir: &PinDir, map: &str) -> u32 {
    aya::maps::MapData::from_pin(dir.0.join(map))
        .and_then(|m| m.info())
        .map(|i| i.max_entries())
        .expect("pinned map")
}

#[test]
fn the_per_queue_maps_follow_the_queue_count_and_memory_is_kept() {
    require_root();
    let dir = PinDir::new("mq-slots");
    let node = load(&dir, 4);
    assert_eq!(max_entries(&dir, MAP_XSKS), 4);
    assert_eq!(queue_frames(&dir.0).unwrap(), vec![0; 4]);
    node.memory().write(64, b"kept across queue counts").unwrap();
    drop(node);
    // The interface now has 2 queues: the per-queue maps are replaced, the memory reused.
    let node = load(&dir, 2);
    assert!(node.reused_pins, "memory and counters are reused");
    assert_eq!(node.memory().read(64, 24).unwrap(), b"kept across queue counts");
    assert_eq!(max_entries(&dir, MAP_XSKS), 2);
    assert_eq!(max_entries(&dir, MAP_QUEUE_FRAMES), 2);
    drop(node);
    // A load refused for another map (the memory's size) leaves them be.
    let other_memory = netdam_user::NodeSpec {
        mem_size: 2 << 20,
        queue_slots: 8,
        ..netdam_tests::progrun::spec()
    };
    let e = Node::load(&other_memory, Some(&dir.0))
        .err()
        .expect("another --mem-size is refused");
    assert!(e.to_string().contains("NETDAM_MEM has"), "{e}");
    assert_eq!(max_entries(&dir, MAP_XSKS), 2);
    // Out of range: refused before anything is loaded.
    let spec = netdam_user::NodeSpec {
        queue_slots: 0,
        ..netdam_tests::progrun::spec()
    };
    let e = Node::load(&spec, Some(&dir.0)).err().expect("0 slots refused");
    assert!(e.to_string().contains("receive queue slots: give 1 to 4096"), "{e}");
}

#[test]
fn an_endpoint_refuses_more_queues_than_the_map_has_slots() {
    let tb = testbed(1);
    let dir = PinDir::new("mq-past");
    // The node of progrun::spec has host 0's address; loaded for 1 queue.
    let node = load(&dir, 1);
    let pin_dir = dir.0.clone();
    let opened = tb
        .in_host(0, move || {
            Endpoint::open(&pin_dir, EndpointConfig::default()).map(|e| e.queues())
        })
        .unwrap();
    let e = opened.expect_err("4 queues do not fit 1 slot");
    assert_eq!(
        e.to_string(),
        "eth0 has 4 receive queues but the node's socket map has 1 slots: it was loaded before the queues \
         were added; restart `netdam serve` (it sizes the map from the interface)"
    );
    drop(node);
    let node = load(&dir, QUEUES);
    let pin_dir = dir.0.clone();
    let opened = tb
        .in_host(0, move || {
            Endpoint::open(&pin_dir, EndpointConfig::default()).map(|e| e.queues())
        })
        .unwrap();
    assert_eq!(opened.expect("open"), QUEUES as usize);
    drop(node);
}

#[test]
fn testbed_up_makes_multi_queue_links_and_refuses_a_bad_count() {
    require_root();
    let prefix = unique_prefix();
    let netdam = |args: &[&str]| {
        std::process::Command::new(netdam_tests::netdam_lab_bin())
            .args(["testbed"])
            .args(args)
            .args(["--prefix", &prefix])
            .output()
            .expect("run netdam-lab testbed")
    };
    /// Takes the testbed down on drop, also when an assertion fails.
    struct Down(String);
    impl Drop for Down {
        fn drop(&mut self) {
            let _ = Testbed::down(&self.0);
        }
    }
    let _down = Down(prefix.clone());
    let up = netdam(&["up", "--nodes", "2", "--queues", "3"]);
    let stdout = String::from_utf8_lossy(&up.stdout);
    assert!(up.status.success(), "{stdout}{}", String::from_utf8_lossy(&up.stderr));
    assert!(stdout.contains("3 queue(s) a link"), "{stdout}");
    for (ns, dev) in [(format!("{prefix}0"), "eth0"), (format!("{prefix}sw"), "p1")] {
        let link = std::process::Command::new("ip")
            .args(["-n", &ns, "-d", "link", "show", dev])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&link.stdout);
        assert!(text.contains("numtxqueues 3 numrxqueues 3"), "{ns} {dev}: {text}");
    }
    let bad = netdam(&["up", "--nodes", "2", "--queues", "65"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--queues 65: use 1 to 64"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn queue_counts_come_from_the_channels_or_the_device() {
    let tb = testbed(1);
    let ns = tb.hosts[0].netns.clone();
    let five = ["numtxqueues", "5", "numrxqueues", "5"];
    let made = std::process::Command::new("ip")
        .args(["-n", &ns, "link", "add", "b0"])
        .args(five)
        .args(["type", "bridge"])
        .status()
        .unwrap();
    assert!(made.success(), "ip link add b0 ... type bridge");
    let (veth, bridge) = tb
        .in_host(0, || (rx_queues("eth0").unwrap(), rx_queues("b0").unwrap()))
        .unwrap();
    // veth reports channels; a bridge has none, so the queues it was made with count.
    let all = |n| RxQueues { current: n, max: n };
    assert_eq!(veth, all(QUEUES));
    assert_eq!(bridge, all(5));
}

#[test]
fn an_endpoint_binds_the_queues_in_use_and_the_map_has_room_for_the_most() {
    let tb = testbed(1);
    let ns = tb.hosts[0].netns.clone();
    // progrun::spec's node address, on a multi-queue tap instead of eth0: its
    // channels say 1 queue in use (no file attached), at most 256.
    for args in [
        &["tuntap", "add", "mode", "tap", "multi_queue", "name", "tq0"][..],
        &["addr", "del", "198.18.0.1/24", "dev", "eth0"],
        &["addr", "add", "198.18.0.1/24", "dev", "tq0"],
        &["link", "set", "tq0", "up"],
    ] {
        let ok = std::process::Command::new("ip")
            .args(["-n", &ns])
            .args(args)
            .status()
            .unwrap();
        assert!(ok.success(), "ip {args:?}");
    }
    let queues = tb.in_host(0, || rx_queues("tq0").unwrap()).unwrap();
    assert_eq!((queues.current, queues.slots()), (1, 256));
    let dir = PinDir::new("mq-tap");
    let node = load(&dir, queues.slots());
    assert_eq!(max_entries(&dir, MAP_XSKS), 256);
    let pin_dir = dir.0.clone();
    let opened = tb
        .in_host(0, move || {
            Endpoint::open(&pin_dir, EndpointConfig::default()).map(|e| e.queues())
        })
        .unwrap();
    assert_eq!(opened.expect("open on the tap"), 1);
    drop(node);
}
