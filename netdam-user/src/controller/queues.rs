//! Receive queues: how many an interface has, and the maps with a slot per
//! queue (the AF_XDP socket map, the per-queue frame counts), sized from
//! them at load.
//!
//! The count comes from ETHTOOL_GCHANNELS in the calling thread's network
//! namespace (/sys/class/net inside an `ip netns` namespace shows the
//! namespace sysfs was mounted in). The maps get a slot for the most
//! receive queues the driver allows, not only those in use, so that
//! `ethtool -L` up to that maximum needs no reload.

use std::path::Path;

use aya::maps::{Map, MapData, PerCpuArray};

use super::{local::open_pin, ControllerError, MAP_QUEUE_FRAMES, MAP_XSKS};

/// Queue slots a node accepts: more than any NIC has (mlx5 allows 1024 channels on large hosts).
pub const MAX_QUEUE_SLOTS: u32 = 4096;

/// Maps whose max_entries is the interface's queue slots. Their contents
/// need not outlive a reload (sockets are entered again by the endpoints,
/// the counts start again), so a pinned one of another size is replaced
/// rather than refused (`pins::check_compatible`).
pub const PER_QUEUE_MAPS: [&str; 2] = [MAP_XSKS, MAP_QUEUE_FRAMES];

/// An interface's receive queues, as its driver reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxQueues {
    /// Queues that receive now (rx-only plus combined channels).
    pub current: u32,
    /// The most the driver allows (`ethtool -L` up to this).
    pub max: u32,
}

impl RxQueues {
    /// One queue: a driver that does not report channels (e.g. lo) has one.
    pub const SINGLE: RxQueues = RxQueues { current: 1, max: 1 };

    /// Slots the per-queue maps need: every queue the driver allows.
    pub fn slots(&self) -> u32 {
        self.current.max(self.max).clamp(1, MAX_QUEUE_SLOTS)
    }
}

/// struct ethtool_channels of linux/ethtool.h.
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

const ETHTOOL_GCHANNELS: u32 = 0x3C;

/// The receive queues of interface `name` in the calling thread's network
/// namespace; `SINGLE` when the driver has no channel count (EOPNOTSUPP).
pub fn rx_queues(name: &str) -> Result<RxQueues, ControllerError> {
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    let fail =
        |e: std::io::Error| ControllerError::Io(format!("reading the channel count of {name} (ETHTOOL_GCHANNELS)"), e);
    // SAFETY: a socket for the ioctl, closed before return; ifreq is zeroed,
    // holds the NUL-terminated name (checked to fit) and points at `ch`,
    // which outlives the call.
    unsafe {
        let mut ifr: libc::ifreq = std::mem::zeroed();
        if name.len() >= ifr.ifr_name.len() {
            return Err(ControllerError::UnknownInterface(name.to_string()));
        }
        for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        ifr.ifr_ifru.ifru_data = (&mut ch as *mut EthtoolChannels).cast();
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(fail(std::io::Error::last_os_error()));
        }
        let r = libc::ioctl(fd, libc::SIOCETHTOOL as _, &mut ifr);
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if r < 0 {
            return match err.raw_os_error() {
                Some(libc::EOPNOTSUPP) => Ok(RxQueues::SINGLE),
                Some(libc::ENODEV) => Err(ControllerError::UnknownInterface(name.to_string())),
                _ => Err(fail(err)),
            };
        }
    }
    Ok(from_channels(&ch))
}

/// Receive queues from the channel counts: rx-only and combined channels
/// both receive; a driver reports one kind or both (ice: both).
fn from_channels(ch: &EthtoolChannels) -> RxQueues {
    RxQueues {
        current: (ch.rx_count + ch.combined_count).max(1),
        max: ch.max_rx.max(ch.max_combined).max(1),
    }
}

/// Frames the data path saw on each receive queue of the node pinned in
/// `dir`, summed over CPUs; empty for a node loaded by a netdam without
/// per-queue counts.
pub fn queue_frames(dir: &Path) -> Result<Vec<u64>, ControllerError> {
    if !dir.join(MAP_QUEUE_FRAMES).exists() {
        return Ok(Vec::new());
    }
    let fail = |e| ControllerError::Map(MAP_QUEUE_FRAMES, e);
    let map = open_pin(dir, MAP_QUEUE_FRAMES)?;
    let slots = map.info().map_err(fail)?.max_entries();
    let arr: PerCpuArray<MapData, u64> = PerCpuArray::try_from(Map::PerCpuArray(map)).map_err(fail)?;
    (0..slots)
        .map(|q| arr.get(&q, 0).map(|v| v.iter().sum()).map_err(fail))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_count_rx_and_combined_channels() {
        let veth = EthtoolChannels {
            max_rx: 4,
            max_tx: 4,
            rx_count: 4,
            tx_count: 4,
            ..Default::default()
        };
        assert_eq!(from_channels(&veth), RxQueues { current: 4, max: 4 });
        let mlx5 = EthtoolChannels {
            max_combined: 63,
            combined_count: 8,
            ..Default::default()
        };
        assert_eq!(from_channels(&mlx5).slots(), 63);
        let ice = EthtoolChannels {
            max_rx: 16,
            max_combined: 16,
            rx_count: 2,
            combined_count: 6,
            ..Default::default()
        };
        assert_eq!(from_channels(&ice), RxQueues { current: 8, max: 16 });
        assert_eq!(from_channels(&EthtoolChannels::default()), RxQueues::SINGLE);
        let huge = RxQueues {
            current: 1,
            max: 100_000,
        };
        assert_eq!(huge.slots(), MAX_QUEUE_SLOTS);
    }

    #[test]
    fn loopback_has_one_queue() {
        // lo has no channel count: the driver does not support the call.
        assert_eq!(rx_queues("lo").unwrap(), RxQueues::SINGLE);
        assert!(matches!(
            rx_queues("no-such-if0"),
            Err(ControllerError::UnknownInterface(_))
        ));
    }
}
