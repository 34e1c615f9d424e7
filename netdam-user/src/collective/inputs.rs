//! Inputs that every member derives from a seed, so that each member can
//! check the whole result without seeing the others' inputs (`--check`,
//! and the #wrong column of `cargo xtask allreduce`).

use netdam_common::{
    chain::ring_result,
    wire::{Alu, Dtype},
};

/// Elements checked at a time: bounds the memory of a check of a large vector.
const WINDOW: usize = 1 << 16;

/// splitmix64: a well-mixed u64 for each (seed, member, element).
fn mix(seed: u64, rank: usize, elem: u64) -> u64 {
    let mut z = seed ^ ((rank as u64) << 56) ^ elem.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Member `rank`'s input elements `first_elem..` into `out`. f32 values are
/// finite, of both signs, with exponents from 2^-20 to 2^20, so that sums
/// round differently in different orders and the ring order is checked.
pub fn member_input(seed: u64, rank: usize, dtype: Dtype, first_elem: u64, out: &mut [u8]) {
    let w = dtype.width() as usize;
    for (i, e) in out.chunks_exact_mut(w).enumerate() {
        let r = mix(seed, rank, first_elem + i as u64);
        match dtype {
            Dtype::F32 => {
                let exp = 127 - 20 + (r >> 32) as u32 % 41;
                let bits = ((r as u32) & 0x8000_0000) | (exp << 23) | ((r >> 8) as u32 & 0x7F_FFFF);
                e.copy_from_slice(&bits.to_le_bytes());
            }
            _ => e.copy_from_slice(&r.to_le_bytes()[..w]),
        }
    }
}

/// Elements of `output` (the whole result, elements `0..`) that differ from
/// what the ring must produce from the members' seeded inputs.
pub fn count_wrong(seed: u64, members: usize, dtype: Dtype, alu: Alu, chunk_elems: u32, output: &[u8]) -> u64 {
    let w = dtype.width() as usize;
    let mut inputs = vec![vec![0u8; WINDOW * w]; members];
    let mut expected = vec![0u8; WINDOW * w];
    let mut wrong = 0;
    for (k, got) in output.chunks(WINDOW * w).enumerate() {
        let first = (k * WINDOW) as u64;
        for (rank, input) in inputs.iter_mut().enumerate() {
            member_input(seed, rank, dtype, first, &mut input[..got.len()]);
        }
        let views: Vec<&[u8]> = inputs.iter().map(|v| &v[..got.len()]).collect();
        ring_result(dtype, alu, &views, chunk_elems, first, &mut expected[..got.len()]);
        wrong += got.chunks(w).zip(expected.chunks(w)).filter(|(a, b)| a != b).count() as u64;
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_differ_by_member_and_checks_catch_one_wrong_element() {
        let mut a = [0u8; 64];
        let mut b = [0u8; 64];
        member_input(1, 0, Dtype::F32, 0, &mut a);
        member_input(1, 1, Dtype::F32, 0, &mut b);
        assert_ne!(a, b);
        assert!(a
            .chunks(4)
            .all(|c| f32::from_le_bytes(c.try_into().unwrap()).is_finite()));
        // The result of 3 members computed from the same inputs checks clean...
        let count = 100_000usize;
        let mut inputs = vec![vec![0u8; count * 4]; 3];
        for (r, v) in inputs.iter_mut().enumerate() {
            member_input(9, r, Dtype::F32, 0, v);
        }
        let views: Vec<&[u8]> = inputs.iter().map(|v| &v[..]).collect();
        let mut out = vec![0u8; count * 4];
        ring_result(Dtype::F32, Alu::Add, &views, 344, 0, &mut out);
        assert_eq!(count_wrong(9, 3, Dtype::F32, Alu::Add, 344, &out), 0);
        // ...and one flipped bit past the first window is one wrong element.
        out[(WINDOW + 5) * 4] ^= 1;
        assert_eq!(count_wrong(9, 3, Dtype::F32, Alu::Add, 344, &out), 1);
        // Another chunking is another f32 result.
        assert!(count_wrong(9, 3, Dtype::F32, Alu::Add, 343, &out) > 0);
    }
}
