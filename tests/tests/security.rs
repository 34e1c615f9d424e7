//! Tier 3: the hostile inputs of docs/conformance.md 19-21 on the testbed,
//! through real veths: a spoofed peer from another host, a neighbour flush and a peer's MAC change while serving,
//! random keys kept across a restart, a burst of wrong keys, and random unauthenticated frames
//! that must never make a node send more bytes than it received.

use std::{
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    process::Output,
    time::{Duration, Instant},
};

use netdam_common::{counters::Event, wire::DEFAULT_PORT, NetdamHdr, Opcode};
use netdam_lab::testbed::{Fabric, Served, Testbed};
use netdam_tests::{netdam_bin, pinged, require_root, unique_prefix, Rng};
use netdam_user::{controller::keys::keys_path, stats::Stats};

const REGION: &str = "0x1234:0:4MiB:rwam";

fn testbed(nodes: usize) -> Testbed {
    require_root();
    // The bridge learns a MAC that moves; the XDP switch's table is fixed.
    Testbed::up_on(&unique_prefix(), nodes, 1500, Fabric::Bridge).expect("testbed up")
}

fn serve(tb: &Testbed, i: usize, region: &str, peers: &[usize]) -> Served {
    serve_with(tb, i, region, peers, &[])
}

fn serve_with(tb: &Testbed, i: usize, region: &str, peers: &[usize], extra: &[&str]) -> Served {
    let mut args: Vec<String> = ["--mem-size", "4MiB", "--region", region, "--mode", "native"]
        .iter()
        .chain(extra)
        .map(|a| a.to_string())
        .collect();
    for p in peers {
        args.extend(["--peer".to_string(), tb.hosts[*p].ip.to_string()]);
    }
    tb.serve_with_env(i, &netdam_bin(), &args, &[("RUST_LOG", "info")])
        .expect("netdam serve")
}

/// Runs `cmd ARGS` in host `i`, which must succeed.
fn run(tb: &Testbed, i: usize, cmd: &str, args: &[&str]) -> Output {
    let o = tb.command(i, cmd).unwrap().args(args).output().expect(cmd);
    assert!(
        o.status.success(),
        "{cmd} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// A NOP request sent from host `from` with IPv4 source `claimed` (added to
/// its eth0 for the purpose, never answering ARP for it); whether an answer came.
fn nop_claiming(tb: &Testbed, from: usize, claimed: Ipv4Addr, node: Ipv4Addr) -> bool {
    let cidr = format!("{claimed}/32");
    run(tb, from, "sysctl", &["-qw", "net.ipv4.conf.eth0.arp_ignore=8"]);
    run(tb, from, "ip", &["addr", "add", &cidr, "dev", "eth0", "nodad"]);
    let answered = tb
        .in_host(from, move || {
            let s = UdpSocket::bind(SocketAddrV4::new(claimed, 0)).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
            let h = NetdamHdr::request(Opcode::Nop);
            s.send_to(&h.to_bytes(), SocketAddrV4::new(node, DEFAULT_PORT)).unwrap();
            let mut b = [0u8; 256];
            s.recv(&mut b).is_ok()
        })
        .unwrap();
    run(tb, from, "ip", &["addr", "del", &cidr, "dev", "eth0"]);
    answered
}

fn stats(tb: &Testbed, i: usize) -> Stats {
    Stats::read_pinned(&tb.hosts[i].pin_dir).expect("the node's counters")
}

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The MAC the kernel of host `i` has for `ip`, if any.
fn neighbour(tb: &Testbed, i: usize, ip: Ipv4Addr) -> Option<String> {
    let o = run(tb, i, "ip", &["neigh", "show", &ip.to_string(), "dev", "eth0"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .iter()
        .position(|w| *w == "lladdr")
        .and_then(|p| words.get(p + 1))
        .map(|m| m.to_string())
}

/// Host 0 serves with host 1 as its peer; host 2 claims host 1's address,
/// then host 0's own. A neighbour flush on host 0 changes nothing for the
/// peer; a new MAC of host 1 is followed (host 1 announces it, as a host
/// with arp_notify does).
#[test]
fn peers_are_bound_to_their_macs_through_a_flush_and_a_mac_change() {
    let tb = testbed(3);
    let served = serve(&tb, 0, REGION, &[1]);
    let node = tb.hosts[0].ip;
    assert!(pinged(&tb, 1, 0), "the peer is served");
    assert!(!pinged(&tb, 2, 0), "a stranger is not");

    assert!(
        !nop_claiming(&tb, 2, tb.hosts[1].ip, node),
        "a spoofed peer is not answered"
    );
    assert!(stats(&tb, 0).event(Event::DropPeerMac) >= 1);
    // (The node's own address as a source cannot be sent from a socket: the
    // sender's kernel keeps it; tests/vectors own_address_source and
    // tests/tests/xdp_prog.rs send that frame.)

    run(&tb, 0, "ip", &["neigh", "flush", "dev", "eth0"]);
    assert!(pinged(&tb, 1, 0), "a flush does not unbind the peer");
    wait_for("the flushed neighbour entry back", Duration::from_secs(5), || {
        neighbour(&tb, 0, tb.hosts[1].ip).is_some()
    });

    let new_mac = "02:da:77:00:00:01";
    run(&tb, 1, "sysctl", &["-qw", "net.ipv4.conf.eth0.arp_notify=1"]);
    run(&tb, 1, "ip", &["link", "set", "dev", "eth0", "address", new_mac]);
    let bound = format!("peer {} bound to MAC {new_mac}", tb.hosts[1].ip);
    wait_for("the controller to bind the new MAC", Duration::from_secs(10), || {
        served.log().contains(&bound)
    });
    assert!(pinged(&tb, 1, 0), "the peer is served from its new MAC");
    assert!(served.stop());
}

/// A region without a key gets a random one, kept across a restart and
/// forgotten by unpin.
#[test]
fn random_keys_are_drawn_kept_and_forgotten() {
    let tb = testbed(2);
    let key_of = |tb: &Testbed| -> u32 {
        let text = std::fs::read_to_string(keys_path(&tb.hosts[0].pin_dir)).expect("the keys file");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v[0]["rkey"].as_u64().unwrap() as u32
    };
    let served = serve(&tb, 0, "0:4MiB:rw", &[]);
    let key = key_of(&tb);
    let rkey = format!("{key:#x}");
    let node = tb.hosts[0].ip.to_string();
    let file = std::env::temp_dir().join(format!("netdam-key-{}", std::process::id()));
    std::fs::write(&file, [1, 2, 3, 4]).unwrap();
    let file_arg = file.to_str().unwrap().to_string();
    let write = |rkey: &str| {
        tb.command(1, netdam_bin())
            .unwrap()
            .args([
                "write", "--node", &node, "--rkey", rkey, "--addr", "0", "--file", &file_arg,
            ])
            .args(["--timeout-ms", "200", "--retries", "1"])
            .output()
            .unwrap()
    };
    assert!(write(&rkey).status.success(), "the drawn key opens the region");
    assert!(!write("0x1234").status.success(), "a guessed key does not");
    assert!(served.stop());
    let served = serve(&tb, 0, "0:4MiB:rw", &[]);
    assert_eq!(key_of(&tb), key, "a restart keeps the key");
    assert!(served.log().contains("keeps the random key"), "{}", served.log());
    assert!(write(&rkey).status.success());
    assert!(served.stop());
    let pin = tb.hosts[0].pin_dir.to_str().unwrap().to_string();
    run(&tb, 0, netdam_bin().to_str().unwrap(), &["unpin", "--pin-dir", &pin]);
    assert!(!keys_path(&tb.hosts[0].pin_dir).exists(), "unpin forgets the key");
    let _ = std::fs::remove_file(&file);
}

/// docs/conformance.md 21: a burst of wrong keys from one host gets at
/// most `--bad-key-limit` BAD_KEY answers (and the refills while it runs),
/// locks that host out, and raises an alarm in `netdam stats` and in the
/// serve log; another host is served meanwhile.
#[test]
fn a_bad_key_burst_is_cut_off_and_raises_an_alarm() {
    const LIMIT: u64 = 5;
    let tb = testbed(3);
    let served = serve_with(&tb, 0, REGION, &[], &["--bad-key-limit", "5"]);
    let node = tb.hosts[0].ip;
    let started = Instant::now();
    let answers = tb
        .in_host(1, move || {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
            for guess in 0..200u32 {
                let mut h = NetdamHdr::request(Opcode::Read);
                h.set_rkey(0xBAD0_0000 + guess);
                s.send_to(&h.to_bytes(), SocketAddrV4::new(node, DEFAULT_PORT)).unwrap();
            }
            let mut b = [0u8; 256];
            std::iter::from_fn(|| s.recv(&mut b).ok()).count() as u64
        })
        .unwrap();
    let refills = started.elapsed().as_millis() as u64 * LIMIT / 1000;
    assert!(
        (1..=LIMIT + refills).contains(&answers),
        "{answers} answers to 200 wrong keys in {:?}",
        started.elapsed()
    );
    let st = stats(&tb, 0);
    let dropped = st.event(Event::BadKeyLimited) + st.event(Event::DropBadKeyLockout);
    assert_eq!(dropped, 200 - answers, "every unanswered guess is counted");
    assert!(st.alarms.iter().any(|a| a.event == "drop_bad_key_lockout"), "{st:?}");
    let pin = tb.hosts[0].pin_dir.to_str().unwrap().to_string();
    let table = run(&tb, 0, netdam_bin().to_str().unwrap(), &["stats", "--pin-dir", &pin]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("ALARM drop_bad_key_lockout"));
    assert!(pinged(&tb, 2, 0), "another host is served");
    wait_for("an ALARM line in the serve log", Duration::from_secs(5), || {
        served.log().contains("ALARM drop_bad_key_lockout")
    });
    assert!(served.stop());
}

/// Bytes host `i` has sent and received on eth0 (/proc/net/dev of its
/// namespace; /sys shows the namespace sysfs was mounted in).
fn link_bytes(tb: &Testbed, i: usize) -> (u64, u64) {
    let o = run(tb, i, "cat", &["/proc/net/dev"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("eth0:"))
        .expect("eth0 in /proc/net/dev");
    let f: Vec<u64> = line
        .split(':')
        .nth(1)
        .unwrap()
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    (f[8], f[0])
}

/// Hosts 0 and 1 serve as peers of each other, host 2 serves with no peers;
/// host 3 sends each of them random NetDAM frames (CHAIN programs through
/// 0 and 1 among them, origins anywhere, spoofed sources). No node may
/// send more bytes than it received.
#[test]
fn random_unauthenticated_frames_never_make_a_node_send_more_than_it_got() {
    let tb = testbed(4);
    let _served: Vec<Served> = vec![
        serve(&tb, 0, REGION, &[1]),
        serve(&tb, 1, REGION, &[0]),
        serve(&tb, 2, REGION, &[]),
    ];
    let before: Vec<(u64, u64)> = (0..3).map(|i| link_bytes(&tb, i)).collect();
    let hosts: Vec<Ipv4Addr> = tb.hosts.iter().map(|h| h.ip).collect();
    let sent = tb
        .in_host(3, move || {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            let mut rng = Rng(0x5EC0_0001);
            let mut bytes = 0usize;
            for _ in 0..3000 {
                let f = netdam_tests::hostile::datagram(&mut rng, &hosts);
                let to = hosts[rng.below(3) as usize];
                bytes += s.send_to(&f, SocketAddrV4::new(to, DEFAULT_PORT)).unwrap();
            }
            bytes
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    for (i, (tx0, rx0)) in before.iter().enumerate() {
        let (tx, rx) = link_bytes(&tb, i);
        let (sent_here, got) = (tx - tx0, rx - rx0);
        println!("node {i}: received {got} bytes, sent {sent_here}");
        assert!(
            sent_here <= got,
            "node {i} sent {sent_here} bytes after receiving {got}"
        );
        assert!(got > 0);
    }
    // The peers' node answered nothing from the stranger; the open node did.
    let (open, closed) = (stats(&tb, 2), stats(&tb, 0));
    assert!(closed.event(Event::DropNotPeer) > 0);
    assert!(open.event(Event::DropChainNoPeers) > 0);
    println!("{sent} bytes of random frames sent");
}
