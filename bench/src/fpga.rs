//! The HLS port's C engine beside the XDP program, in one run: NOP, WRITE
//! 1 KiB and ACCUMULATE 1 KiB i32 ADD. The C engine's figure is its speed
//! as C on this CPU (`fpga-port/tb/bench.c`), not a hardware figure; beside
//! it the cycles its loop structure implies on the card at II=1 (an
//! estimate from the source), and the XDP program's kernel-measured ns per
//! packet (BPF_PROG_TEST_RUN, as `xdp-ops`).

use std::{path::PathBuf, process::Command};

use anyhow::{bail, Context as _, Result};
use netdam_common::{
    wire::{Alu, Dtype},
    Opcode,
};
use netdam_tests::progrun::{load, spec};
use serde::{Deserialize, Serialize};

use crate::{measure, plain, vector, Case};

#[derive(clap::Args)]
pub struct Args {
    /// The C engine's benchmark binary (`make -C fpga-port build/bench`).
    #[arg(long, default_value = "fpga-port/build/bench")]
    c_bench: PathBuf,
    /// BPF_PROG_TEST_RUN runs per XDP op.
    #[arg(long, default_value_t = 20_000)]
    runs: u32,
    /// Also write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Deserialize)]
struct CRow {
    op: String,
    ns_per_packet: f64,
    loop_cycles_at_ii1: u32,
}

#[derive(Serialize)]
struct Row {
    op: String,
    c_ns_per_packet: f64,
    c_packets_per_s: f64,
    /// Estimate from the loop structure, not synthesis.
    card_cycles_at_ii1: u32,
    xdp_median_ns: u64,
    xdp_packets_per_s: f64,
    /// C engine ns / XDP ns.
    c_over_xdp: f64,
}

pub fn run(a: Args) -> Result<()> {
    let out = Command::new(&a.c_bench).output().with_context(|| {
        format!(
            "running {} (build it with `make -C fpga-port build/bench`)",
            a.c_bench.display()
        )
    })?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            a.c_bench.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let c_rows: Vec<CRow> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .context("the C bench's JSON lines")?;
    let node = load(&spec());
    let mut cases = [
        Case::new("NOP", plain(Opcode::Nop, 0, 0, false), 0),
        Case::new("WRITE 1 KiB", plain(Opcode::Write, 1024, 1024, false), 1024),
        Case {
            fresh_seq: true,
            ..Case::new(
                "ACCUMULATE 1 KiB i32 ADD",
                vector(Opcode::Accumulate, Dtype::I32, Alu::Add, 1024),
                1024,
            )
        },
    ];
    let mut seq = 1;
    let mut rows = Vec::new();
    for c in &mut cases {
        let Some(cr) = c_rows.iter().find(|r| r.op == c.name) else {
            bail!("the C bench did not measure {}", c.name);
        };
        let (xdp, _) = measure(&node, c, a.runs, &mut seq)?;
        rows.push(Row {
            op: c.name.clone(),
            c_ns_per_packet: cr.ns_per_packet,
            c_packets_per_s: 1e9 / cr.ns_per_packet,
            card_cycles_at_ii1: cr.loop_cycles_at_ii1,
            xdp_median_ns: xdp,
            xdp_packets_per_s: 1e9 / xdp.max(1) as f64,
            c_over_xdp: cr.ns_per_packet / xdp.max(1) as f64,
        });
    }
    println!("The HLS port's C engine (C on this CPU, not hardware) beside the XDP program (BPF_PROG_TEST_RUN)");
    println!(
        "{:<26} {:>10} {:>12} {:>10} {:>12} {:>9} {:>18}",
        "op", "C ns/pkt", "C pkt/s", "XDP ns", "XDP pkt/s", "C / XDP", "card cycles, II=1"
    );
    for r in &rows {
        println!(
            "{:<26} {:>10.1} {:>12.0} {:>10} {:>12.0} {:>8.2}x {:>18}",
            r.op,
            r.c_ns_per_packet,
            r.c_packets_per_s,
            r.xdp_median_ns,
            r.xdp_packets_per_s,
            r.c_over_xdp,
            r.card_cycles_at_ii1
        );
    }
    println!("card cycles: trip counts of the per-word loops (one byte per copy step, one element per ALU step) at II=1, from the source; a target, not a synthesis result");
    if let Some(path) = a.json {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, serde_json::to_string_pretty(&rows)?)?;
        println!("written: {}", path.display());
    }
    Ok(())
}
