//! The maps the data path shares with the controller. Names are the ones the
//! controller pins under its pin directory (`netdam_user::maps`).

use aya_ebpf::{
    bindings::BPF_F_MMAPABLE,
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, ProgramArray, XskMap},
};
use netdam_common::{
    chain::Readiness,
    config::{BadKeyBucket, PeerEntry, BAD_KEY_SOURCES, MAX_PAYLOAD, MEM_CHUNK, PEER_SLOTS, REGION_SLOTS},
    counters::{Event, COUNTER_SLOTS},
    split::{SplitRing, SPLIT_PORTS},
    window::{SourceKey, Window},
    NodeConfig, Region,
};

/// The NetDAM memory: one flat mmapable array of chunks. The controller sets
/// max_entries from `--mem-size`.
#[map(name = "NETDAM_MEM")]
pub static NETDAM_MEM: Array<[u8; MEM_CHUNK]> = Array::with_max_entries(1, BPF_F_MMAPABLE);

#[map(name = "NETDAM_CONFIG")]
pub static CONFIG: Array<NodeConfig> = Array::with_max_entries(1, 0);

/// rkey -> region.
#[map(name = "NETDAM_REGIONS")]
pub static REGIONS: HashMap<u32, Region> = HashMap::with_max_entries(REGION_SLOTS, 0);

/// Peer IPv4 addresses (network order) -> the MAC bound to the peer.
#[map(name = "NETDAM_PEERS")]
pub static PEERS: HashMap<u32, PeerEntry> = HashMap::with_max_entries(PEER_SLOTS, 0);

/// The MAC bound to peer `ip_be`; `None` if it is not a peer or not resolved yet.
#[inline(always)]
pub fn peer_mac(ip_be: u32) -> Option<[u8; 6]> {
    // SAFETY: a lookup in a hash map of plain values.
    match unsafe { PEERS.get(ip_be) } {
        Some(p) if p.is_resolved() => Some(p.mac),
        _ => None,
    }
}

/// Readiness generation and call word by rkey (section 6, version 2);
/// absent means both 0. Written only by the host (`netdam ready`, the
/// collective engine), both at once.
#[map(name = "NETDAM_GENERATIONS")]
pub static GENERATIONS: HashMap<u32, Readiness> = HashMap::with_max_entries(REGION_SLOTS, 0);

/// Slot 0: the chain program, which `netdam` tail-calls for CHAIN packets
/// (a program of its own, so each stays within the verifier's budget).
#[map(name = "NETDAM_JUMP")]
pub static JUMP: ProgramArray = ProgramArray::with_max_entries(1, 0);

/// The request each CPU's `netdam` is handling (`carrier::Request`).
#[map(name = "NETDAM_REQUEST")]
pub static REQUEST: PerCpuArray<crate::carrier::Request> = PerCpuArray::with_max_entries(1, 0);

/// The CHAIN packet each CPU is handling (`chain::ChainState`).
#[map(name = "NETDAM_CHAIN_STATE")]
pub static CHAIN_STATE: PerCpuArray<crate::chain::ChainState> = PerCpuArray::with_max_entries(1, 0);

/// At-most-once windows by source; the controller sets max_entries
/// (--window-sources) and removes idle windows (--window-idle).
#[map(name = "NETDAM_WINDOWS")]
pub static WINDOWS: HashMap<SourceKey, Window> = HashMap::with_max_entries(1024, 0);

/// Windows held by each source IPv4 address (network order), for
/// --window-per-source: a reservation is taken (atomic add) before a window
/// is inserted and given back when the sweep removes the window; the sweep
/// removes counts at 0 (`window::sweep`). Every address here holds a window
/// but for counts at 0 waiting for the sweep (left by addresses refused
/// while the window table was full), so the controller sets max_entries to
/// --window-sources.
#[map(name = "NETDAM_WINDOW_IPS")]
pub static WINDOW_IPS: HashMap<u32, u64> = HashMap::with_max_entries(1024, 0);

/// A window of zeros to insert new sources from (never written).
#[map(name = "NETDAM_ZERO_WINDOW")]
pub static ZERO_WINDOW: Array<Window> = Array::with_max_entries(1, 0);

/// The BAD_KEY token bucket of each source IPv4 address (network order),
/// least recently used evicted (`--bad-key-limit`, docs/conformance.md 21).
/// Not pinned: the limit starts afresh with each load.
#[map(name = "NETDAM_BAD_KEY")]
pub static BAD_KEY: LruHashMap<u32, BadKeyBucket> = LruHashMap::with_max_entries(BAD_KEY_SOURCES, 0);

/// When a BAD_KEY bucket last ran dry (bpf_ktime_get_ns; 0: never), so that
/// the lockout check looks sources up only within a second after.
#[map(name = "NETDAM_BAD_KEY_DRY")]
pub static BAD_KEY_DRY: Array<u64> = Array::with_max_entries(1, 0);

#[map(name = "NETDAM_COUNTERS")]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTER_SLOTS, 0);

/// Bytes one copy step moves between the frame and NetDAM memory.
pub const SCRATCH_LEN: usize = 4096;
const _: () = assert!(SCRATCH_LEN <= MAX_PAYLOAD && MEM_CHUNK.is_multiple_of(SCRATCH_LEN));

/// Per-CPU bounce buffer: the verifier needs a statically sized buffer on one
/// side of every variable-length copy.
#[map(name = "NETDAM_SCRATCH")]
pub static SCRATCH: PerCpuArray<[u8; SCRATCH_LEN]> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
pub fn count(index: u32) {
    if let Some(c) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: a per-CPU slot; XDP does not preempt itself on one CPU.
        unsafe { *c += 1 }
    }
}

#[inline(always)]
pub fn count_event(e: Event) {
    count(e as u32)
}

/// The injector's job (`netdam_common::inject`), written by the collective engine.
#[map(name = "NETDAM_INJECT")]
pub static INJECT: Array<netdam_common::inject::InjectJob> = Array::with_max_entries(1, 0);

/// The AF_XDP socket of each receive queue (MSG, WRITE_NOTIFY, header split);
/// the host's `Endpoint` binds them. The controller sets max_entries to the
/// interface's receive queues.
#[map(name = "NETDAM_XSKS")]
pub static XSKS: XskMap = XskMap::with_max_entries(1, 0);

/// Frames the data path saw on each receive queue, per CPU: whether RSS
/// spreads the load. The controller sets max_entries like NETDAM_XSKS.
#[map(name = "NETDAM_QUEUE_FRAMES")]
pub static QUEUE_FRAMES: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
pub fn count_queue(queue: u32) {
    if let Some(c) = QUEUE_FRAMES.get_ptr_mut(queue) {
        // SAFETY: a per-CPU slot; XDP does not preempt itself on one CPU.
        unsafe { *c += 1 }
    }
}

/// UDP ports to split (section 9), host order -> bytes of payload kept.
#[map(name = "NETDAM_SPLIT_PORTS")]
pub static SPLIT_PORTS_MAP: HashMap<u32, u32> = HashMap::with_max_entries(SPLIT_PORTS, 0);

/// Where split datagrams leave the rest of their payload.
#[map(name = "NETDAM_SPLIT_RING")]
pub static SPLIT_RING: Array<SplitRing> = Array::with_max_entries(1, 0);
