//! The AF_XDP client's receive side (docs/client.md, "The AF_XDP path"):
//! attached to the interface of a host whose client transfers through
//! AF_XDP, it keeps each WRITE's answer as an ack word in the flow's ack
//! slots (memory the client maps) and drops it, hands the transfers' other
//! answers to the flow's socket on the queue they arrive at, drops frames
//! sent to a transfer's port by anyone but its node, and passes everything
//! else to the kernel untouched.
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::xdp_action,
    macros::{map, xdp},
    maps::{Array, HashMap, PerCpuArray, XskMap},
    programs::XdpContext,
};
use netdam_common::{
    steer::{
        ack_index, dst_port, socket_index, steer, write_ack, ClientFlow, Steer, ACK_SLOTS, FLOW_SLOTS, QUEUE_SLOTS,
        STEER_LEN,
    },
    wire::HDR_LEN,
};

/// BPF_F_MMAPABLE: the client maps the ack slots.
const MMAPABLE: u32 = 1 << 10;

/// The node of each transfer, by its local UDP port (host order).
#[map(name = "NETDAM_CLIENT_FLOWS")]
static FLOWS: HashMap<u16, ClientFlow> = HashMap::with_max_entries(FLOW_SLOTS, 0);

/// The client's AF_XDP sockets, by flow and receive queue (`socket_index`).
#[map(name = "NETDAM_CLIENT_XSKS")]
static XSKS: XskMap = XskMap::with_max_entries(FLOW_SLOTS * QUEUE_SLOTS, 0);

/// Each flow's ack words (`steer::write_ack`), ACK_SLOTS a flow.
#[map(name = "NETDAM_CLIENT_ACKS")]
static ACKS: Array<u64> = Array::with_max_entries(FLOW_SLOTS * ACK_SLOTS, MMAPABLE);

/// Frames delivered to a socket (0), strangers dropped (1), answers passed
/// to the kernel because the queue had no socket (2), WRITE answers kept
/// as ack words (3).
#[map(name = "NETDAM_CLIENT_COUNTS")]
static COUNTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(4, 0);

#[xdp]
pub fn netdam_client_rx(ctx: XdpContext) -> u32 {
    let (start, end) = (ctx.data(), ctx.data_end());
    if start + STEER_LEN > end {
        return xdp_action::XDP_PASS;
    }
    // SAFETY: STEER_LEN bytes from `start` lie in the packet (checked above).
    let head: [u8; STEER_LEN] = unsafe { core::ptr::read_unaligned(start as *const [u8; STEER_LEN]) };
    let Some(port) = dst_port(&head) else {
        return xdp_action::XDP_PASS;
    };
    // SAFETY: the value is only read, by this program.
    let flow = unsafe { FLOWS.get(port) };
    match steer(&head, flow) {
        Steer::Pass => xdp_action::XDP_PASS,
        Steer::Stranger => {
            count(1);
            xdp_action::XDP_DROP
        }
        Steer::Deliver => match flow {
            Some(flow) => deliver(&ctx, flow, start, end),
            None => xdp_action::XDP_PASS,
        },
    }
}

/// An answer from the flow's node: a WRITE's kept as an ack word, the rest
/// to the flow's socket on the frame's queue.
#[inline(always)]
fn deliver(ctx: &XdpContext, flow: &ClientFlow, start: usize, end: usize) -> u32 {
    if let Some((seq, word)) = kept_ack(start, end) {
        if let Some(slot) = ACKS.get_ptr_mut(ack_index(flow.slot, seq)) {
            // SAFETY: an aligned u64 of the map; the client reads it whole.
            unsafe { core::ptr::write_volatile(slot, word) };
            count(3);
            return xdp_action::XDP_DROP;
        }
    }
    match XSKS.redirect(socket_index(flow.slot, ctx.rx_queue_index()), 0) {
        Ok(action) => {
            count(0);
            action
        }
        Err(_) => {
            count(2);
            xdp_action::XDP_PASS
        }
    }
}

/// The ack word of the frame's answer when it is a WRITE's.
#[inline(always)]
fn kept_ack(start: usize, end: usize) -> Option<(u32, u64)> {
    if start + STEER_LEN + HDR_LEN > end {
        return None;
    }
    // SAFETY: HDR_LEN bytes after the headers lie in the packet (checked above).
    let hdr: [u8; HDR_LEN] = unsafe { core::ptr::read_unaligned((start + STEER_LEN) as *const [u8; HDR_LEN]) };
    write_ack(&hdr)
}

#[inline(always)]
fn count(slot: u32) {
    if let Some(c) = COUNTS.get_ptr_mut(slot) {
        // SAFETY: this CPU's slot.
        unsafe { *c += 1 };
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
