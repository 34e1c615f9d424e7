//! The NetDAM memory mapped into the controller: the same pages the XDP
//! program reads and writes, apart from the host's application memory.

use std::{
    os::fd::AsFd,
    ptr::NonNull,
    sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed},
};

use super::ControllerError;

/// A read-write shared mapping of the NETDAM_MEM map.
pub struct NetdamMemory {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is shared memory that the data path changes
// concurrently anyway; all access goes through atomic copies (below).
unsafe impl Send for NetdamMemory {}
unsafe impl Sync for NetdamMemory {}

impl NetdamMemory {
    pub(super) fn map(fd: impl AsFd, len: usize) -> Result<NetdamMemory, ControllerError> {
        use std::os::fd::AsRawFd;
        // SAFETY: mapping a BPF_F_MMAPABLE array map of at least `len` bytes, shared.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ControllerError::Io(
                "mmap of the NetDAM memory map (needs a BPF_F_MMAPABLE array, Linux 5.5+)".into(),
                std::io::Error::last_os_error(),
            ));
        }
        Ok(NetdamMemory {
            ptr: NonNull::new(p.cast()).expect("mmap returned NULL"),
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, addr: u64, n: usize) -> Result<usize, ControllerError> {
        let a = usize::try_from(addr).map_err(|_| ControllerError::MemoryRange {
            addr,
            len: n,
            size: self.len,
        })?;
        if n > self.len || a > self.len - n {
            return Err(ControllerError::MemoryRange {
                addr,
                len: n,
                size: self.len,
            });
        }
        Ok(a)
    }

    /// Copies `out.len()` bytes at `addr` out of NetDAM memory.
    pub fn read_into(&self, addr: u64, out: &mut [u8]) -> Result<(), ControllerError> {
        let a = self.check(addr, out.len())?;
        // SAFETY: in bounds (checked), and `out` is private memory, apart from the mapping.
        unsafe { load_shared(self.ptr.as_ptr().add(a), out) };
        Ok(())
    }

    /// The `n` bytes at `addr`, copied out of NetDAM memory.
    pub fn read(&self, addr: u64, n: usize) -> Result<Vec<u8>, ControllerError> {
        let mut out = vec![0; n];
        self.read_into(addr, &mut out)?;
        Ok(out)
    }

    /// Copies `data` into NetDAM memory at `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), ControllerError> {
        let a = self.check(addr, data.len())?;
        // SAFETY: in bounds (checked), and `data` is private memory, apart from the mapping.
        unsafe { store_shared(self.ptr.as_ptr().add(a), data) };
        Ok(())
    }

    /// A pointer to the `n` bytes at `addr`, for reading them in place.
    ///
    /// The data path may change these bytes at any time, from any CPU: read
    /// them only with atomic or volatile loads while `self` lives, and never
    /// make a reference (`&[u8]`) to them, which would tell the compiler
    /// they hold still. `read_into` copies instead.
    pub fn range_ptr(&self, addr: u64, n: usize) -> Result<*const u8, ControllerError> {
        let a = self.check(addr, n)?;
        // SAFETY: in bounds (checked).
        Ok(unsafe { self.ptr.as_ptr().add(a) })
    }
}

// Why the copies below are sound: the XDP program writes the mapping from
// other CPUs at any time, outside anything Rust can see, so no reference
// into it may exist (a `&[u8]` promises the bytes do not change, and the
// compiler may act on that). Every access is therefore a relaxed atomic
// load or store through a raw pointer (a `&AtomicU64` makes no such
// promise: atomics are interior-mutable): the compiler must assume that
// each may observe or race with other writers, and a race between atomics
// is defined (it only yields some value that was written). Aligned 8-byte
// words move in one access each, so a word the data path updates whole
// (FETCH_ADD, CAS, SWAP, the collective's sync slots) is never seen torn;
// words also keep the copy fast: within 2x of memcpy in cache and as fast
// beyond it, where a volatile byte loop is 10-15x slower.
// Larger ranges may still mix bytes from before and after a concurrent
// write, as any copy of memory that others write does.

/// Copies `out.len()` bytes from shared memory at `src` into `out`.
///
/// # Safety
/// `src` is valid for reads and writes of `out.len()` bytes (atomics need a
/// writable mapping) and is not accessed through references meanwhile.
unsafe fn load_shared(src: *const u8, out: &mut [u8]) {
    let src = src.cast_mut();
    let head = src.align_offset(8).min(out.len());
    let (edge, rest) = out.split_at_mut(head);
    // SAFETY (all loads): inside the caller's range; `head` aligns the words.
    for (i, o) in edge.iter_mut().enumerate() {
        *o = unsafe { AtomicU8::from_ptr(src.add(i)) }.load(Relaxed);
    }
    let mut words = rest.chunks_exact_mut(8);
    let mut at = head;
    for o in &mut words {
        let w = unsafe { AtomicU64::from_ptr(src.add(at).cast()) }.load(Relaxed);
        o.copy_from_slice(&w.to_ne_bytes());
        at += 8;
    }
    for (i, o) in words.into_remainder().iter_mut().enumerate() {
        *o = unsafe { AtomicU8::from_ptr(src.add(at + i)) }.load(Relaxed);
    }
}

/// Copies `data` into shared memory at `dst`.
///
/// # Safety
/// `dst` is valid for writes of `data.len()` bytes and is not accessed
/// through references meanwhile.
unsafe fn store_shared(dst: *mut u8, data: &[u8]) {
    let head = dst.align_offset(8).min(data.len());
    let (edge, rest) = data.split_at(head);
    // SAFETY (all stores): inside the caller's range; `head` aligns the words.
    for (i, b) in edge.iter().enumerate() {
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(*b, Relaxed);
    }
    let mut words = rest.chunks_exact(8);
    let mut at = head;
    for w in &mut words {
        let w = u64::from_ne_bytes(w.try_into().expect("8 bytes"));
        unsafe { AtomicU64::from_ptr(dst.add(at).cast()) }.store(w, Relaxed);
        at += 8;
    }
    for (i, b) in words.remainder().iter().enumerate() {
        unsafe { AtomicU8::from_ptr(dst.add(at + i)) }.store(*b, Relaxed);
    }
}

impl Drop for NetdamMemory {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{FromRawFd, OwnedFd};

    use super::*;

    /// A NetdamMemory over a memfd: the same MAP_SHARED mapping as of the
    /// BPF map, without a BPF map.
    fn memory(len: usize) -> NetdamMemory {
        // SAFETY: a fresh memfd, owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(libc::memfd_create(c"netdam-mem-test".as_ptr(), 0)) };
        std::fs::File::from(fd.try_clone().unwrap())
            .set_len(len as u64)
            .unwrap();
        NetdamMemory::map(&fd, len).unwrap()
    }

    #[test]
    fn copies_are_exact_at_every_alignment_and_length() {
        let m = memory(4096);
        let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        for addr in 0..17u64 {
            for n in [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000] {
                m.write(0, &[0xEE; 1200]).unwrap();
                let data = &pattern[addr as usize..addr as usize + n];
                m.write(addr, data).unwrap();
                let all = m.read(0, 1200).unwrap();
                assert!(all[..addr as usize].iter().all(|&b| b == 0xEE), "before {addr}+{n}");
                assert_eq!(&all[addr as usize..addr as usize + n], data, "{addr}+{n}");
                assert!(all[addr as usize + n..].iter().all(|&b| b == 0xEE), "after {addr}+{n}");
                let mut out = vec![0u8; n];
                m.read_into(addr, &mut out).unwrap();
                assert_eq!(out, data, "read_into {addr}+{n}");
            }
        }
    }

    #[test]
    fn ranges_past_the_end_are_refused() {
        let m = memory(4096);
        assert!(m.read(4096 - 8, 8).is_ok());
        assert!(m.read(4096, 0).is_ok());
        for (addr, n) in [(4096 - 7, 8), (4097, 0), (u64::MAX, 1), (0, 4097)] {
            assert!(
                matches!(m.read(addr, n), Err(ControllerError::MemoryRange { .. })),
                "{addr}+{n}"
            );
            assert!(m.write(addr, &vec![0; n]).is_err(), "write {addr}+{n}");
            assert!(m.range_ptr(addr, n).is_err(), "range_ptr {addr}+{n}");
        }
    }
}
