//! Execution of validated requests.

use aya_ebpf::{bindings::xdp_action, programs::XdpContext};
use netdam_common::{
    counters::{op_status, Event},
    validate::{answers, check_access, check_header, Checked},
    wire::Alu,
    NodeConfig, Opcode, Status,
};

use crate::{
    carrier::Request,
    maps::{count, REGIONS},
    memory, respond,
    vector::{self, VectorFailed, VectorOp},
    Verdict,
};

/// Whether this data path executes the op; every other code point is
/// BAD_OPCODE. ACCUMULATE with ADD or XOR, and the atomics, wait for the
/// at-most-once window (section 7): without it every retransmission would
/// apply again. ACCUMULATE with MIN, MAX, AND, OR is idempotent and needs none.
#[inline(always)]
fn executes(c: &Checked) -> bool {
    match c.op {
        Opcode::Nop | Opcode::Write | Opcode::Read | Opcode::Reduce => true,
        Opcode::Accumulate => matches!(c.vector, Some((_, Alu::Min | Alu::Max | Alu::And | Alu::Or))),
        _ => false,
    }
}

/// Validates and executes `req`, returning the XDP action. Every request
/// that reaches here is counted once by opcode and final status.
#[inline(always)]
pub fn run(ctx: &XdpContext, cfg: &NodeConfig, req: &Request) -> Result<u32, Verdict> {
    let (status, action) = match try_execute(ctx, cfg, req) {
        Ok(action) => (Status::Ok, Ok(action)),
        Err(Failure::Status(s)) => (s, respond::status_only(ctx, req, s)),
        Err(Failure::Verdict(v)) => return Err(v),
    };
    count(op_status(req.hdr.opcode, status));
    action
}

enum Failure {
    /// Not executed; answered with this status.
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
            VectorFailed::Copy => Failure::Verdict(Verdict::Drop(Event::DropTxFailed)),
            // Only idempotent operators get here: the sender's retry completes
            // the elements this attempt could not update.
            VectorFailed::Contended => {
                crate::maps::count_event(Event::CasContended);
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
    if !executes(&checked) {
        return Err(Status::BadOpcode.into());
    }
    let rkey = h.rkey();
    // SAFETY: a lookup in a hash map of plain values.
    let region = unsafe { REGIONS.get(&rkey) };
    let addr = h.addr();
    check_access(region, &checked, addr)?;
    let len = h.len() as u32;
    match checked.op {
        Opcode::Nop => answer_empty(ctx, req),
        Opcode::Write => {
            memory::frame_to_mem(ctx, req.payload_off, addr, len).map_err(|_| Verdict::Drop(Event::DropTxFailed))?;
            if answers(Opcode::Write, h.flags, Status::Ok) {
                answer_empty(ctx, req)
            } else {
                Ok(xdp_action::XDP_DROP)
            }
        }
        Opcode::Read => {
            respond::turn_around(ctx, req)?;
            memory::mem_to_frame(ctx, respond::payload_offset(req), addr, len)
                .map_err(|_| Verdict::Drop(Event::DropTxFailed))?;
            Ok(respond::finish(ctx, req, Status::Ok, len)?)
        }
        Opcode::Reduce => {
            let Some((dtype, alu)) = checked.vector else {
                return Err(Status::BadDtype.into());
            };
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
            Ok(respond::finish(ctx, req, Status::Ok, len)?)
        }
        Opcode::Accumulate => {
            let Some((dtype, alu)) = checked.vector else {
                return Err(Status::BadDtype.into());
            };
            vector::run(ctx, VectorOp::Accumulate, req.payload_off, addr, len, dtype, alu)?;
            if answers(Opcode::Accumulate, h.flags, Status::Ok) {
                answer_empty(ctx, req)
            } else {
                Ok(xdp_action::XDP_DROP)
            }
        }
        _ => Err(Status::BadOpcode.into()),
    }
}

#[inline(always)]
fn answer_empty(ctx: &XdpContext, req: &Request) -> Result<u32, Failure> {
    Ok(respond::status_only(ctx, req, Status::Ok)?)
}
