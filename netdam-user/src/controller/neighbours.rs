//! The peers' MACs (PROTOCOL.md sections 1 and 6, docs/conformance.md 19):
//! the data path binds each peer to a MAC in its peer table and forwards
//! CHAIN packets with it. The controller takes the MACs from the kernel's
//! neighbour table, makes the kernel resolve a peer without an entry, and
//! nudges every entry now and then so that the kernel re-checks stale ones
//! (a peer whose MAC changed is found that way, or by its gratuitous ARP).

use std::{
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    time::{Duration, Instant},
};

/// The discard port: a datagram there only makes the kernel resolve the address.
const DISCARD_PORT: u16 = 9;

/// The complete ARP entries on `iface`: (address, MAC).
pub fn complete(iface: &str) -> Vec<(Ipv4Addr, [u8; 6])> {
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

/// Makes the kernel use the neighbour entry of each of `peers` once (an
/// empty datagram to the discard port), without waiting: a missing entry
/// gets resolved, a stale one probed.
pub fn nudge(own: Ipv4Addr, peers: &[Ipv4Addr]) {
    if let Ok(s) = UdpSocket::bind("0.0.0.0:0") {
        for p in peers.iter().filter(|p| **p != own) {
            let _ = s.send_to(&[], SocketAddrV4::new(*p, DISCARD_PORT));
        }
    }
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
    let deadline = Instant::now() + wait;
    let mut next_nudge = Instant::now();
    while !left.is_empty() && Instant::now() < deadline {
        if Instant::now() >= next_nudge {
            nudge(own, &left);
            next_nudge = Instant::now() + Duration::from_millis(250);
        }
        std::thread::sleep(Duration::from_millis(10));
        left = missing(&resolved(iface, peers));
    }
    left
}
