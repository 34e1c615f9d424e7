//! The controller: loads the XDP program with aya, pins its maps so that the
//! NetDAM memory and counters outlive a restart, fills the config, region
//! and peer tables, maps the memory, and attaches to an interface.

pub mod keys;
mod local;
mod memory;
pub mod neighbours;
mod netif;
pub mod pins;
pub mod queues;
pub mod split;
pub mod sysctls;

use std::{
    collections::HashMap,
    net::Ipv4Addr,
    path::{Path, PathBuf},
};

use aya::{
    maps::{Array, HashMap as BpfHashMap, Map, MapData, PerCpuArray, ProgramArray},
    programs::{ProgramError, TestRun, TestRunOptions, Xdp, XdpMode},
    Ebpf, EbpfLoader,
};
pub use local::LocalNode;
pub use memory::NetdamMemory;
use netdam_common::{
    chain::Readiness,
    config::{cfg_flags, PeerEntry, MEM_CHUNK, MEM_MAX, REGION_SLOTS},
    counters::COUNTER_SLOTS,
    split::SplitRing,
    window::{SourceKey, SweepFrame, Window},
    NodeConfig, Region,
};
pub use netif::{holding as interface_holding, Interface};
use thiserror::Error;

/// The XDP object built by this crate's build script.
pub static NETDAM_XDP: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/netdam-xdp"));
/// Name of the XDP program in the object.
pub const PROGRAM: &str = "netdam";
/// The CHAIN program, which `netdam` tail-calls through NETDAM_JUMP.
pub const CHAIN_PROGRAM: &str = "netdam_chain";
/// The collective's injector (not attached: run through BPF_PROG_TEST_RUN).
pub const INJECT_PROGRAM: &str = "netdam_inject";
pub const MAP_INJECT: &str = "NETDAM_INJECT";
/// Pinned beside the maps, anew at every load: the injector and its job,
/// for the collective engine of a process other than `serve`.
pub const INJECTOR_PINS: [&str; 2] = [INJECT_PROGRAM, MAP_INJECT];
/// The idle-window sweep (not attached: run through BPF_PROG_TEST_RUN by
/// `Node::expire_windows`).
pub const SWEEP_PROGRAM: &str = "netdam_window_sweep";

pub const MAP_MEM: &str = "NETDAM_MEM";
pub const MAP_CONFIG: &str = "NETDAM_CONFIG";
pub const MAP_REGIONS: &str = "NETDAM_REGIONS";
pub const MAP_PEERS: &str = "NETDAM_PEERS";
pub const MAP_COUNTERS: &str = "NETDAM_COUNTERS";
pub const MAP_WINDOWS: &str = "NETDAM_WINDOWS";
/// Windows per source IPv4 address (--window-per-source).
pub const MAP_WINDOW_IPS: &str = "NETDAM_WINDOW_IPS";
pub const MAP_GENERATIONS: &str = "NETDAM_GENERATIONS";
const MAP_JUMP: &str = "NETDAM_JUMP";
/// The AF_XDP socket of each receive queue (`afxdp::Endpoint` fills it).
pub const MAP_XSKS: &str = "NETDAM_XSKS";
/// Frames the data path saw on each receive queue (`queues::queue_frames`).
pub const MAP_QUEUE_FRAMES: &str = "NETDAM_QUEUE_FRAMES";
/// Header split (section 9): ports and the ring (`netdam split`).
pub const MAP_SPLIT_PORTS: &str = "NETDAM_SPLIT_PORTS";
pub const MAP_SPLIT_RING: &str = "NETDAM_SPLIT_RING";
/// The maps kept in the pin directory: state that must survive `serve`
/// (memory, generations, windows and counters, section 8; config so other
/// commands can read it; the socket map and split tables, so that endpoints
/// and `netdam split` in other processes reach the data path; the
/// per-queue frame counts, for `netdam stats`).
pub const PINNED_MAPS: [&str; 12] = [
    MAP_MEM,
    MAP_CONFIG,
    MAP_REGIONS,
    MAP_PEERS,
    MAP_COUNTERS,
    MAP_WINDOWS,
    MAP_WINDOW_IPS,
    MAP_GENERATIONS,
    MAP_XSKS,
    MAP_SPLIT_PORTS,
    MAP_SPLIT_RING,
    MAP_QUEUE_FRAMES,
];

#[derive(Debug, Error)]
pub enum ControllerError {
    #[error(
        "loading XDP programs needs root (or CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON); run as root, e.g. with sudo"
    )]
    NotPrivileged,
    #[error("{0} is not a bpf filesystem, so maps cannot be pinned there; mount one with `mount -t bpf bpf /sys/fs/bpf` (`cargo xtask setup` does)")]
    NoBpffs(PathBuf),
    #[error("no network interface named {0:?} (see `ip link`)")]
    UnknownInterface(String),
    #[error("interface {0} has no IPv4 address: give the node one (`ip addr add ... dev {0}`) or pass --ip")]
    NoIpv4(String),
    #[error(
        "--mem-size {given} is not valid: it must be a multiple of 64KiB between 64KiB and 2GiB (e.g. {nearest}KiB)"
    )]
    MemSize { given: u64, nearest: u64 },
    #[error("region {rkey:#x} [{base:#x}, +{size:#x}) does not lie inside the {mem_size}-byte NetDAM memory")]
    RegionOutside {
        rkey: u32,
        base: u64,
        size: u64,
        mem_size: u64,
    },
    #[error("region {rkey:#x} is given twice: one key names one region")]
    RegionTwice { rkey: u32 },
    #[error(
        "regions {a:#x} [{a_base:#x}, +{a_size:#x}) and {b:#x} [{b_base:#x}, +{b_size:#x}) overlap: \
         each byte of NetDAM memory belongs to at most one region, so that a key's permissions are all \
         that governs it"
    )]
    RegionsOverlap {
        a: u32,
        a_base: u64,
        a_size: u64,
        b: u32,
        b_base: u64,
        b_size: u64,
    },
    #[error(
        "region {rkey:#x} [{base:#x}, +{size:#x}) overlaps the split ring [{ring_start:#x}, {ring_end:#x}): \
         peers could overwrite split datagrams there; give the region other bytes, or move the ring \
         (`netdam split --port Q --keep K --ring-addr A`)"
    )]
    RegionOverlapsRing {
        rkey: u32,
        base: u64,
        size: u64,
        ring_start: u64,
        ring_end: u64,
    },
    #[error(
        "--window-sources {given}: the window table is preallocated at 16 KiB a source, so give 1 to {max} \
         ({max_mib} MiB); a source is an (IPv4, port) that sends non-idempotent requests"
    )]
    WindowSources { given: u32, max: u32, max_mib: u64 },
    #[error(
        "--window-per-source {given}: give 1 to --window-sources ({sources}); it is how many of the table's \
         windows one source IPv4 address may hold, all its ports and CHAIN origin ports together"
    )]
    WindowPerSource { given: u32, sources: u32 },
    #[error("the window sweep ({SWEEP_PROGRAM}, run through BPF_PROG_TEST_RUN) failed: {0}")]
    Sweep(String),
    #[error(
        "{0} receive queue slots: give 1 to {max} (the interface's receive queues, `queues::rx_queues`)",
        max = queues::MAX_QUEUE_SLOTS
    )]
    QueueSlots(u32),
    #[error("{count} regions given; the region table holds {max}")]
    TooManyRegions { count: usize, max: u32 },
    #[error(
        "the pinned map {path} has {found}, but this build wants {wanted}. It was made by another \
         version or with another --mem-size. Keep it by passing the old --mem-size, or discard the \
         node's memory and counters with `netdam unpin --pin-dir {dir}`"
    )]
    PinnedLayoutMismatch {
        path: PathBuf,
        dir: PathBuf,
        found: String,
        wanted: String,
    },
    #[error("the kernel refused the XDP program: {hint}\n{detail}")]
    Load { hint: String, detail: String },
    #[error("attaching XDP to {iface} in {mode} mode failed: {source}{hint}")]
    Attach {
        iface: String,
        mode: &'static str,
        hint: &'static str,
        source: Box<ProgramError>,
    },
    #[error("the node pinned in {0} has no configuration yet: its `netdam serve` is still starting (wait for \"serving NetDAM on\")")]
    Unconfigured(PathBuf),
    #[error("NetDAM memory range [{addr:#x}, +{len}) is outside the {size}-byte memory")]
    MemoryRange { addr: u64, len: usize, size: usize },
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    #[error("map {0}: {1}")]
    Map(&'static str, #[source] aya::maps::MapError),
    #[error(transparent)]
    Ebpf(Box<aya::EbpfError>),
}

/// The object's XDP program `name`.
fn xdp<'a>(ebpf: &'a mut Ebpf, name: &str) -> &'a mut Xdp {
    ebpf.program_mut(name)
        .unwrap_or_else(|| panic!("the object has the {name} program"))
        .try_into()
        .unwrap_or_else(|_| panic!("{name} is an XDP program"))
}

/// Loads the object's XDP program `name` into the kernel.
fn load_xdp<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Xdp, ControllerError> {
    let prog = xdp(ebpf, name);
    prog.load().map_err(load_error)?;
    Ok(prog)
}

/// Pins the injector and its job map in `dir`, replacing those of an earlier load.
fn pin_injector(ebpf: &mut Ebpf, dir: &Path) -> Result<(), ControllerError> {
    for name in INJECTOR_PINS {
        let p = dir.join(name);
        if p.exists() {
            std::fs::remove_file(&p).map_err(|e| ControllerError::Io(format!("remove {}", p.display()), e))?;
        }
    }
    let pin_err = |what: &str, e: String| {
        ControllerError::Io(format!("pinning {what} in {}", dir.display()), std::io::Error::other(e))
    };
    xdp(ebpf, INJECT_PROGRAM)
        .pin(dir.join(INJECT_PROGRAM))
        .map_err(|e| pin_err(INJECT_PROGRAM, e.to_string()))?;
    ebpf.map_mut(MAP_INJECT)
        .expect("the object has NETDAM_INJECT")
        .pin(dir.join(MAP_INJECT))
        .map_err(|e| pin_err(MAP_INJECT, e.to_string()))
}

/// How to attach: `auto` tries native (driver) XDP and falls back to generic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AttachMode {
    Native,
    Skb,
    Auto,
}

/// Sources the window table may hold: 1 GiB of preallocated kernel memory
/// (a larger table fails to load, or takes the host's memory, with no clear error).
pub const MAX_WINDOW_SOURCES: u32 = 65536;

/// Everything a node is configured with.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    pub port: u16,
    pub mem_size: u64,
    pub mac: [u8; 6],
    pub ipv4: Ipv4Addr,
    pub mtu: u32,
    pub regions: Vec<(u32, Region)>,
    pub peers: Vec<Ipv4Addr>,
    pub verify_csum: bool,
    /// Sources the at-most-once window table holds (16 KiB each).
    pub window_sources: u32,
    /// Windows one source IPv4 address may hold (1..=window_sources).
    pub window_per_source: u32,
    /// BAD_KEY answers per second per source IPv4 address; 0: unlimited
    /// (docs/conformance.md 21).
    pub bad_key_limit: u32,
    /// Slots of the per-queue maps (AF_XDP sockets, frame counts): the
    /// interface's receive queues (`queues::rx_queues(iface)?.slots()`);
    /// 1 for a node that is not attached.
    pub queue_slots: u32,
}

impl NodeSpec {
    fn config(&self) -> NodeConfig {
        let mut flags = 0;
        if self.verify_csum {
            flags |= cfg_flags::VERIFY_CSUM;
        }
        if !self.peers.is_empty() {
            flags |= cfg_flags::PEERS_ONLY;
        }
        NodeConfig {
            mac: self.mac,
            port: self.port,
            ipv4_be: u32::from(self.ipv4).to_be(),
            mtu: self.mtu,
            flags,
            bad_key_limit: self.bad_key_limit,
            mem_size: self.mem_size,
            window_per_source: self.window_per_source,
            _reserved: 0,
        }
    }

    /// What `Node::load` and `Node::configure` refuse: the memory's size, the
    /// window table's bounds, regions outside the memory, overlapping or keyed twice.
    pub fn check(&self) -> Result<(), ControllerError> {
        let m = self.mem_size;
        if self.window_sources == 0 || self.window_sources > MAX_WINDOW_SOURCES {
            return Err(ControllerError::WindowSources {
                given: self.window_sources,
                max: MAX_WINDOW_SOURCES,
                max_mib: (MAX_WINDOW_SOURCES as u64 * core::mem::size_of::<Window>() as u64) >> 20,
            });
        }
        if self.queue_slots == 0 || self.queue_slots > queues::MAX_QUEUE_SLOTS {
            return Err(ControllerError::QueueSlots(self.queue_slots));
        }
        if self.window_per_source == 0 || self.window_per_source > self.window_sources {
            return Err(ControllerError::WindowPerSource {
                given: self.window_per_source,
                sources: self.window_sources,
            });
        }
        if m == 0 || !m.is_multiple_of(MEM_CHUNK as u64) || m > MEM_MAX {
            let nearest = m.clamp(MEM_CHUNK as u64, MEM_MAX).next_multiple_of(MEM_CHUNK as u64) >> 10;
            return Err(ControllerError::MemSize { given: m, nearest });
        }
        for (rkey, r) in &self.regions {
            if r.base.checked_add(r.size).is_none_or(|end| end > m) {
                return Err(ControllerError::RegionOutside {
                    rkey: *rkey,
                    base: r.base,
                    size: r.size,
                    mem_size: m,
                });
            }
        }
        for (i, (a, ra)) in self.regions.iter().enumerate() {
            for (b, rb) in &self.regions[i + 1..] {
                if a == b {
                    return Err(ControllerError::RegionTwice { rkey: *a });
                }
                // Inside the memory (checked above), so the ends do not overflow.
                if overlap((ra.base, ra.base + ra.size), (rb.base, rb.base + rb.size)) {
                    return Err(ControllerError::RegionsOverlap {
                        a: *a,
                        a_base: ra.base,
                        a_size: ra.size,
                        b: *b,
                        b_base: rb.base,
                        b_size: rb.size,
                    });
                }
            }
        }
        Ok(())
    }
}

/// Whether the byte ranges [a.0, a.1) and [b.0, b.1) share a byte.
pub fn overlap(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1 && a.0 < a.1 && b.0 < b.1
}

/// A loaded (and possibly attached) NetDAM data path.
pub struct Node {
    // Dropped first: the mapping refers to a map of `ebpf`.
    memory: NetdamMemory,
    ebpf: Ebpf,
    // Kept alive: dropping it closes the log ring buffer's fd.
    logger: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
    attached: Option<(String, aya::programs::xdp::XdpLinkId)>,
    /// Whether pinned maps from an earlier run were reused.
    pub reused_pins: bool,
    pub pin_dir: Option<PathBuf>,
}

impl Node {
    /// Loads the program with its maps pinned in `pin_dir` (reusing maps
    /// pinned there whose layout matches) or unpinned when `None`, and
    /// writes `spec` into them.
    pub fn load(spec: &NodeSpec, pin_dir: Option<&Path>) -> Result<Node, ControllerError> {
        require_privilege()?;
        spec.check()?;
        let chunks = (spec.mem_size / MEM_CHUNK as u64) as u32;
        let mut loader = EbpfLoader::new();
        loader.map_max_entries(MAP_MEM, chunks);
        loader.map_max_entries(MAP_WINDOWS, spec.window_sources);
        loader.map_max_entries(MAP_WINDOW_IPS, spec.window_sources);
        for name in queues::PER_QUEUE_MAPS {
            loader.map_max_entries(name, spec.queue_slots);
        }
        // The XDP program's aya-log statements below the host's log level cost one load and a branch.
        let level = log::max_level() as u8;
        loader.override_global(aya_log::LEVEL, &level, false);
        let mut reused = false;
        let paths: Vec<(&str, PathBuf)> = match pin_dir {
            Some(dir) => {
                pins::prepare_dir(dir)?;
                reused = pins::check_compatible(
                    dir,
                    NETDAM_XDP,
                    &HashMap::from([
                        (MAP_MEM, chunks),
                        (MAP_WINDOWS, spec.window_sources),
                        (MAP_WINDOW_IPS, spec.window_sources),
                        (MAP_XSKS, spec.queue_slots),
                        (MAP_QUEUE_FRAMES, spec.queue_slots),
                    ]),
                )?;
                PINNED_MAPS.iter().map(|m| (*m, dir.join(m))).collect()
            }
            None => Vec::new(),
        };
        for (name, path) in &paths {
            loader.map_pin_path(name, path.as_path());
        }
        let mut ebpf = loader
            .load(NETDAM_XDP)
            .map_err(|e| ControllerError::Ebpf(Box::new(e)))?;
        let logger = match aya_log::EbpfLogger::init(&mut ebpf) {
            Ok(l) => Some(l),
            Err(e) => {
                log::debug!("no eBPF logger: {e}");
                None
            }
        };
        let chain = load_xdp(&mut ebpf, CHAIN_PROGRAM)?;
        let chain_fd = chain
            .fd()
            .expect("loaded")
            .try_clone()
            .map_err(|e| ControllerError::Io("dup of the chain program fd".into(), e))?;
        let mut jump = ProgramArray::try_from(ebpf.map_mut(MAP_JUMP).expect("the object has NETDAM_JUMP"))
            .map_err(|e| ControllerError::Map(MAP_JUMP, e))?;
        jump.set(0, &chain_fd, 0)
            .map_err(|e| ControllerError::Map(MAP_JUMP, e))?;
        load_xdp(&mut ebpf, PROGRAM)?;
        load_xdp(&mut ebpf, INJECT_PROGRAM)?;
        load_xdp(&mut ebpf, SWEEP_PROGRAM)?;
        if let Some(dir) = pin_dir {
            pin_injector(&mut ebpf, dir)?;
        }
        let mem_map = ebpf.map(MAP_MEM).expect("the object has NETDAM_MEM");
        let memory = match mem_map {
            Map::Array(data) => NetdamMemory::map(data.fd(), spec.mem_size as usize)?,
            _ => unreachable!("NETDAM_MEM is an array map"),
        };
        let mut node = Node {
            memory,
            ebpf,
            logger,
            attached: None,
            reused_pins: reused,
            pin_dir: pin_dir.map(Path::to_path_buf),
        };
        node.configure(spec)?;
        Ok(node)
    }

    /// Rewrites config, regions and peers (memory and counters are kept).
    pub fn configure(&mut self, spec: &NodeSpec) -> Result<(), ControllerError> {
        spec.check()?;
        // The split ring (kept in the pins from an earlier run) and the
        // regions must not share bytes (docs/conformance.md 22).
        let ring: SplitRing = Array::try_from(self.ebpf.map(MAP_SPLIT_RING).expect("split ring map"))
            .and_then(|a| a.get(&0, 0))
            .map_err(|e| ControllerError::Map(MAP_SPLIT_RING, e))?;
        if ring.slots > 0 {
            let (ring_start, ring_end) = ring.range();
            if let Some((rkey, r)) = spec
                .regions
                .iter()
                .find(|(_, r)| overlap((r.base, r.base + r.size), (ring_start, ring_end)))
            {
                return Err(ControllerError::RegionOverlapsRing {
                    rkey: *rkey,
                    base: r.base,
                    size: r.size,
                    ring_start,
                    ring_end,
                });
            }
        }
        let mut regions: BpfHashMap<_, u32, Region> =
            BpfHashMap::try_from(self.ebpf.map_mut(MAP_REGIONS).expect("regions map"))
                .map_err(|e| ControllerError::Map(MAP_REGIONS, e))?;
        let max = REGION_SLOTS;
        if spec.regions.len() > max as usize {
            return Err(ControllerError::TooManyRegions {
                count: spec.regions.len(),
                max,
            });
        }
        // Stale keys go first, so that a replaced key is refused from the
        // moment its successor is served; a region that stays is never out
        // of the table (a reload serves it throughout).
        let old: Vec<u32> = regions.keys().filter_map(Result::ok).collect();
        for k in old.iter().filter(|k| !spec.regions.iter().any(|(n, _)| n == *k)) {
            let _ = regions.remove(k);
        }
        for (k, r) in &spec.regions {
            regions
                .insert(k, r, 0)
                .map_err(|e| ControllerError::Map(MAP_REGIONS, e))?;
        }
        let mut peers = self.peer_map()?;
        // A peer that stays keeps its bound MAC; a new one is unresolved
        // (neither served nor forwarded to) until `bind_peer_macs`.
        let old: Vec<(u32, PeerEntry)> = peers.iter().filter_map(Result::ok).collect();
        for (k, _) in &old {
            if !spec.peers.iter().any(|p| u32::from(*p).to_be() == *k) {
                let _ = peers.remove(k);
            }
        }
        for p in &spec.peers {
            let k = u32::from(*p).to_be();
            if !old.iter().any(|(o, _)| *o == k) {
                peers
                    .insert(k, PeerEntry::default(), 0)
                    .map_err(|e| ControllerError::Map(MAP_PEERS, e))?;
            }
        }
        // Config last: the data path serves nothing until its port is set.
        let mut cfg: Array<_, NodeConfig> = Array::try_from(self.ebpf.map_mut(MAP_CONFIG).expect("config map"))
            .map_err(|e| ControllerError::Map(MAP_CONFIG, e))?;
        cfg.set(0, spec.config(), 0)
            .map_err(|e| ControllerError::Map(MAP_CONFIG, e))?;
        Ok(())
    }

    fn peer_map(&mut self) -> Result<BpfHashMap<&mut aya::maps::MapData, u32, PeerEntry>, ControllerError> {
        BpfHashMap::try_from(self.ebpf.map_mut(MAP_PEERS).expect("peers map"))
            .map_err(|e| ControllerError::Map(MAP_PEERS, e))
    }

    /// Binds each peer of the table to its MAC from `macs` (the neighbour
    /// table: `neighbours::complete`), the MAC its frames must come from and
    /// CHAIN packets to it go to. Returns the peers whose MAC changed.
    pub fn bind_peer_macs(
        &mut self,
        macs: &[(Ipv4Addr, [u8; 6])],
    ) -> Result<Vec<(Ipv4Addr, [u8; 6])>, ControllerError> {
        let mut peers = self.peer_map()?;
        let bound: Vec<(u32, PeerEntry)> = peers.iter().filter_map(Result::ok).collect();
        let mut changed = Vec::new();
        for (k, entry) in bound {
            let ip = Ipv4Addr::from(u32::from_be(k));
            let Some((_, mac)) = macs.iter().find(|(a, _)| *a == ip) else {
                continue;
            };
            if entry.mac != *mac {
                peers
                    .insert(k, PeerEntry::new(*mac), 0)
                    .map_err(|e| ControllerError::Map(MAP_PEERS, e))?;
                changed.push((ip, *mac));
            }
        }
        Ok(changed)
    }

    pub fn memory(&self) -> &NetdamMemory {
        &self.memory
    }

    /// The readiness generation of region `rkey` (section 6).
    pub fn generation(&self, rkey: u32) -> Result<u32, ControllerError> {
        Ok(self.readiness(rkey)?.generation)
    }

    /// The readiness generation and call word of region `rkey` (section 6, version 2).
    pub fn readiness(&self, rkey: u32) -> Result<Readiness, ControllerError> {
        let m: BpfHashMap<_, u32, Readiness> =
            BpfHashMap::try_from(self.ebpf.map(MAP_GENERATIONS).expect("generations map"))
                .map_err(|e| ControllerError::Map(MAP_GENERATIONS, e))?;
        local::get_readiness(&m, rkey)
    }

    /// Sets the readiness generation and call word of region `rkey` together.
    pub fn set_readiness(&mut self, rkey: u32, now: Readiness) -> Result<(), ControllerError> {
        let mut m: BpfHashMap<_, u32, Readiness> =
            BpfHashMap::try_from(self.ebpf.map_mut(MAP_GENERATIONS).expect("generations map"))
                .map_err(|e| ControllerError::Map(MAP_GENERATIONS, e))?;
        local::set_readiness(&mut m, rkey, now)
    }

    /// Enters an AF_XDP socket as the receiver of queue `queue` (what
    /// `afxdp::Endpoint` does through the pinned map).
    pub fn set_receiver(&mut self, queue: u32, socket: std::os::fd::BorrowedFd<'_>) -> Result<(), ControllerError> {
        let mut m = aya::maps::XskMap::try_from(self.ebpf.map_mut(MAP_XSKS).expect("the object has NETDAM_XSKS"))
            .map_err(|e| ControllerError::Map(MAP_XSKS, e))?;
        m.set(queue, socket, 0).map_err(|e| ControllerError::Map(MAP_XSKS, e))
    }

    /// The loaded XDP program, e.g. for BPF_PROG_TEST_RUN.
    pub fn program(&self) -> &Xdp {
        self.ebpf
            .program(PROGRAM)
            .expect("the object has the netdam program")
            .try_into()
            .expect("netdam is an XDP program")
    }

    /// The loaded CHAIN program (tail-called by `netdam`), e.g. for its verifier cost.
    pub fn chain_program(&self) -> &Xdp {
        self.ebpf
            .program(CHAIN_PROGRAM)
            .expect("the object has the netdam_chain program")
            .try_into()
            .expect("netdam_chain is an XDP program")
    }

    /// Attaches to `iface`; returns the mode that took.
    pub fn attach(&mut self, iface: &str, mode: AttachMode) -> Result<&'static str, ControllerError> {
        let prog = xdp(&mut self.ebpf, PROGRAM);
        let attempt = |prog: &mut Xdp, m: XdpMode, name: &'static str, hint: &'static str| {
            prog.attach(iface, m).map_err(|source| ControllerError::Attach {
                source: Box::new(source),
                iface: iface.to_string(),
                mode: name,
                hint,
            })
        };
        const NATIVE_HINT: &str =
            "; the driver may lack native XDP: try --mode skb (generic XDP, slower) or --mode auto";
        let (link, taken) = match mode {
            AttachMode::Native => (attempt(prog, XdpMode::Driver, "native", NATIVE_HINT)?, "native"),
            AttachMode::Skb => (attempt(prog, XdpMode::Skb, "skb", "")?, "skb"),
            AttachMode::Auto => match attempt(prog, XdpMode::Driver, "native", "") {
                Ok(l) => (l, "native"),
                Err(e) => {
                    log::warn!("{e}; falling back to generic (skb) XDP, which is slower");
                    (attempt(prog, XdpMode::Skb, "skb", "")?, "skb")
                }
            },
        };
        self.attached = Some((iface.to_string(), link));
        Ok(taken)
    }

    /// Detaches from the interface, if attached.
    pub fn detach(&mut self) -> Result<(), ControllerError> {
        if let Some((iface, link)) = self.attached.take() {
            xdp(&mut self.ebpf, PROGRAM)
                .detach(link)
                .map_err(|source| ControllerError::Attach {
                    iface,
                    mode: "detach",
                    hint: "",
                    source: Box::new(source),
                })?;
        }
        Ok(())
    }

    /// The eBPF log ring buffer, to poll for readability; `flush_log` drains it.
    pub fn log_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.logger.as_ref().map(|l| l.as_fd())
    }

    pub fn flush_log(&mut self) {
        if let Some(l) = self.logger.as_mut() {
            l.flush();
        }
    }

    /// One sweep of the at-most-once windows (docs/conformance.md 12): a
    /// window unused for longer than `idle` is marked, and removed at a
    /// later sweep if it is still marked (the data path clears the mark
    /// whenever it uses the window) and still unused; its source IPv4
    /// address gets the window back (--window-per-source). Both steps are
    /// compare-and-swaps in the kernel, in the sweep program, so that no
    /// window is removed while a request uses it. A source's
    /// retransmissions must stop within `idle` (netdam's client gives up
    /// after retries x timeout), so a removed window never sees a repeat of
    /// a request it executed.
    pub fn expire_windows(&self, idle: std::time::Duration) -> Result<WindowSweep, ControllerError> {
        let frame = SweepFrame {
            idle_ns: idle.as_nanos().min(u64::MAX as u128) as u64,
            ..SweepFrame::default()
        };
        let data_in = frame.to_bytes();
        let mut data_out = [0u8; SweepFrame::LEN];
        let prog: &Xdp = self
            .ebpf
            .program(SWEEP_PROGRAM)
            .expect("the object has the sweep program")
            .try_into()
            .expect("the sweep is an XDP program");
        let r = prog
            .test_run(TestRunOptions {
                data_in: Some(&data_in),
                data_out: Some(&mut data_out),
                ..Default::default()
            })
            .map_err(|e| ControllerError::Sweep(e.to_string()))?;
        // XDP_PASS: the sweep ran to its end.
        const XDP_PASS: u32 = 2;
        if r.return_value != XDP_PASS || r.data_size_out as usize != SweepFrame::LEN {
            return Err(ControllerError::Sweep(format!(
                "it returned {} with {} bytes",
                r.return_value, r.data_size_out
            )));
        }
        let out = SweepFrame::from_bytes(&data_out);
        Ok(WindowSweep {
            marked: out.marked,
            removed: out.removed,
        })
    }

    /// The sources that hold an at-most-once window.
    pub fn window_keys(&self) -> Result<Vec<SourceKey>, ControllerError> {
        let m: BpfHashMap<_, SourceKey, Window> =
            BpfHashMap::try_from(self.ebpf.map(MAP_WINDOWS).expect("windows map"))
                .map_err(|e| ControllerError::Map(MAP_WINDOWS, e))?;
        m.keys()
            .map(|k| k.map_err(|e| ControllerError::Map(MAP_WINDOWS, e)))
            .collect()
    }

    /// Windows held by each source IPv4 address (the table
    /// --window-per-source is checked against).
    pub fn windows_per_ip(&self) -> Result<HashMap<Ipv4Addr, u64>, ControllerError> {
        let m: BpfHashMap<_, u32, u64> = BpfHashMap::try_from(self.ebpf.map(MAP_WINDOW_IPS).expect("window IPs map"))
            .map_err(|e| ControllerError::Map(MAP_WINDOW_IPS, e))?;
        m.iter()
            .map(|r| {
                r.map(|(ip, n)| (Ipv4Addr::from(u32::from_be(ip)), n))
                    .map_err(|e| ControllerError::Map(MAP_WINDOW_IPS, e))
            })
            .collect()
    }

    /// The counters, summed over CPUs.
    pub fn counters(&self) -> Result<Vec<u64>, ControllerError> {
        let m = self.ebpf.map(MAP_COUNTERS).expect("counters map");
        let arr: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(m).map_err(|e| ControllerError::Map(MAP_COUNTERS, e))?;
        sum_counters(&arr)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Err(e) = self.detach() {
            log::warn!("{e}");
        }
    }
}

/// What one sweep of the window table did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowSweep {
    /// Idle windows marked (removed at a later sweep if still idle).
    pub marked: u32,
    /// Windows removed: idle and marked since an earlier sweep.
    pub removed: u32,
}

/// Sums a per-CPU counter array.
pub fn sum_counters<T: std::borrow::Borrow<MapData>>(arr: &PerCpuArray<T, u64>) -> Result<Vec<u64>, ControllerError> {
    (0..COUNTER_SLOTS)
        .map(|i| {
            arr.get(&i, 0)
                .map(|v| v.iter().sum())
                .map_err(|e| ControllerError::Map(MAP_COUNTERS, e))
        })
        .collect()
}

fn require_privilege() -> Result<(), ControllerError> {
    if nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    // Not root: it may still work with capabilities; let the kernel decide,
    // but say what it needs if it refuses.
    let caps = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = caps
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_NET_ADMIN: u64 = 12;
    const CAP_BPF: u64 = 39;
    if eff & (1 << CAP_NET_ADMIN) != 0 && eff & (1 << CAP_BPF) != 0 {
        Ok(())
    } else {
        Err(ControllerError::NotPrivileged)
    }
}

/// Turns a program load failure into the kernel feature it points at.
fn load_error(e: ProgramError) -> ControllerError {
    let detail = e.to_string();
    // (helper, its number in the uapi, the kernel that has it). Only a call the
    // verifier names as unknown counts: a rejected call to a helper the kernel
    // has (6.1's "Dynptr has to be an uninitialized dynptr") is no missing feature.
    const NEEDS: [(&str, u32, &str); 6] = [
        ("bpf_dynptr_from_mem", 197, "5.19"),
        ("bpf_dynptr_read", 201, "5.19"),
        ("bpf_dynptr_write", 202, "5.19"),
        ("bpf_xdp_load_bytes", 189, "5.18"),
        ("bpf_xdp_store_bytes", 190, "5.18"),
        ("bpf_xdp_get_buff_len", 188, "5.18"),
    ];
    let unknown_call = detail
        .lines()
        .rev()
        .find(|l| l.contains("unknown func") || l.contains("invalid func"));
    let hint = match unknown_call {
        Some(l) => NEEDS
            .iter()
            .find(|(name, id, _)| l.contains(name) || l.contains(&format!("#{id}")))
            .map(|(name, _, linux)| format!("{name} needs Linux {linux} or newer")),
        None if detail.contains("Invalid argument") && detail.contains("frags") => {
            Some("multi-buffer XDP (xdp.frags) needs Linux 5.18 or newer".to_string())
        }
        None => None,
    };
    let hint = hint.unwrap_or_else(|| {
        if detail.contains("Operation not permitted") {
            "permission denied: run as root (CAP_BPF and CAP_PERFMON)".to_string()
        } else {
            "the verifier rejected it (this kernel may be older than 6.1, the oldest supported); its log follows"
                .to_string()
        }
    });
    // The tail of the verifier log says why; the whole log can be huge.
    let lines: Vec<&str> = detail.lines().collect();
    let detail = lines[lines.len().saturating_sub(40)..].join("\n");
    ControllerError::Load { hint, detail }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netdam_common::region::perm;

    fn spec(mem_size: u64, regions: Vec<(u32, Region)>) -> NodeSpec {
        NodeSpec {
            port: 4793,
            mem_size,
            mac: [2, 0, 0, 0, 0, 1],
            ipv4: Ipv4Addr::new(198, 18, 0, 1),
            mtu: 1500,
            regions,
            peers: vec![Ipv4Addr::new(198, 18, 0, 2)],
            verify_csum: true,
            window_sources: 4,
            window_per_source: 2,
            bad_key_limit: 100,
            queue_slots: 1,
        }
    }

    #[test]
    fn mem_size_and_regions_are_checked() {
        let r = |base, size| Region {
            base,
            size,
            perms: perm::ALL,
            _reserved: 0,
        };
        assert!(spec(64 << 20, vec![(1, r(0, 64 << 20))]).check().is_ok());
        assert!(matches!(
            spec(0, vec![]).check(),
            Err(ControllerError::MemSize { nearest: 64, .. })
        ));
        assert!(matches!(
            spec(100_000, vec![]).check(),
            Err(ControllerError::MemSize { nearest: 128, .. })
        ));
        assert!(matches!(
            spec(4 << 30, vec![]).check(),
            Err(ControllerError::MemSize { .. })
        ));
        assert!(matches!(
            spec(1 << 20, vec![(7, r(1 << 20, 1))]).check(),
            Err(ControllerError::RegionOutside { rkey: 7, .. })
        ));
        assert!(matches!(
            spec(1 << 20, vec![(7, r(u64::MAX, 2))]).check(),
            Err(ControllerError::RegionOutside { .. })
        ));
    }

    #[test]
    fn a_key_twice_or_overlapping_regions_are_refused() {
        let r = |base, size| Region {
            base,
            size,
            perms: perm::READ,
            _reserved: 0,
        };
        // Adjacent regions are fine.
        assert!(spec(1 << 20, vec![(1, r(0, 4096)), (2, r(4096, 4096))]).check().is_ok());
        assert!(matches!(
            spec(1 << 20, vec![(1, r(0, 4096)), (1, r(8192, 4096))]).check(),
            Err(ControllerError::RegionTwice { rkey: 1 })
        ));
        let e = spec(1 << 20, vec![(1, r(0, 4096)), (2, r(8192, 8)), (3, r(4095, 2))])
            .check()
            .unwrap_err();
        assert!(matches!(e, ControllerError::RegionsOverlap { a: 1, b: 3, .. }), "{e}");
        assert!(e.to_string().contains("[0xfff, +0x2) overlap"), "{e}");
        // One inside the other.
        assert!(matches!(
            spec(1 << 20, vec![(1, r(0, 1 << 20)), (2, r(100, 1))]).check(),
            Err(ControllerError::RegionsOverlap { .. })
        ));
    }

    #[test]
    fn the_window_table_is_bounded_with_a_clear_error() {
        let with = |n| NodeSpec {
            window_sources: n,
            window_per_source: 1,
            ..spec(1 << 20, vec![])
        };
        assert!(with(MAX_WINDOW_SOURCES).check().is_ok());
        for n in [0, MAX_WINDOW_SOURCES + 1, 1_000_000] {
            let e = with(n).check().unwrap_err();
            assert!(
                matches!(e, ControllerError::WindowSources { given, .. } if given == n),
                "{e}"
            );
            assert!(e.to_string().contains("give 1 to 65536 (1025 MiB)"), "{e}");
        }
        let per_source = |n| NodeSpec {
            window_per_source: n,
            ..spec(1 << 20, vec![])
        };
        assert!(per_source(1).check().is_ok());
        assert!(per_source(4).check().is_ok());
        for n in [0, 5] {
            let e = per_source(n).check().unwrap_err();
            assert!(
                matches!(e, ControllerError::WindowPerSource { given, sources: 4 } if given == n),
                "{e}"
            );
            assert!(e.to_string().contains("give 1 to --window-sources (4)"), "{e}");
        }
    }

    #[test]
    fn config_carries_flags_and_network_order() {
        let c = spec(1 << 20, vec![]).config();
        assert_eq!(c.ipv4_be.to_ne_bytes(), [198, 18, 0, 1]);
        assert_eq!(c.flags, cfg_flags::VERIFY_CSUM | cfg_flags::PEERS_ONLY);
        assert_eq!(c.port, 4793);
        assert_eq!(c.bad_key_limit, 100);
    }
}
