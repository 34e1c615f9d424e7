//! Checksum verification (`--verify-csum`, PROTOCOL.md section 1,
//! docs/conformance.md 5): the IPv4 header's, options included, and the
//! UDP checksum, which must be there (not zero).

use aya_ebpf::{
    helpers::generated::{bpf_csum_diff, bpf_xdp_load_bytes},
    programs::XdpContext,
};
use netdam_common::{config::MAX_PAYLOAD, counters::Event, verifier::bounded_len, wire::IPPROTO_UDP};
use network_types::{eth::EthHdr, ip::Ipv4Hdr};

use crate::{maps::SCRATCH, Verdict};

/// bpf_csum_diff sums at most 512 bytes per call.
const STEP: u32 = 512;
const MAX_STEPS: u32 = (MAX_PAYLOAD as u32 + 64) / STEP + 1;

/// A bound on the IPv4 header's length (at most 60 bytes, IHL 15) that
/// `bounded_len` can use: a power of two.
const IPV4_BOUND: u32 = 64;

/// Whether a datagram's checksums are right: the IPv4 header's, and the
/// UDP one unless it is zero (the caller decides who may send none). Not inlined,
/// which keeps the verifier's work down: inlined into the parser, the
/// checks cost it about 190,000 instructions more in `netdam` and 260,000
/// in `netdam_chain` (the counts move with the program's layout).
#[inline(never)]
pub fn verified(ctx: &XdpContext, ip: &Ipv4Hdr, l4: u32, udp_len: u32, udp_check: [u8; 2]) -> bool {
    let ihl = (ip.vihl & 0x0F) as u32;
    (udp_check == [0, 0] || verify_udp(ctx, ip, l4, udp_len).is_ok()) && verify_ipv4(ctx, ihl).is_ok()
}

/// Drops the frame unless the IPv4 header of `ihl` 32-bit words (5..=15,
/// checked by the parser) after the Ethernet header holds its right checksum.
#[inline(always)]
fn verify_ipv4(ctx: &XdpContext, ihl: u32) -> Result<(), Verdict> {
    let bad = Verdict::Drop(Event::DropBadChecksum);
    let scratch = SCRATCH.get_ptr_mut(0).ok_or(bad)?;
    let n = bounded_len(ihl * 4, IPV4_BOUND);
    // SAFETY: n = IHL * 4 <= 60 bytes into SCRATCH (SCRATCH_LEN >= 64), a
    // multiple of 4 as bpf_csum_diff needs.
    let sum = unsafe {
        if bpf_xdp_load_bytes(ctx.ctx, EthHdr::LEN as u32, scratch.cast(), n) != 0 {
            return Err(bad);
        }
        bpf_csum_diff(core::ptr::null_mut(), 0, scratch.cast(), n, 0)
    };
    if sum >= 0 && fold(sum as u64) == 0xFFFF {
        Ok(())
    } else {
        Err(bad)
    }
}

/// The 16-bit ones' complement sum of a 32-bit one.
#[inline(always)]
fn fold(mut s: u64) -> u64 {
    s = (s & 0xFFFF) + (s >> 16);
    s = (s & 0xFFFF) + (s >> 16);
    (s & 0xFFFF) + (s >> 16)
}

/// Drops the frame unless its UDP checksum (non-zero, checked by the caller) is right.
#[inline(always)]
fn verify_udp(ctx: &XdpContext, ip: &Ipv4Hdr, l4: u32, udp_len: u32) -> Result<(), Verdict> {
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
                // Read back through the stack so that LLVM cannot drop the clamp as
                // redundant: Linux 6.1's verifier does not carry `aligned != 0` over
                // to the length and needs the clamp's lower bound of 1.
                let a = bounded_len(core::ptr::read_volatile(&aligned), STEP);
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
    if fold(sum as u64) == 0xFFFF {
        Ok(())
    } else {
        Err(bad)
    }
}
