//! The host's receive API: a socket per receive queue of the node's
//! interface, frames handed out in place and given back on drop, NetDAM
//! memory read in place.

use std::{
    net::{Ipv4Addr, SocketAddrV4},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
    time::Duration,
};

use aya::maps::{Map, MapData, XskMap};
use netdam_common::{
    split::Descriptor,
    wire::{flags, HDR_LEN, MAGIC},
    NetdamHdr, Opcode, Status,
};

use super::{socket::XskSocket, Backing, XskError, XskStats};
use crate::controller::{queues::rx_queues, LocalNode, NetdamMemory, MAP_XSKS};

/// How the endpoint sizes its sockets.
#[derive(Clone, Copy, Debug)]
pub struct EndpointConfig {
    /// UMEM frames (and RX and fill ring entries) per socket: a power of two, 64..=65536.
    pub frames: u32,
    /// Most descriptors one `recv` takes from one socket.
    pub batch: u32,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            frames: 4096,
            batch: 64,
        }
    }
}

/// The AF_XDP side of a node served on this host by `netdam serve`.
pub struct Endpoint {
    node: LocalNode,
    sockets: Vec<XskSocket>,
    xsks: XskMap<MapData>,
    /// Sends MSG acknowledgements (section 3: a MSG with ACK_REQ is answered
    /// once it is delivered; the data path cannot both hand over and answer).
    acks: OwnedFd,
    batch: u32,
    taken: Vec<Vec<libc::xdp_desc>>,
}

impl Endpoint {
    /// Binds a socket to every receive queue of the node pinned in `pin_dir`
    /// (in the calling thread's network namespace) and enters them in the
    /// node's socket map: from then on MSG, WRITE_NOTIFY and header split
    /// deliver here. Leaving (drop) removes them again.
    pub fn open(pin_dir: &Path, cfg: EndpointConfig) -> Result<Endpoint, XskError> {
        let node = LocalNode::open(pin_dir)?;
        let ifindex = node.interface_index()?;
        let name = nix::net::if_::if_indextoname(ifindex)
            .map_err(|e| XskError::Sys {
                what: format!("the name of interface index {ifindex}"),
                source: e.into(),
            })?
            .to_string_lossy()
            .into_owned();
        let path = pin_dir.join(MAP_XSKS);
        if !path.exists() {
            return Err(XskError::NoSocketMap {
                dir: pin_dir.to_path_buf(),
                map: MAP_XSKS,
            });
        }
        let mut xsks = XskMap::try_from(Map::XskMap(MapData::from_pin(&path)?))?;
        let queues = rx_queues(&name)?.current;
        if queues > xsks.len() {
            // The interface gained queues (`ethtool -L`) past what the node was loaded for.
            return Err(XskError::QueuesPastMap {
                iface: name,
                queues,
                slots: xsks.len(),
            });
        }
        let mut sockets = Vec::new();
        for q in 0..queues {
            let s = XskSocket::bind(ifindex, q, cfg.frames)?;
            xsks.set(q, s.fd(), 0)?;
            sockets.push(s);
        }
        // SAFETY: plain socket(2); IPPROTO_RAW sockets send only, with the IPv4 header given.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::IPPROTO_RAW) };
        if raw < 0 {
            return Err(XskError::last("a raw IPv4 socket for MSG acknowledgements"));
        }
        log::info!(
            "AF_XDP on {name}: {queues} queue(s), {} frames each, UMEM on {}, {} mode",
            cfg.frames,
            sockets[0].backing(),
            if sockets[0].zero_copy() { "zero-copy" } else { "copy" }
        );
        Ok(Endpoint {
            node,
            taken: vec![Vec::new(); sockets.len()],
            sockets,
            xsks,
            // SAFETY: a new descriptor that nothing else owns.
            acks: unsafe { OwnedFd::from_raw_fd(raw) },
            batch: cfg.batch,
        })
    }

    /// NetDAM memory, e.g. to read what WRITE_NOTIFY placed or the rest of a split datagram.
    pub fn memory(&self) -> &NetdamMemory {
        self.node.memory()
    }

    pub fn backing(&self) -> Backing {
        self.sockets[0].backing()
    }

    pub fn queues(&self) -> usize {
        self.sockets.len()
    }

    /// The kernel's drop counters, summed over the sockets.
    pub fn stats(&self) -> Result<XskStats, XskError> {
        let mut sum = XskStats::default();
        for s in &self.sockets {
            sum += s.stats()?;
        }
        Ok(sum)
    }

    /// Waits up to `timeout` for frames and returns those that arrived (at
    /// most `batch` per queue; empty on timeout). They stay in UMEM, in
    /// place, until the `Received` is dropped.
    pub fn recv(&mut self, timeout: Duration) -> Result<Received<'_>, XskError> {
        let mut got = self.take();
        if got == 0 && !timeout.is_zero() {
            let mut fds: Vec<libc::pollfd> = self
                .sockets
                .iter()
                .map(|s| libc::pollfd {
                    fd: s.fd().as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: a live array of pollfd of the length given.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return Err(XskError::last("poll on the AF_XDP sockets"));
            }
            got = self.take();
        }
        let received = Received { endpoint: self };
        if got > 0 {
            received.acknowledge();
        }
        Ok(received)
    }

    /// Like `recv`, but the frames stay the caller's until `release`: for an
    /// application that holds frames across receives (a frame held is a frame
    /// the kernel cannot fill; hold them all and the fill ring runs dry).
    pub fn recv_held(&mut self, timeout: Duration, out: &mut Vec<HeldFrame>) -> Result<usize, XskError> {
        let r = self.recv(timeout)?;
        let n = r.len();
        r.endpoint.hold_taken(out);
        Ok(n)
    }

    /// The bytes of a held frame, in place.
    pub fn frame(&self, f: &HeldFrame) -> &[u8] {
        self.sockets[f.queue].frame(&f.desc)
    }

    /// A held frame, recognised.
    pub fn delivery(&self, f: &HeldFrame) -> Delivery<'_> {
        classify(self.frame(f), self.port())
    }

    /// Gives held frames back to the kernel.
    pub fn release(&mut self, frames: impl IntoIterator<Item = HeldFrame>) {
        for f in frames {
            self.taken[f.queue].push(f.desc);
        }
        self.give_back();
    }

    fn hold_taken(&mut self, out: &mut Vec<HeldFrame>) {
        for (queue, t) in self.taken.iter_mut().enumerate() {
            out.extend(t.drain(..).map(|desc| HeldFrame { queue, desc }));
        }
    }

    fn give_back(&mut self) {
        for (s, t) in self.sockets.iter_mut().zip(self.taken.iter_mut()) {
            if !t.is_empty() {
                s.give_back(t);
                t.clear();
            }
        }
    }

    fn take(&mut self) -> u32 {
        let mut n = 0;
        for (s, t) in self.sockets.iter_mut().zip(self.taken.iter_mut()) {
            n += s.take(self.batch, t);
        }
        n
    }

    fn port(&self) -> u16 {
        self.node.config.port
    }

    /// Answers a delivered MSG that asked for it: OK, no payload.
    fn ack(&self, ipv4: &[u8], hdr: &NetdamHdr) {
        let ihl = (ipv4[0] & 0x0F) as usize * 4;
        let mut resp = *hdr;
        resp.make_response(Status::Ok, 0);
        let mut p = Vec::with_capacity(20 + 8 + HDR_LEN);
        // IPv4 without options; the kernel fills total length, ID and checksum.
        p.extend_from_slice(&[0x45, ipv4[1], 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
        p.extend_from_slice(&ipv4[16..20]);
        p.extend_from_slice(&ipv4[12..16]);
        p.extend_from_slice(&ipv4[ihl + 2..ihl + 4]);
        p.extend_from_slice(&ipv4[ihl..ihl + 2]);
        p.extend_from_slice(&((8 + HDR_LEN) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(&resp.to_bytes());
        let dst = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(ipv4[12..16].try_into().expect("4 bytes")),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: a live buffer and sockaddr_in of the sizes given.
        let r = unsafe {
            libc::sendto(
                self.acks.as_raw_fd(),
                p.as_ptr().cast(),
                p.len(),
                0,
                (&dst as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if r < 0 {
            log::warn!("MSG acknowledgement: {}", std::io::Error::last_os_error());
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        for s in &self.sockets {
            // The kernel also removes a closed socket from the map; this says so at once.
            let _ = self.xsks.unset(s.queue());
        }
    }
}

/// Frames handed over by one `recv`, in UMEM; given back to the kernel on drop.
pub struct Received<'a> {
    endpoint: &'a mut Endpoint,
}

/// One delivered frame, viewed in place.
#[derive(Debug)]
pub enum Delivery<'a> {
    /// MSG (section 3): the NetDAM header and the message bytes.
    Message {
        from: SocketAddrV4,
        hdr: NetdamHdr,
        body: &'a [u8],
        /// The frame as delivered, from its IPv4 header on.
        ipv4: &'a [u8],
    },
    /// WRITE_NOTIFY (section 3): `hdr.addr()` and `hdr.len()` say where the
    /// payload went in NetDAM memory; the host never received it.
    Notify { from: SocketAddrV4, hdr: NetdamHdr },
    /// Header split (section 9): the kept payload bytes and the descriptor
    /// of the rest, which is in NetDAM memory.
    Split {
        from: SocketAddrV4,
        to_port: u16,
        kept: &'a [u8],
        descriptor: Descriptor,
        /// The frame as delivered, from its Ethernet header on.
        frame: &'a [u8],
    },
    /// A frame this API does not recognise (it counts as delivered anyway).
    Other(&'a [u8]),
}

/// (source, destination port, UDP payload) of the IPv4 datagram at the start of `f`.
fn udp_in(f: &[u8]) -> Option<(SocketAddrV4, u16, &[u8])> {
    if f.len() < 20 || f[0] >> 4 != 4 || f[9] != 17 {
        return None;
    }
    let ihl = (f[0] & 0x0F) as usize * 4;
    let udp = f.get(ihl..ihl + 8)?;
    let udp_len = u16::from_be_bytes([udp[4], udp[5]]) as usize;
    let src = Ipv4Addr::new(f[12], f[13], f[14], f[15]);
    let payload = f.get(ihl + 8..(ihl + udp_len).min(f.len()))?;
    Some((
        SocketAddrV4::new(src, u16::from_be_bytes([udp[0], udp[1]])),
        u16::from_be_bytes([udp[2], udp[3]]),
        payload,
    ))
}

/// What a delivered frame is. MSG and WRITE_NOTIFY frames begin with IPv4
/// and go to port P; split frames keep their Ethernet header.
fn classify(f: &[u8], port: u16) -> Delivery<'_> {
    if let Some((from, to, payload)) = udp_in(f) {
        if to == port {
            if let Some(hdr) = NetdamHdr::from_bytes(payload).filter(|h| h.magic == MAGIC) {
                if hdr.opcode == Opcode::Msg as u8 {
                    let body = &payload[HDR_LEN..(HDR_LEN + hdr.len() as usize).min(payload.len())];
                    return Delivery::Message {
                        from,
                        hdr,
                        body,
                        ipv4: f,
                    };
                }
                if hdr.opcode == Opcode::WriteNotify as u8 {
                    return Delivery::Notify { from, hdr };
                }
            }
        }
    }
    if f.len() > 14 && f[12..14] == [0x08, 0x00] {
        if let Some((from, to_port, payload)) = udp_in(&f[14..]) {
            if let Some(descriptor) = Descriptor::from_payload_end(payload) {
                return Delivery::Split {
                    from,
                    to_port,
                    kept: &payload[..payload.len() - netdam_common::split::DESCRIPTOR_LEN],
                    descriptor,
                    frame: f,
                };
            }
        }
    }
    Delivery::Other(f)
}

impl Received<'_> {
    pub fn len(&self) -> usize {
        self.endpoint.taken.iter().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// NetDAM memory, where WRITE_NOTIFY payloads and split rests are.
    pub fn memory(&self) -> &NetdamMemory {
        self.endpoint.memory()
    }

    /// How many of the frames came on each receive queue (index: queue).
    pub fn per_queue(&self) -> Vec<usize> {
        self.endpoint.taken.iter().map(Vec::len).collect()
    }

    /// The frames as they lie in UMEM.
    pub fn frames(&self) -> impl Iterator<Item = &[u8]> {
        let e = &*self.endpoint;
        e.sockets
            .iter()
            .zip(&e.taken)
            .flat_map(|(s, t)| t.iter().map(move |d| s.frame(d)))
    }

    /// The frames, recognised.
    pub fn iter(&self) -> impl Iterator<Item = Delivery<'_>> {
        let port = self.endpoint.port();
        self.frames().map(move |f| classify(f, port))
    }

    fn acknowledge(&self) {
        for d in self.iter() {
            if let Delivery::Message { hdr, ipv4, .. } = d {
                if hdr.flags & flags::ACK_REQ != 0 {
                    self.endpoint.ack(ipv4, &hdr);
                }
            }
        }
    }
}

impl Drop for Received<'_> {
    fn drop(&mut self) {
        self.endpoint.give_back();
    }
}

/// A received frame the application keeps past its `recv` (`Endpoint::recv_held`).
#[derive(Debug)]
pub struct HeldFrame {
    queue: usize,
    desc: libc::xdp_desc,
}

impl HeldFrame {
    /// Bytes of the frame.
    pub fn len(&self) -> usize {
        self.desc.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.desc.len == 0
    }
}

#[cfg(test)]
mod tests {
    use netdam_common::{
        frame::{netdam_frame, udp_frame, Endpoint as Host, Ipv4Opts},
        split::Descriptor,
        NetdamHdr, Opcode,
    };

    use super::*;

    fn hosts() -> (Host, Host) {
        (
            Host {
                mac: [2, 0, 0, 0, 0, 2],
                ip: Ipv4Addr::new(10, 0, 0, 2),
                port: 5000,
            },
            Host {
                mac: [2, 0, 0, 0, 0, 1],
                ip: Ipv4Addr::new(10, 0, 0, 1),
                port: 4793,
            },
        )
    }

    #[test]
    fn frames_are_recognised_by_what_the_data_path_hands_over() {
        let (client, node) = hosts();
        let mut h = NetdamHdr::request(Opcode::Msg);
        h.set_len(5);
        let msg = netdam_frame(&client, &node, &h, b"hello");
        match classify(&msg[14..], 4793) {
            Delivery::Message { from, body, .. } => {
                assert_eq!(from, SocketAddrV4::new(client.ip, 5000));
                assert_eq!(body, b"hello");
            }
            other => panic!("{other:?}"),
        }
        // The same frame on another port P is not a NetDAM message.
        assert!(matches!(classify(&msg[14..], 4794), Delivery::Other(_)));
        let h = NetdamHdr::request(Opcode::WriteNotify);
        let wn = netdam_frame(&client, &node, &h, &[]);
        assert!(matches!(classify(&wn[14..], 4793), Delivery::Notify { .. }));
        let mut payload = b"kept".to_vec();
        payload.extend_from_slice(
            &Descriptor {
                original_len: 9,
                addr: 64,
            }
            .to_bytes(),
        );
        let to = Host { port: 9000, ..node };
        let split = udp_frame(&client, &to, &Ipv4Opts::default(), &payload);
        match classify(&split, 4793) {
            Delivery::Split {
                to_port,
                kept,
                descriptor,
                ..
            } => {
                assert_eq!((to_port, kept), (9000, b"kept".as_slice()));
                assert_eq!(descriptor.addr, 64);
            }
            other => panic!("{other:?}"),
        }
    }
}
