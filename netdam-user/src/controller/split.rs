//! Header split settings of a node served on this host (PROTOCOL.md
//! section 9), through its pinned maps: which ports, how many bytes stay in
//! the frame, and the ring in NetDAM memory that takes the rest.

use std::path::Path;

use aya::maps::{Array, HashMap as BpfHashMap, Map, MapData};
use netdam_common::{
    split::{ring_flags, SplitRing, SPLIT_PORTS, STAMP_LEN, UMEM_FRAME_MAX},
    NodeConfig, Region,
};

use super::{local::open_pin, overlap, ControllerError, MAP_REGIONS, MAP_SPLIT_PORTS, MAP_SPLIT_RING};

/// Slots of the ring when none is given: as many as the frames of an
/// AF_XDP socket (`afxdp::EndpointConfig`), so that a reader that keeps up
/// with its socket finds every rest; fewer when they would take more than a
/// quarter of NetDAM memory.
pub const DEFAULT_SLOTS: u32 = 4096;

/// How far a new ring's `taken` starts past the old one's (`publish`).
const TAKEN_JUMP: u64 = 1 << 20;

/// How the ring is set up (anew whenever any of it is given).
#[derive(Clone, Copy, Debug, Default)]
pub struct RingSpec {
    /// NetDAM address of slot 0 (default: the top of NetDAM memory).
    pub base: Option<u64>,
    /// Slots (default `DEFAULT_SLOTS`, or what fits a quarter of memory).
    pub slots: Option<u32>,
    /// Stamp slots and descriptors with generations (`ring_flags::GENERATIONS`).
    pub generations: bool,
}

pub struct SplitTable {
    ports: BpfHashMap<MapData, u32, u32>,
    ring: Array<MapData, SplitRing>,
    regions: BpfHashMap<MapData, u32, Region>,
}

#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    #[error("--keep {keep} is too large: the kept bytes, headers and descriptor must fit a {max}-byte UMEM frame; at most {most}")]
    KeepTooLarge { keep: u32, max: u32, most: u32 },
    #[error("port {0} is port P, which NetDAM itself uses; split another port")]
    PortP(u16),
    #[error("{0} ports are split already, the most the table holds")]
    TooManyPorts(u32),
    #[error(
        "the ring [{base:#x}, +{len}) does not fit the {mem_size}-byte NetDAM memory; give fewer --slots or another --ring-addr"
    )]
    RingOutside { base: u64, len: u64, mem_size: u64 },
    #[error("--ring-addr {0:#x} is not a multiple of 64: slots are whole cache lines")]
    RingMisaligned(u64),
    #[error(
        "the ring [{start:#x}, {end:#x}) overlaps region {rkey:#x} [{base:#x}, +{size:#x}): peers could \
         overwrite split datagrams; give another --ring-addr or fewer --slots"
    )]
    RingOverlapsRegion {
        start: u64,
        end: u64,
        rkey: u32,
        base: u64,
        size: u64,
    },
    #[error(transparent)]
    Controller(#[from] ControllerError),
}

/// Bytes of a ring slot for interface MTU `mtu`: the largest UDP payload,
/// after the stamp with generations, in whole cache lines.
pub fn slot_size(mtu: u32, generations: bool) -> u32 {
    let stamp = if generations { STAMP_LEN } else { 0 };
    (mtu.saturating_sub(28) + stamp).next_multiple_of(64)
}

impl SplitTable {
    pub fn open(dir: &Path) -> Result<SplitTable, ControllerError> {
        let ports = BpfHashMap::try_from(Map::HashMap(open_pin(dir, MAP_SPLIT_PORTS)?))
            .map_err(|e| ControllerError::Map(MAP_SPLIT_PORTS, e))?;
        let ring = Array::try_from(Map::Array(open_pin(dir, MAP_SPLIT_RING)?))
            .map_err(|e| ControllerError::Map(MAP_SPLIT_RING, e))?;
        let regions = BpfHashMap::try_from(Map::HashMap(open_pin(dir, MAP_REGIONS)?))
            .map_err(|e| ControllerError::Map(MAP_REGIONS, e))?;
        Ok(SplitTable { ports, ring, regions })
    }

    /// The ports split now, with the bytes each keeps.
    pub fn ports(&self) -> Vec<(u16, u32)> {
        let mut v: Vec<(u16, u32)> = self
            .ports
            .iter()
            .filter_map(Result::ok)
            .map(|(p, k)| (p as u16, k))
            .collect();
        v.sort();
        v
    }

    pub fn ring(&self) -> Result<SplitRing, ControllerError> {
        self.ring
            .get(&0, 0)
            .map_err(|e| ControllerError::Map(MAP_SPLIT_RING, e))
    }

    /// Splits datagrams to `port`, keeping `keep` payload bytes. Sets up the
    /// ring first if it has none, or anew as `spec` says.
    pub fn add(&mut self, cfg: &NodeConfig, port: u16, keep: u32, spec: &RingSpec) -> Result<SplitRing, SplitError> {
        if port == cfg.port {
            return Err(SplitError::PortP(port));
        }
        // Ethernet, IPv4 with options at most, UDP, then the descriptor.
        let most = UMEM_FRAME_MAX - 14 - 60 - 8 - 16;
        if keep > most {
            return Err(SplitError::KeepTooLarge {
                keep,
                max: UMEM_FRAME_MAX,
                most,
            });
        }
        let mut ring = self.ring()?;
        let has_generations = ring.flags & ring_flags::GENERATIONS != 0;
        if ring.slots == 0 || spec.base.is_some() || spec.slots.is_some() || (spec.generations && !has_generations) {
            ring = self.new_ring(cfg, spec)?;
            self.publish(ring)?;
        }
        let present = self.ports.get(&(port as u32), 0).is_ok();
        if !present && self.ports().len() as u32 >= SPLIT_PORTS {
            return Err(SplitError::TooManyPorts(SPLIT_PORTS));
        }
        self.ports
            .insert(port as u32, keep, 0)
            .map_err(|e| ControllerError::Map(MAP_SPLIT_PORTS, e))?;
        Ok(ring)
    }

    /// The ring `spec` asks for, checked against the memory and the regions.
    fn new_ring(&self, cfg: &NodeConfig, spec: &RingSpec) -> Result<SplitRing, SplitError> {
        let slot_size = slot_size(cfg.mtu, spec.generations);
        let fit = (cfg.mem_size / 4 / slot_size as u64).clamp(1, DEFAULT_SLOTS as u64) as u32;
        let slots = spec.slots.unwrap_or(fit).max(1);
        let len = slots as u64 * slot_size as u64;
        let base = spec.base.unwrap_or(cfg.mem_size.saturating_sub(len));
        if !base.is_multiple_of(64) {
            return Err(SplitError::RingMisaligned(base));
        }
        if len > cfg.mem_size || base > cfg.mem_size - len {
            return Err(SplitError::RingOutside {
                base,
                len,
                mem_size: cfg.mem_size,
            });
        }
        let (start, end) = (base, base + len);
        for (rkey, r) in self.regions.iter().filter_map(Result::ok) {
            if overlap((start, end), (r.base, r.base + r.size)) {
                return Err(SplitError::RingOverlapsRegion {
                    start,
                    end,
                    rkey,
                    base: r.base,
                    size: r.size,
                });
            }
        }
        Ok(SplitRing {
            base,
            slot_size,
            slots,
            taken: 0,
            flags: if spec.generations { ring_flags::GENERATIONS } else { 0 },
            _reserved: 0,
        })
    }

    /// Replaces the ring under a running data path, which reads it without
    /// a lock (once per datagram, possibly while an update is half-copied):
    /// so each update changes either `slots` alone or fields that a ring
    /// with no slots makes unused. First the old ring stops (slots 0), then
    /// the new one is written with no slots, then its slots are set. Its
    /// `taken` starts past every number the old one gave out, so no two
    /// datagrams get one generation.
    fn publish(&mut self, ring: SplitRing) -> Result<(), ControllerError> {
        let set = |t: &mut Self, r: SplitRing| t.ring.set(0, r, 0).map_err(|e| ControllerError::Map(MAP_SPLIT_RING, e));
        let mut old = self.ring()?;
        if old.slots != 0 {
            old.slots = 0;
            set(self, old)?;
        }
        // The data path takes no numbers while there are no slots; one in
        // flight may still add one or two.
        let stopped = SplitRing {
            slots: 0,
            taken: self.ring()?.taken + TAKEN_JUMP,
            ..ring
        };
        set(self, stopped)?;
        set(
            self,
            SplitRing {
                slots: ring.slots,
                ..stopped
            },
        )
    }

    /// Stops splitting `port`; whether it was split.
    pub fn remove(&mut self, port: u16) -> bool {
        self.ports.remove(&(port as u32)).is_ok()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn slots_hold_the_largest_payload_in_cache_lines() {
        assert_eq!(super::slot_size(1500, false), 1472);
        assert_eq!(super::slot_size(1500, true), 1536, "the stamp takes a cache line more");
        assert_eq!(super::slot_size(9000, false), 8984_u32.next_multiple_of(64));
        assert_eq!(super::slot_size(100, true) % 64, 0);
    }
}
