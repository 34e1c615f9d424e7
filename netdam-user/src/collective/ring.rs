//! The ring all-reduce of PROTOCOL.md section 6 as datagrams: the plan
//! (fixed chunking, who originates what) and the CHAIN request of a chunk,
//! a version-2 CHAIN (docs/PROTOCOL.md, version 2) with the chunk's cell.

use std::net::Ipv4Addr;

use netdam_common::{
    chain::{
        ring_cell_stride, ring_chunk_elems, ring_hop, ring_member, ring_sr_len, trailer_bytes, HopOp, Segment, SrFixed,
    },
    wire::{Alu, Dtype, VERSION_2},
    NetdamHdr, Opcode,
};

/// The fixed chunking of one all-reduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingPlan {
    pub members: usize,
    pub width: u32,
    /// Elements per chunk, E.
    pub chunk_elems: u32,
    /// Elements of the whole vector.
    pub count: u64,
    /// Bytes from one chunk's cell to the next: the group's (`ring_cell_stride`).
    pub cell_stride: u64,
}

impl RingPlan {
    /// `None` when the MTU leaves no room for one element.
    pub fn new(members: usize, dtype: Dtype, count: u64, mtu: u32) -> Option<RingPlan> {
        let width = dtype.width();
        let room = mtu.checked_sub(60 + ring_sr_len(members) as u32)?;
        let chunk_elems = ring_chunk_elems(mtu, members, width);
        (room >= width).then_some(RingPlan {
            members,
            width,
            chunk_elems,
            count,
            cell_stride: ring_cell_stride(mtu, members),
        })
    }

    pub fn chunks(&self) -> u64 {
        self.count.div_ceil(self.chunk_elems as u64)
    }

    /// The chunks member `rank` originates: k mod N = rank.
    pub fn chunks_of(&self, rank: usize) -> impl Iterator<Item = u64> {
        (rank as u64..self.chunks()).step_by(self.members)
    }

    /// Bytes of the cell area: a cell per chunk.
    pub fn cells_len(&self) -> u64 {
        self.chunks() * self.cell_stride
    }

    /// Bytes of the cell area of `bytes` of `dtype` on a ring of `members` at
    /// `mtu`, for sizing a node's memory (0 when the MTU leaves no room).
    pub fn cells_len_of(members: usize, dtype: Dtype, bytes: u64, mtu: u32) -> u64 {
        RingPlan::new(members, dtype, bytes / dtype.width() as u64, mtu).map_or(0, |p| p.cells_len())
    }

    /// Byte offset and length of chunk `k` in the vector.
    pub fn span(&self, k: u64) -> (u64, usize) {
        let first = k * self.chunk_elems as u64;
        let elems = (self.count - first).min(self.chunk_elems as u64);
        (first * self.width as u64, (elems * self.width as u64) as usize)
    }
}

/// What every chunk request of one all-reduce shares.
#[derive(Clone, Debug)]
pub struct RingRequest<'a> {
    pub group: &'a [Ipv4Addr],
    pub port: u16,
    pub origin: (Ipv4Addr, u16),
    pub rkey: u32,
    pub input_addr: u64,
    pub output_addr: u64,
    /// The cell area: chunk k's cell at cells_addr + k * stride.
    pub cells_addr: u64,
    pub dtype: Dtype,
    pub alu: Alu,
    /// The call word every hop compares (docs/PROTOCOL.md, version 2).
    pub call: u32,
    pub generation: u32,
    /// Every hop a NOP instead of the ring's ops (`CollectiveConfig::nop_hops`).
    pub nop_hops: bool,
}

impl RingRequest<'_> {
    /// Appends the UDP payload of chunk `k`'s request (NetDAM header, SR
    /// header, ring program, call word and cell address) to `buf`, without the chunk's
    /// data, which the caller appends; returns the member to send it to (o + 1).
    pub fn chunk_header(&self, plan: &RingPlan, k: u64, seq: u32, buf: &mut Vec<u8>) -> Ipv4Addr {
        self.hop_header(plan, k, seq, self.origin, 0, buf)
    }

    /// The same as `chunk_header` for chunk `k` originated at `origin`,
    /// at SR idx `idx`: the packet as the node of segment idx - 1 forwards it.
    /// Returns the member of segment `idx`.
    pub fn hop_header(
        &self,
        plan: &RingPlan,
        k: u64,
        seq: u32,
        origin: (Ipv4Addr, u16),
        idx: usize,
        buf: &mut Vec<u8>,
    ) -> Ipv4Addr {
        let n = plan.members;
        let originator = (k % n as u64) as usize;
        let (off, len) = plan.span(k);
        let hops = 2 * (n - 1);
        let mut h = NetdamHdr::request(Opcode::Chain);
        h.version = VERSION_2;
        h.dtype = self.dtype as u8;
        h.alu = self.alu as u8;
        h.sr_len = ring_sr_len(n) as u8;
        h.set_seq(seq);
        h.set_tag(self.generation);
        h.set_addr(self.input_addr + off);
        h.set_rkey(self.rkey);
        h.set_len(len as u16);
        buf.extend_from_slice(&h.to_bytes());
        let sr = SrFixed::new(
            hops as u8,
            idx as u8,
            u32::from(origin.0),
            origin.1,
            self.output_addr + off,
        );
        buf.extend_from_slice(&sr.to_bytes());
        for i in 0..hops {
            let member = self.group[ring_member(originator, i, n)];
            let op = if self.nop_hops { HopOp::Nop } else { ring_hop(i, n) };
            buf.extend_from_slice(&Segment::new(u32::from(member), self.port, op).to_bytes());
        }
        let cell = (self.cells_addr + k * plan.cell_stride) as u32;
        buf.extend_from_slice(&trailer_bytes(self.call, cell));
        self.group[ring_member(originator, idx, n)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_chunks_and_spans() {
        // N = 4, MTU 1500, i32: E = (1500 - 60 - 72) / 4 = 342 (version 2's sr_len).
        let p = RingPlan::new(4, Dtype::I32, 1000, 1500).unwrap();
        assert_eq!(p.chunk_elems, 342);
        assert_eq!(p.chunks(), 3);
        assert_eq!(p.span(2), (684 * 4, (1000 - 684) * 4));
        assert_eq!((p.cell_stride, p.cells_len()), (24 + 1368, 3 * 1392));
        // The same stride for every dtype of the group.
        assert_eq!(
            RingPlan::new(4, Dtype::U64, 1, 1500).unwrap().cell_stride,
            p.cell_stride
        );
        assert_eq!(p.chunks_of(1).collect::<Vec<_>>(), [1]);
        assert_eq!(p.chunks_of(3).count(), 0);
        let one = RingPlan::new(2, Dtype::U64, 1, 1500).unwrap();
        assert_eq!((one.chunks(), one.span(0)), (1, (0, 8)));
        assert!(RingPlan::new(8, Dtype::U64, 1, 180).is_none());
    }

    #[test]
    fn chunk_header_is_the_ring_program() {
        let group: Vec<Ipv4Addr> = (1..=3).map(|i| Ipv4Addr::new(198, 18, 0, i)).collect();
        let r = RingRequest {
            group: &group,
            port: 4793,
            origin: (group[1], 40000),
            rkey: 7,
            input_addr: 0x1000,
            output_addr: 0x9000,
            cells_addr: 0x20000,
            dtype: Dtype::F32,
            alu: Alu::Add,
            call: 0xC0FF_EE01,
            generation: 5,
            nop_hops: false,
        };
        let plan = RingPlan::new(3, Dtype::F32, 100, 200).unwrap();
        // Whole 8-byte words of the 84 bytes left: 20 elements, not 21.
        assert_eq!(plan.chunk_elems, (200 - 60 - 56) / 8 * 8 / 4);
        let mut buf = Vec::new();
        // Chunk 1 starts at member 1: 2:REDUCE 0:REDUCE_WRITE 2:WRITE 1:WRITE.
        let to = r.chunk_header(&plan, 1, 99, &mut buf);
        assert_eq!(to, group[2]);
        let h = NetdamHdr::from_bytes(&buf).unwrap();
        assert_eq!(
            (h.version, h.opcode, h.sr_len, h.seq(), h.tag()),
            (VERSION_2, Opcode::Chain as u8, 56, 99, 5)
        );
        assert_eq!((h.addr(), h.len()), (0x1000 + 20 * 4, 20 * 4));
        let sr = SrFixed::from_bytes(&buf[32..]).unwrap();
        assert_eq!(
            (sr.n, sr.idx, sr.origin_port(), sr.dst_addr()),
            (4, 0, 40000, 0x9000 + 80)
        );
        let segs: Vec<(u8, u8)> = (0..4)
            .map(|i| {
                let s = Segment::from_bytes(&buf[48 + 8 * i..]).unwrap();
                (s.ip().to_be_bytes()[3], s.op)
            })
            .collect();
        use HopOp::*;
        assert_eq!(
            segs,
            [
                (3, Reduce as u8),
                (1, ReduceWrite as u8),
                (3, Write as u8),
                (2, Write as u8)
            ]
        );
        // The trailer: the call word, then chunk 1's cell.
        assert_eq!(buf[80..84], 0xC0FF_EE01u32.to_be_bytes());
        assert_eq!(buf[84..88], (0x20000 + plan.cell_stride as u32).to_be_bytes());
        assert_eq!(buf.len(), 32 + 56);
        // The packet as member 2's node forwards it, which its host sends when it continues a held partial.
        let mut at1 = Vec::new();
        assert_eq!(r.hop_header(&plan, 1, 99, (group[1], 40000), 1, &mut at1), group[0]);
        assert_eq!(
            (at1[33], at1[..33].to_vec(), at1[34..].to_vec()),
            (1, buf[..33].to_vec(), buf[34..].to_vec())
        );
        // The floor's program: the same members, every op a NOP.
        let floor = RingRequest { nop_hops: true, ..r };
        let mut nops = Vec::new();
        assert_eq!(floor.chunk_header(&plan, 1, 99, &mut nops), group[2]);
        assert_eq!(nops[..48], buf[..48]);
        assert_eq!(nops[80..], buf[80..]);
        for i in 0..4 {
            let (s, n) = (
                Segment::from_bytes(&buf[48 + 8 * i..]).unwrap(),
                Segment::from_bytes(&nops[48 + 8 * i..]).unwrap(),
            );
            assert_eq!((n.ip(), n.port(), n.op), (s.ip(), s.port(), Nop as u8));
        }
    }
}
