//! The testbed's XDP switch: what the program on the switch side of every
//! testbed link shares with the host that builds the testbed. It forwards a
//! unicast frame to the port that owns its destination MAC through a devmap
//! (xdp_frames from port to port, no skb); broadcast, multicast and unknown
//! destinations go to the Linux bridge behind it, which floods them.

/// Index 0 of the config map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwitchConfig {
    /// While non-zero, UDP frames to or from this port (NetDAM's P) take
    /// the bridge, where the chaos element sits on every port's egress:
    /// XDP cannot make two frames of one, which duplication and reordering need.
    pub bridge_udp_port: u16,
    pub _pad: [u16; 3],
}

/// Counter slots of the stats map.
pub mod stat {
    /// Redirected to the destination's port by the devmap.
    pub const REDIRECTED: u32 = 0;
    /// Broadcast or multicast: to the bridge, which floods.
    pub const FLOODED: u32 = 1;
    /// Unicast to a MAC no port owns: to the bridge.
    pub const UNKNOWN: u32 = 2;
    /// UDP of the port the config sends to the bridge (chaos on).
    pub const IMPAIRED: u32 = 3;
    pub const SLOTS: u32 = 4;
}

/// The forwarding table's key for a MAC address.
#[inline(always)]
pub fn mac_key(mac: &[u8; 6]) -> u64 {
    let mut b = [0u8; 8];
    b[..6].copy_from_slice(mac);
    u64::from_le_bytes(b)
}

/// Broadcast and multicast addresses have the group bit set.
#[inline(always)]
pub fn is_group(mac: &[u8; 6]) -> bool {
    mac[0] & 1 != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_group_bit() {
        assert_eq!(mac_key(&[1, 2, 3, 4, 5, 6]), 0x0000_0605_0403_0201);
        assert_ne!(mac_key(&[2, 0xDA, 0, 0, 0, 1]), mac_key(&[2, 0xDA, 0, 0, 0, 2]));
        assert!(is_group(&[0xFF; 6]));
        assert!(is_group(&[0x33, 0x33, 0, 0, 0, 1]));
        assert!(!is_group(&[2, 0xDA, 0, 0, 0, 1]));
    }
}
