//! Tier 3, operations (issue 15 item 4): `serve --config` with
//! `--metrics` on the testbed, scraped from inside the node's namespace and
//! parsed line by line; a reload (SIGHUP) that swaps regions, keys and peers
//! while the memory stays; the systemd unit checked by `systemd-analyze
//! verify`, and serve run with only the capabilities the unit leaves it.

use std::{
    collections::BTreeMap,
    io::{Read as _, Write as _},
    net::TcpStream,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use netdam_lab::testbed::{Served, Testbed};
use netdam_tests::{netdam, netdam_bin, ok, require_root, unique_prefix};
use nix::sys::signal::Signal;

const METRICS: &str = "127.0.0.1:9464";

/// A directory for the test's files, removed at the end (also on failure).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("netdam-ops-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn testbed(nodes: usize) -> Testbed {
    require_root();
    Testbed::up(&unique_prefix(), nodes, 1500).expect("testbed up")
}

/// `netdam serve --config FILE` in host `i` (the testbed adds --iface and --pin-dir).
fn serve_config(tb: &Testbed, i: usize, netdam: &Path, config: &Path) -> Served {
    let args = vec!["--config".to_string(), config.display().to_string()];
    tb.serve_with_env(i, netdam, &args, &[("RUST_LOG", "info")])
        .expect("netdam serve --config")
}

/// An HTTP GET of `path` from inside host `i`'s namespace: the status line and the body.
fn get(tb: &Testbed, i: usize, path: &str) -> (String, String) {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {METRICS}\r\n\r\n");
    let reply = tb
        .in_host(i, move || {
            let mut s = TcpStream::connect(METRICS).expect("connect to the metrics endpoint");
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.write_all(request.as_bytes()).unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).expect("read the answer");
            out
        })
        .unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.lines().next().unwrap().to_string();
    if status.contains(" 200 ") {
        assert!(
            head.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
            "{head}"
        );
        assert!(head.contains(&format!("Content-Length: {}", body.len())), "{head}");
    }
    (status, body.to_string())
}

/// Samples by `name{label="value",...}` (labels sorted), from a text
/// exposition that is checked line by line: every family has one HELP and
/// one TYPE (counter or gauge) before its samples, names and labels are
/// well formed, values are numbers, counters end in _total.
fn parse_exposition(text: &str) -> BTreeMap<String, f64> {
    fn is_name(s: &str) -> bool {
        let mut c = s.chars();
        c.next()
            .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
            && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
    }
    let mut help: BTreeMap<String, String> = BTreeMap::new();
    let mut kind: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = BTreeMap::new();
    assert!(text.ends_with('\n'), "the exposition ends with a newline");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, doc) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("HELP without text: {line}"));
            assert!(is_name(name) && !doc.is_empty(), "{line}");
            assert!(
                help.insert(name.to_string(), doc.to_string()).is_none(),
                "HELP twice: {line}"
            );
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, k) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("TYPE without a type: {line}"));
            assert!(matches!(k, "counter" | "gauge"), "{line}");
            assert!(help.contains_key(name), "TYPE before HELP: {line}");
            assert!(
                kind.insert(name.to_string(), k.to_string()).is_none(),
                "TYPE twice: {line}"
            );
        } else {
            assert!(!line.starts_with('#') && !line.is_empty(), "{line}");
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("not a number: {line}"));
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (
                    n,
                    l.strip_suffix('}').unwrap_or_else(|| panic!("unclosed labels: {line}")),
                ),
                None => (series, ""),
            };
            assert!(is_name(name), "{line}");
            let k = kind
                .get(name)
                .unwrap_or_else(|| panic!("a sample before its TYPE: {line}"));
            assert_eq!(k == "counter", name.ends_with("_total"), "{line}");
            let mut pairs = Vec::new();
            let mut rest = labels;
            while !rest.is_empty() {
                let (key, after) = rest.split_once("=\"").unwrap_or_else(|| panic!("bad label: {line}"));
                assert!(is_name(key), "{line}");
                // The value runs to the first quote not escaped.
                let mut value = String::new();
                let mut chars = after.char_indices();
                let end = loop {
                    match chars.next() {
                        Some((_, '\\')) => match chars.next() {
                            Some((_, 'n')) => value.push('\n'),
                            Some((_, c @ ('\\' | '"'))) => value.push(c),
                            other => panic!("bad escape {other:?}: {line}"),
                        },
                        Some((i, '"')) => break i,
                        Some((_, c)) => value.push(c),
                        None => panic!("unterminated label value: {line}"),
                    }
                };
                pairs.push(format!("{key}=\"{value}\""));
                rest = after[end + 1..].strip_prefix(',').unwrap_or(&after[end + 1..]);
            }
            pairs.sort();
            let key = format!("{name}{{{}}}", pairs.join(","));
            assert!(samples.insert(key, value).is_none(), "a series twice: {line}");
        }
    }
    assert!(!samples.is_empty());
    samples
}

/// The value of `name` with the iface label eth0 and `labels` (sorted, e.g. `op="NOP",status="OK"`).
fn sample(m: &BTreeMap<String, f64>, name: &str, labels: &str) -> f64 {
    let mut pairs: Vec<String> = labels.split(',').filter(|l| !l.is_empty()).map(String::from).collect();
    pairs.push("iface=\"eth0\"".to_string());
    pairs.sort();
    let key = format!("{name}{{{}}}", pairs.join(","));
    *m.get(&key).unwrap_or_else(|| panic!("no {key} in the scrape"))
}

fn scrape(tb: &Testbed, i: usize) -> BTreeMap<String, f64> {
    let (status, body) = get(tb, i, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    parse_exposition(&body)
}

fn config_text(peers: &[&str], regions: &[(&str, &str, &str)], extra: &str) -> String {
    let peers: Vec<String> = peers.iter().map(|p| format!("\"{p}\"")).collect();
    let mut t = format!(
        "iface = \"eth0\"\nmode = \"native\"\nmem-size = \"4MiB\"\nmetrics = \"{METRICS}\"\npeers = [{}]\n{extra}\n",
        peers.join(", ")
    );
    for (key, base, size) in regions {
        t.push_str(&format!(
            "[[region]]\nkey = \"{key}\"\nbase = \"{base}\"\nsize = \"{size}\"\nperms = \"rwam\"\n"
        ));
    }
    t
}

#[test]
fn metrics_are_served_inside_the_namespace_and_count_requests() {
    let tb = testbed(2);
    let scratch = Scratch::new("metrics");
    let peer = tb.hosts[1].ip.to_string();
    let config = scratch.file("netdam.toml", &config_text(&[&peer], &[("0x1234", "0", "1MiB")], ""));
    // A flag wins over the file's mem-size (4MiB).
    let args = ["--config", config.to_str().unwrap(), "--mem-size", "8MiB"].map(String::from);
    let served = tb
        .serve_with_env(0, &netdam_bin(), &args, &[("RUST_LOG", "info")])
        .expect("netdam serve --config");
    assert!(
        served.log().contains(&format!("metrics at http://{METRICS}/metrics")),
        "{}",
        served.log()
    );

    let before = scrape(&tb, 0);
    assert_eq!(sample(&before, "netdam_up", ""), 1.0);
    assert_eq!(sample(&before, "netdam_memory_bytes", ""), (8 << 20) as f64);
    assert_eq!(sample(&before, "netdam_regions", ""), 1.0);
    assert_eq!(sample(&before, "netdam_peers", ""), 1.0);
    // Every event of `netdam stats` is a counter.
    for e in netdam_common::counters::Event::ALL {
        sample(&before, &format!("netdam_{}_total", e.name()), "");
    }
    let nop = "op=\"NOP\",status=\"OK\"";
    let write = "op=\"WRITE\",status=\"OK\"";
    let bad_key = "op=\"READ\",status=\"BAD_KEY\"";

    let node = tb.hosts[0].ip.to_string();
    ok(&netdam(&tb, 1, &["ping", "--node", &node, "--count", "3"]));
    let f = scratch.file("bytes", "sixteen bytes!!\n");
    ok(&netdam(
        &tb,
        1,
        &[
            "write",
            "--node",
            &node,
            "--rkey",
            "0x1234",
            "--addr",
            "0",
            "--file",
            f.to_str().unwrap(),
        ],
    ));
    let out = scratch.0.join("out");
    let refused = netdam(
        &tb,
        1,
        &[
            "read",
            "--node",
            &node,
            "--rkey",
            "0x9",
            "--addr",
            "0",
            "--len",
            "16",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(
        refused.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let after = scrape(&tb, 0);
    assert_eq!(
        sample(&after, "netdam_requests_total", nop) - sample(&before, "netdam_requests_total", nop),
        3.0
    );
    assert_eq!(
        sample(&after, "netdam_requests_total", write) - sample(&before, "netdam_requests_total", write),
        1.0
    );
    assert_eq!(
        sample(&after, "netdam_requests_total", bad_key) - sample(&before, "netdam_requests_total", bad_key),
        1.0
    );
    assert_eq!(
        sample(&after, "netdam_peers_resolved", ""),
        1.0,
        "the peer answered ARP"
    );

    // Only GET /metrics.
    assert_eq!(get(&tb, 0, "/").0, "HTTP/1.1 404 Not Found");
    assert!(served.stop());
}

/// Polls `served`'s log until `line` appears `times` times (10 s at most).
fn wait_for_log(served: &Served, line: &str, times: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = served.log();
        if log.matches(line).count() >= times {
            return log;
        }
        assert!(Instant::now() < deadline, "no {line:?} (x{times}) in the log:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_reload_swaps_regions_keys_and_peers_and_keeps_the_memory() {
    let tb = testbed(3);
    let scratch = Scratch::new("reload");
    let node = tb.hosts[0].ip.to_string();
    let (peer1, peer2) = (tb.hosts[1].ip.to_string(), tb.hosts[2].ip.to_string());
    let _forget = ForgetKeys(netdam_user::controller::keys::keys_path(&tb.hosts[0].pin_dir));
    // A region with a random key stays as it is: the reload keeps its key.
    const KEPT: (&str, &str, &str) = ("random", "128KiB", "64KiB");
    let config = scratch.file(
        "netdam.toml",
        &config_text(&[&peer1], &[("0x1111", "0", "64KiB"), KEPT], ""),
    );
    let served = serve_config(&tb, 0, &netdam_bin(), &config);
    let kept_key = format!("{:#x}", random_key(&tb.hosts[0].pin_dir, 128 << 10));

    let data: Vec<u8> = (0..65536u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let data_file = scratch.0.join("data");
    std::fs::write(&data_file, &data).unwrap();
    let data_arg = data_file.to_str().unwrap();
    ok(&netdam(
        &tb,
        1,
        &[
            "write", "--node", &node, "--rkey", "0x1111", "--addr", "0", "--file", data_arg,
        ],
    ));
    let read = |from: usize, rkey: &str, addr: &str, len: usize| {
        let out = scratch.0.join(format!("read-{from}-{rkey}-{addr}"));
        let len = len.to_string();
        let o = netdam(
            &tb,
            from,
            &[
                "read",
                "--node",
                &node,
                "--rkey",
                rkey,
                "--addr",
                addr,
                "--len",
                &len,
                "--out",
                out.to_str().unwrap(),
                "--timeout-ms",
                "100",
                "--retries",
                "3",
            ],
        );
        (o, std::fs::read(&out).unwrap_or_default())
    };
    let (o, _) = read(2, "0x1111", "0", 16);
    assert_eq!(o.status.code(), Some(3), "host 2 is no peer yet: no answer");

    // Key 0x1111 becomes 0x2222 over the same bytes, a region and a peer are added.
    let swapped = config_text(
        &[&peer1, &peer2],
        &[("0x2222", "0", "64KiB"), ("0x3333", "64KiB", "64KiB"), KEPT],
        "",
    );
    std::fs::write(&config, swapped).unwrap();
    served.signal(Signal::SIGHUP);
    let log = wait_for_log(&served, "reloaded ", 1);
    assert!(
        log.contains(&format!(
            " 3 region(s) 0x2222:0x0+0x10000:rwam 0x3333:0x10000+0x10000:rwam {kept_key}:0x20000+0x10000:rwam, \
             2 peer(s)"
        )),
        "{log}"
    );
    assert_eq!(format!("{:#x}", random_key(&tb.hosts[0].pin_dir, 128 << 10)), kept_key);
    let (o, _) = read(1, &kept_key, "128KiB", 16);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (o, got) = read(1, "0x2222", "0", data.len());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(got == data, "the memory's bytes are those written before the reload");
    let (o, _) = read(1, "0x1111", "0", 16);
    assert_eq!(o.status.code(), Some(4), "the old key is refused");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("BAD_KEY"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The new peer reaches the new region.
    ok(&netdam(
        &tb,
        2,
        &[
            "write", "--node", &node, "--rkey", "0x3333", "--addr", "64KiB", "--file", data_arg,
        ],
    ));
    let (o, got) = read(2, "0x3333", "64KiB", data.len());
    assert!(
        o.status.success() && got == data,
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // An invalid file, then one that needs a restart: refused, the node serves as before.
    std::fs::write(&config, "iface = \"eth0\"\nbad-key = 1\n").unwrap();
    served.signal(Signal::SIGHUP);
    let log = wait_for_log(&served, "reload refused, still serving as before", 1);
    assert!(
        log.contains(&format!(
            "{}: unknown key `bad-key`; the keys are iface,",
            config.display()
        )),
        "{log}"
    );
    let bigger = config_text(&[&peer1, &peer2], &[("0x2222", "0", "64KiB")], "").replace("4MiB", "8MiB");
    std::fs::write(&config, bigger).unwrap();
    served.signal(Signal::SIGHUP);
    let log = wait_for_log(&served, "reload refused, still serving as before", 2);
    assert!(
        log.contains("changes what a running node cannot change (mem-size 4194304 -> 8388608): restart serve"),
        "{log}"
    );
    let (o, got) = read(2, "0x3333", "64KiB", 16);
    assert!(
        o.status.success() && got == data[..16],
        "the reloaded config still serves"
    );
    let m = scrape(&tb, 0);
    assert_eq!(sample(&m, "netdam_config_reloads_total", ""), 1.0);
    assert_eq!(sample(&m, "netdam_config_reload_failures_total", ""), 2.0);
    assert_eq!(sample(&m, "netdam_regions", ""), 3.0);
    assert_eq!(sample(&m, "netdam_peers", ""), 2.0);
    assert!(served.stop(), "a clean stop after the reloads");
}

#[test]
fn a_bad_config_file_stops_serve_with_the_key_and_the_file() {
    let scratch = Scratch::new("bad");
    let config = scratch.file("netdam.toml", "iface = \"lo\"\nmem_size = \"64MiB\"\n");
    let o = std::process::Command::new(netdam_bin())
        .args(["serve", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).lines().last().unwrap(),
        format!(
            "error: {}: unknown key `mem_size`, did you mean `mem-size`?; the keys are iface, port, mem-size, mode, \
             ip, peers, region, verify-csum, bad-key-limit, window-sources, window-per-source, window-idle, pin-dir, \
             metrics",
            config.display()
        )
    );
    let o = std::process::Command::new(netdam_bin())
        .args(["serve", "--config", "/nonexistent/netdam.toml"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim_end(),
        "error: reading the config file /nonexistent/netdam.toml: No such file or directory (os error 2)"
    );
}

/// What systemd hears from a Type=notify serve (through $NOTIFY_SOCKET, a
/// datagram socket the test plays systemd on): READY=1 once it serves,
/// RELOADING=1 then READY=1 around a reload, STOPPING=1 when it detaches.
#[test]
fn systemd_hears_ready_reloading_and_stopping() {
    let tb = testbed(1);
    let scratch = Scratch::new("notify");
    let socket_path = scratch.0.join("notify");
    let systemd = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    systemd.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let hear = || {
        let mut buf = [0u8; 512];
        let n = systemd.recv(&mut buf).expect("a notification");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let config = scratch.file("netdam.toml", &config_text(&[], &[("0x1234", "0", "64KiB")], ""));
    let args = ["--config".to_string(), config.display().to_string()];
    let served = tb
        .serve_with_env(
            0,
            &netdam_bin(),
            &args,
            &[("RUST_LOG", "info"), ("NOTIFY_SOCKET", socket_path.to_str().unwrap())],
        )
        .expect("netdam serve");
    assert_eq!(hear(), "READY=1\nSTATUS=serving NetDAM on eth0 (native XDP)");
    served.signal(Signal::SIGHUP);
    assert_eq!(hear(), "RELOADING=1");
    assert_eq!(hear(), "READY=1\nSTATUS=serving NetDAM on eth0");
    assert!(served.stop());
    assert_eq!(hear(), "STOPPING=1");
}

/// `serve --check` prints the settings (flags over the file, defaults filled
/// in) and exits without loading; what loading would refuse is an error.
#[test]
fn serve_check_prints_the_settings_or_what_is_wrong() {
    let scratch = Scratch::new("check");
    let config = scratch.file(
        "netdam.toml",
        "iface = \"nonexistent0\"\nmem-size = \"1MiB\"\n[[region]]\nkey = 7\nbase = 0\nsize = 4096\nperms = \"rw\"\n",
    );
    let check = |extra: &[&str]| {
        std::process::Command::new(netdam_bin())
            .args(["serve", "--config", config.to_str().unwrap(), "--check"])
            .args(extra)
            .output()
            .unwrap()
    };
    let o = check(&[]);
    let text = ok(&o);
    assert!(
        text.contains("iface = \"nonexistent0\"\n") && text.contains("window-sources = 1024\n"),
        "{text}"
    );
    assert!(
        text.contains("[[region]]\nbase = 0\nkey = \"0x7\"\nperms = \"rw\"\nsize = 4096\n"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&ok(&check(&["--json", "--port", "5000"]))).unwrap();
    assert_eq!(
        (json["port"].as_i64(), json["mem-size"].as_i64()),
        (Some(5000), Some(1 << 20))
    );
    let o = check(&["--mem-size", "64KiB", "--region", "7:64KiB:1:r"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim_end(),
        "error: region 0x7 [0x10000, +0x1) does not lie inside the 65536-byte NetDAM memory"
    );
}

/// dist/netdam.service with ExecStart pointing at `netdam`, in `dir`.
fn unit_for(dir: &Path, netdam: &Path) -> PathBuf {
    let unit = include_str!("../../dist/netdam.service").replace("/usr/local/bin/netdam", netdam.to_str().unwrap());
    let path = dir.join("netdam.service");
    std::fs::write(&path, unit).unwrap();
    path
}

/// `systemd-analyze verify` of a unit: success, and what it said about
/// this unit (it may also warn about the host's own units).
fn verify(unit: &Path) -> (bool, String) {
    let o = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(unit)
        .output()
        .expect("systemd-analyze (apt-get install systemd)");
    let name = unit.file_name().unwrap().to_str().unwrap();
    let said: Vec<&str> = std::str::from_utf8(&o.stderr)
        .unwrap()
        .lines()
        .filter(|l| l.contains(name))
        .collect();
    (o.status.success(), said.join("\n"))
}

/// The unit passes `systemd-analyze verify` without a warning (it only
/// checks the file: systemd need not be PID 1, and here it is not).
#[test]
fn the_systemd_unit_verifies() {
    let scratch = Scratch::new("unit");
    let (passed, said) = verify(&unit_for(&scratch.0, &netdam_bin()));
    assert!(passed && said.is_empty(), "{said}");
    // The check notices a mistake: a directive misspelled, a binary missing.
    let typo = scratch.file(
        "typo.service",
        &std::fs::read_to_string(scratch.0.join("netdam.service"))
            .unwrap()
            .replace("Restart=on-failure", "Restart=on-failure\nRestartt=always"),
    );
    assert!(verify(&typo).1.contains("Unknown key 'Restartt'"));
    let (passed, said) = verify(&unit_for(&scratch.0, Path::new("/nonexistent/netdam")));
    assert!(!passed && said.contains("is not executable"), "{said}");
}

/// A wrapper that runs netdam with only `caps` (names as the unit writes
/// them) in its bounding set: setpriv lowers this root's bounding set, so
/// the netdam it runs has no other capability.
fn netdam_with_caps(scratch: &Scratch, name: &str, caps: &[&str]) -> PathBuf {
    let caps: Vec<String> = caps
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let wrapper = scratch.file(
        name,
        &format!(
            "#!/bin/sh\nexec setpriv --bounding-set=-all,{} --inh-caps=-all {} \"$@\"\n",
            caps.join(","),
            netdam_bin().display()
        ),
    );
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    wrapper
}

/// serve starts on fresh pins with a random key, serves, reloads and stops
/// with only the capabilities the unit's CapabilityBoundingSet leaves it;
/// without CAP_PERFMON it cannot start (the set is no larger than needed).
#[test]
fn serve_needs_no_capability_beyond_the_units() {
    let tb = testbed(2);
    let scratch = Scratch::new("caps");
    let _forget = ForgetKeys(netdam_user::controller::keys::keys_path(&tb.hosts[0].pin_dir));
    let unit = include_str!("../../dist/netdam.service");
    let caps: Vec<&str> = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit bounds its capabilities")
        .split_whitespace()
        .collect();
    let peer = tb.hosts[1].ip.to_string();
    let config = scratch.file("netdam.toml", &config_text(&[&peer], &[("random", "0", "64KiB")], ""));
    let fewer: Vec<&str> = caps.iter().copied().filter(|c| *c != "CAP_PERFMON").collect();
    let refused = tb.serve(
        0,
        &netdam_with_caps(&scratch, "netdam-fewer", &fewer),
        &["--config".to_string(), config.display().to_string()],
    );
    assert!(refused.is_err(), "serve started without CAP_PERFMON");

    let served = serve_config(&tb, 0, &netdam_with_caps(&scratch, "netdam", &caps), &config);
    let status = std::fs::read_to_string(format!("/proc/{}/status", served.pid())).unwrap();
    let bounding = status.lines().find_map(|l| l.strip_prefix("CapBnd:")).unwrap().trim();
    // CAP_NET_ADMIN (12), CAP_PERFMON (38), CAP_BPF (39).
    assert_eq!(u64::from_str_radix(bounding, 16).unwrap(), 1 << 12 | 1 << 38 | 1 << 39);
    let node = tb.hosts[0].ip.to_string();
    ok(&netdam(&tb, 1, &["ping", "--node", &node, "--count", "1"]));
    std::fs::write(&config, config_text(&[&peer], &[("random", "64KiB", "64KiB")], "")).unwrap();
    served.signal(Signal::SIGHUP);
    wait_for_log(&served, "reloaded ", 1);
    assert_eq!(
        sample(&scrape(&tb, 0), "netdam_requests_total", "op=\"NOP\",status=\"OK\""),
        1.0
    );
    assert!(served.stop(), "a clean stop: detached and the kernel settings restored");
}

/// The random key kept for the region at `base` in the keys file of the node pinned in `pin_dir`.
fn random_key(pin_dir: &Path, base: u64) -> u64 {
    let path = netdam_user::controller::keys::keys_path(pin_dir);
    let stored: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    stored
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["base"] == base)
        .unwrap_or_else(|| panic!("no key for base {base:#x} in {}", path.display()))["rkey"]
        .as_u64()
        .unwrap()
}

/// Removes a node's random keys file (kept in /run, which the testbed's
/// teardown does not touch), also when the test fails.
struct ForgetKeys(PathBuf);

impl Drop for ForgetKeys {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
