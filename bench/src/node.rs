//! Benchmarks 2 and 3 of the all-reduce issue, on one node of a 2-host
//! testbed (host 0 the node, host 1 the client), repetition by repetition:
//!
//! 2. WRITE 1 KiB (ACK_REQ) throughput: NetDAM in XDP, against the rate at
//!    which the same node drops the same frames with a minimal counting
//!    XDP_DROP program (the ceiling), and against a userspace server doing
//!    the same WRITE over a kernel UDP socket (recvmmsg, copy into memory,
//!    sendmmsg acks). One generator drives all three: `netdam_lab::generator`
//!    on host 1 (AF_PACKET past the qdisc, 64 frames per system call);
//!    host 1 drops the acks in XDP.
//! 3. READ 64 B round-trip latency, p50 and p99, from one client on host 1
//!    (a blocking UDP socket): NetDAM against the userspace server.
//!
//! The userspace server runs with NetDAM detached, so that neither pays for
//! the other.

use std::{
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc::channel,
        Arc,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{anyhow, Context as _, Result};
use aya::{
    maps::PerCpuArray,
    programs::{Xdp, XdpMode},
    EbpfLoader,
};
use netdam_common::{
    frame::{netdam_frame, Endpoint},
    wire::{flags, DEFAULT_PORT},
    NetdamHdr, Opcode, Status,
};
use netdam_lab::{
    plot,
    testbed::{host_ip, host_mac, Served, Testbed, IFACE},
};
use netdam_tests::{netdam_bin, require_root};
use netdam_user::stats::Stats;
use serde::Serialize;

use crate::udp_node::UdpNode;

const PREFIX: &str = "nbnd";
const RKEY: u32 = 0x1234;
const MEM: usize = 16 << 20;
pub(crate) const CLIENT_PORT: u16 = 40000;

#[derive(clap::Args)]
pub struct Args {
    /// Repetitions (medians are reported).
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Seconds of traffic per throughput measurement.
    #[arg(long, default_value_t = 2.0)]
    secs: f64,
    /// READ round trips per latency measurement.
    #[arg(long, default_value_t = 20_000)]
    samples: u32,
    /// Where the JSON and the SVG plot go.
    #[arg(long, default_value = "results")]
    out: PathBuf,
}

#[derive(Serialize, Default)]
struct Results {
    /// Frames per second, per repetition: what the generator sent during
    /// each measurement, and what the node did with them.
    generator_fps_drop: Vec<f64>,
    generator_fps_netdam: Vec<f64>,
    generator_fps_userspace: Vec<f64>,
    drop_fps: Vec<f64>,
    netdam_write_fps: Vec<f64>,
    userspace_write_fps: Vec<f64>,
    /// READ 64 B round trip, microseconds: (p50, p99) per repetition.
    netdam_read_us: Vec<(f64, f64)>,
    userspace_read_us: Vec<(f64, f64)>,
}

pub fn run(a: Args) -> Result<()> {
    require_root();
    let tb = Testbed::up(PREFIX, 2, 1500)?;
    let serve_args: Vec<String> = [
        "--mem-size",
        "16MiB",
        "--region",
        &format!("{RKEY:#x}:0:16MiB:rw"),
        "--mode",
        "native",
    ]
    .map(String::from)
    .to_vec();
    let node = Endpoint {
        mac: host_mac(0),
        ip: host_ip(0),
        port: DEFAULT_PORT,
    };
    let client = Endpoint {
        mac: host_mac(1),
        ip: host_ip(1),
        port: CLIENT_PORT,
    };
    let mut h = NetdamHdr::request(Opcode::Write);
    h.flags = flags::ACK_REQ;
    h.set_rkey(RKEY);
    h.set_addr(4096);
    h.set_len(1024);
    let write_frame = netdam_frame(&client, &node, &h, &[0x5A; 1024]);
    let duration = Duration::from_secs_f64(a.secs);
    let mut r = Results::default();
    for rep in 1..=a.reps {
        eprintln!("repetition {rep}/{}: NetDAM", a.reps);
        let served: Served = tb.serve(0, &netdam_bin(), &serve_args)?;
        let before = requests_ok(&tb, "WRITE")?;
        let (sent, secs) = generate(&tb, &write_frame, duration)?;
        let executed = requests_ok(&tb, "WRITE")? - before;
        r.generator_fps_netdam.push(sent as f64 / secs);
        r.netdam_write_fps.push(executed as f64 / secs);
        r.netdam_read_us.push(read_latency(&tb, a.samples)?);
        served.stop();
        eprintln!("repetition {rep}/{}: XDP_DROP ceiling", a.reps);
        let dropper = attach_dropper(&tb)?;
        let (sent, secs) = generate(&tb, &write_frame, duration)?;
        let dropped = dropper.finish()?;
        r.generator_fps_drop.push(sent as f64 / secs);
        r.drop_fps.push(dropped as f64 / secs);
        eprintln!("repetition {rep}/{}: userspace server", a.reps);
        let (server, received) = start_userspace(&tb)?;
        let before = received.load(Ordering::Relaxed);
        let (sent, secs) = generate(&tb, &write_frame, duration)?;
        let executed = received.load(Ordering::Relaxed) - before;
        r.generator_fps_userspace.push(sent as f64 / secs);
        r.userspace_write_fps.push(executed as f64 / secs);
        r.userspace_read_us.push(read_latency(&tb, a.samples)?);
        server.finish()?;
    }
    report(&a, &r)
}

/// Requests of `op` the NetDAM node answered OK so far.
pub(crate) fn requests_ok(tb: &Testbed, op: &str) -> Result<u64> {
    Ok(Stats::read_pinned(&tb.hosts[0].pin_dir)?.requests(op, Status::Ok))
}

/// Generator threads: one per CPU, as each send carries its frames through
/// the whole path (veth, switch, node) on its own CPU.
const GENERATORS: usize = 2;

/// Transmits `frame` from host 1 for `duration` (`netdam_lab::generator`),
/// while host 1 drops whatever comes back in XDP; (frames sent, seconds).
pub(crate) fn generate(tb: &Testbed, frame: &[u8], duration: Duration) -> Result<(u64, f64)> {
    let frame = frame.to_vec();
    netdam_lab::testbed::in_netns(&tb.hosts[1].netns, move || -> Result<(u64, f64)> {
        let mut ebpf = EbpfLoader::new()
            .load(netdam_lab::NETDAM_LAB_XDP)
            .context("loading the answer dropper")?;
        let absorb: &mut Xdp = ebpf.program_mut("netdam_drop").context("netdam_drop")?.try_into()?;
        absorb.load()?;
        absorb
            .attach(IFACE, XdpMode::Driver)
            .context("dropping the answers on host 1")?;
        let start = Instant::now();
        let sent = std::thread::scope(|s| {
            let senders: Vec<_> = (0..GENERATORS)
                .map(|_| s.spawn(|| netdam_lab::generator::blast(IFACE, &frame, || start.elapsed() < duration)))
                .collect();
            senders
                .into_iter()
                .map(|t| t.join().expect("a generator thread panicked"))
                .sum::<std::io::Result<u64>>()
        })
        .context("the AF_PACKET generator")?;
        Ok((sent, start.elapsed().as_secs_f64()))
    })?
}

/// A thread in a test host's namespace that sets something up there,
/// keeps it until `finish`, then ends with a result.
struct Held<T> {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<T>>,
}

impl<T: Send + 'static> Held<T> {
    /// Runs `setup` in `netns`; returns once it has, with what it reported.
    fn start<R, K>(
        netns: &str,
        setup: impl FnOnce() -> Result<(R, K)> + Send + 'static,
        end: impl FnOnce(K) -> Result<T> + Send + 'static,
    ) -> Result<(Held<T>, R)>
    where
        R: Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready) = channel();
        let flag = stop.clone();
        let name = netns.to_string();
        let thread = std::thread::spawn(move || -> Result<T> {
            let (report, kept) = enter(&name).and_then(|_| setup()).inspect_err(|_| {
                let _ = ready_tx.send(None);
            })?;
            let _ = ready_tx.send(Some(report));
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(10));
            }
            end(kept)
        });
        match ready.recv().ok().flatten() {
            Some(report) => Ok((Held { stop, thread }, report)),
            None => Err(thread
                .join()
                .map_err(|_| anyhow!("the thread in {netns} panicked"))?
                .err()
                .unwrap_or_else(|| anyhow!("the thread in {netns} did not start"))),
        }
    }

    fn finish(self) -> Result<T> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().map_err(|_| anyhow!("a benchmark thread panicked"))?
    }
}

/// The minimal XDP_DROP program on the node's interface, counting; ends with the frames dropped.
fn attach_dropper(tb: &Testbed) -> Result<Held<u64>> {
    let (held, ()) = Held::start(
        &tb.hosts[0].netns,
        || {
            let mut ebpf = EbpfLoader::new().load(netdam_lab::NETDAM_LAB_XDP)?;
            let drop: &mut Xdp = ebpf.program_mut("netdam_drop").context("netdam_drop")?.try_into()?;
            drop.load()?;
            drop.attach(IFACE, XdpMode::Driver)?;
            Ok(((), ebpf))
        },
        |ebpf| {
            let counts: PerCpuArray<_, u64> =
                PerCpuArray::try_from(ebpf.map("BENCH_DROPPED").context("BENCH_DROPPED")?)?;
            Ok(counts.get(&0, 0)?.iter().sum())
        },
    )?;
    Ok(held)
}

/// The userspace server on the node's address and port P (NetDAM
/// detached), and the count of datagrams it received, as it goes up.
fn start_userspace(tb: &Testbed) -> Result<(Held<()>, Arc<AtomicU64>)> {
    Held::start(
        &tb.hosts[0].netns,
        || {
            let node = UdpNode::start(host_ip(0), DEFAULT_PORT, MEM)?;
            Ok((node.received(), node))
        },
        |node| {
            drop(node);
            Ok(())
        },
    )
}

fn enter(netns: &str) -> Result<()> {
    let f = std::fs::File::open(format!("/run/netns/{netns}"))?;
    nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)?;
    Ok(())
}

/// `samples` READs of 64 bytes from host 1, one at a time; (p50, p99) in us.
fn read_latency(tb: &Testbed, samples: u32) -> Result<(f64, f64)> {
    netdam_lab::testbed::in_netns(&tb.hosts[1].netns, move || -> Result<(f64, f64)> {
        let sock = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))?;
        sock.connect(SocketAddrV4::new(host_ip(0), DEFAULT_PORT))?;
        sock.set_read_timeout(Some(Duration::from_millis(100)))?;
        let mut h = NetdamHdr::request(Opcode::Read);
        h.set_rkey(RKEY);
        h.set_addr(4096);
        h.set_len(64);
        let mut rtts = Vec::with_capacity(samples as usize);
        let mut buf = [0u8; 2048];
        let mut lost = 0u32;
        for seq in 0..samples + 100 {
            h.set_seq(seq);
            let mut req = h.to_bytes().to_vec();
            req.extend_from_slice(&[0; 64]);
            let t = Instant::now();
            // A READ lost (a server still draining the generator's backlog
            // drops some) is resent after 100 ms and its sample left out.
            let (mut answered, mut sends) = (false, 0);
            while !answered && sends < 10 {
                sock.send(&req)?;
                sends += 1;
                loop {
                    match sock.recv(&mut buf) {
                        Ok(n)
                            if NetdamHdr::from_bytes(&buf[..n]).is_some_and(|a| a.seq() == seq && a.is_response()) =>
                        {
                            answered = true;
                            break;
                        }
                        Ok(_) => continue,
                        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                            break
                        }
                        Err(e) => return Err(e).context("the READ latency probe"),
                    }
                }
            }
            anyhow::ensure!(answered, "no answer to READ {seq} after 10 sends, 100 ms apart");
            // The first 100 warm the caches and the ARP entry.
            if seq >= 100 {
                match sends {
                    1 => rtts.push(t.elapsed().as_secs_f64() * 1e6),
                    _ => lost += 1,
                }
            }
        }
        if lost > 0 {
            eprintln!("READ latency: {lost} of {samples} READs lost and resent, left out");
        }
        rtts.sort_by(f64::total_cmp);
        let at = |q: f64| rtts[((rtts.len() - 1) as f64 * q) as usize];
        Ok((at(0.5), at(0.99)))
    })?
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn report(a: &Args, r: &Results) -> Result<()> {
    let (drop, nd, us) = (
        median(&r.drop_fps),
        median(&r.netdam_write_fps),
        median(&r.userspace_write_fps),
    );
    let gens = [
        median(&r.generator_fps_drop),
        median(&r.generator_fps_netdam),
        median(&r.generator_fps_userspace),
    ];
    println!(
        "WRITE 1 KiB (ACK_REQ) throughput at one node, median of {} repetitions",
        a.reps
    );
    println!("{:<30} {:>14} {:>12} {:>8}", "", "generator fps", "node fps", "ratio");
    for (name, g, v) in [
        ("XDP_DROP ceiling", gens[0], drop),
        ("NetDAM WRITE (XDP)", gens[1], nd),
        ("userspace (recvmmsg/sendmmsg)", gens[2], us),
    ] {
        println!("{name:<30} {g:>14.0} {v:>12.0} {:>7.2}x", v / drop);
    }
    println!(
        "goal NetDAM >= 0.7x the drop ceiling: {:.2}x ({}); >= 4x the userspace server: {:.2}x ({})",
        nd / drop,
        if nd / drop >= 0.7 { "met" } else { "not met" },
        nd / us,
        if nd / us >= 4.0 { "met" } else { "not met" }
    );
    let p = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    let (n50, n99) = (p(&r.netdam_read_us, |x| x.0), p(&r.netdam_read_us, |x| x.1));
    let (u50, u99) = (p(&r.userspace_read_us, |x| x.0), p(&r.userspace_read_us, |x| x.1));
    println!(
        "\nREAD 64 B round trip from one client, {} samples, median of {} repetitions",
        a.samples, a.reps
    );
    println!("{:<34} {:>10} {:>10}", "", "p50 us", "p99 us");
    println!("{:<34} {:>10.1} {:>10.1}", "NetDAM (XDP)", n50, n99);
    println!("{:<34} {:>10.1} {:>10.1}", "userspace server", u50, u99);
    println!(
        "{:<34} {:>9.2}x {:>9.2}x  (goal: both <= 0.6x: {})",
        "NetDAM / userspace",
        n50 / u50,
        n99 / u99,
        if n50 / u50 <= 0.6 && n99 / u99 <= 0.6 {
            "met"
        } else {
            "not met"
        }
    );
    std::fs::create_dir_all(&a.out)?;
    let json = a.out.join("bench-node.json");
    std::fs::write(&json, serde_json::to_string_pretty(r)?)?;
    let svg = plot::bars(
        "one node: WRITE 1 KiB frames/s (top), READ 64 B p50/p99 us (bottom)",
        &[("XDP_DROP", drop), ("NetDAM WRITE", nd), ("userspace WRITE", us)],
        &[
            ("NetDAM p50", n50),
            ("NetDAM p99", n99),
            ("userspace p50", u50),
            ("userspace p99", u99),
        ],
    );
    let svg_path = a.out.join("bench-node.svg");
    std::fs::write(&svg_path, svg)?;
    eprintln!("results: {} and {}", json.display(), svg_path.display());
    Ok(())
}
