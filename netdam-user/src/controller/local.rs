//! A node served on this host by another process (`netdam serve`), reached
//! through its pinned maps: its config, its memory (mapped, no copy through
//! the kernel) and its readiness generations. What `netdam ready` and the
//! collective engine use.

use std::{net::Ipv4Addr, path::Path};

use aya::maps::{Array, HashMap as BpfHashMap, Map, MapData};
use netdam_common::{chain::Readiness, NodeConfig};

use super::{ControllerError, NetdamMemory, MAP_CONFIG, MAP_GENERATIONS, MAP_MEM};

pub struct LocalNode {
    pub config: NodeConfig,
    dir: std::path::PathBuf,
    memory: NetdamMemory,
    generations: BpfHashMap<MapData, u32, Readiness>,
}

pub(super) fn open_pin(dir: &Path, name: &'static str) -> Result<MapData, ControllerError> {
    let path = dir.join(name);
    if !path.exists() {
        return Err(ControllerError::Io(
            format!("no pinned map at {}", path.display()),
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "is `netdam serve` running on this host? pass its --pin-dir or --iface",
            ),
        ));
    }
    MapData::from_pin(&path).map_err(|e| ControllerError::Map(name, e))
}

impl LocalNode {
    pub fn open(dir: &Path) -> Result<LocalNode, ControllerError> {
        let cfg: Array<MapData, NodeConfig> =
            Array::try_from(Map::Array(open_pin(dir, MAP_CONFIG)?)).map_err(|e| ControllerError::Map(MAP_CONFIG, e))?;
        let config = cfg.get(&0, 0).map_err(|e| ControllerError::Map(MAP_CONFIG, e))?;
        if config.mem_size == 0 {
            return Err(ControllerError::Unconfigured(dir.to_path_buf()));
        }
        let mem = open_pin(dir, MAP_MEM)?;
        let memory = NetdamMemory::map(mem.fd(), config.mem_size as usize)?;
        let generations = BpfHashMap::try_from(Map::HashMap(open_pin(dir, MAP_GENERATIONS)?))
            .map_err(|e| ControllerError::Map(MAP_GENERATIONS, e))?;
        Ok(LocalNode {
            config,
            dir: dir.to_path_buf(),
            memory,
            generations,
        })
    }

    pub fn ipv4(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from_be(self.config.ipv4_be))
    }

    /// Where the node's maps (and its injector) are pinned.
    pub fn pin_dir(&self) -> &Path {
        &self.dir
    }

    /// The index of the interface that holds the node's address, in the
    /// calling thread's network namespace.
    pub fn interface_index(&self) -> Result<u32, ControllerError> {
        let ip = self.ipv4();
        let addrs =
            nix::ifaddrs::getifaddrs().map_err(|e| ControllerError::Io("listing the interfaces".into(), e.into()))?;
        for a in addrs {
            let here = a.address.as_ref().and_then(|s| s.as_sockaddr_in()).map(|s| s.ip());
            if here == Some(ip) {
                return nix::net::if_::if_nametoindex(a.interface_name.as_str())
                    .map_err(|e| ControllerError::Io(format!("the index of {}", a.interface_name), e.into()));
            }
        }
        Err(ControllerError::Io(
            format!("no interface here has the node's address {ip}"),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ))
    }

    pub fn memory(&self) -> &NetdamMemory {
        &self.memory
    }

    pub fn generation(&self, rkey: u32) -> Result<u32, ControllerError> {
        Ok(self.readiness(rkey)?.generation)
    }

    /// Sets region `rkey`'s generation with call word 0.
    pub fn set_generation(&mut self, rkey: u32, generation: u32) -> Result<(), ControllerError> {
        self.set_readiness(rkey, Readiness::new(generation, 0))
    }

    pub fn readiness(&self, rkey: u32) -> Result<Readiness, ControllerError> {
        get_readiness(&self.generations, rkey)
    }

    pub fn set_readiness(&mut self, rkey: u32, now: Readiness) -> Result<(), ControllerError> {
        set_readiness(&mut self.generations, rkey, now)
    }
}

/// The readiness (generation and call word) of region `rkey` (absent: 0, section 6).
pub(super) fn get_readiness<T: std::borrow::Borrow<MapData>>(
    m: &BpfHashMap<T, u32, Readiness>,
    rkey: u32,
) -> Result<Readiness, ControllerError> {
    match m.get(&rkey, 0) {
        Ok(r) => Ok(r),
        Err(aya::maps::MapError::KeyNotFound) => Ok(Readiness::default()),
        Err(e) => Err(ControllerError::Map(MAP_GENERATIONS, e)),
    }
}

/// Sets region `rkey`'s generation and call word together (one map
/// element, so the data path never sees one without the other).
pub(super) fn set_readiness<T: std::borrow::BorrowMut<MapData>>(
    m: &mut BpfHashMap<T, u32, Readiness>,
    rkey: u32,
    now: Readiness,
) -> Result<(), ControllerError> {
    m.insert(rkey, now, 0)
        .map_err(|e| ControllerError::Map(MAP_GENERATIONS, e))
}
