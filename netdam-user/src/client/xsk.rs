//! The AF_XDP path of a client's transfers (docs/client.md, "The AF_XDP
//! client"): answers arrive in an AF_XDP socket's RX ring, steered there by
//! a small XDP program (`netdam_client_rx`) on the interface that reaches
//! the node, so that they never cross the kernel's UDP stack; requests
//! leave through the path's UDP socket, many per system call with UDP GSO.
//! (Sending through the socket's TX ring was measured too: in copy mode,
//! veth's, the kernel builds an skb per frame, where GSO builds one per 44,
//! and the transfer was 10 to 25% slower.)
//!
//! The program is attached for the client's lifetime (a bpf_link, so it
//! goes when the process does, killed or not) and needs the interface to
//! itself: a host that serves a node on that interface uses the UDP path.

use std::{
    io,
    net::{Ipv4Addr, SocketAddr, UdpSocket},
    os::fd::AsRawFd,
    time::{Duration, Instant},
};

use aya::{
    maps::{HashMap, MapData, XskMap},
    programs::{Xdp, XdpMode},
    Ebpf, EbpfLoader,
};
use netdam_common::steer::{ClientFlow, STEER_LEN};

use super::batch::{BatchSocket, Packet, RecvBufs, RECV_BATCH};
use crate::{
    afxdp::XskSocket,
    controller::{interface_holding, queues::rx_queues, Interface},
};

/// The client's receive program (netdam-ebpf/src/bin/netdam-client-xdp.rs).
pub static NETDAM_CLIENT_XDP: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/netdam-client-xdp"));

/// How long a waiting `recv` spins (yielding to the runtime) before it sleeps.
const SPIN: Duration = Duration::from_micros(50);
/// How long one sleep of a waiting `recv` lasts at most, and how long it
/// waits in all: the transfer's loop then looks at its timeouts.
const POLL_MS: libc::c_int = 1;
const WAIT: Duration = Duration::from_millis(5);

/// UMEM frames (and RX ring entries) per socket: room for a window of
/// 1023 answers four times over.
const FRAMES: u32 = 4096;

/// Why the AF_XDP path could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct XskPathError(String);

fn fail(what: impl Into<String>) -> XskPathError {
    XskPathError(what.into())
}

pub(super) struct XskPath {
    /// One per receive queue.
    sockets: Vec<XskSocket>,
    /// Holds the program and its link: dropped, the program leaves the interface.
    ebpf: Ebpf,
    /// The requests' socket; its port is the flow's, so nothing else on the
    /// host takes it (and the answers to it never reach it).
    requests: BatchSocket,
    taken: Vec<libc::xdp_desc>,
}

impl XskPath {
    /// Attaches the receive program to the interface that reaches `node`
    /// (port `port`), binds a socket to each of its receive queues and
    /// enters the transfer's flow. Needs a runtime (the requests' socket).
    pub fn open(node: Ipv4Addr, port: u16) -> Result<XskPath, XskPathError> {
        let sock = UdpSocket::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)))
            .and_then(|s| s.connect(SocketAddr::from((node, port))).map(|_| s))
            .map_err(|e| fail(format!("a UDP socket towards {node}:{port}: {e}")))?;
        let local = match sock.local_addr() {
            Ok(SocketAddr::V4(a)) => a,
            other => {
                return Err(fail(format!(
                    "the UDP socket towards {node} has no IPv4 address: {other:?}"
                )))
            }
        };
        let name = interface_holding(*local.ip())
            .map_err(|e| fail(e.to_string()))?
            .ok_or_else(|| fail(format!("no interface holds {}, the address towards {node}", local.ip())))?;
        let ifindex = Interface::lookup(&name).map_err(|e| fail(e.to_string()))?.index;
        let mut ebpf = EbpfLoader::new()
            .load(NETDAM_CLIENT_XDP)
            .map_err(|e| fail(format!("loading the client's receive program: {e}")))?;
        let prog: &mut Xdp = ebpf
            .program_mut("netdam_client_rx")
            .ok_or_else(|| fail("the client's object has no netdam_client_rx"))?
            .try_into()
            .map_err(|e| fail(format!("netdam_client_rx: {e}")))?;
        prog.load()
            .map_err(|e| fail(format!("the kernel refused netdam_client_rx: {e}")))?;
        prog.attach(&name, XdpMode::Default).map_err(|e| {
            fail(format!(
                "attaching netdam_client_rx to {name}: {e} (another XDP program, e.g. a `netdam serve` on this \
                 host, or another AF_XDP client, holds the interface: use the UDP path there)"
            ))
        })?;
        let queues = rx_queues(&name).map_err(|e| fail(e.to_string()))?.current;
        let mut xsks = XskMap::try_from(
            ebpf.map_mut("NETDAM_CLIENT_XSKS")
                .ok_or_else(|| fail("no socket map"))?,
        )
        .map_err(|e| fail(e.to_string()))?;
        let mut sockets = Vec::new();
        for q in 0..queues.min(xsks.len()) {
            let s = XskSocket::bind(ifindex, q, FRAMES)
                .map_err(|e| fail(format!("an AF_XDP socket on queue {q} of {name}: {e}")))?;
            xsks.set(q, s.fd().as_raw_fd(), 0)
                .map_err(|e| fail(format!("entering queue {q}'s socket: {e}")))?;
            sockets.push(s);
        }
        let mut flows: HashMap<&mut MapData, u16, ClientFlow> =
            HashMap::try_from(ebpf.map_mut("NETDAM_CLIENT_FLOWS").ok_or_else(|| fail("no flow map"))?)
                .map_err(|e| fail(e.to_string()))?;
        flows
            .insert(local.port(), ClientFlow::new(node.octets(), port), 0)
            .map_err(|e| fail(format!("entering the flow: {e}")))?;
        log::debug!(
            "AF_XDP path to {node}:{port} on {name} from port {}: {} queue(s), {}",
            local.port(),
            sockets.len(),
            if sockets[0].zero_copy() {
                "zero-copy"
            } else {
                "copy mode"
            }
        );
        let requests = BatchSocket::from_std(sock).map_err(|e| fail(format!("the requests' UDP socket: {e}")))?;
        Ok(XskPath {
            sockets,
            ebpf,
            requests,
            taken: Vec::new(),
        })
    }

    /// Sends every packet (`BatchSocket::send_all`).
    pub async fn send_all(&mut self, packets: &[Packet<'_>]) -> io::Result<()> {
        self.requests.send_all(packets).await
    }

    /// The answers waiting in the RX rings, up to `RECV_BATCH`, into
    /// `bufs` (their UDP payloads); with `wait`, waits up to `WAIT` for at
    /// least one. The sockets are not in the runtime's epoll set: an
    /// answer's arrival would wake a runtime thread each time (a tenth of
    /// the CPU time of a WRITE transfer). Answers mostly arrive during the
    /// transfer's own sends, whose system call carries them through the
    /// path; the wait spins briefly, yielding, then sleeps in poll(2).
    pub async fn recv(&mut self, bufs: &mut RecvBufs, wait: bool) -> io::Result<usize> {
        let start = Instant::now();
        loop {
            let got = self.take(bufs);
            if got > 0 || !wait || start.elapsed() >= WAIT {
                return Ok(got);
            }
            if start.elapsed() < SPIN {
                tokio::task::yield_now().await;
                continue;
            }
            let mut fds: Vec<libc::pollfd> = self
                .sockets
                .iter()
                .map(|s| libc::pollfd {
                    fd: s.fd().as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            // SAFETY: `fds` holds live pollfds of our own sockets.
            if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, POLL_MS) } < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }

    fn take(&mut self, bufs: &mut RecvBufs) -> usize {
        let mut got = 0;
        for s in &mut self.sockets {
            self.taken.clear();
            s.take((RECV_BATCH - got) as u32, &mut self.taken);
            for d in &self.taken {
                if let Some(payload) = udp_payload(s.frame(d)) {
                    bufs.put(got, payload);
                    got += 1;
                }
            }
            s.give_back(&self.taken);
        }
        got
    }

    /// Frames the program delivered, strangers it dropped, answers it
    /// passed for want of a socket on their queue (summed over CPUs).
    pub fn counts(&self) -> Option<[u64; 3]> {
        let counts: aya::maps::PerCpuArray<&MapData, u64> =
            aya::maps::PerCpuArray::try_from(self.ebpf.map("NETDAM_CLIENT_COUNTS")?).ok()?;
        let mut out = [0; 3];
        for (i, o) in out.iter_mut().enumerate() {
            *o = counts.get(&(i as u32), 0).ok()?.iter().sum();
        }
        Some(out)
    }
}

/// The UDP payload of a steered frame (Ethernet, IPv4 without options, UDP).
fn udp_payload(frame: &[u8]) -> Option<&[u8]> {
    let udp_len = u16::from_be_bytes([*frame.get(38)?, *frame.get(39)?]) as usize;
    frame.get(STEER_LEN..STEER_LEN - 8 + udp_len)
}
