//! `netdam-lab`: the namespace testbed, its demo and all-reduce sweep, and
//! the memory-wall bench. The nodes it starts are the `netdam` binary
//! beside it (or NETDAM_BIN).

use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::{bail, Context as _, Result};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use netdam_common::wire::{Alu, Dtype};
use netdam_lab::{
    memwall::{self, MemwallConfig},
    netdam_bin, plot,
    sweep::{self, SweepSpec},
    testbed::{Chaos, Fabric, Testbed},
};
use netdam_user::{
    afxdp::{Delivery, Endpoint, EndpointConfig},
    args::{parse_alu, parse_dtype, parse_size, parse_transmit},
    collective::{table, TxPath},
    stats::Stats,
    Client, ClientConfig,
};

#[derive(Parser)]
#[command(
    name = "netdam-lab",
    version,
    about = "The NetDAM lab: a namespace testbed of NetDAM hosts, its demo and all-reduce sweep, and the memory-wall bench (needs root)",
    long_about = "The NetDAM lab: a namespace testbed of NetDAM hosts, its demo and all-reduce sweep, and the \
        memory-wall bench. Everything runs in network namespaces it creates and removes (nothing is added to \
        the host's own namespace); the nodes are the `netdam` binary beside this one, or NETDAM_BIN. Needs root.\n\n\
        Logging: RUST_LOG=debug (or info, warn, trace)."
)]
struct Cli {
    #[command(subcommand)]
    cmd: LabCmd,
}

#[derive(Subcommand)]
enum LabCmd {
    /// Build, show or remove the namespace testbed (test hosts joined by an XDP switch or a bridge).
    #[command(subcommand)]
    Testbed(TestbedCmd),
    /// Benchmarks a user runs on their own host (each builds a testbed of its own).
    #[command(subcommand)]
    Bench(BenchCmd),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = netdam_lab::interrupt::clean_up_on_signals("netdam-lab") {
        eprintln!("error: cannot watch for SIGINT and SIGTERM: {e}");
        return ExitCode::FAILURE;
    }
    netdam_user::cli::run_to_exit(async move {
        match cli.cmd {
            LabCmd::Testbed(t) => testbed(t).await,
            LabCmd::Bench(BenchCmd::Memwall(a)) => tokio::task::spawn_blocking(move || memwall(a))
                .await
                .context("the benchmark thread")?,
        }
    })
}

#[derive(Subcommand)]
pub(crate) enum BenchCmd {
    /// The seed's DDIO and memory-wall tests in software: a STREAM probe's
    /// bandwidth while messages arrive by socket, AF_XDP, WRITE, WRITE_NOTIFY
    /// and header split, and the read cost after holding each message.
    Memwall(MemwallArgs),
}

#[derive(Args)]
#[command(
    after_help = "It builds a 2-host testbed (prefix --prefix): host 0 sends with an AF_PACKET generator, \
    host 1 serves NetDAM and runs the receiving application; the probe runs in this process. Modes: socket \
    (kernel UDP, recvmmsg into the application's buffers), af_xdp (MSG: whole frames into UMEM), write \
    (payload into NetDAM memory, the host is not told), write_notify (payload into NetDAM memory, headers to \
    the host), split (64 payload bytes to the host, the rest into NetDAM memory)."
)]
pub(crate) struct MemwallArgs {
    /// The short smoke configuration (every row, well under a minute).
    #[arg(long)]
    pub(crate) quick: bool,
    /// Print the result as JSON on stdout (progress and tables go to stderr).
    #[arg(long)]
    pub(crate) json: bool,
    /// Payload bytes per message.
    #[arg(long)]
    pub(crate) size: Option<usize>,
    /// Messages per second (0: as fast as the generator goes).
    #[arg(long)]
    pub(crate) rate: Option<u64>,
    /// Seconds per measurement.
    #[arg(long)]
    pub(crate) secs: Option<f64>,
    /// Core to pin the probe to.
    #[arg(long)]
    pub(crate) probe_core: Option<usize>,
    /// Where memwall.json and the SVG plots go.
    #[arg(long, default_value = "results")]
    pub(crate) out: PathBuf,
    /// Name prefix of the testbed's hosts.
    #[arg(long, default_value = "mw")]
    pub(crate) prefix: String,
}

#[derive(Subcommand)]
pub(crate) enum TestbedCmd {
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
        /// Receive and transmit queues of every veth (both ends), 1 to 64: with
        /// more than one, XDP runs on several CPUs at once. Frames the XDP fabric
        /// forwards land on the queue of the sender's CPU; `netdam stats` shows
        /// the frames of each queue.
        #[arg(long, default_value_t = 1)]
        queues: u32,
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
pub(crate) struct ChaosArgs {
    /// Fraction of NetDAM frames dropped, e.g. 0.01.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) loss: f64,
    /// Fraction duplicated.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) dup: f64,
    /// Fraction held back and sent after the next frame on the same link.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) reorder: f64,
    /// Seed of the random streams.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
}

impl ChaosArgs {
    pub(crate) fn chaos(&self) -> Chaos {
        Chaos {
            loss: self.loss,
            dup: self.dup,
            reorder: self.reorder,
            seed: self.seed,
        }
    }
}

#[derive(Args)]
pub(crate) struct SweepArgs {
    /// Members of the ring (2 to 8).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(2..=8))]
    pub(crate) nodes: u8,
    /// Element type: i32, u32, i64, u64, f32.
    #[arg(long, value_parser = parse_dtype, default_value = "i32")]
    pub(crate) dtype: Dtype,
    /// Operator: sum, min, max, and, or, xor.
    #[arg(long, value_parser = parse_alu, default_value = "sum")]
    pub(crate) op: Alu,
    /// Smallest size, e.g. 4 or 4KiB.
    #[arg(long, value_parser = parse_size, default_value = "4")]
    pub(crate) min_bytes: u64,
    /// Largest size (sizes double from the smallest), e.g. 64MiB.
    #[arg(long, value_parser = parse_size, default_value = "64MiB")]
    pub(crate) max_bytes: u64,
    /// Timed all-reduces per size.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) iters: u32,
    /// Untimed all-reduces per size before them.
    #[arg(long, default_value_t = 1)]
    pub(crate) warmup: u32,
    #[arg(long, default_value = "ndar")]
    pub(crate) prefix: String,
    /// What joins the testbed's links: xdp (port to port in XDP) or bridge.
    #[arg(long, default_value = "xdp", value_parser = parse_netdam_fabric)]
    pub(crate) fabric: Fabric,
    /// MTU of every link: 1500, or 3498 as cloud NICs allow in native XDP (576 to 9000).
    #[arg(long, default_value_t = 1500)]
    pub(crate) mtu: u32,
    /// How members send their chunks: socket, injector or af-xdp (--inject / --afxdp-tx of `netdam allreduce`).
    #[arg(long, default_value = "socket", value_parser = parse_transmit)]
    pub(crate) transmit: TxPath,
    /// Where the JSON and the SVG plot go.
    #[arg(long, default_value = "results")]
    pub(crate) out: PathBuf,
    /// Print the rows as JSON instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `netdam-lab bench memwall`.
pub(crate) fn memwall(a: MemwallArgs) -> Result<()> {
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
    let me = netdam_bin()?;
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

pub(crate) async fn testbed(cmd: TestbedCmd) -> Result<()> {
    match cmd {
        TestbedCmd::Up {
            nodes,
            mtu,
            fabric,
            queues,
            prefix,
            chaos,
        } => {
            let cfg = netdam_lab::testbed::TestbedConfig {
                nodes,
                mtu,
                fabric,
                queues,
            };
            let tb = Testbed::up_with(&prefix, cfg)?;
            let chaos = chaos.chaos();
            if !chaos.is_none() {
                tb.impair(&chaos)?;
                println!(
                    "chaos on every link: loss {}, dup {}, reorder {} of NetDAM frames (seed {}); counters: netdam-lab testbed chaos --prefix {prefix}",
                    chaos.loss, chaos.dup, chaos.reorder, chaos.seed
                );
            }
            for h in &tb.hosts {
                println!("{:<10} {:<14} eth0  pins {}", h.netns, h.ip, h.pin_dir.display());
            }
            println!("switch namespace {prefix}sw ({fabric} fabric, MTU {mtu}, {queues} queue(s) a link); remove it all with `netdam-lab testbed down --prefix {prefix}`");
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
pub(crate) const TIMED: usize = 5;
pub(crate) const WARM: usize = 2;

pub(crate) fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The `cargo xtask run` tour: every node serves, pings every other, and one
/// writes and reads back another's memory.
pub(crate) async fn demo(nodes: usize, prefix: &str) -> Result<()> {
    let exe = netdam_bin()?;
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
            print!("{:>10.1}", rtt.as_secs_f64() * 1e6);
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

/// `netdam-lab testbed allreduce` (`cargo xtask allreduce`).
/// A fabric NetDAM's answers can cross.
pub(crate) fn parse_netdam_fabric(s: &str) -> Result<Fabric, String> {
    match s.parse()? {
        Fabric::Plain => Err("fabric plain carries no XDP_TX answers: use xdp or bridge".into()),
        f => Ok(f),
    }
}

pub(crate) fn allreduce_sweep(a: SweepArgs) -> Result<()> {
    let exe = netdam_bin()?;
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
