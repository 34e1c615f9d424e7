//! `netdam allreduce`: one member of the in-network ring all-reduce.

use std::{net::Ipv4Addr, time::Duration};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use indicatif::ProgressBar;
use netdam_common::wire::{Alu, Dtype, DEFAULT_PORT};
use netdam_user::{
    args::{parse_alu, parse_dtype, parse_group, parse_number, parse_rkey, parse_size},
    collective::{
        inputs,
        table::{self, MemberRow},
        Allreduce, Collective, CollectiveConfig, Group,
    },
    controller::LocalNode,
};

use crate::local::*;

#[derive(Args)]
#[command(
    after_help = "Every member's memory holds, at the same addresses: the sync area (8 bytes per member), \
    the input and the output, all inside region --rkey with READ, WRITE and ATOMIC (rwa). Without --check the \
    input is whatever the host placed there (e.g. through the node's mmap); with --check every member writes \
    inputs derived from --seed, and counts the result's elements that differ from the ring's (PROTOCOL.md section 6 \
    fixes the f32 order). Prints one nccl-tests row per run."
)]
pub(crate) struct AllreduceArgs {
    /// The members' IPv4 addresses in group order (2 to 8), e.g. 198.18.0.1,198.18.0.2,198.18.0.3.
    #[arg(long, value_parser = parse_group)]
    pub(crate) group: std::vec::Vec<Ipv4Addr>,
    #[command(flatten)]
    pub(crate) local: LocalArgs,
    /// Key of the region the input, output and sync area lie in (hex or decimal).
    #[arg(long, value_parser = parse_rkey)]
    pub(crate) rkey: u32,
    /// Elements of the vector.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) count: u64,
    /// Element type: i32, u32, i64, u64, f32.
    #[arg(long, value_parser = parse_dtype, default_value = "i32")]
    pub(crate) dtype: Dtype,
    /// Operator: sum, min, max, and, or, xor (the bitwise ones not on f32).
    #[arg(long, value_parser = parse_alu, default_value = "sum")]
    pub(crate) op: Alu,
    /// Timed all-reduces.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) iters: u32,
    /// Untimed all-reduces before them.
    #[arg(long, default_value_t = 0)]
    pub(crate) warmup: u32,
    /// Write seeded inputs and count the wrong elements of the result.
    #[arg(long)]
    pub(crate) check: bool,
    /// Seed of the --check inputs (the same on every member).
    #[arg(long, default_value_t = 1, value_parser = parse_number)]
    pub(crate) seed: u64,
    /// Address of the sync area (8 bytes per member, 8-aligned).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    pub(crate) sync_addr: u64,
    /// Address of the input [default: 4KiB].
    #[arg(long, value_parser = parse_size, default_value = "4KiB")]
    pub(crate) input_addr: u64,
    /// Address of the output [default: right after the input, 4KiB-aligned].
    #[arg(long, value_parser = parse_size)]
    pub(crate) output_addr: Option<u64>,
    /// Address of the cell area: a completion cell and room for a held
    /// partial per chunk, about the size of the vector (docs/collective.md).
    /// Keep it at one address, apart from every input and output, when runs
    /// of other counts follow each other [default: right after the output,
    /// 4KiB-aligned].
    #[arg(long, value_parser = parse_size)]
    pub(crate) cells_addr: Option<u64>,
    /// UDP port P of the members.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub(crate) port: u16,
    /// IP MTU of the group's paths, which fixes the chunking [default: the node's].
    #[arg(long, value_parser = clap::value_parser!(u32).range(100..=9216))]
    pub(crate) mtu: Option<u32>,
    /// Chunks in flight (1..1023) [default: 128 / members].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..1024))]
    pub(crate) window: Option<u16>,
    /// Milliseconds to wait for a chunk's answer before resending it.
    #[arg(long, default_value_t = 200)]
    pub(crate) timeout_ms: u64,
    /// Resends of a chunk before giving up.
    #[arg(long, default_value_t = 10)]
    pub(crate) retries: u32,
    /// Seconds to wait for the other members (to start, and to finish their chunks).
    #[arg(long, default_value_t = 30)]
    pub(crate) patience: u64,
    /// Send the chunks a batch at a time through the node's injector
    /// (BPF_PROG_TEST_RUN with live frames) instead of one system call each
    /// through a UDP socket. Slower on Linux 6.18: see docs/collective.md.
    #[arg(long, conflicts_with = "afxdp_tx")]
    pub(crate) inject: bool,
    /// Send the chunks as frames through an AF_XDP socket's TX ring (a batch
    /// per system call) instead of the UDP socket. Not beside `netdam recv`
    /// on the same node (one AF_XDP socket per queue). See docs/collective.md.
    #[arg(long)]
    pub(crate) afxdp_tx: bool,
    /// Benchmark the fabric's floor: send the ring's frames with every hop a
    /// NOP, so that no node reduces or writes anything (the output is not
    /// written). Its time is what moving the frames alone costs here.
    #[arg(long, conflicts_with = "check")]
    pub(crate) nop_hops: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn allreduce(a: AllreduceArgs) -> Result<()> {
    if a.dtype == Dtype::F32 && a.op.is_bitwise() {
        bail!(
            "--op {} is bitwise: it is defined for integer dtypes only; use sum, min or max with f32",
            table::redop(a.op)
        );
    }
    let dir = a.local.dir();
    let node = LocalNode::open(&dir).with_context(|| format!("opening the node pinned in {}", dir.display()))?;
    let mtu = a.mtu.unwrap_or(node.config.mtu);
    let width = a.dtype.width() as u64;
    let bytes = a
        .count
        .checked_mul(width)
        .context("--count x the element width overflows")?;
    let output_addr = a
        .output_addr
        .unwrap_or_else(|| (a.input_addr + bytes).next_multiple_of(4096));
    let cells_addr = a
        .cells_addr
        .unwrap_or_else(|| (output_addr + bytes).next_multiple_of(4096));
    let op = Allreduce {
        rkey: a.rkey,
        input_addr: a.input_addr,
        output_addr,
        cells_addr,
        count: a.count,
        dtype: a.dtype,
        alu: a.op,
    };
    let cfg = CollectiveConfig {
        mtu,
        window: a.window.map_or(0, usize::from),
        timeout: Duration::from_millis(a.timeout_ms),
        retries: a.retries,
        patience: Duration::from_secs(a.patience),
        sync_addr: a.sync_addr,
        inject: a.inject,
        afxdp_tx: a.afxdp_tx,
        nop_hops: a.nop_hops,
    };
    let group = Group {
        members: a.group.clone(),
        port: a.port,
    };
    let mut coll = Collective::new(node, group, cfg)?;
    let plan = coll.plan(&op)?;
    let rank = coll.rank();
    let n = a.group.len();
    if a.check {
        let mut input = vec![0u8; bytes as usize];
        inputs::member_input(a.seed, rank, a.dtype, 0, &mut input);
        coll.node().memory().write(op.input_addr, &input)?;
    }
    let total = a.warmup + a.iters;
    let pb = if total >= 20 && !a.json {
        ProgressBar::new(total as u64)
    } else {
        ProgressBar::hidden()
    };
    let mut times = Vec::new();
    let mut reports = Vec::new();
    for i in 0..total {
        let r = coll.allreduce(&op)?;
        if i >= a.warmup {
            times.push(r.elapsed.as_secs_f64() * 1e6);
        }
        reports.push(r);
        pb.inc(1);
    }
    pb.finish_and_clear();
    let wrong = if a.check {
        let out = coll.node().memory().read(op.output_addr, bytes as usize)?;
        Some(inputs::count_wrong(a.seed, n, a.dtype, a.op, plan.chunk_elems, &out))
    } else {
        None
    };
    let time_us = times.iter().sum::<f64>() / times.len() as f64;
    let algbw = bytes as f64 / time_us / 1e3;
    let last = reports.last().expect("at least one iteration");
    let row = MemberRow {
        member: coll.node().ipv4(),
        rank,
        members: n,
        bytes,
        count: a.count,
        dtype: a.dtype.name().to_string(),
        op: table::redop(a.op).to_string(),
        iters: a.iters,
        time_us,
        times_us: times,
        algbw_gbps: algbw,
        busbw_gbps: table::busbw(algbw, n),
        wrong,
        chunks: last.chunks,
        own_chunks: last.own_chunks,
        resent: reports.iter().map(|r| r.resent).sum(),
        not_ready: reports.iter().map(|r| r.not_ready).sum(),
        held: reports.iter().map(|r| r.held).sum(),
        continued: reports.iter().map(|r| r.continued).sum(),
        repaired: reports.iter().map(|r| r.repaired).sum(),
        generations: (reports[0].generation, last.generation),
        transmit: coll.transmit(),
    };
    if a.json {
        println!("{}", serde_json::to_string(&row)?);
    } else {
        print!("{}", table::header());
        println!("{}", table::Row::from(&row).line());
    }
    if let Some(w) = row.wrong.filter(|w| *w > 0) {
        bail!(
            "{w} element(s) of the result differ from the ring's (member {}, rank {rank})",
            row.member
        );
    }
    Ok(())
}
