//! Benchmark 1 of the all-reduce issue: int32 sum on a testbed of N nodes,
//! from --min-bytes to --max-bytes (doubling), three systems on the same
//! namespaces, interleaved repetition by repetition, medians:
//! - NetDAM: the ring of PROTOCOL.md section 6 done by the XDP data path;
//! - UDP ring: the same collective engine and packets, with each hop done
//!   by a userspace process over a kernel UDP socket (`udp_node`);
//! - OpenMPI: `MPI_Allreduce` over its TCP transport (bench/mpi/allreduce.c),
//!   ranks started inside the namespaces by an rsh agent that enters them.

use std::{
    collections::BTreeMap,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{bail, ensure, Context as _, Result};
use netdam_common::wire::{Alu, Dtype, DEFAULT_PORT};
use netdam_tests::{netdam_bin, require_root};
use netdam_user::{
    collective::{inputs, table::busbw, Allreduce, Collective, CollectiveConfig, Group, MemberNode},
    controller::LocalNode,
    plot,
    testbed::{MemberThread, Served, Testbed},
};
use serde::Serialize;

use crate::udp_node::UdpNode;

const PREFIX: &str = "nbar";
const RKEY: u32 = 0xBE4C;
/// Port of the userspace baseline (the XDP nodes pass it to the kernel).
const UDP_PORT: u16 = DEFAULT_PORT + 1;
const SEED: u64 = 0xA11;
/// Where inputs and outputs sit (the sync area is at 0).
const INPUT: u64 = 4096;

#[derive(clap::Args)]
pub struct Args {
    /// Members of the ring.
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Smallest size in bytes (1 KiB: the latency point of the goal).
    #[arg(long, default_value_t = 1024)]
    min_bytes: u64,
    /// Largest size in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    max_bytes: u64,
    /// Repetitions of the whole comparison (medians are reported).
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Where the JSON and the SVG plot go.
    #[arg(long, default_value = "results")]
    out: PathBuf,
}

/// Timed all-reduces per size, as bench/mpi/allreduce.c counts them.
fn iters_for(bytes: u64) -> u32 {
    ((16u64 << 20) / bytes).clamp(3, 20) as u32
}

#[derive(Serialize)]
struct Row {
    bytes: u64,
    /// Median over repetitions of the slowest member's mean time, us.
    netdam_us: f64,
    udp_ring_us: f64,
    mpi_us: f64,
    netdam_busbw_gbps: f64,
    udp_ring_busbw_gbps: f64,
    mpi_busbw_gbps: f64,
    /// Wrong result elements over every run of every system.
    wrong: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum System {
    Netdam,
    UdpRing,
    Mpi,
}

pub fn run(a: Args) -> Result<()> {
    require_root();
    ensure!((2..=8).contains(&a.nodes), "--nodes {}: 2 to 8", a.nodes);
    ensure!(
        a.min_bytes >= 4 && a.min_bytes <= a.max_bytes && a.max_bytes <= 256 << 20,
        "--min-bytes {} --max-bytes {}: 4 <= min <= max <= 256MiB",
        a.min_bytes,
        a.max_bytes
    );
    let sizes: Vec<u64> = std::iter::successors(Some(a.min_bytes / 4 * 4), |s| Some(s * 2))
        .take_while(|s| *s <= a.max_bytes)
        .collect();
    let mpi = MpiProgram::build()?;
    let output = (INPUT + a.max_bytes).next_multiple_of(4096);
    let mem = (output + a.max_bytes).next_multiple_of(64 << 10);
    let tb = Testbed::up(PREFIX, a.nodes, 1500)?;
    let group: Vec<Ipv4Addr> = tb.hosts.iter().map(|h| h.ip).collect();
    let mut serve_args = vec![
        "--mem-size".to_string(),
        mem.to_string(),
        "--region".into(),
        format!("{RKEY:#x}:0:{mem}:rwa"),
        "--mode".into(),
        "native".into(),
    ];
    for ip in &group {
        serve_args.extend(["--peer".to_string(), ip.to_string()]);
    }
    let _served: Vec<Served> = (0..a.nodes)
        .map(|i| tb.serve(i, &netdam_bin(), &serve_args))
        .collect::<Result<_, _>>()?;
    let netdam = members(&tb, &group, DEFAULT_PORT, |i| {
        let pin_dir = tb.hosts[i].pin_dir.clone();
        move || LocalNode::open(&pin_dir).map_err(|e| e.to_string())
    })?;
    let udp = members(&tb, &group, UDP_PORT, |i| {
        let ip = group[i];
        move || UdpNode::start(ip, UDP_PORT, mem as usize).map_err(|e| e.to_string())
    })?;
    place_inputs(&netdam, a.max_bytes)?;
    place_inputs(&udp, a.max_bytes)?;
    let agent = mpi.agent(&tb)?;
    let mut times: BTreeMap<(System, u64), Vec<f64>> = BTreeMap::new();
    let mut wrong = BTreeMap::<u64, u64>::new();
    for rep in 1..=a.reps {
        eprintln!("repetition {rep}/{}: NetDAM", a.reps);
        for &s in &sizes {
            let (t, w) = sweep_size(&netdam, s, output)?;
            times.entry((System::Netdam, s)).or_default().push(t);
            *wrong.entry(s).or_default() += w;
        }
        eprintln!("repetition {rep}/{}: UDP ring", a.reps);
        for &s in &sizes {
            let (t, w) = sweep_size(&udp, s, output)?;
            times.entry((System::UdpRing, s)).or_default().push(t);
            *wrong.entry(s).or_default() += w;
        }
        eprintln!("repetition {rep}/{}: OpenMPI", a.reps);
        for (s, t, w) in mpi.run(&tb, &agent, &group, sizes[0], sizes[sizes.len() - 1])? {
            times.entry((System::Mpi, s)).or_default().push(t);
            *wrong.entry(s).or_default() += w;
        }
    }
    drop(udp);
    drop(netdam);
    let median = |sys: System, s: u64| -> f64 {
        let mut v = times.get(&(sys, s)).cloned().unwrap_or_default();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let bw = |s: u64, us: f64| busbw(s as f64 / us / 1e3, a.nodes);
    let rows: Vec<Row> = sizes
        .iter()
        .map(|&s| {
            let (n, u, m) = (
                median(System::Netdam, s),
                median(System::UdpRing, s),
                median(System::Mpi, s),
            );
            Row {
                bytes: s,
                netdam_us: n,
                udp_ring_us: u,
                mpi_us: m,
                netdam_busbw_gbps: bw(s, n),
                udp_ring_busbw_gbps: bw(s, u),
                mpi_busbw_gbps: bw(s, m),
                wrong: wrong.get(&s).copied().unwrap_or(0),
            }
        })
        .collect();
    print_table(&a, &rows);
    write_results(&a, &rows)?;
    let wrong: u64 = rows.iter().map(|r| r.wrong).sum();
    ensure!(wrong == 0, "{wrong} result element(s) were wrong");
    Ok(())
}

/// One member thread per test host, each with a collective on port `port`
/// over the node `open(i)` makes inside its namespace.
fn members<N, F, G>(tb: &Testbed, group: &[Ipv4Addr], port: u16, open: G) -> Result<Vec<MemberThread<N>>>
where
    N: MemberNode + 'static,
    F: FnOnce() -> Result<N, String> + Send + 'static,
    G: Fn(usize) -> F,
{
    let group = Group {
        members: group.to_vec(),
        port,
    };
    (0..tb.hosts.len())
        .map(|i| {
            let (make_node, group) = (open(i), group.clone());
            let cfg = CollectiveConfig {
                patience: Duration::from_secs(60),
                ..CollectiveConfig::default()
            };
            MemberThread::spawn(&tb.hosts[i].netns, move || {
                Collective::new(make_node()?, group, cfg).map_err(|e| e.to_string())
            })
            .with_context(|| format!("member {i}"))
        })
        .collect()
}

/// Every member's seeded input of the largest size; smaller sizes use its start.
fn place_inputs<N: MemberNode + 'static>(members: &[MemberThread<N>], bytes: u64) -> Result<()> {
    let pending: Vec<_> = members
        .iter()
        .map(|m| {
            m.submit(move |c| {
                let mut v = vec![0u8; bytes as usize];
                inputs::member_input(SEED, c.rank(), Dtype::I32, 0, &mut v);
                c.node().write(INPUT, &v).map_err(|e| e.to_string())
            })
        })
        .collect();
    for p in pending {
        p.recv().context("member thread")?.map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// One size on every member: warmup, timed iterations, the output checked.
/// The slowest member's mean time (us) and the wrong elements of all.
fn sweep_size<N: MemberNode + 'static>(members: &[MemberThread<N>], bytes: u64, output: u64) -> Result<(f64, u64)> {
    let op = Allreduce {
        rkey: RKEY,
        input_addr: INPUT,
        output_addr: output,
        count: bytes / 4,
        dtype: Dtype::I32,
        alu: Alu::Add,
    };
    let iters = iters_for(bytes);
    let pending: Vec<_> = members
        .iter()
        .map(|m| {
            m.submit(move |c| -> Result<(f64, u64), String> {
                c.allreduce(&op).map_err(|e| e.to_string())?;
                let mut total = 0.0;
                for _ in 0..iters {
                    total += c.allreduce(&op).map_err(|e| e.to_string())?.elapsed.as_secs_f64();
                }
                let e = c.plan(&op).map_err(|e| e.to_string())?.chunk_elems;
                let mut out = vec![0u8; bytes as usize];
                c.node().read(output, &mut out).map_err(|e| e.to_string())?;
                let n = c.group().members.len();
                Ok((
                    total / iters as f64 * 1e6,
                    inputs::count_wrong(SEED, n, Dtype::I32, Alu::Add, e, &out),
                ))
            })
        })
        .collect();
    let mut slowest: f64 = 0.0;
    let mut wrong = 0;
    for (i, p) in pending.into_iter().enumerate() {
        let (t, w) = p
            .recv()
            .context("member thread")?
            .map_err(|e| anyhow::anyhow!("{bytes} bytes, member {i}: {e}"))?;
        slowest = slowest.max(t);
        wrong += w;
    }
    Ok((slowest, wrong))
}

/// The MPI program, compiled with mpicc from bench/mpi/allreduce.c.
struct MpiProgram {
    exe: PathBuf,
}

impl MpiProgram {
    fn build() -> Result<MpiProgram> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let src = root.join("mpi/allreduce.c");
        let exe = root.join("../target/mpi-allreduce");
        let out = Command::new("mpicc")
            .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .context(
                "running mpicc: install OpenMPI (apt-get install openmpi-bin libopenmpi-dev; `cargo xtask bench` does)",
            )?;
        if !out.status.success() {
            bail!("mpicc {}: {}", src.display(), String::from_utf8_lossy(&out.stderr));
        }
        Ok(MpiProgram { exe })
    }

    /// An rsh agent for mpirun: `agent HOST CMD...` runs CMD in HOST's namespace.
    fn agent(&self, tb: &Testbed) -> Result<tempfile_path::TempPath> {
        let cases: String = tb
            .hosts
            .iter()
            .map(|h| format!("  {}) ns={} ;;\n", h.ip, h.netns))
            .collect();
        let script = format!(
            "#!/bin/sh\n# mpirun's rsh agent for the testbed: enter the host's namespace, run the command.\nhost=$1; shift\ncase $host in\n{cases}  *) echo \"unknown host $host\" >&2; exit 1 ;;\nesac\nexec ip netns exec \"$ns\" sh -c \"$*\"\n"
        );
        tempfile_path::TempPath::write(&format!("netdam-mpi-agent-{}", std::process::id()), &script)
    }

    /// Runs the sweep once with rank i in host i; (bytes, time_us, wrong) per size.
    fn run(&self, tb: &Testbed, agent: &Path, group: &[Ipv4Addr], min: u64, max: u64) -> Result<Vec<(u64, f64, u64)>> {
        let hosts: Vec<String> = group.iter().map(Ipv4Addr::to_string).collect();
        let mut cmd = tb.command(0, "mpirun")?;
        cmd.args([
            "--allow-run-as-root",
            "-np",
            &group.len().to_string(),
            "-H",
            &hosts.join(","),
        ])
        .arg("--mca")
        .arg("plm_rsh_agent")
        .arg(agent)
        .args([
            "--mca",
            "plm_rsh_no_tree_spawn",
            "1",
            "--mca",
            "pml",
            "ob1",
            "--mca",
            "btl",
            "tcp,self",
        ])
        .args([
            "--mca",
            "btl_tcp_if_include",
            "198.18.0.0/24",
            "--mca",
            "oob_tcp_if_include",
            "198.18.0.0/24",
        ])
        // More ranks than cores here: busy-polling ranks would starve each other.
        .args(["--mca", "mpi_yield_when_idle", "1", "--bind-to", "none"])
        .arg(&self.exe)
        .args([min.to_string(), max.to_string()]);
        let out = cmd.output().context("running mpirun")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!("mpirun failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
        }
        stdout
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).with_context(|| format!("MPI output {l:?}"))?;
                Ok((
                    v["bytes"].as_u64().context("bytes")?,
                    v["time_us"].as_f64().context("time_us")?,
                    v["wrong"].as_u64().context("wrong")?,
                ))
            })
            .collect()
    }
}

/// A file in the temporary directory, removed on drop.
mod tempfile_path {
    use std::path::{Path, PathBuf};

    pub struct TempPath(PathBuf);

    impl TempPath {
        pub fn write(name: &str, content: &str) -> anyhow::Result<TempPath> {
            use std::os::unix::fs::PermissionsExt;
            let p = std::env::temp_dir().join(name);
            std::fs::write(&p, content)?;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
            Ok(TempPath(p))
        }
    }

    impl std::ops::Deref for TempPath {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

fn print_table(a: &Args, rows: &[Row]) {
    println!(
        "all-reduce, {} nodes, int32 sum, median of {} interleaved repetitions (time: the slowest member's mean, us)",
        a.nodes, a.reps
    );
    println!(
        "{:>10} {:>11} {:>11} {:>11} {:>8} {:>8} {:>8} {:>10} {:>10} {:>7}",
        "size(B)",
        "netdam us",
        "udp us",
        "mpi us",
        "nd GB/s",
        "udp GB/s",
        "mpi GB/s",
        "bw nd/mpi",
        "t nd/mpi",
        "#wrong"
    );
    for r in rows {
        println!(
            "{:>10} {:>11.1} {:>11.1} {:>11.1} {:>8.3} {:>8.3} {:>8.3} {:>9.2}x {:>9.2}x {:>7}",
            r.bytes,
            r.netdam_us,
            r.udp_ring_us,
            r.mpi_us,
            r.netdam_busbw_gbps,
            r.udp_ring_busbw_gbps,
            r.mpi_busbw_gbps,
            r.netdam_busbw_gbps / r.mpi_busbw_gbps,
            r.netdam_us / r.mpi_us,
            r.wrong
        );
    }
    let big: Vec<&Row> = rows.iter().filter(|r| r.bytes >= 1 << 20).collect();
    if let Some(worst) = big
        .iter()
        .map(|r| r.netdam_busbw_gbps / r.mpi_busbw_gbps)
        .min_by(f64::total_cmp)
    {
        println!(
            "goal busbw >= 3x OpenMPI from 1 MiB up: lowest ratio {worst:.2}x ({})",
            if worst >= 3.0 { "met" } else { "not met" }
        );
    }
    if let Some(r) = rows.iter().find(|r| r.bytes == 1024) {
        let ratio = r.netdam_us / r.mpi_us;
        println!(
            "goal 1 KiB latency <= 0.3x OpenMPI: {ratio:.2}x ({})",
            if ratio <= 0.3 { "met" } else { "not met" }
        );
    }
}

fn write_results(a: &Args, rows: &[Row]) -> Result<()> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let json = a.out.join("bench-allreduce.json");
    std::fs::write(&json, serde_json::to_string_pretty(rows)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let series = |name: &str, f: fn(&Row) -> f64| plot::Series {
        name: name.into(),
        points: rows.iter().map(|r| (r.bytes as f64, f(r))).collect(),
    };
    let svg = plot::svg(
        &format!("all-reduce busbw, {} nodes, int32 sum (medians)", a.nodes),
        "size (bytes)",
        "busbw (GB/s)",
        &[
            series("NetDAM (XDP)", |r| r.netdam_busbw_gbps),
            series("UDP ring (userspace)", |r| r.udp_ring_busbw_gbps),
            series("OpenMPI (TCP)", |r| r.mpi_busbw_gbps),
        ],
    );
    let svg_path = a.out.join("bench-allreduce.svg");
    std::fs::write(&svg_path, svg).with_context(|| format!("writing {}", svg_path.display()))?;
    eprintln!("results: {} and {}", json.display(), svg_path.display());
    Ok(())
}
