//! `netdam doctor`: checks a host (and an interface) before `serve`, each
//! check `ok`, `warn` or `fail` with what it found and, when not ok, the
//! command that fixes it. `serve` runs the same checks before it attaches:
//! it refuses on a fail and logs the warnings, in the same words.
//!
//! Interfaces are read through netlink and ethtool ioctls, which answer for
//! the calling thread's network namespace; /sys/class/net is not, as under
//! `ip netns add` it can show the host's namespace.

mod drivers;
mod ethtool;
mod netlink;

use std::{
    fmt,
    fs::File,
    path::{Path, PathBuf},
};

pub use drivers::{Channels, Driver, QueueRule, Verdict, XdpFeatures, DRIVERS};
use serde::Serialize;
use thiserror::Error;

use crate::controller::{pins, AttachMode};

/// The oldest kernel netdam supports (README).
pub const MIN_KERNEL: (u32, u32) = (6, 1);
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
const SYSFS_MAGIC: i64 = 0x6265_6572;
const NETNS_DIR: &str = "/run/netns";

/// Every check's name, in the order they run (`serve --skip-check` takes these).
pub const CHECKS: [&str; 13] = [
    "kernel",
    "btf",
    "bpffs",
    "memlock",
    "interface",
    "driver",
    "native-xdp",
    "xdp-tx",
    "mtu",
    "multi-buffer",
    "queues",
    "offloads",
    "zero-copy",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Fail => "fail",
        })
    }
}

/// One check's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub level: Level,
    pub found: String,
    /// The command (or step) that fixes a warn or fail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn ok(name: &'static str, found: impl Into<String>) -> Check {
        Check {
            name,
            level: Level::Ok,
            found: found.into(),
            fix: None,
        }
    }

    fn warn(name: &'static str, found: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            level: Level::Warn,
            found: found.into(),
            fix: Some(fix.into()),
        }
    }

    fn fail(name: &'static str, found: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            level: Level::Fail,
            found: found.into(),
            fix: Some(fix.into()),
        }
    }

    fn verdict(name: &'static str, v: Verdict) -> Check {
        match v {
            Verdict::Ok(found) => Check::ok(name, found),
            Verdict::Warn { found, fix } => Check::warn(name, found, fix),
            Verdict::Fail { found, fix } => Check::fail(name, found, fix),
        }
    }

    /// One line for a log or an error: `NAME: FOUND; fix: FIX`.
    pub fn summary(&self) -> String {
        match &self.fix {
            Some(fix) => format!("{}: {}; fix: {fix}", self.name, self.found),
            None => format!("{}: {}", self.name, self.found),
        }
    }
}

/// What to check.
#[derive(Clone, Debug)]
pub struct Options {
    /// The interface `serve` would attach to; without it only the host is checked.
    pub iface: Option<String>,
    /// Where the maps would be pinned [default: /sys/fs/bpf/netdam/IFACE, or /sys/fs/bpf].
    pub pin_dir: Option<PathBuf>,
    pub mode: AttachMode,
}

/// Runs every check that applies.
pub fn run(opts: &Options) -> Vec<Check> {
    let kernel = kernel_release();
    let mut checks = vec![
        kernel_check(&kernel),
        btf_check(),
        bpffs_check(opts),
        memlock_check(parse_release(&kernel)),
    ];
    if let Some(iface) = &opts.iface {
        checks.extend(interface_checks(iface, opts.mode));
    }
    checks
}

/// The checks as a table: `LEVEL NAME FOUND`, the fix on a line of its own.
pub fn table(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        out.push_str(&format!("{:<4}  {:<12}  {}\n", c.level, c.name, c.found));
        if let Some(fix) = &c.fix {
            out.push_str(&format!("{:<4}  {:<12}  fix: {fix}\n", "", ""));
        }
    }
    out
}

/// The worst level among `checks`.
pub fn worst(checks: &[Check]) -> Level {
    checks.iter().map(|c| c.level).max().unwrap_or(Level::Ok)
}

/// Why `serve` refuses: the checks that fail, one summary a line.
#[derive(Debug, Error)]
#[error("refusing to serve on {iface}, as doctor's check(s) fail:\n{}\n(serve --skip-check NAME serves anyway)", .fails.iter().map(Check::summary).collect::<Vec<_>>().join("\n"))]
pub struct Refusal {
    pub iface: String,
    pub fails: Vec<Check>,
}

/// What `serve` runs before it attaches to `iface`: every check, the
/// warnings (and the fails in `skip`) logged, the other fails refused.
pub fn before_serve(iface: &str, pin_dir: &Path, mode: AttachMode, skip: &[String]) -> Result<(), Refusal> {
    let checks = run(&Options {
        iface: Some(iface.to_string()),
        pin_dir: Some(pin_dir.to_path_buf()),
        mode,
    });
    let fails = vet(&checks, skip);
    if fails.is_empty() {
        Ok(())
    } else {
        Err(Refusal {
            iface: iface.to_string(),
            fails,
        })
    }
}

/// `serve`'s use of the checks: warnings (and fails the user skipped) go
/// to the log; the fails left are returned, for `serve` to refuse with.
fn vet(checks: &[Check], skip: &[String]) -> Vec<Check> {
    let mut fails = Vec::new();
    for c in checks {
        match c.level {
            Level::Ok => log::debug!("{}", c.summary()),
            Level::Warn => log::warn!("{}", c.summary()),
            Level::Fail if skip.iter().any(|s| s == c.name) => {
                log::warn!("{} (skipped by --skip-check {})", c.summary(), c.name)
            }
            Level::Fail => fails.push(c.clone()),
        }
    }
    fails
}

fn kernel_release() -> String {
    // SAFETY: utsname is plain data the call fills.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    let bytes: Vec<u8> = u.release.iter().map(|c| *c as u8).take_while(|c| *c != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// (major, minor) of a release such as "6.18.44-fc".
fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn kernel_check(release: &str) -> Check {
    let (maj, min) = MIN_KERNEL;
    match parse_release(release) {
        Some(v) if v >= MIN_KERNEL => Check::ok("kernel", format!("Linux {release} ({maj}.{min} or newer needed)")),
        Some(_) => Check::fail(
            "kernel",
            format!("Linux {release} is older than {maj}.{min}, the oldest netdam runs on"),
            format!("boot a Linux {maj}.{min} or newer kernel"),
        ),
        None => Check::warn(
            "kernel",
            format!("cannot read the kernel version from {release:?}"),
            format!("make sure the kernel is Linux {maj}.{min} or newer (uname -r)"),
        ),
    }
}

fn btf_check() -> Check {
    let path = "/sys/kernel/btf/vmlinux";
    if Path::new(path).exists() {
        Check::ok("btf", format!("{path} present"))
    } else {
        Check::warn(
            "btf",
            format!(
                "no {path}: the kernel carries no BTF of its own types; netdam's programs do not need it, but \
                 bpftool and verifier messages name fewer types"
            ),
            "a kernel built with CONFIG_DEBUG_INFO_BTF=y (every major distribution's is)",
        )
    }
}

/// A filesystem's name by its statfs magic.
fn fs_name(magic: i64) -> String {
    match magic {
        SYSFS_MAGIC => "sysfs".into(),
        0x0102_1994 => "tmpfs".into(),
        0xef53 => "ext4".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683e => "btrfs".into(),
        0x794c_7630 => "overlayfs".into(),
        _ => format!("a filesystem of type {magic:#x}"),
    }
}

fn bpffs_check(opts: &Options) -> Check {
    let dir = match (&opts.pin_dir, &opts.iface) {
        (Some(d), _) => d.clone(),
        (None, Some(i)) => pins::default_dir(i),
        (None, None) => PathBuf::from("/sys/fs/bpf"),
    };
    // The nearest part of the path that exists: where the pins would land.
    let mut probe = dir.clone();
    while !probe.exists() && probe.pop() {}
    let magic = match nix::sys::statfs::statfs(&probe) {
        // f_type is narrower than i64 on some targets.
        Ok(fs) => fs.filesystem_type().0 as _,
        Err(e) => {
            return Check::fail(
                "bpffs",
                format!("cannot statfs {}: {e}", probe.display()),
                "pass --pin-dir on a bpf filesystem (mount -t bpf bpf /sys/fs/bpf)",
            )
        }
    };
    if magic == BPF_FS_MAGIC {
        return Check::ok(
            "bpffs",
            format!("{} is a bpf filesystem (pins go to {})", probe.display(), dir.display()),
        );
    }
    // Nothing mounted on it: under `ip netns exec` this is the rule, not the exception.
    let why = if magic == SYSFS_MAGIC {
        ": no bpffs is mounted on it in this mount namespace (`ip netns exec` mounts a fresh /sys, which hides \
         the host's)"
    } else {
        ""
    };
    Check::fail(
        "bpffs",
        format!(
            "{} is {}, not a bpf filesystem, so the node's maps cannot be pinned there{why}",
            probe.display(),
            fs_name(magic)
        ),
        "mount -t bpf bpf /sys/fs/bpf; or enter only the network namespace (nsenter --net=/run/netns/NS netdam ...) \
         instead of `ip netns exec`; or pass --pin-dir DIR on a bpf filesystem",
    )
}

fn memlock_check(kernel: Option<(u32, u32)>) -> Check {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills `lim`.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return Check::warn(
            "memlock",
            "cannot read RLIMIT_MEMLOCK",
            "ulimit -l unlimited (LimitMEMLOCK=infinity in a systemd unit)",
        );
    }
    let shown = if lim.rlim_cur == libc::RLIM_INFINITY {
        "unlimited".to_string()
    } else {
        format!("{} KiB", lim.rlim_cur / 1024)
    };
    if kernel.is_some_and(|k| k >= (5, 11)) {
        Check::ok(
            "memlock",
            format!("RLIMIT_MEMLOCK {shown}, not applied to BPF: Linux 5.11+ charges BPF memory to the memory cgroup"),
        )
    } else if lim.rlim_cur == libc::RLIM_INFINITY {
        Check::ok("memlock", format!("RLIMIT_MEMLOCK {shown}"))
    } else {
        Check::warn(
            "memlock",
            format!("RLIMIT_MEMLOCK {shown}: kernels before 5.11 count BPF maps (the NetDAM memory) against it"),
            "ulimit -l unlimited (LimitMEMLOCK=infinity in a systemd unit)",
        )
    }
}

/// What doctor learnt of the interface's veth peer.
struct Peer {
    name: String,
    /// "" in this namespace, else `ip netns exec NS `: the prefix of the fix.
    prefix: String,
    /// " (namespace NS)", or "".
    place: String,
    xdp_prog: Option<u32>,
    gro_requested: Option<bool>,
    tx_queues: Option<u32>,
}

/// Where a veth's peer is: the name of its namespace under /run/netns, or
/// `None` when this namespace; `Err` with the nsid when unnamed.
fn peer_namespace(link: &netlink::Link) -> Result<Option<(String, File)>, i32> {
    let Some(nsid) = link.link_netnsid else {
        return Ok(None);
    };
    let entries = std::fs::read_dir(NETNS_DIR).map_err(|_| nsid)?;
    for e in entries.flatten() {
        let Ok(f) = File::open(e.path()) else { continue };
        if netlink::nsid_of(&f).ok().flatten() == Some(nsid) {
            return Ok(Some((e.file_name().to_string_lossy().into_owned(), f)));
        }
    }
    Err(nsid)
}

/// Reads the peer with `index` in the calling thread's namespace.
fn read_peer(index: u32) -> std::io::Result<(netlink::Link, Option<bool>, Option<u32>)> {
    let l = netlink::link_by_index(index)?;
    let gro = ethtool::features(&l.name)
        .ok()
        .and_then(|f| f.into_iter().find(|(n, _)| n == "rx-gro"))
        .map(|(_, f)| f.requested);
    let tx = ethtool::channels(&l.name).ok().map(|c| c.tx);
    Ok((l, gro, tx))
}

fn inspect_peer(link: &netlink::Link) -> Result<Peer, String> {
    let index = link.link.ok_or("the kernel names no peer")?;
    let ns = peer_namespace(link).map_err(|nsid| {
        format!("its peer (ifindex {index}) is in a network namespace with no name under {NETNS_DIR} (nsid {nsid})")
    })?;
    let (read, prefix, place) = match ns {
        None => (read_peer(index), String::new(), String::new()),
        Some((name, file)) => {
            let read = std::thread::scope(|s| {
                s.spawn(|| {
                    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
                    read_peer(index)
                })
                .join()
                .expect("the peer reader does not panic")
            });
            (read, format!("ip netns exec {name} "), format!(" (namespace {name})"))
        }
    };
    let (l, gro_requested, tx_queues) = read.map_err(|e| format!("its peer (ifindex {index}) cannot be read: {e}"))?;
    Ok(Peer {
        name: l.name,
        prefix,
        place,
        xdp_prog: l.xdp_prog_id,
        gro_requested,
        tx_queues,
    })
}

/// veth queues XDP_TX frames on its peer, but wakes the peer for them only
/// when the peer runs an XDP program (veth_xdp_flush in drivers/net/veth.c):
/// GRO gives the peer NAPI, which carries redirected frames (those are
/// flushed anyway), not XDP_TX ones. Without a program every answer is lost.
fn veth_tx_check(peer: &Result<Peer, String>) -> Check {
    const ATTACH: &str = "xdpdrv obj PROG.o sec SECTION (any program that passes frames, attached in native mode)";
    let p = match peer {
        Ok(p) => p,
        Err(why) => {
            return Check::warn(
                "xdp-tx",
                format!(
                    "{why}: cannot check that it runs an XDP program; veth delivers XDP_TX frames (every answer) \
                     only to a peer that does"
                ),
                format!("in the peer's namespace: ip link set dev PEER {ATTACH}"),
            );
        }
    };
    if let Some(id) = p.xdp_prog {
        return Check::ok(
            "xdp-tx",
            format!(
                "veth peer {}{} runs XDP program {id}: it receives XDP_TX frames",
                p.name, p.place
            ),
        );
    }
    let gro = match p.gro_requested {
        Some(true) => " (its GRO carries redirected frames, not XDP_TX ones)",
        _ => "",
    };
    Check::fail(
        "xdp-tx",
        format!(
            "veth peer {}{} runs no XDP program{gro}: veth wakes a peer for XDP_TX frames only when it runs one, so \
             every answer is lost",
            p.name, p.place
        ),
        format!("{}ip link set dev {} {ATTACH}", p.prefix, p.name),
    )
}

fn interface_checks(iface: &str, mode: AttachMode) -> Vec<Check> {
    let link = match netlink::link_by_name(iface) {
        Ok(l) => l,
        Err(e) => {
            return vec![Check::fail(
                "interface",
                format!("no interface {iface} in this network namespace ({e})"),
                "pass --iface with an interface `ip link` lists here (run inside the node's namespace)",
            )]
        }
    };
    let mut checks = vec![Check::ok(
        "interface",
        format!("{iface}: index {}, MTU {}", link.index, link.mtu),
    )];
    let (driver, bus) = match ethtool::driver(iface) {
        Ok(d) => d,
        Err(e) => {
            checks.push(Check::warn(
                "driver",
                format!("{iface} does not name its driver ({e}): the driver checks are skipped"),
                "check the NIC's XDP support by hand (ethtool -i, ip link)",
            ));
            return checks;
        }
    };
    let known = drivers::lookup(&driver);
    let kernel_features = netlink::xdp_features(link.index).ok().flatten().map(XdpFeatures);
    let features = kernel_features.or(known.map(Driver::features));
    let source = match (kernel_features, known) {
        (Some(_), _) => "as the kernel reports",
        (None, Some(_)) => "from netdam's driver table; this kernel reports no xdp-features",
        (None, None) => "unknown: not in netdam's driver table and this kernel reports no xdp-features",
    };
    checks.push(Check::ok(
        "driver",
        format!(
            "{driver}{}{}; XDP features: {} ({source})",
            known
                .filter(|d| d.known_as != d.name)
                .map(|d| format!(" ({})", d.known_as))
                .unwrap_or_default(),
            if bus.is_empty() {
                String::new()
            } else {
                format!(" at {bus}")
            },
            features.map(|f| f.names()).unwrap_or_else(|| "?".into()),
        ),
    ));
    let native = features.is_some_and(|f| f.has(XdpFeatures::BASIC));
    // The XDP `serve` ends up with: auto falls back to generic without native.
    let skb = mode == AttachMode::Skb || (mode == AttachMode::Auto && !native);
    checks.push(match (native, mode) {
        (true, _) => Check::ok("native-xdp", format!("{driver} runs XDP in the driver")),
        (false, AttachMode::Skb) => Check::ok(
            "native-xdp",
            format!("{driver} has no native XDP known; --mode skb runs generic XDP"),
        ),
        (false, AttachMode::Native) => Check::fail(
            "native-xdp",
            format!("{driver} has no native XDP known, and --mode native asks for it"),
            "serve --mode skb (generic XDP, slower), or a NIC whose driver has native XDP",
        ),
        (false, AttachMode::Auto) => Check::warn(
            "native-xdp",
            format!("{driver} has no native XDP known: serve falls back to generic (skb) XDP, slower"),
            "a NIC whose driver has native XDP (see docs/doctor.md), or accept --mode skb",
        ),
    });
    let is_veth = driver == "veth";
    let peer = is_veth.then(|| inspect_peer(&link));
    checks.push(match &peer {
        _ if skb => Check::ok("xdp-tx", "generic (skb) XDP sends XDP_TX frames through the stack"),
        Some(p) => veth_tx_check(p),
        None => Check::ok("xdp-tx", format!("{driver} sends XDP_TX frames itself")),
    });
    let multi_buffer = features.is_some_and(|f| f.has(XdpFeatures::RX_SG));
    checks.push(match known {
        _ if skb => Check::ok("mtu", format!("{}: generic XDP has no driver limit", link.mtu)),
        Some(d) => Check::verdict(
            "mtu",
            drivers::mtu_rule(iface, link.mtu, d.mtu_limit(page_size()), &driver, multi_buffer),
        ),
        None => Check::ok("mtu", format!("{}: no XDP limit known for {driver}", link.mtu)),
    });
    checks.push(Check::ok(
        "multi-buffer",
        if multi_buffer {
            "yes (rx-sg): frames larger than one buffer reach the data path, whose programs are frags-aware"
        } else {
            "no: every frame must fit one buffer (see mtu)"
        },
    ));
    checks.push(queue_check(iface, known.map(|d| d.queues), peer.as_ref(), skb));
    checks.push(offload_check(iface, skb));
    checks.push(Check::ok(
        "zero-copy",
        if features.is_some_and(|f| f.has(XdpFeatures::XSK_ZEROCOPY)) {
            "yes (xsk-zerocopy): AF_XDP sockets (netdam recv, MSG) can bind in zero-copy mode"
        } else {
            "no: AF_XDP sockets (netdam recv, MSG) run in copy mode"
        },
    ));
    checks
}

fn page_size() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u32
    } else {
        4096
    }
}

fn cpus() -> u32 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }).max(1) as u32
}

fn queue_check(iface: &str, rule: Option<QueueRule>, peer: Option<&Result<Peer, String>>, skb: bool) -> Check {
    let ch = match ethtool::channels(iface) {
        Ok(c) => c,
        Err(e) => return Check::ok("queues", format!("the driver reports no channels ({e})")),
    };
    let counts = format!(
        "rx {} tx {} combined {} (maximum {} {} {})",
        ch.rx, ch.tx, ch.combined, ch.max_rx, ch.max_tx, ch.max_combined
    );
    if skb {
        return Check::ok("queues", format!("{counts}; generic XDP has no queue rule"));
    }
    match (rule, peer) {
        (Some(QueueRule::HalfOfMax), _) => Check::verdict("queues", drivers::ena_queue_rule(iface, ch)),
        (Some(QueueRule::PairPerCpu), _) => Check::verdict("queues", drivers::virtio_queue_rule(iface, ch, cpus())),
        (
            Some(QueueRule::PeerTxQueues),
            Some(Ok(Peer {
                name,
                place,
                prefix,
                tx_queues: Some(tx),
                ..
            })),
        ) => Check::verdict("queues", drivers::veth_queue_rule(ch.rx, name, place, *tx, prefix)),
        _ => Check::ok("queues", counts),
    }
}

fn offload_check(iface: &str, skb: bool) -> Check {
    let feats = match ethtool::features(iface) {
        Ok(f) => f,
        Err(e) => return Check::ok("offloads", format!("the driver reports no offload features ({e})")),
    };
    let on = |name: &str| feats.iter().any(|(n, f)| n == name && f.active);
    if on("rx-lro") {
        Check::fail(
            "offloads",
            "LRO is on: drivers refuse native XDP with it, and merged frames are not what was sent",
            format!("ethtool -K {iface} lro off"),
        )
    } else if on("rx-gro-hw") && !skb {
        Check::warn(
            "offloads",
            "hardware GRO is on: most drivers refuse native XDP with it (virtio_net turns it off itself when the \
             host lets it)",
            format!("ethtool -K {iface} rx-gro-hw off"),
        )
    } else {
        Check::ok("offloads", "LRO and hardware GRO off")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse() {
        assert_eq!(parse_release("6.18.44-fc-v1300"), Some((6, 18)));
        assert_eq!(parse_release("6.1.0-27-amd64"), Some((6, 1)));
        assert_eq!(parse_release("weird"), None);
        assert_eq!(kernel_check("6.1.0-27-amd64").level, Level::Ok);
        let old = kernel_check("5.15.0-100-generic");
        assert_eq!(
            old.summary(),
            "kernel: Linux 5.15.0-100-generic is older than 6.1, the oldest netdam runs on; fix: boot a Linux 6.1 or \
             newer kernel"
        );
    }

    #[test]
    fn the_table_puts_fixes_under_the_finding() {
        let checks = [
            Check::ok("kernel", "Linux 6.18"),
            Check::fail("mtu", "9001 is above 3498", "ip link set dev eth0 mtu 3498"),
        ];
        assert_eq!(
            table(&checks),
            "ok    kernel        Linux 6.18\n\
             fail  mtu           9001 is above 3498\n      \
             \x20             fix: ip link set dev eth0 mtu 3498\n"
        );
        assert_eq!(worst(&checks), Level::Fail);
        assert_eq!(worst(&checks[..1]), Level::Ok);
        let json = serde_json::to_string(&checks[1]).unwrap();
        assert_eq!(
            json,
            r#"{"name":"mtu","level":"fail","found":"9001 is above 3498","fix":"ip link set dev eth0 mtu 3498"}"#
        );
    }

    #[test]
    fn serve_refuses_on_fails_it_was_not_told_to_skip() {
        let checks = [
            Check::warn("memlock", "low", "ulimit -l unlimited"),
            Check::fail("mtu", "too big", "ip link set dev eth0 mtu 3498"),
            Check::fail("xdp-tx", "no NAPI", "ethtool -K p0 gro on"),
        ];
        let left = vet(&checks, &["mtu".to_string()]);
        assert_eq!(left, vec![checks[2].clone()]);
    }

    #[test]
    fn a_veth_peer_without_xdp_fails_with_its_fix() {
        let peer = |xdp_prog, gro| {
            Ok(Peer {
                name: "p0".into(),
                prefix: "ip netns exec sw ".into(),
                place: " (namespace sw)".into(),
                xdp_prog,
                gro_requested: gro,
                tx_queues: Some(1),
            })
        };
        let c = veth_tx_check(&peer(None, Some(false)));
        assert_eq!(c.level, Level::Fail);
        assert_eq!(
            c.fix.as_deref(),
            Some(
                "ip netns exec sw ip link set dev p0 xdpdrv obj PROG.o sec SECTION (any program that passes frames, \
                 attached in native mode)"
            )
        );
        let gro = veth_tx_check(&peer(None, Some(true)));
        assert_eq!(gro.level, Level::Fail);
        assert!(
            gro.found.contains("its GRO carries redirected frames, not XDP_TX ones"),
            "{}",
            gro.found
        );
        assert_eq!(veth_tx_check(&peer(Some(7), Some(false))).level, Level::Ok);
        let unknown = Err("its peer (ifindex 4) is elsewhere".to_string());
        assert_eq!(veth_tx_check(&unknown).level, Level::Warn);
    }

    #[test]
    fn every_check_is_named_in_checks() {
        let checks = run(&Options {
            iface: Some("lo".into()),
            pin_dir: None,
            mode: AttachMode::Auto,
        });
        for c in &checks {
            assert!(CHECKS.contains(&c.name), "{} missing from CHECKS", c.name);
        }
    }
}
