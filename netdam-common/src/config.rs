//! The node's configuration as the controller hands it to the data path.

/// Size of one element of the NetDAM memory map. The memory is one flat
/// mmapable array of these; a request may cross from one into the next.
pub const MEM_CHUNK: usize = 64 * 1024;
/// Largest NetDAM memory of protocol version 1 (section 8).
pub const MEM_MAX: u64 = 2 << 30;
/// Largest request payload the data path copies (a 9000-byte jumbo MTU fits).
pub const MAX_PAYLOAD: usize = 9216;

/// Entries of the region table.
pub const REGION_SLOTS: u32 = 256;
/// Entries of the peer table.
pub const PEER_SLOTS: u32 = 1024;

/// A peer table entry (PROTOCOL.md sections 1 and 6, docs/conformance.md
/// 19): the MAC the peer's frames must come from and the MAC CHAIN packets
/// to it are sent to, kept current by the controller from the neighbour
/// table. All zero while not resolved: the peer is then neither served nor
/// forwarded to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerEntry {
    pub mac: [u8; 6],
    pub _reserved: [u8; 2],
}

impl PeerEntry {
    pub const fn new(mac: [u8; 6]) -> Self {
        PeerEntry { mac, _reserved: [0; 2] }
    }
    /// Whether a MAC is bound (all zero: not resolved yet).
    #[inline(always)]
    pub fn is_resolved(&self) -> bool {
        self.mac != [0; 6]
    }
    /// Whether a frame from `src` may claim to be this peer.
    #[inline(always)]
    pub fn sent(&self, src: &[u8; 6]) -> bool {
        self.is_resolved() && self.mac == *src
    }
}

/// `NodeConfig::flags` bits.
pub mod cfg_flags {
    /// Verify UDP checksums of requests (`--verify-csum`).
    pub const VERIFY_CSUM: u32 = 1 << 0;
    /// The peer table is not empty: only peers are served (section 1).
    pub const PEERS_ONLY: u32 = 1 << 1;
}

/// Index 0 of the config map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeConfig {
    /// The node's MAC address.
    pub mac: [u8; 6],
    /// Port P, host order.
    pub port: u16,
    /// The node's IPv4 address, network order.
    pub ipv4_be: u32,
    /// IP MTU of the interface: no answer may be larger.
    pub mtu: u32,
    pub flags: u32,
    pub _reserved: u32,
    /// Bytes of NetDAM memory.
    pub mem_size: u64,
}
