//! The carrier parser (PROTOCOL.md section 1): decides whether a frame is a
//! NetDAM request for this node, and where its parts are.

use aya_ebpf::{helpers::generated::bpf_xdp_load_bytes, programs::XdpContext};
use netdam_common::{
    config::cfg_flags,
    counters::Event,
    validate::len_past_datagram,
    wire::{is_unanswerable_source, ETH_P_IPV4, HDR_LEN, IPPROTO_UDP},
    NetdamHdr, NodeConfig,
};
use network_types::{eth::EthHdr, ip::Ipv4Hdr, udp::UdpHdr};

use crate::{
    maps::{PEERS, SPLIT_PORTS_MAP, SPLIT_RING},
    Verdict,
};

/// What the parser found for the data path to act on.
pub enum Carried {
    /// A NetDAM request, parsed into the caller's `Request`.
    Request,
    /// A datagram to a port the controller split (section 9); its Ethernet
    /// and IPv4 headers are in the caller's `Request`.
    Split(SplitDatagram),
}

/// A whole UDP datagram to this node on a split port.
pub struct SplitDatagram {
    /// The IPv4 total length and header checksum, to update.
    pub ip_tot_len: u16,
    pub ip_check: u16,
    /// Offset of the UDP header in the frame.
    pub l4: u32,
    pub udp_len: u32,
    /// Payload bytes to keep in the frame.
    pub keep: u32,
}

/// A NetDAM request addressed to this node, with its headers copied out.
/// Kept in per-CPU map values (`REQUEST`, `CHAIN_STATE`), not on the stack:
/// the frames along a call chain may hold at most 512 bytes together.
pub struct Request {
    pub eth: EthHdr,
    pub ip: Ipv4Hdr,
    pub udp: UdpHdr,
    pub hdr: NetdamHdr,
    /// Offset of the payload (after the NetDAM and SR headers) in the frame.
    pub payload_off: u32,
    /// Payload bytes the datagram carries after the NetDAM and SR headers.
    pub payload_avail: u32,
}

impl Request {
    /// Bytes of IPv4 options, dropped in every answer.
    #[inline(always)]
    pub fn ip_options_len(&self) -> u32 {
        ((self.ip.vihl & 0x0F) as u32 - 5) * 4
    }
}

/// A stack copy of a wire struct of plain bytes at `off`.
#[inline(always)]
pub fn load<T>(ctx: &XdpContext, off: u32, out: &mut T) -> Result<(), Verdict> {
    // SAFETY: `out` is a live stack object of exactly size_of::<T>() bytes.
    let r = unsafe { bpf_xdp_load_bytes(ctx.ctx, off, (out as *mut T).cast(), core::mem::size_of::<T>() as u32) };
    if r == 0 {
        Ok(())
    } else {
        Err(Verdict::Drop(Event::DropTruncated))
    }
}

/// Copies a header at `off` into `out`; `Pass` if the frame is too short
/// (not ours to judge).
#[inline(always)]
fn load_or_pass<T>(ctx: &XdpContext, off: u32, out: &mut T) -> Result<(), Verdict> {
    load(ctx, off, out).map_err(|_| Verdict::Pass)
}

/// Parses the carrier and the NetDAM header into `req`. `Err(Pass)` for
/// every frame that is neither a NetDAM request to this node nor a datagram
/// to split; `Err(Drop(..))` for the ones section 1 and 5 say to drop and count.
#[inline(always)]
pub fn try_parse(ctx: &XdpContext, cfg: &NodeConfig, frame_len: u32, req: &mut Request) -> Result<Carried, Verdict> {
    load_or_pass(ctx, 0, &mut req.eth)?;
    let eth = &req.eth;
    if eth.ether_type != ETH_P_IPV4.to_be() || eth.dst_addr != cfg.mac {
        return Err(Verdict::Pass);
    }
    load_or_pass(ctx, EthHdr::LEN as u32, &mut req.ip)?;
    let ip = &req.ip;
    let ihl = (ip.vihl & 0x0F) as u32;
    if ip.vihl >> 4 != 4 || ihl < 5 || ip.proto != IPPROTO_UDP {
        return Err(Verdict::Pass);
    }
    if u32::from_ne_bytes(ip.dst_addr) != cfg.ipv4_be {
        return Err(Verdict::Pass);
    }
    let frag = u16::from_be_bytes(ip.frags);
    if frag & 0x1FFF != 0 {
        // Later fragments carry no UDP header.
        return Err(Verdict::Pass);
    }
    let l4 = EthHdr::LEN as u32 + ihl * 4;
    load_or_pass(ctx, l4, &mut req.udp)?;
    let udp = &req.udp;
    let udp_len = u16::from_be_bytes(udp.len) as u32;
    let ip_len = u16::from_be_bytes(ip.tot_len) as u32;
    let whole = udp_len >= UdpHdr::LEN as u32 && l4 + udp_len <= frame_len && udp_len + ihl * 4 <= ip_len;
    let dst_port = u16::from_be_bytes(udp.dst);
    if dst_port != cfg.port {
        // Ordinary UDP pays only an array read while nothing is split: the
        // ring is set up with the first split port (`netdam split`).
        if SPLIT_RING.get(0).is_none_or(|r| r.slots == 0) {
            return Err(Verdict::Pass);
        }
        // SAFETY: a lookup in a hash map of plain values.
        return match unsafe { SPLIT_PORTS_MAP.get(dst_port as u32) } {
            // With a peer table only peers (from their MACs) may fill the
            // ring; a stranger's datagram goes to the kernel whole.
            Some(_) if cfg.flags & cfg_flags::PEERS_ONLY != 0 && !is_bound_peer(ip, &req.eth) => {
                Err(Verdict::PassCounted(Event::PassSplitStranger))
            }
            // Only whole, unfragmented datagrams are split; others pass untouched.
            Some(keep) if whole && frag & 0x2000 == 0 => Ok(Carried::Split(SplitDatagram {
                ip_tot_len: ip_len as u16,
                ip_check: u16::from_be_bytes(ip.check),
                l4,
                udp_len,
                keep: *keep,
            })),
            _ => Err(Verdict::Pass),
        };
    }
    if frag & 0x2000 != 0 {
        return Err(Verdict::Drop(Event::DropFragment));
    }
    if !whole {
        return Err(Verdict::Drop(Event::DropTruncated));
    }
    let src = u32::from_ne_bytes(ip.src_addr);
    if is_unanswerable_source(u32::from_be(src)) {
        return Err(Verdict::Drop(Event::DropBadSource));
    }
    if src == cfg.ipv4_be {
        return Err(Verdict::Drop(Event::DropOwnAddress));
    }
    let peers_only = cfg.flags & cfg_flags::PEERS_ONLY != 0;
    // SAFETY: a lookup in a hash map of plain values.
    let peer = if peers_only { unsafe { PEERS.get(src) } } else { None };
    // A peer's address counts only from the peer's own MAC, for answers too
    // (a spoofed answer must not reach the host's collective).
    if peer.is_some_and(|p| !p.sent(&req.eth.src_addr)) {
        return Err(Verdict::Drop(Event::DropPeerMac));
    }
    // With --verify-csum a zero UDP checksum ("none") is taken only from a
    // peer, whose MAC is checked above: nodes send 0 (section 1,
    // docs/conformance.md 5).
    if cfg.flags & cfg_flags::VERIFY_CSUM != 0
        && ((udp.check == [0, 0] && peer.is_none()) || !crate::checksum::verified(ctx, &req.ip, l4, udp_len, udp.check))
    {
        return Err(Verdict::Drop(Event::DropBadChecksum));
    }
    let nd_len = udp_len - UdpHdr::LEN as u32;
    if nd_len < HDR_LEN as u32 {
        return Err(Verdict::Drop(Event::DropTruncated));
    }
    load(ctx, l4 + UdpHdr::LEN as u32, &mut req.hdr)?;
    let hdr = &req.hdr;
    if hdr.magic != netdam_common::wire::MAGIC {
        return Err(Verdict::Drop(Event::DropBadMagic));
    }
    if hdr.is_response() {
        return Err(Verdict::PassCounted(Event::PassResponse));
    }
    if peers_only && peer.is_none() {
        return Err(Verdict::Drop(Event::DropNotPeer));
    }
    let headers = (HDR_LEN as u32) + hdr.sr_len as u32;
    if headers > nd_len {
        return Err(Verdict::Drop(Event::DropTruncated));
    }
    let payload_avail = nd_len - headers;
    if len_past_datagram(hdr, payload_avail) {
        return Err(Verdict::Drop(Event::DropLenPastDatagram));
    }
    req.payload_off = l4 + UdpHdr::LEN as u32 + headers;
    req.payload_avail = payload_avail;
    Ok(Carried::Request)
}

/// Whether the datagram's IPv4 source is a peer and came from its bound MAC.
#[inline(always)]
fn is_bound_peer(ip: &Ipv4Hdr, eth: &EthHdr) -> bool {
    // SAFETY: a lookup in a hash map of plain values.
    unsafe { PEERS.get(u32::from_ne_bytes(ip.src_addr)) }.is_some_and(|p| p.sent(&eth.src_addr))
}
