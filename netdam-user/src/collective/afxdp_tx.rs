//! Chunk requests out through an AF_XDP socket's TX ring: whole frames
//! built on the host (Ethernet to the first hop, IPv4, UDP from the
//! collective's socket, so that answers come back to it), a batch per
//! system call. The other way past one system call per packet beside the
//! injector (`inject.rs`); measured against both in docs/collective.md.

use std::{
    collections::HashMap,
    net::{Ipv4Addr, SocketAddrV4},
};

use netdam_common::{
    frame::{udp_frame, Endpoint, Ipv4Opts},
    wire::ipv4_header_checksum,
};

use super::{exchange::Transmit, CollectiveError};
use crate::{
    afxdp::{Direction, XskSocket},
    controller::{neighbours, LocalNode},
};

/// UMEM frames (and TX ring entries) of the socket.
const FRAMES: u32 = 4096;

pub struct AfXdpTx {
    xsk: XskSocket,
    iface: String,
    mac: [u8; 6],
    ip: Ipv4Addr,
    /// Next-hop MACs already looked up, by address.
    macs: HashMap<Ipv4Addr, [u8; 6]>,
}

impl AfXdpTx {
    /// A TX socket on queue 0 of the node's interface. It cannot share the
    /// queue with an AF_XDP receiver (`afxdp::Endpoint`) of the same node.
    pub fn open(node: &LocalNode) -> Result<AfXdpTx, CollectiveError> {
        let ifindex = node.interface_index()?;
        let iface = nix::net::if_::if_indextoname(ifindex)
            .map_err(|e| CollectiveError::Io(format!("the name of interface {ifindex}"), e.into()))?
            .to_string_lossy()
            .into_owned();
        let xsk = XskSocket::bind_for(ifindex, 0, FRAMES, Direction::Tx)
            .map_err(|e| CollectiveError::Io(format!("an AF_XDP TX socket on {iface}"), std::io::Error::other(e)))?;
        Ok(AfXdpTx {
            xsk,
            iface,
            mac: node.config.mac,
            ip: node.ipv4(),
            macs: HashMap::new(),
        })
    }

    /// A transmitter of requests from `src` (the collective's socket) to
    /// `dst`, whose UDP payloads `build(i, seq, buf)` appends.
    pub fn to<B>(&mut self, src: u16, dst: SocketAddrV4, build: B) -> Result<FrameTx<'_, B>, CollectiveError>
    where
        B: FnMut(usize, u32, &mut Vec<u8>),
    {
        let mac = match self.macs.get(dst.ip()) {
            Some(m) => *m,
            None => {
                let m = neighbours::mac_of(&self.iface, self.ip, *dst.ip(), std::time::Duration::from_secs(1))
                    .ok_or_else(|| {
                        CollectiveError::Io(
                            format!("no neighbour entry for {} on {}", dst.ip(), self.iface),
                            std::io::Error::from(std::io::ErrorKind::NotFound),
                        )
                    })?;
                self.macs.insert(*dst.ip(), m);
                m
            }
        };
        let src = Endpoint {
            mac: self.mac,
            ip: self.ip,
            port: src,
        };
        let dst = Endpoint {
            mac,
            ip: *dst.ip(),
            port: dst.port(),
        };
        Ok(FrameTx {
            // Ethernet, IPv4 and UDP headers; each frame patches in its lengths.
            headers: udp_frame(&src, &dst, &Ipv4Opts::default(), &[]),
            tx: self,
            build,
            frame: Vec::new(),
        })
    }
}

pub struct FrameTx<'a, B> {
    tx: &'a mut AfXdpTx,
    headers: Vec<u8>,
    build: B,
    /// The frame being built, reused from request to request.
    frame: Vec<u8>,
}

/// Ethernet header, IPv4 header without options: where the lengths are.
const IP: usize = 14;
const UDP: usize = IP + 20;

impl<B: FnMut(usize, u32, &mut Vec<u8>)> Transmit for FrameTx<'_, B> {
    fn send(&mut self, i: usize, seq: u32) -> std::io::Result<()> {
        let f = &mut self.frame;
        f.clear();
        f.extend_from_slice(&self.headers);
        (self.build)(i, seq, f);
        // The lengths of this payload, the IPv4 checksum, UDP checksum 0 (as nodes send).
        let len = f.len();
        f[IP + 2..IP + 4].copy_from_slice(&((len - IP) as u16).to_be_bytes());
        f[IP + 10..IP + 12].fill(0);
        let check = ipv4_header_checksum(f[IP..UDP].try_into().expect("20 bytes"));
        f[IP + 10..IP + 12].copy_from_slice(&check.to_be_bytes());
        f[UDP + 4..UDP + 6].copy_from_slice(&((len - UDP) as u16).to_be_bytes());
        f[UDP + 6..UDP + 8].fill(0);
        while !self.tx.xsk.queue_tx(f) {
            self.tx.xsk.kick()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.tx.xsk.kick()
    }
}
