//! Chunk requests out through an AF_XDP socket's TX ring: whole frames
//! built on the host (Ethernet to the first hop, IPv4, UDP from the
//! collective's socket, so that answers come back to it), a batch per
//! system call. The other way past one system call per packet beside the
//! injector (`inject.rs`); measured against both in docs/collective.md.

use std::net::{Ipv4Addr, SocketAddrV4};

use netdam_common::frame::{udp_frame, Endpoint, Ipv4Opts};

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
        })
    }

    /// A transmitter of requests from `src` (the collective's socket) to
    /// `dst`, whose UDP payloads `build(i, seq, buf)` appends.
    pub fn to<B>(&mut self, src: u16, dst: SocketAddrV4, build: B) -> Result<FrameTx<'_, B>, CollectiveError>
    where
        B: FnMut(usize, u32, &mut Vec<u8>),
    {
        let mac = neighbours::mac_of(&self.iface, self.ip, *dst.ip(), std::time::Duration::from_secs(1)).ok_or_else(
            || {
                CollectiveError::Io(
                    format!("no neighbour entry for {} on {}", dst.ip(), self.iface),
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                )
            },
        )?;
        Ok(FrameTx {
            src: Endpoint {
                mac: self.mac,
                ip: self.ip,
                port: src,
            },
            dst: Endpoint {
                mac,
                ip: *dst.ip(),
                port: dst.port(),
            },
            tx: self,
            build,
            buf: Vec::new(),
        })
    }
}

pub struct FrameTx<'a, B> {
    tx: &'a mut AfXdpTx,
    src: Endpoint,
    dst: Endpoint,
    build: B,
    buf: Vec<u8>,
}

impl<B: FnMut(usize, u32, &mut Vec<u8>)> Transmit for FrameTx<'_, B> {
    fn send(&mut self, i: usize, seq: u32) -> std::io::Result<()> {
        self.buf.clear();
        (self.build)(i, seq, &mut self.buf);
        let frame = udp_frame(&self.src, &self.dst, &Ipv4Opts::default(), &self.buf);
        while !self.tx.xsk.queue_tx(&frame) {
            self.tx.xsk.kick()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.tx.xsk.kick()
    }
}
