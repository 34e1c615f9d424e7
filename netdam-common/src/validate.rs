//! Request validation in the order of PROTOCOL.md section 5:
//! version, opcode, sr_len and SR header, dtype and alu, length then
//! alignment, rkey, permission, bounds (readiness and the at-most-once
//! window follow in the ops that need them).
//!
//! Written once for the XDP program, the reference model and the host tests.

use crate::{
    config::MAX_PAYLOAD,
    region::{required_perms, Region},
    wire::{flags, Alu, Dtype, NetdamHdr, Opcode, Status, CARRIER_LEN, HDR_LEN, VERSION, VERSION_2},
};

/// Smallest SR header: 16 bytes plus one segment (section 6).
pub const SR_MIN: u8 = 16 + 8;
/// Largest SR header: 15 segments.
pub const SR_MAX: u8 = 16 + 8 * 15;

/// What header validation established about a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    pub op: Opcode,
    /// Element type and operator; `Some` for vector ops only.
    pub vector: Option<(Dtype, Alu)>,
    /// Permissions the region must grant.
    pub perms: u32,
    /// Bytes of NetDAM memory at `addr` the op touches.
    pub mem_len: u32,
    /// Payload bytes of the success response.
    pub resp_len: u32,
}

/// A frame whose `len` claims more payload than the datagram holds is
/// dropped unanswered (section 5), except a READ, whose payload is padding
/// and whose shortfall is BAD_LENGTH (section 3). `avail` is the datagram's
/// payload after the NetDAM and SR headers.
#[inline(always)]
pub const fn len_past_datagram(h: &NetdamHdr, avail: u32) -> bool {
    h.opcode != Opcode::Read as u8 && h.len() as u32 > avail
}

/// Checks everything that needs only the header: version, opcode, sr_len,
/// dtype/alu, length (BAD_LENGTH, a READ without its padding included, and
/// TOO_LARGE: an answer larger than `mtu` or than the data path copies),
/// alignment. `avail` is the payload the datagram carries.
#[inline(always)]
pub fn check_header(h: &NetdamHdr, mtu: u32, avail: u32) -> Result<Checked, Status> {
    // Version 2 is CHAIN's alone: a version-2 CHAIN here failed its sr_len.
    if h.version != VERSION && !(h.version == VERSION_2 && h.opcode == Opcode::Chain as u8) {
        return Err(Status::BadVersion);
    }
    let op = match Opcode::from_u8(h.opcode) {
        Some(op) => op,
        None => return Err(Status::BadOpcode),
    };
    check_sr_len(op, h.sr_len)?;
    let vector = match op {
        Opcode::Accumulate | Opcode::Reduce => Some(check_vector_type(h.dtype, h.alu)?),
        _ => None,
    };
    let len = h.len() as u32;
    let (mem_len, resp_len) = match op {
        Opcode::Nop if len != 0 => return Err(Status::BadLength),
        Opcode::Nop => (0, 0),
        Opcode::Write => (len, 0),
        Opcode::Read if len > avail => return Err(Status::BadLength),
        Opcode::Read => (len, len),
        Opcode::FetchAdd | Opcode::Swap if len != 8 => return Err(Status::BadLength),
        Opcode::Cas if len != 16 => return Err(Status::BadLength),
        Opcode::FetchAdd | Opcode::Swap | Opcode::Cas => (8, 8),
        _ if len == 0 => return Err(Status::BadLength),
        Opcode::Reduce => (len, len),
        Opcode::Accumulate | Opcode::WriteNotify => (len, 0),
        Opcode::Msg | Opcode::Chain => (0, 0),
    };
    let answer_ip_len = (CARRIER_LEN - 14 + HDR_LEN) as u32 + h.sr_len as u32 + resp_len;
    if len as usize > MAX_PAYLOAD || answer_ip_len > mtu {
        return Err(Status::TooLarge);
    }
    let align = match (op, vector) {
        (_, Some((dtype, _))) => dtype.width(),
        (Opcode::FetchAdd | Opcode::Swap | Opcode::Cas, _) => 8,
        _ => 1,
    };
    let addr_low = h.addr() as u32;
    if !addr_low.is_multiple_of(align) || (vector.is_some() && !len.is_multiple_of(align)) {
        return Err(Status::Misaligned);
    }
    Ok(Checked {
        op,
        vector,
        perms: required_perms(op),
        mem_len,
        resp_len,
    })
}

/// sr_len is 0 for every op but CHAIN; CHAIN needs 16 + 8n, 1 <= n <= 15.
#[inline(always)]
pub fn check_sr_len(op: Opcode, sr_len: u8) -> Result<(), Status> {
    let ok = match op {
        Opcode::Chain => sr_len.is_multiple_of(8) && (SR_MIN..=SR_MAX).contains(&sr_len),
        _ => sr_len == 0,
    };
    if ok {
        Ok(())
    } else {
        Err(Status::BadSr)
    }
}

/// An unknown dtype or alu, or a bitwise alu on f32, is BAD_DTYPE (section 4).
#[inline(always)]
pub fn check_vector_type(dtype: u8, alu: u8) -> Result<(Dtype, Alu), Status> {
    match (Dtype::from_u8(dtype), Alu::from_u8(alu)) {
        (Some(Dtype::F32), Some(a)) if a.is_bitwise() => Err(Status::BadDtype),
        (Some(d), Some(a)) => Ok((d, a)),
        _ => Err(Status::BadDtype),
    }
}

/// rkey, permission, bounds: `region` is what the rkey named, if anything.
#[inline(always)]
pub fn check_access(region: Option<&Region>, c: &Checked, addr: u64) -> Result<(), Status> {
    if c.op == Opcode::Nop {
        return Ok(());
    }
    let region = match region {
        Some(r) => r,
        None => return Err(Status::BadKey),
    };
    if !region.permits(c.perms) {
        return Err(Status::Forbidden);
    }
    if !region.contains(addr, c.mem_len as u64) {
        return Err(Status::OutOfBounds);
    }
    Ok(())
}

/// Non-idempotent requests run through the at-most-once window (section 7):
/// ACCUMULATE with ADD or XOR, FETCH_ADD, CAS, SWAP.
#[inline(always)]
pub const fn needs_window(c: &Checked) -> bool {
    match c.op {
        Opcode::Accumulate => matches!(c.vector, Some((_, Alu::Add | Alu::Xor))),
        Opcode::FetchAdd | Opcode::Cas | Opcode::Swap => true,
        _ => false,
    }
}

/// Whether a request with `req_flags` that ended with `status` is answered
/// (section 3).
#[inline(always)]
pub const fn answers(op: Opcode, req_flags: u8, status: Status) -> bool {
    if !matches!(status, Status::Ok) {
        return true;
    }
    match op {
        Opcode::Write | Opcode::Accumulate | Opcode::Msg => req_flags & flags::ACK_REQ != 0,
        Opcode::WriteNotify => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::perm;

    const MTU: u32 = 1500;

    fn hdr(op: u8, len: u16, addr: u64) -> NetdamHdr {
        let mut h = NetdamHdr::request(Opcode::Nop);
        h.opcode = op;
        h.set_len(len);
        h.set_addr(addr);
        h
    }

    #[test]
    fn order_version_before_opcode_before_length() {
        let mut h = hdr(0x7F, 3, 1);
        h.version = 2;
        assert_eq!(check_header(&h, MTU, 9000), Err(Status::BadVersion));
        h.version = 1;
        assert_eq!(check_header(&h, MTU, 9000), Err(Status::BadOpcode));
        h.opcode = Opcode::Nop as u8;
        assert_eq!(check_header(&h, MTU, 9000), Err(Status::BadLength));
        h.set_len(0);
        assert!(check_header(&h, MTU, 9000).is_ok());
    }

    #[test]
    fn sr_len_only_for_chain() {
        let mut h = hdr(Opcode::Write as u8, 4, 0);
        h.sr_len = 24;
        assert_eq!(check_header(&h, MTU, 9000), Err(Status::BadSr));
        let mut c = hdr(Opcode::Chain as u8, 4, 0);
        for (sr, ok) in [
            (0, false),
            (16, false),
            (24, true),
            (28, false),
            (136, true),
            (144, false),
        ] {
            c.sr_len = sr;
            assert_eq!(check_header(&c, MTU, 9000).is_ok(), ok, "sr_len {sr}");
        }
    }

    #[test]
    fn dtype_and_alu() {
        assert_eq!(check_vector_type(5, 1), Ok((Dtype::F32, Alu::Add)));
        assert_eq!(check_vector_type(5, 4), Err(Status::BadDtype));
        assert_eq!(check_vector_type(1, 6), Ok((Dtype::I32, Alu::Xor)));
        assert_eq!(check_vector_type(0, 1), Err(Status::BadDtype));
        assert_eq!(check_vector_type(6, 1), Err(Status::BadDtype));
        assert_eq!(check_vector_type(1, 7), Err(Status::BadDtype));
        // dtype is checked before length: a zero-length vector with a bad dtype.
        let mut h = hdr(Opcode::Accumulate as u8, 0, 0);
        assert_eq!(check_header(&h, MTU, 9000), Err(Status::BadDtype));
        h.dtype = 1;
        h.alu = 1;
        assert_eq!(check_header(&h, MTU, 9000), Err(Status::BadLength));
    }

    #[test]
    fn lengths_and_alignment() {
        assert_eq!(
            check_header(&hdr(Opcode::FetchAdd as u8, 16, 0), MTU, 9000),
            Err(Status::BadLength)
        );
        assert_eq!(
            check_header(&hdr(Opcode::Cas as u8, 8, 0), MTU, 9000),
            Err(Status::BadLength)
        );
        assert_eq!(
            check_header(&hdr(Opcode::Cas as u8, 16, 4), MTU, 9000),
            Err(Status::Misaligned)
        );
        let c = check_header(&hdr(Opcode::Cas as u8, 16, 8), MTU, 9000).unwrap();
        assert_eq!((c.mem_len, c.resp_len), (8, 8));
        assert_eq!(
            check_header(&hdr(Opcode::Msg as u8, 0, 0), MTU, 9000),
            Err(Status::BadLength)
        );
        let r = check_header(&hdr(Opcode::Read as u8, 0, 3), MTU, 9000).unwrap();
        assert_eq!(r.mem_len, 0);
        let mut v = hdr(Opcode::Reduce as u8, 6, 0);
        v.dtype = Dtype::I32 as u8;
        v.alu = Alu::Min as u8;
        assert_eq!(check_header(&v, MTU, 9000), Err(Status::Misaligned));
        v.set_len(8);
        v.set_addr(2);
        assert_eq!(check_header(&v, MTU, 9000), Err(Status::Misaligned));
    }

    #[test]
    fn read_needs_its_padding_others_are_dropped() {
        let r = hdr(Opcode::Read as u8, 100, 0);
        assert!(!len_past_datagram(&r, 99));
        assert_eq!(check_header(&r, MTU, 99), Err(Status::BadLength));
        assert!(check_header(&r, MTU, 100).is_ok());
        let w = hdr(Opcode::Write as u8, 100, 0);
        assert!(len_past_datagram(&w, 99));
        assert!(!len_past_datagram(&w, 100));
    }

    #[test]
    fn too_large_when_the_answer_exceeds_the_mtu() {
        // 20 + 8 + 32 + 1440 = 1500: fits exactly; one more byte does not.
        assert!(check_header(&hdr(Opcode::Read as u8, 1440, 0), MTU, 9000).is_ok());
        assert_eq!(
            check_header(&hdr(Opcode::Read as u8, 1441, 0), MTU, 9000),
            Err(Status::TooLarge)
        );
        // A write is answered without its payload, but no node copies more than MAX_PAYLOAD.
        assert!(check_header(&hdr(Opcode::Write as u8, 4000, 0), MTU, 9000).is_ok());
        assert_eq!(
            check_header(&hdr(Opcode::Write as u8, MAX_PAYLOAD as u16 + 1, 0), MTU, 9000),
            Err(Status::TooLarge)
        );
    }

    #[test]
    fn access_order_key_permission_bounds() {
        let c = check_header(&hdr(Opcode::Write as u8, 8, 0), MTU, 9000).unwrap();
        let ro = Region {
            base: 0,
            size: 16,
            perms: perm::READ,
            _reserved: 0,
        };
        let rw = Region {
            perms: perm::READ | perm::WRITE,
            ..ro
        };
        assert_eq!(check_access(None, &c, 0), Err(Status::BadKey));
        assert_eq!(check_access(Some(&ro), &c, 100), Err(Status::Forbidden));
        assert_eq!(check_access(Some(&rw), &c, 9), Err(Status::OutOfBounds));
        assert_eq!(check_access(Some(&rw), &c, 8), Ok(()));
        let nop = check_header(&hdr(0, 0, 0), MTU, 9000).unwrap();
        assert_eq!(check_access(None, &nop, 0), Ok(()));
    }

    #[test]
    fn who_answers() {
        assert!(!answers(Opcode::Write, 0, Status::Ok));
        assert!(answers(Opcode::Write, flags::ACK_REQ, Status::Ok));
        assert!(answers(Opcode::Write, 0, Status::OutOfBounds));
        assert!(!answers(Opcode::WriteNotify, flags::ACK_REQ, Status::Ok));
        assert!(answers(Opcode::Read, 0, Status::Ok));
        assert!(answers(Opcode::Nop, 0, Status::Ok));
    }
}
