//! Shapes of values that the BPF verifier can follow, for the XDP and tc
//! programs (netdam-ebpf, netdam-lab-ebpf) alike.

/// `n` for 1 <= n <= max (a power of two), computed so that the verifier
/// sees the range 1..=max: a plain clamp gets reordered by LLVM into a form
/// whose lower bound the verifier loses.
#[inline(always)]
pub fn bounded_len(n: u32, max: u32) -> u32 {
    let n = if n > max { max } else { n };
    (n.wrapping_sub(1) & (max - 1)) + 1
}

#[cfg(test)]
mod tests {
    use super::bounded_len;

    #[test]
    fn lengths_stay_in_one_to_max() {
        assert_eq!(bounded_len(0, 64), 64, "0 wraps to max, never 0");
        assert_eq!(bounded_len(1, 64), 1);
        assert_eq!(bounded_len(64, 64), 64);
        assert_eq!(bounded_len(65, 64), 64);
        assert_eq!(bounded_len(u32::MAX, 64), 64);
    }
}
