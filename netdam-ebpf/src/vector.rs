//! Vector ops of the ALU on NetDAM memory (PROTOCOL.md sections 3 and 4),
//! element by element through `bpf_loop` (Linux 5.17), so that the verifier
//! checks the element step once instead of once per element.

use aya_ebpf::{
    cty::c_void,
    helpers::generated::{bpf_loop, bpf_xdp_load_bytes, bpf_xdp_store_bytes},
    programs::XdpContext,
};
use netdam_common::{
    alu::{combine32, combine64},
    config::{MAX_PAYLOAD, MEM_CHUNK},
    wire::{Alu, Dtype},
};

use crate::{
    maps::{NETDAM_MEM, SCRATCH, SCRATCH_LEN},
    memory::{bounded_len, CopyFailed},
};

/// State of one piece's element loop: a run of elements inside one memory
/// chunk and inside the scratch buffer.
#[repr(C)]
struct Step {
    elem: *mut u8,
    scratch: *mut u8,
    /// Byte offset of the run in the chunk.
    off: u64,
    dtype: Dtype,
    alu: Alu,
}

const MAX_PIECES: u32 = (MAX_PAYLOAD / SCRATCH_LEN) as u32 + 2;
const CHUNK_MASK: u64 = MEM_CHUNK as u64 - 1;
const SCRATCH_MASK: u64 = SCRATCH_LEN as u64 - 1;

/// REDUCE: the vector at frame offset `frame_off` becomes alu(v[i], mem[i])
/// in place; memory is read only. `addr` and `len` are aligned to the
/// element width (validated).
#[inline(always)]
pub fn reduce_in_frame(
    ctx: &XdpContext,
    frame_off: u32,
    addr: u64,
    len: u32,
    dtype: Dtype,
    alu: Alu,
) -> Result<(), CopyFailed> {
    let scratch = SCRATCH.get_ptr_mut(0).ok_or(CopyFailed)?.cast::<u8>();
    let w = dtype.width();
    let mut done: u32 = 0;
    for _ in 0..MAX_PIECES {
        if done >= len {
            return Ok(());
        }
        let a = addr + done as u64;
        let chunk = (a / MEM_CHUNK as u64) as u32;
        let off = a & CHUNK_MASK;
        let to_end = MEM_CHUNK as u32 - off as u32;
        let left = len - done;
        let n = bounded_len(if left < to_end { left } else { to_end }, SCRATCH_LEN as u32);
        let elem = NETDAM_MEM.get_ptr_mut(chunk).ok_or(CopyFailed)?.cast::<u8>();
        let mut step = Step {
            elem,
            scratch,
            off,
            dtype,
            alu,
        };
        // SAFETY: the scratch buffer holds SCRATCH_LEN >= n bytes; the step
        // function masks every offset into its buffer; the callback is passed
        // as a function pointer, which the loader relocates (BPF_PSEUDO_FUNC).
        unsafe {
            if bpf_xdp_load_bytes(ctx.ctx, frame_off + done, scratch.cast(), n) != 0 {
                return Err(CopyFailed);
            }
            let cb = core::mem::transmute::<unsafe extern "C" fn(u64, *mut c_void) -> i64, *mut c_void>(reduce_step);
            if bpf_loop(n / w, cb, (&mut step as *mut Step).cast(), 0) < 0 {
                return Err(CopyFailed);
            }
            if bpf_xdp_store_bytes(ctx.ctx, frame_off + done, scratch.cast(), n) != 0 {
                return Err(CopyFailed);
            }
        }
        done += n;
    }
    if done >= len {
        Ok(())
    } else {
        Err(CopyFailed)
    }
}

/// Element `i` of a run: scratch[i] = alu(scratch[i], mem[off + i]).
unsafe extern "C" fn reduce_step(i: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `ctx` is the Step that reduce_in_frame passed to bpf_loop.
    let s = unsafe { &*(ctx as *const Step) };
    // SAFETY: offsets are masked into the chunk and the scratch buffer and
    // aligned to the element width; reads are unaligned-safe anyway.
    unsafe {
        match s.dtype {
            Dtype::I64 | Dtype::U64 => {
                let m = (s.off + i * 8) & CHUNK_MASK & !7;
                let v = (i * 8) & SCRATCH_MASK & !7;
                let mp = s.elem.add(m as usize).cast::<u64>();
                let vp = s.scratch.add(v as usize).cast::<u64>();
                let r = combine64(
                    s.dtype,
                    s.alu,
                    u64::from_le(vp.read_unaligned()),
                    u64::from_le(mp.read_volatile()),
                );
                vp.write_unaligned(r.to_le());
            }
            _ => {
                let m = (s.off + i * 4) & CHUNK_MASK & !3;
                let v = (i * 4) & SCRATCH_MASK & !3;
                let mp = s.elem.add(m as usize).cast::<u32>();
                let vp = s.scratch.add(v as usize).cast::<u32>();
                let r = combine32(
                    s.dtype,
                    s.alu,
                    u32::from_le(vp.read_unaligned()),
                    u32::from_le(mp.read_volatile()),
                );
                vp.write_unaligned(r.to_le());
            }
        }
    }
    0
}
