//! The chaos element of the testbed (`netdam_common::chaos`): the tc
//! program `netdam_chaos` on the egress of every switch port, so that every
//! NetDAM frame crossing any link may be dropped, duplicated or reordered,
//! from a seeded random stream per CPU. Its links and counters are pinned
//! under the testbed's bpffs directory and go with `down`.

use std::path::Path;

use aya::{
    maps::{Array, HashMap as BpfHashMap, Map, MapData, PerCpuArray, PerCpuValues},
    programs::{links::FdLink, SchedClassifier, TcAttachType},
    util::nr_cpus,
    EbpfLoader,
};
use netdam_common::{
    chaos::{stat, ChaosConfig, Held, HELD_MAX},
    wire::DEFAULT_PORT,
};
use serde::Serialize;

use super::{in_netns, pin_root, switch_ns, Testbed, TestbedError};
use crate::NETDAM_LAB_XDP;

const STATS_PIN: &str = "CHAOS_STATS";

/// Fractions of NetDAM frames to impair on every link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Chaos {
    pub loss: f64,
    pub dup: f64,
    pub reorder: f64,
    pub seed: u64,
}

impl Chaos {
    pub fn is_none(&self) -> bool {
        self.loss == 0.0 && self.dup == 0.0 && self.reorder == 0.0
    }
}

/// What the chaos element did, summed over links and CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ChaosStats {
    pub seen: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub held: u64,
    pub released: u64,
}

impl Testbed {
    /// Attaches the chaos element to every switch port.
    pub fn impair(&self, chaos: &Chaos) -> Result<(), TestbedError> {
        let cfg = ChaosConfig::new(DEFAULT_PORT, chaos.loss, chaos.dup, chaos.reorder).ok_or_else(|| {
            TestbedError::Chaos(format!(
                "--loss {} --dup {} --reorder {}: each is a fraction from 0 to 1, together at most 1",
                chaos.loss, chaos.dup, chaos.reorder
            ))
        })?;
        let dir = pin_root(&self.prefix);
        let ports: Vec<String> = (0..self.hosts.len()).map(|i| format!("p{i}")).collect();
        let seed = chaos.seed;
        self.route_udp_through_bridge(DEFAULT_PORT)?;
        in_netns(&switch_ns(&self.prefix), move || attach(&dir, &ports, cfg, seed))?
    }

    /// The chaos element's counters; `None` when it is not attached.
    pub fn chaos_stats(&self) -> Result<Option<ChaosStats>, TestbedError> {
        let path = pin_root(&self.prefix).join(STATS_PIN);
        if !path.exists() {
            return Ok(None);
        }
        let fail = |e: String| TestbedError::Chaos(format!("reading {}: {e}", path.display()));
        let map = MapData::from_pin(&path).map_err(|e| fail(e.to_string()))?;
        let counters: PerCpuArray<MapData, u64> =
            PerCpuArray::try_from(Map::PerCpuArray(map)).map_err(|e| fail(e.to_string()))?;
        let sum = |slot: u32| -> Result<u64, TestbedError> {
            Ok(counters.get(&slot, 0).map_err(|e| fail(e.to_string()))?.iter().sum())
        };
        Ok(Some(ChaosStats {
            seen: sum(stat::SEEN)?,
            dropped: sum(stat::DROPPED)?,
            duplicated: sum(stat::DUPLICATED)?,
            held: sum(stat::HELD)?,
            released: sum(stat::RELEASED)?,
        }))
    }
}

/// Loads, configures and attaches the element in the switch namespace (the calling thread's).
fn attach(dir: &Path, ports: &[String], cfg: ChaosConfig, seed: u64) -> Result<(), TestbedError> {
    let fail = |what: &str, e: String| TestbedError::Chaos(format!("{what}: {e}"));
    let mut ebpf = EbpfLoader::new()
        .map_max_entries("CHAOS_HELD", ports.len() as u32)
        .load(NETDAM_LAB_XDP)
        .map_err(|e| fail("loading the chaos element", e.to_string()))?;
    let mut config: Array<_, ChaosConfig> = Array::try_from(ebpf.map_mut("CHAOS_CONFIG").expect("CHAOS_CONFIG"))
        .map_err(|e| fail("config", e.to_string()))?;
    config.set(0, cfg, 0).map_err(|e| fail("config", e.to_string()))?;
    let cpus = nr_cpus().map_err(|(what, e)| fail(what, e.to_string()))?;
    let mut rng: PerCpuArray<_, u64> =
        PerCpuArray::try_from(ebpf.map_mut("CHAOS_RNG").expect("CHAOS_RNG")).map_err(|e| fail("rng", e.to_string()))?;
    // xorshift needs a non-zero state; each CPU its own stream of the seed.
    let states: Vec<u64> = (0..cpus as u64)
        .map(|c| (seed ^ (c + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1)
        .collect();
    rng.set(
        0,
        PerCpuValues::try_from(states).map_err(|e| fail("rng", e.to_string()))?,
        0,
    )
    .map_err(|e| fail("rng", e.to_string()))?;
    let mut held: BpfHashMap<_, u32, Held> = BpfHashMap::try_from(ebpf.map_mut("CHAOS_HELD").expect("CHAOS_HELD"))
        .map_err(|e| fail("held", e.to_string()))?;
    let empty = Box::new(Held {
        len: 0,
        _pad: 0,
        data: [0; HELD_MAX],
    });
    for port in ports {
        let ifindex = nix::net::if_::if_nametoindex(port.as_str()).map_err(|e| fail(port, e.to_string()))?;
        held.insert(ifindex, empty.as_ref(), 0)
            .map_err(|e| fail("held", e.to_string()))?;
    }
    ebpf.map_mut("CHAOS_STATS")
        .expect("CHAOS_STATS")
        .pin(dir.join(STATS_PIN))
        .map_err(|e| fail("pinning the counters", e.to_string()))?;
    let prog: &mut SchedClassifier = ebpf
        .program_mut("netdam_chaos")
        .expect("netdam_chaos")
        .try_into()
        .map_err(|e: aya::programs::ProgramError| fail("netdam_chaos", e.to_string()))?;
    prog.load().map_err(|e| fail("loading netdam_chaos", e.to_string()))?;
    for port in ports {
        let id = prog
            .attach(port, TcAttachType::Egress)
            .map_err(|e| fail(&format!("attaching to {port} egress (tcx, Linux 6.6+)"), e.to_string()))?;
        let link: FdLink = prog
            .take_link(id)
            .map_err(|e| fail(port, e.to_string()))?
            .try_into()
            .map_err(|e: aya::programs::links::LinkError| fail(port, e.to_string()))?;
        link.pin(dir.join(format!("chaos-{port}")))
            .map_err(|e| fail(port, e.to_string()))?;
    }
    Ok(())
}
