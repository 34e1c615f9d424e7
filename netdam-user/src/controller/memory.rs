//! The NetDAM memory mapped into the controller: the same pages the XDP
//! program reads and writes, apart from the host's application memory.

use std::{os::fd::AsFd, ptr::NonNull};

use super::ControllerError;

/// A read-write shared mapping of the NETDAM_MEM map.
pub struct NetdamMemory {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is shared memory that the data path changes
// concurrently anyway; all access goes through raw copies.
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
    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), ControllerError> {
        let a = self.check(addr, out.len())?;
        // SAFETY: in bounds (checked); the source may change concurrently, which a byte copy tolerates.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(a), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// A pointer to the `n` bytes at `addr`, for volatile reads of memory
    /// that the data path may change meanwhile.
    pub fn range_ptr(&self, addr: u64, n: usize) -> Result<*const u8, ControllerError> {
        let a = self.check(addr, n)?;
        // SAFETY: in bounds (checked).
        Ok(unsafe { self.ptr.as_ptr().add(a) })
    }

    /// The `n` bytes at `addr`, in place: no copy.
    ///
    /// # Safety
    /// Nothing may write the range while the slice lives: no request of the
    /// data path (e.g. a header-split slot that the ring has not reached
    /// again, or a region no client writes to) and no `write` of this host.
    pub unsafe fn view(&self, addr: u64, n: usize) -> Result<&[u8], ControllerError> {
        let a = self.check(addr, n)?;
        // SAFETY: in bounds (checked); the caller guarantees no concurrent writer.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(a), n) })
    }

    /// Copies `data` into NetDAM memory at `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), ControllerError> {
        let a = self.check(addr, data.len())?;
        // SAFETY: in bounds (checked); shared memory, no Rust references into it exist.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(a), data.len()) };
        Ok(())
    }
}

impl Drop for NetdamMemory {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
