//! The traffic: one datagram per mode, sent from the sender host. At a set
//! rate, a UDP socket sends it with sendmmsg, a batch per millisecond. As
//! fast as possible (rate 0), the project's generator (`generator::blast`)
//! sends the whole frame, 64 per system call, unpaced.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use aya::{
    programs::{Xdp, XdpMode},
    EbpfLoader,
};
use netdam_common::{
    frame::{netdam_frame, udp_frame, Endpoint, Ipv4Opts},
    NetdamHdr, Opcode,
};

use super::{MemwallError, Mode, RKEY, SOCKET_PORT, SPLIT_PORT};
use crate::{
    testbed::{host_ip, host_mac, IFACE},
    NETDAM_LAB_XDP,
};

/// Where WRITE and WRITE_NOTIFY put their payload in NetDAM memory.
pub const WRITE_ADDR: u64 = 1 << 20;

/// The frame `mode` sends with `size` bytes of payload, from host 0 to host 1.
pub fn frame(mode: Mode, size: usize) -> Vec<u8> {
    let src = Endpoint {
        mac: host_mac(0),
        ip: host_ip(0),
        port: 40000,
    };
    let to = |port| Endpoint {
        mac: host_mac(1),
        ip: host_ip(1),
        port,
    };
    let payload: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
    let netdam = |op: Opcode, addr: u64| {
        let mut h = NetdamHdr::request(op);
        h.set_rkey(RKEY);
        h.set_addr(addr);
        h.set_len(size as u16);
        netdam_frame(&src, &to(netdam_common::wire::DEFAULT_PORT), &h, &payload)
    };
    match mode {
        Mode::Socket => udp_frame(&src, &to(SOCKET_PORT), &Ipv4Opts::default(), &payload),
        Mode::AfXdp => netdam(Opcode::Msg, 0),
        Mode::Write => netdam(Opcode::Write, WRITE_ADDR),
        Mode::WriteNotify => netdam(Opcode::WriteNotify, WRITE_ADDR),
        Mode::Split => udp_frame(&src, &to(SPLIT_PORT), &Ipv4Opts::default(), &payload),
    }
}

/// Sends `frame` from the calling thread's namespace (the sender host) at
/// `rate` frames per second (0: as fast as it goes) until `stop`, and
/// returns the frames sent.
pub fn generate(frame: &[u8], rate: u64, stop: &AtomicBool) -> Result<u64, MemwallError> {
    if rate == 0 {
        flat_out(frame, stop)
    } else {
        paced(frame, rate, stop)
    }
}

/// sendmmsg of the frame's UDP payload to its destination, `rate` per second.
fn paced(frame: &[u8], rate: u64, stop: &AtomicBool) -> Result<u64, MemwallError> {
    use std::os::fd::AsRawFd;
    let view = netdam_common::frame::parse_udp(frame).expect("a UDP frame");
    let dst = std::net::SocketAddrV4::new(view.dst_ip, view.dst_port);
    let payload = view.payload.to_vec();
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").map_err(|e| MemwallError::Generator(e.to_string()))?;
    sock.connect(dst)
        .map_err(|e| MemwallError::Generator(format!("{dst}: {e}")))?;
    let per_ms = (rate / 1000).max(1) as usize;
    let tick = Duration::from_secs_f64(per_ms as f64 / rate as f64);
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    // SAFETY: zeroed mmsghdr are valid; each points at the one iovec of the payload.
    let mut msgs: Vec<libc::mmsghdr> = (0..per_ms.min(64))
        .map(|_| {
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = &mut iov;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();
    let start = Instant::now();
    let mut sent = 0u64;
    let mut ticks = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let mut left = per_ms;
        while left > 0 {
            let n = left.min(msgs.len());
            // SAFETY: n headers over the live payload.
            let r = unsafe { libc::sendmmsg(sock.as_raw_fd(), msgs.as_mut_ptr(), n as u32, 0) };
            if r <= 0 {
                // A full socket buffer or an ICMP error from the last send: count what went and go on.
                break;
            }
            sent += r as u64;
            left -= r as usize;
        }
        ticks += 1;
        if let Some(wait) = (start + tick * ticks).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    Ok(sent)
}

/// The whole frame out of the sender's interface as fast as it goes
/// (`generator::blast`). Answers coming back are dropped in XDP there.
fn flat_out(frame: &[u8], stop: &AtomicBool) -> Result<u64, MemwallError> {
    let gen = |e: aya::EbpfError| MemwallError::Generator(e.to_string());
    let prog = |e: aya::programs::ProgramError| MemwallError::Generator(e.to_string());
    let mut ebpf = EbpfLoader::new().load(NETDAM_LAB_XDP).map_err(gen)?;
    let absorb: &mut Xdp = ebpf
        .program_mut("netdam_drop")
        .expect("the object has netdam_drop")
        .try_into()
        .map_err(prog)?;
    absorb.load().map_err(prog)?;
    absorb.attach(IFACE, XdpMode::Driver).map_err(prog)?;
    crate::generator::blast(IFACE, frame, || !stop.load(Ordering::Relaxed))
        .map_err(|e| MemwallError::Generator(format!("the AF_PACKET generator: {e}")))
}

/// A generator thread in network namespace `netns`, stopped by the flag.
pub fn spawn(
    netns: &str,
    frame: Vec<u8>,
    rate: u64,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Result<u64, MemwallError>> {
    let path = format!("/run/netns/{netns}");
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).map_err(|e| MemwallError::Generator(format!("{path}: {e}")))?;
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| MemwallError::Generator(format!("entering {path}: {e}")))?;
        generate(&frame, rate, &stop)
    })
}
