//! The all-reduce of vectors in the caller's memory (what the C API and the
//! Python module run): each piece of the vector is copied into a scratch
//! area of the node's memory through the mmap, the ring reduces it there,
//! and the result is copied out.
//!
//! The scratch area, the same at every member: the sync area of the group
//! (`sync_len`, rounded up to 64 bytes), then three equal parts: input,
//! output, and the ring's cells (a completion cell and room for a held
//! partial per chunk, docs/PROTOCOL.md version 2). A vector larger than a
//! part runs as several rings, one a piece;
//! every piece but the last holds a whole multiple of members x E elements
//! (E: the ring's chunk, PROTOCOL.md section 6), so chunk k of a piece is
//! chunk k of the whole vector shifted by a multiple of N chunks, has the
//! same originator, and is folded in the same order: the result is
//! bit-exact with one ring over the whole vector (`chain::ring_result`).

use netdam_common::wire::{Alu, Dtype};
use thiserror::Error;

use super::{ring::RingPlan, sync_len, Allreduce, Collective, CollectiveError, MemberNode, Report};

/// Alignment of the parts in the scratch area (a cache line).
const PART_ALIGN: u64 = 64;

/// Where the scratch area lies at every member: inside region `rkey`, `len` bytes from `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scratch {
    pub rkey: u32,
    pub addr: u64,
    pub len: u64,
}

/// The input, output and cell parts of a scratch area for a group of `members`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parts {
    pub input_addr: u64,
    pub output_addr: u64,
    pub cells_addr: u64,
    /// Bytes of each part.
    pub len: u64,
}

#[derive(Debug, Error)]
pub enum StagedError {
    #[error(
        "the scratch area of {len} bytes is too small for one piece of {elems} {dtype} elements \
         ({members} members x {chunk_elems} per chunk): it needs {needed} bytes (the sync area, \
         rounded up to {PART_ALIGN}, then equal input, output and cell parts)"
    )]
    ScratchTooSmall {
        len: u64,
        needed: u64,
        elems: u64,
        dtype: &'static str,
        members: usize,
        chunk_elems: u32,
    },
    #[error("the scratch area [{addr:#x}, +{len:#x}) does not fit the node's {size}-byte NetDAM memory")]
    ScratchOutside { addr: u64, len: u64, size: u64 },
    #[error(
        "the scratch area of {len} bytes leaves no room for the input, output and cell parts after the sync area \
         of {members} members ({sync} bytes, rounded up to {PART_ALIGN})"
    )]
    NoParts { len: u64, members: usize, sync: u64 },
    #[error(
        "the scratch area starts at {scratch:#x} but the collective's sync area is at {sync:#x}: \
         they must be the same (CollectiveConfig::sync_addr)"
    )]
    SyncElsewhere { scratch: u64, sync: u64 },
    #[error("the scratch area at {0:#x} is not 8-byte aligned (its sync area holds u64 slots)")]
    Misaligned(u64),
    #[error("the receive buffer's {bytes} bytes are not a whole number of {width}-byte {dtype} elements")]
    Length {
        bytes: usize,
        width: u32,
        dtype: &'static str,
    },
    #[error("the send buffer has {send} bytes and the receive buffer {recv}: they must be the same")]
    Mismatch { send: usize, recv: usize },
    #[error("{0}")]
    Collective(#[from] CollectiveError),
}

impl Scratch {
    /// Checks that the area is aligned, fits a node memory of `mem_len`
    /// bytes and has room for the parts after the sync area of `members`.
    pub fn check(&self, members: usize, mem_len: u64) -> Result<Parts, StagedError> {
        if !self.addr.is_multiple_of(8) {
            return Err(StagedError::Misaligned(self.addr));
        }
        if self.addr.checked_add(self.len).is_none_or(|end| end > mem_len) {
            return Err(StagedError::ScratchOutside {
                addr: self.addr,
                len: self.len,
                size: mem_len,
            });
        }
        self.parts(members).filter(|h| h.len > 0).ok_or(StagedError::NoParts {
            len: self.len,
            members,
            sync: sync_len(members),
        })
    }

    /// The parts of this area for a group of `members`; `None` when the
    /// sync area leaves no room for them.
    pub fn parts(&self, members: usize) -> Option<Parts> {
        let sync = sync_len(members).next_multiple_of(PART_ALIGN);
        let part = (self.len.checked_sub(sync)? / 3) / PART_ALIGN * PART_ALIGN;
        let input_addr = self.addr + sync;
        Some(Parts {
            input_addr,
            output_addr: input_addr + part,
            cells_addr: input_addr + 2 * part,
            len: part,
        })
    }
}

/// Elements of each piece of a `count`-element vector staged through parts
/// of `part` bytes by a ring chunked as `plan` (its members, width, chunk
/// elements and cell stride): the whole vector when it (and its cells) fit
/// a part, else the most whole multiples of members x chunk_elems that
/// fit; `None` when not even one multiple fits.
pub fn piece_elems(count: u64, plan: &RingPlan, part: u64) -> Option<u64> {
    let (members, chunk_elems, width) = (plan.members, plan.chunk_elems, plan.width);
    let cells_fit = part / plan.cell_stride * chunk_elems as u64;
    let fits = (part / width as u64).min(cells_fit);
    if count <= fits {
        return Some(count);
    }
    let unit = members as u64 * chunk_elems as u64;
    match fits / unit * unit {
        0 => None,
        n => Some(n),
    }
}

/// Bytes a scratch area needs for pieces of one multiple of members x
/// chunk_elems of `plan` (or of the whole vector, if smaller): the cells of
/// its chunks are the largest part.
pub fn scratch_needed(count: u64, plan: &RingPlan) -> u64 {
    let (members, chunk_elems) = (plan.members, plan.chunk_elems as u64);
    let elems = count.min(members as u64 * chunk_elems);
    let cells = elems.div_ceil(chunk_elems) * plan.cell_stride;
    sync_len(members).next_multiple_of(PART_ALIGN) + 3 * cells.next_multiple_of(PART_ALIGN)
}

/// The all-reduce of `recv.len()` bytes of `dtype` elements with `alu`:
/// the input is `send`, or `recv` itself when `send` is `None` (in place);
/// the result lands in `recv`. Every member calls it with the same length,
/// dtype, alu and scratch area. One report per piece; none for an empty vector.
pub fn allreduce<N: MemberNode>(
    coll: &mut Collective<N>,
    scratch: &Scratch,
    send: Option<&[u8]>,
    recv: &mut [u8],
    dtype: Dtype,
    alu: Alu,
) -> Result<Vec<Report>, StagedError> {
    let width = dtype.width();
    if !recv.len().is_multiple_of(width as usize) {
        return Err(StagedError::Length {
            bytes: recv.len(),
            width,
            dtype: dtype.name(),
        });
    }
    if let Some(s) = send.filter(|s| s.len() != recv.len()) {
        return Err(StagedError::Mismatch {
            send: s.len(),
            recv: recv.len(),
        });
    }
    let sync = coll.config().sync_addr;
    if sync != scratch.addr {
        return Err(StagedError::SyncElsewhere {
            scratch: scratch.addr,
            sync,
        });
    }
    let members = coll.group().members.len();
    let parts = scratch.check(members, coll.node().mem_len() as u64)?;
    let count = (recv.len() / width as usize) as u64;
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut op = Allreduce {
        rkey: scratch.rkey,
        input_addr: 0,
        output_addr: 0,
        cells_addr: 0,
        count,
        dtype,
        alu,
    };
    let plan = coll.plan(&op)?;
    let chunk_elems = plan.chunk_elems;
    let too_small = || StagedError::ScratchTooSmall {
        len: scratch.len,
        needed: scratch_needed(count, &plan),
        elems: count.min(members as u64 * chunk_elems as u64),
        dtype: dtype.name(),
        members,
        chunk_elems,
    };
    let piece = piece_elems(count, &plan, parts.len).ok_or_else(too_small)?;
    op.input_addr = parts.input_addr;
    op.output_addr = parts.output_addr;
    op.cells_addr = parts.cells_addr;
    let piece_bytes = (piece * width as u64) as usize;
    let mut reports = Vec::new();
    for start in (0..recv.len()).step_by(piece_bytes) {
        let range = start..recv.len().min(start + piece_bytes);
        op.count = (range.len() / width as usize) as u64;
        let input = match send {
            Some(s) => &s[range.clone()],
            None => &recv[range.clone()],
        };
        coll.node().write(op.input_addr, input).map_err(CollectiveError::from)?;
        reports.push(coll.allreduce(&op)?);
        coll.node()
            .read_into(op.output_addr, &mut recv[range])
            .map_err(CollectiveError::from)?;
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use netdam_common::chain::{ring_chunk_elems, ring_result};

    use super::*;
    use crate::collective::inputs::member_input;

    #[test]
    fn parts_follow_the_sync_area_rounded_up_and_are_aligned() {
        // 3 members: a 32-byte sync area, rounded up to 64.
        let s = Scratch {
            rkey: 1,
            addr: 0x1000,
            len: 64 + 3 * 1000 + 7,
        };
        let h = s.parts(3).unwrap();
        assert_eq!(h.input_addr, 0x1000 + 64);
        assert_eq!(h.len, 960, "each part rounded down to 64 bytes");
        assert_eq!(h.output_addr, h.input_addr + 960);
        assert_eq!(h.cells_addr, h.output_addr + 960);
        assert!(h.cells_addr + h.len <= s.addr + s.len);
        // 8 members: 72 bytes of sync area take 128.
        assert_eq!(Scratch { len: 128, ..s }.parts(8).unwrap().len, 0);
        assert_eq!(Scratch { len: 127, ..s }.parts(8), None);
        // What check refuses: misaligned, outside the memory, no parts.
        assert_eq!(s.check(3, 0x1000 + s.len).unwrap(), h);
        let refused = |s: Scratch, members| s.check(members, 0x1000 + 8192).unwrap_err().to_string();
        assert!(refused(Scratch { addr: 0x1004, ..s }, 3).contains("0x1004 is not 8-byte aligned"));
        assert!(refused(Scratch { len: 8193, ..s }, 3).contains("does not fit the node's 12288-byte"));
        let e = refused(Scratch { len: 128 + 191, ..s }, 8);
        assert!(e.contains("no room for the input, output and cell parts"), "{e}");
        assert_eq!(Scratch { len: 128 + 192, ..s }.check(8, 1 << 20).unwrap().len, 64);
    }

    /// A plan of `members` x `e` elements of `w` bytes, cells of 16 + e x w.
    fn unit(members: usize, e: u32, w: u32) -> RingPlan {
        RingPlan {
            members,
            width: w,
            chunk_elems: e,
            count: 0,
            cell_stride: 16 + (e * w) as u64,
        }
    }

    #[test]
    fn pieces_are_whole_multiples_of_members_times_chunk() {
        // 3 members, E = 100: the unit is 300 elements; a cell takes 16 + 400 bytes.
        assert_eq!(
            piece_elems(1000, &unit(3, 100, 4), 4160),
            Some(1000),
            "the whole vector and its 10 cells fit a part"
        );
        assert_eq!(
            piece_elems(1000, &unit(3, 100, 4), 4159),
            Some(900),
            "9 cells: three units"
        );
        assert_eq!(piece_elems(1001, &unit(3, 100, 4), 4200), Some(900));
        assert_eq!(piece_elems(10_000, &unit(3, 100, 4), 1248), Some(300));
        assert_eq!(
            piece_elems(10_000, &unit(3, 100, 4), 1247),
            None,
            "not one unit's cells fit"
        );
        assert_eq!(
            piece_elems(299, &unit(3, 100, 8), 3 * 816),
            Some(299),
            "smaller than a unit, but fits"
        );
        assert_eq!(piece_elems(0, &unit(3, 100, 4), 0), Some(0));
        // What scratch_needed asks for is enough, and one byte less is not.
        for (count, members, e, w) in [(10_000u64, 3usize, 100u32, 4u32), (50, 2, 344, 8), (1 << 20, 8, 172, 4)] {
            let plan = unit(members, e, w);
            let needed = scratch_needed(count, &plan);
            let s = Scratch {
                rkey: 0,
                addr: 0,
                len: needed,
            };
            let part = s.parts(members).unwrap().len;
            assert!(piece_elems(count, &plan, part).is_some(), "{count} {members} {e} {w}");
            let less = Scratch { len: needed - 1, ..s }.parts(members).map_or(0, |h| h.len);
            assert_eq!(piece_elems(count, &plan, less), None, "{count} {members} {e} {w}");
        }
    }

    /// The ring's result of the whole vector is the ring's result of each
    /// piece, put together: f32 sums of many magnitudes would differ in any
    /// other chunking.
    #[test]
    fn pieces_reduce_bit_exact_with_one_ring_over_the_whole_vector() {
        for members in [2usize, 3, 5, 8] {
            for (dtype, alu) in [(Dtype::F32, Alu::Add), (Dtype::I64, Alu::Add), (Dtype::U32, Alu::Xor)] {
                let w = dtype.width();
                let e = ring_chunk_elems(1500, members, w);
                let count = 7 * members as u64 * e as u64 + 13;
                let inputs: Vec<Vec<u8>> = (0..members)
                    .map(|r| {
                        let mut v = vec![0u8; (count * w as u64) as usize];
                        member_input(42, r, dtype, 0, &mut v);
                        v
                    })
                    .collect();
                let views: Vec<&[u8]> = inputs.iter().map(|v| &v[..]).collect();
                let mut whole = vec![0u8; views[0].len()];
                ring_result(dtype, alu, &views, e, 0, &mut whole);
                // Parts of 2 units' cells and a bit: pieces of 2 units, the last shorter.
                let plan = RingPlan::new(members, dtype, count, 1500).unwrap();
                let part = 2 * members as u64 * plan.cell_stride + 5;
                let piece = piece_elems(count, &plan, part).unwrap();
                assert_eq!(piece, 2 * members as u64 * e as u64);
                let mut pieced = vec![0u8; whole.len()];
                let pb = (piece * w as u64) as usize;
                for start in (0..whole.len()).step_by(pb) {
                    let r = start..whole.len().min(start + pb);
                    let p: Vec<&[u8]> = views.iter().map(|v| &v[r.clone()]).collect();
                    // Each piece is a ring of its own, its first element at 0.
                    ring_result(dtype, alu, &p, e, 0, &mut pieced[r]);
                }
                assert!(pieced == whole, "{members} members, {}", dtype.name());
                if dtype == Dtype::F32 && members > 2 {
                    // The check can fail: a piece off the unit folds f32 in
                    // another order (of 3 or more: a + b is b + a exactly).
                    let off = pb - w as usize;
                    let mut shifted = vec![0u8; whole.len()];
                    for start in (0..whole.len()).step_by(off) {
                        let r = start..whole.len().min(start + off);
                        let p: Vec<&[u8]> = views.iter().map(|v| &v[r.clone()]).collect();
                        ring_result(dtype, alu, &p, e, 0, &mut shifted[r]);
                    }
                    assert!(
                        shifted != whole,
                        "{members} members: another chunking gave the same bits"
                    );
                }
            }
        }
    }
}
