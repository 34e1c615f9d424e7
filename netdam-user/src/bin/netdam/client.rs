//! The client commands: ping, write, read, the vector ops, the atomics and MSG.

use std::{net::Ipv4Addr, path::PathBuf, time::Duration};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use netdam_common::wire::{Alu, Dtype, DEFAULT_PORT};
use netdam_user::{
    args::{format_values, parse_alu, parse_dtype, parse_number, parse_rkey, parse_size, parse_values},
    Client, ClientConfig,
};

#[derive(Args)]
pub(crate) struct NodeArgs {
    /// The node's IPv4 address.
    #[arg(long)]
    pub(crate) node: Ipv4Addr,
    /// The node's UDP port P.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub(crate) port: u16,
    /// Milliseconds to wait for each answer before resending.
    #[arg(long, default_value_t = 200)]
    pub(crate) timeout_ms: u64,
    /// Resends before giving up.
    #[arg(long, default_value_t = 10)]
    pub(crate) retries: u32,
    /// Requests in flight at once (1..1023), shared out among the stripes.
    #[arg(long, default_value_t = 192, value_parser = clap::value_parser!(u16).range(1..1024))]
    pub(crate) window: u16,
    /// IP MTU of the path to the node: sets the payload per request.
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u32).range(100..=9216))]
    pub(crate) mtu: u32,
    /// Threads a large `write` or `read` is striped over, each with its own
    /// socket and a contiguous part (default: one per CPU, one more with
    /// --afxdp, at most 4).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) streams: Option<u16>,
    /// Send and receive `write` and `read` transfers through an AF_XDP
    /// socket instead of the kernel's UDP stack (faster; needs root). It
    /// attaches a small XDP program to the interface that reaches the node
    /// for as long as the command runs, so that interface must have none
    /// (no `netdam serve` on it) and the node must be on its link.
    #[arg(long)]
    pub(crate) afxdp: bool,
}

impl NodeArgs {
    pub(crate) async fn client(&self) -> Result<Client> {
        let cfg = ClientConfig {
            port: self.port,
            timeout: Duration::from_millis(self.timeout_ms),
            retries: self.retries,
            window: self.window as usize,
            mtu: self.mtu,
            afxdp: self.afxdp,
            streams: self.streams.map_or(0, usize::from),
        };
        Ok(Client::connect(self.node, cfg).await?)
    }
}

#[derive(Args)]
pub(crate) struct PingArgs {
    #[command(flatten)]
    pub(crate) node: NodeArgs,
    /// NOPs to send.
    #[arg(long, default_value_t = 4)]
    pub(crate) count: u32,
}

/// Where in a node's NetDAM memory.
#[derive(Args)]
pub(crate) struct Place {
    /// Key of the region the range lies in.
    #[arg(long, value_parser = parse_rkey)]
    pub(crate) rkey: u32,
    /// Byte address in the node's NetDAM memory (decimal, 0x-hex, or with a unit like 4MiB).
    #[arg(long, value_parser = parse_size)]
    pub(crate) addr: u64,
}

#[derive(Args)]
pub(crate) struct WriteArgs {
    #[command(flatten)]
    pub(crate) node: NodeArgs,
    #[command(flatten)]
    pub(crate) place: Place,
    /// File whose bytes to write.
    #[arg(long)]
    pub(crate) file: PathBuf,
}

#[derive(Args)]
#[command(
    after_help = "The region must allow MSG (m) for a message, WRITE (w) for --notify. A node without a \
    receiver (`netdam recv`) answers NO_RECEIVER."
)]
pub(crate) struct MsgArgs {
    #[command(flatten)]
    pub(crate) node: NodeArgs,
    #[command(flatten)]
    pub(crate) place: Place,
    /// The message (or, with --notify, the bytes to write).
    pub(crate) text: String,
    /// WRITE_NOTIFY instead of MSG: --addr is where the bytes go.
    #[arg(long)]
    pub(crate) notify: bool,
}

#[derive(Args)]
pub(crate) struct ReadArgs {
    #[command(flatten)]
    pub(crate) node: NodeArgs,
    #[command(flatten)]
    pub(crate) place: Place,
    /// Bytes to read, e.g. 4096 or 64MiB.
    #[arg(long, value_parser = parse_size)]
    pub(crate) len: u64,
    /// File to write the bytes to.
    #[arg(long)]
    pub(crate) out: PathBuf,
}

#[derive(Args)]
pub(crate) struct VectorArgs {
    #[command(flatten)]
    pub(crate) node: NodeArgs,
    #[command(flatten)]
    pub(crate) place: Place,
    /// Element type: i32, u32, i64, u64, f32.
    #[arg(long, value_parser = parse_dtype)]
    pub(crate) dtype: Dtype,
    /// Operator: sum (add), min, max, and, or, xor (the bitwise ones not on f32).
    #[arg(long, value_parser = parse_alu)]
    pub(crate) op: Alu,
    /// The vector, comma-separated, e.g. 1,2,3 or -0.5,1.25.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) values: String,
}

#[derive(Args)]
pub(crate) struct AtomicArgs {
    #[command(flatten)]
    pub(crate) node: NodeArgs,
    #[command(flatten)]
    pub(crate) place: Place,
    /// The operand: what to add (fetch-add) or the new value (cas, swap).
    #[arg(long, value_parser = parse_number)]
    pub(crate) value: u64,
    /// cas only: the value the word must hold.
    #[arg(long, value_parser = parse_number)]
    pub(crate) expected: Option<u64>,
}

pub(crate) async fn ping(a: PingArgs) -> Result<()> {
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

pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub(crate) fn progress_bar(total: u64) -> ProgressBar {
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

pub(crate) async fn write(a: WriteArgs) -> Result<()> {
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

pub(crate) async fn read(a: ReadArgs) -> Result<()> {
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

/// `netdam fetch-add`.
pub(crate) async fn fetch_add(a: AtomicArgs) -> Result<()> {
    let old = a
        .node
        .client()
        .await?
        .fetch_add(a.place.rkey, a.place.addr, a.value)
        .await?;
    println!("{old}");
    Ok(())
}

/// `netdam cas`.
pub(crate) async fn cas(a: AtomicArgs) -> Result<()> {
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

/// `netdam swap`.
pub(crate) async fn swap(a: AtomicArgs) -> Result<()> {
    let old = a.node.client().await?.swap(a.place.rkey, a.place.addr, a.value).await?;
    println!("{old}");
    Ok(())
}

/// `netdam reduce`.
pub(crate) async fn reduce(a: VectorArgs) -> Result<()> {
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

/// `netdam accumulate`.
pub(crate) async fn accumulate(a: VectorArgs) -> Result<()> {
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

/// `netdam msg`.
pub(crate) async fn msg(a: MsgArgs) -> Result<()> {
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
