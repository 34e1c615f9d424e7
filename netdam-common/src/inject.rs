//! The injector's job: what the collective engine asks the `netdam_inject`
//! XDP program to send. Run through BPF_PROG_TEST_RUN with live frames, the
//! program takes one queued request per repeat and builds its CHAIN packet
//! straight from NetDAM memory: the header template below with the
//! request's own fields patched in, then the chunk copied from the input.
//! One system call sends a whole batch.

/// Room for the headers: Ethernet, IPv4 (IHL 5), UDP, NetDAM, SR with 15 segments.
pub const INJECT_HEADERS: usize = 256;
/// Requests one batch holds at most.
pub const INJECT_QUEUE: usize = 1024;

/// Offsets of the fields the program patches, in a frame with IHL 5.
pub mod at {
    pub const IP_TOTAL_LEN: u32 = 16;
    pub const IP_CHECKSUM: u32 = 24;
    pub const UDP_LEN: u32 = 38;
    const NETDAM: u32 = 42;
    pub const SEQ: u32 = NETDAM + 8;
    pub const ADDR: u32 = NETDAM + 16;
    pub const LEN: u32 = NETDAM + 28;
    pub const SR_DST_ADDR: u32 = NETDAM + 32 + 8;
}

/// Index 0 of the NETDAM_INJECT map.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct InjectJob {
    /// Queue entries taken so far: the program's atomic cursor.
    pub taken: u64,
    /// Queue entries of this batch.
    pub count: u32,
    /// Bytes of `headers` (Ethernet to the last segment).
    pub hdr_len: u32,
    pub seq_base: u32,
    /// Request i carries chunk first_chunk + i * stride.
    pub first_chunk: u32,
    pub stride: u32,
    /// Bytes of a whole chunk (E x width).
    pub chunk_bytes: u32,
    /// IPv4 header checksums of a whole chunk's packet and of the last,
    /// shorter chunk's (network order).
    pub csum_whole: u16,
    pub csum_last: u16,
    pub _pad: u32,
    /// Bytes of the whole vector.
    pub total_bytes: u64,
    pub input_addr: u64,
    pub output_addr: u64,
    /// Chunk k's cell is at cells_addr + k * cell_stride; its address ends
    /// the headers (the version-2 SR header's trailer, after the call word).
    pub cells_addr: u64,
    pub cell_stride: u64,
    /// The packet of a whole chunk, up to its payload.
    pub headers: [u8; INJECT_HEADERS],
    /// Request indices to send, `count` of them.
    pub queue: [u32; INJECT_QUEUE],
}

impl InjectJob {
    /// The chunk request `i` carries.
    #[inline(always)]
    pub fn chunk(&self, i: u32) -> u64 {
        self.first_chunk as u64 + i as u64 * self.stride as u64
    }

    /// Byte offset in the vector and length of request `i`'s chunk, or
    /// `None` past the vector.
    #[inline(always)]
    pub fn span(&self, i: u32) -> Option<(u64, u32)> {
        let off = self.chunk(i) * self.chunk_bytes as u64;
        if off >= self.total_bytes {
            return None;
        }
        let left = self.total_bytes - off;
        let len = if left < self.chunk_bytes as u64 {
            left as u32
        } else {
            self.chunk_bytes
        };
        Some((off, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_follow_the_members_chunks() {
        // SAFETY: all-zero is a valid InjectJob (integers and byte arrays).
        let mut j: InjectJob = unsafe { core::mem::zeroed() };
        j.first_chunk = 1;
        j.stride = 4;
        j.chunk_bytes = 1376;
        j.total_bytes = 10 * 1376 - 100;
        // Member 1 of 4: chunks 1, 5, 9 (the last is 100 bytes short).
        assert_eq!(j.span(0), Some((1376, 1376)));
        assert_eq!(j.span(1), Some((5 * 1376, 1376)));
        assert_eq!(j.span(2), Some((9 * 1376, 1276)));
        assert_eq!(j.span(3), None);
        assert_eq!(at::SEQ, 50);
        assert_eq!(at::SR_DST_ADDR, 82);
    }
}
