//! Receive queues: how many an interface has, and the maps with a slot per
//! queue (the AF_XDP socket map, the per-queue frame counts), sized from
//! them at load.
//!
//! The count comes from ETHTOOL_GCHANNELS in the calling thread's network
//! namespace (/sys/class/net inside an `ip netns` namespace shows the
//! namespace sysfs was mounted in); for a driver without channel counts
//! (a bridge), from the queues the device was made with (netlink,
//! IFLA_NUM_RX_QUEUES). The maps get a slot for the most
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
/// namespace: its channel counts, or, when the driver has none
/// (EOPNOTSUPP), the queues the device was made with.
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
                Some(libc::EOPNOTSUPP) => {
                    let n = allocated_rx_queues(name).map_err(|e| {
                        ControllerError::Io(format!("reading the receive queues of {name} (netlink RTM_GETLINK)"), e)
                    })?;
                    Ok(RxQueues { current: n, max: n })
                }
                Some(libc::ENODEV) => Err(ControllerError::UnknownInterface(name.to_string())),
                _ => Err(fail(err)),
            };
        }
    }
    Ok(from_channels(&ch))
}

/// IFLA_NUM_RX_QUEUES of linux/if_link.h: the receive queues allocated with the device.
const IFLA_NUM_RX_QUEUES: u16 = 32;

/// The receive queues interface `name` was allocated with (RTM_GETLINK on
/// a netlink socket of the calling thread's namespace); at least 1.
fn allocated_rx_queues(name: &str) -> Result<u32, std::io::Error> {
    let index = nix::net::if_::if_nametoindex(name)?;
    #[repr(C)]
    struct Request {
        hdr: libc::nlmsghdr,
        ifi: libc::ifinfomsg,
    }
    // SAFETY: plain old data, all-zero is valid.
    let mut req: Request = unsafe { std::mem::zeroed() };
    req.hdr.nlmsg_len = std::mem::size_of::<Request>() as u32;
    req.hdr.nlmsg_type = libc::RTM_GETLINK;
    req.hdr.nlmsg_flags = libc::NLM_F_REQUEST as u16;
    req.hdr.nlmsg_seq = 1;
    req.ifi.ifi_family = libc::AF_UNSPEC as u8;
    req.ifi.ifi_index = index as i32;
    let mut buf = vec![0u8; 32 * 1024];
    // SAFETY: a netlink socket owned here and closed before return; `req`
    // and `buf` are live buffers of the lengths given.
    let n = unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        );
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let sent = libc::send(fd, (&req as *const Request).cast(), req.hdr.nlmsg_len as usize, 0);
        let n = if sent < 0 {
            -1
        } else {
            libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0)
        };
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n < 0 {
            return Err(err);
        }
        n as usize
    };
    parse_link_reply(&buf[..n])
}

/// IFLA_NUM_RX_QUEUES from an RTM_GETLINK reply (1 if absent); the errno of an NLMSG_ERROR.
fn parse_link_reply(msg: &[u8]) -> Result<u32, std::io::Error> {
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "a short netlink reply");
    let u16_at = |o: usize| {
        msg.get(o..o + 2)
            .map(|b| u16::from_ne_bytes([b[0], b[1]]))
            .ok_or_else(bad)
    };
    let u32_at = |o: usize| {
        msg.get(o..o + 4)
            .map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
            .ok_or_else(bad)
    };
    let len = (u32_at(0)? as usize).min(msg.len());
    if u16_at(4)? == libc::NLMSG_ERROR as u16 {
        // struct nlmsgerr: a negative errno after the header.
        let errno = u32_at(16)? as i32;
        return Err(std::io::Error::from_raw_os_error(-errno));
    }
    // Attributes follow the 16-byte header and the 16-byte ifinfomsg, 4-aligned.
    let mut at = 32;
    while at + 4 <= len {
        let (attr_len, kind) = (u16_at(at)? as usize, u16_at(at + 2)?);
        if attr_len < 4 {
            break;
        }
        if kind == IFLA_NUM_RX_QUEUES {
            return Ok(u32_at(at + 4)?.max(1));
        }
        at += attr_len.next_multiple_of(4);
    }
    Ok(1)
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
    fn link_replies_give_the_allocated_queues_or_the_error() {
        let mut reply = vec![0u8; 32];
        reply[4..6].copy_from_slice(&libc::RTM_NEWLINK.to_ne_bytes());
        for (kind, value) in [(3u16, 0x3030_3030u32), (IFLA_NUM_RX_QUEUES, 6)] {
            reply.extend_from_slice(&8u16.to_ne_bytes());
            reply.extend_from_slice(&kind.to_ne_bytes());
            reply.extend_from_slice(&value.to_ne_bytes());
        }
        let len = reply.len() as u32;
        reply[0..4].copy_from_slice(&len.to_ne_bytes());
        assert_eq!(parse_link_reply(&reply).unwrap(), 6);
        assert_eq!(parse_link_reply(&reply[..40]).unwrap(), 1, "absent: one queue");
        let mut error = vec![0u8; 20];
        error[0..4].copy_from_slice(&20u32.to_ne_bytes());
        error[4..6].copy_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
        error[16..20].copy_from_slice(&(-libc::ENODEV).to_ne_bytes());
        assert_eq!(parse_link_reply(&error).unwrap_err().raw_os_error(), Some(libc::ENODEV));
        assert!(parse_link_reply(&[0u8; 3]).is_err());
    }

    #[test]
    fn loopback_has_one_queue() {
        // lo has no channel count: the netlink count (1) answers.
        assert_eq!(rx_queues("lo").unwrap(), RxQueues::SINGLE);
        assert!(matches!(
            rx_queues("no-such-if0"),
            Err(ControllerError::UnknownInterface(_))
        ));
    }
}
