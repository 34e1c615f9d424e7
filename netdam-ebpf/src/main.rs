//! The NetDAM XDP program: carrier parsing, validation, execution and
//! in-place answers (PROTOCOL.md). One entry point; every error becomes a
//! verdict in `netdam` below.
#![no_std]
#![no_main]
#![feature(asm_experimental_arch)]

mod atomic;
mod badkey;
mod carrier;
mod chain;
mod checksum;
mod handover;
mod inject;
mod maps;
mod memory;
mod ops;
mod respond;
mod split;
mod vector;
mod window;

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use handover::frame_len;
use netdam_common::{chain::check_chain_preamble, counters::Event, Opcode};

/// What becomes of a frame that is not answered by `ops::run`.
#[derive(Clone, Copy)]
pub enum Verdict {
    /// Not NetDAM's: to the kernel, untouched and uncounted.
    Pass,
    /// To the kernel, counted.
    PassCounted(Event),
    /// Dropped and counted.
    Drop(Event),
}

#[xdp(frags)]
pub fn netdam(ctx: XdpContext) -> u32 {
    maps::count_queue(ctx.rx_queue_index());
    verdict(&ctx, try_netdam(&ctx))
}

/// The CHAIN hop (section 6), tail-called by `netdam`.
#[xdp(frags)]
pub fn netdam_chain(ctx: XdpContext) -> u32 {
    verdict(&ctx, chain::run(&ctx, frame_len(&ctx)))
}

/// The one place where errors become XDP verdicts.
#[inline(always)]
fn verdict(ctx: &XdpContext, r: Result<u32, Verdict>) -> u32 {
    match r {
        Ok(action) => action,
        Err(Verdict::Pass) => xdp_action::XDP_PASS,
        Err(Verdict::PassCounted(e)) => {
            maps::count_event(e);
            xdp_action::XDP_PASS
        }
        Err(Verdict::Drop(e)) => {
            maps::count_event(e);
            // Off unless RUST_LOG asks for debug (the controller sets aya-log's level at load).
            aya_log_ebpf::debug!(ctx, "frame dropped: {}", e.name());
            xdp_action::XDP_DROP
        }
    }
}

/// The collective's injector: one chunk request per BPF_PROG_TEST_RUN
/// repeat, built from NetDAM memory (`inject.rs`).
#[xdp]
pub fn netdam_inject(ctx: XdpContext) -> u32 {
    inject::run(&ctx)
}

/// The idle-window sweep, run by the controller through BPF_PROG_TEST_RUN
/// (`window::sweep`, docs/conformance.md 12).
#[xdp]
pub fn netdam_window_sweep(ctx: XdpContext) -> u32 {
    window::sweep(&ctx)
}

#[inline(always)]
fn try_netdam(ctx: &XdpContext) -> Result<u32, Verdict> {
    let cfg = maps::CONFIG.get(0).ok_or(Verdict::Pass)?;
    if cfg.port == 0 {
        // Not configured yet by the controller.
        return Err(Verdict::Pass);
    }
    let req = maps::REQUEST.get_ptr_mut(0).ok_or(Verdict::Pass)?;
    // SAFETY: this CPU's slot; XDP does not preempt itself on one CPU.
    let req = unsafe { &mut *req };
    if let carrier::Carried::Split(d) = carrier::try_parse(ctx, cfg, frame_len(ctx), req)? {
        return split::run(ctx, &d);
    }
    // A key guesser's source gets nothing, right keys included (CHAIN too).
    if badkey::locked_out(cfg, u32::from_ne_bytes(req.ip.src_addr)) {
        return Err(Verdict::Drop(Event::DropBadKeyLockout));
    }
    if req.hdr.opcode == Opcode::Chain as u8 && check_chain_preamble(&req.hdr).is_ok() {
        // SAFETY: slot 0 holds netdam_chain; the call does not return unless
        // the slot is empty, and then the request is BAD_OPCODE below.
        unsafe { maps::JUMP.tail_call(ctx, 0) };
    }
    ops::run(ctx, cfg, req)
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
