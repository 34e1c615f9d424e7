//! `netdam doctor` on the real kernel: the exact lines it prints for a veth
//! whose peer cannot receive XDP_TX frames, without an XDP program and with
//! GRO (and that this is true: no answer arrives), for the same veth once
//! the peer runs an XDP program, for a jumbo MTU and a queue mismatch on veth, for a missing
//! bpffs, for a peer in a namespace with no name, and that `serve` refuses
//! with the same words.

use std::{
    ffi::OsStr,
    fs::File,
    os::unix::process::CommandExt,
    process::{Command, Output, Stdio},
    time::Duration,
};

use aya::{
    programs::{Xdp, XdpMode},
    Ebpf,
};
use netdam_tests::{ip, netdam_bin, require_root, unique_prefix};
use nix::sched::{setns, CloneFlags};

const NODE_IP: &str = "198.19.0.1";
const PEER_IP: &str = "198.19.0.2";

/// A veth pair across two namespaces: `eth0` in `node`, `p0` in `peer`.
/// Removed on drop (also on panic).
struct Pair {
    node: String,
    peer: String,
    pin_dir: std::path::PathBuf,
}

impl Pair {
    /// `extra_node` and `extra_peer` go to `ip link add` for each end (e.g. queue counts).
    fn new(mtu: u32, extra_node: &[&str], extra_peer: &[&str]) -> Pair {
        require_root();
        let prefix = unique_prefix();
        let pair = Pair {
            node: format!("{prefix}dn"),
            peer: format!("{prefix}dp"),
            pin_dir: format!("/sys/fs/bpf/netdam-test-{prefix}-doctor").into(),
        };
        for ns in [&pair.node, &pair.peer] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
            ip(&["netns", "add", ns]);
        }
        let mtu = mtu.to_string();
        let mut add = vec!["-n", &pair.node, "link", "add", "eth0", "mtu", &mtu];
        add.extend_from_slice(extra_node);
        add.extend_from_slice(&["type", "veth", "peer", "name", "p0", "netns", &pair.peer, "mtu", &mtu]);
        add.extend_from_slice(extra_peer);
        ip(&add);
        ip(&["-n", &pair.node, "addr", "add", &format!("{NODE_IP}/24"), "dev", "eth0"]);
        ip(&["-n", &pair.peer, "addr", "add", &format!("{PEER_IP}/24"), "dev", "p0"]);
        ip(&["-n", &pair.node, "link", "set", "eth0", "up"]);
        ip(&["-n", &pair.peer, "link", "set", "p0", "up"]);
        pair
    }

    /// `program ARGS` with the network namespace `ns`.
    fn command(ns: &str, program: impl AsRef<OsStr>) -> Command {
        let file = File::open(format!("/run/netns/{ns}")).expect("the test netns");
        let mut cmd = Command::new(program);
        // SAFETY: setns is async-signal-safe; `file` outlives the fork.
        unsafe {
            cmd.pre_exec(move || setns(&file, CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from));
        }
        cmd
    }

    /// `netdam doctor --iface eth0 ARGS` in the node's namespace.
    fn doctor(&self, args: &[&str]) -> Output {
        Pair::command(&self.node, netdam_bin())
            .args(["doctor", "--iface", "eth0"])
            .args(args)
            .output()
            .expect("run netdam doctor")
    }

    /// `netdam serve --iface eth0 ARGS` in the node's namespace, left running.
    fn serve(&self, args: &[&str]) -> std::process::Child {
        Pair::command(&self.node, netdam_bin())
            .args(["serve", "--iface", "eth0", "--pin-dir"])
            .arg(&self.pin_dir)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start netdam serve")
    }

    /// Whether a NOP from the peer gets an answer.
    fn answered(&self) -> bool {
        Pair::command(&self.peer, netdam_bin())
            .args([
                "ping",
                "--node",
                NODE_IP,
                "--count",
                "1",
                "--timeout-ms",
                "300",
                "--retries",
                "3",
            ])
            .output()
            .expect("run netdam ping")
            .status
            .success()
    }

    /// Runs `f` in a thread inside the peer's namespace.
    fn in_peer<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let file = File::open(format!("/run/netns/{}", self.peer)).expect("the peer netns");
        std::thread::scope(|s| {
            s.spawn(|| {
                setns(&file, CloneFlags::CLONE_NEWNET).expect("setns into the peer");
                f()
            })
            .join()
            .expect("peer thread")
        })
    }

    /// Turns GRO on or off on `p0` (as `ethtool -K p0 gro on|off`; ETHTOOL_SGRO).
    fn set_peer_gro(&self, on: bool) {
        self.in_peer(|| {
            const SIOCETHTOOL: libc::c_ulong = 0x8946;
            const ETHTOOL_SGRO: u32 = 0x2c;
            // struct ethtool_value: cmd, data.
            let mut value = [ETHTOOL_SGRO, on as u32];
            // SAFETY: a zeroed ifreq naming p0 and pointing at `value`, which
            // outlives the ioctl; the socket is closed after it.
            unsafe {
                let mut req: libc::ifreq = std::mem::zeroed();
                for (d, s) in req.ifr_name.iter_mut().zip(b"p0\0") {
                    *d = *s as libc::c_char;
                }
                req.ifr_ifru.ifru_data = value.as_mut_ptr().cast();
                let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
                assert!(fd >= 0, "socket");
                let r = libc::ioctl(fd, SIOCETHTOOL as _, &mut req);
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                assert!(r == 0, "ETHTOOL_SGRO on p0: {err}");
            }
        })
    }

    /// Attaches the pass-through program to `p0`; detached when the
    /// returned object drops. Returns it and the program's id.
    fn attach_peer_pass(&self) -> (Ebpf, u32) {
        self.in_peer(|| {
            let mut ebpf = Ebpf::load(netdam_lab::NETDAM_LAB_XDP).expect("load the lab XDP object");
            let prog: &mut Xdp = ebpf
                .program_mut("netdam_pass")
                .expect("netdam_pass")
                .try_into()
                .expect("an XDP program");
            prog.load().expect("load netdam_pass");
            prog.attach("p0", XdpMode::Driver).expect("attach netdam_pass to p0");
            let id = prog.info().expect("program info").id();
            (ebpf, id)
        })
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.node, &self.peer] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        let _ = netdam_user::controller::pins::unpin(&self.pin_dir);
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The line of `name` (and its fix line, if any) in doctor's table.
fn lines_of(table: &str, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = table.lines().peekable();
    while let Some(l) = lines.next() {
        if l.get(6..).is_some_and(|r| r.starts_with(&format!("{name} "))) {
            out.push(l.to_string());
            if let Some(next) = lines.peek().filter(|n| n.trim_start().starts_with("fix: ")) {
                out.push(next.to_string());
            }
        }
    }
    out
}

/// A fix line of the table.
fn fix_line(fix: &str) -> String {
    format!("{:20}fix: {fix}", "")
}

/// Waits for `serve` to say it serves (or to end); returns its log so far.
fn wait_serving(child: &mut std::process::Child) -> String {
    use std::io::{BufRead, BufReader};
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut log = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            log.push_str(&line);
            log.push('\n');
            if line.contains("serving NetDAM on") {
                let _ = tx.send(log.clone());
            }
        }
        let _ = tx.send(log);
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("serve started or ended")
}

fn stop(mut child: std::process::Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
}

#[test]
fn a_veth_peer_without_xdp_fails_and_really_loses_the_answers() {
    let pair = Pair::new(1500, &[], &[]);
    let no_xdp = |gro: &str| {
        format!(
            "veth peer p0 (namespace {}) runs no XDP program{gro}: veth wakes a peer for XDP_TX frames only when it \
             runs one, so every answer is lost",
            pair.peer
        )
    };
    let fix = format!(
        "ip netns exec {} ip link set dev p0 xdpdrv obj PROG.o sec SECTION (any program that passes frames, attached \
         in native mode)",
        pair.peer
    );
    let out = pair.doctor(&[]);
    assert_eq!(
        lines_of(&stdout(&out), "xdp-tx"),
        vec![format!("fail  xdp-tx        {}", no_xdp("")), fix_line(&fix)],
        "{}",
        stdout(&out)
    );
    assert_eq!(out.status.code(), Some(1), "doctor exits 1 on a fail");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "error: doctor: xdp-tx failed"
    );
    // Every check ran, in order, on a veth.
    let names: Vec<String> = stdout(&out)
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().nth(1).map(String::from))
        .collect();
    assert_eq!(names, netdam_user::doctor::CHECKS);
    // --json says the same.
    let json = pair.doctor(&["--json"]);
    assert_eq!(json.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("doctor --json prints JSON");
    assert_eq!(v["ok"], false);
    let xdp_tx = v["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == "xdp-tx")
        .expect("an xdp-tx check");
    assert_eq!(
        xdp_tx,
        &serde_json::json!({"name": "xdp-tx", "level": "fail", "found": no_xdp(""), "fix": fix})
    );

    // serve refuses, in the same words.
    let refused = pair.serve(&[]).wait_with_output().expect("serve ends");
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains(&format!(
            "error: refusing to serve on eth0, as doctor's check(s) fail:\nxdp-tx: {}; fix: {fix}\n\
             (serve --skip-check NAME serves anyway)",
            no_xdp("")
        )),
        "{err}"
    );

    // The check is right: served anyway, the node answers (XDP_TX) and no answer arrives...
    let mut served = pair.serve(&["--skip-check", "xdp-tx"]);
    let log = wait_serving(&mut served);
    assert!(log.contains("serving NetDAM on eth0 (native XDP)"), "{log}");
    assert!(
        log.contains(&format!(
            "xdp-tx: {}; fix: {fix} (skipped by --skip-check xdp-tx)",
            no_xdp("")
        )),
        "{log}"
    );
    assert!(!pair.answered(), "an answer arrived though the peer runs no XDP");
    // ...not with GRO on the peer either (which carries redirected frames only)...
    pair.set_peer_gro(true);
    let out = pair.doctor(&[]);
    assert_eq!(
        lines_of(&stdout(&out), "xdp-tx"),
        vec![
            format!(
                "fail  xdp-tx        {}",
                no_xdp(" (its GRO carries redirected frames, not XDP_TX ones)")
            ),
            fix_line(&fix)
        ]
    );
    assert!(
        !pair.answered(),
        "an answer arrived though the peer runs no XDP (GRO on)"
    );
    pair.set_peer_gro(false);

    // ...until the peer runs an XDP program: then they arrive, and doctor says ok.
    let (_pass, id) = pair.attach_peer_pass();
    assert!(pair.answered(), "no answer with an XDP program on the peer");
    stop(served);
    let out = pair.doctor(&[]);
    assert_eq!(
        lines_of(&stdout(&out), "xdp-tx"),
        vec![format!(
            "ok    xdp-tx        veth peer p0 (namespace {}) runs XDP program {id}: it receives XDP_TX frames",
            pair.peer
        )]
    );
    assert!(out.status.success(), "{}", stdout(&out));
    let mut served = pair.serve(&[]);
    let log = wait_serving(&mut served);
    assert!(log.contains("serving NetDAM on eth0 (native XDP)"), "{log}");
    stop(served);
}

#[test]
fn mtu_and_queues_on_veth_are_judged_as_the_kernel_does() {
    // A jumbo MTU is above veth's single-buffer limit; netdam's programs are
    // frags-aware and veth has multi-buffer XDP, so it attaches natively.
    let pair = Pair::new(9000, &[], &[]);
    let _pass = pair.attach_peer_pass();
    let out = pair.doctor(&[]);
    assert_eq!(
        lines_of(&stdout(&out), "mtu"),
        vec![
            "ok    mtu           9000, above veth's single-buffer XDP limit of 3506: multi-buffer XDP carries larger \
             frames"
                .to_string()
        ],
        "{}",
        stdout(&out)
    );
    let mut served = pair.serve(&["--mode", "native"]);
    let log = wait_serving(&mut served);
    assert!(log.contains("serving NetDAM on eth0 (native XDP)"), "{log}");
    assert!(pair.answered(), "no answer at MTU 9000");
    stop(served);
    drop(pair);

    // Fewer receive queues than the peer's transmit queues: veth refuses native XDP.
    let pair = Pair::new(
        1500,
        &["numrxqueues", "1", "numtxqueues", "1"],
        &["numrxqueues", "2", "numtxqueues", "2"],
    );
    let _pass = pair.attach_peer_pass();
    let out = pair.doctor(&["--mode", "native"]);
    let table = stdout(&out);
    assert_eq!(
        lines_of(&table, "queues"),
        vec![
            format!(
                "fail  queues        1 receive queue(s), but its peer p0 (namespace {}) transmits on 2: veth runs \
                 native XDP only with at least as many receive queues as the peer has transmit queues",
                pair.peer
            ),
            fix_line(&format!("ip netns exec {} ethtool -L p0 tx 1", pair.peer)),
        ],
        "{table}"
    );
    assert_eq!(
        lines_of(&table, "native-xdp"),
        vec![
            "fail  native-xdp    veth has no native XDP known, and --mode native asks for it".to_string(),
            fix_line("serve --mode skb (generic XDP, slower), or a NIC whose driver has native XDP"),
        ]
    );
    // Right: forced past the checks, the kernel refuses the attach.
    let mut served = pair.serve(&[
        "--mode",
        "native",
        "--skip-check",
        "queues",
        "--skip-check",
        "native-xdp",
    ]);
    let log = wait_serving(&mut served);
    let _ = served.wait();
    assert!(
        log.contains("attaching XDP to eth0 in native mode failed") && log.contains("No space left on device"),
        "{log}"
    );
    // In auto mode serve falls back to generic XDP, which has no queue rule: a warning, no fail.
    let out = pair.doctor(&[]);
    let table = stdout(&out);
    assert_eq!(
        lines_of(&table, "queues"),
        vec!["ok    queues        rx 1 tx 1 combined 0 (maximum 1 1 0); generic XDP has no queue rule".to_string()],
        "{table}"
    );
    assert!(out.status.success(), "{table}");
}

/// `sh -c SCRIPT netdam ARGS` in a mount namespace of its own, in the node's network namespace.
fn netdam_in_private_mounts(pair: &Pair, script: &str, args: &[&str]) -> Output {
    Pair::command(&pair.node, "unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .arg(netdam_bin())
        .args(args)
        .output()
        .expect("run unshare")
}

#[test]
fn a_missing_bpffs_fails_and_serve_refuses() {
    let pair = Pair::new(1500, &[], &[]);
    let _pass = pair.attach_peer_pass();
    // /sys/fs/bpf a tmpfs, in a mount namespace of the test's own (the host's bpffs is untouched).
    let tmpfs = "mount -t tmpfs none /sys/fs/bpf && exec \"$0\" \"$@\"";
    let found = "/sys/fs/bpf is tmpfs, not a bpf filesystem, so the node's maps cannot be pinned there";
    let fix = "mount -t bpf bpf /sys/fs/bpf; or enter only the network namespace (nsenter --net=/run/netns/NS \
               netdam ...) instead of `ip netns exec`; or pass --pin-dir DIR on a bpf filesystem";
    let out = netdam_in_private_mounts(&pair, tmpfs, &["doctor", "--iface", "eth0"]);
    assert_eq!(
        lines_of(&stdout(&out), "bpffs"),
        vec![format!("fail  bpffs         {found}"), fix_line(fix)],
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1));
    let out = netdam_in_private_mounts(&pair, tmpfs, &["serve", "--iface", "eth0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!(
            "error: refusing to serve on eth0, as doctor's check(s) fail:\nbpffs: {found}; fix: {fix}\n"
        )),
        "{err}"
    );

    // The case: `ip netns exec` mounts a fresh /sys, where /sys/fs/bpf is sysfs.
    let out = Command::new("ip")
        .args(["netns", "exec", &pair.node])
        .arg(netdam_bin())
        .args(["doctor", "--iface", "eth0"])
        .output()
        .expect("run ip netns exec");
    assert_eq!(
        lines_of(&stdout(&out), "bpffs"),
        vec![
            "fail  bpffs         /sys/fs/bpf is sysfs, not a bpf filesystem, so the node's maps cannot be pinned \
             there: no bpffs is mounted on it in this mount namespace (`ip netns exec` mounts a fresh /sys, which \
             hides the host's)"
                .to_string(),
            fix_line(fix)
        ],
        "{}",
        stdout(&out)
    );
    // And with --pin-dir on the host's bpffs it passes (nsenter keeps the mounts).
    let out = pair.doctor(&["--pin-dir", &pair.pin_dir.to_string_lossy()]);
    assert_eq!(
        lines_of(&stdout(&out), "bpffs"),
        vec![format!(
            "ok    bpffs         /sys/fs/bpf is a bpf filesystem (pins go to {})",
            pair.pin_dir.display()
        )]
    );
}

/// A network namespace with no name under /run/netns: a sleeping process's
/// own. The process is killed on drop.
struct UnnamedNetns(std::process::Child);

impl UnnamedNetns {
    fn new() -> UnnamedNetns {
        let child = Command::new("unshare")
            .args(["--net", "sleep", "120"])
            .spawn()
            .expect("run unshare");
        let ns = UnnamedNetns(child);
        let inode = |p: String| std::fs::read_link(p).ok();
        let own = inode("/proc/self/ns/net".into());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while inode(format!("/proc/{}/ns/net", ns.pid())) == own {
            assert!(std::time::Instant::now() < deadline, "unshare made no namespace");
            std::thread::sleep(Duration::from_millis(10));
        }
        ns
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for UnnamedNetns {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_veth_peer_in_an_unnamed_namespace_is_a_warning_that_says_so() {
    require_root();
    let pair = Pair::new(1500, &[], &[]);
    let unnamed = UnnamedNetns::new();
    ip(&[
        "-n",
        &pair.node,
        "link",
        "add",
        "eth1",
        "type",
        "veth",
        "peer",
        "name",
        "p1",
        "netns",
        &unnamed.pid(),
    ]);
    ip(&["-n", &pair.node, "link", "set", "eth1", "up"]);
    let out = Pair::command(&pair.node, netdam_bin())
        .args(["doctor", "--iface", "eth1"])
        .output()
        .expect("run netdam doctor");
    // p1 is the second link of its namespace (after lo); the namespace the
    // second the node's namespace has an id for (after the pair's peer's).
    assert_eq!(
        lines_of(&stdout(&out), "xdp-tx"),
        vec![
            "warn  xdp-tx        its peer (ifindex 2) is in a network namespace with no name under /run/netns \
             (nsid 1): cannot check that it runs an XDP program; veth delivers XDP_TX frames (every answer) only \
             to a peer that does"
                .to_string(),
            fix_line(
                "in the peer's namespace: ip link set dev PEER xdpdrv obj PROG.o sec SECTION (any program that \
                 passes frames, attached in native mode)"
            ),
        ],
        "{}",
        stdout(&out)
    );
    assert!(out.status.success(), "a warning is no failure: {}", stdout(&out));
}
