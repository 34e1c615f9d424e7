//! Neighbour entries for the peers (PROTOCOL.md section 6): the data path
//! forwards CHAIN packets with MACs from the kernel's FIB, which never
//! resolves an address by itself, so the controller makes the kernel do it
//! at start and whenever an entry is missing.

use std::{
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    time::{Duration, Instant},
};

/// The discard port: a datagram there only makes the kernel resolve the address.
const DISCARD_PORT: u16 = 9;

/// The complete ARP entries on `iface`: (address, MAC).
fn complete(iface: &str) -> Vec<(Ipv4Addr, [u8; 6])> {
    // The calling thread's namespace: a thread may have entered another than its process.
    let table = std::fs::read_to_string("/proc/thread-self/net/arp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // IP address, HW type, Flags, HW address, Mask, Device; flag 0x2 = complete.
            let flags = u32::from_str_radix(f.get(2)?.trim_start_matches("0x"), 16).ok()?;
            if f.get(5) != Some(&iface) || flags & 0x2 == 0 {
                return None;
            }
            let mac: Vec<u8> = f[3].split(':').filter_map(|b| u8::from_str_radix(b, 16).ok()).collect();
            Some((f[0].parse().ok()?, mac.try_into().ok()?))
        })
        .collect()
}

/// Peers of `peers` that have a complete ARP entry on `iface`.
pub fn resolved(iface: &str, peers: &[Ipv4Addr]) -> Vec<Ipv4Addr> {
    let complete = complete(iface);
    peers
        .iter()
        .copied()
        .filter(|p| complete.iter().any(|(a, _)| a == p))
        .collect()
}

/// The MAC of `ip` on `iface`, resolving it first (up to `wait`) if need be.
pub fn mac_of(iface: &str, own: Ipv4Addr, ip: Ipv4Addr, wait: Duration) -> Option<[u8; 6]> {
    resolve(iface, own, &[ip], wait);
    complete(iface).into_iter().find(|(a, _)| *a == ip).map(|(_, m)| m)
}

/// Makes the kernel resolve every peer without an entry on `iface`, waiting
/// up to `wait`; returns the peers still unresolved.
pub fn resolve(iface: &str, own: Ipv4Addr, peers: &[Ipv4Addr], wait: Duration) -> Vec<Ipv4Addr> {
    let missing =
        |r: &[Ipv4Addr]| -> Vec<Ipv4Addr> { peers.iter().copied().filter(|p| *p != own && !r.contains(p)).collect() };
    let mut left = missing(&resolved(iface, peers));
    if left.is_empty() {
        return left;
    }
    let socket = UdpSocket::bind("0.0.0.0:0");
    let deadline = Instant::now() + wait;
    let mut next_nudge = Instant::now();
    while !left.is_empty() && Instant::now() < deadline {
        if Instant::now() >= next_nudge {
            if let Ok(s) = &socket {
                for p in &left {
                    let _ = s.send_to(&[], SocketAddrV4::new(*p, DISCARD_PORT));
                }
            }
            next_nudge = Instant::now() + Duration::from_millis(250);
        }
        std::thread::sleep(Duration::from_millis(10));
        left = missing(&resolved(iface, peers));
    }
    left
}
