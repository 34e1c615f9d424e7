//! The NetDAM ALU (PROTOCOL.md section 4): element-wise combine operators
//! for every dtype, in integer arithmetic only, because eBPF has no floating
//! point. The XDP program, the reference model and the host all call these.

use crate::wire::{Alu, Dtype};

/// The canonical quiet NaN every NaN result becomes.
pub const F32_CANONICAL_NAN: u32 = 0x7FC0_0000;

const SIGN: u32 = 0x8000_0000;
const EXP_MASK: u32 = 0xFF;
const FRAC_MASK: u32 = 0x007F_FFFF;
const IMPLICIT: u32 = 0x0080_0000;

#[inline(always)]
const fn is_nan(x: u32) -> bool {
    (x >> 23) & EXP_MASK == EXP_MASK && x & FRAC_MASK != 0
}

/// Leading zeros of a u32 without a clz instruction (the BPF ISA has none).
#[inline(always)]
const fn leading_zeros(mut x: u32) -> u32 {
    if x == 0 {
        return 32;
    }
    let mut n = 0;
    if x & 0xFFFF_0000 == 0 {
        n += 16;
        x <<= 16;
    }
    if x & 0xFF00_0000 == 0 {
        n += 8;
        x <<= 8;
    }
    if x & 0xF000_0000 == 0 {
        n += 4;
        x <<= 4;
    }
    if x & 0xC000_0000 == 0 {
        n += 2;
        x <<= 2;
    }
    if x & 0x8000_0000 == 0 {
        n += 1;
    }
    n
}

/// IEEE 754 binary32 addition, round to nearest even, subnormals kept, every
/// NaN result canonical. Operands and result are the bit patterns.
///
/// In the XDP program it is a global function: the verifier checks a global
/// function once, on its own, instead of every path through it at every use.
#[cfg_attr(target_arch = "bpf", unsafe(no_mangle), inline(never))]
#[cfg_attr(not(target_arch = "bpf"), inline(always))]
pub extern "C" fn f32_add(a: u32, b: u32) -> u32 {
    if is_nan(a) || is_nan(b) {
        return F32_CANONICAL_NAN;
    }
    let (mut a, mut b) = (a, b);
    // Order by magnitude: |a| >= |b|.
    if a & !SIGN < b & !SIGN {
        core::mem::swap(&mut a, &mut b);
    }
    let sign = a & SIGN;
    let ea = (a >> 23) & EXP_MASK;
    let eb = (b >> 23) & EXP_MASK;
    if ea == EXP_MASK {
        // a is infinite (and |a| >= |b|): inf - inf is NaN, otherwise a.
        if eb == EXP_MASK && (a ^ b) & SIGN != 0 {
            return F32_CANONICAL_NAN;
        }
        return a;
    }
    if b & !SIGN == 0 {
        // b is a zero: a + 0 = a, except -0 + +0 = +0.
        if a & !SIGN == 0 {
            return a & b;
        }
        return a;
    }
    // Significands with 3 guard/round/sticky bits; subnormals have exponent 1 and no implicit bit.
    let mut ma = if ea == 0 {
        a & FRAC_MASK
    } else {
        (a & FRAC_MASK) | IMPLICIT
    } << 3;
    let mut mb = if eb == 0 {
        b & FRAC_MASK
    } else {
        (b & FRAC_MASK) | IMPLICIT
    } << 3;
    let mut e = if ea == 0 { 1 } else { ea };
    let eb = if eb == 0 { 1 } else { eb };
    let d = e - eb;
    if d >= 27 {
        mb = (mb != 0) as u32;
    } else if d > 0 {
        let lost = mb & ((1 << d) - 1);
        mb = (mb >> d) | (lost != 0) as u32;
    }
    if (a ^ b) & SIGN == 0 {
        ma += mb;
        if ma >= 1 << 27 {
            ma = (ma >> 1) | (ma & 1);
            e += 1;
        }
    } else {
        ma -= mb;
        if ma == 0 {
            // Exact cancellation gives +0 in round-to-nearest.
            return 0;
        }
        // Normalize so bit 26 is set, but not below exponent 1 (subnormal).
        let lz = leading_zeros(ma) - 5;
        let shift = if lz < e - 1 { lz } else { e - 1 };
        ma <<= shift;
        e -= shift;
    }
    let low = ma & 7;
    let mut m = ma >> 3;
    if low > 4 || (low == 4 && m & 1 != 0) {
        m += 1;
        if m == 1 << 24 {
            m >>= 1;
            e += 1;
        }
    }
    if e >= EXP_MASK {
        return sign | (EXP_MASK << 23);
    }
    if m < IMPLICIT {
        // Subnormal (only reachable with e == 1).
        return sign | m;
    }
    sign | (e << 23) | (m & FRAC_MASK)
}

/// A key whose unsigned order is the numeric order of non-NaN floats, with -0 < +0.
#[inline(always)]
const fn f32_order_key(x: u32) -> u32 {
    if x & SIGN != 0 {
        !x
    } else {
        x | SIGN
    }
}

/// f32 MIN/MAX of section 4: a NaN operand yields the other; two NaNs the canonical NaN.
#[inline(always)]
const fn f32_pick(a: u32, b: u32, want_min: bool) -> u32 {
    match (is_nan(a), is_nan(b)) {
        (true, true) => F32_CANONICAL_NAN,
        (true, false) => b,
        (false, true) => a,
        (false, false) => {
            let a_less = f32_order_key(a) < f32_order_key(b);
            if a_less == want_min {
                a
            } else {
                b
            }
        }
    }
}

pub const fn f32_min(a: u32, b: u32) -> u32 {
    f32_pick(a, b, true)
}

pub const fn f32_max(a: u32, b: u32) -> u32 {
    f32_pick(a, b, false)
}

/// `alu(a, b)` on 32-bit elements (i32, u32, f32). Callers validated the pair
/// with `validate::check_vector_type`; a bitwise alu on f32 never reaches here.
#[inline(always)]
pub fn combine32(dtype: Dtype, alu: Alu, a: u32, b: u32) -> u32 {
    match (dtype, alu) {
        (Dtype::F32, Alu::Add) => f32_add(a, b),
        (Dtype::F32, Alu::Min) => f32_min(a, b),
        (Dtype::F32, Alu::Max) => f32_max(a, b),
        (_, Alu::Add) => a.wrapping_add(b),
        (Dtype::I32, Alu::Min) => {
            if (a as i32) < (b as i32) {
                a
            } else {
                b
            }
        }
        (Dtype::I32, Alu::Max) => {
            if (a as i32) > (b as i32) {
                a
            } else {
                b
            }
        }
        (_, Alu::Min) => {
            if a < b {
                a
            } else {
                b
            }
        }
        (_, Alu::Max) => {
            if a > b {
                a
            } else {
                b
            }
        }
        (_, Alu::And) => a & b,
        (_, Alu::Or) => a | b,
        (_, Alu::Xor) => a ^ b,
    }
}

/// `alu(a, b)` on 64-bit elements (i64, u64).
#[inline(always)]
pub const fn combine64(dtype: Dtype, alu: Alu, a: u64, b: u64) -> u64 {
    match (dtype, alu) {
        (_, Alu::Add) => a.wrapping_add(b),
        (Dtype::I64, Alu::Min) => {
            if (a as i64) < (b as i64) {
                a
            } else {
                b
            }
        }
        (Dtype::I64, Alu::Max) => {
            if (a as i64) > (b as i64) {
                a
            } else {
                b
            }
        }
        (_, Alu::Min) => {
            if a < b {
                a
            } else {
                b
            }
        }
        (_, Alu::Max) => {
            if a > b {
                a
            } else {
                b
            }
        }
        (_, Alu::And) => a & b,
        (_, Alu::Or) => a | b,
        (_, Alu::Xor) => a ^ b,
    }
}

/// `alu(a, b)` on two 32-bit elements (i32, u32, f32) packed in a u64, the
/// element at the lower address in the low half (little-endian): the same
/// as `combine32` on each half. ADD adds both lanes in one 64-bit addition
/// (SWAR): the low 31 bits of each lane cannot carry out of their lane, and
/// the lanes' top bits add without carry, which is an exclusive or. AND, OR
/// and XOR are lane-wise already; the other operators go lane by lane.
#[inline(always)]
pub fn combine32x2(dtype: Dtype, alu: Alu, a: u64, b: u64) -> u64 {
    const LOW31: u64 = 0x7FFF_FFFF_7FFF_FFFF;
    const TOP: u64 = 0x8000_0000_8000_0000;
    match (dtype, alu) {
        (Dtype::I32 | Dtype::U32, Alu::Add) => ((a & LOW31) + (b & LOW31)) ^ ((a ^ b) & TOP),
        (_, Alu::And) => a & b,
        (_, Alu::Or) => a | b,
        (_, Alu::Xor) => a ^ b,
        _ => {
            let lo = combine32(dtype, alu, a as u32, b as u32);
            let hi = combine32(dtype, alu, (a >> 32) as u32, (b >> 32) as u32);
            (hi as u64) << 32 | lo as u64
        }
    }
}

/// acc[i] = alu(acc[i], x[i]) element-wise on little-endian vectors of
/// `dtype` (host side: the model, the ring's expected result, baselines).
pub fn combine_into(dtype: Dtype, alu: Alu, acc: &mut [u8], x: &[u8]) {
    let w = dtype.width() as usize;
    for (a, x) in acc.chunks_exact_mut(w).zip(x.chunks_exact(w)) {
        if w == 4 {
            let r = combine32(
                dtype,
                alu,
                u32::from_le_bytes([a[0], a[1], a[2], a[3]]),
                u32::from_le_bytes([x[0], x[1], x[2], x[3]]),
            );
            a.copy_from_slice(&r.to_le_bytes());
        } else {
            let r = combine64(
                dtype,
                alu,
                u64::from_le_bytes([a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]]),
                u64::from_le_bytes([x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]]),
            );
            a.copy_from_slice(&r.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's addition with NaN results made canonical: what PROTOCOL.md asks for.
    fn host_add(a: u32, b: u32) -> u32 {
        let r = (f32::from_bits(a) + f32::from_bits(b)).to_bits();
        if is_nan(r) {
            F32_CANONICAL_NAN
        } else {
            r
        }
    }

    fn check(a: u32, b: u32) {
        let got = f32_add(a, b);
        let want = host_add(a, b);
        assert_eq!(got, want, "{a:#010x} + {b:#010x}: got {got:#010x}, host {want:#010x}");
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 16) as u32
        }
    }

    /// Every exponent pair and both signs, with mantissas from the edges
    /// (0, 1, all ones, the half-way patterns) and random ones.
    #[test]
    fn f32_add_matches_the_host_on_every_exponent_pair() {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let edges = [
            0u32, 1, 2, 3, 0x3F_FFFF, 0x40_0000, 0x40_0001, 0x7F_FFFE, 0x7F_FFFF, 0x55_5555, 0x2A_AAAA,
        ];
        for ea in 0..=255u32 {
            for eb in 0..=255u32 {
                for s in 0..4u32 {
                    let sa = (s & 1) << 31;
                    let sb = (s >> 1) << 31;
                    for k in 0..6 {
                        let fa = if k < 3 {
                            edges[(rng.next() as usize) % edges.len()]
                        } else {
                            rng.next() & FRAC_MASK
                        };
                        let fb = if k % 2 == 0 {
                            edges[(rng.next() as usize) % edges.len()]
                        } else {
                            rng.next() & FRAC_MASK
                        };
                        check(sa | ea << 23 | fa, sb | eb << 23 | fb);
                    }
                }
            }
        }
    }

    #[test]
    fn f32_add_special_classes() {
        let specials = [
            0x0000_0000,
            0x8000_0000, // zeros
            0x0000_0001,
            0x8000_0001,
            0x007F_FFFF,
            0x807F_FFFF,
            0x0040_0000, // subnormals
            0x0080_0000,
            0x8080_0000,
            0x0080_0001, // smallest normals
            0x7F7F_FFFF,
            0xFF7F_FFFF,
            0x7F7F_FFFE, // largest finite
            0x7F80_0000,
            0xFF80_0000, // infinities
            0x7FC0_0000,
            0xFFC0_0000,
            0x7F80_0001,
            0xFFFF_FFFF,
            0x7FBF_FFFF, // NaNs, quiet and signalling
            0x3F80_0000,
            0xBF80_0000,
            0x3380_0000,
            0x3400_0000,
            0x4B80_0000,
            0xCB80_0000, // 1, 2^-24, 2^-23, 2^24
        ];
        for &a in &specials {
            for &b in &specials {
                check(a, b);
            }
        }
        // Cancellation to exactly zero is +0; -0 + -0 is -0.
        assert_eq!(f32_add(0x3F80_0000, 0xBF80_0000), 0);
        assert_eq!(f32_add(0x8000_0000, 0x8000_0000), 0x8000_0000);
        assert_eq!(f32_add(0x7F80_0000, 0xFF80_0000), F32_CANONICAL_NAN);
    }

    #[test]
    fn f32_add_random_and_near_ties() {
        let mut rng = Rng(7);
        for _ in 0..2_000_000 {
            check(rng.next(), rng.next());
        }
        // Operands close in exponent exercise cancellation and ties.
        for _ in 0..1_000_000 {
            let a = rng.next();
            let delta = rng.next() % 64;
            check(a, (a ^ SIGN).wrapping_add(delta).wrapping_sub(32));
            check(a, a.wrapping_add(delta));
        }
    }

    #[test]
    fn f32_min_max() {
        let (neg0, pos0, one, neg_one, nan) = (0x8000_0000, 0, 0x3F80_0000, 0xBF80_0000, 0x7FC0_0001);
        assert_eq!(f32_min(neg0, pos0), neg0);
        assert_eq!(f32_min(pos0, neg0), neg0);
        assert_eq!(f32_max(neg0, pos0), pos0);
        assert_eq!(f32_min(one, neg_one), neg_one);
        assert_eq!(f32_max(one, neg_one), one);
        assert_eq!(f32_min(nan, one), one);
        assert_eq!(f32_max(one, nan), one);
        assert_eq!(f32_min(nan, 0xFFC0_0000), F32_CANONICAL_NAN);
        let mut rng = Rng(99);
        for _ in 0..200_000 {
            let (a, b) = (rng.next(), rng.next());
            if is_nan(a) || is_nan(b) {
                continue;
            }
            let (fa, fb) = (f32::from_bits(a), f32::from_bits(b));
            if fa != fb {
                assert_eq!(f32_min(a, b), fa.min(fb).to_bits());
                assert_eq!(f32_max(a, b), fa.max(fb).to_bits());
            }
        }
    }

    #[test]
    fn integer_operators() {
        use Alu::*;
        assert_eq!(combine32(Dtype::I32, Add, u32::MAX, 2), 1);
        assert_eq!(combine32(Dtype::I32, Min, (-5i32) as u32, 3), (-5i32) as u32);
        assert_eq!(combine32(Dtype::U32, Min, (-5i32) as u32, 3), 3);
        assert_eq!(combine32(Dtype::I32, Max, (-5i32) as u32, 3), 3);
        assert_eq!(combine32(Dtype::U32, Max, (-5i32) as u32, 3), (-5i32) as u32);
        assert_eq!(combine32(Dtype::U32, And, 0b1100, 0b1010), 0b1000);
        assert_eq!(combine32(Dtype::U32, Or, 0b1100, 0b1010), 0b1110);
        assert_eq!(combine32(Dtype::I32, Xor, 0b1100, 0b1010), 0b0110);
        assert_eq!(combine64(Dtype::U64, Add, u64::MAX, 1), 0);
        assert_eq!(combine64(Dtype::I64, Min, (-1i64) as u64, 0), (-1i64) as u64);
        assert_eq!(combine64(Dtype::U64, Min, (-1i64) as u64, 0), 0);
        assert_eq!(
            combine64(Dtype::I64, Max, i64::MIN as u64, i64::MAX as u64),
            i64::MAX as u64
        );
        assert_eq!(combine64(Dtype::U64, Xor, 0xFF, 0x0F), 0xF0);
        // MIN, MAX, AND, OR are idempotent: applying twice changes nothing.
        for alu in [Min, Max, And, Or] {
            for (a, b) in [(3u32, 9u32), (u32::MAX, 0), (0x8000_0000, 1)] {
                let once = combine32(Dtype::I32, alu, a, b);
                assert_eq!(combine32(Dtype::I32, alu, once, b), once);
            }
        }
    }

    /// combine32x2 against combine32 on each lane, for every 32-bit pair
    /// of edge values (carries into and out of bit 31, all ones, signs) in
    /// both lanes, and random words.
    #[test]
    fn combine32x2_is_combine32_on_each_lane() {
        let edges = [
            0u32,
            1,
            2,
            0x7FFF_FFFE,
            0x7FFF_FFFF,
            0x8000_0000,
            0x8000_0001,
            0xFFFF_FFFE,
            0xFFFF_FFFF,
            0x5555_5555,
            0xAAAA_AAAA,
            0x3F80_0000,
            0x7FC0_0001,
        ];
        let mut rng = Rng(0x5EED);
        let mut words: Vec<u64> = Vec::new();
        for &hi in &edges {
            for &lo in &edges {
                words.push((hi as u64) << 32 | lo as u64);
            }
        }
        words.extend((0..64).map(|_| (rng.next() as u64) << 32 | rng.next() as u64));
        for &dtype in &[Dtype::I32, Dtype::U32, Dtype::F32] {
            for &alu in Alu::ALL {
                if dtype == Dtype::F32 && alu.is_bitwise() {
                    continue;
                }
                for &a in &words {
                    for &b in &words {
                        let lo = combine32(dtype, alu, a as u32, b as u32);
                        let hi = combine32(dtype, alu, (a >> 32) as u32, (b >> 32) as u32);
                        assert_eq!(
                            combine32x2(dtype, alu, a, b),
                            (hi as u64) << 32 | lo as u64,
                            "{dtype:?} {alu:?} {a:#018x} {b:#018x}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn leading_zeros_matches_core() {
        for x in [
            0u32,
            1,
            2,
            3,
            0xFF,
            0x100,
            0x7FFF_FFFF,
            0x8000_0000,
            u32::MAX,
            0x0001_0000,
            0x00F0_0000,
        ] {
            assert_eq!(leading_zeros(x), x.leading_zeros(), "{x:#x}");
        }
    }
}
