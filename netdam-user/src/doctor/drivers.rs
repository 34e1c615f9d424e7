//! What netdam knows of NIC drivers without asking the kernel: the MTU at
//! which each runs native XDP in one buffer, and its queue rule. On kernels
//! of 6.3 and later the kernel's own xdp-features answer the rest; the
//! table's feature columns are the fallback for 6.1 and 6.2.

/// The kernel's XDP features of a device (uapi linux/netdev.h,
/// `enum netdev_xdp_act`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpFeatures(pub u64);

impl XdpFeatures {
    /// XDP_ABORTED, XDP_DROP, XDP_PASS and XDP_TX in the driver: native XDP.
    pub const BASIC: u64 = 1;
    pub const REDIRECT: u64 = 2;
    /// ndo_xdp_xmit: a target of XDP_REDIRECT (on veth: XDP_TX works too).
    pub const NDO_XMIT: u64 = 4;
    pub const XSK_ZEROCOPY: u64 = 8;
    pub const HW_OFFLOAD: u64 = 16;
    /// Multi-buffer XDP: frames larger than one buffer.
    pub const RX_SG: u64 = 32;
    pub const NDO_XMIT_SG: u64 = 64;

    const NAMES: [(u64, &'static str); 7] = [
        (Self::BASIC, "basic"),
        (Self::REDIRECT, "redirect"),
        (Self::NDO_XMIT, "ndo-xmit"),
        (Self::XSK_ZEROCOPY, "xsk-zerocopy"),
        (Self::HW_OFFLOAD, "hw-offload"),
        (Self::RX_SG, "rx-sg"),
        (Self::NDO_XMIT_SG, "ndo-xmit-sg"),
    ];

    pub fn has(self, bit: u64) -> bool {
        self.0 & bit != 0
    }

    /// The feature names, as `ynl` and `ip link` print them.
    pub fn names(self) -> String {
        let n: Vec<&str> = Self::NAMES
            .iter()
            .filter(|(b, _)| self.has(*b))
            .map(|(_, n)| *n)
            .collect();
        if n.is_empty() {
            "none".into()
        } else {
            n.join(" ")
        }
    }
}

/// How a driver's queue counts limit XDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueRule {
    /// ENA keeps half of its channels for XDP_TX: XDP attaches only while
    /// the combined channels are at most half of the maximum.
    HalfOfMax,
    /// virtio_net gives XDP_TX a queue pair per CPU only when the queue
    /// pairs in use plus the CPUs fit in the device's maximum; otherwise
    /// XDP_TX shares the stack's queues under a lock (slower).
    PairPerCpu,
    /// veth runs native XDP only while it has as many receive queues as its
    /// peer has transmit queues.
    PeerTxQueues,
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Driver {
    /// As ETHTOOL_GDRVINFO names it.
    pub name: &'static str,
    /// What people call it.
    pub known_as: &'static str,
    /// Largest MTU of native XDP in one buffer; `None`: page-size based (veth).
    pub mtu_limit: Option<u32>,
    /// Multi-buffer XDP on 6.1 and 6.2 (later kernels say it themselves).
    pub multi_buffer: bool,
    pub zero_copy: bool,
    pub queues: QueueRule,
}

/// The drivers of the clouds and NICs netdam is deployed on, and veth.
pub const DRIVERS: [Driver; 7] = [
    Driver {
        name: "ena",
        known_as: "AWS ENA",
        mtu_limit: Some(3498),
        multi_buffer: false,
        zero_copy: false,
        queues: QueueRule::HalfOfMax,
    },
    Driver {
        name: "mlx5_core",
        known_as: "Mellanox ConnectX (mlx5)",
        mtu_limit: Some(3498),
        multi_buffer: false,
        zero_copy: true,
        queues: QueueRule::None,
    },
    Driver {
        name: "virtio_net",
        known_as: "virtio-net",
        mtu_limit: Some(3506),
        multi_buffer: false,
        zero_copy: false,
        queues: QueueRule::PairPerCpu,
    },
    Driver {
        name: "gve",
        known_as: "Google gVNIC",
        mtu_limit: Some(2032),
        multi_buffer: false,
        zero_copy: true,
        queues: QueueRule::None,
    },
    Driver {
        name: "i40e",
        known_as: "Intel X710 (i40e)",
        mtu_limit: Some(3046),
        multi_buffer: false,
        zero_copy: true,
        queues: QueueRule::None,
    },
    Driver {
        name: "ice",
        known_as: "Intel E810 (ice)",
        mtu_limit: Some(3046),
        multi_buffer: false,
        zero_copy: true,
        queues: QueueRule::None,
    },
    Driver {
        name: "veth",
        known_as: "veth",
        mtu_limit: None,
        multi_buffer: true,
        zero_copy: false,
        queues: QueueRule::PeerTxQueues,
    },
];

pub fn lookup(name: &str) -> Option<&'static Driver> {
    DRIVERS.iter().find(|d| d.name == name)
}

impl Driver {
    /// The features the table vouches for, as the kernel would report them.
    pub fn features(&self) -> XdpFeatures {
        let mut f = XdpFeatures::BASIC | XdpFeatures::REDIRECT | XdpFeatures::NDO_XMIT;
        if self.multi_buffer {
            f |= XdpFeatures::RX_SG;
        }
        if self.zero_copy {
            f |= XdpFeatures::XSK_ZEROCOPY;
        }
        XdpFeatures(f)
    }

    /// The single-buffer MTU limit on a kernel with `page_size` pages.
    pub fn mtu_limit(&self, page_size: u32) -> u32 {
        // veth: a page less XDP headroom (256), the aligned skb_shared_info
        // (320 on 64-bit) and the Ethernet header (14).
        self.mtu_limit.unwrap_or(page_size.saturating_sub(256 + 320 + 14))
    }
}

/// The verdict of a rule: ok, or what is wrong and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Ok(String),
    Warn { found: String, fix: String },
    Fail { found: String, fix: String },
}

/// The MTU against the driver's single-buffer limit; multi-buffer XDP
/// (netdam's programs are frags-aware) lifts it.
pub fn mtu_rule(iface: &str, mtu: u32, limit: u32, driver: &str, multi_buffer: bool) -> Verdict {
    if mtu <= limit {
        Verdict::Ok(format!("{mtu}, within {driver}'s single-buffer XDP limit of {limit}"))
    } else if multi_buffer {
        Verdict::Ok(format!(
            "{mtu}, above {driver}'s single-buffer XDP limit of {limit}: multi-buffer XDP carries larger frames"
        ))
    } else {
        Verdict::Fail {
            found: format!("{mtu} is above {limit}, the largest MTU {driver} runs native XDP at"),
            fix: format!("ip link set dev {iface} mtu {limit}"),
        }
    }
}

/// Channel counts of ETHTOOL_GCHANNELS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Channels {
    pub max_rx: u32,
    pub max_tx: u32,
    pub max_combined: u32,
    pub rx: u32,
    pub tx: u32,
    pub combined: u32,
}

/// ENA: at most half the maximum combined channels.
pub fn ena_queue_rule(iface: &str, ch: Channels) -> Verdict {
    let half = ch.max_combined / 2;
    if ch.combined <= half {
        Verdict::Ok(format!(
            "{} combined channels of {}: at most half, so ENA has its XDP_TX queues",
            ch.combined, ch.max_combined
        ))
    } else {
        Verdict::Fail {
            found: format!(
                "{} combined channels of {}: ENA runs XDP only with at most half ({half}), the other half being its XDP_TX queues",
                ch.combined, ch.max_combined
            ),
            fix: format!("ethtool -L {iface} combined {half}"),
        }
    }
}

/// virtio_net: the queue pairs in use plus one per CPU within the maximum.
pub fn virtio_queue_rule(iface: &str, ch: Channels, cpus: u32) -> Verdict {
    if ch.combined + cpus <= ch.max_combined {
        return Verdict::Ok(format!(
            "{} queue pairs in use of {}, {cpus} CPUs: XDP_TX gets a queue of its own on every CPU",
            ch.combined, ch.max_combined
        ));
    }
    let found = format!(
        "{} queue pairs in use of {}, {cpus} CPUs: virtio_net needs in-use + CPUs <= maximum for XDP_TX queues of \
         its own, so XDP_TX shares the stack's queues under a lock (slower)",
        ch.combined, ch.max_combined
    );
    let fix = if ch.max_combined > cpus {
        format!("ethtool -L {iface} combined {}", ch.max_combined - cpus)
    } else {
        format!(
            "give the VM at least {} queue pairs (2 per vCPU; qemu: -netdev tap,queues={},... -device virtio-net-pci,mq=on,vectors={})",
            2 * cpus,
            2 * cpus,
            4 * cpus + 2
        )
    };
    Verdict::Warn { found, fix }
}

/// veth: receive queues at least the peer's transmit queues.
/// `place` says where the peer is (" (namespace NS)"), `in_ns` how to run
/// a command there ("ip netns exec NS ").
pub fn veth_queue_rule(rx: u32, peer: &str, place: &str, peer_tx: u32, in_ns: &str) -> Verdict {
    if rx >= peer_tx {
        Verdict::Ok(format!(
            "{rx} receive queue(s), its peer {peer}{place} transmits on {peer_tx}: veth runs native XDP"
        ))
    } else {
        Verdict::Fail {
            found: format!(
                "{rx} receive queue(s), but its peer {peer}{place} transmits on {peer_tx}: veth runs native XDP only with \
                 at least as many receive queues as the peer has transmit queues"
            ),
            fix: format!("{in_ns}ethtool -L {peer} tx {rx}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_s_limits_are_in_the_table() {
        let limit = |n: &str| lookup(n).unwrap().mtu_limit(4096);
        assert_eq!(limit("ena"), 3498);
        assert_eq!(limit("mlx5_core"), 3498);
        assert_eq!(limit("virtio_net"), 3506);
        assert_eq!(limit("gve"), 2032);
        assert_eq!(limit("i40e"), 3046);
        assert_eq!(limit("ice"), 3046);
        // veth: PAGE_SIZE based.
        assert_eq!(limit("veth"), 3506);
        assert_eq!(lookup("veth").unwrap().mtu_limit(16384), 15794);
        assert!(lookup("e1000").is_none());
    }

    #[test]
    fn table_features_read_as_the_kernel_s() {
        assert_eq!(lookup("ena").unwrap().features().names(), "basic redirect ndo-xmit");
        assert_eq!(
            lookup("gve").unwrap().features().names(),
            "basic redirect ndo-xmit xsk-zerocopy"
        );
        assert_eq!(XdpFeatures(0).names(), "none");
        assert_eq!(XdpFeatures(0x27).names(), "basic redirect ndo-xmit rx-sg");
    }

    #[test]
    fn mtu_above_the_limit_fails_unless_multi_buffer() {
        assert_eq!(
            mtu_rule("eth0", 3498, 3498, "ena", false),
            Verdict::Ok("3498, within ena's single-buffer XDP limit of 3498".into())
        );
        assert_eq!(
            mtu_rule("eth0", 9001, 3498, "ena", false),
            Verdict::Fail {
                found: "9001 is above 3498, the largest MTU ena runs native XDP at".into(),
                fix: "ip link set dev eth0 mtu 3498".into()
            }
        );
        assert!(matches!(mtu_rule("eth0", 9000, 3046, "ice", true), Verdict::Ok(s) if s.contains("multi-buffer")));
    }

    #[test]
    fn ena_needs_half_its_channels_free() {
        let ch = |combined| Channels {
            max_combined: 32,
            combined,
            ..Channels::default()
        };
        assert!(matches!(ena_queue_rule("eth0", ch(16)), Verdict::Ok(_)));
        assert_eq!(
            ena_queue_rule("eth0", ch(17)),
            Verdict::Fail {
                found: "17 combined channels of 32: ENA runs XDP only with at most half (16), the other half being \
                        its XDP_TX queues"
                    .into(),
                fix: "ethtool -L eth0 combined 16".into()
            }
        );
    }

    #[test]
    fn virtio_wants_a_queue_pair_per_cpu_spare() {
        let ch = |combined, max_combined| Channels {
            max_combined,
            combined,
            ..Channels::default()
        };
        assert!(matches!(virtio_queue_rule("eth0", ch(4, 8), 4), Verdict::Ok(_)));
        match virtio_queue_rule("eth0", ch(8, 8), 4) {
            Verdict::Warn { fix, .. } => assert_eq!(fix, "ethtool -L eth0 combined 4"),
            v => panic!("{v:?}"),
        }
        match virtio_queue_rule("eth0", ch(1, 1), 2) {
            Verdict::Warn { found, fix } => {
                assert!(found.starts_with("1 queue pairs in use of 1, 2 CPUs"), "{found}");
                assert!(fix.starts_with("give the VM at least 4 queue pairs"), "{fix}");
            }
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn veth_wants_the_peer_s_tx_queues() {
        assert!(matches!(veth_queue_rule(2, "p0", "", 2, ""), Verdict::Ok(_)));
        match veth_queue_rule(1, "p0", " (namespace sw)", 4, "ip netns exec sw ") {
            Verdict::Fail { fix, .. } => assert_eq!(fix, "ip netns exec sw ethtool -L p0 tx 1"),
            v => panic!("{v:?}"),
        }
    }
}
