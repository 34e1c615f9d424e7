//! The lab's programs, kept out of the node's XDP object: the testbed's
//! switch and chaos element, and the benchmarks' drop and transmit
//! programs. A node never loads them.
#![no_std]
#![no_main]

mod chaos;
mod switch;

use aya_ebpf::{
    bindings::xdp_action,
    macros::{classifier, map, xdp},
    maps::PerCpuArray,
    programs::{TcContext, XdpContext},
};

/// Frames `netdam_drop` dropped, per CPU (benchmarks only).
#[map(name = "BENCH_DROPPED")]
static BENCH_DROPPED: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Lets every frame through. The testbed attaches it to the switch side of
/// each veth: veth delivers XDP_TX frames only to a peer that runs XDP.
/// Frags-aware, so that it attaches to a jumbo-MTU testbed too.
#[xdp(frags)]
pub fn netdam_pass(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

/// The testbed's XDP switch on the switch side of each link: unicast frames
/// go port to port through a devmap, the rest to the bridge (`switch.rs`).
#[xdp(frags)]
pub fn netdam_switch(ctx: XdpContext) -> u32 {
    switch::run(&ctx)
}

/// Benchmark ceiling: counts a frame and drops it, the least a node can do
/// with a frame in XDP (`netdam-bench node`).
#[xdp]
pub fn netdam_drop(_ctx: XdpContext) -> u32 {
    if let Some(n) = BENCH_DROPPED.get_ptr_mut(0) {
        // SAFETY: this CPU's counter.
        unsafe { *n += 1 };
    }
    xdp_action::XDP_DROP
}

/// The testbed's chaos element, on the egress of each switch port: drops,
/// duplicates and reorders a configured fraction of NetDAM frames.
#[classifier]
pub fn netdam_chaos(ctx: TcContext) -> i32 {
    chaos::run(&ctx)
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
