//! An unmodified third-party MPI benchmark on a testbed of N nodes, with
//! and without libnetdam_mpi, read from its own output: the OSU
//! micro-benchmarks' osu_allreduce (--osu-src) and/or IMB-MPI1 Allreduce
//! (--imb-src), built with mpicc from the published source the user
//! unpacked (no package registry this project reaches has either); without
//! them, MPICH's perf/allredtrace from Debian's mpich source package, whose
//! one MPI_DOUBLE the library hands to MPI, so its figure is what the
//! interposition costs on a call it does not take.
//!
//! Three runs per repetition, interleaved, medians reported:
//! - mpi: OpenMPI alone on the testbed whose nodes serve NetDAM (same fabric);
//! - netdam: the same with libnetdam_mpi preloaded into every rank
//!   (NETDAM_MPI_VERBOSE=1: its counts of offloaded and fallen-back calls);
//! - mpi-plain: OpenMPI on a second testbed of the plain fabric (the bridge,
//!   no XDP: TCP keeps GSO), its best here, as in `bench allreduce`.

use std::{collections::BTreeMap, net::Ipv4Addr, path::PathBuf};

use anyhow::{bail, ensure, Context as _, Result};
use netdam_lab::{
    mpi::{self, Mpirun, NetdamNodes, OffloadCounts, Preload},
    mpi_benchmarks::{Point, Program, Source},
    mpich_suite::DEFAULT_CACHE,
    plot,
    testbed::{Fabric, Testbed},
};
use netdam_tests::{netdam_bin, netdam_mpi_lib, require_root};
use serde::Serialize;

use crate::node::median;

const PREFIX: &str = "nbmc";
const PLAIN_PREFIX: &str = "nbmd";
const RKEY: u32 = 0xBE4D;

#[derive(clap::Args)]
pub struct Args {
    /// Source directory of the OSU micro-benchmarks (the published
    /// osu-micro-benchmarks tarball, unpacked): its osu_allreduce is built
    /// with mpicc and run. Without --osu-src and --imb-src: MPICH's
    /// perf/allredtrace (one MPI_DOUBLE, which the library leaves to MPI).
    #[arg(long)]
    osu_src: Option<PathBuf>,
    /// Source directory of the Intel MPI Benchmarks (the published
    /// mpi-benchmarks tarball, unpacked): its IMB-MPI1 is built with mpicc
    /// and mpicxx and runs Allreduce.
    #[arg(long)]
    imb_src: Option<PathBuf>,
    /// Reduce MPI_INT instead of the benchmark's MPI_FLOAT (IMB's
    /// -red_data_type int, OSU 7's -T mpi_int): the type `bench allreduce`
    /// runs, so that the library's figures compare with its ring's.
    #[arg(long)]
    int: bool,
    /// Ranks, one per testbed node.
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Smallest all-reduce in bytes (a power of two).
    #[arg(long, default_value_t = 4)]
    min_bytes: u64,
    /// Largest all-reduce in bytes (a power of two).
    #[arg(long, default_value_t = 1 << 20)]
    max_bytes: u64,
    /// Repetitions of the three runs (medians are reported).
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// MTU of every link of both testbeds.
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// libnetdam_mpi.so (default: $NETDAM_MPI_LIB, else beside the netdam binary).
    #[arg(long)]
    lib: Option<PathBuf>,
    /// Another setting of the library for every rank, NAME=VALUE (repeatable),
    /// e.g. NETDAM_MPI_CHECK_ARGS=1 or NETDAM_MIN_BYTES=4096 (docs/mpi.md).
    #[arg(long = "lib-env", value_parser = parse_setting)]
    lib_env: Vec<(String, String)>,
    /// Where MPICH's source package is kept (downloaded once through apt).
    #[arg(long, default_value = DEFAULT_CACHE)]
    cache: PathBuf,
    /// Where the JSON and the SVG plot go (and the benchmarks are built).
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Print the rows as JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum System {
    Mpi,
    Netdam,
    MpiPlain,
}

#[derive(Serialize)]
struct Row {
    benchmark: &'static str,
    bytes: u64,
    /// Medians over repetitions of the benchmark's own average time, us.
    mpi_us: f64,
    netdam_us: f64,
    mpi_plain_us: f64,
    /// netdam / mpi: the library against OpenMPI on the same testbed.
    netdam_over_mpi: f64,
    /// netdam / the better of mpi and mpi-plain.
    netdam_over_best: f64,
}

#[derive(Serialize)]
struct Report {
    benchmark: &'static str,
    version: String,
    datatype: &'static str,
    /// Over every rank of every library run.
    offloaded: u64,
    fallen_back: u64,
    rows: Vec<Row>,
}

pub fn run(a: Args) -> Result<()> {
    require_root();
    ensure!((2..=8).contains(&a.nodes), "--nodes {}: 2 to 8", a.nodes);
    ensure!(
        a.min_bytes.is_power_of_two() && a.max_bytes.is_power_of_two() && a.min_bytes <= a.max_bytes,
        "--min-bytes {} --max-bytes {}: powers of two, min <= max",
        a.min_bytes,
        a.max_bytes
    );
    ensure!(a.reps >= 1, "--reps 0: at least one");
    let lib = a.lib.clone().unwrap_or_else(netdam_mpi_lib);
    ensure!(
        lib.is_file(),
        "{} is missing: build libnetdam_mpi (`cargo xtask build`) or give --lib",
        lib.display()
    );
    let mut sources: Vec<Source> = a.osu_src.iter().map(|d| Source::Osu(d.clone())).collect();
    sources.extend(a.imb_src.iter().map(|d| Source::Imb(d.clone())));
    if sources.is_empty() {
        eprintln!(
            "no --osu-src or --imb-src: MPICH's perf/allredtrace (one MPI_DOUBLE per call, which libnetdam_mpi leaves \
             to MPI: the figure is the interposition's cost, not NetDAM's)"
        );
        sources.push(Source::MpichTrace(a.cache.clone()));
    }
    let build_dir = a.out.join("mpi-build");
    let programs: Vec<Program> = sources
        .iter()
        .map(|s| {
            let p = Program::build(s, &build_dir).with_context(|| format!("building {s}"))?;
            Ok(if a.int { p.reducing_int()? } else { p })
        })
        .collect::<Result<_>>()?;
    let mem = (2 * a.max_bytes + (1 << 20)).max(4 << 20).next_multiple_of(64 << 10);
    let tb = Testbed::up_on(PREFIX, a.nodes, a.mtu, Fabric::Xdp)?;
    let plain = Testbed::up_on(PLAIN_PREFIX, a.nodes, a.mtu, Fabric::Plain)?;
    let nodes = NetdamNodes::serve(&tb, &netdam_bin(), RKEY, mem, &["--mode", "native"])?;
    let group: Vec<Ipv4Addr> = tb.hosts.iter().map(|h| h.ip).collect();
    let plain_group: Vec<Ipv4Addr> = plain.hosts.iter().map(|h| h.ip).collect();
    let mut settings = nodes.settings();
    settings.push(("NETDAM_MTU", a.mtu.to_string()));
    settings.push(("NETDAM_MPI_VERBOSE", "1".into()));
    settings.extend(a.lib_env.iter().map(|(n, v)| (n.as_str(), v.clone())));
    let preload = Preload::of_hosts(&tb, &group, &lib, &settings)?;
    let mpirun = Mpirun::new(&tb)?;
    let plain_mpirun = Mpirun::new(&plain)?;
    let mut reports = Vec::new();
    for p in &programs {
        let args = p.args(a.min_bytes, a.max_bytes, a.nodes);
        let mut samples: BTreeMap<(System, u64), Vec<f64>> = BTreeMap::new();
        let mut counts = OffloadCounts::default();
        let mut version = p.version.clone();
        for rep in 1..=a.reps {
            for (sys, bed, launcher, hosts, what) in [
                (System::Mpi, &tb, &mpirun, &group, "OpenMPI alone, same fabric"),
                (System::Netdam, &tb, &mpirun, &group, "with libnetdam_mpi"),
                (
                    System::MpiPlain,
                    &plain,
                    &plain_mpirun,
                    &plain_group,
                    "OpenMPI alone, plain fabric",
                ),
            ] {
                eprintln!("{} repetition {rep}/{}: {what}", p.name(), a.reps);
                let mut cmd = launcher.command(bed, hosts)?;
                // OpenMPI's TCP connects on first use: done in MPI_Init instead,
                // so that allredtrace's first of 100 calls does not time it (and
                // the library's own setup in MPI_Init does not spare it).
                cmd.args(["--mca", "mpi_preconnect_mpi", "1"]);
                if sys == System::Netdam {
                    cmd.arg(preload.path());
                }
                cmd.arg(&p.exe).args(&args);
                let out = mpi::output_within_retry(&mut cmd, p.run_limit())
                    .with_context(|| format!("{}: mpirun", p.name()))?;
                let stdout = String::from_utf8_lossy(&out.stdout);
                let stderr = String::from_utf8_lossy(&out.stderr);
                if !out.status.success() {
                    bail!("{} ({what}) failed: {}\n{stdout}{stderr}", p.name(), out.status);
                }
                if sys == System::Netdam {
                    counts += OffloadCounts::parse(&format!("{stdout}{stderr}"))
                        .with_context(|| format!("{}: no NETDAM_MPI_VERBOSE counts in its output", p.name()))?;
                }
                version = p.version_in(&stdout).or(version);
                for Point { bytes, avg_us } in p.parse(&stdout)? {
                    samples.entry((sys, bytes)).or_default().push(avg_us);
                }
            }
        }
        let version = version.unwrap_or_else(|| "(no version in its output)".into());
        reports.push(report(p, version, &samples, counts));
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        print_tables(&a, &reports);
    }
    write_results(&a, &reports)
}

fn parse_setting(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if name.starts_with("NETDAM_") && !name.contains(char::is_whitespace) => {
            Ok((name.to_string(), value.to_string()))
        }
        _ => Err(format!("{s:?}: NETDAM_NAME=VALUE")),
    }
}

fn report(p: &Program, version: String, samples: &BTreeMap<(System, u64), Vec<f64>>, counts: OffloadCounts) -> Report {
    let sizes: Vec<u64> = samples
        .keys()
        .filter(|(s, _)| *s == System::Mpi)
        .map(|(_, b)| *b)
        .collect();
    let rows = sizes
        .into_iter()
        .map(|bytes| {
            let us = |sys| samples.get(&(sys, bytes)).map_or(f64::NAN, |v| median(v));
            let (mpi_us, netdam_us, mpi_plain_us) = (us(System::Mpi), us(System::Netdam), us(System::MpiPlain));
            Row {
                benchmark: p.name(),
                bytes,
                mpi_us,
                netdam_us,
                mpi_plain_us,
                netdam_over_mpi: netdam_us / mpi_us,
                netdam_over_best: netdam_us / mpi_us.min(mpi_plain_us),
            }
        })
        .collect();
    Report {
        benchmark: p.name(),
        version,
        datatype: p.datatype,
        offloaded: counts.offloaded,
        fallen_back: counts.fallen_back,
        rows,
    }
}

fn print_tables(a: &Args, reports: &[Report]) {
    for r in reports {
        println!(
            "{} ({}, {}, MPI_SUM), {} ranks on {} testbed nodes, MTU {}, median of {} interleaved repetitions of its own \
             average time (us); mpi: OpenMPI alone on the NetDAM testbed, netdam: the same with libnetdam_mpi, \
             mpi-pl: OpenMPI on the plain bridge; libnetdam_mpi took {} call(s) and left {} to MPI",
            r.benchmark,
            r.version,
            r.datatype,
            a.nodes,
            a.nodes,
            a.mtu,
            a.reps,
            r.offloaded,
            r.fallen_back
        );
        println!(
            "{:>10} {:>11} {:>11} {:>11} {:>12} {:>12}",
            "size(B)", "mpi us", "netdam us", "mpi-pl us", "netdam/mpi", "netdam/best"
        );
        for row in &r.rows {
            println!(
                "{:>10} {:>11.2} {:>11.2} {:>11.2} {:>11.2}x {:>11.2}x",
                row.bytes, row.mpi_us, row.netdam_us, row.mpi_plain_us, row.netdam_over_mpi, row.netdam_over_best
            );
        }
        println!();
    }
}

fn write_results(a: &Args, reports: &[Report]) -> Result<()> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let json = a.out.join("bench-mpi.json");
    std::fs::write(&json, serde_json::to_string_pretty(reports)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let mut series = Vec::new();
    for r in reports {
        // The plot's x axis is logarithmic: IMB's 0-byte row stays in the JSON.
        let line = |name: &str, f: fn(&Row) -> f64| plot::Series {
            name: format!("{name}, {}", r.benchmark),
            points: r
                .rows
                .iter()
                .filter(|x| x.bytes > 0)
                .map(|x| (x.bytes as f64, f(x)))
                .collect(),
        };
        series.push(line("OpenMPI, same fabric", |x| x.mpi_us));
        series.push(line("libnetdam_mpi", |x| x.netdam_us));
        series.push(line("OpenMPI, plain bridge", |x| x.mpi_plain_us));
    }
    let svg = plot::svg(
        &format!(
            "MPI all-reduce benchmarks, {} ranks, MTU {}, with and without libnetdam_mpi (medians)",
            a.nodes, a.mtu
        ),
        "size (bytes)",
        "average time (us)",
        &series,
    );
    let svg_path = a.out.join("bench-mpi.svg");
    std::fs::write(&svg_path, svg).with_context(|| format!("writing {}", svg_path.display()))?;
    eprintln!("results: {} and {}", json.display(), svg_path.display());
    Ok(())
}
