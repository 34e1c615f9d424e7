//! Execution of validated requests.

use aya_ebpf::{bindings::xdp_action, programs::XdpContext};
use netdam_common::{
    counters::{op_status, Event},
    validate::{answers, check_access, check_header},
    NodeConfig, Opcode, Status,
};

use crate::{
    carrier::Request,
    maps::{count, REGIONS},
    memory, respond, vector, Verdict,
};

/// Opcodes this data path executes; every other code point is BAD_OPCODE.
/// ACCUMULATE and the atomics wait for per-element atomics and the
/// at-most-once window (section 7): executing them without it would apply
/// every retransmission again.
#[inline(always)]
fn executes(op: Opcode) -> bool {
    matches!(op, Opcode::Nop | Opcode::Write | Opcode::Read | Opcode::Reduce)
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
            vector::reduce_in_frame(ctx, respond::payload_offset(req), addr, len, dtype, alu)
                .map_err(|_| Verdict::Drop(Event::DropTxFailed))?;
            Ok(respond::finish(ctx, req, Status::Ok, len)?)
        }
        _ => Err(Status::BadOpcode.into()),
    }
}

#[inline(always)]
fn answer_empty(ctx: &XdpContext, req: &Request) -> Result<u32, Failure> {
    Ok(respond::status_only(ctx, req, Status::Ok)?)
}
