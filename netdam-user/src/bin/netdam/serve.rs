//! `netdam serve`: attach the data path to an interface and keep the node until a signal.

use std::{net::Ipv4Addr, path::PathBuf, time::Duration};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use netdam_common::Region;
use netdam_user::{
    args::{parse_region, parse_size, perm_letters},
    config::{ServeConfig, ServeSettings},
    controller::{
        keys::{self, KeyOrigin, RegionArg},
        neighbours, sysctls, AttachMode, Interface, Node, NodeSpec, WindowSweep,
    },
    metrics, sd_notify,
    stats::{self},
};
use tokio::{io::unix::AsyncFd, signal::unix::SignalKind};

use crate::local::*;

#[derive(Args)]
#[command(
    after_help = "Settings come from the flags, then the --config file, then the defaults shown. \
    With --config, SIGHUP (systemctl reload) re-reads the file and applies its regions, peers and limits \
    to the running node without touching its memory; a reload that is invalid, or that changes iface, \
    port, mem-size, mode, ip, window-sources, pin-dir or metrics (these need a restart), is refused and \
    logged, and the node keeps serving as before. Without --config, SIGHUP stops serve like SIGTERM. \
    Under systemd (Type=notify, dist/netdam.service) serve reports READY=1 once it serves."
)]
pub(crate) struct ServeArgs {
    /// A TOML file with serve's settings (e.g. /etc/netdam/netdam.toml; dist/netdam.toml is a
    /// commented example): keys named as the flags (mem-size, bad-key-limit, ...), `peers = [..]`
    /// and `[[region]]` tables. A flag given here wins over the file; a --region or --peer here
    /// replaces the file's whole list. Unknown keys are errors.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Interface to attach to (or `iface` in the --config file).
    #[arg(long)]
    pub(crate) iface: Option<String>,
    /// UDP port P of NetDAM requests [default: 4793].
    #[arg(long)]
    pub(crate) port: Option<u16>,
    /// Bytes of NetDAM memory (a multiple of 64KiB, at most 2GiB), e.g. 64MiB [default: 64MiB].
    #[arg(long, value_parser = parse_size)]
    pub(crate) mem_size: Option<u64>,
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
    /// XDP attach mode: native (driver), skb (generic), or auto (native, else skb) [default: auto].
    #[arg(long, value_enum)]
    pub(crate) mode: Option<AttachMode>,
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
    /// keys, or a client has a wrong key (docs/conformance.md 21) [default: 100].
    #[arg(long)]
    pub(crate) bad_key_limit: Option<u32>,
    /// Sources the at-most-once window table holds (16 KiB of memory each);
    /// a new source finds it full is answered STALE for non-idempotent ops [default: 1024].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) window_sources: Option<u32>,
    /// Windows one source IPv4 address may hold, its source ports and CHAIN origin ports together
    /// [default: a quarter of --window-sources]: a new source past it is answered STALE for
    /// non-idempotent ops (counted as window_source_full), so that one address spraying ports
    /// cannot take the whole table. 1 to --window-sources.
    #[arg(long)]
    pub(crate) window_per_source: Option<u32>,
    /// Seconds unused after which a source's window is marked by the sweep (every quarter of
    /// this), and removed at a later sweep if still unused. Clients must stop retransmitting
    /// before then (netdam's give up after retries x timeout) [default: 30].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) window_idle: Option<u64>,
    /// Serve the counters and gauges in the Prometheus text format at http://ADDR/metrics,
    /// e.g. 127.0.0.1:9464. Unauthenticated: bind it to loopback or a management network, or
    /// firewall the port (docs/deploy.md).
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics: Option<std::net::SocketAddr>,
    /// Check the settings (the flags over the --config file) as loading would, without loading
    /// or touching the interface, print them as a config file with every default filled in,
    /// and exit: 0 if they would serve, 1 with what is wrong. Run it before `systemctl reload netdam`.
    #[arg(long)]
    pub(crate) check: bool,
    /// With --check: print the settings as JSON.
    #[arg(long, requires = "check")]
    pub(crate) json: bool,
    /// Serve even though doctor's check NAME fails (logged as a warning instead): for a check that
    /// misjudges an unusual setup. Repeatable. `netdam doctor --iface IF` shows the checks.
    #[arg(long = "skip-check", value_name = "NAME", value_parser = clap::builder::PossibleValuesParser::new(netdam_user::doctor::CHECKS))]
    pub(crate) skip_checks: Vec<String>,
    #[command(flatten)]
    pub(crate) pins: PinDirArgs,
}

impl ServeArgs {
    /// The settings the command line gives (`None` where it gives none).
    pub(crate) fn flags(&self) -> ServeConfig {
        ServeConfig {
            iface: self.iface.clone(),
            port: self.port,
            mem_size: self.mem_size,
            mode: self.mode,
            ip: self.ip,
            peers: (!self.peers.is_empty()).then(|| self.peers.clone()),
            regions: (!self.regions.is_empty()).then(|| self.regions.clone()),
            verify_csum: self.verify_csum.then_some(true),
            bad_key_limit: self.bad_key_limit,
            window_sources: self.window_sources,
            window_per_source: self.window_per_source,
            window_idle: self.window_idle,
            pin_dir: self.pins.pin_dir.clone(),
            metrics: self.metrics,
        }
    }

    /// The flags over the --config file (read now) over the defaults.
    pub(crate) fn settings(&self) -> Result<ServeSettings> {
        let file = match &self.config {
            Some(path) => ServeConfig::load(path)?,
            None => ServeConfig::default(),
        };
        Ok(self.flags().over(file).resolve()?)
    }
}

pub(crate) async fn serve(args: ServeArgs) -> Result<()> {
    let mut a = args.settings()?;
    if args.check {
        a.check()?;
        let settings = a.to_toml();
        match args.json {
            true => println!("{}", serde_json::to_string_pretty(&settings)?),
            false => print!("{}", toml::to_string(&settings)?),
        }
        return Ok(());
    }
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
    let pin_dir = a.pin_dir.clone();
    // Before anything changes (keys drawn, pins made): a host that cannot serve says why.
    netdam_user::doctor::before_serve(&a.iface, &pin_dir, a.mode, &args.skip_checks)?;
    let mut spec = node_spec(&a, &iface, ipv4)?;
    // Before loading: a port that is taken stops serve before it changes anything.
    let metrics_listener = match a.metrics {
        Some(addr) => Some(metrics::bind(addr).await?),
        None => None,
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
    // restoring the kernel settings. A hangup is a reload with --config
    // (systemctl reload), else (the terminal or SSH session closed) a stop
    // like SIGTERM.
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
    let gauges = std::sync::Arc::new(std::sync::Mutex::new(metrics::Gauges::default()));
    set_gauges(&gauges, &a, &spec, |g| g.config_time = unix_now());
    if let Some(listener) = metrics_listener {
        let (gauges, iface_name, dir) = (gauges.clone(), a.iface.clone(), pin_dir.clone());
        log::info!(
            "metrics at http://{}/metrics",
            listener.local_addr().context("the metrics address")?
        );
        tokio::spawn(metrics::serve(listener, move || {
            let (counters, windows) = metrics::read_pinned(&dir).map_err(|e| e.to_string())?;
            let g = gauges.lock().expect("gauges lock").clone();
            Ok(metrics::render(&metrics::Scrape {
                iface: &iface_name,
                counters: &counters,
                windows,
                gauges: &g,
            }))
        }));
    }
    log::info!(
        "serving NetDAM on {} ({mode} XDP): {ipv4} port {} mtu {}, {} region(s){}, {} peer(s)",
        a.iface,
        a.port,
        iface.mtu,
        spec.regions.len(),
        regions_text(&spec.regions),
        spec.peers.len()
    );
    sd_notify::notify(&format!("READY=1\nSTATUS=serving NetDAM on {} ({mode} XDP)", a.iface));
    let log_fd = match node.log_fd() {
        Some(fd) => {
            let owned = fd.try_clone_to_owned().context("duplicating the eBPF log fd")?;
            // SAFETY: `owned` is our own duplicate of the ring buffer's fd and lives as long as the AsyncFd.
            Some(unsafe { AsyncFd::register(owned) }.map_err(|e| anyhow::anyhow!("registering the eBPF log fd: {e}"))?)
        }
        None => None,
    };
    let mut idle = Duration::from_secs(a.window_idle);
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
                let resolved = neighbours::resolved(&a.iface, &spec.peers).len() as u64;
                set_gauges(&gauges, &a, &spec, |g| g.peers_resolved = resolved);
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
            _ = hangup.recv() => {
                if args.config.is_none() { log::info!("SIGHUP without --config: detaching"); break }
                sd_notify::notify("RELOADING=1");
                match reload(&args, &a, &mut node, &iface, ipv4) {
                    Ok((new, new_spec)) => {
                        if new.window_idle != a.window_idle {
                            idle = Duration::from_secs(new.window_idle);
                            sweep = tokio::time::interval(idle / 4);
                        }
                        (a, spec) = (new, new_spec);
                        set_gauges(&gauges, &a, &spec, |g| { g.reloads += 1; g.config_time = unix_now(); });
                    }
                    Err(e) => {
                        log::error!("reload refused, still serving as before: {}", netdam_user::cli::error_chain(&e));
                        set_gauges(&gauges, &a, &spec, |g| g.reload_failures += 1);
                    }
                }
                sd_notify::notify(&format!("READY=1\nSTATUS=serving NetDAM on {}", a.iface));
            }
            r = async { match &log_fd { Some(fd) => fd.readable().await.map(|mut g| g.clear_ready()), None => std::future::pending().await } } => {
                r.context("polling the eBPF log")?;
                node.flush_log();
            }
        }
    }
    sd_notify::notify("STOPPING=1");
    node.detach()?;
    sysctls.restore().context("restoring the kernel settings")?;
    log::info!(
        "detached from {}; memory and counters stay pinned in {}",
        a.iface,
        pin_dir.display()
    );
    Ok(())
}

/// The node's spec from the settings: the regions with their keys
/// (`region_keys`), the peers less the node's own address.
pub(crate) fn node_spec(a: &ServeSettings, iface: &Interface, ipv4: Ipv4Addr) -> Result<NodeSpec> {
    let rx_queues = netdam_user::controller::queues::rx_queues(&a.iface)?;
    log::info!(
        "{}: {} receive queue(s) of at most {}; AF_XDP sockets and per-queue counts get {} slot(s)",
        a.iface,
        rx_queues.current,
        rx_queues.max,
        rx_queues.slots()
    );
    Ok(NodeSpec {
        port: a.port,
        mem_size: a.mem_size,
        mac: iface.mac,
        ipv4,
        mtu: iface.mtu,
        regions: region_keys(&a.pin_dir, &a.regions)?,
        // The node's own address needs no entry: its host may be a CHAIN's
        // origin anyway, and frames claiming it from the wire are dropped.
        peers: a.peers.iter().copied().filter(|p| *p != ipv4).collect(),
        verify_csum: a.verify_csum,
        window_sources: a.window_sources,
        window_per_source: a.window_per_source,
        bad_key_limit: a.bad_key_limit,
        queue_slots: rx_queues.slots(),
    })
}

/// A reload (SIGHUP): re-reads the --config file and, if it is valid and
/// changes nothing that needs a restart, replaces the node's region and
/// peer tables and limits in place (`Node::configure`: the memory, its
/// map, the counters and the windows stay; a region that stays keeps its
/// key, a peer that stays its MAC). On an error nothing has changed.
pub(crate) fn reload(
    args: &ServeArgs,
    now: &ServeSettings,
    node: &mut Node,
    iface: &Interface,
    ipv4: Ipv4Addr,
) -> Result<(ServeSettings, NodeSpec)> {
    let Some(path) = args.config.as_deref() else {
        bail!("no --config file to reload from")
    };
    let new = args.settings()?;
    for (flag, given) in [
        ("--region", !args.regions.is_empty()),
        ("--peer", !args.peers.is_empty()),
    ] {
        if given {
            log::warn!("{flag} is on serve's command line, so the file's list is not used: a reload keeps the flags'");
        }
    }
    let restart = now.restart_needed(&new);
    if !restart.is_empty() {
        let changes: Vec<String> = restart
            .iter()
            .map(|(k, old, new)| format!("{k} {old} -> {new}"))
            .collect();
        bail!(
            "{} changes what a running node cannot change ({}): restart serve for that (systemctl restart netdam); \
             the memory stays pinned across a restart with the same mem-size",
            path.display(),
            changes.join(", ")
        );
    }
    let spec = node_spec(&new, iface, ipv4)?;
    node.configure(&spec).context("applying the reloaded config")?;
    log::info!(
        "reloaded {}: {} region(s){}, {} peer(s)",
        path.display(),
        spec.regions.len(),
        regions_text(&spec.regions),
        spec.peers.len()
    );
    let unresolved = neighbours::resolve(&new.iface, ipv4, &spec.peers, Duration::from_secs(1));
    if !unresolved.is_empty() {
        log::warn!(
            "no neighbour entry yet for peer(s) {unresolved:?}: they are neither served nor forwarded to until they answer ARP"
        );
    }
    if let Err(e) = bind_peer_macs(node, &new.iface) {
        log::warn!("{e:#}");
    }
    Ok((new, spec))
}

/// The regions as the log shows them: ` KEY:BASE+SIZE:PERMS` each.
pub(crate) fn regions_text(regions: &[(u32, Region)]) -> String {
    regions
        .iter()
        .map(|(k, r)| format!(" {k:#x}:{:#x}+{:#x}:{}", r.base, r.size, perm_letters(r.perms)))
        .collect()
}

/// Sets the metrics' gauges from the settings and the spec, then applies `more`.
pub(crate) fn set_gauges(
    gauges: &std::sync::Mutex<metrics::Gauges>,
    a: &ServeSettings,
    spec: &NodeSpec,
    more: impl FnOnce(&mut metrics::Gauges),
) {
    let mut g = gauges.lock().expect("gauges lock");
    g.mem_bytes = a.mem_size;
    g.regions = spec.regions.len() as u64;
    g.peers = spec.peers.len() as u64;
    more(&mut g);
}

pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
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
