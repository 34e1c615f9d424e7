//! Copies between the frame and NetDAM memory.
//!
//! The memory is an array of MEM_CHUNK-byte elements. A range may cross
//! from one element into the next, so every copy goes in pieces that stay
//! inside one element and inside the per-CPU scratch buffer. The memory side
//! of each piece is a dynptr over the element, so the kernel checks its
//! offset at run time; the frame side is bounds-checked by the xdp helpers.

use aya_ebpf::{
    bindings::bpf_dynptr,
    helpers::generated::{
        bpf_dynptr_from_mem, bpf_dynptr_read, bpf_dynptr_write, bpf_xdp_load_bytes, bpf_xdp_store_bytes,
    },
    programs::XdpContext,
};
use netdam_common::config::{MAX_PAYLOAD, MEM_CHUNK};
use netdam_common::verifier::bounded_len;

use crate::maps::{NETDAM_MEM, SCRATCH, SCRATCH_LEN};

/// A copy step failed: the range left the memory, or a helper refused.
pub struct CopyFailed;

/// Most pieces a copy of MAX_PAYLOAD bytes can take: full scratch buffers
/// plus one more where a chunk boundary splits one of them.
pub const MAX_PIECES: u32 = (MAX_PAYLOAD / SCRATCH_LEN) as u32 + 2;

/// A run of [addr, addr+len) that stays inside one memory chunk and fits the scratch buffer.
pub struct Piece {
    pub chunk: u32,
    /// Byte offset of the run in its chunk.
    pub off: u32,
    /// Bytes of the run, 1..=SCRATCH_LEN.
    pub n: u32,
}

/// The piece that starts `done` bytes into [addr, addr+len); `done < len`.
#[inline(always)]
pub fn piece(addr: u64, done: u32, len: u32) -> Piece {
    let a = addr + done as u64;
    let off = (a % MEM_CHUNK as u64) as u32;
    Piece {
        chunk: (a / MEM_CHUNK as u64) as u32,
        off,
        n: piece_len(len - done, MEM_CHUNK as u32 - off),
    }
}

#[derive(Clone, Copy)]
enum Direction {
    FrameToMem,
    MemToFrame,
}

#[inline(always)]
pub fn frame_to_mem(ctx: &XdpContext, frame_off: u32, addr: u64, len: u32) -> Result<(), CopyFailed> {
    copy(ctx, frame_off, addr, len, Direction::FrameToMem)
}

#[inline(always)]
pub fn mem_to_frame(ctx: &XdpContext, frame_off: u32, addr: u64, len: u32) -> Result<(), CopyFailed> {
    copy(ctx, frame_off, addr, len, Direction::MemToFrame)
}

#[inline(always)]
fn copy(ctx: &XdpContext, frame_off: u32, addr: u64, len: u32, dir: Direction) -> Result<(), CopyFailed> {
    let scratch = SCRATCH.get_ptr_mut(0).ok_or(CopyFailed)?;
    let mut done: u32 = 0;
    for _ in 0..MAX_PIECES {
        if done >= len {
            return Ok(());
        }
        let Piece { chunk, off, n } = piece(addr, done, len);
        let elem = NETDAM_MEM.get_ptr_mut(chunk).ok_or(CopyFailed)?;
        // Zeroed, not uninit: the store over all of it is what lets Linux 6.1's
        // verifier make a new dynptr where the previous piece's was (it keeps
        // that one's marks on the stack slots; 6.2+ reinitialize them itself).
        let mut d = bpf_dynptr { __opaque: [0; 2] };
        // SAFETY: `elem` is a map value of MEM_CHUNK bytes and `scratch` one of
        // SCRATCH_LEN bytes; `n` is in 1..=SCRATCH_LEN; the helpers check the
        // dynptr offset and the frame offset themselves.
        let r = unsafe {
            if bpf_dynptr_from_mem(elem.cast(), MEM_CHUNK as u32, 0, &mut d) != 0 {
                return Err(CopyFailed);
            }
            match dir {
                Direction::FrameToMem => {
                    let r = bpf_xdp_load_bytes(ctx.ctx, frame_off + done, scratch.cast(), n);
                    if r != 0 {
                        r
                    } else {
                        bpf_dynptr_write(&d, off, scratch.cast(), n, 0)
                    }
                }
                Direction::MemToFrame => {
                    let r = bpf_dynptr_read(scratch.cast(), n, &d, off, 0);
                    if r != 0 {
                        r
                    } else {
                        bpf_xdp_store_bytes(ctx.ctx, frame_off + done, scratch.cast(), n)
                    }
                }
            }
        };
        if r != 0 {
            return Err(CopyFailed);
        }
        done += n;
    }
    if done >= len {
        Ok(())
    } else {
        Err(CopyFailed)
    }
}

/// min(left, to_chunk_end, SCRATCH_LEN), for 1 <= left and 1 <= to_chunk_end.
#[inline(always)]
fn piece_len(left: u32, to_chunk_end: u32) -> u32 {
    let n = if left < to_chunk_end { left } else { to_chunk_end };
    bounded_len(n, SCRATCH_LEN as u32)
}

/// The 8-byte word of NetDAM memory at `addr` (rounded down to 8-aligned;
/// `None` past the memory).
#[inline(always)]
pub fn word(addr: u64) -> Option<*mut u64> {
    let chunk = NETDAM_MEM.get_ptr_mut((addr / MEM_CHUNK as u64) as u32)?;
    let off = (addr & (MEM_CHUNK as u64 - 1) & !7) as usize;
    // SAFETY: `off` is masked into the chunk and 8-aligned.
    Some(unsafe { chunk.cast::<u8>().add(off).cast::<u64>() })
}
