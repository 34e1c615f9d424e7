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
    /// The NetDAM address of the rest.
    pub fn rest_addr(&self) -> u64 {
        self.addr & 0xFFFF_FFFF
    }

    /// The generation the rest's slot must hold, if the ring has them
    /// (`ring_flags::GENERATIONS`).
    pub fn generation(&self) -> Option<u32> {
        match (self.addr >> 32) as u32 {
            0 => None,
            g => Some(g),
        }
    }

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

/// `SplitRing::flags` bits.
pub mod ring_flags {
    /// Each slot begins with an 8-byte stamp (`STAMP_LEN`) that holds the
    /// generation of the datagram whose rest follows it, and the
    /// descriptor's address carries that generation in its upper 32 bits
    /// (`Descriptor::generation`): a reader that comes late detects that
    /// its slot was overwritten (docs/conformance.md 22, a proposed
    /// extension of PROTOCOL.md section 9; off by default).
    pub const GENERATIONS: u32 = 1 << 0;
}

/// Bytes of the stamp in front of each slot's rest when the ring has
/// generations: a little-endian u64, 0 while the slot is being written,
/// else the generation of the rest after it.
pub const STAMP_LEN: u32 = 8;

/// The ring of NetDAM memory that holds the rest of split datagrams
/// (index 0 of the map NETDAM_SPLIT_RING).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitRing {
    /// NetDAM address of slot 0 (8-aligned).
    pub base: u64,
    /// Bytes per slot: at least the largest rest (the MTU's payload), and
    /// the stamp with generations.
    pub slot_size: u32,
    /// Slots; 0 = no ring, nothing is split.
    pub slots: u32,
    /// Slots taken so far; the data path adds 1 atomically per split
    /// datagram that has a rest. A slot is reused `slots` datagrams later.
    pub taken: u64,
    /// `ring_flags`.
    pub flags: u32,
    pub _reserved: u32,
}

impl SplitRing {
    /// NetDAM address of the slot that the `n`-th split datagram uses
    /// (slot 0 of an empty ring: no panic path, which BPF cannot have).
    #[inline(always)]
    pub fn slot_addr(&self, n: u64) -> u64 {
        self.base + n.checked_rem(self.slots as u64).unwrap_or(0) * self.slot_size as u64
    }

    /// Bytes in front of the rest in each slot.
    #[inline(always)]
    pub fn stamp_len(&self) -> u32 {
        match self.flags & ring_flags::GENERATIONS {
            0 => 0,
            _ => STAMP_LEN,
        }
    }

    /// Whether a rest of `rest` bytes fits one slot.
    #[inline(always)]
    pub fn holds(&self, rest: u32) -> bool {
        self.slots > 0 && rest <= self.slot_size.saturating_sub(self.stamp_len())
    }

    /// The NetDAM range [start, end) the ring covers.
    pub fn range(&self) -> (u64, u64) {
        (self.base, self.base + self.slots as u64 * self.slot_size as u64)
    }
}

/// The generation of the `n`-th split datagram: never 0 (0 marks a slot
/// being written, and an address without generation).
#[inline(always)]
pub fn generation(n: u64) -> u32 {
    (n % 0xFFFF_FFFF) as u32 + 1
}

/// The descriptor's address of a rest stored at `rest_addr` (below 2^32:
/// NetDAM memory is at most 2 GiB) by the datagram of `generation`.
#[inline(always)]
pub fn stamped_addr(rest_addr: u64, generation: u32) -> u64 {
    ((generation as u64) << 32) | rest_addr
}

/// How a datagram of `payload_len` bytes is split when `keep` are kept:
/// (kept bytes, bytes to the ring).
#[inline(always)]
pub const fn split_sizes(payload_len: u32, keep: u32) -> (u32, u32) {
    let kept = if payload_len < keep { payload_len } else { keep };
    (kept, payload_len - kept)
}

/// Why a split datagram could not be rebuilt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RebuildError {
    /// The kept bytes are longer than the original payload.
    Lengths,
    /// NetDAM memory could not be read there.
    Memory,
    /// The slot holds another datagram's rest (or one being written): the
    /// ring came round before the reader (generations only).
    Overwritten { expected: u32, found: u64 },
}

/// The original payload from a split datagram's kept bytes, its descriptor
/// and a reader of NetDAM memory. With generations, the slot's stamp is
/// read before and after the rest: a rest overwritten before or while it is
/// read is an error, never returned (a seqlock: the data path zeroes the
/// stamp before it writes a slot and stamps it after).
#[cfg(feature = "std")]
pub fn rebuild(
    kept: &[u8],
    d: &Descriptor,
    mut read_mem: impl FnMut(u64, usize) -> Option<std::vec::Vec<u8>>,
) -> Result<std::vec::Vec<u8>, RebuildError> {
    use core::sync::atomic::{fence, Ordering};
    let rest = (d.original_len as usize)
        .checked_sub(kept.len())
        .ok_or(RebuildError::Lengths)?;
    let mut out = kept.to_vec();
    if rest == 0 {
        return Ok(out);
    }
    let addr = d.rest_addr();
    // The stamp in front of the rest must hold the descriptor's generation.
    let check_stamp = |read_mem: &mut dyn FnMut(u64, usize) -> Option<std::vec::Vec<u8>>| {
        let Some(expected) = d.generation() else {
            return Ok(());
        };
        let b = read_mem(addr - STAMP_LEN as u64, STAMP_LEN as usize).ok_or(RebuildError::Memory)?;
        let found = u64::from_le_bytes(b.try_into().map_err(|_| RebuildError::Memory)?);
        match found == expected as u64 {
            true => Ok(()),
            false => Err(RebuildError::Overwritten { expected, found }),
        }
    };
    check_stamp(&mut read_mem)?;
    fence(Ordering::Acquire);
    out.extend_from_slice(&read_mem(addr, rest).ok_or(RebuildError::Memory)?);
    fence(Ordering::Acquire);
    check_stamp(&mut read_mem)?;
    Ok(out)
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
            ..Default::default()
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
        assert_eq!(rebuild(b"head", &bad, |_, _| None), Err(RebuildError::Lengths));
        // Nothing stored: the kept bytes are the datagram; memory is not read.
        let whole = Descriptor {
            original_len: 4,
            addr: 0,
        };
        assert_eq!(rebuild(b"head", &whole, |_, _| None).unwrap(), b"head");
    }

    #[test]
    fn generations_detect_a_slot_overwritten_before_or_while_it_is_read() {
        let ring = SplitRing {
            base: 64,
            slot_size: 64,
            slots: 2,
            flags: ring_flags::GENERATIONS,
            ..Default::default()
        };
        assert!(ring.holds(56) && !ring.holds(57));
        assert_eq!(generation(0), 1);
        assert_eq!(generation(0xFFFF_FFFE), 0xFFFF_FFFF);
        assert_eq!(generation(0xFFFF_FFFF), 1, "never 0");
        // Datagram n = 5 in slot 1: stamp, then the rest.
        let slot = ring.slot_addr(5);
        let mut mem = vec![0u8; 256];
        mem[slot as usize..slot as usize + 8].copy_from_slice(&(generation(5) as u64).to_le_bytes());
        mem[slot as usize + 8..slot as usize + 14].copy_from_slice(b"stored");
        let d = Descriptor {
            original_len: 10,
            addr: stamped_addr(slot + 8, generation(5)),
        };
        assert_eq!(d.rest_addr(), slot + 8);
        assert_eq!(d.generation(), Some(6));
        fn read(m: &[u8]) -> impl FnMut(u64, usize) -> Option<Vec<u8>> + '_ {
            move |a, n| Some(m[a as usize..a as usize + n].to_vec())
        }
        assert_eq!(rebuild(b"kept", &d, read(&mem)).unwrap(), b"keptstored");
        // Datagram 7 took the slot since: its stamp is there.
        let mut later = mem.clone();
        later[slot as usize..slot as usize + 8].copy_from_slice(&(generation(7) as u64).to_le_bytes());
        assert_eq!(
            rebuild(b"kept", &d, read(&later)),
            Err(RebuildError::Overwritten { expected: 6, found: 8 })
        );
        // Overwritten while the rest is read: the second stamp read sees it.
        let mut reads = 0;
        let racing = |a: u64, n: usize| {
            reads += 1;
            let m = if reads < 3 { &mem } else { &later };
            Some(m[a as usize..a as usize + n].to_vec())
        };
        assert!(matches!(
            rebuild(b"kept", &d, racing),
            Err(RebuildError::Overwritten { .. })
        ));
        // Without generations the stamp is not read.
        let plain = Descriptor {
            original_len: 10,
            addr: slot + 8,
        };
        assert_eq!(plain.generation(), None);
        assert_eq!(rebuild(b"kept", &plain, read(&later)).unwrap(), b"keptstored");
    }
}
