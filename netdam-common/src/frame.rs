//! Building and parsing whole Ethernet/IPv4/UDP frames on the host: for the
//! tests that feed the XDP program, and for anything that must look at a
//! frame byte by byte.

use std::net::Ipv4Addr;

use crate::wire::{NetdamHdr, ETH_P_IPV4, HDR_LEN, IPPROTO_UDP};

/// One side of a UDP exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub mac: [u8; 6],
    pub ip: Ipv4Addr,
    pub port: u16,
}

/// Knobs for the IPv4 header of a built frame.
#[derive(Clone, Debug)]
pub struct Ipv4Opts {
    pub tos: u8,
    pub id: u16,
    /// Flags and fragment offset, as on the wire (e.g. 0x2000 = MF).
    pub frag: u16,
    pub ttl: u8,
    /// IPv4 options, padded by the caller to a multiple of 4 bytes.
    pub options: Vec<u8>,
}

impl Default for Ipv4Opts {
    fn default() -> Self {
        Ipv4Opts {
            tos: 0,
            id: 0x1234,
            frag: 0x4000,
            ttl: 64,
            options: Vec::new(),
        }
    }
}

/// An Ethernet II + IPv4 + UDP frame with correct IPv4 and UDP checksums.
pub fn udp_frame(src: &Endpoint, dst: &Endpoint, ip: &Ipv4Opts, payload: &[u8]) -> Vec<u8> {
    assert!(
        ip.options.len().is_multiple_of(4) && ip.options.len() <= 40,
        "IPv4 options must be 0..=40 bytes, a multiple of 4"
    );
    let ihl = 5 + ip.options.len() / 4;
    let udp_len = 8 + payload.len();
    let total = ihl * 4 + udp_len;
    let mut f = Vec::with_capacity(14 + total);
    f.extend_from_slice(&dst.mac);
    f.extend_from_slice(&src.mac);
    f.extend_from_slice(&ETH_P_IPV4.to_be_bytes());
    let mut h = [0u8; 20];
    h[0] = 0x40 | ihl as u8;
    h[1] = ip.tos;
    h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    h[4..6].copy_from_slice(&ip.id.to_be_bytes());
    h[6..8].copy_from_slice(&ip.frag.to_be_bytes());
    h[8] = ip.ttl;
    h[9] = IPPROTO_UDP;
    h[12..16].copy_from_slice(&src.ip.octets());
    h[16..20].copy_from_slice(&dst.ip.octets());
    // The checksum covers the options too.
    let mut full = h.to_vec();
    full.extend_from_slice(&ip.options);
    let csum = checksum_fold(sum_be_words(&full, 0));
    h[10..12].copy_from_slice(&csum.to_be_bytes());
    f.extend_from_slice(&h);
    f.extend_from_slice(&ip.options);
    let mut udp = Vec::with_capacity(udp_len);
    udp.extend_from_slice(&src.port.to_be_bytes());
    udp.extend_from_slice(&dst.port.to_be_bytes());
    udp.extend_from_slice(&(udp_len as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let c = udp_checksum(src.ip, dst.ip, &udp);
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&udp);
    f
}

/// A NetDAM frame: `hdr`, then `rest` (SR header and payload) as UDP payload.
pub fn netdam_frame(src: &Endpoint, dst: &Endpoint, hdr: &NetdamHdr, rest: &[u8]) -> Vec<u8> {
    let mut payload = hdr.to_bytes().to_vec();
    payload.extend_from_slice(rest);
    udp_frame(src, dst, &Ipv4Opts::default(), &payload)
}

/// The fields of a parsed Ethernet/IPv4/UDP frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpView<'a> {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub ihl: u8,
    pub tos: u8,
    pub ip_total_len: u16,
    pub ip_id: u16,
    pub frag: u16,
    pub ttl: u8,
    pub ip_checksum_ok: bool,
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
    pub udp_len: u16,
    pub udp_checksum: u16,
    /// The UDP payload as far as the UDP length says.
    pub payload: &'a [u8],
}

impl UdpView<'_> {
    pub fn netdam(&self) -> Option<(NetdamHdr, &[u8])> {
        Some((NetdamHdr::from_bytes(self.payload)?, &self.payload[HDR_LEN..]))
    }
}

/// Parses an Ethernet II/IPv4/UDP frame; `None` if it is not one or is cut short.
pub fn parse_udp(f: &[u8]) -> Option<UdpView<'_>> {
    if f.len() < 34 || u16::from_be_bytes([f[12], f[13]]) != ETH_P_IPV4 || f[14] >> 4 != 4 {
        return None;
    }
    let ihl = f[14] & 0x0F;
    let l4 = 14 + ihl as usize * 4;
    if ihl < 5 || f.len() < l4 + 8 || f[23] != IPPROTO_UDP {
        return None;
    }
    let udp_len = u16::from_be_bytes([f[l4 + 4], f[l4 + 5]]);
    if (udp_len as usize) < 8 || f.len() < l4 + udp_len as usize {
        return None;
    }
    let ip_checksum_ok = ipv4_header_checksum_ok(&f[14..l4]);
    let mac = |o: usize| -> [u8; 6] { f[o..o + 6].try_into().unwrap() };
    let ip = |o: usize| Ipv4Addr::new(f[o], f[o + 1], f[o + 2], f[o + 3]);
    let be16 = |o: usize| u16::from_be_bytes([f[o], f[o + 1]]);
    Some(UdpView {
        dst_mac: mac(0),
        src_mac: mac(6),
        ihl,
        tos: f[15],
        ip_total_len: be16(16),
        ip_id: be16(18),
        frag: be16(20),
        ttl: f[22],
        ip_checksum_ok,
        src_ip: ip(26),
        dst_ip: ip(30),
        src_port: be16(l4),
        dst_port: be16(l4 + 2),
        udp_len,
        udp_checksum: be16(l4 + 6),
        payload: &f[l4 + 8..l4 + udp_len as usize],
    })
}

/// Whether the IPv4 header `h` (IHL * 4 bytes, options included) holds its
/// right checksum: summed with it in place, it folds to 0.
pub fn ipv4_header_checksum_ok(h: &[u8]) -> bool {
    checksum_fold(sum_be_words(h, 0)) == 0
}

/// The UDP checksum of `udp` (header with checksum field zero, then payload).
pub fn udp_checksum(src: Ipv4Addr, dst: Ipv4Addr, udp: &[u8]) -> u16 {
    let mut pseudo = Vec::with_capacity(12);
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&[0, IPPROTO_UDP]);
    pseudo.extend_from_slice(&(udp.len() as u16).to_be_bytes());
    let c = checksum_fold(sum_be_words(udp, sum_be_words(&pseudo, 0)));
    // 0 means "no checksum" in UDP over IPv4; a computed 0 is sent as 0xFFFF.
    if c == 0 {
        0xFFFF
    } else {
        c
    }
}

fn sum_be_words(b: &[u8], mut sum: u64) -> u64 {
    for pair in b.chunks(2) {
        sum += u64::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
    }
    sum
}

fn checksum_fold(mut sum: u64) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ipv4_header_checksum, Opcode};

    fn ep(last: u8, port: u16) -> Endpoint {
        Endpoint {
            mac: [2, 0, 0, 0, 0, last],
            ip: Ipv4Addr::new(198, 18, 0, last),
            port,
        }
    }

    #[test]
    fn built_frames_parse_back() {
        let mut h = NetdamHdr::request(Opcode::Write);
        h.set_len(3);
        let f = netdam_frame(&ep(1, 5000), &ep(2, 4793), &h, &[7, 8, 9]);
        let v = parse_udp(&f).unwrap();
        assert!(v.ip_checksum_ok);
        assert_eq!((v.src_port, v.dst_port, v.udp_len), (5000, 4793, 8 + 32 + 3));
        let (hh, rest) = v.netdam().unwrap();
        assert_eq!(hh, h);
        assert_eq!(rest, &[7, 8, 9]);
        // The UDP checksum verifies: summing with it in place gives 0.
        let l4 = 34;
        let mut seg = f[l4..].to_vec();
        let stored = u16::from_be_bytes([seg[6], seg[7]]);
        seg[6] = 0;
        seg[7] = 0;
        assert_eq!(udp_checksum(v.src_ip, v.dst_ip, &seg), stored);
        // The data path's checksum agrees with this module's.
        let mut z: [u8; 20] = f[14..34].try_into().unwrap();
        z[10] = 0;
        z[11] = 0;
        assert_eq!(ipv4_header_checksum(&z), checksum_fold(sum_be_words(&z, 0)));
    }

    #[test]
    fn options_shift_udp() {
        let opts = Ipv4Opts {
            options: vec![1, 1, 1, 0],
            ..Default::default()
        };
        let f = udp_frame(&ep(1, 1), &ep(2, 2), &opts, b"hi");
        let v = parse_udp(&f).unwrap();
        assert_eq!(v.ihl, 6);
        assert!(v.ip_checksum_ok);
        assert_eq!(v.payload, b"hi");
        // The checksum covers the options: one changed option byte breaks it.
        let mut g = f.clone();
        g[35] ^= 0x80;
        assert!(!parse_udp(&g).unwrap().ip_checksum_ok);
        assert!(!ipv4_header_checksum_ok(&g[14..38]));
        assert!(ipv4_header_checksum_ok(&f[14..38]));
    }
}
