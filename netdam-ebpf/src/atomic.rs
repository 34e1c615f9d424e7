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
