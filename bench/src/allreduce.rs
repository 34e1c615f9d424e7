//! Benchmark 1 of the all-reduce issue: int32 sum on a testbed of N nodes,
//! from --min-bytes to --max-bytes (doubling), three systems on the same
//! namespaces, interleaved repetition by repetition, medians:
//! - NetDAM: the ring of PROTOCOL.md section 6 done by the XDP data path;
//! - UDP ring: the same collective engine and packets, with each hop done
//!   by a userspace process over a kernel UDP socket (`udp_node`);
//! - OpenMPI: `MPI_Allreduce` over its TCP transport (bench/mpi/allreduce.c),
//!   ranks started inside the namespaces by an rsh agent that enters them,
//!   once on the same fabric and MTU, and once at its own best: on a second
//!   testbed of the plain fabric (the bridge, no XDP on any link, so TCP
//!   keeps GSO). Ratios are against the better of the two.
//!
//! Beside time and busbw, the whole machine's busy CPU time per all-reduce
//! byte during the timed calls (/proc/stat), NetDAM against OpenMPI.
//!
//! And NetDAM's floor on the fabric: the same chunks sent along the same
//! ring with every hop a NOP (`CollectiveConfig::nop_hops`), so that no node
//! reduces or writes anything. Its time is what moving the ring's frames
//! costs on this machine, below which no ALU or memory work can bring the
//! all-reduce: the bound the busbw goal is measured against.

use std::{
    collections::BTreeMap,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context as _, Result};
use netdam_common::wire::{Alu, Dtype, DEFAULT_PORT};
use netdam_lab::{
    cpu::machine_busy_ns,
    mpi::{self, Mpirun},
    plot,
    testbed::{Fabric, MemberThread, Served, Testbed},
};
use netdam_tests::{netdam_bin, require_root};
use netdam_user::{
    collective::{inputs, ring::RingPlan, table::busbw, Allreduce, Collective, CollectiveConfig, Group, MemberNode},
    controller::LocalNode,
};
use serde::Serialize;

use crate::udp_node::UdpNode;

const PREFIX: &str = "nbar";
/// The plain-fabric testbed of OpenMPI at its best.
const PLAIN_PREFIX: &str = "nbmp";
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
    /// What joins NetDAM's links (and OpenMPI's same-fabric run): xdp or bridge.
    #[arg(long, default_value = "xdp")]
    fabric: Fabric,
    /// MTU of every link of both testbeds (1500, or 3498 as cloud NICs allow in native XDP).
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// Where the JSON and the SVG plot go.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Instead of the comparison, NetDAM alone with members starting each
    /// call at seeded random offsets of 0 to this many microseconds, beside
    /// the same calls started together (issue 27's skew goal: a call costs
    /// at most the largest offset plus 1.2x its time without skew).
    #[arg(long)]
    skew_us: Option<u64>,
}

/// Timed all-reduces per size, as bench/mpi/allreduce.c counts them.
fn iters_for(bytes: u64) -> u32 {
    ((16u64 << 20) / bytes).clamp(3, 200) as u32
}

/// Untimed all-reduces before them (bench/mpi/allreduce.c's too): with one,
/// the first size of a sweep (8 B) took 38 us where the next took 24 to
/// 28, for NetDAM and OpenMPI alike (members, and MPI's lazily opened
/// connections, still settling after the previous system's run).
fn warmups_for(bytes: u64) -> u32 {
    (iters_for(bytes) / 10).max(1)
}

#[derive(Serialize)]
struct Row {
    bytes: u64,
    /// Median over repetitions of the slowest member's mean time, us.
    netdam_us: f64,
    /// NetDAM's ring with every hop a NOP: the frames alone.
    floor_us: f64,
    udp_ring_us: f64,
    /// OpenMPI on the same fabric and MTU as NetDAM.
    mpi_us: f64,
    /// OpenMPI on the plain fabric (its best here).
    mpi_plain_us: f64,
    netdam_busbw_gbps: f64,
    floor_busbw_gbps: f64,
    udp_ring_busbw_gbps: f64,
    mpi_busbw_gbps: f64,
    mpi_plain_busbw_gbps: f64,
    /// Medians of the machine's busy CPU ns per all-reduce byte.
    netdam_cpu_ns_per_byte: f64,
    udp_ring_cpu_ns_per_byte: f64,
    mpi_cpu_ns_per_byte: f64,
    mpi_plain_cpu_ns_per_byte: f64,
    /// Wrong result elements over every run of every system.
    wrong: u64,
}

impl Row {
    /// OpenMPI's better time of its two runs.
    fn mpi_best_us(&self) -> f64 {
        self.mpi_us.min(self.mpi_plain_us)
    }

    /// OpenMPI's lower CPU per byte of its two runs.
    fn mpi_best_cpu(&self) -> f64 {
        self.mpi_cpu_ns_per_byte.min(self.mpi_plain_cpu_ns_per_byte)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum System {
    Netdam,
    NopFloor,
    UdpRing,
    Mpi,
    MpiPlain,
}

/// One measurement of one system at one size.
#[derive(Clone, Copy)]
struct Sample {
    /// The slowest member's mean time, us.
    us: f64,
    /// The machine's busy CPU ns per all-reduce during the timed calls.
    cpu_ns: f64,
}

pub fn run(a: Args) -> Result<()> {
    require_root();
    ensure!((2..=8).contains(&a.nodes), "--nodes {}: 2 to 8", a.nodes);
    ensure!(
        a.fabric != Fabric::Plain,
        "--fabric plain carries no XDP_TX answers: use xdp or bridge (OpenMPI runs on plain anyway)"
    );
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
    // The ring's cells follow the output (`sweep_size`).
    let cells = (output + a.max_bytes).next_multiple_of(4096);
    let mem = (cells + RingPlan::cells_len_of(a.nodes, Dtype::I32, a.max_bytes, a.mtu)).next_multiple_of(64 << 10);
    let tb = Testbed::up_on(PREFIX, a.nodes, a.mtu, a.fabric)?;
    let plain = Testbed::up_on(PLAIN_PREFIX, a.nodes, a.mtu, Fabric::Plain)?;
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
    let open_netdam = |i: usize| {
        let pin_dir = tb.hosts[i].pin_dir.clone();
        move || LocalNode::open(&pin_dir).map_err(|e| e.to_string())
    };
    let netdam = members(&tb, &group, DEFAULT_PORT, a.mtu, false, open_netdam)?;
    let floor = members(&tb, &group, DEFAULT_PORT, a.mtu, true, open_netdam)?;
    let udp = members(&tb, &group, UDP_PORT, a.mtu, false, |i| {
        let ip = group[i];
        move || UdpNode::start(ip, UDP_PORT, mem as usize).map_err(|e| e.to_string())
    })?;
    place_inputs(&netdam, a.max_bytes)?;
    if let Some(skew) = a.skew_us {
        return skew_table(&netdam, &sizes, output, a.reps, skew);
    }
    place_inputs(&udp, a.max_bytes)?;
    let mpirun = Mpirun::new(&tb)?;
    let plain_mpirun = Mpirun::new(&plain)?;
    let mut samples: BTreeMap<(System, u64), Vec<Sample>> = BTreeMap::new();
    let mut wrong = BTreeMap::<u64, u64>::new();
    let (min, max) = (sizes[0], sizes[sizes.len() - 1]);
    for rep in 1..=a.reps {
        eprintln!("repetition {rep}/{}: NetDAM", a.reps);
        for &s in &sizes {
            let (sample, w) = sweep_size(&netdam, s, output, true)?;
            samples.entry((System::Netdam, s)).or_default().push(sample);
            *wrong.entry(s).or_default() += w;
        }
        eprintln!("repetition {rep}/{}: NetDAM, every hop a NOP (the floor)", a.reps);
        for &s in &sizes {
            let (sample, _) = sweep_size(&floor, s, output, false)?;
            samples.entry((System::NopFloor, s)).or_default().push(sample);
        }
        eprintln!("repetition {rep}/{}: UDP ring", a.reps);
        for &s in &sizes {
            let (sample, w) = sweep_size(&udp, s, output, true)?;
            samples.entry((System::UdpRing, s)).or_default().push(sample);
            *wrong.entry(s).or_default() += w;
        }
        for (sys, bed, launcher, what) in [
            (System::Mpi, &tb, &mpirun, "same fabric"),
            (System::MpiPlain, &plain, &plain_mpirun, "plain fabric"),
        ] {
            eprintln!("repetition {rep}/{}: OpenMPI, {what}", a.reps);
            for (s, sample, w) in mpi.run(bed, launcher, &group, min, max)? {
                samples.entry((sys, s)).or_default().push(sample);
                *wrong.entry(s).or_default() += w;
            }
        }
    }
    drop(udp);
    drop(floor);
    drop(netdam);
    let median = |sys: System, s: u64, f: fn(&Sample) -> f64| -> f64 {
        let mut v: Vec<f64> = samples
            .get(&(sys, s))
            .map(|v| v.iter().map(f).collect())
            .unwrap_or_default();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let bw = |s: u64, us: f64| busbw(s as f64 / us / 1e3, a.nodes);
    let rows: Vec<Row> = sizes
        .iter()
        .map(|&s| {
            let us = |sys| median(sys, s, |x| x.us);
            let cpu = |sys| median(sys, s, |x| x.cpu_ns) / s as f64;
            Row {
                bytes: s,
                netdam_us: us(System::Netdam),
                floor_us: us(System::NopFloor),
                udp_ring_us: us(System::UdpRing),
                mpi_us: us(System::Mpi),
                mpi_plain_us: us(System::MpiPlain),
                netdam_busbw_gbps: bw(s, us(System::Netdam)),
                floor_busbw_gbps: bw(s, us(System::NopFloor)),
                udp_ring_busbw_gbps: bw(s, us(System::UdpRing)),
                mpi_busbw_gbps: bw(s, us(System::Mpi)),
                mpi_plain_busbw_gbps: bw(s, us(System::MpiPlain)),
                netdam_cpu_ns_per_byte: cpu(System::Netdam),
                udp_ring_cpu_ns_per_byte: cpu(System::UdpRing),
                mpi_cpu_ns_per_byte: cpu(System::Mpi),
                mpi_plain_cpu_ns_per_byte: cpu(System::MpiPlain),
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

/// The benchmark's all-reduce of `bytes`: int32 sum, input at INPUT, the
/// output at `output`, the cells right after it.
fn int32_sum(bytes: u64, output: u64) -> Allreduce {
    Allreduce {
        rkey: RKEY,
        input_addr: INPUT,
        output_addr: output,
        cells_addr: (output + bytes).next_multiple_of(4096),
        count: bytes / 4,
        dtype: Dtype::I32,
        alu: Alu::Add,
    }
}

/// The skew comparison: per size, `reps` rounds of `iters_for` calls, each
/// call started by all members together (a barrier) and then either at once
/// or after each member's seeded random offset of 0 to `skew_us`; a call's
/// cost runs from the first member's start to the last member's return.
/// A member's offset is when it made its call, measured: a sleep of the
/// drawn offset ends 20 to 90 us after it here (timer slack, the timer's
/// wake-up), and that is the harness's time, not the call's. Prints the
/// medians and whether each skewed call kept within its largest offset plus
/// 1.2x the unskewed median.
fn skew_table(members: &[MemberThread<LocalNode>], sizes: &[u64], output: u64, reps: u32, skew_us: u64) -> Result<()> {
    use std::sync::{Arc, Barrier};
    let n = members.len();
    let mut rng = SEED;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    println!("all-reduce with members starting 0 to {skew_us} us apart, {n} nodes, int32 sum, median of the calls' costs (us)");
    println!(
        "{:>10} {:>12} {:>12} {:>14} {:>10} {:>8}",
        "size(B)", "together us", "skewed us", "skewed-offset", "bound us", "within"
    );
    for &bytes in sizes {
        let op = int32_sum(bytes, output);
        let mut together = Vec::new();
        let mut skewed = Vec::new();
        for _ in 0..reps * iters_for(bytes) {
            for skew in [false, true] {
                let offsets: Vec<u64> = (0..n).map(|_| if skew { next() % (skew_us + 1) } else { 0 }).collect();
                let barrier = Arc::new(Barrier::new(n));
                let pending: Vec<_> = members
                    .iter()
                    .zip(&offsets)
                    .map(|(m, &off)| {
                        let barrier = barrier.clone();
                        m.submit(move |c| -> Result<(Instant, Instant, Instant), String> {
                            barrier.wait();
                            let start = Instant::now();
                            std::thread::sleep(Duration::from_micros(off));
                            let called = Instant::now();
                            c.allreduce(&op).map_err(|e| e.to_string())?;
                            Ok((start, called, Instant::now()))
                        })
                    })
                    .collect();
                let mut spans = Vec::new();
                for rx in pending {
                    spans.push(rx.recv().context("member thread")?.map_err(anyhow::Error::msg)?);
                }
                let first = spans.iter().map(|s| s.0).min().expect("members");
                let last = spans.iter().map(|s| s.2).max().expect("members");
                let cost = (last - first).as_secs_f64() * 1e6;
                let latest_call = spans.iter().map(|s| s.1).max().expect("members");
                let largest = (latest_call - first).as_secs_f64() * 1e6;
                match skew {
                    false => together.push(cost),
                    true => skewed.push((cost, largest)),
                }
            }
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let base = med(&mut together);
        let within = skewed.iter().filter(|(c, o)| *c <= o + 1.2 * base).count();
        let mut costs: Vec<f64> = skewed.iter().map(|s| s.0).collect();
        let mut excess: Vec<f64> = skewed.iter().map(|(c, o)| c - o).collect();
        println!(
            "{bytes:>10} {base:>12.1} {:>12.1} {:>14.1} {:>10.1} {:>4}/{:<3}",
            med(&mut costs),
            med(&mut excess),
            1.2 * base,
            within,
            skewed.len()
        );
    }
    println!("within: skewed calls that cost at most their largest offset plus 1.2x the median without skew (the bound column is that 1.2x)");
    Ok(())
}

/// One member thread per test host, each with a collective on port `port`
/// over the node `open(i)` makes inside its namespace, chunked for `mtu`;
/// with `nop_hops`, the collective sends the ring's frames with every hop a NOP.
fn members<N, F, G>(
    tb: &Testbed,
    group: &[Ipv4Addr],
    port: u16,
    mtu: u32,
    nop_hops: bool,
    open: G,
) -> Result<Vec<MemberThread<N>>>
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
                mtu,
                nop_hops,
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

/// One size on every member: `warmups_for` untimed calls, timed iterations, the output checked
/// when `check`. The slowest member's mean time, the machine's CPU time per
/// all-reduce over member 0's timed calls, and the wrong elements of all.
fn sweep_size<N: MemberNode + 'static>(
    members: &[MemberThread<N>],
    bytes: u64,
    output: u64,
    check: bool,
) -> Result<(Sample, u64)> {
    let op = int32_sum(bytes, output);
    let iters = iters_for(bytes);
    let pending: Vec<_> = members
        .iter()
        .map(|m| {
            m.submit(move |c| -> Result<(f64, f64, u64), String> {
                for _ in 0..warmups_for(bytes) {
                    c.allreduce(&op).map_err(|e| e.to_string())?;
                }
                let mut total = 0.0;
                let cpu0 = machine_busy_ns();
                for _ in 0..iters {
                    total += c.allreduce(&op).map_err(|e| e.to_string())?.elapsed.as_secs_f64();
                }
                let cpu_ns = (machine_busy_ns() - cpu0) as f64 / iters as f64;
                if !check {
                    return Ok((total / iters as f64 * 1e6, cpu_ns, 0));
                }
                let e = c.plan(&op).map_err(|e| e.to_string())?.chunk_elems;
                let mut out = vec![0u8; bytes as usize];
                c.node().read_into(output, &mut out).map_err(|e| e.to_string())?;
                let n = c.group().members.len();
                Ok((
                    total / iters as f64 * 1e6,
                    cpu_ns,
                    inputs::count_wrong(SEED, n, Dtype::I32, Alu::Add, e, &out),
                ))
            })
        })
        .collect();
    let mut slowest: f64 = 0.0;
    let mut cpu_ns = f64::NAN;
    let mut wrong = 0;
    for (i, p) in pending.into_iter().enumerate() {
        let (t, cpu, w) = p
            .recv()
            .context("member thread")?
            .map_err(|e| anyhow::anyhow!("{bytes} bytes, member {i}: {e}"))?;
        slowest = slowest.max(t);
        if i == 0 {
            cpu_ns = cpu;
        }
        wrong += w;
    }
    Ok((Sample { us: slowest, cpu_ns }, wrong))
}

/// The MPI program, compiled with mpicc from bench/mpi/allreduce.c.
struct MpiProgram {
    exe: PathBuf,
}

impl MpiProgram {
    fn build() -> Result<MpiProgram> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let exe = root.join("../target/mpi-allreduce");
        mpi::mpicc(&[&root.join("mpi/allreduce.c")], &[], &exe)?;
        Ok(MpiProgram { exe })
    }

    /// Runs the sweep once with rank i in host i; (bytes, sample, wrong) per size.
    fn run(
        &self,
        tb: &Testbed,
        mpirun: &Mpirun,
        group: &[Ipv4Addr],
        min: u64,
        max: u64,
    ) -> Result<Vec<(u64, Sample, u64)>> {
        let mut cmd = mpirun.command(tb, group)?;
        cmd.arg(&self.exe).args([min.to_string(), max.to_string()]);
        let out = mpi::output_within_retry(&mut cmd, MPIRUN_LIMIT).context("running mpirun")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!("mpirun failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
        }
        stdout
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).with_context(|| format!("MPI output {l:?}"))?;
                let sample = Sample {
                    us: v["time_us"].as_f64().context("time_us")?,
                    cpu_ns: v["cpu_ns"].as_f64().context("cpu_ns")?,
                };
                Ok((
                    v["bytes"].as_u64().context("bytes")?,
                    sample,
                    v["wrong"].as_u64().context("wrong")?,
                ))
            })
            .collect()
    }
}

/// How long one mpirun of the whole sweep may take (about a minute here):
/// a benchmark must end by itself, whatever MPI does.
const MPIRUN_LIMIT: Duration = Duration::from_secs(300);

fn print_table(a: &Args, rows: &[Row]) {
    println!(
        "all-reduce, {} nodes, int32 sum, {} fabric, MTU {}, median of {} interleaved repetitions (time: the slowest member's mean, us; \
         mpi: OpenMPI on the same fabric, mpi-pl: on the plain bridge; ratios against OpenMPI's better; cpu: the machine's busy ns per byte)",
        a.nodes, a.fabric, a.mtu, a.reps
    );
    println!(
        "{:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>8} {:>8} {:>7} {:>7} {:>8} {:>6}",
        "size(B)",
        "netdam us",
        "floor us",
        "udp us",
        "mpi us",
        "mpi-pl us",
        "nd GB/s",
        "floor",
        "udp",
        "mpi",
        "mpi-pl",
        "bw nd/mpi",
        "t nd/mpi",
        "floor/mpi",
        "cpu nd",
        "cpu mpi",
        "cpu ratio",
        "#wrong"
    );
    for r in rows {
        println!(
            "{:>10} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>8.2}x {:>7.2}x {:>7.2}x {:>8.2} {:>7.2} {:>7.2}x {:>6}",
            r.bytes,
            r.netdam_us,
            r.floor_us,
            r.udp_ring_us,
            r.mpi_us,
            r.mpi_plain_us,
            r.netdam_busbw_gbps,
            r.floor_busbw_gbps,
            r.udp_ring_busbw_gbps,
            r.mpi_busbw_gbps,
            r.mpi_plain_busbw_gbps,
            r.mpi_best_us() / r.netdam_us,
            r.netdam_us / r.mpi_best_us(),
            r.mpi_best_us() / r.floor_us,
            r.netdam_cpu_ns_per_byte,
            r.mpi_best_cpu(),
            r.netdam_cpu_ns_per_byte / r.mpi_best_cpu(),
            r.wrong
        );
    }
    let verdict = |ok: bool| if ok { "met" } else { "not met" };
    let big: Vec<&Row> = rows.iter().filter(|r| r.bytes >= 1 << 20).collect();
    if let Some(worst) = big.iter().map(|r| r.mpi_best_us() / r.netdam_us).min_by(f64::total_cmp) {
        println!(
            "goal busbw >= 3x OpenMPI's better from 1 MiB up: lowest ratio {worst:.2}x ({})",
            verdict(worst >= 3.0)
        );
    }
    if let Some(floor) = big.iter().map(|r| r.mpi_best_us() / r.floor_us).min_by(f64::total_cmp) {
        println!(
            "  bound: NetDAM with every hop a NOP (no ALU, no memory): lowest ratio {floor:.2}x from 1 MiB up ({})",
            if floor >= 3.0 {
                "the goal is within the fabric's reach"
            } else {
                "moving the frames alone costs more than the goal allows: no ALU work can meet it on this fabric"
            }
        );
    }
    for small in [1024, 4096] {
        if let Some(r) = rows.iter().find(|r| r.bytes == small) {
            let ratio = r.netdam_us / r.mpi_best_us();
            println!(
                "goal {} KiB time <= 0.5x OpenMPI's better: {ratio:.2}x ({})",
                small / 1024,
                verdict(ratio <= 0.5)
            );
        }
    }
    let slower: Vec<u64> = rows
        .iter()
        .filter(|r| r.netdam_us >= r.udp_ring_us)
        .map(|r| r.bytes)
        .collect();
    println!(
        "goal faster than the UDP ring at every size: {} ({})",
        if slower.is_empty() {
            "every size".to_string()
        } else {
            format!("slower at {slower:?} bytes")
        },
        verdict(slower.is_empty())
    );
    if let Some(worst) = big
        .iter()
        .map(|r| r.netdam_cpu_ns_per_byte / r.mpi_best_cpu())
        .max_by(f64::total_cmp)
    {
        println!(
            "goal CPU per byte <= 0.5x OpenMPI's lower from 1 MiB up: highest ratio {worst:.2}x ({})",
            verdict(worst <= 0.5)
        );
    }
}

fn write_results(a: &Args, rows: &[Row]) -> Result<()> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let tag = format!("{}-{}", a.fabric, a.mtu);
    let json = a.out.join(format!("bench-allreduce-{tag}.json"));
    std::fs::write(&json, serde_json::to_string_pretty(rows)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let series = |name: &str, f: fn(&Row) -> f64| plot::Series {
        name: name.into(),
        points: rows.iter().map(|r| (r.bytes as f64, f(r))).collect(),
    };
    let svg = plot::svg(
        &format!(
            "all-reduce busbw, {} nodes, int32 sum, {} fabric, MTU {} (medians)",
            a.nodes, a.fabric, a.mtu
        ),
        "size (bytes)",
        "busbw (GB/s)",
        &[
            series("NetDAM (XDP)", |r| r.netdam_busbw_gbps),
            series("NetDAM, every hop a NOP (floor)", |r| r.floor_busbw_gbps),
            series("UDP ring (userspace)", |r| r.udp_ring_busbw_gbps),
            series("OpenMPI (TCP), same fabric", |r| r.mpi_busbw_gbps),
            series("OpenMPI (TCP), plain bridge", |r| r.mpi_plain_busbw_gbps),
        ],
    );
    let svg_path = a.out.join(format!("bench-allreduce-{tag}.svg"));
    std::fs::write(&svg_path, svg).with_context(|| format!("writing {}", svg_path.display()))?;
    eprintln!("results: {} and {}", json.display(), svg_path.display());
    Ok(())
}
