//! The userspace baseline of the all-reduce benchmark: a node that executes
//! the same CHAIN hops as the XDP data path (REDUCE, REDUCE_WRITE, WRITE,
//! readiness), and the plain NOP, READ, WRITE and ACCUMULATE the collective
//! engine uses, in a thread over a kernel UDP socket, as a well-written
//! userspace server does it: up to 64 datagrams per recvmmsg, the answers
//! and forwards of a batch in one sendmmsg. The collective engine drives it
//! exactly as it drives an XDP node, so only the data path differs.
//!
//! A baseline, not a conforming node: it trusts its peers, checks only what
//! keeps it from panicking, and drops anything else.

use std::{
    cell::UnsafeCell,
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use netdam_common::{
    alu::combine_into,
    chain::{
        cell, check_ready, parse_trailer, trailer_off, HopOp, Readiness, Ready, Segment, SrFixed, SEGMENT_LEN,
        SR_CELL_LEN, SR_FIXED_LEN,
    },
    wire::{flags, Alu, Dtype, HDR_LEN, VERSION_2},
    NetdamHdr, Opcode, Status,
};
use netdam_user::{
    collective::{grow_receive_buffer, grow_send_buffer, MemberNode, RECEIVE_BUFFER, SEND_BUFFER},
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
    /// The readiness, generation and call word packed (`Ready`), so a hop reads both at once.
    generation: Arc<Ready64>,
    /// Datagrams received so far.
    received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    server: Option<JoinHandle<()>>,
}

impl UdpNode {
    /// Binds (ip, port) in the calling thread's network namespace and serves from a thread.
    pub fn start(ip: Ipv4Addr, port: u16, mem_size: usize) -> std::io::Result<UdpNode> {
        let sock = UdpSocket::bind(SocketAddrV4::new(ip, port))?;
        // As the collective's own socket: the default buffers overflow at a window of chunks.
        grow_receive_buffer(&sock, RECEIVE_BUFFER);
        grow_send_buffer(&sock, SEND_BUFFER);
        sock.set_read_timeout(Some(Duration::from_millis(50)))?;
        let mem = Arc::new(Memory(UnsafeCell::new(vec![0; mem_size])));
        let generation = Arc::new(Ready64(AtomicU64::new(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicU64::new(0));
        let server = {
            let (mem, generation, stop, received) = (mem.clone(), generation.clone(), stop.clone(), received.clone());
            std::thread::spawn(move || serve(&sock, &mem, &generation, &stop, &received))
        };
        Ok(UdpNode {
            ip,
            mem,
            generation,
            received,
            stop,
            server: Some(server),
        })
    }
}

impl UdpNode {
    /// The count of datagrams received, as it goes up.
    pub fn received(&self) -> Arc<AtomicU64> {
        self.received.clone()
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
    fn read_into(&self, addr: u64, out: &mut [u8]) -> Result<(), ControllerError> {
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
    fn set_readiness(&mut self, _rkey: u32, now: Readiness) -> Result<(), ControllerError> {
        self.generation.store(now);
        Ok(())
    }
}

/// A region's readiness in one atomic word: the generation in the low
/// half, the call word in the high.
struct Ready64(AtomicU64);

impl Ready64 {
    fn store(&self, r: Readiness) {
        self.0
            .store(r.generation as u64 | (r.call as u64) << 32, Ordering::Release);
    }
    fn load(&self) -> Readiness {
        let v = self.0.load(Ordering::Acquire);
        Readiness::new(v as u32, (v >> 32) as u32)
    }
}

fn out_of_range(addr: u64, len: usize, size: usize) -> ControllerError {
    ControllerError::MemoryRange { addr, len, size }
}

/// Datagrams per recvmmsg and sendmmsg.
const BATCH: usize = 64;
/// Room for the largest datagram a node takes.
const DATAGRAM: usize = 9216 + 256;

fn serve(sock: &UdpSocket, mem: &Memory, generation: &Ready64, stop: &AtomicBool, received: &AtomicU64) {
    use std::os::fd::AsRawFd;
    let fd = sock.as_raw_fd();
    let mut bufs = vec![[0u8; DATAGRAM]; BATCH];
    // SAFETY: all-zero sockaddr_in, iovec and mmsghdr are valid (null pointers, zero lengths).
    let mut addrs: Vec<libc::sockaddr_in> = vec![unsafe { std::mem::zeroed() }; BATCH];
    let mut iovs: Vec<libc::iovec> = vec![unsafe { std::mem::zeroed() }; BATCH];
    let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; BATCH];
    let mut out: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; BATCH];
    let mut out_iovs: Vec<libc::iovec> = vec![unsafe { std::mem::zeroed() }; BATCH];
    let mut out_addrs: Vec<libc::sockaddr_in> = vec![unsafe { std::mem::zeroed() }; BATCH];
    while !stop.load(Ordering::Relaxed) {
        for i in 0..BATCH {
            iovs[i] = libc::iovec {
                iov_base: bufs[i].as_mut_ptr().cast(),
                iov_len: DATAGRAM,
            };
            msgs[i].msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_in).cast();
            msgs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
            msgs[i].msg_hdr.msg_iov = &mut iovs[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: BATCH message headers pointing at live buffers; the socket's
        // receive timeout (50 ms) bounds the wait for the first datagram.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                msgs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n <= 0 {
            continue;
        }
        received.fetch_add(n as u64, Ordering::Relaxed);
        let mut sends = 0;
        for i in 0..n as usize {
            let from = SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(addrs[i].sin_addr.s_addr)),
                u16::from_be(addrs[i].sin_port),
            );
            let len = msgs[i].msg_len as usize;
            if let Some((len, to)) = handle(&mut bufs[i][..len], from, mem, generation) {
                out_addrs[sends] = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: to.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from(*to.ip()).to_be(),
                    },
                    sin_zero: [0; 8],
                };
                out_iovs[sends] = libc::iovec {
                    iov_base: bufs[i].as_mut_ptr().cast(),
                    iov_len: len,
                };
                out[sends].msg_hdr.msg_name = (&mut out_addrs[sends] as *mut libc::sockaddr_in).cast();
                out[sends].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
                out[sends].msg_hdr.msg_iov = &mut out_iovs[sends];
                out[sends].msg_hdr.msg_iovlen = 1;
                sends += 1;
            }
        }
        let mut done = 0;
        while done < sends {
            // SAFETY: `sends` prepared headers pointing at live buffers.
            let r = unsafe { libc::sendmmsg(fd, out[done..].as_mut_ptr(), (sends - done) as u32, 0) };
            if r <= 0 {
                // A full socket buffer loses the rest as the network would: senders resend.
                break;
            }
            done += r as usize;
        }
    }
}

/// Executes the datagram `b` in place; what to send and where.
fn handle(b: &mut [u8], from: SocketAddrV4, mem: &Memory, generation: &Ready64) -> Option<(usize, SocketAddrV4)> {
    let h = NetdamHdr::from_bytes(b)?;
    if h.is_response() {
        return None;
    }
    let pay = HDR_LEN + h.sr_len as usize;
    let len = h.len() as usize;
    b.get(pay..pay + len)?;
    let answer = |b: &mut [u8], status: Status, n: usize, to: SocketAddrV4| respond(b, &h, pay, status, n, to);
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

/// Turns the request `h` in `b` into its response with `n` payload bytes,
/// for `to`: what `serve` sends.
fn respond(
    b: &mut [u8],
    h: &NetdamHdr,
    pay: usize,
    status: Status,
    n: usize,
    to: SocketAddrV4,
) -> Option<(usize, SocketAddrV4)> {
    let mut r = *h;
    r.make_response(status, n as u16);
    b[..HDR_LEN].copy_from_slice(&r.to_bytes());
    Some((pay + n, to))
}

/// The CHAIN hop at this node, then the forward or the answer to the origin:
/// version 1, and version 2's held partials and completion cells
/// (docs/PROTOCOL.md, version 2), as the XDP data path runs them.
fn hop(
    b: &mut [u8],
    h: &NetdamHdr,
    pay: usize,
    len: usize,
    mem: &Memory,
    generation: &Ready64,
) -> Option<(usize, SocketAddrV4)> {
    let sr = SrFixed::from_bytes(&b[HDR_LEN..])?;
    let seg = |b: &[u8], i: u8| Segment::from_bytes(b.get(HDR_LEN + SR_FIXED_LEN + SEGMENT_LEN * i as usize..)?);
    let here = seg(b, sr.idx)?;
    let op = HopOp::from_u8(here.op)?;
    let origin = SocketAddrV4::new(sr.origin_ip().into(), sr.origin_port());
    let answer = |b: &mut [u8], status: Status, n: usize| respond(b, h, pay, status, n, origin);
    let (call, cell) = match h.version {
        VERSION_2 => {
            let at = HDR_LEN + trailer_off(sr.n);
            let (call, cell) = parse_trailer(b.get(at..at + SR_CELL_LEN)?.try_into().ok()?);
            (call, Some(cell))
        }
        _ => (0, None),
    };
    match check_ready(h.version, op, h.tag(), call, generation.load()) {
        Err(status) => return answer(b, status, 0),
        Ok(Ready::Hold) => {
            let c = cell?;
            put(mem, c + cell::HOLD, &b[pay..pay + len])?;
            let port = sr.origin_port() as u32;
            put(mem, c + cell::HELD_SEQ, &h.seq().to_le_bytes())?;
            put(mem, c + cell::HELD_IDX, &(sr.idx as u32 | port << 16).to_le_bytes())?;
            put(mem, c + cell::HELD_CALL, &(call as u64).to_le_bytes())?;
            put(mem, c + cell::HELD, &h.tag().to_le_bytes())?;
            std::sync::atomic::fence(Ordering::SeqCst);
            // Raised meanwhile: the origin resends at once, as from the XDP node.
            let status = match generation.load().generation == h.tag() {
                true => Status::NotReady,
                false => Status::Held,
            };
            return answer(b, status, 0);
        }
        Ok(Ready::Run) => run(b, h, &sr, op, pay, len, mem, cell)?,
    }
    if sr.idx + 1 < sr.n {
        let next = seg(b, sr.idx + 1)?;
        b[HDR_LEN + 1] = sr.idx + 1;
        return Some((pay + len, SocketAddrV4::new(next.ip().into(), next.port())));
    }
    let n = if op.answer_carries_payload() { len } else { 0 };
    answer(b, Status::Ok, n)
}

/// Runs hop `op` on the payload and memory; a version-2 WRITE or
/// REDUCE_WRITE then stamps its cell.
#[allow(clippy::too_many_arguments)]
fn run(
    b: &mut [u8],
    h: &NetdamHdr,
    sr: &SrFixed,
    op: HopOp,
    pay: usize,
    len: usize,
    mem: &Memory,
    cell: Option<u64>,
) -> Option<()> {
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
        put(mem, sr.dst_addr(), &b[pay..pay + len])?;
        if let Some(c) = cell {
            put(mem, c + cell::DONE, &h.tag().to_le_bytes())?;
        }
    }
    Some(())
}

/// Copies `data` into the memory at `addr`; `None` past its end.
fn put(mem: &Memory, addr: u64, data: &[u8]) -> Option<()> {
    let p = mem.range(addr, data.len())?;
    // SAFETY: in bounds (range).
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
    Some(())
}
