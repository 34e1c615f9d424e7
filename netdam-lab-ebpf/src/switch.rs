//! The testbed's XDP switch (`netdam_common::switch`): on the switch side of
//! every link, a unicast frame goes straight to its destination's port
//! through a devmap, as an xdp_frame, so a hop costs the hosts no skb and no
//! bridge; everything else goes to the Linux bridge behind it.

use aya_ebpf::{
    bindings::xdp_action,
    macros::map,
    maps::{Array, DevMapHash, HashMap, PerCpuArray},
    programs::XdpContext,
};
use netdam_common::{
    switch::{is_group, mac_key, stat, SwitchConfig},
    wire::{ETH_P_IPV4, IPPROTO_UDP},
};

/// Destination MAC (`mac_key`) -> ifindex of the switch port that owns it.
#[map(name = "SWITCH_FDB")]
static FDB: HashMap<u64, u32> = HashMap::with_max_entries(256, 0);

/// The switch ports, keyed by their ifindex.
#[map(name = "SWITCH_PORTS")]
static PORTS: DevMapHash = DevMapHash::with_max_entries(256, 0);

#[map(name = "SWITCH_CONFIG")]
static CONFIG: Array<SwitchConfig> = Array::with_max_entries(1, 0);

#[map(name = "SWITCH_STATS")]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::SLOTS, 0);

#[inline(always)]
fn bump(slot: u32) {
    if let Some(c) = STATS.get_ptr_mut(slot) {
        // SAFETY: this CPU's counter.
        unsafe { *c += 1 };
    }
}

/// The N bytes at `off` of the frame's linear part, if it holds them.
#[inline(always)]
fn bytes<const N: usize>(ctx: &XdpContext, off: usize) -> Option<&[u8; N]> {
    let start = ctx.data() + off;
    if start + N > ctx.data_end() {
        return None;
    }
    // SAFETY: checked against data_end just above.
    Some(unsafe { &*(start as *const [u8; N]) })
}

#[inline(always)]
pub fn run(ctx: &XdpContext) -> u32 {
    let Some(dst) = bytes::<6>(ctx, 0) else {
        return xdp_action::XDP_PASS;
    };
    if is_group(dst) {
        bump(stat::FLOODED);
        return xdp_action::XDP_PASS;
    }
    let key = mac_key(dst);
    if let Some(cfg) = CONFIG.get(0) {
        if cfg.bridge_udp_port != 0 && is_udp_of(ctx, cfg.bridge_udp_port) {
            bump(stat::IMPAIRED);
            return xdp_action::XDP_PASS;
        }
    }
    // SAFETY: a plain u32 value, read once.
    let Some(&port) = (unsafe { FDB.get(key) }) else {
        bump(stat::UNKNOWN);
        return xdp_action::XDP_PASS;
    };
    match PORTS.redirect(port, xdp_action::XDP_PASS as u64) {
        Ok(action) => {
            if action == xdp_action::XDP_REDIRECT {
                bump(stat::REDIRECTED);
            }
            action
        }
        Err(action) => action,
    }
}

/// UDP over IPv4 (IHL 5, the testbed's traffic) to or from `port`.
#[inline(always)]
fn is_udp_of(ctx: &XdpContext, port: u16) -> bool {
    let Some(h) = bytes::<38>(ctx, 0) else {
        return false;
    };
    let p = port.to_be_bytes();
    u16::from_be_bytes([h[12], h[13]]) == ETH_P_IPV4
        && h[14] == 0x45
        && h[23] == IPPROTO_UDP
        && (h[34..36] == p || h[36..38] == p)
}
