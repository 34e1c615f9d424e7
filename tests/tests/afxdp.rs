//! Tier 3: what the data path hands to AF_XDP (MSG, WRITE_NOTIFY, header
//! split), received by an `Endpoint` in a test host beside `netdam serve`,
//! sent from another test host.

use std::{
    net::{Ipv4Addr, UdpSocket},
    path::PathBuf,
    sync::mpsc,
    time::{Duration, Instant},
};

use netdam_common::{
    counters::Event,
    split::{RebuildError, DESCRIPTOR_LEN},
    wire::ipv4_header_checksum,
    Status,
};
use netdam_lab::testbed::{Served, Testbed};
use netdam_tests::{netdam, netdam_bin, pinged, require_root, unique_prefix};
use netdam_user::{
    afxdp::{Delivery, Endpoint, EndpointConfig, XskStats},
    Client, ClientConfig, ClientError,
};

const RKEY: u32 = 0x1234;

/// Two hosts; host 1 serves 64 MiB with region 0x1234 over the low 32 MiB
/// (the split ring lives at the top, outside it).
fn setup() -> (Testbed, Served) {
    setup_with_mtu(1500)
}

fn setup_with_mtu(mtu: u32) -> (Testbed, Served) {
    require_root();
    let tb = Testbed::up(&unique_prefix(), 2, mtu).expect("testbed up");
    let served = tb
        .serve(1, &netdam_bin(), &serve_args(REGION, &[]))
        .expect("netdam serve");
    (tb, served)
}

/// The region of `setup`: the low 32 MiB of 64.
const REGION: &str = "0x1234:0:32MiB:rwam";

/// `serve` arguments: 64 MiB of memory with `region`, native XDP, then `extra`.
fn serve_args(region: &str, extra: &[&str]) -> Vec<String> {
    ["--mem-size", "64MiB", "--region", region, "--mode", "native"]
        .iter()
        .chain(extra)
        .map(|a| a.to_string())
        .collect()
}

/// What the receiver saw, copied out of UMEM (and NetDAM memory) for checking.
#[derive(Debug)]
enum Got {
    Msg {
        seq: u32,
        body: Vec<u8>,
    },
    Notify {
        addr: u64,
        len: u16,
        data: Vec<u8>,
    },
    /// `frame_ok`: lengths, checksum and descriptor as section 9 says;
    /// `payload`: the datagram rebuilt, or why not.
    Split {
        frame_ok: bool,
        payload: Result<Vec<u8>, RebuildError>,
    },
}

/// Makes a receiver wait before its first `recv` (so that the fill ring runs
/// dry), then report the kernel's counters once it has taken `first` frames
/// and given them back.
struct Hold {
    go: mpsc::Receiver<()>,
    first: usize,
    drained: mpsc::Sender<XskStats>,
}

/// A receiver thread in `netns`: opens an endpoint, says so, then receives
/// until it has `want` deliveries or `limit` passed.
fn receiver(
    netns: &str,
    pin_dir: PathBuf,
    cfg: EndpointConfig,
    want: usize,
    limit: Duration,
    mut hold: Option<Hold>,
) -> (mpsc::Receiver<()>, std::thread::JoinHandle<(Vec<Got>, XskStats)>) {
    let (ready_tx, ready) = mpsc::channel();
    let file = std::fs::File::open(format!("/run/netns/{netns}")).expect("netns");
    let h = std::thread::spawn(move || {
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let mut ep = Endpoint::open(&pin_dir, cfg).expect("open the endpoint");
        ready_tx.send(()).unwrap();
        if let Some(h) = &hold {
            h.go.recv().unwrap();
        }
        let mut got = Vec::new();
        let end = Instant::now() + limit;
        while got.len() < want && Instant::now() < end {
            let r = ep.recv(Duration::from_millis(50)).expect("recv");
            for d in r.iter() {
                got.push(copy_out(&d, r.memory()));
            }
            drop(r);
            if hold.as_ref().is_some_and(|h| got.len() >= h.first) {
                let h = hold.take().expect("hold");
                h.drained.send(ep.stats().unwrap()).unwrap();
            }
        }
        (got, ep.stats().unwrap())
    });
    (ready, h)
}

fn copy_out(d: &Delivery<'_>, mem: &netdam_user::controller::NetdamMemory) -> Got {
    match d {
        Delivery::Message { hdr, body, .. } => Got::Msg {
            seq: hdr.seq(),
            body: body.to_vec(),
        },
        Delivery::Notify { hdr, .. } => Got::Notify {
            addr: hdr.addr(),
            len: hdr.len(),
            data: mem.read(hdr.addr(), hdr.len() as usize).unwrap(),
        },
        Delivery::Split {
            kept,
            descriptor,
            frame,
            ..
        } => Got::Split {
            frame_ok: split_frame_ok(frame, kept.len()),
            payload: netdam_common::split::rebuild(kept, descriptor, |a, n| mem.read(a, n).ok()),
        },
        Delivery::Other(f) => panic!(
            "an unrecognised frame of {} bytes: {:02x?}",
            f.len(),
            &f[..f.len().min(64)]
        ),
    }
}

/// A split frame: IPv4 without options (as sent here) whose total length,
/// header checksum and UDP length count the kept bytes plus the 16-byte
/// descriptor, and UDP checksum 0.
fn split_frame_ok(f: &[u8], kept: usize) -> bool {
    let ip: [u8; 20] = f[14..34].try_into().unwrap();
    let be = |o: usize| u16::from_be_bytes([f[o], f[o + 1]]) as usize;
    ipv4_header_checksum(&ip) == 0
        && be(16) == 20 + 8 + kept + DESCRIPTOR_LEN
        && be(38) == 8 + kept + DESCRIPTOR_LEN
        && be(40) == 0
        && f.len() >= 14 + be(16)
}

/// Bytes of message `i` of length `n`: distinct per message and position.
fn body(i: usize, n: usize) -> Vec<u8> {
    (0..n).map(|j| (i * 131 + j * 7 + (j >> 8)) as u8).collect()
}

/// Runs `f` with a client of host 1's node, in host `host`.
fn client_in<T, F>(tb: &Testbed, host: usize, timeout_ms: u64, f: impl FnOnce(Client) -> F + Send + 'static) -> T
where
    T: Send + 'static,
    F: std::future::Future<Output = T>,
{
    tb.in_host(host, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let cfg = ClientConfig {
                timeout: Duration::from_millis(timeout_ms),
                ..Default::default()
            };
            let c = Client::connect(Ipv4Addr::new(198, 18, 0, 2), cfg)
                .await
                .expect("connect");
            f(c).await
        })
    })
    .expect("in host")
}

#[test]
fn messages_and_notifications_arrive_byte_exact_and_no_receiver_is_refused() {
    let (tb, _served) = setup();
    let sizes: Vec<usize> = (1..=64).chain([100, 512, 1024, 1400, 1440]).collect();
    let n = sizes.len();
    let (ready, rx) = receiver(
        &tb.hosts[1].netns,
        tb.hosts[1].pin_dir.clone(),
        EndpointConfig::default(),
        2 * n,
        Duration::from_secs(30),
        None,
    );
    ready.recv_timeout(Duration::from_secs(10)).expect("the endpoint opens");
    let s = sizes.clone();
    let seqs: Vec<u32> = client_in(&tb, 0, 200, move |c| async move {
        let mut seqs = Vec::new();
        for (i, n) in s.iter().enumerate() {
            c.msg(RKEY, 0, &body(i, *n)).await.expect("MSG acknowledged");
            seqs.push(i as u32);
        }
        for (i, n) in s.iter().enumerate() {
            c.write_notify(RKEY, 0x10_0000 + (i as u64) * 2048, &body(1000 + i, *n))
                .await
                .expect("WRITE_NOTIFY not refused");
        }
        seqs
    });
    assert_eq!(seqs.len(), n);
    let (got, stats) = rx.join().expect("receiver");
    assert_eq!(stats, XskStats::default(), "nothing dropped by the kernel");
    let msgs: Vec<&Vec<u8>> = got
        .iter()
        .filter_map(|g| match g {
            Got::Msg { body, .. } => Some(body),
            _ => None,
        })
        .collect();
    // Acknowledged one at a time: in order, each once (a resend would show twice).
    assert_eq!(msgs.len(), n, "every MSG once: {got:?}");
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(**m, body(i, sizes[i]), "message {i} ({} bytes)", sizes[i]);
    }
    let notes: Vec<(u64, u16, &Vec<u8>)> = got
        .iter()
        .filter_map(|g| match g {
            Got::Notify { addr, len, data } => Some((*addr, *len, data)),
            _ => None,
        })
        .collect();
    assert_eq!(notes.len(), n);
    for (i, (addr, len, data)) in notes.iter().enumerate() {
        assert_eq!((*addr, *len as usize), (0x10_0000 + i as u64 * 2048, sizes[i]));
        assert_eq!(**data, body(1000 + i, sizes[i]), "WRITE_NOTIFY {i} in NetDAM memory");
    }
    assert!(got.iter().all(|g| !matches!(g, Got::Split { .. })));
    // The endpoint is gone: its socket left the map.
    let refused = client_in(&tb, 0, 200, |c| async move { c.msg(RKEY, 0, b"anyone?").await });
    match refused {
        Err(ClientError::Refused { status, .. }) => assert_eq!(status, Status::NoReceiver),
        other => panic!("MSG without a receiver: {other:?}"),
    }
}

#[test]
fn a_dry_fill_ring_drops_and_counts_then_delivery_resumes() {
    let (tb, _served) = setup();
    let frames = 64;
    let burst = 200usize;
    let (hold_tx, go) = mpsc::channel();
    let (drained, drained_rx) = mpsc::channel();
    let cfg = EndpointConfig { frames, batch: 16 };
    let (ready, rx) = receiver(
        &tb.hosts[1].netns,
        tb.hosts[1].pin_dir.clone(),
        cfg,
        frames as usize + 50,
        Duration::from_secs(20),
        Some(Hold {
            go,
            first: frames as usize,
            drained,
        }),
    );
    ready.recv_timeout(Duration::from_secs(10)).expect("the endpoint opens");
    // A burst of MSGs without ACK_REQ while the receiver takes nothing: the
    // kernel fills the 64 frames, then has none left.
    tb.in_host(0, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        for i in 0..burst {
            let mut h = netdam_common::NetdamHdr::request(netdam_common::Opcode::Msg);
            h.set_rkey(RKEY);
            h.set_seq(i as u32);
            let b = body(i, 200);
            h.set_len(b.len() as u16);
            let mut p = h.to_bytes().to_vec();
            p.extend_from_slice(&b);
            s.send_to(&p, "198.18.0.2:4793").unwrap();
            if i % 32 == 31 {
                // Stay under veth's 256-frame queue: these drops are the UMEM's, not the link's.
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    hold_tx.send(()).unwrap();
    // The kernel's count once the held frames are back in the fill ring,
    // before anything else is sent.
    let stats = drained_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the receiver takes the 64 frames the burst filled");
    // Delivery resumes: acknowledged messages all arrive.
    let acked = client_in(&tb, 0, 200, |c| async move {
        for i in 0..50 {
            c.msg(RKEY, 0, &body(5000 + i, 300)).await.expect("MSG after the drops");
        }
        50
    });
    let (got, _) = rx.join().expect("receiver");
    let first: Vec<(u32, &Vec<u8>)> = got
        .iter()
        .filter_map(|g| match g {
            Got::Msg { seq, body } if body.len() == 200 => Some((*seq, body)),
            _ => None,
        })
        .collect();
    let dropped = stats.rx_dropped.max(stats.rx_fill_ring_empty);
    assert_eq!(first.len(), frames as usize, "the burst filled exactly the UMEM");
    for (seq, b) in &first {
        assert_eq!(**b, body(*seq as usize, 200), "burst message {seq} intact");
    }
    assert_eq!(
        first.len() as u64 + dropped,
        burst as u64,
        "every burst message delivered or counted as dropped: {stats:?}"
    );
    let later = got
        .iter()
        .filter(|g| matches!(g, Got::Msg { body, .. } if body.len() == 300))
        .count();
    assert_eq!(later, acked, "delivery resumed");
}

#[test]
fn split_datagrams_rebuild_exactly_from_1_byte_to_the_mtu() {
    let (tb, _served) = setup();
    let keep = 64;
    let max = 1500 - 28;
    let o = tb
        .command(1, netdam_bin())
        .unwrap()
        .args(["split", "--pin-dir"])
        .arg(&tb.hosts[1].pin_dir)
        .args([
            "--port",
            "9000",
            "--keep",
            &keep.to_string(),
            "--slots",
            "2048",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "netdam split: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let shown: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shown["ports"][0]["keep"], keep);
    assert_eq!(shown["ring"]["slots"], 2048);
    let (ready, rx) = receiver(
        &tb.hosts[1].netns,
        tb.hosts[1].pin_dir.clone(),
        EndpointConfig::default(),
        max,
        Duration::from_secs(30),
        None,
    );
    ready.recv_timeout(Duration::from_secs(10)).expect("the endpoint opens");
    tb.in_host(0, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        for n in 1..=max {
            s.send_to(&body(n, n), "198.18.0.2:9000").unwrap();
            if n % 32 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    })
    .unwrap();
    let (got, stats) = rx.join().expect("receiver");
    assert_eq!(stats, XskStats::default());
    let mut seen = vec![false; max + 1];
    for g in &got {
        let Got::Split { frame_ok, payload } = g else {
            panic!("not a split datagram: {g:?}")
        };
        assert!(frame_ok);
        let payload = payload.as_ref().expect("a split datagram rebuilds");
        let n = payload.len();
        assert_eq!(*payload, body(n, n), "datagram of {n} bytes rebuilt");
        assert!(!seen[n], "datagram of {n} bytes twice");
        seen[n] = true;
    }
    let missing: Vec<usize> = (1..=max).filter(|n| !seen[*n]).collect();
    if !missing.is_empty() {
        let o = tb
            .command(1, netdam_bin())
            .unwrap()
            .args(["stats", "--pin-dir"])
            .arg(&tb.hosts[1].pin_dir)
            .output()
            .unwrap();
        panic!(
            "datagrams not delivered: {missing:?}; the node's counters:\n{}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
}

/// `netdam split ARGS --json` on host 1's node: its output, or its error.
fn split_cmd(tb: &Testbed, args: &[&str]) -> Result<serde_json::Value, String> {
    let o = tb
        .command(1, netdam_bin())
        .unwrap()
        .args(["split", "--pin-dir"])
        .arg(&tb.hosts[1].pin_dir)
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    match o.status.success() {
        true => Ok(serde_json::from_slice(&o.stdout).unwrap()),
        false => Err(String::from_utf8_lossy(&o.stderr).into_owned()),
    }
}

/// A burst of `n` datagrams of 1000 + i bytes to port 9000 while the
/// receiver holds off, then everything it got.
fn held_burst(tb: &Testbed, n: usize) -> Vec<Got> {
    let (go_tx, go) = mpsc::channel();
    let (drained, _) = mpsc::channel();
    let hold = Hold {
        go,
        first: usize::MAX,
        drained,
    };
    let (ready, rx) = receiver(
        &tb.hosts[1].netns,
        tb.hosts[1].pin_dir.clone(),
        EndpointConfig::default(),
        n,
        Duration::from_secs(10),
        Some(hold),
    );
    ready.recv_timeout(Duration::from_secs(10)).expect("the endpoint opens");
    tb.in_host(0, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        for i in 0..n {
            s.send_to(&body(1000 + i, 1000 + i), "198.18.0.2:9000").unwrap();
        }
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    go_tx.send(()).unwrap();
    rx.join().expect("receiver").0
}

/// Issue 14 item 5: a ring of 4 slots takes 12 rests before the reader
/// looks. With generations the 8 overwritten ones are reported as such and
/// the last 4 rebuild exactly; without, the reader gets other datagrams'
/// bytes and cannot tell (which is why generations exist).
#[test]
fn a_late_reader_detects_split_slots_the_ring_overwrote() {
    let (tb, _served) = setup();
    let shown = split_cmd(
        &tb,
        &["--port", "9000", "--keep", "64", "--slots", "4", "--generations"],
    )
    .unwrap();
    assert_eq!(shown["ring"]["generations"], true);
    assert_eq!(shown["ring"]["slot_size"], 1536, "the stamp takes a cache line more");
    let got = held_burst(&tb, 12);
    assert_eq!(got.len(), 12, "{got:?}");
    for (i, g) in got.iter().enumerate() {
        let Got::Split { frame_ok, payload } = g else {
            panic!("not a split datagram: {g:?}")
        };
        assert!(frame_ok);
        match i {
            0..8 => assert!(
                matches!(payload, Err(RebuildError::Overwritten { .. })),
                "datagram {i}: {payload:?}"
            ),
            _ => assert_eq!(
                payload.as_deref(),
                Ok(body(1000 + i, 1000 + i).as_slice()),
                "datagram {i}"
            ),
        }
    }
    // The same burst on a ring without generations (set up anew).
    let shown = split_cmd(&tb, &["--port", "9000", "--keep", "64", "--slots", "4"]).unwrap();
    assert_eq!(shown["ring"]["generations"], false);
    let got = held_burst(&tb, 12);
    let wrong = got
        .iter()
        .enumerate()
        .filter(|(i, g)| !matches!(g, Got::Split { payload: Ok(p), .. } if *p == body(1000 + i, 1000 + i)))
        .count();
    assert_eq!(
        wrong, 8,
        "without generations the overwritten rests come back as other bytes"
    );
}

/// Issue 14 item 5: the ring may not overlap a region, nor a region the
/// ring (kept in the pins across a restart).
#[test]
fn the_split_ring_and_the_regions_never_overlap() {
    let (tb, served) = setup();
    let e = split_cmd(&tb, &["--port", "9000", "--keep", "64", "--ring-addr", "0x1000"]).unwrap_err();
    assert!(e.contains("overlaps region 0x1234"), "{e}");
    let e = split_cmd(&tb, &["--port", "9000", "--keep", "64", "--ring-addr", "0x2000020"]).unwrap_err();
    assert!(e.contains("not a multiple of 64"), "{e}");
    let shown = split_cmd(&tb, &["--port", "9000", "--keep", "64", "--ring-addr", "0x2000000"]).unwrap();
    assert_eq!(shown["ring"]["addr"], 0x200_0000);
    assert!(served.stop());
    let args = serve_args("0x1234:0:48MiB:rw", &[]);
    let e = tb.serve(1, &netdam_bin(), &args).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("overlaps the split ring [0x2000000,"), "{e}");
}

/// Issue 14 item 5: with a peer table only peers fill the ring; a
/// stranger's datagram to a split port goes to the kernel whole.
#[test]
fn only_peers_fill_the_split_ring() {
    require_root();
    let tb = Testbed::up(&unique_prefix(), 3, 1500).expect("testbed up");
    let args = serve_args(REGION, &["--peer", "198.18.0.1"]);
    let _served = tb.serve(1, &netdam_bin(), &args).expect("netdam serve");
    // The peer counts once the node has bound its MAC (from the neighbour table, within seconds).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pinged(&tb, 0, 1) {
        assert!(Instant::now() < deadline, "the peer is served within 10 s");
    }
    split_cmd(&tb, &["--port", "9000", "--keep", "64"]).unwrap();
    let (ready, rx) = receiver(
        &tb.hosts[1].netns,
        tb.hosts[1].pin_dir.clone(),
        EndpointConfig::default(),
        3,
        Duration::from_secs(3),
        None,
    );
    ready.recv_timeout(Duration::from_secs(10)).expect("the endpoint opens");
    for host in [2, 0] {
        tb.in_host(host, move || {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            for _ in 0..3 {
                s.send_to(&body(host, 500), "198.18.0.2:9000").unwrap();
            }
        })
        .unwrap();
    }
    let (got, _) = rx.join().expect("receiver");
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got
        .iter()
        .all(|g| matches!(g, Got::Split { payload: Ok(p), .. } if *p == body(0, 500))));
    let st = netdam_user::stats::Stats::read_pinned(&tb.hosts[1].pin_dir).unwrap();
    assert_eq!(st.event(Event::PassSplitStranger), 3);
    assert_eq!(st.event(Event::Split), 3);
}

#[test]
fn an_msg_larger_than_a_umem_frame_is_dropped_and_counted_not_truncated() {
    let (tb, _served) = setup_with_mtu(9000);
    let (ready, rx) = receiver(
        &tb.hosts[1].netns,
        tb.hosts[1].pin_dir.clone(),
        EndpointConfig::default(),
        2,
        Duration::from_secs(3),
        None,
    );
    ready.recv_timeout(Duration::from_secs(10)).expect("the endpoint opens");
    // From IPv4 on: 20 + 8 + 32 + body. 3780 fits the 3840 bytes a UMEM
    // frame holds after the kernel's headroom; 3781 and 8000 do not.
    let bodies = [3780usize, 3781, 8000];
    tb.in_host(0, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        for (i, n) in bodies.iter().enumerate() {
            let mut h = netdam_common::NetdamHdr::request(netdam_common::Opcode::Msg);
            h.set_rkey(RKEY);
            h.set_seq(i as u32);
            h.set_len(*n as u16);
            let mut p = h.to_bytes().to_vec();
            p.extend_from_slice(&body(i, *n));
            s.send_to(&p, "198.18.0.2:4793").unwrap();
        }
    })
    .unwrap();
    let (got, _) = rx.join().expect("receiver");
    let sizes: Vec<usize> = got
        .iter()
        .map(|g| match g {
            Got::Msg { body, .. } => body.len(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(sizes, [3780], "only the MSG that fits a UMEM frame is delivered, whole");
    let stats = netdam_user::stats::Stats::read_pinned(&tb.hosts[1].pin_dir).unwrap();
    assert_eq!(stats.event(netdam_common::counters::Event::DropTooLargeForUmem), 2);
}

#[test]
fn the_commands_receive_send_and_say_what_is_wrong() {
    let (tb, _served) = setup();
    let pin = tb.hosts[1].pin_dir.to_str().unwrap().to_string();
    let err = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    // No receiver yet: refused, exit code 4, and what to do.
    // `netdam msg ARGS` from host 0 to host 1's region 0x1234.
    let msg = |args: &[&str]| {
        let mut a = vec!["msg", "--node", "198.18.0.2", "--rkey", "0x1234"];
        a.extend_from_slice(args);
        netdam(&tb, 0, &a)
    };
    let o = msg(&["--addr", "0", "hi"]);
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    assert!(
        err(&o).contains("NO_RECEIVER") && err(&o).contains("netdam recv"),
        "{}",
        err(&o)
    );
    // `netdam recv` prints what arrives, as JSON lines with --json.
    let mut recv = tb
        .command(1, netdam_bin())
        .unwrap()
        .args([
            "recv",
            "--pin-dir",
            &pin,
            "--count",
            "2",
            "--timeout-ms",
            "10000",
            "--json",
            "--hex",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // It says when its sockets are bound.
    let mut stderr = std::io::BufReader::new(recv.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("receiving on") {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut stderr, &mut line).unwrap() == 0 {
            panic!("netdam recv ended before receiving: {said}");
        }
        said += &line;
    }
    let o = msg(&["--addr", "0", "hi there"]);
    assert!(o.status.success(), "{}", err(&o));
    let o = msg(&["--addr", "4096", "--notify", "abc"]);
    assert!(o.status.success(), "{}", err(&o));
    let out = recv.wait_with_output().unwrap();
    assert!(out.status.success(), "netdam recv failed: {said}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["kind"], "msg");
    assert_eq!(lines[0]["bytes"], "6869207468657265");
    assert_eq!(
        (lines[1]["kind"].as_str(), lines[1]["addr"].as_u64()),
        (Some("write_notify"), Some(4096))
    );
    // Bad arguments say what is wrong.
    for (args, says) in [
        (
            vec!["split", "--pin-dir", &pin, "--port", "4793", "--keep", "8"],
            "port P",
        ),
        (
            vec!["split", "--pin-dir", &pin, "--port", "9000", "--keep", "5000"],
            "too large",
        ),
        (
            vec!["split", "--pin-dir", &pin, "--port", "9001", "--remove"],
            "is not split",
        ),
        (
            vec!["recv", "--pin-dir", &pin, "--frames", "100", "--count", "1"],
            "power of two",
        ),
    ] {
        let o = netdam(&tb, 1, &args);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err(&o).contains(says), "{args:?}: {}", err(&o));
    }
}

/// Huge pages reserved for a test, the old reservation put back on drop.
struct HugePages(String);

impl HugePages {
    fn reserve(more: u32) -> HugePages {
        const PATH: &str = "/proc/sys/vm/nr_hugepages";
        let old = std::fs::read_to_string(PATH)
            .expect("vm.nr_hugepages")
            .trim()
            .to_string();
        let n: u32 = old.parse().unwrap();
        std::fs::write(PATH, (n + more).to_string()).expect("reserve huge pages");
        HugePages(old)
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/vm/nr_hugepages", &self.0);
    }
}

#[test]
fn the_umem_is_on_huge_pages_when_there_are_free_ones() {
    let (tb, _served) = setup();
    let _pages = HugePages::reserve(4);
    let pin = tb.hosts[1].pin_dir.clone();
    let netns = format!("/run/netns/{}", tb.hosts[1].netns);
    let (ready_tx, ready) = mpsc::channel();
    let rx = std::thread::spawn(move || {
        let f = std::fs::File::open(&netns).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        // 512 frames of 4 KiB: one 2 MiB page.
        let mut ep = Endpoint::open(&pin, EndpointConfig { frames: 512, batch: 16 }).expect("open the endpoint");
        ready_tx.send(ep.backing()).unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            let r = ep.recv(Duration::from_millis(50)).unwrap();
            let got: Option<Vec<u8>> = r.iter().find_map(|d| match d {
                Delivery::Message { body, .. } => Some(body.to_vec()),
                _ => None,
            });
            if let Some(body) = got {
                return body;
            }
        }
        Vec::new()
    });
    let backing = ready.recv_timeout(Duration::from_secs(10)).expect("the endpoint opens");
    assert_eq!(backing, netdam_user::afxdp::Backing::Hugepages);
    client_in(&tb, 0, 200, |c| async move {
        c.msg(RKEY, 0, b"on a huge page").await.expect("MSG")
    });
    assert_eq!(rx.join().unwrap(), b"on a huge page");
}
