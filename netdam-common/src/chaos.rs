//! The testbed's chaos element: what the tc program on the switch side of
//! every testbed link shares with the host that configures it. It drops,
//! duplicates and reorders a configured fraction of NetDAM frames (UDP to or
//! from port P), so that the protocol's claims (no ordering assumed, loss
//! and duplication survived, section 7) are tested on real frames.

/// Marks a frame the chaos element sent itself (a duplicate or a frame
/// released from hold): it passes untouched the next time it is seen.
pub const CHAOS_MARK: u32 = 0x4E44_4348;

/// Largest frame the element can hold for reordering: more than a 9216-byte
/// payload with its headers. A power of two, as `bounded_len` of the data
/// path needs.
pub const HELD_MAX: usize = 16384;

/// Index 0 of the config map. Fractions are thresholds out of 2^32 (2^32 = every frame).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChaosConfig {
    /// NetDAM's UDP port P, host order.
    pub port: u16,
    pub _pad: [u16; 3],
    pub loss: u64,
    pub dup: u64,
    pub reorder: u64,
}

/// A frame held back on one link until the next frame overtakes it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Held {
    /// Bytes in `data`; 0 when nothing is held.
    pub len: u32,
    pub _pad: u32,
    pub data: [u8; HELD_MAX],
}

/// Counter slots of the stats map.
pub mod stat {
    /// NetDAM frames the element looked at (not its own duplicates and releases).
    pub const SEEN: u32 = 0;
    pub const DROPPED: u32 = 1;
    pub const DUPLICATED: u32 = 2;
    /// Frames held back, and frames released behind a later one.
    pub const HELD: u32 = 3;
    pub const RELEASED: u32 = 4;
    pub const SLOTS: u32 = 5;
}

/// What the element does with a frame, from a uniform random u32 `r`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Drop,
    Duplicate,
    Hold,
    Pass,
}

impl ChaosConfig {
    /// The config for fractions `loss`, `dup`, `reorder` (each 0..=1, summing to at most 1).
    pub fn new(port: u16, loss: f64, dup: f64, reorder: f64) -> Option<ChaosConfig> {
        let ok = |f: f64| (0.0..=1.0).contains(&f);
        if !ok(loss) || !ok(dup) || !ok(reorder) || loss + dup + reorder > 1.0 {
            return None;
        }
        // Rounded to nearest (no f64::round in core).
        let t = |f: f64| (f * (1u64 << 32) as f64 + 0.5) as u64;
        Some(ChaosConfig {
            port,
            _pad: [0; 3],
            loss: t(loss),
            dup: t(dup),
            reorder: t(reorder),
        })
    }

    /// The fate of a frame: [0, loss) drop, then dup, then reorder, the rest passes.
    #[inline(always)]
    pub fn fate(&self, r: u32) -> Fate {
        let r = r as u64;
        let drop_end = self.loss;
        let dup_end = drop_end + self.dup;
        let hold_end = dup_end + self.reorder;
        if r < drop_end {
            Fate::Drop
        } else if r < dup_end {
            Fate::Duplicate
        } else if r < hold_end {
            Fate::Hold
        } else {
            Fate::Pass
        }
    }
}

/// One step of xorshift64: the element's per-CPU random stream, seeded by the host.
#[inline(always)]
pub fn xorshift(state: &mut u64) -> u32 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    (x >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fates_follow_the_fractions() {
        assert!(ChaosConfig::new(4793, 0.5, 0.4, 0.2).is_none());
        assert!(ChaosConfig::new(4793, -0.1, 0.0, 0.0).is_none());
        let c = ChaosConfig::new(4793, 0.01, 0.02, 0.03).unwrap();
        let mut state = 0x5EED;
        let mut n = [0u32; 4];
        for _ in 0..1_000_000 {
            n[c.fate(xorshift(&mut state)) as usize] += 1;
        }
        // Drop, Duplicate, Hold within 10% of 10k, 20k, 30k.
        for (got, want) in n[..3].iter().zip([10_000.0, 20_000.0, 30_000.0]) {
            assert!((*got as f64 - want).abs() < want * 0.1, "{n:?}");
        }
        let none = ChaosConfig::new(4793, 0.0, 0.0, 0.0).unwrap();
        assert_eq!(none.fate(0), Fate::Pass);
        let all = ChaosConfig::new(4793, 1.0, 0.0, 0.0).unwrap();
        assert_eq!(all.fate(u32::MAX), Fate::Drop);
    }
}
