//! Tier 3: NetDAM nodes serving on the namespace testbed, driven with the
//! `netdam` command from other test hosts.

use std::{net::UdpSocket, time::Duration};

use netdam_lab::testbed::{Served, Testbed};
use netdam_tests::{netdam, netdam_bin, ok, require_root, unique_prefix};

const REGION: &str = "0x1234:0:64MiB:rwam";

fn testbed(nodes: usize) -> Testbed {
    require_root();
    Testbed::up(&unique_prefix(), nodes, 1500).expect("testbed up")
}

fn serve(tb: &Testbed, i: usize, mem: &str) -> Served {
    let args: Vec<String> = ["--mem-size", mem, "--region", REGION, "--mode", "native"]
        .map(String::from)
        .to_vec();
    tb.serve(i, &netdam_bin(), &args).expect("netdam serve")
}

/// `netdam write` of `file` at `addr` of region 0x1234, from host `from`.
fn write_file(tb: &Testbed, from: usize, node: &str, addr: &str, file: &std::path::Path) {
    let f = file.to_str().unwrap();
    ok(&netdam(
        tb,
        from,
        &["write", "--node", node, "--rkey", "0x1234", "--addr", addr, "--file", f],
    ));
}

/// `netdam read` of `len` bytes at `addr` of region 0x1234 into `out`, from host `from`.
fn read_file(tb: &Testbed, from: usize, node: &str, addr: &str, len: &str, out: &std::path::Path) {
    let o = out.to_str().unwrap();
    ok(&netdam(
        tb,
        from,
        &[
            "read", "--node", node, "--rkey", "0x1234", "--addr", addr, "--len", len, "--out", o,
        ],
    ));
}

fn xdp_attached(tb: &Testbed, i: usize) -> bool {
    let o = std::process::Command::new("ip")
        .args(["-n", &tb.hosts[i].netns, "link", "show", "eth0"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).contains("xdp")
}

#[test]
fn every_node_pings_every_node() {
    let tb = testbed(3);
    let _served: Vec<Served> = (0..3).map(|i| serve(&tb, i, "64MiB")).collect();
    for i in 0..3 {
        for j in 0..3 {
            if i != j {
                let out = ok(&netdam(
                    &tb,
                    i,
                    &["ping", "--node", &tb.hosts[j].ip.to_string(), "--count", "2"],
                ));
                assert!(out.contains("2 answered"), "{i} -> {j}: {out}");
            }
        }
    }
}

#[test]
fn sixty_four_mib_written_and_read_back_byte_exact() {
    let tb = testbed(2);
    let served = serve(&tb, 0, "128MiB");
    let dir = std::env::temp_dir().join(format!("netdam-{}", tb.prefix));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.bin");
    let output = dir.join("out.bin");
    let data: Vec<u8> = (0..64 << 20).map(|_| rand_byte()).collect();
    std::fs::write(&input, &data).unwrap();
    let node = tb.hosts[0].ip.to_string();
    write_file(&tb, 1, &node, "0", &input);
    read_file(&tb, 1, &node, "0", "64MiB", &output);
    let back = std::fs::read(&output).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(back == data, "the 64 MiB read back differ from what was written");
    let stats = ok(&netdam(
        &tb,
        0,
        &["stats", "--pin-dir", tb.hosts[0].pin_dir.to_str().unwrap(), "--json"],
    ));
    let v: serde_json::Value = serde_json::from_str(&stats).unwrap();
    let writes = v["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["op"] == "WRITE" && r["status"] == "OK")
        .unwrap();
    assert!(
        writes["count"].as_u64().unwrap() >= (64 << 20) / 1440,
        "every WRITE counted"
    );
    assert!(served.stop(), "serve exits cleanly on SIGTERM");
}

fn rand_byte() -> u8 {
    use std::cell::Cell;
    thread_local!(static X: Cell<u64> = const { Cell::new(0x9E37_79B9_7F4A_7C15) });
    X.with(|x| {
        let mut v = x.get();
        v ^= v << 13;
        v ^= v >> 7;
        v ^= v << 17;
        x.set(v);
        (v >> 24) as u8
    })
}

#[test]
fn restart_keeps_memory_and_counters_and_detaches_cleanly() {
    let tb = testbed(2);
    let dir = std::env::temp_dir().join(format!("netdam-{}", tb.prefix));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.bin");
    let data: Vec<u8> = (0..100_000).map(|_| rand_byte()).collect();
    std::fs::write(&input, &data).unwrap();
    let node = tb.hosts[0].ip.to_string();
    let first = serve(&tb, 0, "64MiB");
    assert!(xdp_attached(&tb, 0));
    write_file(&tb, 1, &node, "4096", &input);
    assert!(first.stop(), "clean exit on SIGTERM");
    assert!(!xdp_attached(&tb, 0), "SIGTERM detaches the program");

    let second = serve(&tb, 0, "64MiB");
    assert!(
        second.log().contains("reusing the pinned NetDAM memory"),
        "{}",
        second.log()
    );
    let out = dir.join("out.bin");
    read_file(&tb, 1, &node, "4096", "100000", &out);
    assert!(std::fs::read(&out).unwrap() == data, "memory survived the restart");
    let stats = ok(&netdam(
        &tb,
        0,
        &["stats", "--pin-dir", tb.hosts[0].pin_dir.to_str().unwrap()],
    ));
    assert!(
        stats.contains("WRITE") && stats.contains("READ"),
        "counters survived: {stats}"
    );
    drop(second);

    // Another --mem-size does not silently reuse or discard the old memory.
    let bad = tb
        .command(0, netdam_bin())
        .unwrap()
        .args([
            "serve",
            "--iface",
            "eth0",
            "--mem-size",
            "32MiB",
            "--pin-dir",
            tb.hosts[0].pin_dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("pinned map") && err.contains("netdam unpin"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `net.ipv4.conf.eth0.NAME` in host `i`.
fn sysctl(tb: &Testbed, i: usize, name: &str) -> String {
    let o = tb
        .command(i, "cat")
        .unwrap()
        .arg(format!("/proc/sys/net/ipv4/conf/eth0/{name}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The setting `serve` turns on for CHAIN goes back to what it was, also
/// when it is killed: the next `serve` keeps the recorded originals (rather
/// than saving the "1" it finds) and restores them on exit, `netdam unpin`
/// restores them, and SIGHUP detaches and restores like SIGTERM.
#[test]
fn kernel_settings_come_back_after_a_kill_a_restart_unpin_and_sighup() {
    use netdam_user::controller::sysctls::record_path;
    use nix::sys::signal::Signal;
    const SETTINGS: [&str; 1] = ["accept_local"];
    let tb = testbed(1);
    for name in ["forwarding", "accept_local"] {
        let set = format!("echo 0 > /proc/sys/net/ipv4/conf/eth0/{name}");
        assert!(tb
            .command(0, "sh")
            .unwrap()
            .args(["-c", &set])
            .status()
            .unwrap()
            .success());
    }
    let all = |tb: &Testbed, v: &str| SETTINGS.iter().all(|n| sysctl(tb, 0, n) == v);
    let record = record_path(&tb.hosts[0].pin_dir);

    // Killed: the settings stay on, and their originals are on record.
    let served = serve(&tb, 0, "64MiB");
    assert!(all(&tb, "1"), "serve turns them on");
    assert_eq!(
        sysctl(&tb, 0, "forwarding"),
        "0",
        "serve leaves IPv4 forwarding off (next hops are the peers' MACs)"
    );
    assert!(!served.stop_with(Signal::SIGKILL));
    assert!(
        all(&tb, "1") && record.exists(),
        "a SIGKILL restores nothing: {}",
        record.display()
    );

    // The next serve finds "1" but restores the recorded "0".
    let served = serve(&tb, 0, "64MiB");
    assert!(
        served.log().contains("did not restore its kernel settings"),
        "{}",
        served.log()
    );
    assert!(served.stop());
    assert!(
        all(&tb, "0"),
        "restored to the originals, not to what the second start found"
    );
    assert!(!record.exists(), "a clean exit removes the record");

    // Killed, then unpinned: unpin restores.
    assert!(!serve(&tb, 0, "64MiB").stop_with(Signal::SIGKILL));
    let out = ok(&netdam(
        &tb,
        0,
        &["unpin", "--pin-dir", tb.hosts[0].pin_dir.to_str().unwrap()],
    ));
    assert!(out.contains("restored") && all(&tb, "0") && !record.exists(), "{out}");

    // A hangup ends it cleanly.
    let served = serve(&tb, 0, "64MiB");
    assert!(served.stop_with(Signal::SIGHUP), "clean exit on SIGHUP");
    assert!(all(&tb, "0") && !record.exists());
    assert!(!xdp_attached(&tb, 0), "SIGHUP detaches the program");
}

#[test]
fn ordinary_udp_service_keeps_working_beside_netdam() {
    let tb = testbed(2);
    let _served = serve(&tb, 0, "64MiB");
    let echo_addr = format!("{}:7007", tb.hosts[0].ip);
    let bound = echo_addr.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let netns = tb.hosts[0].netns.clone();
    let echo = std::thread::spawn(move || {
        netdam_lab::testbed::in_netns(&netns, move || {
            let s = UdpSocket::bind(&bound).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            tx.send(()).unwrap();
            let mut buf = [0u8; 2048];
            for _ in 0..20 {
                let (n, from) = s.recv_from(&mut buf).unwrap();
                s.send_to(&buf[..n], from).unwrap();
            }
        })
        .unwrap()
    });
    rx.recv().unwrap();
    tb.in_host(1, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        for i in 0..20u32 {
            let msg = format!("echo {i} {}", "x".repeat(i as usize * 50));
            s.send_to(msg.as_bytes(), &echo_addr).unwrap();
            let mut buf = [0u8; 2048];
            let n = s.recv(&mut buf).expect("the echo answers while NetDAM is attached");
            assert_eq!(&buf[..n], msg.as_bytes());
        }
    })
    .unwrap();
    echo.join().unwrap();
}

#[test]
fn client_errors_are_specific_and_exit_codes_differ() {
    let tb = testbed(2);
    let _served = serve(&tb, 0, "64MiB");
    let node = tb.hosts[0].ip.to_string();
    let out = std::env::temp_dir().join(format!("netdam-{}-x", tb.prefix));
    // Refused: a key no region has.
    let o = netdam(
        &tb,
        1,
        &[
            "read",
            "--node",
            &node,
            "--rkey",
            "0x99",
            "--addr",
            "0",
            "--len",
            "16",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(4));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("BAD_KEY") && err.contains("--rkey"), "{err}");
    // Refused: past the region.
    let o = netdam(
        &tb,
        1,
        &[
            "read",
            "--node",
            &node,
            "--rkey",
            "0x1234",
            "--addr",
            "64MiB",
            "--len",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&o.stderr).contains("OUT_OF_BOUNDS"));
    // No answer: host 1 runs no node.
    let o = netdam(
        &tb,
        0,
        &[
            "ping",
            "--node",
            &tb.hosts[1].ip.to_string(),
            "--timeout-ms",
            "50",
            "--retries",
            "1",
        ],
    );
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no answer after 2 attempt(s)"));
    // A bad argument says what would be right.
    let o = netdam(&tb, 1, &["serve", "--iface", "eth0", "--region", "1:0:4MiB:rq"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("r=READ w=WRITE a=ATOMIC m=MSG"));
    let _ = std::fs::remove_file(out);
}

#[test]
fn testbed_down_removes_everything_it_made() {
    require_root();
    let prefix = unique_prefix();
    let tb = Testbed::up(&prefix, 3, 1500).unwrap();
    let pins = std::path::Path::new("/sys/fs/bpf/netdam-testbed").join(&prefix);
    assert!(pins.exists());
    let names = |p: &str| -> Vec<String> {
        std::fs::read_dir("/run/netns")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(p))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(names(&prefix).len(), 4);
    // What `netdam serve` records for a host's pin directory under
    // /run/netdam (random keys, sysctls to restore) goes with the testbed.
    let records = [
        netdam_user::controller::keys::keys_path(&tb.hosts[1].pin_dir),
        netdam_user::controller::sysctls::record_path(&tb.hosts[2].pin_dir),
    ];
    for r in &records {
        std::fs::create_dir_all(r.parent().unwrap()).unwrap();
        std::fs::write(r, "{}").unwrap();
    }
    // What still runs in its hosts ends with them (deleting a namespace
    // alone would leave it running): one that goes on SIGTERM, and one
    // that ignores it and gets SIGKILL.
    let mut polite = tb.command(0, "sleep").unwrap().arg("300").spawn().unwrap();
    let mut stubborn = tb
        .command(1, "sh")
        .unwrap()
        .args(["-c", "trap '' TERM; while :; do sleep 0.1; done"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    drop(tb);
    assert!(names(&prefix).is_empty(), "namespaces left: {:?}", names(&prefix));
    assert!(!pins.exists());
    for r in &records {
        assert!(!r.exists(), "{} left", r.display());
    }
    use std::os::unix::process::ExitStatusExt;
    let polite = polite.try_wait().unwrap().expect("the process in host 0 ended");
    assert_eq!(polite.signal(), Some(libc::SIGTERM));
    let stubborn = stubborn.try_wait().unwrap().expect("the process in host 1 ended");
    assert_eq!(stubborn.signal(), Some(libc::SIGKILL));
    // Idempotent, also when nothing is there.
    Testbed::down(&prefix).unwrap();
}

#[test]
fn data_path_logs_reach_rust_log() {
    let tb = testbed(2);
    let args: Vec<String> = ["--region", REGION].map(String::from).to_vec();
    let served = tb
        .serve_with_env(0, &netdam_bin(), &args, &[("RUST_LOG", "debug")])
        .expect("serve");
    let target = format!("{}:4793", tb.hosts[0].ip);
    tb.in_host(1, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        // 32 bytes whose magic is not 0xDA: dropped and logged.
        s.send_to(&[0x42; 32], &target).unwrap();
    })
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !served.log().contains("frame dropped: drop_bad_magic") {
        assert!(
            std::time::Instant::now() < deadline,
            "no eBPF log line in:\n{}",
            served.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn reduce_and_accumulate_from_the_command_line() {
    let tb = testbed(2);
    let _served = serve(&tb, 0, "64MiB");
    let node = tb.hosts[0].ip.to_string();
    let vector = |op: &str, alu: &str, dtype: &str, values: &str| {
        let args = [
            "--node", &node, "--rkey", "0x1234", "--addr", "0x100", "--dtype", dtype, "--op", alu, "--values", values,
        ];
        ok(&netdam(&tb, 1, &[&[op][..], &args[..]].concat()))
    };
    // Memory starts at zero: MAX into it keeps the positive values.
    vector("accumulate", "max", "i32", "5,-3,7,0");
    assert_eq!(vector("reduce", "min", "i32", "9,9,1,-1").trim(), "5,0,1,-1");
    assert_eq!(vector("reduce", "sum", "i32", "1,1,1,1").trim(), "6,1,8,1");
    // f32 through the data path's integer soft-float.
    vector("accumulate", "or", "u64", "1,2");
    assert_eq!(vector("reduce", "sum", "f32", "0.5,1.5").trim().split(',').count(), 2);
    // A bad value says what is wrong.
    let o = netdam(
        &tb,
        1,
        &[
            "reduce", "--node", &node, "--rkey", "0x1234", "--addr", "0", "--dtype", "u32", "--op", "sum", "--values",
            "-1",
        ],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a u32 value"));
}

#[test]
fn atomics_from_the_command_line() {
    let tb = testbed(2);
    let _served = serve(&tb, 0, "64MiB");
    let node = tb.hosts[0].ip.to_string();
    let atomic = |op: &str, extra: &[&str]| {
        let args = [&[op, "--node", &node, "--rkey", "0x1234", "--addr", "0x200"][..], extra].concat();
        ok(&netdam(&tb, 1, &args)).trim().to_string()
    };
    assert_eq!(atomic("fetch-add", &["--value", "5"]), "0");
    assert_eq!(atomic("fetch-add", &["--value", "0x10"]), "5");
    assert_eq!(atomic("swap", &["--value", "100"]), "21");
    assert_eq!(atomic("cas", &["--expected", "7", "--value", "1"]), "100 (not swapped)");
    assert_eq!(atomic("cas", &["--expected", "100", "--value", "1"]), "100");
    assert_eq!(atomic("fetch-add", &["--value", "0"]), "1");
    // Misaligned: a clear refusal, exit code 4.
    let o = netdam(
        &tb,
        1,
        &[
            "fetch-add",
            "--node",
            &node,
            "--rkey",
            "0x1234",
            "--addr",
            "0x204",
            "--value",
            "1",
        ],
    );
    assert_eq!(o.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&o.stderr).contains("MISALIGNED"));
}

#[test]
fn concurrent_clients_get_exact_totals() {
    let tb = testbed(3);
    let _served = serve(&tb, 0, "64MiB");
    let node = tb.hosts[0].ip;
    const OPS: u64 = 1000;
    const ELEMS: usize = 180;
    // Two clients on each of two hosts, at once: FETCH_ADD on one word and
    // ACCUMULATE i64 ADD on one vector. Retransmissions reuse the seq, so
    // the window keeps the totals exact even when an answer is lost.
    let clients: Vec<_> = [1usize, 1, 2, 2]
        .into_iter()
        .map(|h| {
            std::thread::spawn({
                let netns = tb.hosts[h].netns.clone();
                move || {
                    netdam_lab::testbed::in_netns(&netns, move || {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .unwrap();
                        rt.block_on(async {
                            let c = netdam_user::Client::connect(node, netdam_user::ClientConfig::default())
                                .await
                                .unwrap();
                            let ones: Vec<u8> = (0..ELEMS).flat_map(|_| 1i64.to_le_bytes()).collect();
                            for _ in 0..OPS {
                                c.fetch_add(0x1234, 0x100, 1).await.unwrap();
                                c.accumulate(
                                    0x1234,
                                    0x1000,
                                    netdam_common::wire::Dtype::I64,
                                    netdam_common::wire::Alu::Add,
                                    &ones,
                                )
                                .await
                                .unwrap();
                            }
                        })
                    })
                    .unwrap()
                }
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client");
    }
    let total = tb
        .in_host(1, move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let c = netdam_user::Client::connect(node, netdam_user::ClientConfig::default())
                    .await
                    .unwrap();
                (
                    c.fetch_add(0x1234, 0x100, 0).await.unwrap(),
                    c.read(0x1234, 0x1000, ELEMS * 8, &|_| {}).await.unwrap(),
                )
            })
        })
        .unwrap();
    assert_eq!(total.0, 4 * OPS, "FETCH_ADD total");
    for (i, e) in total.1.chunks(8).enumerate() {
        assert_eq!(
            i64::from_le_bytes(e.try_into().unwrap()),
            4 * OPS as i64,
            "element {i} of the ACCUMULATE total"
        );
    }
}

#[test]
fn the_demo_shows_nodes_memory_and_a_message_and_cleans_up() {
    require_root();
    let prefix = unique_prefix();
    let o = std::process::Command::new(netdam_tests::netdam_lab_bin())
        .args(["testbed", "demo", "--nodes", "2", "--prefix", &prefix])
        .output()
        .expect("run netdam-lab testbed demo");
    let out = ok(&o);
    assert!(out.contains("read it back byte-exact"), "{out}");
    assert!(
        out.contains("acknowledged it") && out.contains("hello from the network side"),
        "{out}"
    );
    assert!(
        !std::path::Path::new(&format!("/run/netns/{prefix}0")).exists(),
        "the demo removed its hosts"
    );
}

/// The batched WRITE and READ transfers under 2% loss, duplication and
/// reordering on every link, striped over two threads, through the UDP
/// path and the AF_XDP path (ack slots, shared sockets): resends with the
/// same seq make them whole and byte-exact, and late duplicates of answered
/// pieces change nothing.
#[test]
fn batched_transfers_survive_loss_duplication_and_reordering() {
    let tb = testbed(2);
    let _served = serve(&tb, 0, "64MiB");
    tb.impair(&netdam_lab::testbed::Chaos {
        loss: 0.02,
        dup: 0.02,
        reorder: 0.02,
        seed: 13,
    })
    .expect("chaos element");
    let node = tb.hosts[0].ip;
    for afxdp in [false, true] {
        let data: Vec<u8> = (0..4 << 20).map(|_| rand_byte()).collect();
        let sent = data.clone();
        let back = tb
            .in_host(1, move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let cfg = netdam_user::ClientConfig {
                        timeout: Duration::from_millis(20),
                        retries: 50,
                        streams: 2,
                        afxdp,
                        ..Default::default()
                    };
                    let c = netdam_user::Client::connect(node, cfg).await.unwrap();
                    // An odd length and address: the last piece is short.
                    c.write(0x1234, 12_345, &sent[..sent.len() - 7], &|_| {}).await.unwrap();
                    c.read(0x1234, 12_345, sent.len() - 7, &|_| {}).await.unwrap()
                })
            })
            .unwrap();
        assert!(
            back == data[..data.len() - 7],
            "the bytes read back differ (AF_XDP: {afxdp})"
        );
    }
    let s = tb.chaos_stats().expect("chaos counters").expect("chaos attached");
    assert!(s.dropped > 0 && s.duplicated > 0 && s.released > 0, "{s:?}");
}

/// `netdam write --afxdp` and `netdam read --afxdp`: byte-exact through the
/// AF_XDP path, the client's program gone from the interface afterwards,
/// and a host whose interface serves a node refused with the reason.
#[test]
fn afxdp_transfers_are_byte_exact_and_leave_the_interface_as_found() {
    let tb = testbed(2);
    let _served = serve(&tb, 0, "64MiB");
    let dir = netdam_tests::temp_dir(&format!("afxdp-client-{}", tb.prefix));
    let (input, output) = (dir.path().join("in.bin"), dir.path().join("out.bin"));
    // An odd length: the last request is short.
    let data: Vec<u8> = (0..(16 << 20) - 7).map(|_| rand_byte()).collect();
    std::fs::write(&input, &data).unwrap();
    let node = tb.hosts[0].ip.to_string();
    let (i, o) = (input.to_str().unwrap(), output.to_str().unwrap());
    let len = data.len().to_string();
    ok(&netdam(
        &tb,
        1,
        &[
            "write", "--afxdp", "--node", &node, "--rkey", "0x1234", "--addr", "4099", "--file", i,
        ],
    ));
    assert!(!xdp_attached(&tb, 1), "the client's program left with the client");
    ok(&netdam(&tb, 1, &afxdp_read(&node, "4099", &len, o)));
    assert!(std::fs::read(&output).unwrap() == data, "the bytes read back differ");
    // Read back over UDP too: the AF_XDP writes reached the node's memory.
    read_file(&tb, 1, &node, "4099", &len, &output);
    assert!(
        std::fs::read(&output).unwrap() == data,
        "the bytes read back over UDP differ"
    );
    let refused = netdam(&tb, 0, &afxdp_read(&tb.hosts[1].ip.to_string(), "0", "1", o));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{err}");
    assert!(err.contains("holds the interface") && err.contains("UDP path"), "{err}");
    assert!(xdp_attached(&tb, 0), "the node's own program is untouched");
    // Without privileges: the reason and the way out.
    let unprivileged = tb
        .command(1, "setpriv")
        .unwrap()
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(netdam_bin())
        .args(afxdp_read(&node, "0", "1", "/dev/null"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&unprivileged.stderr);
    assert!(!unprivileged.status.success(), "{err}");
    assert!(err.contains("needs root") && err.contains("leave out --afxdp"), "{err}");
}

/// `netdam read --afxdp` of `len` bytes at `addr` of region 0x1234 on `node` into `out`.
fn afxdp_read<'a>(node: &'a str, addr: &'a str, len: &'a str, out: &'a str) -> [&'a str; 12] {
    [
        "read", "--afxdp", "--node", node, "--rkey", "0x1234", "--addr", addr, "--len", len, "--out", out,
    ]
}

/// SIGTERM (as Ctrl-C's SIGINT) in the middle of a lab run removes its
/// testbed, its nodes and its members' processes, and the run says so and
/// exits 128 + 15.
#[test]
fn an_interrupted_lab_run_removes_its_testbed_and_processes() {
    require_root();
    let prefix = unique_prefix();
    let out = netdam_tests::temp_dir(&format!("interrupt-{prefix}"));
    let mut run = std::process::Command::new(netdam_tests::netdam_lab_bin())
        .args(["testbed", "allreduce", "--nodes", "2", "--prefix", &prefix])
        .args(["--min-bytes", "16MiB", "--max-bytes", "16MiB", "--iters", "100000"])
        .arg("--out")
        .arg(out.path())
        .env("NETDAM_BIN", netdam_bin())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("netdam-lab testbed allreduce");
    // The processes in a namespace, by the (device, inode) of its file.
    let ns_of = |name: String| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(std::path::Path::new("/run/netns").join(name))
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    let processes_in = |ns: (u64, u64)| {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| std::fs::metadata(e.path().join("ns/net")).is_ok_and(|m| (m.dev(), m.ino()) == ns))
            .count()
    };
    // Running once host 0 has its node and its member (netdam serve, netdam allreduce).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let hosts = loop {
        if let (Some(h0), Some(h1)) = (ns_of(format!("{prefix}0")), ns_of(format!("{prefix}1"))) {
            if processes_in(h0) >= 2 {
                break [h0, h1];
            }
        }
        assert!(
            std::time::Instant::now() < deadline && run.try_wait().unwrap().is_none(),
            "the run never had host 0 serving and reducing"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(1));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(run.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = run.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = run.kill();
            Testbed::down(&prefix).unwrap();
            panic!("netdam-lab still running 30 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let left: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    if !left.is_empty() {
        Testbed::down(&prefix).unwrap();
    }
    assert!(left.is_empty(), "namespaces left: {left:?}\n{stderr}");
    for ns in hosts {
        assert_eq!(processes_in(ns), 0, "processes left in a host\n{stderr}");
    }
    assert!(!std::path::Path::new("/sys/fs/bpf/netdam-testbed")
        .join(&prefix)
        .exists());
    assert_eq!(status.code(), Some(128 + 15), "{stderr}");
    assert!(
        stderr.contains("netdam-lab: SIGTERM: removing the testbeds"),
        "{stderr}"
    );
}
