//! UDP checksum verification (`--verify-csum`, PROTOCOL.md section 1).

use aya_ebpf::{
    helpers::generated::{bpf_csum_diff, bpf_xdp_load_bytes},
    programs::XdpContext,
};
use netdam_common::{config::MAX_PAYLOAD, counters::Event, wire::IPPROTO_UDP};
use network_types::ip::Ipv4Hdr;

use crate::{maps::SCRATCH, memory::bounded_len, Verdict};

/// bpf_csum_diff sums at most 512 bytes per call.
const STEP: u32 = 512;
const MAX_STEPS: u32 = (MAX_PAYLOAD as u32 + 64) / STEP + 1;

/// Drops the frame unless its UDP checksum (non-zero, checked by the caller) is right.
#[inline(always)]
pub fn verify_udp(ctx: &XdpContext, ip: &Ipv4Hdr, l4: u32, udp_len: u32) -> Result<(), Verdict> {
    let bad = Verdict::Drop(Event::DropBadChecksum);
    let scratch = SCRATCH.get_ptr_mut(0).ok_or(bad)?;
    let mut pseudo = [0u8; 12];
    pseudo[..4].copy_from_slice(&ip.src_addr);
    pseudo[4..8].copy_from_slice(&ip.dst_addr);
    pseudo[9] = IPPROTO_UDP;
    pseudo[10..12].copy_from_slice(&(udp_len as u16).to_be_bytes());
    // SAFETY: pointers to a 12-byte stack array and the SCRATCH value; sizes are multiples of 4 within them.
    let mut sum = unsafe { bpf_csum_diff(core::ptr::null_mut(), 0, pseudo.as_mut_ptr().cast(), 12, 0) };
    let mut done = 0u32;
    for _ in 0..MAX_STEPS {
        if done >= udp_len || sum < 0 {
            break;
        }
        let left = udp_len - done;
        let n = bounded_len(left, STEP);
        let aligned = n & !3;
        let tail = n - aligned;
        // SAFETY: loads into SCRATCH (SCRATCH_LEN >= STEP bytes) and a 4-byte
        // stack buffer, with lengths the verifier sees bounded by them.
        unsafe {
            if aligned != 0 {
                let a = bounded_len(aligned, STEP);
                if bpf_xdp_load_bytes(ctx.ctx, l4 + done, scratch.cast(), a) != 0 {
                    return Err(bad);
                }
                sum = bpf_csum_diff(core::ptr::null_mut(), 0, scratch.cast(), a, sum as u32);
            }
            if tail != 0 {
                // The odd tail, zero-padded to a word.
                let mut word = [0u8; 4];
                if bpf_xdp_load_bytes(
                    ctx.ctx,
                    l4 + done + aligned,
                    word.as_mut_ptr().cast(),
                    bounded_len(tail, 4),
                ) != 0
                {
                    return Err(bad);
                }
                sum = bpf_csum_diff(core::ptr::null_mut(), 0, word.as_mut_ptr().cast(), 4, sum as u32);
            }
        }
        done += n;
    }
    if sum < 0 || done < udp_len {
        return Err(bad);
    }
    let mut s = sum as u64;
    s = (s & 0xFFFF) + (s >> 16);
    s = (s & 0xFFFF) + (s >> 16);
    s = (s & 0xFFFF) + (s >> 16);
    if s == 0xFFFF {
        Ok(())
    } else {
        Err(bad)
    }
}
