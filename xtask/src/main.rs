//! `cargo xtask`: set up the machine, build, run, and test NetDAM-XDP.

mod kernels;
mod protocol;
mod setup;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Set up, build, run and test NetDAM-XDP")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what is missing: nightly rust-src, bpf-linker, iproute2; mount bpffs; raise RLIMIT_MEMLOCK;
    /// as root also OpenMPI and the tools of MPICH's test suite (tier 3, `bench mpi`).
    Setup,
    /// Set up, then build the XDP programs, the netdam and netdam-lab binaries, libnetdam.so and libnetdam_mpi.so (release).
    Build,
    /// Set up, build, then show NetDAM on a 3-node testbed; or with `-- --iface IF [--mode M] ...`
    /// serve on a real NIC until Ctrl-C (every argument after `--` goes to `netdam serve`).
    Run {
        #[arg(last = true)]
        serve_args: Vec<String>,
    },
    /// Build or remove the namespace testbed (`netdam-lab testbed`).
    Testbed {
        #[command(subcommand)]
        cmd: TestbedCmd,
    },
    /// Set up, build, then sweep the in-network ring all-reduce over sizes on a
    /// testbed of N nodes and print the nccl-tests table (results/ gets JSON and an SVG plot).
    Allreduce {
        /// Members of the ring (2 to 8).
        #[arg(long, default_value_t = 4)]
        nodes: u8,
        /// i32, u32, i64, u64 or f32.
        #[arg(long, default_value = "i32")]
        dtype: String,
        /// sum, min, max, and, or, xor.
        #[arg(long, default_value = "sum")]
        op: String,
        /// Smallest size in bytes (units like KiB work).
        #[arg(long, default_value = "4")]
        min_bytes: String,
        /// Largest size; sizes double from the smallest.
        #[arg(long, default_value = "67108864")]
        max_bytes: String,
        /// Timed all-reduces per size.
        #[arg(long, default_value_t = 5)]
        iters: u32,
        /// How members send their chunks: socket, injector or af-xdp.
        #[arg(long, default_value = "socket")]
        transmit: String,
        /// What joins the links: xdp (port to port in XDP) or bridge (the Linux bridge).
        #[arg(long, default_value = "xdp")]
        fabric: String,
        /// MTU of every link (3498: what cloud NICs allow in native XDP).
        #[arg(long, default_value_t = 1500)]
        mtu: u32,
        /// Print JSON rows instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Regenerate tests/vectors/ (the conformance vectors) from the reference model.
    Vectors,
    /// Differential fuzzing: N seeded frames through the reference model, the
    /// XDP program and the C engine side by side (root), half without peers and
    /// half with a peer table, one after the other; prints progress, a summary
    /// per half, and the seed and frame of any difference.
    Fuzz {
        /// Frames in all (half per variant).
        #[arg(long, default_value_t = 1_000_000)]
        frames: u64,
        #[arg(long, default_value_t = 0x5EED_0001)]
        seed: u64,
    },
    /// Set up (and OpenMPI), build, run the benchmarks; results (JSON, SVG) go under results/ (not committed).
    Bench {
        /// Which to run (default: all): xdp-ops, allreduce, mpi, node, client, fpga, msg, memwall.
        #[arg(value_parser = ["xdp-ops", "allreduce", "mpi", "node", "client", "fpga", "msg", "memwall"])]
        which: Vec<String>,
        /// For mpi: the OSU micro-benchmarks' source directory (its osu_allreduce is built and run).
        #[arg(long)]
        osu_src: Option<PathBuf>,
        /// For mpi: the Intel MPI Benchmarks' source directory (IMB-MPI1 Allreduce). Without either,
        /// mpi runs MPICH's perf/allredtrace from Debian's mpich source package.
        #[arg(long)]
        imb_src: Option<PathBuf>,
    },
    /// Set up, build, run every test: tier 1 the host unit tests, the HLS port and the
    /// protocol check; tier 2 (root) the XDP program through BPF_PROG_TEST_RUN; tier 3
    /// (root) NetDAM on the namespace testbed; tier 4 (root) the kernel matrix in qemu
    /// guests, when /dev/kvm is usable (docs/kernels.md).
    Test {
        /// Run only the host unit tests (tier 1), which need no root (same as `--tier 1`).
        #[arg(long, conflicts_with = "tier")]
        unprivileged: bool,
        /// Run only these tiers (repeat or comma-separate: `--tier 2`, `--tier 1,2`).
        #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u8).range(1..=4))]
        tier: Vec<u8>,
        /// Run only the kernel matrix: Debian's newest 6.1 and 6.12 kernels, each in
        /// three qemu guests on one link, serve in native XDP on virtio_net, the
        /// conformance vectors, a WRITE/READ round trip and a 3-member all-reduce
        /// (root; under TCG, slowly, when KVM is not usable).
        #[arg(long, conflicts_with_all = ["unprivileged", "tier"])]
        kernels: bool,
        /// With --kernels: print the matrix as JSON instead of the table.
        #[arg(long, requires = "kernels")]
        json: bool,
        /// With --kernels: only these series (6.1, 6.12), comma-separated.
        #[arg(long, requires = "kernels", value_delimiter = ',', value_parser = ["6.1", "6.12"])]
        series: Vec<String>,
    },
    /// Check formatting (`cargo fmt --check`) and clippy with `-D warnings` on every crate,
    /// the eBPF crate included (CI runs this before the tests).
    Lint,
    /// Check that docs/PROTOCOL.md, without its reading blocks, is the wire contract
    /// beside the repository (../shared/PROTOCOL.md, or NETDAM_PROTOCOL).
    Protocol,
}

#[derive(Subcommand)]
enum TestbedCmd {
    Up {
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        #[arg(long, default_value_t = 1500)]
        mtu: u32,
        /// xdp (port to port in XDP), bridge, or plain (the bridge with no XDP, for baselines).
        #[arg(long, default_value = "xdp")]
        fabric: String,
        /// Receive and transmit queues of every veth (1 to 64): XDP on several CPUs at once.
        #[arg(long, default_value_t = 1)]
        queues: u32,
        /// Fraction of NetDAM frames dropped on every link.
        #[arg(long, default_value = "0")]
        loss: String,
        /// Fraction duplicated.
        #[arg(long, default_value = "0")]
        dup: String,
        /// Fraction reordered (held back behind the next frame).
        #[arg(long, default_value = "0")]
        reorder: String,
        /// Seed of the chaos element's random streams.
        #[arg(long, default_value = "1")]
        seed: String,
    },
    Down,
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    let root = workspace_root();
    match cli.cmd {
        Cmd::Setup => {
            setup::run(&root)?;
            if setup::is_root() {
                setup::mpich_suite()
            } else {
                println!("    not root: OpenMPI and the MPICH test suite's tools (tier 3) left as they are");
                Ok(())
            }
        }
        Cmd::Build => {
            setup::run(&root)?;
            build(&root)
        }
        Cmd::Run { serve_args } => {
            setup::run(&root)?;
            build(&root)?;
            setup::require_root("cargo xtask run")?;
            if serve_args.is_empty() {
                cmd(Command::new(lab_bin(&root)).args(["testbed", "demo", "--nodes", "3"]))
            } else {
                cmd(Command::new(netdam_bin(&root)).arg("serve").args(&serve_args))
            }
        }
        Cmd::Testbed { cmd: tb } => {
            setup::run(&root)?;
            build(&root)?;
            setup::require_root("cargo xtask testbed")?;
            let lab = lab_bin(&root);
            match tb {
                TestbedCmd::Up {
                    nodes,
                    mtu,
                    fabric,
                    queues,
                    loss,
                    dup,
                    reorder,
                    seed,
                } => cmd(Command::new(&lab)
                    .args([
                        "testbed",
                        "up",
                        "--nodes",
                        &nodes.to_string(),
                        "--mtu",
                        &mtu.to_string(),
                        "--fabric",
                        &fabric,
                        "--queues",
                        &queues.to_string(),
                    ])
                    .args(["--loss", &loss, "--dup", &dup, "--reorder", &reorder, "--seed", &seed])),
                TestbedCmd::Down => cmd(Command::new(&lab).args(["testbed", "down"])),
            }
        }
        Cmd::Test {
            unprivileged,
            tier,
            kernels,
            json,
            series,
        } => {
            if kernels {
                kernel_matrix(&root, true, &series, json)
            } else {
                test(&root, Tiers::chosen(unprivileged, &tier))
            }
        }
        Cmd::Lint => lint(&root),
        Cmd::Protocol => protocol::check(&root),
        Cmd::Allreduce {
            nodes,
            dtype,
            op,
            min_bytes,
            max_bytes,
            iters,
            transmit,
            fabric,
            mtu,
            json,
        } => {
            setup::run(&root)?;
            build(&root)?;
            setup::require_root("cargo xtask allreduce")?;
            let mut c = Command::new(lab_bin(&root));
            c.current_dir(&root)
                .args(["testbed", "allreduce", "--nodes", &nodes.to_string()]);
            c.args([
                "--dtype",
                &dtype,
                "--op",
                &op,
                "--min-bytes",
                &min_bytes,
                "--max-bytes",
                &max_bytes,
            ]);
            c.args([
                "--iters",
                &iters.to_string(),
                "--transmit",
                &transmit,
                "--fabric",
                &fabric,
                "--mtu",
                &mtu.to_string(),
                "--out",
                "results",
            ]);
            if json {
                c.arg("--json");
            }
            cmd(&mut c)
        }
        Cmd::Vectors => cmd(cargo().current_dir(&root).args([
            "run",
            "--release",
            "--package",
            "netdam-common",
            "--features",
            "model",
            "--bin",
            "netdam-vectors",
            "--",
            "tests/vectors",
        ])),
        Cmd::Fuzz { frames, seed } => {
            setup::run(&root)?;
            build(&root)?;
            setup::require_root("cargo xtask fuzz")?;
            let per_variant = frames.div_ceil(2);
            println!("==> fuzz: {frames} frames ({per_variant} without peers, {per_variant} with a peer table), seed {seed:#x}");
            cmd(cargo()
                .current_dir(&root)
                .env("NETDAM_FUZZ_FRAMES", per_variant.to_string())
                .env("NETDAM_FUZZ_SEED", seed.to_string())
                .args([
                    "test",
                    "--release",
                    "--package",
                    "netdam-tests",
                    "--test",
                    "differential",
                    "--",
                    "--nocapture",
                    // One variant at a time: they share the one C engine anyway.
                    "--test-threads=1",
                ]))
        }
        Cmd::Bench {
            which,
            osu_src,
            imb_src,
        } => {
            setup::run(&root)?;
            build(&root)?;
            setup::require_root("cargo xtask bench")?;
            cmd(cargo()
                .current_dir(&root)
                .args(["build", "--release", "--package", "netdam-bench"]))?;
            let wants = |name: &str| which.is_empty() || which.iter().any(|w| w == name);
            let results = root.join("results");
            let bench = root.join("target/release/netdam-bench");
            if wants("xdp-ops") {
                println!("==> bench: XDP op cost (BPF_PROG_TEST_RUN)");
                cmd(Command::new(&bench)
                    .args(["xdp-ops", "--json"])
                    .arg(results.join("xdp-ops.json")))?;
            }
            if wants("allreduce") {
                setup::openmpi()?;
                // The MTUs of the issue: Ethernet's, and what ENA and mlx5 run in native XDP.
                for mtu in ["1500", "3498"] {
                    println!(
                        "==> bench: all-reduce, NetDAM vs OpenMPI (same fabric and plain bridge) vs a userspace UDP ring (4 nodes, XDP fabric, MTU {mtu}, 1 KiB to 64 MiB)"
                    );
                    cmd(Command::new(&bench)
                        .env("NETDAM_BIN", netdam_bin(&root))
                        .args(["allreduce", "--mtu", mtu, "--out"])
                        .arg(&results))?;
                }
            }
            if wants("mpi") {
                setup::mpich_suite()?;
                println!(
                    "==> bench: a third-party MPI benchmark with and without libnetdam_mpi, and OpenMPI on the plain fabric (4 nodes)"
                );
                let mut c = Command::new(&bench);
                c.env("NETDAM_BIN", netdam_bin(&root))
                    .args(["mpi", "--out"])
                    .arg(&results);
                for (flag, dir) in [("--osu-src", &osu_src), ("--imb-src", &imb_src)] {
                    if let Some(d) = dir {
                        c.arg(flag).arg(d);
                    }
                }
                cmd(&mut c)?;
            }
            if wants("node") {
                println!("==> bench: one node, WRITE throughput vs XDP_DROP and a userspace server, READ latency");
                cmd(Command::new(&bench)
                    .env("NETDAM_BIN", netdam_bin(&root))
                    .args(["node", "--out"])
                    .arg(&results))?;
            }
            if wants("client") {
                println!("==> bench: 64 MiB WRITE/READ through the client vs the node's WRITE ceiling");
                cmd(Command::new(&bench)
                    .env("NETDAM_BIN", netdam_bin(&root))
                    .args(["client", "--out"])
                    .arg(&results))?;
            }
            if wants("fpga") {
                setup::fpga_tools()?;
                cmd(Command::new("make")
                    .current_dir(&root)
                    .args(["-C", "fpga-port", "build/bench"]))?;
                println!("==> bench: the HLS port's C engine beside the XDP program");
                cmd(Command::new(&bench)
                    .current_dir(&root)
                    .args(["fpga", "--json"])
                    .arg(results.join("fpga.json")))?;
            }
            if wants("msg") {
                println!("==> bench: MSG into AF_XDP vs recvmmsg; host bytes per WRITE_NOTIFY vs the socket");
                cmd(Command::new(&bench)
                    .env("NETDAM_BIN", netdam_bin(&root))
                    .args(["msg", "--out"])
                    .arg(&results))?;
            }
            if wants("memwall") {
                println!("==> bench: the memory wall (netdam-lab bench memwall)");
                cmd(Command::new(lab_bin(&root))
                    .args(["bench", "memwall", "--out"])
                    .arg(&results))?;
            }
            Ok(())
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

fn netdam_bin(root: &Path) -> PathBuf {
    root.join("target/release/netdam")
}

/// The lab's command (testbed, demo, sweeps, memwall), built beside `netdam`.
fn lab_bin(root: &Path) -> PathBuf {
    root.join("target/release/netdam-lab")
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Runs a command, failing with its name if it fails.
fn cmd(c: &mut Command) -> Result<()> {
    let status = c.status().with_context(|| format!("starting {c:?}"))?;
    if !status.success() {
        bail!("{c:?} failed ({status})");
    }
    Ok(())
}

fn build(root: &Path) -> Result<()> {
    println!("==> building the XDP programs, the netdam and netdam-lab binaries and libnetdam.so");
    cmd(cargo().current_dir(root).args([
        "build",
        "--release",
        "--package",
        "netdam-user",
        "--package",
        "netdam-lab",
        "--package",
        "netdam-capi",
        "--bins",
        "--lib",
    ]))?;
    build_mpi_lib(root)
}

/// The C sources of libnetdam_mpi.so (netdam-mpi/*.c), sorted.
fn mpi_lib_sources(root: &Path) -> Result<Vec<PathBuf>> {
    let dir = root.join("netdam-mpi");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    sources.sort();
    Ok(sources)
}

/// mpicc with warnings as errors and the C API's header (what the MPI
/// library and the C test programs compile with, here and in lint).
fn mpicc(root: &Path) -> Command {
    let mut c = Command::new("mpicc");
    c.args(["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("netdam-capi/include"));
    c
}

/// libnetdam_mpi.so, the PMPI interposition library (docs/mpi.md), beside
/// the libnetdam.so it links (found through its rpath, $ORIGIN).
fn build_mpi_lib(root: &Path) -> Result<()> {
    setup::openmpi()?;
    println!("==> building libnetdam_mpi.so (mpicc)");
    let release = root.join("target/release");
    cmd(mpicc(root)
        .args(["-shared", "-fPIC", "-o"])
        .arg(release.join("libnetdam_mpi.so"))
        .args(mpi_lib_sources(root)?)
        .arg("-L")
        .arg(&release)
        .args(["-lnetdam", "-Wl,-rpath,$ORIGIN"]))
}

/// Which test tiers a `cargo xtask test` runs.
#[derive(Clone, Copy)]
struct Tiers {
    host: bool,
    prog_test_run: bool,
    testbed: bool,
    /// The kernel matrix in qemu guests (where KVM runs guests).
    kernels: bool,
}

impl Tiers {
    fn chosen(unprivileged: bool, tiers: &[u8]) -> Tiers {
        match (unprivileged, tiers.is_empty()) {
            (true, _) => Tiers {
                host: true,
                prog_test_run: false,
                testbed: false,
                kernels: false,
            },
            (false, true) => Tiers {
                host: true,
                prog_test_run: true,
                testbed: true,
                kernels: true,
            },
            (false, false) => Tiers {
                host: tiers.contains(&1),
                prog_test_run: tiers.contains(&2),
                testbed: tiers.contains(&3),
                kernels: tiers.contains(&4),
            },
        }
    }
}

/// The test files of `tests/` that need only BPF_PROG_TEST_RUN (tier 2); every
/// other file there needs the namespace testbed (tier 3).
const TIER2_TESTS: [&str; 5] = ["xdp_prog", "alu", "vectors", "window", "differential"];

/// The test files of tests/tests/, by name, in the tier that `tier2` says.
fn test_files(root: &Path, tier2: bool) -> Result<Vec<String>> {
    let dir = root.join("tests/tests");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".rs")?.to_string())
        })
        .filter(|n| TIER2_TESTS.contains(&n.as_str()) == tier2)
        .collect();
    names.sort();
    Ok(names)
}

fn test(root: &Path, tiers: Tiers) -> Result<()> {
    setup::run(root)?;
    build(root)?;
    if tiers.host {
        println!("==> tier 1: host unit tests (no root)");
        cmd(cargo().current_dir(root).args(["test", "--release", "--tests"]))?;
        // The reference model and the check that tests/vectors/ is what it generates.
        cmd(cargo().current_dir(root).args([
            "test",
            "--release",
            "--tests",
            "--package",
            "netdam-common",
            "--features",
            "model",
        ]))?;
        println!("==> tier 1: docs/PROTOCOL.md against the wire contract");
        protocol::check(root)?;
        println!(
            "==> tier 1: the HLS port (fpga-port): gcc and clang, sanitizers, the vectors, the synthesizability check"
        );
        setup::fpga_tools()?;
        cmd(Command::new("make").current_dir(root).args(["-C", "fpga-port", "test"]))?;
    }
    if !tiers.prog_test_run && !tiers.testbed && !tiers.kernels {
        println!("tiers 2 to 4 not asked for: done");
        return Ok(());
    }
    if !setup::is_root() {
        bail!(
            "tiers 2 (the XDP program via BPF_PROG_TEST_RUN), 3 (the namespace testbed) and 4 (the kernel \
             matrix) need root: run `sudo -E cargo xtask test`, or `cargo xtask test --tier 1` for tier 1 only"
        );
    }
    for (on, tier2, title) in [
        (
            tiers.prog_test_run,
            true,
            "tier 2: the XDP program in the kernel through BPF_PROG_TEST_RUN (root)",
        ),
        (tiers.testbed, false, "tier 3: NetDAM on the namespace testbed (root)"),
    ] {
        if !on {
            continue;
        }
        println!("==> {title}");
        if !tier2 {
            setup::capi_tools()?;
            // The MPI tests: OpenMPI, and MPICH's test suite as its client.
            setup::mpich_suite()?;
        }
        let mut c = cargo();
        c.current_dir(root).env("NETDAM_BIN", netdam_bin(root)).args([
            "test",
            "--release",
            "--package",
            "netdam-tests",
        ]);
        for name in test_files(root, tier2)? {
            c.args(["--test", &name]);
        }
        // MPI tests run mpi4py from the tests' Python.
        c.env("NETDAM_PYTHON", setup::venv_python(root));
        cmd(&mut c)?;
        if !tier2 {
            python_tests(root)?;
        }
    }
    if tiers.kernels {
        println!("==> tier 4: the kernel matrix in qemu guests (root)");
        // Where /dev/kvm is present it runs, under TCG if nested KVM runs no
        // guest; where it is missing, one line says the matrix is skipped.
        match kernels::kvm_usable() {
            Ok(()) => kernel_matrix(root, false, &[], false)?,
            Err(why) => {
                println!("kernel matrix skipped: {why} (`cargo xtask test --kernels` runs it under TCG, slowly)")
            }
        }
    }
    Ok(())
}

/// Tier 3's Python part: the netdam module (netdam-py) built with maturin
/// into the tests' Python, then its tests (netdam-py/tests) with pytest;
/// they bring up testbeds of their own. Collecting no test is a failure.
fn python_tests(root: &Path) -> Result<()> {
    println!("==> tier 3: the Python module (netdam-py): maturin develop --release, then pytest (root)");
    let python = setup::venv_python(root);
    let venv = python
        .parent()
        .and_then(Path::parent)
        .with_context(|| format!("{} is not in a venv's bin/", python.display()))?;
    cmd(Command::new(&python).current_dir(root).env("VIRTUAL_ENV", venv).args([
        "-m",
        "maturin",
        "develop",
        "--release",
        "--manifest-path",
        "netdam-py/Cargo.toml",
    ]))?;
    let status = Command::new(&python)
        .current_dir(root.join("netdam-py"))
        .env("NETDAM_BIN", netdam_bin(root))
        .env("NETDAM_LAB_BIN", lab_bin(root))
        .args(["-m", "pytest", "-v", "tests"])
        .status()
        .context("starting pytest")?;
    match status.code() {
        Some(0) => Ok(()),
        // pytest's "no tests collected": a run that tests nothing must not pass.
        Some(5) => bail!("pytest collected no tests in netdam-py/tests"),
        _ => bail!("pytest failed in netdam-py/tests ({status})"),
    }
}

/// `cargo xtask lint`: formatting, then clippy `-D warnings` on the host crates, the
/// tests and benches, and the eBPF crate (for its own target, with nightly).
fn lint(root: &Path) -> Result<()> {
    setup::run(root)?;
    println!("==> cargo fmt --check");
    cmd(cargo().current_dir(root).args(["fmt", "--all", "--check"]))?;
    println!("==> clippy -D warnings: host crates, tests and benches");
    cmd(cargo().current_dir(root).args([
        "clippy",
        "--release",
        "--workspace",
        "--exclude",
        "netdam-ebpf",
        "--exclude",
        "netdam-lab-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    println!("==> C of the MPI library and the MPI test and benchmark programs: mpicc -Wall -Wextra -Werror");
    setup::openmpi()?;
    cmd(mpicc(root)
        .arg("-fsyntax-only")
        .args(mpi_lib_sources(root)?)
        .arg(root.join("tests/mpi/check.c"))
        .arg(root.join("bench/mpi/allreduce.c")))?;
    println!("==> clippy -D warnings: the eBPF crates (bpfel-unknown-none)");
    cmd(Command::new("cargo").current_dir(root).args([
        "+nightly",
        "clippy",
        "--release",
        "--package",
        "netdam-ebpf",
        "--package",
        "netdam-lab-ebpf",
        "--target",
        "bpfel-unknown-none",
        "-Z",
        "build-std=core",
        "--",
        "-D",
        "warnings",
    ]))
}

/// The kernel matrix (xtask/src/kernels.rs): the netdam binary and the
/// vectors test binary, built here, run in qemu guests of each kernel.
/// `standalone` (`--kernels`): set up and build first, as `cargo xtask test` has already.
fn kernel_matrix(root: &Path, standalone: bool, series: &[String], json: bool) -> Result<()> {
    let json_out = json.then(kernels::StdoutToStderr::new).transpose()?;
    // Inside `cargo xtask test`, set up and built already.
    if standalone {
        setup::run(root)?;
        build(root)?;
    }
    setup::require_root("cargo xtask test --kernels")?;
    kernels::setup()?;
    let vectors_test = test_binary(root, "vectors")?;
    let userland = kernels::Userland::new(root, &netdam_bin(root), &vectors_test)?;
    kernels::run(root, &userland, series, json_out)
}

/// Builds the integration test `name` of netdam-tests and returns its executable.
fn test_binary(root: &Path, name: &str) -> Result<PathBuf> {
    let out = cargo()
        .current_dir(root)
        .args(["test", "--release", "--package", "netdam-tests", "--test", name])
        .args(["--no-run", "--message-format=json"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cargo test --no-run")?;
    if !out.status.success() {
        bail!("building the {name} test binary failed");
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["target"]["name"] == name)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .with_context(|| format!("cargo named no executable for the {name} test"))
}
