//! The few netlink requests doctor makes, by hand over libc sockets: a
//! link's facts (RTM_GETLINK), the id a network namespace has here
//! (RTM_GETNSID), and a device's XDP features (the "netdev" generic
//! netlink family, Linux 6.3+). A netlink socket answers for the network
//! namespace of the thread that opened it, unlike /sys/class/net, which
//! shows the namespace /sys was mounted in.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const RTM_GETLINK: u16 = 18;
const RTM_GETNSID: u16 = 90;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_LINK: u16 = 5;
const IFLA_LINK_NETNSID: u16 = 37;
const IFLA_XDP: u16 = 43;
const IFLA_XDP_PROG_ID: u16 = 4;
const NETNSA_NSID: u16 = 1;
const NETNSA_FD: u16 = 3;
/// Attribute type bits that are flags, not the type.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// What RTM_GETLINK tells of a link.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub mtu: u32,
    /// The link's other end: a veth's peer.
    pub link: Option<u32>,
    /// The namespace `link` lives in, when not this one (its id here).
    pub link_netnsid: Option<i32>,
    /// The XDP program attached, if any.
    pub xdp_prog_id: Option<u32>,
}

/// A netlink message under construction.
struct Message(Vec<u8>);

impl Message {
    fn new(kind: u16) -> Message {
        let mut b = Vec::with_capacity(64);
        b.extend_from_slice(&0u32.to_ne_bytes()); // length, set by `finish`
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        b.extend_from_slice(&1u32.to_ne_bytes()); // sequence
        b.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel's
        Message(b)
    }

    fn bytes(mut self, b: &[u8]) -> Message {
        self.0.extend_from_slice(b);
        self.pad();
        self
    }

    fn attr(mut self, kind: u16, payload: &[u8]) -> Message {
        self.0.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(payload);
        self.pad();
        self
    }

    fn pad(&mut self) {
        while !self.0.len().is_multiple_of(4) {
            self.0.push(0);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        let len = self.0.len() as u32;
        self.0[..4].copy_from_slice(&len.to_ne_bytes());
        self.0
    }
}

/// Attributes (type, payload) of a run of netlink attributes.
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let kind = u16::from_ne_bytes([b[2], b[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            return None;
        }
        let payload = &b[4..len];
        b = &b[len.next_multiple_of(4).min(b.len())..];
        Some((kind, payload))
    })
}

/// The payload of the first attribute of `kind` in a run of attributes.
fn find(b: &[u8], kind: u16) -> Option<&[u8]> {
    attrs(b).find(|(k, _)| *k == kind).map(|(_, v)| v)
}

fn u32_of(p: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(p.get(..4)?.try_into().ok()?))
}

fn string_of(p: &[u8]) -> String {
    String::from_utf8_lossy(p.split(|b| *b == 0).next().unwrap_or_default()).into_owned()
}

/// Sends `request` on a new socket of `protocol` and returns the answer's
/// payload (after the netlink header), or the error the kernel answered.
fn ask(protocol: i32, request: Vec<u8>) -> io::Result<Vec<u8>> {
    // SAFETY: a new socket, owned from here on.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a valid descriptor nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_nl zeroed is the kernel's address.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: the buffer and address outlive the call.
    let sent = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            request.as_ptr().cast(),
            request.len(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 65536];
    // SAFETY: `buf` is writable for its length.
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let msg = &buf[..n as usize];
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "short netlink answer");
    let len = u32_of(msg).ok_or_else(bad)? as usize;
    if len < 16 || len > msg.len() {
        return Err(bad());
    }
    let kind = u16::from_ne_bytes([msg[4], msg[5]]);
    let payload = &msg[16..len];
    if kind == NLMSG_ERROR {
        let errno = i32::from_ne_bytes(payload.get(..4).ok_or_else(bad)?.try_into().expect("4 bytes"));
        return Err(io::Error::from_raw_os_error(-errno));
    }
    Ok(payload.to_vec())
}

/// struct ifinfomsg for `index` (0: by the IFLA_IFNAME that follows).
fn ifinfomsg(index: u32) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[4..8].copy_from_slice(&(index as i32).to_ne_bytes());
    m
}

fn parse_link(payload: &[u8]) -> Link {
    let mut link = Link {
        index: payload.get(4..8).and_then(u32_of).unwrap_or_default(),
        ..Link::default()
    };
    for (kind, p) in attrs(payload.get(16..).unwrap_or_default()) {
        match kind {
            IFLA_IFNAME => link.name = string_of(p),
            IFLA_MTU => link.mtu = u32_of(p).unwrap_or_default(),
            IFLA_LINK => link.link = u32_of(p).filter(|i| *i != 0),
            IFLA_LINK_NETNSID => link.link_netnsid = u32_of(p).map(|i| i as i32),
            IFLA_XDP => {
                link.xdp_prog_id = find(p, IFLA_XDP_PROG_ID).and_then(u32_of).filter(|id| *id != 0);
            }
            _ => {}
        }
    }
    link
}

/// The link named `name` in the calling thread's network namespace.
pub fn link_by_name(name: &str) -> io::Result<Link> {
    let mut ifname = name.as_bytes().to_vec();
    ifname.push(0);
    let req = Message::new(RTM_GETLINK)
        .bytes(&ifinfomsg(0))
        .attr(IFLA_IFNAME, &ifname)
        .finish();
    Ok(parse_link(&ask(libc::NETLINK_ROUTE, req)?))
}

/// The link with `index` in the calling thread's network namespace.
pub fn link_by_index(index: u32) -> io::Result<Link> {
    let req = Message::new(RTM_GETLINK).bytes(&ifinfomsg(index)).finish();
    Ok(parse_link(&ask(libc::NETLINK_ROUTE, req)?))
}

/// The id the network namespace of `ns` (an open /run/netns file) has in
/// the calling thread's namespace; `None` if it has none.
pub fn nsid_of(ns: &impl AsRawFd) -> io::Result<Option<i32>> {
    // struct rtgenmsg: the family, padded.
    let req = Message::new(RTM_GETNSID)
        .bytes(&[libc::AF_UNSPEC as u8])
        .attr(NETNSA_FD, &(ns.as_raw_fd() as u32).to_ne_bytes())
        .finish();
    let answer = ask(libc::NETLINK_ROUTE, req)?;
    let nsid = find(answer.get(4..).unwrap_or_default(), NETNSA_NSID).and_then(u32_of);
    Ok(nsid.map(|i| i as i32).filter(|i| *i >= 0))
}

/// A generic netlink request header for `cmd`, version 1.
fn genl(family: u16, cmd: u8) -> Message {
    Message::new(family).bytes(&[cmd, 1, 0, 0])
}

/// The device's XDP features (NETDEV_A_DEV_XDP_FEATURES); `Ok(None)` on a
/// kernel without the netdev family (before 6.3).
pub fn xdp_features(ifindex: u32) -> io::Result<Option<u64>> {
    let req = genl(GENL_ID_CTRL, CTRL_CMD_GETFAMILY)
        .attr(CTRL_ATTR_FAMILY_NAME, b"netdev\0")
        .finish();
    let family = match ask(libc::NETLINK_GENERIC, req) {
        Ok(a) => find(a.get(4..).unwrap_or_default(), CTRL_ATTR_FAMILY_ID)
            .and_then(|v| Some(u16::from_ne_bytes(v.get(..2)?.try_into().ok()?))),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(family) = family else { return Ok(None) };
    let req = genl(family, NETDEV_CMD_DEV_GET)
        .attr(NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes())
        .finish();
    let answer = ask(libc::NETLINK_GENERIC, req)?;
    let features = find(answer.get(4..).unwrap_or_default(), NETDEV_A_DEV_XDP_FEATURES)
        .and_then(|v| Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?)));
    Ok(features)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_padded_and_attributes_read_back() {
        let m = Message::new(RTM_GETLINK)
            .bytes(&ifinfomsg(7))
            .attr(IFLA_IFNAME, b"eth0\0")
            .finish();
        assert_eq!(m.len(), 16 + 16 + 12);
        assert_eq!(u32_of(&m).unwrap() as usize, m.len());
        let got: Vec<(u16, Vec<u8>)> = attrs(&m[32..]).map(|(k, v)| (k, v.to_vec())).collect();
        assert_eq!(got, vec![(IFLA_IFNAME, b"eth0\0".to_vec())]);
        assert_eq!(string_of(&got[0].1), "eth0");
        // A truncated attribute ends the run instead of reading past it.
        assert_eq!(attrs(&[8, 0, 1, 0, 0]).count(), 0);
    }
}
