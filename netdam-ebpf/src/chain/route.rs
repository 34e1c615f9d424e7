//! Next hops from the kernel's FIB (PROTOCOL.md section 6): MACs and the
//! egress of a CHAIN packet the node forwards or answers.

use aya_ebpf::{
    bindings::{bpf_fib_lookup as FibParams, BPF_FIB_LKUP_RET_SUCCESS, BPF_FIB_LOOKUP_OUTPUT},
    cty::c_void,
    helpers::generated::bpf_fib_lookup,
    programs::XdpContext,
};
use netdam_common::wire::IPPROTO_UDP;

/// Where a frame goes: its MACs and the egress interface.
#[derive(Clone, Copy, Default)]
pub struct NextHop {
    pub smac: [u8; 6],
    pub dmac: [u8; 6],
    pub ifindex: u32,
}

const AF_INET: u8 = 2;

/// Looks up the route from this node (`src_be`) to `dst_be` out of the
/// interface the frame arrived on, as the host's own output would. Returns
/// 0 and fills `out`, or -1 when there is no route or no neighbour entry.
/// The kernel answers only for an interface with IPv4 forwarding on, which
/// the controller turns on for the interface it serves (docs/conformance.md).
/// Not inlined: the lookup parameters get their own stack frame.
#[inline(never)]
pub fn lookup(ctx: &XdpContext, src_be: u32, dst_be: u32, tot_len: u32, out: &mut NextHop) -> i32 {
    // SAFETY: every field of the parameter block is plain data; all-zero is valid.
    let mut p: FibParams = unsafe { core::mem::zeroed() };
    p.family = AF_INET;
    p.l4_protocol = IPPROTO_UDP;
    p.__bindgen_anon_1.tot_len = tot_len as u16;
    // SAFETY: the XDP context of this frame.
    p.ifindex = unsafe { (*ctx.ctx).ingress_ifindex };
    p.__bindgen_anon_3.ipv4_src = src_be;
    p.__bindgen_anon_4.ipv4_dst = dst_be;
    // OUTPUT: route as a locally sent packet, so that the host need not forward.
    // SAFETY: the helper reads and writes the parameter block of exactly that size.
    let r = unsafe {
        bpf_fib_lookup(
            ctx.ctx.cast::<c_void>(),
            &mut p,
            core::mem::size_of::<FibParams>() as i32,
            BPF_FIB_LOOKUP_OUTPUT,
        )
    };
    if r != BPF_FIB_LKUP_RET_SUCCESS as i64 {
        return -1;
    }
    out.smac = p.smac;
    out.dmac = p.dmac;
    out.ifindex = p.ifindex;
    0
}
