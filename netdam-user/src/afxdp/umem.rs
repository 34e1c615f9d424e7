//! The UMEM: the frame area the kernel copies received frames into. It is
//! the host's I/O memory, apart from application memory.

use std::ptr::NonNull;

use netdam_common::split::UMEM_FRAME;

use super::XskError;

/// What the UMEM's pages are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backing {
    /// 2 MiB huge pages (`vm.nr_hugepages` had enough free).
    Hugepages,
    /// Page-aligned anonymous memory (no free huge pages).
    Anonymous,
}

impl std::fmt::Display for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backing::Hugepages => "2 MiB huge pages",
            Backing::Anonymous => "anonymous pages (no free huge pages)",
        })
    }
}

pub struct Umem {
    area: NonNull<u8>,
    len: usize,
    frames: u32,
    backing: Backing,
}

// SAFETY: the area is plain memory owned by this value; access is through &/&mut self.
unsafe impl Send for Umem {}

const HUGE_PAGE: usize = 2 << 20;

impl Umem {
    /// `frames` frames of UMEM_FRAME bytes, on huge pages when the system has
    /// them free, else on ordinary pages.
    pub fn new(frames: u32) -> Result<Umem, XskError> {
        let len = frames as usize * UMEM_FRAME as usize;
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let base = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        let huge_len = len.next_multiple_of(HUGE_PAGE);
        // SAFETY: a fresh anonymous mapping; checked for MAP_FAILED.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), huge_len, prot, base | libc::MAP_HUGETLB, -1, 0) };
        let (p, len, backing) = if p != libc::MAP_FAILED {
            (p, huge_len, Backing::Hugepages)
        } else {
            // SAFETY: as above.
            let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, base, -1, 0) };
            if p == libc::MAP_FAILED {
                return Err(XskError::last(format!("mapping a {len}-byte UMEM")));
            }
            (p, len, Backing::Anonymous)
        };
        Ok(Umem {
            area: NonNull::new(p.cast()).expect("mmap returned a non-null address"),
            len,
            frames,
            backing,
        })
    }

    pub fn backing(&self) -> Backing {
        self.backing
    }

    pub fn frames(&self) -> u32 {
        self.frames
    }

    pub(crate) fn addr(&self) -> u64 {
        self.area.as_ptr() as u64
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn area(&self) -> *const u8 {
        self.area.as_ptr()
    }

    /// The `len` bytes at UMEM offset `addr` (from an RX descriptor).
    pub(crate) fn bytes(&self, addr: u64, len: u32) -> &[u8] {
        let (a, n) = (addr as usize, len as usize);
        assert!(
            a.checked_add(n).is_some_and(|end| end <= self.len),
            "descriptor outside the UMEM"
        );
        // SAFETY: inside the mapping (asserted); the kernel wrote these bytes
        // before publishing the descriptor and does not touch the frame until
        // it is returned through the fill ring.
        unsafe { std::slice::from_raw_parts(self.area.as_ptr().add(a), n) }
    }
}

impl Umem {
    /// The UMEM frame at offset `addr`, to fill for transmission.
    pub(crate) fn frame_mut(&mut self, addr: u64) -> &mut [u8] {
        let a = addr as usize;
        assert!(a + UMEM_FRAME as usize <= self.len, "frame outside the UMEM");
        // SAFETY: inside the mapping (asserted); a frame on the free list, which the kernel does not use.
        unsafe { std::slice::from_raw_parts_mut(self.area.as_ptr().add(a), UMEM_FRAME as usize) }
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; the socket using it is closed first.
        unsafe { libc::munmap(self.area.as_ptr().cast(), self.len) };
    }
}
