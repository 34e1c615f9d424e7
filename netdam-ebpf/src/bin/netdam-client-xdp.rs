//! The AF_XDP client's receive side (docs/client.md, "The AF_XDP client"):
//! attached to the interface of a host whose client transfers through
//! AF_XDP, it hands each transfer's answers to the client's socket on the
//! queue they arrive at, drops frames sent to a transfer's port by anyone
//! but its node, and passes everything else to the kernel untouched.
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::xdp_action,
    macros::{map, xdp},
    maps::{HashMap, PerCpuArray, XskMap},
    programs::XdpContext,
};
use netdam_common::steer::{dst_port, steer, ClientFlow, Steer, FLOW_SLOTS, QUEUE_SLOTS, STEER_LEN};

/// The node of each transfer, by its local UDP port (host order).
#[map(name = "NETDAM_CLIENT_FLOWS")]
static FLOWS: HashMap<u16, ClientFlow> = HashMap::with_max_entries(FLOW_SLOTS, 0);

/// The client's AF_XDP sockets, by receive queue.
#[map(name = "NETDAM_CLIENT_XSKS")]
static XSKS: XskMap = XskMap::with_max_entries(QUEUE_SLOTS, 0);

/// Frames delivered (0), strangers dropped (1), answers passed to the
/// kernel because the queue had no socket (2).
#[map(name = "NETDAM_CLIENT_COUNTS")]
static COUNTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(3, 0);

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
        Steer::Deliver => match XSKS.redirect(ctx.rx_queue_index(), 0) {
            Ok(action) => {
                count(0);
                action
            }
            Err(_) => {
                count(2);
                xdp_action::XDP_PASS
            }
        },
    }
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
