//! `netdam`: serve a NetDAM node on an interface, or talk to one.

mod afxdp;
mod client;
mod collective;
mod doctor;
mod local;
mod serve;

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};

use crate::{afxdp::*, client::*, collective::*, local::*, serve::*};

#[derive(Parser)]
#[command(
    name = "netdam",
    version,
    about = "NetDAM: memory with an ALU on the network side of a host, served by XDP",
    long_about = "NetDAM: memory with an ALU on the network side of a host, served by XDP.\n\n\
        `netdam serve` attaches the data path to an interface and keeps its memory in a pinned, \
        mmapable BPF map apart from application memory. The other commands are clients that \
        talk to a node over UDP (port 4793 by default) as PROTOCOL.md describes.\n\n\
        Logging: RUST_LOG=debug (or info, warn, trace). Exit codes: 0 ok, 1 error, 2 bad \
        arguments, 3 no answer from the node, 4 the node refused the request."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve NetDAM on an interface until Ctrl-C or SIGTERM, then detach.
    Serve(ServeArgs),
    /// Check this host (and an interface) before `serve`: ok / warn / fail, and the fix.
    Doctor(doctor::DoctorArgs),
    /// Send NOPs to a node and print round-trip times.
    Ping(PingArgs),
    /// Write a file into a node's NetDAM memory.
    Write(WriteArgs),
    /// Read a range of a node's NetDAM memory into a file.
    Read(ReadArgs),
    /// Combine a vector with a node's memory and print the result (memory unchanged).
    Reduce(VectorArgs),
    /// Combine a vector into a node's memory, element by element, atomically.
    Accumulate(VectorArgs),
    /// Atomically add to a u64 in a node's memory; prints the old value.
    FetchAdd(AtomicArgs),
    /// Atomically replace a u64 if it holds --expected; prints the old value.
    Cas(AtomicArgs),
    /// Atomically replace a u64; prints the old value.
    Swap(AtomicArgs),
    /// Print a local node's counters (requests by opcode and status, drops,
    /// and the frames of each receive queue: how RSS spreads the load).
    Stats(StatsArgs),
    /// Set (raise) a local node's readiness generation of a region: CHAIN hops
    /// on it run only for packets whose tag equals it (PROTOCOL.md section 6).
    Ready(ReadyArgs),
    /// Run ring all-reduces that the network does (PROTOCOL.md section 6); run it
    /// on every member of the group, each beside its own `netdam serve`.
    Allreduce(AllreduceArgs),
    /// Send a message to a node's AF_XDP receiver (MSG) and wait for its
    /// acknowledgement, or with --notify write it into memory and hand the
    /// receiver only the headers (WRITE_NOTIFY).
    Msg(MsgArgs),
    /// Receive what a local node hands to AF_XDP (MSG, WRITE_NOTIFY, header
    /// split) and print it, until --count frames, --timeout-ms or Ctrl-C.
    Recv(RecvArgs),
    /// Split ordinary UDP datagrams to a port of a local node (PROTOCOL.md
    /// section 9): the first --keep payload bytes reach the AF_XDP socket, the
    /// rest stays in a ring in NetDAM memory. Without --port, lists the ports.
    Split(SplitArgs),
    /// Remove a local node's pinned maps (its memory and counters are lost), and put back the kernel
    /// settings a killed `serve` of it left on (run it in the node's namespace).
    Unpin(PinDirArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    netdam_user::cli::run_to_exit(run(cli))
}

async fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Serve(a) => serve::serve(a).await,
        Cmd::Doctor(a) => doctor::doctor(a),
        Cmd::Ping(a) => client::ping(a).await,
        Cmd::Write(a) => client::write(a).await,
        Cmd::Read(a) => client::read(a).await,
        Cmd::FetchAdd(a) => client::fetch_add(a).await,
        Cmd::Cas(a) => client::cas(a).await,
        Cmd::Swap(a) => client::swap(a).await,
        Cmd::Reduce(a) => client::reduce(a).await,
        Cmd::Accumulate(a) => client::accumulate(a).await,
        Cmd::Stats(a) => local::stats(a),
        Cmd::Ready(a) => local::ready(a),
        Cmd::Allreduce(a) => tokio::task::spawn_blocking(move || collective::allreduce(a))
            .await
            .context("the all-reduce thread")?,
        Cmd::Msg(a) => client::msg(a).await,
        Cmd::Recv(a) => afxdp::recv(a).await,
        Cmd::Split(a) => afxdp::split(a),
        Cmd::Unpin(a) => local::unpin(a),
    }
}
