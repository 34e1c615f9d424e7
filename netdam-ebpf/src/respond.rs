//! Answers built in place (PROTOCOL.md section 3): the request turned
//! around, IPv4 options dropped, trimmed to the response payload.

use aya_ebpf::{
    bindings::xdp_action,
    helpers::generated::{bpf_xdp_adjust_head, bpf_xdp_adjust_tail, bpf_xdp_store_bytes},
    programs::XdpContext,
};
use netdam_common::{
    counters::Event,
    wire::{ipv4_header_checksum, CARRIER_LEN, ETH_P_IPV4, HDR_LEN, IPPROTO_UDP},
    NetdamHdr, Status,
};

use crate::{carrier::Request, Verdict};

const TX_FAILED: Verdict = Verdict::Drop(Event::DropTxFailed);

/// Drops the request's IPv4 options so that the answer's carrier is
/// CARRIER_LEN bytes; afterwards the response payload starts at
/// `payload_offset(req)`.
#[inline(always)]
pub fn turn_around(ctx: &XdpContext, req: &Request) -> Result<(), Verdict> {
    let opt = req.ip_options_len();
    // SAFETY: shrinking the head by the options, which precede the UDP header.
    if opt > 0 && unsafe { bpf_xdp_adjust_head(ctx.ctx, opt as i32) } != 0 {
        return Err(TX_FAILED);
    }
    Ok(())
}

/// Where the response payload starts once the frame is turned around.
#[inline(always)]
pub fn payload_offset(req: &Request) -> u32 {
    (CARRIER_LEN + HDR_LEN) as u32 + req.hdr.sr_len as u32
}

/// Writes the answer's headers, trims what follows its payload and
/// transmits. Call after `turn_around` and after placing the payload.
#[inline(always)]
pub fn finish(ctx: &XdpContext, req: &Request, status: Status, resp_len: u32) -> Result<u32, Verdict> {
    if write_answer(ctx, req, status as u8, resp_len) == 0 {
        Ok(xdp_action::XDP_TX)
    } else {
        Err(TX_FAILED)
    }
}

/// The body of `finish`, not inlined: the header buffers get their own stack
/// frame, off the call chain of the vector callbacks. Returns 0 or -1.
#[inline(never)]
fn write_answer(ctx: &XdpContext, req: &Request, status: u8, resp_len: u32) -> i32 {
    let status = Status::from_u8(status).unwrap_or(Status::Ok);
    let mut hdr = req.hdr;
    hdr.make_response(status, resp_len as u16);
    store_headers(ctx, req, &Addressing::turned_around(req), &mut hdr, resp_len)
}

/// The addresses of a frame the node sends (network order).
#[derive(Clone, Copy)]
pub struct Addressing {
    pub eth_dst: [u8; 6],
    pub eth_src: [u8; 6],
    pub ip_src: [u8; 4],
    pub ip_dst: [u8; 4],
    pub udp_src: [u8; 2],
    pub udp_dst: [u8; 2],
}

impl Addressing {
    /// The request's own addresses swapped: an answer to its sender.
    #[inline(always)]
    pub fn turned_around(req: &Request) -> Self {
        Addressing {
            eth_dst: req.eth.src_addr,
            eth_src: req.eth.dst_addr,
            ip_src: req.ip.dst_addr,
            ip_dst: req.ip.src_addr,
            udp_src: req.udp.dst,
            udp_dst: req.udp.src,
        }
    }
}

/// Trims the frame to its headers and `payload_len` payload bytes and
/// writes the carrier for `to` and the NetDAM header `hdr`. Call after
/// `turn_around` and after placing the payload. Returns 0 or -1.
#[inline(always)]
pub fn store_headers(ctx: &XdpContext, req: &Request, to: &Addressing, hdr: &mut NetdamHdr, payload_len: u32) -> i32 {
    let new_len = payload_offset(req) + payload_len;
    // SAFETY: plain helper calls on this frame; the stores are from stack
    // buffers of exactly the size passed.
    unsafe {
        let cur = aya_ebpf::helpers::generated::bpf_xdp_get_buff_len(ctx.ctx) as u32;
        if cur > new_len && bpf_xdp_adjust_tail(ctx.ctx, -((cur - new_len) as i32)) != 0 {
            return -1;
        }
        let mut carrier = carrier_for(req, to, new_len);
        if bpf_xdp_store_bytes(ctx.ctx, 0, carrier.as_mut_ptr().cast(), CARRIER_LEN as u32) != 0
            || bpf_xdp_store_bytes(
                ctx.ctx,
                CARRIER_LEN as u32,
                (hdr as *mut NetdamHdr).cast(),
                HDR_LEN as u32,
            ) != 0
        {
            return -1;
        }
    }
    0
}

/// An answer without payload: the status alone.
#[inline(always)]
pub fn status_only(ctx: &XdpContext, req: &Request, status: Status) -> Result<u32, Verdict> {
    turn_around(ctx, req)?;
    finish(ctx, req, status, 0)
}

/// Ethernet, IPv4 (IHL 5, TOS copied, ID 0, DF, TTL 64) and UDP (checksum 0)
/// headers addressed by `to`.
#[inline(always)]
fn carrier_for(req: &Request, to: &Addressing, frame_len: u32) -> [u8; CARRIER_LEN] {
    let mut c = [0u8; CARRIER_LEN];
    c[0..6].copy_from_slice(&to.eth_dst);
    c[6..12].copy_from_slice(&to.eth_src);
    c[12..14].copy_from_slice(&ETH_P_IPV4.to_be_bytes());
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[1] = req.ip.tos;
    ip[2..4].copy_from_slice(&((frame_len - 14) as u16).to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = IPPROTO_UDP;
    ip[12..16].copy_from_slice(&to.ip_src);
    ip[16..20].copy_from_slice(&to.ip_dst);
    let csum = ipv4_header_checksum(&ip);
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    c[14..34].copy_from_slice(&ip);
    c[34..36].copy_from_slice(&to.udp_src);
    c[36..38].copy_from_slice(&to.udp_dst);
    c[38..40].copy_from_slice(&((frame_len - 34) as u16).to_be_bytes());
    c
}
