//! `netdam`: serve a NetDAM node on an interface, or talk to one.

use std::{net::Ipv4Addr, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::{bail, Context as _, Result};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use netdam_common::{
    wire::{Alu, Dtype, DEFAULT_PORT},
    Region,
};
use netdam_user::{
    afxdp::{Delivery, Endpoint, EndpointConfig},
    args::{
        format_values, parse_alu, parse_dtype, parse_group, parse_number, parse_region, parse_rkey, parse_size,
        parse_values, perm_letters,
    },
    collective::{
        inputs,
        sweep::{self, SweepSpec},
        table::{self, MemberRow},
        Allreduce, Collective, CollectiveConfig, Group, TxPath,
    },
    controller::{
        keys::{self, KeyOrigin, RegionArg},
        neighbours, pins,
        split::{RingSpec, SplitTable},
        sysctls, AttachMode, Interface, LocalNode, Node, NodeSpec, WindowSweep,
    },
    memwall::{self, MemwallConfig},
    plot,
    stats::{self, Stats},
    testbed::{Chaos, Fabric, Testbed},
    Client, ClientConfig, ClientError,
};
use tokio::{io::unix::AsyncFd, signal::unix::SignalKind};

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
    /// Print a local node's counters (requests by opcode and status, drops).
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
    /// Benchmarks a user runs on their own host (needs root; builds its own testbed).
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Build, show or remove the namespace testbed (test hosts joined by an XDP switch or a bridge; needs root).
    #[command(subcommand)]
    Testbed(TestbedCmd),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// The seed's DDIO and memory-wall tests in software: a STREAM probe's
    /// bandwidth while messages arrive by socket, AF_XDP, WRITE, WRITE_NOTIFY
    /// and header split, and the read cost after holding each message.
    Memwall(MemwallArgs),
}

#[derive(Args)]
#[command(
    after_help = "It builds a 2-host testbed (prefix --prefix): host 0 sends with a live-frames generator, \
    host 1 serves NetDAM and runs the receiving application; the probe runs in this process. Modes: socket \
    (kernel UDP, recvmmsg into the application's buffers), af_xdp (MSG: whole frames into UMEM), write \
    (payload into NetDAM memory, the host is not told), write_notify (payload into NetDAM memory, headers to \
    the host), split (64 payload bytes to the host, the rest into NetDAM memory)."
)]
struct MemwallArgs {
    /// The short smoke configuration (every row, well under a minute).
    #[arg(long)]
    quick: bool,
    /// Print the result as JSON on stdout (progress and tables go to stderr).
    #[arg(long)]
    json: bool,
    /// Payload bytes per message.
    #[arg(long)]
    size: Option<usize>,
    /// Messages per second (0: as fast as the generator goes).
    #[arg(long)]
    rate: Option<u64>,
    /// Seconds per measurement.
    #[arg(long)]
    secs: Option<f64>,
    /// Core to pin the probe to.
    #[arg(long)]
    probe_core: Option<usize>,
    /// Where memwall.json and the SVG plots go.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Name prefix of the testbed's hosts.
    #[arg(long, default_value = "mw")]
    prefix: String,
}

#[derive(Subcommand)]
enum TestbedCmd {
    /// Make N test hosts PREFIX0.. (198.18.0.1..) joined by a switch in namespace PREFIXsw.
    Up {
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// MTU of every veth and the bridge (cloud NICs run native XDP up to about 3498).
        #[arg(long, default_value_t = 1500)]
        mtu: u32,
        /// xdp: unicast frames go port to port in XDP through a devmap (no skb, no
        /// bridge), broadcast and unknown destinations to the bridge; bridge: the
        /// Linux bridge forwards everything; plain: the bridge with no XDP on any
        /// link (TCP keeps GSO; for baselines: NetDAM's answers cannot cross it).
        #[arg(long, default_value = "xdp")]
        fabric: Fabric,
        #[arg(long, default_value = "nd")]
        prefix: String,
        #[command(flatten)]
        chaos: ChaosArgs,
    },
    /// Print the chaos element's counters (frames seen, dropped, duplicated, held, released).
    Chaos {
        #[arg(long, default_value = "nd")]
        prefix: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the XDP switch's counters (frames redirected port to port, flooded, unknown, sent to the chaos element).
    Switch {
        #[arg(long, default_value = "nd")]
        prefix: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove everything `up` made (safe to run twice, or after a crash).
    Down {
        #[arg(long, default_value = "nd")]
        prefix: String,
    },
    /// Build a testbed of N hosts serving NetDAM, sweep all-reduce sizes on it
    /// (every member runs `netdam allreduce --check`), print the nccl-tests table, tear it down.
    Allreduce(SweepArgs),
    /// Build a testbed, serve NetDAM on every host, show it working, tear it down.
    Demo {
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(2..=8))]
        nodes: u8,
        #[arg(long, default_value = "nd")]
        prefix: String,
    },
}

/// Impairments of the testbed's links: fractions of NetDAM frames on every
/// link (each 0 to 1), applied by a tc program on the switch side.
#[derive(Args)]
struct ChaosArgs {
    /// Fraction of NetDAM frames dropped, e.g. 0.01.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Fraction duplicated.
    #[arg(long, default_value_t = 0.0)]
    dup: f64,
    /// Fraction held back and sent after the next frame on the same link.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// Seed of the random streams.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

impl ChaosArgs {
    fn chaos(&self) -> Chaos {
        Chaos {
            loss: self.loss,
            dup: self.dup,
            reorder: self.reorder,
            seed: self.seed,
        }
    }
}

#[derive(Args)]
struct SweepArgs {
    /// Members of the ring (2 to 8).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(2..=8))]
    nodes: u8,
    /// Element type: i32, u32, i64, u64, f32.
    #[arg(long, value_parser = parse_dtype, default_value = "i32")]
    dtype: Dtype,
    /// Operator: sum, min, max, and, or, xor.
    #[arg(long, value_parser = parse_alu, default_value = "sum")]
    op: Alu,
    /// Smallest size, e.g. 4 or 4KiB.
    #[arg(long, value_parser = parse_size, default_value = "4")]
    min_bytes: u64,
    /// Largest size (sizes double from the smallest), e.g. 64MiB.
    #[arg(long, value_parser = parse_size, default_value = "64MiB")]
    max_bytes: u64,
    /// Timed all-reduces per size.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    iters: u32,
    /// Untimed all-reduces per size before them.
    #[arg(long, default_value_t = 1)]
    warmup: u32,
    #[arg(long, default_value = "ndar")]
    prefix: String,
    /// What joins the testbed's links: xdp (port to port in XDP) or bridge.
    #[arg(long, default_value = "xdp", value_parser = parse_netdam_fabric)]
    fabric: Fabric,
    /// MTU of every link: 1500, or 3498 as cloud NICs allow in native XDP (576 to 9000).
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// How members send their chunks: socket, injector or af-xdp (--inject / --afxdp-tx of `netdam allreduce`).
    #[arg(long, default_value = "socket", value_parser = parse_transmit)]
    transmit: TxPath,
    /// Where the JSON and the SVG plot go.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Print the rows as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ServeArgs {
    /// Interface to attach to.
    #[arg(long)]
    iface: String,
    /// UDP port P of NetDAM requests.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Bytes of NetDAM memory (a multiple of 64KiB, at most 2GiB), e.g. 64MiB.
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    mem_size: u64,
    /// A region [KEY:]BASE:SIZE:PERMS (PERMS r=READ w=WRITE a=ATOMIC m=MSG), e.g. 0:4MiB:rwam.
    /// Without KEY (or with KEY `random`) the key is random: printed once and kept in the pin
    /// directory's keys file under /run/netdam/keys (0600), so a restart with the same region keeps it. A KEY (hex or
    /// decimal, e.g. 0x1234) is used as given: 32 bits that a fast link can guess, so pick it at
    /// random. Repeatable.
    #[arg(long = "region", value_parser = parse_region)]
    regions: Vec<RegionArg>,
    /// A peer's IPv4 address. Once any is given only peers are served, each only from the MAC the
    /// neighbour table has for it; CHAIN runs only with peers (it can forward only to them). Repeatable.
    #[arg(long = "peer")]
    peers: Vec<Ipv4Addr>,
    /// XDP attach mode: native (driver), skb (generic), or auto (native, else skb).
    #[arg(long, value_enum, default_value_t = AttachMode::Auto)]
    mode: AttachMode,
    /// IPv4 address the node answers on (default: the interface's first).
    #[arg(long)]
    ip: Option<Ipv4Addr>,
    /// Verify the IPv4 header checksum and the UDP checksum of datagrams to port P, and drop the
    /// ones that are wrong, or carry no UDP checksum (0) and come from a non-peer (nodes send 0,
    /// so peers may) (docs/conformance.md 5).
    #[arg(long)]
    verify_csum: bool,
    /// BAD_KEY answers per second per source IPv4 address (a burst of as many, then that rate);
    /// 0 = unlimited. Beyond it a request that would be answered BAD_KEY is dropped (counted as
    /// bad_key_limited) and the source is locked out, all its requests dropped
    /// (drop_bad_key_lockout), until its allowance refills: a key guesser gets at most this many
    /// guesses a second. Both raise an alarm in `netdam stats` and the log: someone is guessing
    /// keys, or a client has a wrong key (docs/conformance.md 21).
    #[arg(long, default_value_t = 100)]
    bad_key_limit: u32,
    /// Sources the at-most-once window table holds (16 KiB of memory each);
    /// a new source finds it full is answered STALE for non-idempotent ops.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    window_sources: u32,
    /// Windows one source IPv4 address may hold, its source ports and CHAIN origin ports together
    /// [default: a quarter of --window-sources]: a new source past it is answered STALE for
    /// non-idempotent ops (counted as window_source_full), so that one address spraying ports
    /// cannot take the whole table. 1 to --window-sources.
    #[arg(long)]
    window_per_source: Option<u32>,
    /// Seconds unused after which a source's window is marked by the sweep (every quarter of
    /// this), and removed at a later sweep if still unused. Clients must stop retransmitting
    /// before then (netdam's give up after retries x timeout).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    window_idle: u64,
    #[command(flatten)]
    pins: PinDirArgs,
}

#[derive(Args, Clone)]
struct PinDirArgs {
    /// Where the node's maps are pinned [default: /sys/fs/bpf/netdam/IFACE].
    #[arg(long)]
    pin_dir: Option<PathBuf>,
}

#[derive(Args)]
struct NodeArgs {
    /// The node's IPv4 address.
    #[arg(long)]
    node: Ipv4Addr,
    /// The node's UDP port P.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Milliseconds to wait for each answer before resending.
    #[arg(long, default_value_t = 200)]
    timeout_ms: u64,
    /// Resends before giving up.
    #[arg(long, default_value_t = 10)]
    retries: u32,
    /// Requests in flight at once (1..1023).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u16).range(1..1024))]
    window: u16,
    /// IP MTU of the path to the node: sets the payload per request.
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u32).range(100..=9216))]
    mtu: u32,
}

impl NodeArgs {
    async fn client(&self) -> Result<Client> {
        let cfg = ClientConfig {
            port: self.port,
            timeout: Duration::from_millis(self.timeout_ms),
            retries: self.retries,
            window: self.window as usize,
            mtu: self.mtu,
        };
        Ok(Client::connect(self.node, cfg).await?)
    }
}

#[derive(Args)]
struct PingArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// NOPs to send.
    #[arg(long, default_value_t = 4)]
    count: u32,
}

/// Where in a node's NetDAM memory.
#[derive(Args)]
struct Place {
    /// Key of the region the range lies in.
    #[arg(long, value_parser = parse_rkey)]
    rkey: u32,
    /// Byte address in the node's NetDAM memory (decimal, 0x-hex, or with a unit like 4MiB).
    #[arg(long, value_parser = parse_size)]
    addr: u64,
}

#[derive(Args)]
struct WriteArgs {
    #[command(flatten)]
    node: NodeArgs,
    #[command(flatten)]
    place: Place,
    /// File whose bytes to write.
    #[arg(long)]
    file: PathBuf,
}

#[derive(Args)]
#[command(
    after_help = "The region must allow MSG (m) for a message, WRITE (w) for --notify. A node without a \
    receiver (`netdam recv`) answers NO_RECEIVER."
)]
struct MsgArgs {
    #[command(flatten)]
    node: NodeArgs,
    #[command(flatten)]
    place: Place,
    /// The message (or, with --notify, the bytes to write).
    text: String,
    /// WRITE_NOTIFY instead of MSG: --addr is where the bytes go.
    #[arg(long)]
    notify: bool,
}

#[derive(Args)]
struct ReadArgs {
    #[command(flatten)]
    node: NodeArgs,
    #[command(flatten)]
    place: Place,
    /// Bytes to read, e.g. 4096 or 64MiB.
    #[arg(long, value_parser = parse_size)]
    len: u64,
    /// File to write the bytes to.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
struct VectorArgs {
    #[command(flatten)]
    node: NodeArgs,
    #[command(flatten)]
    place: Place,
    /// Element type: i32, u32, i64, u64, f32.
    #[arg(long, value_parser = parse_dtype)]
    dtype: Dtype,
    /// Operator: sum (add), min, max, and, or, xor (the bitwise ones not on f32).
    #[arg(long, value_parser = parse_alu)]
    op: Alu,
    /// The vector, comma-separated, e.g. 1,2,3 or -0.5,1.25.
    #[arg(long, allow_hyphen_values = true)]
    values: String,
}

#[derive(Args)]
struct AtomicArgs {
    #[command(flatten)]
    node: NodeArgs,
    #[command(flatten)]
    place: Place,
    /// The operand: what to add (fetch-add) or the new value (cas, swap).
    #[arg(long, value_parser = parse_number)]
    value: u64,
    /// cas only: the value the word must hold.
    #[arg(long, value_parser = parse_number)]
    expected: Option<u64>,
}

/// A node served on this host, by its interface or its pin directory.
#[derive(Args)]
struct LocalArgs {
    /// Interface of the node (its default pin directory).
    #[arg(long, required_unless_present = "pin_dir")]
    iface: Option<String>,
    /// The node's pin directory.
    #[arg(long)]
    pin_dir: Option<PathBuf>,
}

impl LocalArgs {
    fn dir(&self) -> PathBuf {
        match (&self.pin_dir, &self.iface) {
            (Some(d), _) => d.clone(),
            (None, Some(i)) => pins::default_dir(i),
            (None, None) => unreachable!("clap requires --iface unless --pin-dir is given"),
        }
    }
}

#[derive(Args)]
struct StatsArgs {
    #[command(flatten)]
    local: LocalArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
#[command(
    after_help = "Run it beside the node's `netdam serve`, in the same network namespace. It binds one \
    AF_XDP socket per receive queue of the node's interface; while it runs, MSG and WRITE_NOTIFY are \
    delivered here (without it they are answered NO_RECEIVER) and split ports are split."
)]
struct RecvArgs {
    #[command(flatten)]
    local: LocalArgs,
    /// Stop after this many frames.
    #[arg(long)]
    count: Option<u64>,
    /// Stop when nothing arrives for this long (milliseconds).
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// UMEM frames per socket (a power of two, 64..65536).
    #[arg(long, default_value_t = 4096)]
    frames: u32,
    /// Print each message or rebuilt datagram's bytes as hex.
    #[arg(long)]
    hex: bool,
    /// One JSON object per frame instead of text lines.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SplitArgs {
    #[command(flatten)]
    local: LocalArgs,
    /// The UDP port whose datagrams are split (not port P).
    #[arg(long, requires = "keep")]
    port: Option<u16>,
    /// Payload bytes kept in the frame; the rest goes to NetDAM memory.
    #[arg(long)]
    keep: Option<u32>,
    /// Stop splitting --port.
    #[arg(long, requires = "port", conflicts_with = "keep")]
    remove: bool,
    /// Slots of the ring (one datagram's rest each; default 4096, as many as an AF_XDP socket's
    /// frames, or what fits a quarter of NetDAM memory). Sets the ring up anew.
    #[arg(long)]
    slots: Option<u32>,
    /// Stamp each slot and descriptor with a generation, so that a reader that comes after the
    /// ring has wrapped detects the overwrite instead of reading another datagram's bytes. The
    /// descriptor's address then carries the generation in its upper 32 bits: a proposed
    /// extension of PROTOCOL.md section 9 (docs/conformance.md 22), off by default. Sets the ring
    /// up anew.
    #[arg(long)]
    generations: bool,
    /// NetDAM address of the ring (default: the top of NetDAM memory). Sets the ring up anew.
    #[arg(long, value_parser = parse_number)]
    ring_addr: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ReadyArgs {
    #[command(flatten)]
    local: LocalArgs,
    /// Key of the region (hex or decimal).
    #[arg(long, value_parser = parse_rkey)]
    rkey: u32,
    /// The new generation; without it, the current one is printed.
    #[arg(long)]
    gen: Option<u32>,
}

#[derive(Args)]
#[command(
    after_help = "Every member's memory holds, at the same addresses: the sync area (8 bytes per member), \
    the input and the output, all inside region --rkey with READ, WRITE and ATOMIC (rwa). Without --check the \
    input is whatever the host placed there (e.g. through the node's mmap); with --check every member writes \
    inputs derived from --seed, and counts the result's elements that differ from the ring's (PROTOCOL.md section 6 \
    fixes the f32 order). Prints one nccl-tests row per run."
)]
struct AllreduceArgs {
    /// The members' IPv4 addresses in group order (2 to 8), e.g. 198.18.0.1,198.18.0.2,198.18.0.3.
    #[arg(long, value_parser = parse_group)]
    group: std::vec::Vec<Ipv4Addr>,
    #[command(flatten)]
    local: LocalArgs,
    /// Key of the region the input, output and sync area lie in (hex or decimal).
    #[arg(long, value_parser = parse_rkey)]
    rkey: u32,
    /// Elements of the vector.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    count: u64,
    /// Element type: i32, u32, i64, u64, f32.
    #[arg(long, value_parser = parse_dtype, default_value = "i32")]
    dtype: Dtype,
    /// Operator: sum, min, max, and, or, xor (the bitwise ones not on f32).
    #[arg(long, value_parser = parse_alu, default_value = "sum")]
    op: Alu,
    /// Timed all-reduces.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    iters: u32,
    /// Untimed all-reduces before them.
    #[arg(long, default_value_t = 0)]
    warmup: u32,
    /// Write seeded inputs and count the wrong elements of the result.
    #[arg(long)]
    check: bool,
    /// Seed of the --check inputs (the same on every member).
    #[arg(long, default_value_t = 1, value_parser = parse_number)]
    seed: u64,
    /// Address of the sync area (8 bytes per member, 8-aligned).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    sync_addr: u64,
    /// Address of the input [default: 4KiB].
    #[arg(long, value_parser = parse_size, default_value = "4KiB")]
    input_addr: u64,
    /// Address of the output [default: right after the input, 4KiB-aligned].
    #[arg(long, value_parser = parse_size)]
    output_addr: Option<u64>,
    /// UDP port P of the members.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// IP MTU of the group's paths, which fixes the chunking [default: the node's].
    #[arg(long, value_parser = clap::value_parser!(u32).range(100..=9216))]
    mtu: Option<u32>,
    /// Chunks in flight (1..1023) [default: 128 / members].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..1024))]
    window: Option<u16>,
    /// Milliseconds to wait for a chunk's answer before resending it.
    #[arg(long, default_value_t = 200)]
    timeout_ms: u64,
    /// Resends of a chunk before giving up.
    #[arg(long, default_value_t = 10)]
    retries: u32,
    /// Seconds to wait for the other members (to start, and to finish their chunks).
    #[arg(long, default_value_t = 30)]
    patience: u64,
    /// Send the chunks a batch at a time through the node's injector
    /// (BPF_PROG_TEST_RUN with live frames) instead of one system call each
    /// through a UDP socket. Slower on Linux 6.18: see docs/collective.md.
    #[arg(long, conflicts_with = "afxdp_tx")]
    inject: bool,
    /// Send the chunks as frames through an AF_XDP socket's TX ring (a batch
    /// per system call) instead of the UDP socket. Not beside `netdam recv`
    /// on the same node (one AF_XDP socket per queue). See docs/collective.md.
    #[arg(long)]
    afxdp_tx: bool,
    /// Benchmark the fabric's floor: send the ring's frames with every hop a
    /// NOP, so that no node reduces or writes anything (the output is not
    /// written). Its time is what moving the frames alone costs here.
    #[arg(long, conflicts_with = "check")]
    nop_hops: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            let code = e.downcast_ref::<ClientError>().map_or(1, ClientError::exit_code);
            ExitCode::from(code as u8)
        }
    }
}

/// The error and its causes, joined by ": ", leaving out a cause whose
/// text the message already shows (errors that print their source too).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !out.contains(&c) {
            out.push_str(": ");
            out.push_str(&c);
        }
    }
    out
}

async fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Serve(a) => serve(a).await,
        Cmd::Ping(a) => ping(a).await,
        Cmd::Write(a) => write(a).await,
        Cmd::Read(a) => read(a).await,
        Cmd::FetchAdd(a) => {
            let old = a
                .node
                .client()
                .await?
                .fetch_add(a.place.rkey, a.place.addr, a.value)
                .await?;
            println!("{old}");
            Ok(())
        }
        Cmd::Cas(a) => {
            let Some(expected) = a.expected else {
                bail!("cas needs --expected (the value the word must hold)")
            };
            let old = a
                .node
                .client()
                .await?
                .cas(a.place.rkey, a.place.addr, expected, a.value)
                .await?;
            println!("{old}{}", if old == expected { "" } else { " (not swapped)" });
            Ok(())
        }
        Cmd::Swap(a) => {
            let old = a.node.client().await?.swap(a.place.rkey, a.place.addr, a.value).await?;
            println!("{old}");
            Ok(())
        }
        Cmd::Reduce(a) => {
            let v = parse_values(&a.values, a.dtype)?;
            let r = a
                .node
                .client()
                .await?
                .reduce(a.place.rkey, a.place.addr, a.dtype, a.op, &v)
                .await?;
            println!("{}", format_values(&r, a.dtype));
            Ok(())
        }
        Cmd::Accumulate(a) => {
            let v = parse_values(&a.values, a.dtype)?;
            a.node
                .client()
                .await?
                .accumulate(a.place.rkey, a.place.addr, a.dtype, a.op, &v)
                .await?;
            println!(
                "accumulated {} {} element(s) at {:#x}",
                v.len() / a.dtype.width() as usize,
                a.dtype.name(),
                a.place.addr
            );
            Ok(())
        }
        Cmd::Stats(a) => {
            let dir = a.local.dir();
            let stats =
                Stats::read_pinned(&dir).with_context(|| format!("reading the counters in {}", dir.display()))?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                print!("{}", stats.table());
            }
            Ok(())
        }
        Cmd::Ready(a) => {
            let dir = a.local.dir();
            let mut node =
                LocalNode::open(&dir).with_context(|| format!("opening the node pinned in {}", dir.display()))?;
            let old = node.generation(a.rkey)?;
            match a.gen {
                Some(g) => {
                    node.set_generation(a.rkey, g)?;
                    println!("region {:#x}: generation {old} -> {g}", a.rkey);
                }
                None => println!("region {:#x}: generation {old}", a.rkey),
            }
            Ok(())
        }
        Cmd::Testbed(t) => testbed(t).await,
        Cmd::Allreduce(a) => tokio::task::spawn_blocking(move || allreduce(a))
            .await
            .context("the all-reduce thread")?,
        Cmd::Msg(a) => {
            let client = a.node.client().await?;
            if a.notify {
                client
                    .write_notify(a.place.rkey, a.place.addr, a.text.as_bytes())
                    .await?;
                println!(
                    "wrote {} byte(s) at {:#x}; no refusal came back",
                    a.text.len(),
                    a.place.addr
                );
            } else {
                client.msg(a.place.rkey, a.place.addr, a.text.as_bytes()).await?;
                println!("delivered {} byte(s)", a.text.len());
            }
            Ok(())
        }
        Cmd::Recv(a) => recv(a).await,
        Cmd::Bench(BenchCmd::Memwall(a)) => tokio::task::spawn_blocking(move || memwall(a))
            .await
            .context("the benchmark thread")?,
        Cmd::Split(a) => split(a),
        Cmd::Unpin(a) => {
            let Some(dir) = a.pin_dir else {
                bail!("give the node's --pin-dir (e.g. /sys/fs/bpf/netdam/eth0)")
            };
            // Settings a killed `serve` left on go back first: the record is
            // found by the pin directory.
            for path in sysctls::restore_recorded(&dir)? {
                println!("restored {} to its value before `netdam serve`", path.display());
            }
            let removed = pins::unpin(&dir)?;
            println!("removed {} pin(s) from {}", removed.len(), dir.display());
            Ok(())
        }
    }
}

fn parse_transmit(s: &str) -> Result<TxPath, String> {
    match s {
        "socket" => Ok(TxPath::Socket),
        "injector" => Ok(TxPath::Injector),
        "af-xdp" => Ok(TxPath::AfXdp),
        _ => Err(format!("{s:?} is not a way to send: socket, injector or af-xdp")),
    }
}

/// `netdam bench memwall`.
fn memwall(a: MemwallArgs) -> Result<()> {
    let mut cfg = if a.quick {
        MemwallConfig::quick()
    } else {
        MemwallConfig::full()
    };
    cfg.size = a.size.unwrap_or(cfg.size);
    cfg.rate = a.rate.unwrap_or(cfg.rate);
    cfg.secs = a.secs.unwrap_or(cfg.secs);
    cfg.probe_core = a.probe_core.or(cfg.probe_core);
    cfg.prefix = a.prefix.clone();
    let me = std::env::current_exe().context("finding this netdam binary (to serve on the testbed)")?;
    let bar = ProgressBar::new(cfg.measurements() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed}]").expect("a valid progress template"),
    );
    let report = memwall::run(&cfg, &me, &mut |done, _, what| {
        bar.set_position(done as u64);
        bar.set_message(what.to_string());
    })
    .context("the memory-wall bench")?;
    bar.finish_and_clear();
    let files = report
        .save(&a.out)
        .with_context(|| format!("writing the results into {}", a.out.display()))?;
    if a.json {
        eprint!("{}", report.table());
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    for f in files {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

/// `netdam split`.
fn split(a: SplitArgs) -> Result<()> {
    let dir = a.local.dir();
    let node = LocalNode::open(&dir).with_context(|| format!("opening the node pinned in {}", dir.display()))?;
    let mut table = SplitTable::open(&dir).with_context(|| format!("opening the split tables in {}", dir.display()))?;
    match (a.port, a.keep, a.remove) {
        (Some(port), _, true) if !table.remove(port) => {
            bail!("port {port} is not split (`netdam split` lists the split ports)");
        }
        (Some(_), _, true) => {}
        (Some(port), Some(keep), false) => {
            let spec = RingSpec {
                base: a.ring_addr,
                slots: a.slots,
                generations: a.generations,
            };
            table.add(&node.config, port, keep, &spec)?;
        }
        _ => {}
    }
    let ring = table.ring()?;
    let ports = table.ports();
    if a.json {
        let ports: Vec<_> = ports
            .iter()
            .map(|(p, k)| serde_json::json!({"port": p, "keep": k}))
            .collect();
        let v = serde_json::json!({
            "ports": ports,
            "ring": {"addr": ring.base, "slot_size": ring.slot_size, "slots": ring.slots, "taken": ring.taken,
                     "generations": ring.stamp_len() > 0},
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if ports.is_empty() {
        println!("no port is split");
    }
    for (p, k) in &ports {
        println!("port {p:>5}: keep {k} byte(s)");
    }
    if ring.slots > 0 {
        println!(
            "ring: {} slot(s) of {} bytes at {:#x} in NetDAM memory, {} taken so far{}",
            ring.slots,
            ring.slot_size,
            ring.base,
            ring.taken,
            if ring.stamp_len() > 0 { ", with generations" } else { "" }
        );
    }
    Ok(())
}

/// `netdam recv`.
async fn recv(a: RecvArgs) -> Result<()> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = {
        let stop = stop.clone();
        tokio::task::spawn_blocking(move || recv_loop(&a, &stop))
    };
    let mut term = tokio::signal::unix::signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::pin!(worker);
    tokio::select! {
        r = &mut worker => return r.context("the receive thread")?,
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    worker.await.context("the receive thread")?
}

fn recv_loop(a: &RecvArgs, stop: &std::sync::atomic::AtomicBool) -> Result<()> {
    let dir = a.local.dir();
    let mut ep = Endpoint::open(
        &dir,
        EndpointConfig {
            frames: a.frames,
            ..Default::default()
        },
    )
    .with_context(|| format!("opening AF_XDP sockets for the node pinned in {}", dir.display()))?;
    eprintln!(
        "receiving on {} queue(s), UMEM on {}; Ctrl-C stops",
        ep.queues(),
        ep.backing()
    );
    let mut seen = 0u64;
    let mut idle = std::time::Instant::now();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) && a.count.is_none_or(|c| seen < c) {
        let got = ep.recv(Duration::from_millis(100))?;
        if got.is_empty() {
            if a.timeout_ms.is_some_and(|t| idle.elapsed() > Duration::from_millis(t)) {
                break;
            }
            continue;
        }
        idle = std::time::Instant::now();
        for d in got.iter() {
            let line = describe(&d, got.memory(), a.hex);
            if a.json {
                println!("{line}");
            } else {
                println!("{}", line_text(&line));
            }
            seen += 1;
        }
    }
    let st = ep.stats()?;
    eprintln!(
        "{seen} frame(s) received; the kernel dropped {} (fill ring empty {}, RX ring full {}, other {})",
        st.rx_fill_ring_empty + st.rx_ring_full + st.rx_dropped,
        st.rx_fill_ring_empty,
        st.rx_ring_full,
        st.rx_dropped
    );
    Ok(())
}

/// A delivered frame as JSON.
fn describe(d: &Delivery<'_>, mem: &netdam_user::controller::NetdamMemory, with_hex: bool) -> serde_json::Value {
    let hex = |b: &[u8]| -> serde_json::Value {
        if with_hex {
            b.iter().map(|x| format!("{x:02x}")).collect::<String>().into()
        } else {
            serde_json::Value::Null
        }
    };
    match d {
        Delivery::Message { from, hdr, body, .. } => serde_json::json!({
            "kind": "msg", "from": from.to_string(), "seq": hdr.seq(), "len": body.len(), "bytes": hex(body),
        }),
        Delivery::Notify { from, hdr } => serde_json::json!({
            "kind": "write_notify", "from": from.to_string(), "seq": hdr.seq(), "addr": hdr.addr(), "len": hdr.len(),
        }),
        Delivery::Split {
            from,
            to_port,
            kept,
            descriptor,
            ..
        } => {
            let rebuilt = netdam_common::split::rebuild(kept, descriptor, |a, n| mem.read(a, n).ok());
            serde_json::json!({
                "kind": "split", "from": from.to_string(), "port": to_port, "kept": kept.len(),
                "len": descriptor.original_len, "addr": descriptor.rest_addr(), "generation": descriptor.generation(),
                "bytes": rebuilt.as_deref().map_or(serde_json::Value::Null, hex),
                "error": rebuilt.as_ref().err().map(|e| format!("{e:?}")),
            })
        }
        Delivery::Other(f) => serde_json::json!({"kind": "other", "len": f.len(), "bytes": hex(f)}),
    }
}

fn line_text(v: &serde_json::Value) -> String {
    // The kind first, addresses in hex, then the rest.
    let mut s = v["kind"].as_str().unwrap_or("?").to_string();
    if let Some(o) = v.as_object() {
        for (k, x) in o {
            if x.is_null() || k == "kind" {
                continue;
            }
            let x = match (k.as_str(), x.as_u64(), x.as_str()) {
                ("addr", Some(a), _) => format!("{a:#x}"),
                (_, _, Some(t)) => t.to_string(),
                _ => x.to_string(),
            };
            s.push_str(&format!(" {k}={x}"));
        }
    }
    s
}

async fn serve(a: ServeArgs) -> Result<()> {
    let iface = Interface::lookup(&a.iface).with_context(|| format!("interface {}", a.iface))?;
    let ipv4 = match a.ip.or(iface.ipv4) {
        Some(ip) => ip,
        None => bail!(
            "interface {} has no IPv4 address: add one (ip addr add ADDR/LEN dev {}) or pass --ip",
            a.iface,
            a.iface
        ),
    };
    if a.regions.is_empty() {
        log::warn!("no --region given: every request but NOP will be answered BAD_KEY");
    }
    if a.peers.is_empty() {
        log::warn!(
            "no --peer given: any source may use this node's memory (PROTOCOL.md section 1), and CHAIN is refused \
             (docs/conformance.md 20)"
        );
    }
    // The node's own address needs no entry: its host may be a CHAIN's
    // origin anyway, and frames claiming it from the wire are dropped.
    let peers: Vec<Ipv4Addr> = a.peers.iter().copied().filter(|p| *p != ipv4).collect();
    let pin_dir = a.pins.pin_dir.clone().unwrap_or_else(|| pins::default_dir(&a.iface));
    let regions = region_keys(&pin_dir, &a.regions)?;
    let spec = NodeSpec {
        port: a.port,
        mem_size: a.mem_size,
        mac: iface.mac,
        ipv4,
        mtu: iface.mtu,
        regions,
        peers,
        verify_csum: a.verify_csum,
        window_sources: a.window_sources,
        window_per_source: a.window_per_source.unwrap_or((a.window_sources / 4).max(1)),
        bad_key_limit: a.bad_key_limit,
    };
    let mut node = Node::load(&spec, Some(&pin_dir)).context("loading the NetDAM data path")?;
    if node.reused_pins {
        log::info!(
            "reusing the pinned NetDAM memory and counters in {} (layout matches)",
            pin_dir.display()
        );
    } else {
        log::info!(
            "new NetDAM memory of {} bytes, pinned in {}",
            a.mem_size,
            pin_dir.display()
        );
    }
    // Before the kernel settings change and the program is attached: a signal
    // that came earlier would end the process without detaching or
    // restoring the kernel settings. A hangup (the terminal or SSH session
    // closed) is a stop like SIGTERM.
    let mut term = tokio::signal::unix::signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut hangup = tokio::signal::unix::signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let sysctls = sysctls::ChainSysctls::turn_on(&a.iface, &pin_dir).context("the kernel settings CHAIN needs")?;
    let unresolved = neighbours::resolve(&a.iface, ipv4, &spec.peers, Duration::from_secs(1));
    if !unresolved.is_empty() {
        log::warn!(
            "no neighbour entry yet for peer(s) {unresolved:?}: they are neither served nor forwarded to until they answer ARP"
        );
    }
    bind_peer_macs(&mut node, &a.iface)?;
    let mode = node.attach(&a.iface, a.mode)?;
    log::info!(
        "serving NetDAM on {} ({mode} XDP): {ipv4} port {} mtu {}, {} region(s){}, {} peer(s)",
        a.iface,
        a.port,
        iface.mtu,
        spec.regions.len(),
        spec.regions
            .iter()
            .map(|(k, r)| format!(" {k:#x}:{:#x}+{:#x}:{}", r.base, r.size, perm_letters(r.perms)))
            .collect::<String>(),
        spec.peers.len()
    );
    let log_fd = match node.log_fd() {
        Some(fd) => {
            let owned = fd.try_clone_to_owned().context("duplicating the eBPF log fd")?;
            // SAFETY: `owned` is our own duplicate of the ring buffer's fd and lives as long as the AsyncFd.
            Some(unsafe { AsyncFd::register(owned) }.map_err(|e| anyhow::anyhow!("registering the eBPF log fd: {e}"))?)
        }
        None => None,
    };
    let idle = Duration::from_secs(a.window_idle);
    let mut sweep = tokio::time::interval(idle / 4);
    let mut peer_tick = tokio::time::interval(PEER_SYNC);
    let mut ticks = 0u64;
    let mut alarmed = vec![0u64; stats::ALARMS.len()];
    loop {
        tokio::select! {
            _ = peer_tick.tick() => {
                ticks += 1;
                // Missing entries every tick; every entry now and then, so the
                // kernel re-checks stale ones (a peer's new MAC).
                let nudged: Vec<Ipv4Addr> = if ticks.is_multiple_of(PEER_RECHECK_TICKS) {
                    spec.peers.clone()
                } else {
                    let have = neighbours::resolved(&a.iface, &spec.peers);
                    spec.peers.iter().copied().filter(|p| !have.contains(p)).collect()
                };
                neighbours::nudge(ipv4, &nudged);
                if let Err(e) = bind_peer_macs(&mut node, &a.iface) {
                    log::warn!("{e:#}");
                }
                warn_of_new_alarms(&node, &mut alarmed);
            }
            _ = sweep.tick() => {
                match node.expire_windows(idle) {
                    Ok(WindowSweep { marked: 0, removed: 0 }) => {}
                    Ok(WindowSweep { marked, removed }) => {
                        log::debug!("window sweep: {removed} idle window(s) removed, {marked} marked for the next sweep")
                    }
                    Err(e) => log::warn!("sweeping idle windows: {e}"),
                }
            }
            _ = tokio::signal::ctrl_c() => { log::info!("Ctrl-C: detaching"); break; }
            _ = term.recv() => { log::info!("SIGTERM: detaching"); break; }
            _ = hangup.recv() => { log::info!("SIGHUP: detaching"); break; }
            r = async { match &log_fd { Some(fd) => fd.readable().await.map(|mut g| g.clear_ready()), None => std::future::pending().await } } => {
                r.context("polling the eBPF log")?;
                node.flush_log();
            }
        }
    }
    node.detach()?;
    sysctls.restore().context("restoring the kernel settings")?;
    log::info!(
        "detached from {}; memory and counters stay pinned in {}",
        a.iface,
        pin_dir.display()
    );
    Ok(())
}

/// Logs a warning for each alarm event (`stats::ALARMS`) that counted
/// since the last call; `seen` holds the counts seen then.
fn warn_of_new_alarms(node: &Node, seen: &mut [u64]) {
    let Ok(c) = node.counters() else { return };
    for ((e, meaning), seen) in stats::ALARMS.iter().zip(seen) {
        let now = c.get(*e as usize).copied().unwrap_or(0);
        if now > *seen {
            log::warn!("ALARM {} +{} ({now} in all): {meaning}", e.name(), now - *seen);
            *seen = now;
        }
    }
}

/// The regions of `args` with their keys: random ones are printed once,
/// when drawn (`controller::keys`).
fn region_keys(pin_dir: &std::path::Path, args: &[RegionArg]) -> Result<Vec<(u32, Region)>> {
    let keyed = keys::assign(&keys::keys_path(pin_dir), args).context("the region keys")?;
    for (rkey, r, origin) in &keyed {
        let what = format!("region {:#x}+{:#x}:{}", r.base, r.size, perm_letters(r.perms));
        match origin {
            KeyOrigin::Generated => println!(
                "{what}: random key {rkey:#010x} (shown once; kept in {})",
                keys::keys_path(pin_dir).display()
            ),
            KeyOrigin::Kept => log::info!(
                "{what}: keeps the random key drawn before (in {})",
                keys::keys_path(pin_dir).display()
            ),
            KeyOrigin::Given => {}
        }
    }
    Ok(keyed.into_iter().map(|(k, r, _)| (k, r)).collect())
}

/// How often `serve` copies the peers' MACs from the neighbour table.
const PEER_SYNC: Duration = Duration::from_secs(1);
/// Every this many syncs, every peer's entry is nudged (not only missing ones).
const PEER_RECHECK_TICKS: u64 = 10;

/// Binds the peers to their MACs in the neighbour table of `iface`, logging each change.
fn bind_peer_macs(node: &mut Node, iface: &str) -> Result<()> {
    let changed = node
        .bind_peer_macs(&neighbours::complete(iface))
        .context("binding the peers to their MACs")?;
    for (ip, mac) in changed {
        let mac: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
        log::info!("peer {ip} bound to MAC {}", mac.join(":"));
    }
    Ok(())
}

async fn ping(a: PingArgs) -> Result<()> {
    let client = a.node.client().await?;
    let mut rtts = Vec::new();
    for i in 0..a.count {
        let rtt = client.ping().await?;
        println!("NOP {} from {}: {:.1} us", i + 1, a.node.node, rtt.as_secs_f64() * 1e6);
        rtts.push(rtt);
        if i + 1 < a.count {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    rtts.sort();
    if let (Some(min), Some(max)) = (rtts.first(), rtts.last()) {
        println!(
            "{} answered, rtt min {:.1} us, median {:.1} us, max {:.1} us",
            rtts.len(),
            us(*min),
            us(rtts[rtts.len() / 2]),
            us(*max)
        );
    }
    Ok(())
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn progress_bar(total: u64) -> ProgressBar {
    // Only draw for transfers long enough to watch; indicatif hides itself when stderr is not a terminal.
    let pb = if total >= 4 << 20 {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    pb.set_style(
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}").expect("template"),
    );
    pb
}

async fn write(a: WriteArgs) -> Result<()> {
    let data = tokio::fs::read(&a.file)
        .await
        .with_context(|| format!("reading {}", a.file.display()))?;
    let client = a.node.client().await?;
    let pb = progress_bar(data.len() as u64);
    let t = std::time::Instant::now();
    client
        .write(a.place.rkey, a.place.addr, &data, &|n| pb.inc(n as u64))
        .await?;
    pb.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "wrote {} bytes at {:#x} in {:.3} s ({:.1} MB/s)",
        data.len(),
        a.place.addr,
        secs,
        data.len() as f64 / secs / 1e6
    );
    Ok(())
}

async fn read(a: ReadArgs) -> Result<()> {
    let len = usize::try_from(a.len).context("--len does not fit this machine")?;
    let client = a.node.client().await?;
    let pb = progress_bar(a.len);
    let t = std::time::Instant::now();
    let data = client
        .read(a.place.rkey, a.place.addr, len, &|n| pb.inc(n as u64))
        .await?;
    pb.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    tokio::fs::write(&a.out, &data)
        .await
        .with_context(|| format!("writing {}", a.out.display()))?;
    println!(
        "read {} bytes at {:#x} in {:.3} s ({:.1} MB/s) into {}",
        data.len(),
        a.place.addr,
        secs,
        data.len() as f64 / secs / 1e6,
        a.out.display()
    );
    Ok(())
}

async fn testbed(cmd: TestbedCmd) -> Result<()> {
    match cmd {
        TestbedCmd::Up {
            nodes,
            mtu,
            fabric,
            prefix,
            chaos,
        } => {
            let tb = Testbed::up_on(&prefix, nodes, mtu, fabric)?;
            let chaos = chaos.chaos();
            if !chaos.is_none() {
                tb.impair(&chaos)?;
                println!(
                    "chaos on every link: loss {}, dup {}, reorder {} of NetDAM frames (seed {}); counters: netdam testbed chaos --prefix {prefix}",
                    chaos.loss, chaos.dup, chaos.reorder, chaos.seed
                );
            }
            for h in &tb.hosts {
                println!("{:<10} {:<14} eth0  pins {}", h.netns, h.ip, h.pin_dir.display());
            }
            println!("switch namespace {prefix}sw ({fabric} fabric, MTU {mtu}); remove it all with `netdam testbed down --prefix {prefix}`");
            tb.leak();
            Ok(())
        }
        TestbedCmd::Chaos { prefix, json } => {
            let tb = Testbed::existing(&prefix)?;
            let Some(stats) = tb.chaos_stats()? else {
                bail!("testbed {prefix} has no chaos element: bring it up with --loss, --dup or --reorder")
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                println!(
                    "NetDAM frames seen {}, dropped {}, duplicated {}, held {}, released behind a later frame {}",
                    stats.seen, stats.dropped, stats.duplicated, stats.held, stats.released
                );
            }
            Ok(())
        }
        TestbedCmd::Switch { prefix, json } => {
            let tb = Testbed::existing(&prefix)?;
            let Some(stats) = tb.switch_stats()? else {
                bail!("testbed {prefix} has no XDP switch: it is on the bridge fabric, or not up")
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                println!(
                    "frames redirected port to port {}, flooded by the bridge {}, to an unknown MAC {}, through the chaos element {}",
                    stats.redirected, stats.flooded, stats.unknown, stats.impaired
                );
            }
            Ok(())
        }
        TestbedCmd::Down { prefix } => {
            Testbed::down(&prefix)?;
            println!("testbed {prefix} removed");
            Ok(())
        }
        TestbedCmd::Demo { nodes, prefix } => demo(nodes as usize, &prefix).await,
        TestbedCmd::Allreduce(a) => tokio::task::spawn_blocking(move || allreduce_sweep(a))
            .await
            .context("the sweep thread")?,
    }
}

/// Timed repetitions of each figure of the demo, after `WARM` untimed ones
/// (ARP, caches and the first socket's setup out of the figures).
const TIMED: usize = 5;
const WARM: usize = 2;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The `cargo xtask run` tour: every node serves, pings every other, and one
/// writes and reads back another's memory.
async fn demo(nodes: usize, prefix: &str) -> Result<()> {
    let exe = std::env::current_exe().context("locating the netdam binary")?;
    println!(
        "building a testbed of {nodes} hosts ({prefix}0..{prefix}{}) joined by the XDP switch",
        nodes - 1
    );
    let tb = Testbed::up(prefix, nodes, 1500)?;
    let region = "0x1234:0:4MiB:rwam".to_string();
    let mut served = Vec::new();
    for i in 0..nodes {
        let mut args = vec![
            "--mem-size".to_string(),
            "16MiB".into(),
            "--region".into(),
            region.clone(),
        ];
        for (j, h) in tb.hosts.iter().enumerate() {
            if j != i {
                args.extend(["--peer".to_string(), h.ip.to_string()]);
            }
        }
        served.push(tb.serve(i, &exe, &args)?);
        println!(
            "  {} serves NetDAM at {} (16 MiB, region 0x1234 = [0, 4 MiB) rwam)",
            tb.hosts[i].netns, tb.hosts[i].ip
        );
    }
    println!("\nNOP round trips (from row to column, median of {TIMED} after {WARM} untimed, microseconds):");
    print!("{:>8}", "");
    for h in &tb.hosts {
        print!("{:>10}", h.netns);
    }
    println!();
    for i in 0..nodes {
        print!("{:>8}", tb.hosts[i].netns);
        for j in 0..nodes {
            if i == j {
                print!("{:>10}", "-");
                continue;
            }
            let ip = tb.hosts[j].ip;
            let rtt = tb.in_host(i, move || -> Result<Duration> {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                rt.block_on(async {
                    let c = Client::connect(ip, ClientConfig::default()).await?;
                    let mut rtts = Vec::new();
                    for k in 0..WARM + TIMED {
                        let rtt = c.ping().await?;
                        if k >= WARM {
                            rtts.push(rtt);
                        }
                    }
                    Ok(median(rtts))
                })
            })??;
            print!("{:>10.1}", us(rtt));
        }
        println!();
    }
    let target = tb.hosts[0].ip;
    let data: Vec<u8> = (0..(1 << 20)).map(|_| rand::random::<u8>()).collect();
    let sent = data.clone();
    let (wrote, read, back) = tb.in_host(1, move || -> Result<(Duration, Duration, Vec<u8>)> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async {
            let c = Client::connect(target, ClientConfig::default()).await?;
            let (mut writes, mut reads, mut back) = (Vec::new(), Vec::new(), Vec::new());
            for k in 0..WARM + TIMED {
                let t = std::time::Instant::now();
                c.write(0x1234, 0x1000, &sent, &|_| {}).await?;
                let w = t.elapsed();
                let t = std::time::Instant::now();
                back = c.read(0x1234, 0x1000, sent.len(), &|_| {}).await?;
                if k >= WARM {
                    writes.push(w);
                    reads.push(t.elapsed());
                }
            }
            Ok((median(writes), median(reads), back))
        })
    })??;
    anyhow::ensure!(back == data, "the bytes read back differ from the bytes written");
    let mb_s = |d: Duration| (1 << 20) as f64 / d.as_secs_f64() / 1e6;
    println!(
        "\n{} wrote 1 MiB into {}'s NetDAM memory in {:.2} ms ({:.0} MB/s) and read it back byte-exact in {:.2} ms ({:.0} MB/s), medians of {TIMED} after {WARM} untimed",
        tb.hosts[1].netns,
        tb.hosts[0].netns,
        wrote.as_secs_f64() * 1e3,
        mb_s(wrote),
        read.as_secs_f64() * 1e3,
        mb_s(read)
    );
    // A message to host 0's AF_XDP receiver, which answers its ACK_REQ.
    let pin = tb.hosts[0].pin_dir.clone();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let receiver = std::thread::spawn({
        let netns = format!("/run/netns/{}", tb.hosts[0].netns);
        move || -> Result<String> {
            let f = std::fs::File::open(&netns).with_context(|| netns.clone())?;
            nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).context("entering host 0")?;
            let mut ep = Endpoint::open(&pin, EndpointConfig::default())?;
            let _ = ready_tx.send(());
            let end = std::time::Instant::now() + Duration::from_secs(5);
            while std::time::Instant::now() < end {
                let got = ep.recv(Duration::from_millis(100))?;
                for d in got.iter() {
                    if let Delivery::Message { from, body, .. } = d {
                        return Ok(format!("{from}: {:?}", String::from_utf8_lossy(body)));
                    }
                }
            }
            anyhow::bail!("no message arrived within 5 s")
        }
    });
    ready
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| anyhow::anyhow!("host 0's AF_XDP receiver did not start"))?;
    tb.in_host(1, move || -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async {
            let c = Client::connect(target, ClientConfig::default()).await?;
            Ok(c.msg(0x1234, 0, b"hello from the network side").await?)
        })
    })??;
    let got = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("the receiver thread panicked"))??;
    println!(
        "
{} sent a MSG to {}; its AF_XDP receiver got it from UMEM and acknowledged it: {got}",
        tb.hosts[1].netns, tb.hosts[0].netns
    );
    let stats = Stats::read_pinned(&tb.hosts[0].pin_dir)?;
    println!(
        "\ncounters of {} (netdam stats --pin-dir {}):\n{}",
        tb.hosts[0].netns,
        tb.hosts[0].pin_dir.display(),
        stats.table()
    );
    for s in served {
        s.stop();
    }
    drop(tb);
    println!("testbed {prefix} torn down");
    Ok(())
}

fn allreduce(a: AllreduceArgs) -> Result<()> {
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
    let op = Allreduce {
        rkey: a.rkey,
        input_addr: a.input_addr,
        output_addr,
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

/// `netdam testbed allreduce` (`cargo xtask allreduce`).
/// A fabric NetDAM's answers can cross.
fn parse_netdam_fabric(s: &str) -> Result<Fabric, String> {
    match s.parse()? {
        Fabric::Plain => Err("fabric plain carries no XDP_TX answers: use xdp or bridge".into()),
        f => Ok(f),
    }
}

fn allreduce_sweep(a: SweepArgs) -> Result<()> {
    let exe = std::env::current_exe().context("locating the netdam binary")?;
    let spec = SweepSpec {
        nodes: a.nodes as usize,
        dtype: a.dtype,
        alu: a.op,
        min_bytes: a.min_bytes,
        max_bytes: a.max_bytes,
        iters: a.iters,
        warmup: a.warmup,
        prefix: a.prefix.clone(),
        transmit: a.transmit,
        fabric: a.fabric,
        mtu: a.mtu,
    };
    let sizes = spec.sizes()?;
    eprintln!(
        "all-reduce sweep: {} members on testbed {} ({} fabric, MTU {}), {} {}, {} sizes from {} to {} bytes, {} iteration(s) + {} warmup each",
        a.nodes,
        a.prefix,
        a.fabric,
        a.mtu,
        a.dtype.name(),
        table::redop(a.op),
        sizes.len(),
        sizes[0],
        sizes[sizes.len() - 1],
        a.iters,
        a.warmup
    );
    let pb = ProgressBar::new(sizes.len() as u64);
    pb.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} sizes, {elapsed}").expect("template"));
    if !a.json {
        print!("{}", table::header());
    }
    let rows = sweep::sweep(&exe, &spec, |r| {
        if !a.json {
            pb.suspend(|| println!("{}", r.line()));
        }
        pb.inc(1);
    })?;
    pb.finish_and_clear();
    let name = format!("allreduce-{}-{}-{}", a.nodes, a.dtype.name(), table::redop(a.op));
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let json = serde_json::to_string_pretty(&rows)?;
    let json_path = a.out.join(format!("{name}.json"));
    std::fs::write(&json_path, &json).with_context(|| format!("writing {}", json_path.display()))?;
    let svg = plot::svg(
        &format!(
            "NetDAM ring all-reduce, {} members, {} {}",
            a.nodes,
            a.dtype.name(),
            table::redop(a.op)
        ),
        "size (bytes)",
        "busbw (GB/s)",
        &[plot::Series {
            name: "NetDAM".into(),
            points: rows.iter().map(|r| (r.bytes as f64, r.busbw_gbps)).collect(),
        }],
    );
    let svg_path = a.out.join(format!("{name}.svg"));
    std::fs::write(&svg_path, svg).with_context(|| format!("writing {}", svg_path.display()))?;
    if a.json {
        println!("{json}");
    }
    let wrong: u64 = rows.iter().filter_map(|r| r.wrong).sum();
    eprintln!("results: {} and {}", json_path.display(), svg_path.display());
    if wrong > 0 {
        bail!("{wrong} element(s) differed from the ring's result");
    }
    Ok(())
}
