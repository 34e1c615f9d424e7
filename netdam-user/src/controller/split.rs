//! Header split settings of a node served on this host (PROTOCOL.md
//! section 9), through its pinned maps: which ports, how many bytes stay in
//! the frame, and the ring in NetDAM memory that takes the rest.

use std::path::Path;

use aya::maps::{Array, HashMap as BpfHashMap, Map, MapData};
use netdam_common::{
    split::{SplitRing, SPLIT_PORTS, UMEM_FRAME_MAX},
    NodeConfig,
};

use super::{local::open_pin, ControllerError, MAP_SPLIT_PORTS, MAP_SPLIT_RING};

/// Slots of the ring when none is given: a split datagram's rest stays
/// readable until this many later datagrams have been split.
pub const DEFAULT_SLOTS: u32 = 1024;

pub struct SplitTable {
    ports: BpfHashMap<MapData, u32, u32>,
    ring: Array<MapData, SplitRing>,
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
    #[error(transparent)]
    Controller(#[from] ControllerError),
}

/// Bytes of a ring slot for interface MTU `mtu`: the largest UDP payload, in
/// whole cache lines.
pub fn slot_size(mtu: u32) -> u32 {
    mtu.saturating_sub(28).next_multiple_of(64)
}

impl SplitTable {
    pub fn open(dir: &Path) -> Result<SplitTable, ControllerError> {
        let ports = BpfHashMap::try_from(Map::HashMap(open_pin(dir, MAP_SPLIT_PORTS)?))
            .map_err(|e| ControllerError::Map(MAP_SPLIT_PORTS, e))?;
        let ring = Array::try_from(Map::Array(open_pin(dir, MAP_SPLIT_RING)?))
            .map_err(|e| ControllerError::Map(MAP_SPLIT_RING, e))?;
        Ok(SplitTable { ports, ring })
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
    /// ring first if it has none: `slots` slots at `base` (default: the top
    /// of NetDAM memory).
    pub fn add(
        &mut self,
        cfg: &NodeConfig,
        port: u16,
        keep: u32,
        base: Option<u64>,
        slots: Option<u32>,
    ) -> Result<SplitRing, SplitError> {
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
        if ring.slots == 0 || base.is_some() || slots.is_some() {
            let slot_size = slot_size(cfg.mtu);
            let slots = slots.unwrap_or(DEFAULT_SLOTS).max(1);
            let len = slots as u64 * slot_size as u64;
            let base = match base {
                Some(b) => b,
                None => cfg.mem_size.saturating_sub(len),
            };
            if len > cfg.mem_size || base > cfg.mem_size - len {
                return Err(SplitError::RingOutside {
                    base,
                    len,
                    mem_size: cfg.mem_size,
                });
            }
            ring = SplitRing {
                base,
                slot_size,
                slots,
                taken: ring.taken,
            };
            self.ring
                .set(0, ring, 0)
                .map_err(|e| ControllerError::Map(MAP_SPLIT_RING, e))?;
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

    /// Stops splitting `port`; whether it was split.
    pub fn remove(&mut self, port: u16) -> bool {
        self.ports.remove(&(port as u32)).is_ok()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn slots_hold_the_largest_payload_in_cache_lines() {
        assert_eq!(super::slot_size(1500), 1472);
        assert_eq!(super::slot_size(9000), 8984_u32.next_multiple_of(64));
        assert_eq!(super::slot_size(100) % 64, 0);
    }
}
