//! AF_XDP commands: `netdam recv` and `netdam split`.

use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use netdam_user::{
    afxdp::{Delivery, Endpoint, EndpointConfig},
    args::parse_number,
    controller::{
        split::{RingSpec, SplitTable},
        LocalNode,
    },
};
use tokio::signal::unix::SignalKind;

use crate::local::*;

#[derive(Args)]
#[command(
    after_help = "Run it beside the node's `netdam serve`, in the same network namespace. It binds one \
    AF_XDP socket per receive queue of the node's interface; while it runs, MSG and WRITE_NOTIFY are \
    delivered here (without it they are answered NO_RECEIVER) and split ports are split."
)]
pub(crate) struct RecvArgs {
    #[command(flatten)]
    pub(crate) local: LocalArgs,
    /// Stop after this many frames.
    #[arg(long)]
    pub(crate) count: Option<u64>,
    /// Stop when nothing arrives for this long (milliseconds).
    #[arg(long)]
    pub(crate) timeout_ms: Option<u64>,
    /// UMEM frames per socket (a power of two, 64..65536).
    #[arg(long, default_value_t = 4096)]
    pub(crate) frames: u32,
    /// Print each message or rebuilt datagram's bytes as hex.
    #[arg(long)]
    pub(crate) hex: bool,
    /// One JSON object per frame instead of text lines.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct SplitArgs {
    #[command(flatten)]
    pub(crate) local: LocalArgs,
    /// The UDP port whose datagrams are split (not port P).
    #[arg(long, requires = "keep")]
    pub(crate) port: Option<u16>,
    /// Payload bytes kept in the frame; the rest goes to NetDAM memory.
    #[arg(long)]
    pub(crate) keep: Option<u32>,
    /// Stop splitting --port.
    #[arg(long, requires = "port", conflicts_with = "keep")]
    pub(crate) remove: bool,
    /// Slots of the ring (one datagram's rest each; default 4096, as many as an AF_XDP socket's
    /// frames, or what fits a quarter of NetDAM memory). Sets the ring up anew.
    #[arg(long)]
    pub(crate) slots: Option<u32>,
    /// Stamp each slot and descriptor with a generation, so that a reader that comes after the
    /// ring has wrapped detects the overwrite instead of reading another datagram's bytes. The
    /// descriptor's address then carries the generation in its upper 32 bits: a proposed
    /// extension of PROTOCOL.md section 9 (docs/conformance.md 22), off by default. Sets the ring
    /// up anew.
    #[arg(long)]
    pub(crate) generations: bool,
    /// NetDAM address of the ring (default: the top of NetDAM memory). Sets the ring up anew.
    #[arg(long, value_parser = parse_number)]
    pub(crate) ring_addr: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `netdam split`.
pub(crate) fn split(a: SplitArgs) -> Result<()> {
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
pub(crate) async fn recv(a: RecvArgs) -> Result<()> {
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

pub(crate) fn recv_loop(a: &RecvArgs, stop: &std::sync::atomic::AtomicBool) -> Result<()> {
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
pub(crate) fn describe(
    d: &Delivery<'_>,
    mem: &netdam_user::controller::NetdamMemory,
    with_hex: bool,
) -> serde_json::Value {
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

pub(crate) fn line_text(v: &serde_json::Value) -> String {
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
