//! Execution of validated requests.

use aya_ebpf::{bindings::xdp_action, helpers::generated::bpf_xdp_load_bytes, programs::XdpContext};
use netdam_common::{
    counters::{op_status, Event},
    validate::{answers, check_access, check_header, needs_window, Checked},
    window::SourceKey,
    NodeConfig, Opcode, Status,
};

use crate::{
    atomic::{cmpxchg64, fetch_add64, xchg64},
    badkey,
    carrier::Request,
    handover,
    maps::{count, count_event, REGIONS},
    memory, respond,
    vector::{self, VectorFailed, VectorOp},
    window::{self, Claimed},
    Verdict,
};

/// Whether this program executes the op: CHAIN that reaches here failed
/// its preamble or found no chain program, and is BAD_OPCODE.
#[inline(always)]
fn executes(op: Opcode) -> bool {
    op != Opcode::Chain
}

/// Validates and executes `req`, returning the XDP action. Every request
/// that reaches here is counted once by opcode and final status, but one
/// whose BAD_KEY answer the source's limit refuses: that one is dropped
/// and counted `BadKeyLimited` (`badkey`).
#[inline(always)]
pub fn run(ctx: &XdpContext, cfg: &NodeConfig, req: &Request) -> Result<u32, Verdict> {
    let (status, action) = match try_execute(ctx, cfg, req) {
        Ok(action) => (Status::Ok, Ok(action)),
        Err(Failure::Status(s)) => {
            // BAD_KEY answers are rationed per source (key guessing).
            if matches!(s, Status::BadKey) && !badkey::allowed(cfg, u32::from_ne_bytes(req.ip.src_addr)) {
                return Err(Verdict::Drop(Event::BadKeyLimited));
            }
            (s, respond::status_only(ctx, req, s))
        }
        Err(Failure::Verdict(v)) => return Err(v),
    };
    count(op_status(req.hdr.opcode, status));
    action
}

/// Why a request (or a CHAIN hop) was not executed and answered OK.
pub enum Failure {
    /// Not executed (or a repeat); answered with this status.
    Status(Status),
    /// Neither executed nor answerable.
    Verdict(Verdict),
}

impl From<Status> for Failure {
    fn from(s: Status) -> Self {
        Failure::Status(s)
    }
}

impl From<VectorFailed> for Failure {
    fn from(e: VectorFailed) -> Self {
        match e {
            VectorFailed::Copy => Failure::Verdict(Verdict::Drop(Event::DropMemCopyFailed)),
            VectorFailed::Contended => {
                count_event(Event::CasContended);
                Failure::Status(Status::NotReady)
            }
        }
    }
}

impl From<Verdict> for Failure {
    fn from(v: Verdict) -> Self {
        Failure::Verdict(v)
    }
}

#[inline(always)]
fn try_execute(ctx: &XdpContext, cfg: &NodeConfig, req: &Request) -> Result<u32, Failure> {
    let h = &req.hdr;
    let checked = check_header(h, cfg.mtu, req.payload_avail)?;
    if !executes(checked.op) {
        return Err(Status::BadOpcode.into());
    }
    // SAFETY: a lookup in a hash map of plain values.
    let region = unsafe { REGIONS.get(h.rkey()) };
    let addr = h.addr();
    check_access(region, &checked, addr)?;
    if matches!(checked.op, Opcode::Msg | Opcode::WriteNotify) && !handover::has_receiver(ctx) {
        return Err(Status::NoReceiver.into());
    }
    // The at-most-once window is the last check (section 5).
    let slot = if needs_window(&checked) {
        let source = SourceKey {
            ip_be: u32::from_ne_bytes(req.ip.src_addr),
            port_be: u16::from_ne_bytes(req.udp.src),
            hop: 0,
        };
        match window::claim(&source, h.seq(), cfg.window_per_source) {
            Claimed::Execute(slot) => Some(slot),
            Claimed::Repeat(old) => return repeat(ctx, req, &checked, old),
            Claimed::InFlight => return Err(Verdict::Drop(Event::DropInFlight).into()),
            Claimed::Stale => return Err(Status::Stale.into()),
            Claimed::Full => {
                count_event(Event::WindowFull);
                return Err(Status::Stale.into());
            }
            Claimed::SourceFull => {
                count_event(Event::WindowSourceFull);
                return Err(Status::Stale.into());
            }
            Claimed::Retiring => return Err(Verdict::Drop(Event::DropWindowRetiring).into()),
        }
    } else {
        None
    };
    let result = execute(ctx, req, &checked, addr);
    if let Some(slot) = slot {
        // Also after a failure: a request that ran at all must never run again.
        window::complete(slot, h.seq(), result.as_ref().map_or(0, |(_, old)| *old));
    }
    result.map(|(action, _)| action)
}

/// Runs a validated op; returns the action and, for atomics, the old value.
#[inline(always)]
fn execute(ctx: &XdpContext, req: &Request, checked: &Checked, addr: u64) -> Result<(u32, u64), Failure> {
    let h = &req.hdr;
    let len = h.len() as u32;
    let copy_failed = || Failure::Verdict(Verdict::Drop(Event::DropMemCopyFailed));
    let done_unless_acked = |ctx: &XdpContext| -> Result<u32, Failure> {
        if answers(checked.op, h.flags, Status::Ok) {
            answer_empty(ctx, req)
        } else {
            Ok(xdp_action::XDP_DROP)
        }
    };
    match (checked.op, checked.vector) {
        (Opcode::Nop, _) => Ok((answer_empty(ctx, req)?, 0)),
        (Opcode::Write, _) => {
            memory::frame_to_mem(ctx, req.payload_off, addr, len).map_err(|_| copy_failed())?;
            Ok((done_unless_acked(ctx)?, 0))
        }
        (Opcode::Msg, _) => Ok((handover::message(ctx)?, 0)),
        (Opcode::WriteNotify, _) => {
            memory::frame_to_mem(ctx, req.payload_off, addr, len).map_err(|_| copy_failed())?;
            Ok((handover::headers_only(ctx, req.payload_off)?, 0))
        }
        (Opcode::Read, _) => {
            respond::turn_around(ctx, req)?;
            memory::mem_to_frame(ctx, respond::payload_offset(req), addr, len).map_err(|_| copy_failed())?;
            Ok((respond::finish(ctx, req, Status::Ok, len)?, 0))
        }
        (Opcode::Reduce, Some((dtype, alu))) => {
            respond::turn_around(ctx, req)?;
            vector::run(
                ctx,
                VectorOp::Reduce,
                respond::payload_offset(req),
                addr,
                len,
                dtype,
                alu,
            )?;
            Ok((respond::finish(ctx, req, Status::Ok, len)?, 0))
        }
        (Opcode::Accumulate, Some((dtype, alu))) => {
            vector::run(ctx, VectorOp::Accumulate, req.payload_off, addr, len, dtype, alu)?;
            Ok((done_unless_acked(ctx)?, 0))
        }
        (Opcode::FetchAdd | Opcode::Swap | Opcode::Cas, _) => {
            let mut old = 0u64;
            if atomic(ctx, req.payload_off, checked.op as u8, addr, &mut old) != 0 {
                return Err(copy_failed());
            }
            Ok((answer_old(ctx, req, old)?, old))
        }
        _ => Err(Status::BadOpcode.into()),
    }
}

/// FETCH_ADD, SWAP or CAS on the word at `addr`; the old value into `old`.
/// Returns 0, or -1 if the operands or the word could not be reached.
/// Not inlined: its locals get their own stack frame, off the call chain of
/// the vector callbacks (the kernel allows 512 bytes along any chain).
#[inline(never)]
fn atomic(ctx: &XdpContext, payload_off: u32, op: u8, addr: u64, old: &mut u64) -> i32 {
    let mut operands = [0u64; 2];
    // CAS carries two operands, the others one (validated); constant sizes, which the verifier needs.
    let n = if op == Opcode::Cas as u8 { 16 } else { 8 };
    // SAFETY: a 16-byte stack buffer and n <= 16.
    if unsafe { bpf_xdp_load_bytes(ctx.ctx, payload_off, operands.as_mut_ptr().cast(), n) } != 0 {
        return -1;
    }
    let Some(word) = memory::word(addr) else { return -1 };
    let (a, b) = (u64::from_le(operands[0]), u64::from_le(operands[1]));
    // SAFETY: an 8-aligned u64 inside a memory chunk (memory::word).
    *old = unsafe {
        if op == Opcode::FetchAdd as u8 {
            fetch_add64(word, a)
        } else if op == Opcode::Swap as u8 {
            xchg64(word, a)
        } else {
            cmpxchg64(word, a, b)
        }
    };
    0
}

/// The answer to a repeat of an executed non-idempotent request (section 7).
#[inline(always)]
fn repeat(ctx: &XdpContext, req: &Request, checked: &Checked, old: u64) -> Result<u32, Failure> {
    match checked.op {
        Opcode::Accumulate => Err(Status::Duplicate.into()),
        _ => answer_old(ctx, req, old),
    }
}

/// An atomic's answer: OK with the old value (little-endian) as payload.
#[inline(always)]
fn answer_old(ctx: &XdpContext, req: &Request, old: u64) -> Result<u32, Failure> {
    respond::turn_around(ctx, req)?;
    let mut le = old.to_le();
    // SAFETY: an 8-byte stack value; the frame holds at least 8 payload bytes (validated).
    let r = unsafe {
        aya_ebpf::helpers::generated::bpf_xdp_store_bytes(
            ctx.ctx,
            respond::payload_offset(req),
            (&mut le as *mut u64).cast(),
            8,
        )
    };
    if r != 0 {
        return Err(Failure::Verdict(Verdict::Drop(Event::DropTxFailed)));
    }
    Ok(respond::finish(ctx, req, Status::Ok, 8)?)
}

#[inline(always)]
fn answer_empty(ctx: &XdpContext, req: &Request) -> Result<u32, Failure> {
    Ok(respond::status_only(ctx, req, Status::Ok)?)
}
