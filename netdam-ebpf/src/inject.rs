//! The injector (`netdam_common::inject`): run by the collective engine
//! through BPF_PROG_TEST_RUN with live frames, it sends one queued chunk
//! request per repeat, built here from the job's header template and the
//! chunk in NetDAM memory, so that a batch leaves with one system call and
//! the chunk is never copied through a socket.

use aya_ebpf::{
    bindings::xdp_action,
    helpers::generated::{bpf_xdp_adjust_tail, bpf_xdp_get_buff_len, bpf_xdp_store_bytes},
    programs::XdpContext,
};
use netdam_common::{
    inject::{at, INJECT_HEADERS, INJECT_QUEUE},
    verifier::bounded_len,
};

use crate::{
    atomic::fetch_add64,
    maps::{peer_mac, CONFIG, INJECT},
    memory::mem_to_frame,
};

/// The verdict for one repeat: XDP_TX with the next request, or XDP_DROP
/// when the batch is done or the job is inconsistent.
#[inline(always)]
pub fn run(ctx: &XdpContext) -> u32 {
    try_run(ctx).unwrap_or(xdp_action::XDP_DROP)
}

#[inline(always)]
fn try_run(ctx: &XdpContext) -> Result<u32, ()> {
    let job = INJECT.get_ptr_mut(0).ok_or(())?;
    // SAFETY: the job's cursor, shared by the CPUs that run the batch.
    let taken = unsafe { fetch_add64(&mut (*job).taken, 1) };
    // SAFETY: the map value, valid while the program runs; the host writes it only between batches.
    let job = unsafe { &*job };
    if taken >= job.count as u64 {
        return Ok(xdp_action::XDP_DROP);
    }
    let req = job.queue[taken as usize & (INJECT_QUEUE - 1)];
    let (off, len) = job.span(req).ok_or(())?;
    let hdr = bounded_len(job.hdr_len, INJECT_HEADERS as u32);
    // SAFETY: a helper that only reads the frame's length.
    let have = unsafe { bpf_xdp_get_buff_len(ctx.ctx) } as i64;
    let want = (hdr + len) as i64;
    // SAFETY: resizing this program's own frame; the helper checks the bounds.
    if unsafe { bpf_xdp_adjust_tail(ctx.ctx, (want - have) as i32) } != 0 {
        return Err(());
    }
    // SAFETY: `hdr` bytes of the job's template, at most INJECT_HEADERS (bounded_len).
    if unsafe { bpf_xdp_store_bytes(ctx.ctx, 0, job.headers.as_ptr() as *mut _, hdr) } != 0 {
        return Err(());
    }
    // MACs from the peer table, as the chain program forwards (dropped while
    // unresolved: the engine resends, and the controller resolves its peers).
    let dst_be = u32::from_ne_bytes([job.headers[30], job.headers[31], job.headers[32], job.headers[33]]);
    let dmac = peer_mac(dst_be).ok_or(())?;
    let cfg = CONFIG.get(0).ok_or(())?;
    store(ctx, 0, &dmac)?;
    store(ctx, 6, &cfg.mac)?;
    let whole = len == job.chunk_bytes;
    store(ctx, at::IP_TOTAL_LEN, &((want - 14) as u16).to_be_bytes())?;
    store(
        ctx,
        at::IP_CHECKSUM,
        &(if whole { job.csum_whole } else { job.csum_last }).to_ne_bytes(),
    )?;
    store(ctx, at::UDP_LEN, &((want - 34) as u16).to_be_bytes())?;
    store(ctx, at::SEQ, &job.seq_base.wrapping_add(req).to_be_bytes())?;
    store(ctx, at::ADDR, &(job.input_addr + off).to_be_bytes())?;
    store(ctx, at::LEN, &(len as u16).to_be_bytes())?;
    store(ctx, at::SR_DST_ADDR, &(job.output_addr + off).to_be_bytes())?;
    // The version-2 SR header's last 4 bytes: the chunk's cell (the call
    // word before them is the template's).
    let cell = (job.cells_addr + job.chunk(req) * job.cell_stride) as u32;
    store(ctx, hdr - 4, &cell.to_be_bytes())?;
    mem_to_frame(ctx, hdr, job.input_addr + off, len).map_err(|_| ())?;
    Ok(xdp_action::XDP_TX)
}

/// Writes `v` into the frame at `off`.
#[inline(always)]
fn store<const N: usize>(ctx: &XdpContext, off: u32, v: &[u8; N]) -> Result<(), ()> {
    // SAFETY: N bytes from the stack into the frame; the helper checks the frame's bounds.
    match unsafe { bpf_xdp_store_bytes(ctx.ctx, off, v.as_ptr() as *mut _, N as u32) } {
        0 => Ok(()),
        _ => Err(()),
    }
}
