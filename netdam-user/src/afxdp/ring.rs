//! The rings an AF_XDP socket shares with the kernel: single producer,
//! single consumer, indices that run freely and wrap at 2^32.

use std::{
    os::fd::{AsRawFd, BorrowedFd},
    sync::atomic::{AtomicU32, Ordering},
};

use super::XskError;

pub struct Ring<T> {
    map: *mut libc::c_void,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
    mask: u32,
    /// This side's own index (producer or consumer), published by `submit`/`release`.
    local: u32,
}

// SAFETY: the mapping is owned by the ring; one thread uses it at a time (&mut self).
unsafe impl<T> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Maps the ring of `size` entries at page offset `pgoff` of the socket.
    pub fn map(
        fd: BorrowedFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        pgoff: u64,
        name: &str,
    ) -> Result<Ring<T>, XskError> {
        let map_len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        // SAFETY: a shared mapping of the socket's ring, checked for MAP_FAILED.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                pgoff as libc::off_t,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(XskError::last(format!("mapping the {name} ring")));
        }
        let at = |o: u64| map.cast::<u8>().wrapping_add(o as usize);
        Ok(Ring {
            map,
            map_len,
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            flags: at(off.flags).cast(),
            descs: at(off.desc).cast(),
            mask: size - 1,
            // A new ring's producer and consumer are both 0.
            local: 0,
        })
    }

    fn producer(&self) -> u32 {
        // SAFETY: a u32 inside the mapping.
        unsafe { (*self.producer).load(Ordering::Acquire) }
    }

    fn consumer(&self) -> u32 {
        // SAFETY: a u32 inside the mapping.
        unsafe { (*self.consumer).load(Ordering::Acquire) }
    }

    /// The kernel asks to be woken (XDP_USE_NEED_WAKEUP).
    pub fn needs_wakeup(&self) -> bool {
        // SAFETY: a u32 inside the mapping.
        unsafe { (*self.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0 }
    }

    // Producer side (fill ring).

    /// Entries this producer may write now.
    pub fn free(&self) -> u32 {
        (self.mask + 1) - self.local.wrapping_sub(self.consumer())
    }

    /// Writes `items` (at most `free()`) and publishes them to the kernel.
    pub fn produce(&mut self, items: impl IntoIterator<Item = T>) -> u32 {
        let room = self.free();
        let mut n = 0;
        for item in items.into_iter().take(room as usize) {
            // SAFETY: the slot is inside the ring (masked) and owned by the producer until published.
            unsafe {
                self.descs
                    .add((self.local.wrapping_add(n) & self.mask) as usize)
                    .write(item)
            };
            n += 1;
        }
        self.local = self.local.wrapping_add(n);
        // SAFETY: a u32 inside the mapping; Release publishes the writes above.
        unsafe { (*self.producer).store(self.local, Ordering::Release) };
        n
    }

    /// Producer side: entries published that the kernel has not consumed yet.
    pub fn pending(&self) -> u32 {
        self.local.wrapping_sub(self.consumer())
    }

    // Consumer side (RX and completion rings).

    /// Entries the kernel has published and this consumer has not read.
    pub fn available(&self) -> u32 {
        self.producer().wrapping_sub(self.local)
    }

    /// Reads up to `max` entries into `out` and releases their slots.
    pub fn consume(&mut self, max: u32, out: &mut Vec<T>) -> u32 {
        let n = self.available().min(max);
        for i in 0..n {
            // SAFETY: published by the kernel (Acquire in `available`), inside the ring (masked).
            out.push(unsafe { self.descs.add((self.local.wrapping_add(i) & self.mask) as usize).read() });
        }
        self.local = self.local.wrapping_add(n);
        // SAFETY: a u32 inside the mapping; the entries were copied out above.
        unsafe { (*self.consumer).store(self.local, Ordering::Release) };
        n
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}
