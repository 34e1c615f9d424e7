//! Hand-over to the node's AF_XDP socket (PROTOCOL.md section 3: MSG and
//! WRITE_NOTIFY; section 9: header split). One socket per receive queue,
//! found in NETDAM_XSKS at the frame's queue index.

use aya_ebpf::{
    helpers::generated::{bpf_xdp_adjust_head, bpf_xdp_adjust_tail, bpf_xdp_get_buff_len},
    programs::XdpContext,
};
use netdam_common::{counters::Event, split::UMEM_FRAME_MAX};
use network_types::eth::EthHdr;

use crate::{maps::XSKS, Verdict};

const ETH_LEN: u32 = EthHdr::LEN as u32;

/// Whether the frame's receive queue has a socket (NO_RECEIVER otherwise).
#[inline(always)]
pub fn has_receiver(ctx: &XdpContext) -> bool {
    XSKS.get(ctx.rx_queue_index()).is_some()
}

/// MSG: the frame without its Ethernet header. One larger than a UMEM frame
/// is dropped and counted, never truncated.
#[inline(always)]
pub fn message(ctx: &XdpContext) -> Result<u32, Verdict> {
    if frame_len(ctx) > UMEM_FRAME_MAX + ETH_LEN {
        return Err(Verdict::Drop(Event::DropTooLargeForUmem));
    }
    strip_ethernet(ctx)?;
    redirect(ctx)
}

/// WRITE_NOTIFY: the frame cut to its IPv4, UDP and NetDAM headers (the
/// payload, at `payload_off`, is already in NetDAM memory).
#[inline(always)]
pub fn headers_only(ctx: &XdpContext, payload_off: u32) -> Result<u32, Verdict> {
    let cut = frame_len(ctx) - payload_off;
    // SAFETY: shrinks the frame to the headers, which the parser has read.
    if cut > 0 && unsafe { bpf_xdp_adjust_tail(ctx.ctx, -(cut as i32)) } != 0 {
        return Err(Verdict::Drop(Event::DropTxFailed));
    }
    strip_ethernet(ctx)?;
    redirect(ctx)
}

/// To the socket of the frame's receive queue, as it is.
#[inline(always)]
pub fn redirect(ctx: &XdpContext) -> Result<u32, Verdict> {
    XSKS.redirect(ctx.rx_queue_index(), 0)
        .map_err(|_| Verdict::Drop(Event::DropTxFailed))
}

#[inline(always)]
fn strip_ethernet(ctx: &XdpContext) -> Result<(), Verdict> {
    // SAFETY: moves the start past the Ethernet header the parser has read.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, ETH_LEN as i32) } != 0 {
        return Err(Verdict::Drop(Event::DropTxFailed));
    }
    Ok(())
}

#[inline(always)]
pub fn frame_len(ctx: &XdpContext) -> u32 {
    // SAFETY: a helper that only reads the frame's length.
    unsafe { bpf_xdp_get_buff_len(ctx.ctx) as u32 }
}
