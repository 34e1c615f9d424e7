//! BPF atomic instructions. Rust's bpfel target offers no compare-and-swap
//! in `core` (`atomic-cas: false`), so they are written as the BPF assembly
//! LLVM knows; the kernel has executed them since Linux 5.12.

/// Atomically: if `*p == old` then `*p = new`; returns what `*p` held.
///
/// # Safety
/// `p` points to an 8-byte-aligned u64 in a map value.
#[inline(always)]
pub unsafe fn cmpxchg64(p: *mut u64, old: u64, new: u64) -> u64 {
    let seen: u64;
    // SAFETY: the caller's pointer; r0 carries the expected and the seen value.
    unsafe {
        core::arch::asm!(
            "r0 = cmpxchg_64({p} + 0, r0, {new})",
            p = in(reg) p,
            new = in(reg) new,
            inout("r0") old => seen,
            options(nostack),
        );
    }
    seen
}

/// Atomically `*p += v`; returns the old value.
///
/// # Safety
/// As `cmpxchg64`.
#[inline(always)]
pub unsafe fn fetch_add64(p: *mut u64, v: u64) -> u64 {
    let mut r = v;
    // SAFETY: the caller's pointer.
    unsafe {
        core::arch::asm!("{r} = atomic_fetch_add((u64 *)({p} + 0), {r})", p = in(reg) p, r = inout(reg) r, options(nostack));
    }
    r
}

/// Atomically `*p = v`; returns the old value.
///
/// # Safety
/// As `cmpxchg64`.
#[inline(always)]
pub unsafe fn xchg64(p: *mut u64, v: u64) -> u64 {
    let mut r = v;
    // SAFETY: the caller's pointer.
    unsafe {
        core::arch::asm!("{r} = xchg_64({p} + 0, {r})", p = in(reg) p, r = inout(reg) r, options(nostack));
    }
    r
}

/// The operators ACCUMULATE applies with one BPF atomic instruction each
/// (no fetch, Linux 5.12) instead of a compare-and-swap loop: `*p = *p <op> v`.
pub trait AtomicOps: Copy {
    /// # Safety
    /// `p` points to a naturally aligned value in a map value (the verifier
    /// rejects a misaligned atomic).
    unsafe fn add(p: *mut Self, v: Self);
    /// # Safety
    /// As `add`.
    unsafe fn and(p: *mut Self, v: Self);
    /// # Safety
    /// As `add`.
    unsafe fn or(p: *mut Self, v: Self);
    /// # Safety
    /// As `add`.
    unsafe fn xor(p: *mut Self, v: Self);
}

// The operand goes in r2 and the template names its 32-bit half w2 for the
// u32 forms: Rust's `wreg` class needs the alu32 target feature, which the
// rest of the program is not built with; the instruction's encoding is the
// same either way (BPF_STX | BPF_ATOMIC | size, src_reg 2).
macro_rules! atomic_ops {
    ($t:ty, $size:literal, $reg:literal) => {
        impl AtomicOps for $t {
            #[inline(always)]
            unsafe fn add(p: *mut Self, v: Self) {
                // SAFETY: the caller's pointer.
                unsafe { core::arch::asm!(concat!("lock *(", $size, " *)({p} + 0) += ", $reg), p = in(reg) p, in("r2") v as u64, options(nostack)) }
            }
            #[inline(always)]
            unsafe fn and(p: *mut Self, v: Self) {
                // SAFETY: the caller's pointer.
                unsafe { core::arch::asm!(concat!("lock *(", $size, " *)({p} + 0) &= ", $reg), p = in(reg) p, in("r2") v as u64, options(nostack)) }
            }
            #[inline(always)]
            unsafe fn or(p: *mut Self, v: Self) {
                // SAFETY: the caller's pointer.
                unsafe { core::arch::asm!(concat!("lock *(", $size, " *)({p} + 0) |= ", $reg), p = in(reg) p, in("r2") v as u64, options(nostack)) }
            }
            #[inline(always)]
            unsafe fn xor(p: *mut Self, v: Self) {
                // SAFETY: the caller's pointer.
                unsafe { core::arch::asm!(concat!("lock *(", $size, " *)({p} + 0) ^= ", $reg), p = in(reg) p, in("r2") v as u64, options(nostack)) }
            }
        }
    };
}

atomic_ops!(u32, "u32", "w2");
atomic_ops!(u64, "u64", "r2");
