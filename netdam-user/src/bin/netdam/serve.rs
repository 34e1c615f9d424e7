//! `netdam serve`: attach the data path to an interface and keep the node until a signal.

use std::{net::Ipv4Addr, time::Duration};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use netdam_common::{wire::DEFAULT_PORT, Region};
use netdam_user::{
    args::{parse_region, parse_size, perm_letters},
    controller::{
        keys::{self, KeyOrigin, RegionArg},
        neighbours, pins, sysctls, AttachMode, Interface, Node, NodeSpec, WindowSweep,
    },
    stats::{self},
};
use tokio::{io::unix::AsyncFd, signal::unix::SignalKind};

use crate::local::*;

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// Interface to attach to.
    #[arg(long)]
    pub(crate) iface: String,
    /// UDP port P of NetDAM requests.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub(crate) port: u16,
    /// Bytes of NetDAM memory (a multiple of 64KiB, at most 2GiB), e.g. 64MiB.
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    pub(crate) mem_size: u64,
    /// A region [KEY:]BASE:SIZE:PERMS (PERMS r=READ w=WRITE a=ATOMIC m=MSG), e.g. 0:4MiB:rwam.
    /// Without KEY (or with KEY `random`) the key is random: printed once and kept in the pin
    /// directory's keys file under /run/netdam/keys (0600), so a restart with the same region keeps it. A KEY (hex or
    /// decimal, e.g. 0x1234) is used as given: 32 bits that a fast link can guess, so pick it at
    /// random. Repeatable.
    #[arg(long = "region", value_parser = parse_region)]
    pub(crate) regions: Vec<RegionArg>,
    /// A peer's IPv4 address. Once any is given only peers are served, each only from the MAC the
    /// neighbour table has for it; CHAIN runs only with peers (it can forward only to them). Repeatable.
    #[arg(long = "peer")]
    pub(crate) peers: Vec<Ipv4Addr>,
    /// XDP attach mode: native (driver), skb (generic), or auto (native, else skb).
    #[arg(long, value_enum, default_value_t = AttachMode::Auto)]
    pub(crate) mode: AttachMode,
    /// IPv4 address the node answers on (default: the interface's first).
    #[arg(long)]
    pub(crate) ip: Option<Ipv4Addr>,
    /// Verify the IPv4 header checksum and the UDP checksum of datagrams to port P, and drop the
    /// ones that are wrong, or carry no UDP checksum (0) and come from a non-peer (nodes send 0,
    /// so peers may) (docs/conformance.md 5).
    #[arg(long)]
    pub(crate) verify_csum: bool,
    /// BAD_KEY answers per second per source IPv4 address (a burst of as many, then that rate);
    /// 0 = unlimited. Beyond it a request that would be answered BAD_KEY is dropped (counted as
    /// bad_key_limited) and the source is locked out, all its requests dropped
    /// (drop_bad_key_lockout), until its allowance refills: a key guesser gets at most this many
    /// guesses a second. Both raise an alarm in `netdam stats` and the log: someone is guessing
    /// keys, or a client has a wrong key (docs/conformance.md 21).
    #[arg(long, default_value_t = 100)]
    pub(crate) bad_key_limit: u32,
    /// Sources the at-most-once window table holds (16 KiB of memory each);
    /// a new source finds it full is answered STALE for non-idempotent ops.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) window_sources: u32,
    /// Windows one source IPv4 address may hold, its source ports and CHAIN origin ports together
    /// [default: a quarter of --window-sources]: a new source past it is answered STALE for
    /// non-idempotent ops (counted as window_source_full), so that one address spraying ports
    /// cannot take the whole table. 1 to --window-sources.
    #[arg(long)]
    pub(crate) window_per_source: Option<u32>,
    /// Seconds unused after which a source's window is marked by the sweep (every quarter of
    /// this), and removed at a later sweep if still unused. Clients must stop retransmitting
    /// before then (netdam's give up after retries x timeout).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) window_idle: u64,
    #[command(flatten)]
    pub(crate) pins: PinDirArgs,
}

pub(crate) async fn serve(a: ServeArgs) -> Result<()> {
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
    let rx_queues = netdam_user::controller::queues::rx_queues(&a.iface)?;
    log::info!(
        "{}: {} receive queue(s) of at most {}; AF_XDP sockets and per-queue counts get {} slot(s)",
        a.iface,
        rx_queues.current,
        rx_queues.max,
        rx_queues.slots()
    );
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
        queue_slots: rx_queues.slots(),
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
pub(crate) fn warn_of_new_alarms(node: &Node, seen: &mut [u64]) {
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
pub(crate) fn region_keys(pin_dir: &std::path::Path, args: &[RegionArg]) -> Result<Vec<(u32, Region)>> {
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
pub(crate) const PEER_SYNC: Duration = Duration::from_secs(1);
/// Every this many syncs, every peer's entry is nudged (not only missing ones).
pub(crate) const PEER_RECHECK_TICKS: u64 = 10;

/// Binds the peers to their MACs in the neighbour table of `iface`, logging each change.
pub(crate) fn bind_peer_macs(node: &mut Node, iface: &str) -> Result<()> {
    let changed = node
        .bind_peer_macs(&neighbours::complete(iface))
        .context("binding the peers to their MACs")?;
    for (ip, mac) in changed {
        let mac: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
        log::info!("peer {ip} bound to MAC {}", mac.join(":"));
    }
    Ok(())
}
