//! `netdam-bench`: benchmarks of NetDAM-XDP (run by `cargo xtask bench`).
//!
//! `allreduce`: the in-network all-reduce against OpenMPI and a userspace
//! UDP ring on one testbed (`allreduce.rs`).
//!
//! `node`: WRITE throughput and READ latency of one node against the
//! XDP_DROP ceiling and a userspace server (`node.rs`).
//!
//! `client`: `Client` write and read of 64 MiB against the node's WRITE
//! ceiling at the client's request size (`client.rs`).
//!
//! `fpga`: the HLS port's C engine beside the XDP program (`fpga.rs`).
//!
//! `msg`: MSG delivery into AF_XDP against recvmmsg, and the bytes
//! WRITE_NOTIFY hands the host (`msg.rs`, on the memory-wall rig).
//!
//! `mpi`: an unmodified third-party MPI benchmark (osu_allreduce, IMB-MPI1
//! Allreduce from the user's source, else MPICH's perf/allredtrace) with and
//! without libnetdam_mpi (`mpi_clients.rs`).
//!
//! `xdp-ops`: the cost of each operation inside XDP, measured with
//! BPF_PROG_TEST_RUN on this CPU. Each run is its own syscall with repeat 1
//! (with repeat > 1 the kernel reuses the buffer, and an answered request
//! would come back as its own response); the figure is the median of the
//! kernel-measured durations, so syscall overhead is not in it.

mod allreduce;
mod client;
mod fpga;
mod mpi_clients;
mod msg;
mod node;
mod udp_node;

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use aya::programs::{TestRun, TestRunOptions};
use clap::{Parser, Subcommand};
use netdam_common::{
    frame::netdam_frame,
    wire::{flags, Alu, Dtype},
    NetdamHdr, Opcode,
};
use netdam_tests::progrun::{load, spec, CLIENT, NODE, RKEY_RW, RW};
use serde::Serialize;

#[derive(Parser)]
#[command(name = "netdam-bench", about = "Benchmarks of NetDAM-XDP")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// All-reduce, int32 sum: NetDAM vs OpenMPI (TCP) vs the same ring in userspace over UDP.
    Allreduce(allreduce::Args),
    /// A third-party MPI benchmark (osu_allreduce with --osu-src, IMB-MPI1 Allreduce with --imb-src, else
    /// MPICH's perf/allredtrace) with and without libnetdam_mpi, and OpenMPI on the plain fabric.
    Mpi(mpi_clients::Args),
    /// One node: WRITE 1 KiB throughput against the XDP_DROP ceiling and a userspace
    /// server, READ 64 B latency against the userspace server.
    Node(node::Args),
    /// 64 MiB WRITE and READ through the client against the node's WRITE ceiling at the same request size.
    Client(client::Args),
    /// The HLS port's C engine beside the XDP program: NOP, WRITE 1 KiB, ACCUMULATE 1 KiB.
    Fpga(fpga::Args),
    /// MSG into AF_XDP vs recvmmsg (64 B, 1 KiB); host bytes per 1 KiB WRITE_NOTIFY vs the socket.
    Msg(msg::Args),
    /// ns per packet of each op inside XDP (BPF_PROG_TEST_RUN), medians.
    XdpOps {
        /// Runs per op.
        #[arg(long, default_value_t = 20_000)]
        runs: u32,
        /// Also write the results as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

/// One benchmarked request.
struct Case {
    name: String,
    frame: Vec<u8>,
    payload: usize,
    /// Zero the target memory before each run.
    zero_memory: bool,
    /// Give each run a new seq (non-idempotent ops, which repeat otherwise).
    fresh_seq: bool,
}

impl Case {
    fn new(name: &str, frame: Vec<u8>, payload: usize) -> Case {
        Case {
            name: name.to_string(),
            frame,
            payload,
            zero_memory: false,
            fresh_seq: false,
        }
    }
}

#[derive(Serialize)]
struct Row {
    op: String,
    payload_bytes: usize,
    median_ns: u64,
    p90_ns: u64,
    /// median / median of the row named in `baseline`.
    ratio: Option<f64>,
    baseline: Option<String>,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    netdam_lab::interrupt::clean_up_on_signals("netdam-bench").context("watching for SIGINT and SIGTERM")?;
    match cli.cmd {
        Cmd::XdpOps { runs, json } => xdp_ops(runs, json),
        Cmd::Allreduce(a) => allreduce::run(a),
        Cmd::Mpi(a) => mpi_clients::run(a),
        Cmd::Node(a) => node::run(a),
        Cmd::Client(a) => client::run(a),
        Cmd::Msg(a) => msg::run(a),
        Cmd::Fpga(a) => fpga::run(a),
    }
}

fn vector(op: Opcode, dtype: Dtype, alu: Alu, len: usize) -> Vec<u8> {
    let mut h = NetdamHdr::request(op);
    h.dtype = dtype as u8;
    h.alu = alu as u8;
    h.set_rkey(RKEY_RW);
    h.set_addr(RW.base);
    h.set_len(len as u16);
    let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
    netdam_frame(&CLIENT, &NODE, &h, &payload)
}

fn plain(op: Opcode, len: u16, payload: usize, ack: bool) -> Vec<u8> {
    let mut h = NetdamHdr::request(op);
    h.set_rkey(RKEY_RW);
    h.set_addr(RW.base);
    h.set_len(len);
    if ack {
        h.flags = flags::ACK_REQ;
    }
    netdam_frame(&CLIENT, &NODE, &h, &vec![0x5A; payload])
}

/// Median and p90 of the kernel-measured ns of `runs` BPF_PROG_TEST_RUNs of case `c`.
fn measure(node: &netdam_user::Node, c: &mut Case, runs: u32, seq: &mut u32) -> Result<(u64, u64)> {
    // The NetDAM header's seq field: after Ethernet, IPv4 and UDP, at header offset 8.
    const SEQ_AT: usize = 14 + 20 + 8 + 8;
    let zeros = vec![0u8; 1024];
    let mut out = vec![0u8; c.frame.len() + 256];
    let mut ns: Vec<u64> = Vec::with_capacity(runs as usize);
    for _ in 0..runs {
        // Both outside the timed run.
        if c.zero_memory {
            node.memory().write(RW.base, &zeros)?;
        }
        if c.fresh_seq {
            *seq = seq.wrapping_add(1);
            c.frame[SEQ_AT..SEQ_AT + 4].copy_from_slice(&seq.to_be_bytes());
        }
        let opts = TestRunOptions {
            data_in: Some(&c.frame[..]),
            data_out: Some(&mut out),
            ..Default::default()
        };
        let r = node
            .program()
            .test_run(opts)
            .with_context(|| format!("BPF_PROG_TEST_RUN of {}", c.name))?;
        ns.push(r.duration.as_nanos() as u64);
    }
    ns.sort_unstable();
    Ok((ns[ns.len() / 2], ns[ns.len() * 9 / 10]))
}

fn xdp_ops(runs: u32, json: Option<PathBuf>) -> Result<()> {
    let node = load(&spec());
    let mut cases = vec![
        Case::new("NOP", plain(Opcode::Nop, 0, 0, false), 0),
        Case::new("WRITE 1 KiB", plain(Opcode::Write, 1024, 1024, false), 1024),
        Case::new("READ 1 KiB", plain(Opcode::Read, 1024, 1024, false), 1024),
        // Through the at-most-once window: a new seq every run.
        Case {
            fresh_seq: true,
            ..Case::new("FETCH_ADD", plain(Opcode::FetchAdd, 8, 8, false), 8)
        },
    ];
    for d in Dtype::ALL {
        let name = format!("REDUCE 1 KiB {} ADD", d.name());
        cases.push(Case::new(&name, vector(Opcode::Reduce, *d, Alu::Add, 1024), 1024));
    }
    for d in Dtype::ALL {
        let name = format!("ACCUMULATE 1 KiB {} ADD", d.name());
        cases.push(Case {
            fresh_seq: true,
            ..Case::new(&name, vector(Opcode::Accumulate, *d, Alu::Add, 1024), 1024)
        });
    }
    // MAX into zeroed memory changes every element, so every run pays for
    // every compare-and-swap.
    for d in Dtype::ALL {
        let name = format!("ACCUMULATE 1 KiB {} MAX", d.name());
        cases.push(Case {
            zero_memory: true,
            ..Case::new(&name, vector(Opcode::Accumulate, *d, Alu::Max, 1024), 1024)
        });
    }
    let mut rows = Vec::new();
    let mut seq: u32 = 1;
    for c in &mut cases {
        eprint!("  {} ...", c.name);
        let (median_ns, p90_ns) = measure(&node, c, runs, &mut seq)?;
        eprintln!(" {median_ns} ns");
        rows.push(Row {
            op: c.name.clone(),
            payload_bytes: c.payload,
            median_ns,
            p90_ns,
            ratio: None,
            baseline: None,
        });
    }
    // Each row of an element type against the i32 row of the same op.
    let medians: Vec<(String, u64)> = rows.iter().map(|r| (r.op.clone(), r.median_ns)).collect();
    for r in rows.iter_mut() {
        let Some(base) = [" i64 ", " u32 ", " u64 ", " f32 "]
            .iter()
            .find(|t| r.op.contains(*t))
            .map(|t| r.op.replace(t, " i32 "))
        else {
            continue;
        };
        if let Some((_, b)) = medians.iter().find(|(op, _)| *op == base) {
            r.ratio = Some(r.median_ns as f64 / (*b).max(1) as f64);
            r.baseline = Some(base);
        }
    }
    println!("\nXDP op cost, BPF_PROG_TEST_RUN, {runs} runs each (kernel-measured ns per packet)");
    println!(
        "{:<28} {:>8} {:>10} {:>10}  ratio",
        "op", "payload", "median ns", "p90 ns"
    );
    for r in &rows {
        let ratio = match (&r.ratio, &r.baseline) {
            (Some(x), Some(b)) => format!("{x:.2}x {b}"),
            _ => String::new(),
        };
        println!(
            "{:<28} {:>8} {:>10} {:>10}  {}",
            r.op, r.payload_bytes, r.median_ns, r.p90_ns, ratio
        );
    }
    if let Some(path) = json {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("\nwritten: {}", path.display());
    }
    Ok(())
}
