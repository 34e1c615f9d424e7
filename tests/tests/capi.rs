//! Tier 3: libnetdam, the C API (netdam-capi/include/netdam.h), used from C.
//! tests/c/capi.c is compiled here with `cc -std=c99 -Wall -Wextra -Werror`
//! against the header and target/release/libnetdam.so, and runs inside the
//! testbed's hosts against nodes that `netdam serve` there: the node's
//! memory through the mmap, the client ops, the all-reduce with one
//! process per host (checked bit for bit against `chain::ring_result`),
//! and every error code with its message.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::OnceLock,
};

use netdam::{error::Status, DTYPES, OPS};
use netdam_common::{
    chain::{ring_chunk_elems, ring_result},
    wire::{Alu, Dtype},
};
use netdam_lab::testbed::{Served, Testbed};
use netdam_tests::{netdam_bin, require_root, temp_dir, unique_prefix};
use netdam_user::collective::{inputs::member_input, ring::RingPlan, staged};

/// Region of every node: all of its memory, READ, WRITE and ATOMIC.
const RKEY: u32 = 0x1234;
const MEM: u64 = 4 << 20;
/// The group's scratch area: the sync area at 0, then input, output and cell parts of 21,824 bytes.
const SCRATCH_LEN: u64 = 64 << 10;
/// Where netdam_sync_restart starts the all-reduce test's rings (one past it).
const RESTART_AT: u64 = 1000;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn header_dir() -> PathBuf {
    root().join("netdam-capi/include")
}

fn run(c: &mut Command) -> Output {
    c.output().unwrap_or_else(|e| panic!("run {c:?}: {e}"))
}

fn succeeded(c: &mut Command) -> String {
    let o = run(c);
    assert!(
        o.status.success(),
        "{c:?} failed ({}):\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("UTF-8 output")
}

/// tests/c/capi.c, compiled once per test process, into cargo's directory
/// for integration tests' files (a static is never dropped: a temporary
/// directory would be left behind).
fn capi() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let lib = netdam_bin().with_file_name("libnetdam.so");
        assert!(
            lib.exists(),
            "{} is missing: build it with `cargo xtask build` (or run `cargo xtask test`)",
            lib.display()
        );
        let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi");
        let libdir = lib.parent().expect("the library's directory").to_path_buf();
        succeeded(
            Command::new("cc")
                .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
                .arg(header_dir())
                .arg(root().join("tests/c/capi.c"))
                .arg(&lib)
                .arg(format!("-Wl,-rpath,{}", libdir.display()))
                .arg("-o")
                .arg(&exe),
        );
        exe
    })
}

fn serve(tb: &Testbed, i: usize) -> Served {
    let mut args: Vec<String> = ["--mem-size", "4MiB", "--mode", "native", "--region"]
        .map(String::from)
        .to_vec();
    args.push(format!("{RKEY:#x}:0:4MiB:rwa"));
    for h in &tb.hosts {
        args.extend(["--peer".to_string(), h.ip.to_string()]);
    }
    tb.serve(i, &netdam_bin(), &args).expect("netdam serve")
}

fn testbed(n: usize) -> (Testbed, Vec<Served>) {
    require_root();
    let tb = Testbed::up(&unique_prefix(), n, 1500).expect("testbed up");
    let served = (0..n).map(|i| serve(&tb, i)).collect();
    (tb, served)
}

/// `capi ARGS` in testbed host `i`.
fn capi_in(tb: &Testbed, i: usize, args: &[String]) -> Command {
    let mut c = tb.command(i, capi()).expect("a command in the host's namespace");
    c.args(args).env_remove("RUST_LOG");
    c
}

fn strings(args: &[&dyn std::fmt::Display]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

#[test]
fn the_header_compiles_as_c_and_cpp_and_agrees_with_the_library() {
    let header = header_dir().join("netdam.h");
    succeeded(
        Command::new("c++")
            .args(["-fsyntax-only", "-x", "c++", "-Wall", "-Wextra", "-Werror", "-pedantic"])
            .arg(&header),
    );
    let out = succeeded(Command::new(capi()).arg("consts"));
    let printed: HashMap<&str, &str> = out.lines().filter_map(|l| l.split_once('=')).collect();
    let mut expected: Vec<(String, String)> = vec![("NETDAM_API_VERSION".into(), netdam::API_VERSION.to_string())];
    expected.extend(
        Status::ALL
            .iter()
            .map(|s| (s.name().to_string(), (*s as i32).to_string())),
    );
    expected.extend(DTYPES.iter().map(|(n, d)| (n.to_string(), (*d as u8).to_string())));
    expected.extend(OPS.iter().map(|(n, a)| (n.to_string(), (*a as u8).to_string())));
    use netdam::{
        client::netdam_client_config as Client, group::netdam_group_config as Group,
        settings::netdam_settings as Settings,
    };
    use std::mem::{offset_of, size_of};
    for (name, value) in [
        ("sizeof(netdam_client_config)", size_of::<Client>()),
        (
            "offsetof(netdam_client_config,timeout_ms)",
            offset_of!(Client, timeout_ms),
        ),
        ("offsetof(netdam_client_config,retries)", offset_of!(Client, retries)),
        ("offsetof(netdam_client_config,mtu)", offset_of!(Client, mtu)),
        ("offsetof(netdam_client_config,window)", offset_of!(Client, window)),
        ("offsetof(netdam_client_config,streams)", offset_of!(Client, streams)),
        ("offsetof(netdam_client_config,afxdp)", offset_of!(Client, afxdp)),
        ("sizeof(netdam_group_config)", size_of::<Group>()),
        ("offsetof(netdam_group_config,rkey)", offset_of!(Group, rkey)),
        (
            "offsetof(netdam_group_config,scratch_addr)",
            offset_of!(Group, scratch_addr),
        ),
        (
            "offsetof(netdam_group_config,scratch_len)",
            offset_of!(Group, scratch_len),
        ),
        ("offsetof(netdam_group_config,mtu)", offset_of!(Group, mtu)),
        (
            "offsetof(netdam_group_config,timeout_ms)",
            offset_of!(Group, timeout_ms),
        ),
        ("offsetof(netdam_group_config,retries)", offset_of!(Group, retries)),
        (
            "offsetof(netdam_group_config,patience_ms)",
            offset_of!(Group, patience_ms),
        ),
        ("sizeof(netdam_settings)", size_of::<Settings>()),
        ("offsetof(netdam_settings,group)", offset_of!(Settings, group)),
        ("offsetof(netdam_settings,min_bytes)", offset_of!(Settings, min_bytes)),
    ] {
        expected.push((name.into(), value.to_string()));
    }
    expected.push(("version".into(), env!("CARGO_PKG_VERSION").into()));
    for (name, value) in &expected {
        assert_eq!(printed.get(name.as_str()), Some(&value.as_str()), "{name} in C:\n{out}");
    }
    // Every status its own text.
    let texts: std::collections::HashSet<&str> = out.lines().filter(|l| l.starts_with("strerror(")).collect();
    assert_eq!(texts.len(), 9, "{out}");
    assert!(out.contains("strerror(-4)=a node refused the request"), "{out}");
}

#[test]
fn settings_from_defaults_a_file_and_the_environment() {
    let dir = temp_dir("capi-settings");
    let file = dir.path().join("netdam.toml");
    std::fs::write(
        &file,
        "iface = \"eth9\"\nrkey = \"0x1234\"\nscratch-len = \"1MiB\"\nmtu = 9000\n",
    )
    .unwrap();
    let settings = |vars: &[(&str, &str)]| {
        let mut c = Command::new(capi());
        c.arg("settings");
        for v in [
            "CONFIG",
            "PIN_DIR",
            "IFACE",
            "RKEY",
            "SCRATCH_ADDR",
            "SCRATCH_LEN",
            "PORT",
            "MTU",
        ] {
            c.env_remove(format!("NETDAM_{v}"));
        }
        for v in ["TIMEOUT_MS", "RETRIES", "PATIENCE_MS", "MIN_BYTES"] {
            c.env_remove(format!("NETDAM_{v}"));
        }
        c.envs(vars.iter().copied());
        succeeded(&mut c)
    };
    assert_eq!(
        settings(&[]),
        "pin_dir= port=4793 rkey=0 scratch_addr=0 scratch_len=4194304 mtu=0 timeout_ms=200 retries=10 \
         patience_ms=30000 min_bytes=0\n"
    );
    let f = file.to_str().unwrap();
    assert_eq!(
        settings(&[
            ("NETDAM_CONFIG", f),
            ("NETDAM_SCRATCH_ADDR", "0x10000"),
            ("NETDAM_MIN_BYTES", "64KiB"),
            ("NETDAM_RETRIES", "3"),
        ]),
        "pin_dir=/sys/fs/bpf/netdam/eth9 port=4793 rkey=4660 scratch_addr=65536 scratch_len=1048576 mtu=9000 \
         timeout_ms=200 retries=3 patience_ms=30000 min_bytes=65536\n"
    );
    assert_eq!(
        settings(&[("NETDAM_CONFIG", f), ("NETDAM_MTU", "50000")]),
        "status=-1 error=NETDAM_MTU=\"50000\" is not valid: give the IP MTU of the group's paths, 100 to 9216 \
         (0: the node's)\n"
    );
    assert!(settings(&[("NETDAM_PIN_DIR", "/sys/fs/bpf/x")])
        .starts_with("status=-1 error=the pin dir /sys/fs/bpf/x is set but no region key: set NETDAM_RKEY"));
}

#[test]
fn c_reads_the_node_memory_and_runs_every_client_op() {
    let (tb, _served) = testbed(2);
    let pin0 = tb.hosts[0].pin_dir.display().to_string();
    // 1,500,000 bytes: 1,042 requests at MTU 1500, which the C config's 3
    // stripes split in 2 (a stripe is at least 512 requests).
    let (addr, len, seed) = (0x1000u64, 1_500_000u64, 17u64);
    let out = succeeded(&mut capi_in(
        &tb,
        0,
        &strings(&[&"node-write", &pin0, &addr, &len, &seed]),
    ));
    assert_eq!(
        out.trim(),
        format!("ipv4={} mtu=1500 mem={MEM} gen=0", u32::from(tb.hosts[0].ip)),
        "what the node says of itself"
    );
    let node0 = tb.hosts[0].ip.to_string();
    let out = succeeded(&mut capi_in(
        &tb,
        1,
        &strings(&[&"client", &node0, &RKEY, &addr, &len, &seed]),
    ));
    assert!(out.ends_with("client ok\n"), "{out}");
    assert_eq!(out.matches("vector ok").count(), 6, "{out}");
    let written = addr + len;
    succeeded(&mut capi_in(
        &tb,
        0,
        &strings(&[&"node-check", &pin0, &written, &len, &(seed + 1)]),
    ));
    // The check can fail: another seed is not what the client wrote.
    let o = run(&mut capi_in(
        &tb,
        0,
        &strings(&[&"node-check", &pin0, &written, &len, &(seed + 2)]),
    ));
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("the client's WRITE is in the mmap"));
}

/// One all-reduce case of the C program: NAME:DTYPE:OP:COUNT:MODE.
struct Case {
    name: String,
    dtype: Dtype,
    alu: Alu,
    count: u64,
    mode: &'static str,
}

impl Case {
    fn arg(&self) -> String {
        format!(
            "{}:{}:{}:{}:{}",
            self.name, self.dtype as u8, self.alu as u8, self.count, self.mode
        )
    }

    /// Rings the library runs: one a piece through the scratch area, one at the addresses.
    fn rings(&self, members: usize) -> u64 {
        let plan = RingPlan::new(members, self.dtype, self.count, 1500).unwrap();
        let part = staged::Scratch {
            rkey: RKEY,
            addr: 0,
            len: SCRATCH_LEN,
        }
        .parts(members)
        .unwrap()
        .len;
        match self.mode {
            "at" => 1,
            _ => self
                .count
                .div_ceil(staged::piece_elems(self.count, &plan, part).unwrap()),
        }
    }
}

#[test]
fn c_allreduce_every_dtype_and_op_in_and_out_of_place_in_pieces_bit_exact() {
    const N: usize = 3;
    let (tb, _served) = testbed(N);
    let dir = temp_dir(&format!("capi-{}", tb.prefix));
    let mut cases = Vec::new();
    for dtype in Dtype::ALL.iter().copied() {
        for alu in Alu::ALL.iter().copied() {
            if dtype == Dtype::F32 && alu.is_bitwise() {
                continue;
            }
            for mode in ["out", "in"] {
                cases.push(Case {
                    name: format!("c{}", cases.len()),
                    dtype,
                    alu,
                    // About 80 KB: several pieces through parts of 21,824 bytes.
                    count: 80_000 / dtype.width() as u64 + 3,
                    mode,
                });
            }
        }
    }
    let e = ring_chunk_elems(1500, N, 4) as u64;
    for (dtype, alu, count, mode) in [
        (Dtype::I32, Alu::Add, 1, "in"),
        (Dtype::I32, Alu::Max, e + 1, "out"),
        (Dtype::F32, Alu::Add, 100_003, "at"),
        (Dtype::U64, Alu::Xor, 5_000, "at"),
    ] {
        cases.push(Case {
            name: format!("c{}", cases.len()),
            dtype,
            alu,
            count,
            mode,
        });
    }
    // Every member's input, from a seed; what the ring must produce.
    let mut expected = Vec::new();
    for (k, case) in cases.iter().enumerate() {
        let bytes = (case.count * case.dtype.width() as u64) as usize;
        let inputs: Vec<Vec<u8>> = (0..N)
            .map(|rank| {
                let mut v = vec![0u8; bytes];
                member_input(1000 + k as u64, rank, case.dtype, 0, &mut v);
                std::fs::write(dir.path().join(format!("{}.in.{rank}", case.name)), &v).unwrap();
                v
            })
            .collect();
        let views: Vec<&[u8]> = inputs.iter().map(|v| &v[..]).collect();
        let mut want = vec![0u8; bytes];
        let chunk = ring_chunk_elems(1500, N, case.dtype.width());
        ring_result(case.dtype, case.alu, &views, chunk, 0, &mut want);
        if case.dtype == Dtype::F32 && case.alu == Alu::Add {
            // The check can fail: f32 summed in rank order gives other bits.
            let mut in_order = views[0].to_vec();
            for v in &views[1..] {
                netdam_common::alu::combine_into(case.dtype, case.alu, &mut in_order, v);
            }
            assert_ne!(
                in_order, want,
                "{}: the inputs do not tell summation orders apart",
                case.name
            );
        }
        expected.push(want);
    }
    let members = tb.hosts.iter().map(|h| h.ip.to_string()).collect::<Vec<_>>().join(",");
    // The rings start one past where netdam_sync_restart put every member
    // (the nodes are new, at generation 0): the generations below count from it.
    for i in 0..N {
        let pin_dir = tb.hosts[i].pin_dir.display();
        let args = strings(&[&"restart", &pin_dir, &RKEY, &0, &N, &RESTART_AT]);
        let o = capi_in(&tb, i, &args).output().expect("capi restart");
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            "restart ok\n",
            "member {i}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let children: Vec<_> = (0..N)
        .map(|i| {
            let mut args = strings(&[
                &"allreduce",
                &tb.hosts[i].pin_dir.display(),
                &RKEY,
                &0,
                &SCRATCH_LEN,
                &dir.path().display(),
                &members,
            ]);
            args.extend(cases.iter().map(Case::arg));
            capi_in(&tb, i, &args)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start capi allreduce")
        })
        .collect();
    let outputs: Vec<String> = children
        .into_iter()
        .enumerate()
        .map(|(i, child)| {
            let o = child.wait_with_output().expect("capi allreduce");
            let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            assert!(o.status.success(), "member {i}: {}\n{stdout}\n{stderr}", o.status);
            assert!(stderr.is_empty(), "member {i} wrote to stderr: {stderr}");
            stdout.into_owned()
        })
        .collect();
    for (rank, out) in outputs.iter().enumerate() {
        let first = out.lines().next().unwrap_or_default();
        assert_eq!(
            first,
            format!(
                "rank={rank} chunk_elems_i32={} chunk_elems_u64={}",
                ring_chunk_elems(1500, N, 4),
                ring_chunk_elems(1500, N, 8)
            )
        );
        // Each piece is one ring, one generation: the generation after each case says how many ran.
        let mut generation = RESTART_AT;
        for case in &cases {
            generation += case.rings(N);
            assert!(
                out.contains(&format!("case {} generation {generation}\n", case.name)),
                "member {rank}, {}: not at generation {generation} after {} ring(s):\n{out}",
                case.name,
                case.rings(N)
            );
        }
        assert!(out.ends_with("allreduce ok\n"), "{out}");
    }
    assert!(
        cases.iter().filter(|c| c.rings(N) >= 3).count() >= 50,
        "most cases run in several pieces"
    );
    for (case, want) in cases.iter().zip(&expected) {
        for rank in 0..N {
            let got =
                std::fs::read(dir.path().join(format!("{}.out.{rank}", case.name))).expect("the C program's output");
            let w = case.dtype.width() as usize;
            if let Some(i) = (0..want.len() / w).find(|&i| got[i * w..(i + 1) * w] != want[i * w..(i + 1) * w]) {
                panic!(
                    "{} ({} x {} {} {}), member {rank}: element {i} is {:02x?}, the ring's result is {:02x?}",
                    case.name,
                    case.count,
                    case.dtype.name(),
                    case.alu.name(),
                    case.mode,
                    &got[i * w..(i + 1) * w],
                    &want[i * w..(i + 1) * w]
                );
            }
        }
    }
}

#[test]
fn c_errors_have_their_codes_wire_statuses_and_messages() {
    let (tb, _served) = testbed(2);
    // An address on the testbed's subnet that no host has.
    let silent = "198.18.0.200";
    let args = strings(&[
        &"errors",
        &tb.hosts[0].pin_dir.display(),
        &RKEY,
        &tb.hosts[1].ip,
        &silent,
    ]);
    let o = run(&mut capi_in(&tb, 0, &args));
    let (out, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{}\n{out}\n{stderr}", o.status);
    assert!(
        stderr.is_empty(),
        "the library wrote to stderr without RUST_LOG: {stderr}"
    );
    let results: HashMap<&str, (i32, i32, &str)> = out
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(4, ' ');
            let name = f.next()?;
            Some((
                name,
                (f.next()?.parse().ok()?, f.next()?.parse().ok()?, f.next().unwrap_or("")),
            ))
        })
        .collect();
    let (me, peer) = (tb.hosts[0].ip, tb.hosts[1].ip);
    let expect = |name: &str, status: Status, wire: i32, message: &str| {
        let (s, w, m) = results
            .get(name)
            .unwrap_or_else(|| panic!("no line for {name}:\n{out}"));
        assert_eq!((*s, *w), (status as i32, wire), "{name}: {m}");
        assert!(m.contains(message), "{name}: {m:?} does not say {message:?}");
    };
    expect("null_out", Status::Arg, 0, "out is NULL");
    expect("null_client", Status::Arg, 0, "client is NULL");
    expect("null_group", Status::Arg, 0, "group is NULL");
    expect(
        "nothing_served",
        Status::Node,
        0,
        "the node pinned in /sys/fs/bpf/netdam-capi-test-nothing-here: no pinned map at",
    );
    expect("empty_pin_dir", Status::Arg, 0, "pin_dir is \"\"");
    expect(
        "not_ipv4",
        Status::Arg,
        0,
        "node_ip \"198.18.0\" is not an IPv4 address",
    );
    expect(
        "bad_key",
        Status::Refused,
        4,
        &format!("READ at 0x0 refused by {peer}: BAD_KEY (no region has this rkey"),
    );
    expect("out_of_bounds", Status::Refused, 3, "OUT_OF_BOUNDS");
    expect("bitwise_f32_client", Status::Arg, 0, "op NETDAM_BXOR is bitwise");
    expect(
        "unknown_dtype",
        Status::Arg,
        0,
        "dtype 9 is not a netdam_dtype: use NETDAM_I32 (1)",
    );
    expect(
        "unknown_op",
        Status::Arg,
        0,
        "op 0 is not a netdam_op: use NETDAM_SUM (1)",
    );
    expect("null_old", Status::Arg, 0, "old is NULL");
    expect(
        "timeout",
        Status::Timeout,
        0,
        &format!("NOP to {silent}: no answer after 2 attempt(s) of 50ms each"),
    );
    expect(
        "timeout_cas",
        Status::Timeout,
        0,
        &format!("CAS to {silent}: no answer"),
    );
    expect(
        "not_member",
        Status::Group,
        0,
        &format!("this node ({me}) is not in the group"),
    );
    expect("duplicate", Status::Group, 0, &format!("{peer} is in the group twice"));
    expect("one_member", Status::Group, 0, "a group has 2 to 8 members, not 1");
    expect("null_members", Status::Arg, 0, "members is NULL");
    expect("null_config", Status::Arg, 0, "config is NULL");
    expect(
        "scratch_outside",
        Status::Range,
        0,
        &format!("does not fit the node's {MEM}-byte NetDAM memory"),
    );
    expect(
        "scratch_misaligned",
        Status::Arg,
        0,
        "the scratch area at 0x4 is not 8-byte aligned",
    );
    let e = ring_chunk_elems(1500, 3, 4);
    expect(
        "scratch_too_small",
        Status::Range,
        0,
        &format!(
            "the scratch area of 2112 bytes is too small for one piece of {} i32 elements (3 members x {e} per chunk)",
            3 * e
        ),
    );
    expect("bitwise_f32_allreduce", Status::Arg, 0, "op NETDAM_BAND is bitwise");
    expect("overlap", Status::Arg, 0, "sendbuf and recvbuf overlap");
    expect("at_outside", Status::Range, 0, "does not fit the node's");
    expect("null_recvbuf", Status::Arg, 0, "recvbuf is NULL");
    expect("nothing_to_do", Status::Ok, 0, "");
    assert!(out.contains("null_node_ipv4 0 node is NULL"), "{out}");
}
