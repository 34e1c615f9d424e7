//! Header split of ordinary UDP datagrams (PROTOCOL.md section 9) and the
//! AF_XDP hand-over limits shared by the data path and the host.
//!
//! A split datagram keeps the first K payload bytes in the frame, the rest
//! goes to a ring of fixed-size slots in NetDAM memory, and a 16-byte
//! descriptor appended to the kept bytes says where.

/// Bytes of one AF_XDP UMEM frame.
pub const UMEM_FRAME: u32 = 4096;
/// Headroom the kernel leaves in front of every frame it places in UMEM
/// (XDP_PACKET_HEADROOM; the UMEM's own headroom is 0).
pub const UMEM_HEADROOM: u32 = 256;
/// Largest frame the data path hands to an AF_XDP socket. Larger ones are
/// dropped and counted (`Event::DropTooLargeForUmem`), never truncated.
pub const UMEM_FRAME_MAX: u32 = UMEM_FRAME - UMEM_HEADROOM;

/// Descriptor magic, 'NDSP'.
pub const SPLIT_MAGIC: u32 = 0x4E44_5350;
/// Bytes of the descriptor.
pub const DESCRIPTOR_LEN: usize = 16;
/// Ports the controller may split at once.
pub const SPLIT_PORTS: u32 = 64;

/// The descriptor a split datagram ends with (big-endian on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// Payload bytes of the original datagram.
    pub original_len: u32,
    /// NetDAM address of the bytes after the kept ones (0 when there are none).
    pub addr: u64,
}

impl Descriptor {
    pub fn to_bytes(&self) -> [u8; DESCRIPTOR_LEN] {
        let mut b = [0u8; DESCRIPTOR_LEN];
        b[0..4].copy_from_slice(&SPLIT_MAGIC.to_be_bytes());
        b[4..8].copy_from_slice(&self.original_len.to_be_bytes());
        b[8..16].copy_from_slice(&self.addr.to_be_bytes());
        b
    }

    /// The descriptor at the end of a split datagram's payload, if it is one.
    pub fn from_payload_end(payload: &[u8]) -> Option<Descriptor> {
        let at = payload.len().checked_sub(DESCRIPTOR_LEN)?;
        let b = &payload[at..];
        if u32::from_be_bytes(b[0..4].try_into().ok()?) != SPLIT_MAGIC {
            return None;
        }
        Some(Descriptor {
            original_len: u32::from_be_bytes(b[4..8].try_into().ok()?),
            addr: u64::from_be_bytes(b[8..16].try_into().ok()?),
        })
    }
}

/// The ring of NetDAM memory that holds the rest of split datagrams
/// (index 0 of the map NETDAM_SPLIT_RING).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitRing {
    /// NetDAM address of slot 0.
    pub base: u64,
    /// Bytes per slot: at least the largest rest (the MTU's payload).
    pub slot_size: u32,
    /// Slots; 0 = no ring, nothing is split.
    pub slots: u32,
    /// Slots taken so far; the data path adds 1 atomically per split
    /// datagram that has a rest. A slot is reused `slots` datagrams later.
    pub taken: u64,
}

impl SplitRing {
    /// NetDAM address of the slot that the `n`-th split datagram uses
    /// (slot 0 of an empty ring: no panic path, which BPF cannot have).
    #[inline(always)]
    pub fn slot_addr(&self, n: u64) -> u64 {
        self.base + n.checked_rem(self.slots as u64).unwrap_or(0) * self.slot_size as u64
    }
}

/// How a datagram of `payload_len` bytes is split when `keep` are kept:
/// (kept bytes, bytes to the ring).
#[inline(always)]
pub const fn split_sizes(payload_len: u32, keep: u32) -> (u32, u32) {
    let kept = if payload_len < keep { payload_len } else { keep };
    (kept, payload_len - kept)
}

/// The original payload from a split datagram's kept bytes, its descriptor
/// and a reader of NetDAM memory. `None` if the lengths do not add up or the
/// memory cannot be read.
#[cfg(feature = "std")]
pub fn rebuild(
    kept: &[u8],
    d: &Descriptor,
    read_mem: impl FnOnce(u64, usize) -> Option<std::vec::Vec<u8>>,
) -> Option<std::vec::Vec<u8>> {
    let rest = (d.original_len as usize).checked_sub(kept.len())?;
    let mut out = kept.to_vec();
    if rest > 0 {
        out.extend_from_slice(&read_mem(d.addr, rest)?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_round_trips_in_network_order() {
        let d = Descriptor {
            original_len: 0x0102_0304,
            addr: 0x1122_3344_5566_7788,
        };
        let b = d.to_bytes();
        assert_eq!(&b[0..4], b"NDSP");
        assert_eq!(&b[4..8], &[1, 2, 3, 4]);
        let mut payload = b"kept".to_vec();
        payload.extend_from_slice(&b);
        assert_eq!(Descriptor::from_payload_end(&payload), Some(d));
        assert_eq!(Descriptor::from_payload_end(&payload[..15]), None);
        payload[4] ^= 1;
        assert_eq!(Descriptor::from_payload_end(&payload), None);
    }

    #[test]
    fn sizes_keep_at_most_the_payload() {
        assert_eq!(split_sizes(100, 64), (64, 36));
        assert_eq!(split_sizes(10, 64), (10, 0));
        assert_eq!(split_sizes(64, 64), (64, 0));
        assert_eq!(split_sizes(0, 0), (0, 0));
    }

    #[test]
    fn slots_wrap_around_the_ring() {
        let r = SplitRing {
            base: 4096,
            slot_size: 1536,
            slots: 4,
            taken: 0,
        };
        assert_eq!(r.slot_addr(0), 4096);
        assert_eq!(r.slot_addr(3), 4096 + 3 * 1536);
        assert_eq!(r.slot_addr(4), 4096);
    }

    #[test]
    fn rebuild_appends_the_stored_rest() {
        let mem: std::vec::Vec<u8> = (0..=255u8).collect();
        let d = Descriptor {
            original_len: 10,
            addr: 16,
        };
        let got = rebuild(b"head", &d, |a, n| Some(mem[a as usize..a as usize + n].to_vec())).unwrap();
        assert_eq!(got, [b"head".as_slice(), &mem[16..22]].concat());
        // Kept longer than the original: not a valid descriptor.
        let bad = Descriptor {
            original_len: 2,
            addr: 0,
        };
        assert_eq!(rebuild(b"head", &bad, |_, _| None), None);
        // Nothing stored: the kept bytes are the datagram; memory is not read.
        let whole = Descriptor {
            original_len: 4,
            addr: 0,
        };
        assert_eq!(rebuild(b"head", &whole, |_, _| None).unwrap(), b"head");
    }
}
