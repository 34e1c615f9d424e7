//! The userspace baseline of the all-reduce benchmark: a node that executes
//! the same CHAIN hops as the XDP data path (REDUCE, REDUCE_WRITE, WRITE,
//! readiness), and the plain NOP, READ, WRITE and ACCUMULATE the collective
//! engine uses, in a thread over a kernel UDP socket: one recv and one send
//! per packet, as an ordinary userspace server. The collective engine drives
//! it exactly as it drives an XDP node, so only the data path differs.
//!
//! A baseline, not a conforming node: it trusts its peers, checks only what
//! keeps it from panicking, and drops anything else.

use std::{
    cell::UnsafeCell,
    net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket},
    sync::{
        atomic::{AtomicBool, AtomicU32, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use netdam_common::{
    alu::combine_into,
    chain::{HopOp, Segment, SrFixed, SEGMENT_LEN, SR_FIXED_LEN},
    wire::{flags, Alu, Dtype, HDR_LEN},
    NetdamHdr, Opcode, Status,
};
use netdam_user::{
    collective::{grow_receive_buffer, MemberNode, RECEIVE_BUFFER},
    controller::ControllerError,
};

/// The node's memory, shared by its server thread and the collective engine
/// (which places inputs and reads outputs), as the XDP node's mmap is.
struct Memory(UnsafeCell<Vec<u8>>);

// SAFETY: like the XDP node's memory, it is changed concurrently by design;
// every access is a bounds-checked raw copy, and no reference into it escapes.
unsafe impl Sync for Memory {}

impl Memory {
    fn range(&self, addr: u64, n: usize) -> Option<*mut u8> {
        // SAFETY: only the length and base pointer are read.
        let v = unsafe { &mut *self.0.get() };
        let a = usize::try_from(addr).ok()?;
        (a.checked_add(n)? <= v.len()).then(|| v.as_mut_ptr().wrapping_add(a))
    }
}

/// A userspace node serving on (ip, port) until dropped.
pub struct UdpNode {
    ip: Ipv4Addr,
    mem: Arc<Memory>,
    generation: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    server: Option<JoinHandle<()>>,
}

impl UdpNode {
    /// Binds (ip, port) in the calling thread's network namespace and serves from a thread.
    pub fn start(ip: Ipv4Addr, port: u16, mem_size: usize) -> std::io::Result<UdpNode> {
        let sock = UdpSocket::bind(SocketAddrV4::new(ip, port))?;
        // As the collective's own socket: the default buffer overflows at a window of chunks.
        grow_receive_buffer(&sock, RECEIVE_BUFFER);
        sock.set_read_timeout(Some(Duration::from_millis(50)))?;
        let mem = Arc::new(Memory(UnsafeCell::new(vec![0; mem_size])));
        let generation = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let (mem, generation, stop) = (mem.clone(), generation.clone(), stop.clone());
            std::thread::spawn(move || serve(&sock, &mem, &generation, &stop))
        };
        Ok(UdpNode {
            ip,
            mem,
            generation,
            stop,
            server: Some(server),
        })
    }
}

impl Drop for UdpNode {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.server.take() {
            let _ = t.join();
        }
    }
}

impl MemberNode for UdpNode {
    fn ipv4(&self) -> Ipv4Addr {
        self.ip
    }
    fn mem_len(&self) -> usize {
        // SAFETY: the length of the buffer, which never changes.
        unsafe { (*self.mem.0.get()).len() }
    }
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), ControllerError> {
        let p = self
            .mem
            .range(addr, out.len())
            .ok_or(out_of_range(addr, out.len(), self.mem_len()))?;
        // SAFETY: in bounds (range); a byte copy tolerates concurrent writers.
        unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
        Ok(())
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), ControllerError> {
        let p = self
            .mem
            .range(addr, data.len())
            .ok_or(out_of_range(addr, data.len(), self.mem_len()))?;
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }
    fn set_generation(&mut self, _rkey: u32, generation: u32) -> Result<(), ControllerError> {
        self.generation.store(generation, Ordering::Release);
        Ok(())
    }
}

fn out_of_range(addr: u64, len: usize, size: usize) -> ControllerError {
    ControllerError::MemoryRange { addr, len, size }
}

fn serve(sock: &UdpSocket, mem: &Memory, generation: &AtomicU32, stop: &AtomicBool) {
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, SocketAddr::V4(from))) = sock.recv_from(&mut buf) else {
            continue;
        };
        if let Some((len, to)) = handle(&mut buf[..n], from, mem, generation.load(Ordering::Acquire)) {
            let _ = sock.send_to(&buf[..len], to);
        }
    }
}

/// Executes the datagram `b` in place; what to send and where.
fn handle(b: &mut [u8], from: SocketAddrV4, mem: &Memory, generation: u32) -> Option<(usize, SocketAddrV4)> {
    let h = NetdamHdr::from_bytes(b)?;
    if h.is_response() {
        return None;
    }
    let pay = HDR_LEN + h.sr_len as usize;
    let len = h.len() as usize;
    b.get(pay..pay + len)?;
    let answer = |b: &mut [u8], status: Status, n: usize, to: SocketAddrV4| {
        let mut r = h;
        r.make_response(status, n as u16);
        b[..HDR_LEN].copy_from_slice(&r.to_bytes());
        Some((pay + n, to))
    };
    match Opcode::from_u8(h.opcode)? {
        Opcode::Nop => answer(b, Status::Ok, 0, from),
        Opcode::Read => {
            let p = mem.range(h.addr(), len)?;
            // SAFETY: in bounds (range).
            unsafe { std::ptr::copy_nonoverlapping(p, b[pay..].as_mut_ptr(), len) };
            answer(b, Status::Ok, len, from)
        }
        Opcode::Write => {
            let p = mem.range(h.addr(), len)?;
            // SAFETY: in bounds (range).
            unsafe { std::ptr::copy_nonoverlapping(b[pay..].as_ptr(), p, len) };
            (h.flags & flags::ACK_REQ != 0).then_some(())?;
            answer(b, Status::Ok, 0, from)
        }
        Opcode::Accumulate => {
            let (dtype, alu) = (Dtype::from_u8(h.dtype)?, Alu::from_u8(h.alu)?);
            let p = mem.range(h.addr(), len)?;
            // SAFETY: in bounds; one server thread writes this node's memory.
            let m = unsafe { std::slice::from_raw_parts_mut(p, len) };
            let v = b[pay..pay + len].to_vec();
            combine_into(dtype, alu, m, &v);
            (h.flags & flags::ACK_REQ != 0).then_some(())?;
            answer(b, Status::Ok, 0, from)
        }
        Opcode::Chain => hop(b, &h, pay, len, mem, generation),
        _ => None,
    }
}

/// The CHAIN hop at this node, then the forward or the answer to the origin.
fn hop(
    b: &mut [u8],
    h: &NetdamHdr,
    pay: usize,
    len: usize,
    mem: &Memory,
    generation: u32,
) -> Option<(usize, SocketAddrV4)> {
    let sr = SrFixed::from_bytes(&b[HDR_LEN..])?;
    let seg = |b: &[u8], i: u8| Segment::from_bytes(b.get(HDR_LEN + SR_FIXED_LEN + SEGMENT_LEN * i as usize..)?);
    let here = seg(b, sr.idx)?;
    let op = HopOp::from_u8(here.op)?;
    let origin = SocketAddrV4::new(sr.origin_ip().into(), sr.origin_port());
    let answer = |b: &mut [u8], status: Status, n: usize| {
        let mut r = *h;
        r.make_response(status, n as u16);
        b[..HDR_LEN].copy_from_slice(&r.to_bytes());
        Some((pay + n, origin))
    };
    if op != HopOp::Nop && h.tag() != generation {
        let status = if h.tag() > generation {
            Status::NotReady
        } else {
            Status::Stale
        };
        return answer(b, status, 0);
    }
    let vector = (Dtype::from_u8(h.dtype), Alu::from_u8(h.alu));
    match (op, vector) {
        (HopOp::Reduce | HopOp::ReduceWrite, (Some(dtype), Some(alu))) => {
            let p = mem.range(h.addr(), len)?;
            // SAFETY: in bounds (range); read only.
            let m = unsafe { std::slice::from_raw_parts(p, len) };
            combine_into(dtype, alu, &mut b[pay..pay + len], m);
        }
        (HopOp::Write | HopOp::Nop, _) => {}
        _ => return None,
    }
    if matches!(op, HopOp::Write | HopOp::ReduceWrite) {
        let p = mem.range(sr.dst_addr(), len)?;
        // SAFETY: in bounds (range).
        unsafe { std::ptr::copy_nonoverlapping(b[pay..].as_ptr(), p, len) };
    }
    if sr.idx + 1 < sr.n {
        let next = seg(b, sr.idx + 1)?;
        b[HDR_LEN + 1] = sr.idx + 1;
        return Some((pay + len, SocketAddrV4::new(next.ip().into(), next.port())));
    }
    let n = if op.answer_carries_payload() { len } else { 0 };
    answer(b, Status::Ok, n)
}
