//! Vector ops of the ALU on NetDAM memory (PROTOCOL.md sections 3 and 4),
//! element by element through `bpf_loop` (Linux 5.17), so that the verifier
//! checks the element step once instead of once per element.
//!
//! ACCUMULATE updates each element atomically (section 3) with a
//! compare-and-swap on the aligned 8-byte word that holds it, so concurrent
//! requests on other CPUs never lose an update, for 4-byte elements too.

use aya_ebpf::{
    cty::c_void,
    helpers::generated::{bpf_loop, bpf_xdp_load_bytes, bpf_xdp_store_bytes},
    programs::XdpContext,
};
use netdam_common::{
    alu::{combine32, combine64},
    config::MEM_CHUNK,
    wire::{Alu, Dtype},
};

use crate::{
    atomic::cmpxchg64,
    maps::{NETDAM_MEM, SCRATCH, SCRATCH_LEN},
    memory::{piece, CopyFailed, Piece, MAX_PIECES},
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
    /// Set by an ACCUMULATE step whose compare-and-swap kept losing.
    contended: bool,
}

/// Which vector op a piece runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum VectorOp {
    /// v[i] = alu(v[i], mem[i]) in the frame; memory unchanged.
    Reduce,
    /// mem[i] = alu(mem[i], v[i]), atomically per element.
    Accumulate,
}

/// Why a vector op stopped.
pub enum VectorFailed {
    /// A frame or memory access failed (cannot happen after validation).
    Copy,
    /// An element's compare-and-swap lost to other CPUs every time.
    Contended,
}

impl From<CopyFailed> for VectorFailed {
    fn from(_: CopyFailed) -> Self {
        VectorFailed::Copy
    }
}

const CHUNK_MASK: u64 = MEM_CHUNK as u64 - 1;
const SCRATCH_MASK: u64 = SCRATCH_LEN as u64 - 1;

/// Runs `op` on the vector at frame offset `frame_off` and memory at
/// `addr`: REDUCE writes the result back into the frame, ACCUMULATE into
/// memory. `addr` and `len` are aligned to the element width (validated).
#[inline(always)]
pub fn run(
    ctx: &XdpContext,
    op: VectorOp,
    frame_off: u32,
    addr: u64,
    len: u32,
    dtype: Dtype,
    alu: Alu,
) -> Result<(), VectorFailed> {
    let scratch = SCRATCH.get_ptr_mut(0).ok_or(CopyFailed)?.cast::<u8>();
    let w = dtype.width();
    let mut done: u32 = 0;
    for _ in 0..MAX_PIECES {
        if done >= len {
            return Ok(());
        }
        let Piece { chunk, off, n } = piece(addr, done, len);
        let off = off as u64;
        let elem = NETDAM_MEM.get_ptr_mut(chunk).ok_or(CopyFailed)?.cast::<u8>();
        let mut step = Step {
            elem,
            scratch,
            off,
            dtype,
            alu,
            contended: false,
        };
        // SAFETY: the scratch buffer holds SCRATCH_LEN >= n bytes; the step
        // function masks every offset into its buffer; the callback is passed
        // as a function pointer, which the loader relocates (BPF_PSEUDO_FUNC).
        unsafe {
            if bpf_xdp_load_bytes(ctx.ctx, frame_off + done, scratch.cast(), n) != 0 {
                return Err(VectorFailed::Copy);
            }
            let step_fn = match op {
                VectorOp::Reduce => reduce_step as unsafe extern "C" fn(u64, *mut c_void) -> i64,
                VectorOp::Accumulate => accumulate_step,
            };
            let cb = core::mem::transmute::<unsafe extern "C" fn(u64, *mut c_void) -> i64, *mut c_void>(step_fn);
            if bpf_loop(n / w, cb, (&mut step as *mut Step).cast(), 0) < 0 {
                return Err(VectorFailed::Copy);
            }
            if step.contended {
                return Err(VectorFailed::Contended);
            }
            if op == VectorOp::Reduce && bpf_xdp_store_bytes(ctx.ctx, frame_off + done, scratch.cast(), n) != 0 {
                return Err(VectorFailed::Copy);
            }
        }
        done += n;
    }
    if done >= len {
        Ok(())
    } else {
        Err(VectorFailed::Copy)
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

/// Compare-and-swap attempts per element before ACCUMULATE gives up. Each
/// failed attempt means another CPU changed that very word in between, so
/// giving up needs 65536 updates of one word by others during one attempt
/// loop. The bound costs nothing to verify: the attempt is a bpf_loop callback.
const CAS_ATTEMPTS: u32 = 1 << 16;

/// One element's update: the 8-byte word that holds it, and its operand.
#[repr(C)]
struct Update {
    word: *mut u64,
    operand: u64,
    /// 0 or 32: where a 4-byte element sits in the word.
    shift: u64,
    dtype: Dtype,
    alu: Alu,
    done: bool,
}

/// Element `i` of a run: mem[off + i] = alu(mem[off + i], scratch[i]), atomically.
unsafe extern "C" fn accumulate_step(i: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `ctx` is the Step that `run` passed to bpf_loop.
    let s = unsafe { &mut *(ctx as *mut Step) };
    let wide = matches!(s.dtype, Dtype::I64 | Dtype::U64);
    let w: u64 = if wide { 8 } else { 4 };
    let m = (s.off + i * w) & CHUNK_MASK & !(w - 1);
    let v = (i * w) & SCRATCH_MASK & !(w - 1);
    // SAFETY: offsets masked into the scratch buffer and the chunk; the word
    // is 8-aligned inside the chunk (MEM_CHUNK is a multiple of 8).
    let mut u = unsafe {
        let p = s.scratch.add(v as usize);
        let operand = if wide {
            u64::from_le(p.cast::<u64>().read_unaligned())
        } else {
            u32::from_le(p.cast::<u32>().read_unaligned()) as u64
        };
        // Little-endian: a 4-byte element at the lower address is the low half.
        Update {
            word: s.elem.add((m & !7) as usize).cast::<u64>(),
            operand,
            shift: (m & 4) * 8,
            dtype: s.dtype,
            alu: s.alu,
            done: false,
        }
    };
    // SAFETY: the attempt callback gets `u`, which outlives the loop.
    unsafe {
        let cb = core::mem::transmute::<unsafe extern "C" fn(u64, *mut c_void) -> i64, *mut c_void>(cas_attempt);
        bpf_loop(CAS_ATTEMPTS, cb, (&mut u as *mut Update).cast(), 0);
    }
    if u.done {
        0
    } else {
        s.contended = true;
        1
    }
}

/// One compare-and-swap attempt of an element's update; stops the loop once it took.
unsafe extern "C" fn cas_attempt(_attempt: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `ctx` is the Update that accumulate_step passed to bpf_loop.
    let u = unsafe { &mut *(ctx as *mut Update) };
    // SAFETY: `word` is an 8-aligned u64 in the memory map (accumulate_step).
    let old = unsafe { u.word.read_volatile() };
    let new = if matches!(u.dtype, Dtype::I64 | Dtype::U64) {
        combine64(u.dtype, u.alu, old, u.operand)
    } else {
        let e = combine32(u.dtype, u.alu, (old >> u.shift) as u32, u.operand as u32);
        (old & !(0xFFFF_FFFFu64 << u.shift)) | ((e as u64) << u.shift)
    };
    // SAFETY: as above.
    if new == old || unsafe { cmpxchg64(u.word, old, new) } == old {
        u.done = true;
        return 1;
    }
    0
}
