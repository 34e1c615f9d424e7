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
    /// Verify the IPv4 header checksum and the UDP checksum, which must not
    /// be zero, of every datagram to port P (`--verify-csum`,
    /// docs/conformance.md 5).
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
    /// BAD_KEY answers per second per source IPv4 address; beyond it a
    /// request that would be answered BAD_KEY is dropped (`bad_key_limited`,
    /// docs/conformance.md 21). 0: unlimited.
    pub bad_key_limit: u32,
    /// Bytes of NetDAM memory.
    pub mem_size: u64,
    /// At-most-once windows one source IPv4 address may hold (its ports and
    /// CHAIN origin ports together); a new source past it is answered STALE
    /// (`window_source_full`, docs/conformance.md 12).
    pub window_per_source: u32,
    pub _reserved: u32,
}

const _: () = assert!(core::mem::size_of::<NodeConfig>() == 40);

/// Entries of the per-source BAD_KEY rate limiter (an LRU table: a source
/// evicted from it starts again with a full bucket).
pub const BAD_KEY_SOURCES: u32 = 4096;

const NS_PER_SEC: u64 = 1_000_000_000;

/// The BAD_KEY token bucket of one source (docs/conformance.md 21). Credit
/// is kept in nanoseconds: it refills at one nanosecond per nanosecond up to
/// one second, and each BAD_KEY answer costs 1 s / limit. So a source gets
/// `limit` answers in a burst and `limit` per second after.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BadKeyBucket {
    pub credit_ns: u64,
    /// When credit was last added (bpf_ktime_get_ns).
    pub last_ns: u64,
}

impl BadKeyBucket {
    /// A new source's bucket: full.
    #[inline(always)]
    pub const fn full(now_ns: u64) -> Self {
        BadKeyBucket {
            credit_ns: NS_PER_SEC,
            last_ns: now_ns,
        }
    }

    /// Whether one more BAD_KEY answer is allowed at `now_ns` under `limit`
    /// answers a second (0: unlimited); takes it if so.
    #[inline(always)]
    pub fn take(&mut self, now_ns: u64, limit: u32) -> bool {
        let Some(cost) = NS_PER_SEC.checked_div(limit as u64) else {
            return true;
        };
        // Another CPU may have stamped a later time meanwhile: time never runs back.
        if now_ns > self.last_ns {
            self.credit_ns = self.credit_at(now_ns);
            self.last_ns = now_ns;
        }
        if self.credit_ns >= cost {
            self.credit_ns -= cost;
            true
        } else {
            false
        }
    }

    /// Whether the bucket is dry at `now_ns` (less than one answer's credit
    /// under `limit`; never with 0, unlimited): its source is locked out,
    /// every request dropped, until it refills. Takes nothing.
    #[inline(always)]
    pub fn dry(&self, now_ns: u64, limit: u32) -> bool {
        match NS_PER_SEC.checked_div(limit as u64) {
            Some(cost) => self.credit_at(now_ns) < cost,
            None => false,
        }
    }

    /// The credit at `now_ns`: refilled since `last_ns`, at most one second's.
    #[inline(always)]
    fn credit_at(&self, now_ns: u64) -> u64 {
        let credit = self.credit_ns.saturating_add(now_ns.saturating_sub(self.last_ns));
        if credit > NS_PER_SEC {
            NS_PER_SEC
        } else {
            credit
        }
    }
}

/// How long after a bucket last ran dry the data path still looks up the
/// source of every request (`dry` at most this long: a bucket refills
/// fully in one second).
pub const BAD_KEY_DRY_WATCH_NS: u64 = NS_PER_SEC;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_key_bucket_allows_a_burst_then_the_rate() {
        let t0 = 5_000_000_000;
        let mut b = BadKeyBucket::full(t0);
        let burst = (0..50).filter(|i| b.take(t0 + i * 1000, 10)).count();
        assert_eq!(burst, 10);
        // 100 ms later: one more.
        let t1 = t0 + 50_000 + NS_PER_SEC / 10;
        assert!(b.take(t1, 10));
        assert!(!b.take(t1, 10));
        // After a long pause the bucket is full again, never fuller.
        let t2 = t1 + 3600 * NS_PER_SEC;
        assert_eq!((0..20).filter(|_| b.take(t2, 10)).count(), 10);
        // A time behind the last one adds nothing.
        assert!(!b.take(t2 - NS_PER_SEC, 10));
        // 0 is unlimited.
        let mut u = BadKeyBucket::default();
        assert!((0..1000).all(|_| u.take(0, 0)));
        // Over a billion a second costs nothing.
        let mut h = BadKeyBucket::default();
        assert!(h.take(0, u32::MAX));
    }

    #[test]
    fn a_dry_bucket_locks_its_source_out_until_one_answer_refills() {
        let t0 = 7_000_000_000;
        let mut b = BadKeyBucket::full(t0);
        assert!(!b.dry(t0, 4));
        while b.take(t0, 4) {}
        assert!(b.dry(t0, 4));
        // A quarter second refills one answer's credit (limit 4).
        assert!(b.dry(t0 + NS_PER_SEC / 4 - 1, 4));
        assert!(!b.dry(t0 + NS_PER_SEC / 4, 4));
        // dry takes nothing; a time before the last one is no refill.
        assert!(!b.dry(t0 + NS_PER_SEC / 4, 4));
        assert!(b.dry(t0 - 1, 4));
        // Unlimited is never dry.
        assert!(!BadKeyBucket::default().dry(0, 0));
    }
}
