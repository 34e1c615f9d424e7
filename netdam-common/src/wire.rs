//! The NetDAM header (PROTOCOL.md section 2) and its code points (sections 3-5).

/// UDP port P unless the controller says otherwise.
pub const DEFAULT_PORT: u16 = 4793;
pub const MAGIC: u8 = 0xDA;
pub const VERSION: u8 = 1;
/// Version 2 (docs/PROTOCOL.md, the version-2 section): CHAIN only, with
/// hops that hold early partials, repair late copies and stamp completion.
pub const VERSION_2: u8 = 2;
/// Bytes of the NetDAM header.
pub const HDR_LEN: usize = 32;
/// Ethernet II + IPv4 without options + UDP: the carrier of every packet a node sends.
pub const CARRIER_LEN: usize = 14 + 20 + 8;

pub const ETH_P_IPV4: u16 = 0x0800;
pub const IPPROTO_UDP: u8 = 17;

/// Header flag bits.
pub mod flags {
    /// Answer even on success.
    pub const ACK_REQ: u8 = 1 << 0;
    /// This packet is a response.
    pub const RESP: u8 = 1 << 1;
}

/// Credit a node reports when it does not limit its receivers.
pub const CREDIT_UNLIMITED: u16 = 0xFFFF;

macro_rules! code_points {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident = $val:expr, $text:expr;)* }) => {
        $(#[$m])*
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $var = $val,)* }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$var,)*];

            #[inline(always)]
            pub const fn from_u8(v: u8) -> Option<Self> {
                match v { $($val => Some($name::$var),)* _ => None }
            }

            /// The name PROTOCOL.md uses.
            pub const fn name(self) -> &'static str {
                match self { $($name::$var => $text,)* }
            }
        }
    };
}

code_points! {
    /// Opcodes (section 3).
    Opcode {
        Nop = 0x00, "NOP";
        Write = 0x01, "WRITE";
        Read = 0x02, "READ";
        Accumulate = 0x03, "ACCUMULATE";
        FetchAdd = 0x04, "FETCH_ADD";
        Cas = 0x05, "CAS";
        Swap = 0x06, "SWAP";
        Reduce = 0x07, "REDUCE";
        Msg = 0x08, "MSG";
        WriteNotify = 0x09, "WRITE_NOTIFY";
        Chain = 0x10, "CHAIN";
    }
}

code_points! {
    /// Status codes (section 5).
    Status {
        Ok = 0, "OK";
        BadVersion = 1, "BAD_VERSION";
        BadOpcode = 2, "BAD_OPCODE";
        OutOfBounds = 3, "OUT_OF_BOUNDS";
        BadKey = 4, "BAD_KEY";
        BadLength = 5, "BAD_LENGTH";
        Misaligned = 6, "MISALIGNED";
        BadDtype = 7, "BAD_DTYPE";
        NotReady = 8, "NOT_READY";
        NoReceiver = 9, "NO_RECEIVER";
        Duplicate = 10, "DUPLICATE";
        Stale = 11, "STALE";
        BadSr = 12, "BAD_SR";
        TooLarge = 13, "TOO_LARGE";
        Forbidden = 14, "FORBIDDEN";
        Held = 15, "HELD";
        Mismatch = 16, "MISMATCH";
    }
}

code_points! {
    /// Vector element types (section 4).
    Dtype {
        I32 = 1, "i32";
        U32 = 2, "u32";
        I64 = 3, "i64";
        U64 = 4, "u64";
        F32 = 5, "f32";
    }
}

code_points! {
    /// Combine operators of vector ops (section 4).
    Alu {
        Add = 1, "ADD";
        Min = 2, "MIN";
        Max = 3, "MAX";
        And = 4, "AND";
        Or = 5, "OR";
        Xor = 6, "XOR";
    }
}

impl Dtype {
    /// Element width in bytes.
    pub const fn width(self) -> u32 {
        match self {
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 4,
            Dtype::I64 | Dtype::U64 => 8,
        }
    }
}

impl Alu {
    pub const fn is_bitwise(self) -> bool {
        matches!(self, Alu::And | Alu::Or | Alu::Xor)
    }
}

/// The 32-byte NetDAM header exactly as on the wire: multi-byte fields hold
/// network-order values, read and written through the accessors.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetdamHdr {
    pub magic: u8,
    pub version: u8,
    pub opcode: u8,
    pub flags: u8,
    pub status: u8,
    pub dtype: u8,
    pub alu: u8,
    pub sr_len: u8,
    seq: u32,
    tag: u32,
    addr: u64,
    rkey: u32,
    len: u16,
    credit: u16,
}

const _: () = assert!(core::mem::size_of::<NetdamHdr>() == HDR_LEN);

macro_rules! be_field {
    ($get:ident, $set:ident, $t:ty) => {
        #[inline(always)]
        pub const fn $get(&self) -> $t {
            <$t>::from_be(self.$get)
        }
        #[inline(always)]
        pub fn $set(&mut self, v: $t) {
            self.$get = v.to_be();
        }
    };
}

// `len` is the wire field of that name, not a container length.
#[allow(clippy::len_without_is_empty)]
impl NetdamHdr {
    /// A version-1 request with every other field zero.
    pub const fn request(opcode: Opcode) -> Self {
        NetdamHdr {
            magic: MAGIC,
            version: VERSION,
            opcode: opcode as u8,
            flags: 0,
            status: 0,
            dtype: 0,
            alu: 0,
            sr_len: 0,
            seq: 0,
            tag: 0,
            addr: 0,
            rkey: 0,
            len: 0,
            credit: 0,
        }
    }

    be_field!(seq, set_seq, u32);
    be_field!(tag, set_tag, u32);
    be_field!(addr, set_addr, u64);
    be_field!(rkey, set_rkey, u32);
    be_field!(len, set_len, u16);
    be_field!(credit, set_credit, u16);

    #[inline(always)]
    pub const fn is_response(&self) -> bool {
        self.flags & flags::RESP != 0
    }

    /// Turns a request header into its response (section 3): flags, status,
    /// credit and len change, every other field is echoed.
    #[inline(always)]
    pub fn make_response(&mut self, status: Status, payload_len: u16) {
        self.flags = flags::RESP | (self.flags & flags::ACK_REQ);
        self.status = status as u8;
        self.set_credit(CREDIT_UNLIMITED);
        self.set_len(payload_len);
    }

    /// The header as the bytes on the wire.
    pub fn to_bytes(&self) -> [u8; HDR_LEN] {
        // SAFETY: NetdamHdr is repr(C), 32 bytes without padding (asserted above).
        unsafe { core::mem::transmute_copy(self) }
    }

    /// Reads a header from the start of `bytes`; `None` if fewer than 32 bytes.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let b: &[u8; HDR_LEN] = bytes.get(..HDR_LEN)?.try_into().ok()?;
        // SAFETY: every bit pattern is a valid NetdamHdr; read_unaligned copes with any alignment.
        Some(unsafe { core::ptr::read_unaligned(b.as_ptr().cast::<NetdamHdr>()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_offsets_match_protocol() {
        let mut h = NetdamHdr::request(Opcode::Read);
        h.flags = flags::ACK_REQ;
        h.dtype = 5;
        h.alu = 2;
        h.sr_len = 24;
        h.set_seq(0x0102_0304);
        h.set_tag(0x0506_0708);
        h.set_addr(0x1112_1314_1516_1718);
        h.set_rkey(0x2122_2324);
        h.set_len(0x3132);
        h.set_credit(0x4142);
        let b = h.to_bytes();
        assert_eq!(b[0], 0xDA);
        assert_eq!(b[1], 1);
        assert_eq!(b[2], 0x02);
        assert_eq!(b[3], 1);
        assert_eq!(b[5..8], [5, 2, 24]);
        assert_eq!(b[8..12], [1, 2, 3, 4]);
        assert_eq!(b[12..16], [5, 6, 7, 8]);
        assert_eq!(b[16..24], [0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]);
        assert_eq!(b[24..28], [0x21, 0x22, 0x23, 0x24]);
        assert_eq!(b[28..30], [0x31, 0x32]);
        assert_eq!(b[30..32], [0x41, 0x42]);
        assert_eq!(NetdamHdr::from_bytes(&b), Some(h));
        assert_eq!(NetdamHdr::from_bytes(&b[..31]), None);
    }

    #[test]
    fn response_keeps_ack_and_echoes_fields() {
        let mut h = NetdamHdr::request(Opcode::Write);
        h.flags = flags::ACK_REQ | 0x80;
        h.set_seq(77);
        h.set_len(100);
        h.make_response(Status::OutOfBounds, 0);
        assert_eq!(h.flags, flags::RESP | flags::ACK_REQ);
        assert_eq!(h.status, 3);
        assert_eq!(h.credit(), 0xFFFF);
        assert_eq!(h.len(), 0);
        assert_eq!(h.seq(), 77);
    }

    #[test]
    fn code_points_round_trip() {
        for op in Opcode::ALL {
            assert_eq!(Opcode::from_u8(*op as u8), Some(*op));
        }
        for s in Status::ALL {
            assert_eq!(Status::from_u8(*s as u8), Some(*s));
        }
        assert_eq!(Status::ALL.len(), 17);
        assert!(Status::ALL.len() as u32 <= crate::counters::STATUS_SLOTS);
        assert_eq!(Opcode::from_u8(0x0A), None);
        assert_eq!(Status::from_u8(17), None);
    }
}

/// The IPv4 header checksum of a 20-byte header whose checksum field is zero.
#[inline(always)]
pub fn ipv4_header_checksum(h: &[u8; 20]) -> u16 {
    let mut sum = 0u32;
    let mut i = 0;
    while i < 20 {
        sum += u16::from_be_bytes([h[i], h[i + 1]]) as u32;
        i += 2;
    }
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    !(sum as u16)
}

/// An Internet checksum after one 16-bit field of the summed data changed
/// from `old` to `new` (RFC 1624, eqn. 3).
#[inline(always)]
pub const fn checksum_update16(check: u16, old: u16, new: u16) -> u16 {
    let mut sum = (!check) as u32 + (!old) as u32 + new as u32;
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    !(sum as u16)
}

/// A source a node never answers (section 1): 0.0.0.0/8, 127.0.0.0/8,
/// multicast, limited broadcast. `ip` in host order.
#[inline(always)]
pub const fn is_unanswerable_source(ip: u32) -> bool {
    let first = ip >> 24;
    first == 0 || first == 127 || (first & 0xF0) == 0xE0 || ip == u32::MAX
}

#[cfg(test)]
mod carrier_tests {
    use super::*;

    #[test]
    fn checksum_update_matches_a_full_recompute() {
        let mut h: [u8; 20] = [
            0x45, 0, 0x05, 0xDC, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 2, 198, 18, 0, 1,
        ];
        for new_len in [20u16, 61, 0x05DB, 0xFFFF, 1500] {
            let old = u16::from_be_bytes([h[2], h[3]]);
            let start = ipv4_header_checksum(&h);
            h[2..4].copy_from_slice(&new_len.to_be_bytes());
            assert_eq!(
                checksum_update16(start, old, new_len),
                ipv4_header_checksum(&h),
                "len {new_len}"
            );
        }
    }

    #[test]
    fn ipv4_checksum_of_known_header() {
        // Example from RFC 1071 style captures: 45 00 00 73 00 00 40 00 40 11 [b8 61] c0 a8 00 01 c0 a8 00 c7
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0, 0, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00,
            0xc7,
        ];
        assert_eq!(ipv4_header_checksum(&h), 0xb861);
        h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        // A header with its checksum in place sums to 0xFFFF, i.e. checksum 0.
        let mut zeroed = h;
        zeroed[10] = 0;
        zeroed[11] = 0;
        assert_eq!(ipv4_header_checksum(&zeroed), 0xb861);
    }

    #[test]
    fn unanswerable_sources() {
        assert!(is_unanswerable_source(0x0000_0001));
        assert!(is_unanswerable_source(0x7F00_0001));
        assert!(is_unanswerable_source(0xE000_00FB));
        assert!(is_unanswerable_source(0xEFFF_FFFF));
        assert!(is_unanswerable_source(0xFFFF_FFFF));
        assert!(!is_unanswerable_source(0xC612_0001));
        assert!(!is_unanswerable_source(0x0A00_0001));
    }
}
