//! Vector ops of the ALU on NetDAM memory (PROTOCOL.md sections 3 and 4),
//! through `bpf_loop` (Linux 5.17), so that the verifier checks a loop body
//! once instead of once per element.
//!
//! A piece (a run inside one memory chunk and the scratch buffer) goes in
//! BLOCK-byte blocks, one `bpf_loop` callback per block with its lanes
//! unrolled, then element by element for the rest (fewer than BLOCK bytes).
//! Each piece runs in a global BPF function, which the verifier checks once
//! with unknown arguments; inlined into the callers, the callbacks were
//! checked again for every caller path that reached them, and a callback of
//! even 2 elements went past the 1,000,000-instruction budget
//! (docs/conformance.md).
//!
//! ACCUMULATE updates each element atomically (section 3): ADD, AND, OR and
//! XOR on integers with one BPF atomic instruction of the element's width;
//! MIN, MAX and f32 with a compare-and-swap on the aligned 8-byte word that
//! holds the element. Concurrent requests on other CPUs never lose an update.

use aya_ebpf::{
    cty::c_void,
    helpers::generated::{bpf_loop, bpf_xdp_load_bytes, bpf_xdp_store_bytes},
    programs::XdpContext,
};
use netdam_common::{
    alu::{combine32, combine32x2, combine64},
    config::MEM_CHUNK,
    wire::{Alu, Dtype},
};

use crate::{
    atomic::{cmpxchg64, AtomicOps},
    maps::{NETDAM_MEM, SCRATCH, SCRATCH_LEN},
    memory::{piece, CopyFailed, Piece, MAX_PIECES},
};

/// Bytes one block callback combines: 16 lanes of 4 bytes or 8 of 8.
const BLOCK: u32 = 128;
const _: () = assert!(SCRATCH_LEN.is_multiple_of(BLOCK as usize) && MEM_CHUNK.is_multiple_of(BLOCK as usize));

/// State of one piece's loops.
#[repr(C)]
struct Step {
    elem: *mut u8,
    scratch: *mut u8,
    /// Byte offset of the piece in the chunk.
    off: u64,
    /// Byte offset in the piece where the element loop starts (after the
    /// blocks, which do not read it).
    base: u64,
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

/// What `netdam_vector_piece` returns.
const PIECE_DONE: i32 = 0;
const PIECE_CONTENDED: i32 = 1;
const PIECE_FAILED: i32 = -1;

type StepFn = unsafe extern "C" fn(u64, *mut c_void) -> i64;

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
    let scratch = SCRATCH.get_ptr_mut(0).ok_or(CopyFailed)?;
    let code = (op as u32) << 16 | (alu as u32) << 8 | dtype as u32;
    let mut done: u32 = 0;
    for _ in 0..MAX_PIECES {
        if done >= len {
            return Ok(());
        }
        let Piece { chunk, off, n } = piece(addr, done, len);
        // SAFETY: the scratch buffer holds SCRATCH_LEN >= n bytes; the helper
        // checks the frame offset.
        if unsafe { bpf_xdp_load_bytes(ctx.ctx, frame_off + done, scratch.cast(), n) } != 0 {
            return Err(VectorFailed::Copy);
        }
        match netdam_vector_piece(code, chunk, off, n) {
            PIECE_DONE => {}
            PIECE_CONTENDED => return Err(VectorFailed::Contended),
            _ => return Err(VectorFailed::Copy),
        }
        // SAFETY: as above.
        if op == VectorOp::Reduce && unsafe { bpf_xdp_store_bytes(ctx.ctx, frame_off + done, scratch.cast(), n) } != 0 {
            return Err(VectorFailed::Copy);
        }
        done += n;
    }
    if done >= len {
        Ok(())
    } else {
        Err(VectorFailed::Copy)
    }
}

/// One piece of a vector op: `code` (op << 16 | alu << 8 | dtype) on the
/// `n` bytes in the scratch buffer and at byte `off` of memory chunk
/// `chunk`. Returns PIECE_DONE, PIECE_CONTENDED or PIECE_FAILED.
///
/// A global BPF function (exported, not inlined, scalar arguments only): the
/// verifier checks it, and its callbacks, once on its own.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn netdam_vector_piece(code: u32, chunk: u32, off: u32, n: u32) -> i32 {
    let (Some(dtype), Some(alu)) = (Dtype::from_u8(code as u8), Alu::from_u8((code >> 8) as u8)) else {
        return PIECE_FAILED;
    };
    let reduce = code >> 16 == VectorOp::Reduce as u32;
    let (Some(scratch), Some(elem)) = (SCRATCH.get_ptr_mut(0), NETDAM_MEM.get_ptr_mut(chunk)) else {
        return PIECE_FAILED;
    };
    let block = block_kind(reduce, dtype, alu, off);
    let blocks = if block.is_some() { n / BLOCK } else { 0 };
    let mut step = Step {
        elem: elem.cast(),
        scratch: scratch.cast(),
        off: off as u64,
        base: (blocks * BLOCK) as u64,
        dtype,
        alu,
        contended: false,
    };
    let ctx = (&mut step as *mut Step).cast::<c_void>();
    if blocks > 0 {
        let r = match block {
            Some(Block::Reduce32) => reduce_blocks32(blocks, ctx),
            Some(Block::Reduce32x2) => reduce_blocks32x2(blocks, ctx),
            Some(Block::Reduce64) => reduce_blocks64(blocks, ctx),
            Some(Block::Accumulate32) => accumulate_blocks32(blocks, ctx),
            _ => accumulate_blocks64(blocks, ctx),
        };
        if r < 0 {
            return PIECE_FAILED;
        }
    }
    let elems = (n - blocks * BLOCK) / dtype.width();
    if elems > 0 {
        let r = if reduce {
            reduce_elements(elems, ctx)
        } else {
            accumulate_elements(elems, ctx)
        };
        if r < 0 {
            return PIECE_FAILED;
        }
    }
    if step.contended {
        PIECE_CONTENDED
    } else {
        PIECE_DONE
    }
}

#[inline(always)]
fn as_callback(f: StepFn) -> *mut c_void {
    f as *mut c_void
}

/// `bpf_loop(n, callback, ctx)` (n >= 1), each callback in a function of
/// its own: the kernel inlines a bpf_loop call into a plain loop with a
/// direct call only where the call site always passes the same callback.
/// Calls of different functions stay apart (LLVM makes no indirect calls of
/// them), where one call with a chosen callback would not be inlined.
macro_rules! loop_fns {
    ($($name:ident => $callback:expr;)*) => {$(
        #[inline(never)]
        fn $name(n: u32, ctx: *mut c_void) -> i64 {
            // SAFETY: `ctx` is the Step of netdam_vector_piece, which
            // outlives the loop; the callback masks every offset into the
            // chunk and the scratch buffer. The callback is passed as a
            // function pointer, which the loader relocates (BPF_PSEUDO_FUNC).
            unsafe { bpf_loop(n, as_callback($callback), ctx, 0) }
        }
    )*};
}

loop_fns! {
    reduce_blocks32 => reduce_block32;
    reduce_blocks32x2 => reduce_block32x2;
    reduce_blocks64 => reduce_block64;
    accumulate_blocks32 => accumulate_block::<u32>;
    accumulate_blocks64 => accumulate_block::<u64>;
    reduce_elements => reduce_step;
    accumulate_elements => accumulate_step;
}

/// The block loops.
#[derive(Clone, Copy)]
enum Block {
    Reduce32,
    /// 4-byte elements two to a 64-bit word.
    Reduce32x2,
    Reduce64,
    Accumulate32,
    Accumulate64,
}

/// Integer ADD, AND, OR and XOR: ACCUMULATE applies them with one atomic
/// instruction per element, REDUCE to two 4-byte elements per 64-bit word.
#[inline(always)]
fn has_word_form(dtype: Dtype, alu: Alu) -> bool {
    dtype != Dtype::F32 && matches!(alu, Alu::Add | Alu::And | Alu::Or | Alu::Xor)
}

/// The block loop of an op on a piece at chunk offset `off`, or None where
/// every element needs a compare-and-swap loop of its own (ACCUMULATE MIN,
/// MAX, f32).
#[inline(always)]
fn block_kind(reduce: bool, dtype: Dtype, alu: Alu, off: u32) -> Option<Block> {
    let wide = dtype.width() == 8;
    match (reduce, wide) {
        // Word-wide only where memory words are 8-aligned like the scratch
        // buffer's: a u64 load needs the alignment.
        (true, false) if has_word_form(dtype, alu) && off.is_multiple_of(8) => Some(Block::Reduce32x2),
        (true, false) => Some(Block::Reduce32),
        (true, true) => Some(Block::Reduce64),
        (false, _) if !has_word_form(dtype, alu) => None,
        // AND, OR and XOR of a u64 word are those of its two 4-byte lanes,
        // and one atomic instruction on the word is atomic for both.
        (false, false) if alu.is_bitwise() && off.is_multiple_of(8) => Some(Block::Accumulate64),
        (false, false) => Some(Block::Accumulate32),
        (false, true) => Some(Block::Accumulate64),
    }
}

/// Memory and scratch lanes of block `i` of a piece; None cannot happen
/// (a piece's blocks stay inside its chunk), but the bound is the verifier's.
#[inline(always)]
fn block_at<T>(s: &Step, i: u64) -> Option<(*mut T, *mut T)> {
    let align = core::mem::size_of::<T>() as u64 - 1;
    let m = (s.off + i * BLOCK as u64) & CHUNK_MASK & !align;
    if m > (MEM_CHUNK as u32 - BLOCK) as u64 {
        return None;
    }
    let v = (i * BLOCK as u64) & SCRATCH_MASK & !(BLOCK as u64 - 1);
    // SAFETY: both offsets leave BLOCK bytes inside their map values and
    // are aligned to the lane width (`off` is, validated).
    Some(unsafe { (s.elem.add(m as usize).cast(), s.scratch.add(v as usize).cast()) })
}

/// v[j] = f(v[j], mem[j]) for every lane of a block. BPF is little-endian,
/// as the wire: lanes need no byte swap.
///
/// # Safety
/// `v` and `mem` point to BLOCK bytes, aligned to the lane width.
#[inline(always)]
unsafe fn combine_lanes<T: Copy>(v: *mut T, mem: *const T, f: impl Fn(T, T) -> T) {
    for j in 0..BLOCK as usize / core::mem::size_of::<T>() {
        // SAFETY: the caller's block; memory may change under us (other CPUs).
        unsafe {
            let p = v.add(j);
            p.write(f(p.read(), mem.add(j).read_volatile()));
        }
    }
}

/// Block `i` of a 4-byte-element REDUCE: v[j] = alu(v[j], mem[j]).
unsafe extern "C" fn reduce_block32(i: u64, ctx: *mut c_void) -> i64 {
    use {Alu::*, Dtype::*};
    // SAFETY: `ctx` is the Step that netdam_vector_piece passed to bpf_loop.
    let s = unsafe { &*(ctx as *const Step) };
    let Some((mem, v)) = block_at::<u32>(s, i) else {
        return 1;
    };
    macro_rules! with {
        ($d:expr, $a:expr) => {
            // SAFETY: a block from block_at.
            unsafe { combine_lanes(v, mem, |x, y| combine32($d, $a, x, y)) }
        };
    }
    // One arm per operator, so that each unrolled block has no branch on it.
    match (s.dtype, s.alu) {
        (F32, Add) => with!(F32, Add),
        (F32, Min) => with!(F32, Min),
        (F32, Max) => with!(F32, Max),
        (I32, Min) => with!(I32, Min),
        (I32, Max) => with!(I32, Max),
        (_, Add) => with!(U32, Add),
        (_, Min) => with!(U32, Min),
        (_, Max) => with!(U32, Max),
        (_, And) => with!(U32, And),
        (_, Or) => with!(U32, Or),
        (_, Xor) => with!(U32, Xor),
    }
    0
}

/// Block `i` of a 4-byte-element integer REDUCE of ADD, AND, OR or XOR on
/// 8-aligned memory: two elements per 64-bit word (`combine32x2`).
unsafe extern "C" fn reduce_block32x2(i: u64, ctx: *mut c_void) -> i64 {
    use {Alu::*, Dtype::*};
    // SAFETY: `ctx` is the Step that netdam_vector_piece passed to bpf_loop.
    let s = unsafe { &*(ctx as *const Step) };
    let Some((mem, v)) = block_at::<u64>(s, i) else {
        return 1;
    };
    macro_rules! with {
        ($a:expr) => {
            // SAFETY: a block from block_at, 8-aligned in memory (block_kind).
            unsafe { combine_lanes(v, mem, |x, y| combine32x2(U32, $a, x, y)) }
        };
    }
    match s.alu {
        Add => with!(Add),
        And => with!(And),
        Or => with!(Or),
        _ => with!(Xor),
    }
    0
}

/// Block `i` of an 8-byte-element REDUCE: v[j] = alu(v[j], mem[j]).
unsafe extern "C" fn reduce_block64(i: u64, ctx: *mut c_void) -> i64 {
    use {Alu::*, Dtype::*};
    // SAFETY: `ctx` is the Step that netdam_vector_piece passed to bpf_loop.
    let s = unsafe { &*(ctx as *const Step) };
    let Some((mem, v)) = block_at::<u64>(s, i) else {
        return 1;
    };
    macro_rules! with {
        ($d:expr, $a:expr) => {
            // SAFETY: a block from block_at.
            unsafe { combine_lanes(v, mem, |x, y| combine64($d, $a, x, y)) }
        };
    }
    match (s.dtype, s.alu) {
        (I64, Min) => with!(I64, Min),
        (I64, Max) => with!(I64, Max),
        (_, Add) => with!(U64, Add),
        (_, Min) => with!(U64, Min),
        (_, Max) => with!(U64, Max),
        (_, And) => with!(U64, And),
        (_, Or) => with!(U64, Or),
        (_, Xor) => with!(U64, Xor),
    }
    0
}

/// mem[j] <op>= v[j] for every lane of a block, each lane atomically.
///
/// # Safety
/// As `combine_lanes`.
#[inline(always)]
unsafe fn apply_lanes<T: AtomicOps>(mem: *mut T, v: *const T, apply: impl Fn(*mut T, T)) {
    for j in 0..BLOCK as usize / core::mem::size_of::<T>() {
        // SAFETY: the caller's block.
        unsafe { apply(mem.add(j), v.add(j).read()) }
    }
}

/// `*p = alu(*p, v)` in one atomic instruction, for an `has_word_form` alu.
///
/// # Safety
/// As `AtomicOps::add`.
#[inline(always)]
unsafe fn apply_atomic<T: AtomicOps>(p: *mut T, alu: Alu, v: T) {
    // SAFETY: the caller's pointer.
    unsafe {
        match alu {
            Alu::Add => T::add(p, v),
            Alu::And => T::and(p, v),
            Alu::Or => T::or(p, v),
            _ => T::xor(p, v),
        }
    }
}

/// Block `i` of an ACCUMULATE of an `has_word_form` alu on lanes of `T`.
unsafe extern "C" fn accumulate_block<T: AtomicOps>(i: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `ctx` is the Step that netdam_vector_piece passed to bpf_loop.
    let s = unsafe { &*(ctx as *const Step) };
    let Some((mem, v)) = block_at::<T>(s, i) else {
        return 1;
    };
    // SAFETY (every arm): a block from block_at, aligned to the lane width.
    // One arm per operator, so that each unrolled block has no branch on it.
    unsafe {
        match s.alu {
            Alu::Add => apply_lanes(mem, v, |p, x| T::add(p, x)),
            Alu::And => apply_lanes(mem, v, |p, x| T::and(p, x)),
            Alu::Or => apply_lanes(mem, v, |p, x| T::or(p, x)),
            _ => apply_lanes(mem, v, |p, x| T::xor(p, x)),
        }
    }
    0
}

/// Byte offsets in the chunk and in the scratch buffer of element `i` of
/// the element loop, masked into both and aligned to the element width `w`.
#[inline(always)]
fn element_at(s: &Step, i: u64, w: u64) -> (usize, usize) {
    let m = (s.off + s.base + i * w) & CHUNK_MASK & !(w - 1);
    let v = (s.base + i * w) & SCRATCH_MASK & !(w - 1);
    (m as usize, v as usize)
}

/// Element `i` of the element loop: scratch[i] = alu(scratch[i], mem[i]).
unsafe extern "C" fn reduce_step(i: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `ctx` is the Step that netdam_vector_piece passed to bpf_loop.
    let s = unsafe { &*(ctx as *const Step) };
    // SAFETY: offsets from element_at.
    unsafe {
        match s.dtype {
            Dtype::I64 | Dtype::U64 => {
                let (m, v) = element_at(s, i, 8);
                let mp = s.elem.add(m).cast::<u64>();
                let vp = s.scratch.add(v).cast::<u64>();
                vp.write(combine64(s.dtype, s.alu, vp.read(), mp.read_volatile()));
            }
            _ => {
                let (m, v) = element_at(s, i, 4);
                let mp = s.elem.add(m).cast::<u32>();
                let vp = s.scratch.add(v).cast::<u32>();
                vp.write(combine32(s.dtype, s.alu, vp.read(), mp.read_volatile()));
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

/// Element `i` of the element loop: mem[i] = alu(mem[i], scratch[i]), atomically.
unsafe extern "C" fn accumulate_step(i: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `ctx` is the Step that netdam_vector_piece passed to bpf_loop.
    let s = unsafe { &mut *(ctx as *mut Step) };
    let atomic = has_word_form(s.dtype, s.alu);
    // One branch per width, each with its own constant alignment mask: the
    // verifier must see the atomic's address aligned to its width.
    // SAFETY (both branches): offsets from element_at, aligned to the width.
    if matches!(s.dtype, Dtype::I64 | Dtype::U64) {
        let (m, v) = element_at(s, i, 8);
        let operand = unsafe { s.scratch.add(v).cast::<u64>().read() };
        if atomic {
            unsafe { apply_atomic(s.elem.add(m).cast::<u64>(), s.alu, operand) };
            return 0;
        }
        cas_update(s, m, operand)
    } else {
        let (m, v) = element_at(s, i, 4);
        let operand = unsafe { s.scratch.add(v).cast::<u32>().read() };
        if atomic {
            unsafe { apply_atomic(s.elem.add(m).cast::<u32>(), s.alu, operand) };
            return 0;
        }
        cas_update(s, m, operand as u64)
    }
}

/// mem[m] = alu(mem[m], operand) by compare-and-swap on the 8-byte word
/// that holds the element at chunk offset `m`; 0, or 1 (and `contended`) if
/// it kept losing.
#[inline(always)]
fn cas_update(s: &mut Step, m: usize, operand: u64) -> i64 {
    // Little-endian: a 4-byte element at the lower address is the low half.
    let mut u = Update {
        // SAFETY: the 8-aligned word inside the chunk (MEM_CHUNK is a multiple of 8).
        word: unsafe { s.elem.add(m & !7).cast::<u64>() },
        operand,
        shift: (m as u64 & 4) * 8,
        dtype: s.dtype,
        alu: s.alu,
        done: false,
    };
    // SAFETY: the attempt callback gets `u`, which outlives the loop.
    unsafe {
        bpf_loop(
            CAS_ATTEMPTS,
            as_callback(cas_attempt),
            (&mut u as *mut Update).cast(),
            0,
        );
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
