//! The testbed's fabric: what runs on the switch side of every link.
//! - `xdp` (the default): `netdam_switch` forwards unicast frames port to
//!   port through a devmap, as xdp_frames, and leaves broadcast, multicast
//!   and unknown destinations to the bridge. Every host's `eth0` gets GRO,
//!   which gives veth the NAPI context that receives redirected frames on a
//!   host that runs no XDP program of its own, and computes its transmit
//!   checksums itself: an xdp_frame carries no "checksum partial" mark, so a
//!   frame left to offload would arrive with a wrong checksum.
//! - `bridge`: the Linux bridge forwards everything; each port runs a
//!   pass-through program, because veth hands XDP_TX frames only to a peer
//!   that runs XDP (or has NAPI).
//! - `plain`: the Linux bridge and no XDP on any link, so TCP keeps GSO:
//!   where a baseline (OpenMPI) is at its best. NetDAM's answers cannot
//!   cross it (nothing on the switch side receives XDP_TX frames).

use std::{fmt, path::Path, str::FromStr};

use aya::{
    maps::{Array, DevMapHash, HashMap as BpfHashMap, Map, MapData, PerCpuArray},
    programs::{links::FdLink, Xdp, XdpMode},
    EbpfLoader,
};
use netdam_common::switch::{mac_key, stat, SwitchConfig};
use serde::Serialize;

use super::{host_mac, in_netns, pin_root, switch_ns, Testbed, TestbedError, IFACE};
use crate::NETDAM_LAB_XDP;

const CONFIG_PIN: &str = "SWITCH_CONFIG";
const STATS_PIN: &str = "SWITCH_STATS";

/// How the switch namespace moves frames between the testbed's links.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fabric {
    /// Port to port in XDP through a devmap; the bridge floods the rest.
    #[default]
    Xdp,
    /// The Linux bridge, a pass-through XDP program on every port.
    Bridge,
    /// The Linux bridge alone, for baselines: no XDP on the links.
    Plain,
}

impl fmt::Display for Fabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fabric::Xdp => "xdp",
            Fabric::Bridge => "bridge",
            Fabric::Plain => "plain",
        })
    }
}

impl FromStr for Fabric {
    type Err = String;
    fn from_str(s: &str) -> Result<Fabric, String> {
        match s {
            "xdp" => Ok(Fabric::Xdp),
            "bridge" => Ok(Fabric::Bridge),
            "plain" => Ok(Fabric::Plain),
            _ => Err(format!(
                "fabric {s:?}: use xdp (port to port in XDP), bridge (the Linux bridge) or plain (the bridge without XDP, for baselines)"
            )),
        }
    }
}

/// What the XDP switch did, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SwitchStats {
    pub redirected: u64,
    pub flooded: u64,
    pub unknown: u64,
    pub impaired: u64,
}

impl Testbed {
    /// Attaches the fabric's program to every switch port (pinned).
    pub(super) fn attach_fabric(&self) -> Result<(), TestbedError> {
        if self.fabric == Fabric::Plain {
            return Ok(());
        }
        if self.fabric == Fabric::Xdp {
            for i in 0..self.hosts.len() {
                self.in_host(i, || {
                    set_feature(IFACE, Feature::Gro, true)?;
                    set_feature(IFACE, Feature::TxChecksum, false)
                })??;
            }
        }
        let dir = pin_root(&self.prefix);
        std::fs::create_dir_all(&dir).map_err(|e| {
            TestbedError::Io(
                format!("create {} (is bpffs mounted at /sys/fs/bpf?)", dir.display()),
                e,
            )
        })?;
        let ports: Vec<(String, [u8; 6])> = (0..self.hosts.len()).map(|i| (format!("p{i}"), host_mac(i))).collect();
        let fabric = self.fabric;
        in_netns(&switch_ns(&self.prefix), move || attach(&dir, &ports, fabric))?
    }

    /// The XDP switch's counters; `None` on the bridge fabric.
    pub fn switch_stats(&self) -> Result<Option<SwitchStats>, TestbedError> {
        let path = pin_root(&self.prefix).join(STATS_PIN);
        if !path.exists() {
            return Ok(None);
        }
        let fail = |e: String| TestbedError::Switch {
            port: "switch".into(),
            detail: format!("reading {}: {e}", path.display()),
        };
        let map = MapData::from_pin(&path).map_err(|e| fail(e.to_string()))?;
        let counters: PerCpuArray<MapData, u64> =
            PerCpuArray::try_from(Map::PerCpuArray(map)).map_err(|e| fail(e.to_string()))?;
        let sum = |slot: u32| -> Result<u64, TestbedError> {
            Ok(counters.get(&slot, 0).map_err(|e| fail(e.to_string()))?.iter().sum())
        };
        Ok(Some(SwitchStats {
            redirected: sum(stat::REDIRECTED)?,
            flooded: sum(stat::FLOODED)?,
            unknown: sum(stat::UNKNOWN)?,
            impaired: sum(stat::IMPAIRED)?,
        }))
    }

    /// On the XDP fabric, sends UDP of `port` through the bridge (where the
    /// chaos element is); a no-op on the bridge fabric.
    pub(super) fn route_udp_through_bridge(&self, port: u16) -> Result<(), TestbedError> {
        let path = pin_root(&self.prefix).join(CONFIG_PIN);
        if !path.exists() {
            return Ok(());
        }
        let fail = |e: String| TestbedError::Chaos(format!("configuring the XDP switch ({}): {e}", path.display()));
        let map = MapData::from_pin(&path).map_err(|e| fail(e.to_string()))?;
        let mut config: Array<MapData, SwitchConfig> =
            Array::try_from(Map::Array(map)).map_err(|e| fail(e.to_string()))?;
        let cfg = SwitchConfig {
            bridge_udp_port: port,
            ..SwitchConfig::default()
        };
        config.set(0, cfg, 0).map_err(|e| fail(e.to_string()))
    }
}

/// Loads the fabric's program and attaches it to `ports` in the switch
/// namespace (the calling thread's), with the forwarding table filled.
fn attach(dir: &Path, ports: &[(String, [u8; 6])], fabric: Fabric) -> Result<(), TestbedError> {
    let fail = |port: &str, detail: String| TestbedError::Switch {
        port: port.to_string(),
        detail,
    };
    let mut ebpf = EbpfLoader::new()
        .load(NETDAM_LAB_XDP)
        .map_err(|e| fail("load", e.to_string()))?;
    let program = match fabric {
        Fabric::Xdp => "netdam_switch",
        Fabric::Bridge | Fabric::Plain => "netdam_pass",
    };
    if fabric == Fabric::Xdp {
        let mut fdb: BpfHashMap<_, u64, u32> = BpfHashMap::try_from(ebpf.map_mut("SWITCH_FDB").expect("SWITCH_FDB"))
            .map_err(|e| fail("fdb", e.to_string()))?;
        let mut ifindexes = Vec::new();
        for (port, mac) in ports {
            let ifindex = nix::net::if_::if_nametoindex(port.as_str()).map_err(|e| fail(port, e.to_string()))?;
            fdb.insert(mac_key(mac), ifindex, 0)
                .map_err(|e| fail(port, format!("forwarding table: {e}")))?;
            ifindexes.push((port, ifindex));
        }
        let mut devmap = DevMapHash::try_from(ebpf.map_mut("SWITCH_PORTS").expect("SWITCH_PORTS"))
            .map_err(|e| fail("devmap", e.to_string()))?;
        for (port, ifindex) in ifindexes {
            devmap
                .insert(ifindex, ifindex, None, 0)
                .map_err(|e| fail(port, format!("devmap: {e}")))?;
        }
        for pin in [CONFIG_PIN, STATS_PIN] {
            ebpf.map_mut(pin)
                .expect("switch map")
                .pin(dir.join(pin))
                .map_err(|e| fail(pin, e.to_string()))?;
        }
    }
    let prog: &mut Xdp = ebpf.program_mut(program).expect(program).try_into().expect("xdp");
    prog.load().map_err(|e| fail("load", e.to_string()))?;
    for (port, _) in ports {
        let id = prog
            .attach(port, XdpMode::Driver)
            .map_err(|e| fail(port, e.to_string()))?;
        let link = prog.take_link(id).map_err(|e| fail(port, e.to_string()))?;
        let fd: FdLink = link
            .try_into()
            .map_err(|e: aya::programs::links::LinkError| fail(port, e.to_string()))?;
        fd.pin(dir.join(format!("sw-{port}")))
            .map_err(|e| fail(port, e.to_string()))?;
    }
    Ok(())
}

/// A device feature with an ethtool set command of its own.
#[derive(Clone, Copy, Debug)]
enum Feature {
    Gro = 0x2C,        // ETHTOOL_SGRO
    TxChecksum = 0x17, // ETHTOOL_STXCSUM
}

/// Turns `feature` on or off for `iface` in the calling thread's namespace
/// (what `ethtool -K` does; ethtool itself need not be installed).
fn set_feature(iface: &str, feature: Feature, on: bool) -> Result<(), TestbedError> {
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    let fail = |e: std::io::Error| {
        let state = if on { "on" } else { "off" };
        TestbedError::Io(format!("turning {feature:?} {state} on {iface}"), e)
    };
    let mut value = EthtoolValue {
        cmd: feature as u32,
        data: on as u32,
    };
    // SAFETY: a socket for the ioctl, closed before return; ifreq is zeroed,
    // holds the NUL-terminated name (checked to fit) and points at `value`,
    // which outlives the call.
    unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        let name = iface.as_bytes();
        if name.len() >= req.ifr_name.len() {
            return Err(fail(std::io::Error::from(std::io::ErrorKind::InvalidInput)));
        }
        for (d, s) in req.ifr_name.iter_mut().zip(name) {
            *d = *s as libc::c_char;
        }
        req.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(fail(std::io::Error::last_os_error()));
        }
        let r = libc::ioctl(fd, libc::SIOCETHTOOL, &mut req);
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if r < 0 {
            return Err(fail(err));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fabric_names() {
        assert_eq!("xdp".parse::<Fabric>(), Ok(Fabric::Xdp));
        assert_eq!("bridge".parse::<Fabric>(), Ok(Fabric::Bridge));
        assert_eq!("plain".parse::<Fabric>(), Ok(Fabric::Plain));
        assert_eq!(Fabric::default(), Fabric::Xdp);
        assert_eq!(Fabric::Bridge.to_string(), "bridge");
        let e = "ovs".parse::<Fabric>().unwrap_err();
        assert!(e.contains("use xdp") && e.contains("bridge"), "{e}");
    }
}
