//! The AF_XDP path of a client's transfers (docs/client.md, "The AF_XDP
//! path"). A small XDP program (`netdam_client_rx`) on the interface that
//! reaches the node takes the transfers' answers off the kernel's UDP
//! stack: a WRITE's answer becomes an ack word in memory the client maps,
//! and the frame is dropped; any other answer (a READ's data) lands in an
//! AF_XDP socket. Requests leave through each flow's UDP socket, many per
//! system call with UDP GSO. (Sending through an AF_XDP TX ring was
//! measured too: in copy mode, veth's, the kernel builds an skb per frame,
//! where GSO builds one per 44, and the transfer was 10 to 25% slower.)
//!
//! One `XskPath` a client: the program (attached for the client's
//! lifetime, as a bpf_link, so it goes when the process does, killed or
//! not), the AF_XDP sockets and the ack slots. One `Flow` a stripe of a
//! transfer: a UDP socket whose port the program knows, and a run of ack
//! slots. The program needs the interface to itself: a host that serves a
//! node on that interface uses the UDP path.

use std::{
    io,
    net::{Ipv4Addr, SocketAddr, UdpSocket},
    os::fd::{AsFd, AsRawFd},
    ptr::NonNull,
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
    time::{Duration, Instant},
};

use aya::{
    maps::{HashMap, Map, MapData, PerCpuArray, XskMap},
    programs::{Xdp, XdpMode},
    Ebpf, EbpfLoader,
};
use netdam_common::steer::{ack_index, ack_status, ClientFlow, ACK_SLOTS, FLOW_SLOTS, STEER_LEN};

use super::{
    batch::{BatchSocket, Packet, RECV_BATCH},
    window::Window,
    ClientError, OnAnswer,
};
use crate::{
    afxdp::XskSocket,
    controller::{interface_holding, queues::rx_queues, Interface},
};

/// The client's steering program (netdam-ebpf/src/bin/netdam-client-xdp.rs).
pub static NETDAM_CLIENT_XDP: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/netdam-client-xdp"));

/// How long a waiting `recv` spins (yielding to the runtime) before it naps:
/// with 50 us, a WRITE of two stripes made 0.64x to 0.74x of the node's
/// ceiling; with 1 ms, 0.90x to 1.01x (`netdam-bench client`).
const SPIN: Duration = Duration::from_millis(1);
/// One nap of a waiting `recv`: the acks wake nobody, so it looks again.
const NAP: Duration = Duration::from_micros(20);
/// How long a waiting `recv` waits in all: the transfer's loop then looks
/// at its timeouts.
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

/// The AF_XDP sockets, one per receive queue, and a buffer of descriptors.
struct Rx {
    sockets: Vec<XskSocket>,
    taken: Vec<libc::xdp_desc>,
}

/// Answers taken from the sockets by one flow's thread for another flow,
/// by the other's port: every flow's answers share the sockets.
type Inboxes = std::collections::HashMap<u16, std::collections::VecDeque<Vec<u8>>>;

/// The flow table and which of its ack-slot runs are free.
struct Flows {
    map: HashMap<MapData, u16, ClientFlow>,
    free: Vec<u16>,
}

/// NETDAM_CLIENT_ACKS mapped read-only.
struct Acks {
    ptr: NonNull<AtomicU64>,
    len: usize,
    _map: MapData,
}

// SAFETY: shared memory that the program writes; read only through atomics.
unsafe impl Send for Acks {}
unsafe impl Sync for Acks {}

impl Drop for Acks {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `XskPath::open`, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len * 8) };
    }
}

pub(super) struct XskPath {
    node: Ipv4Addr,
    port: u16,
    rx: Mutex<Rx>,
    inboxes: Mutex<Inboxes>,
    flows: Mutex<Flows>,
    acks: Acks,
    counts: PerCpuArray<MapData, u64>,
    /// Holds the program and its link: dropped, the program leaves the interface.
    _ebpf: Mutex<Ebpf>,
}

impl XskPath {
    /// Attaches the steering program to the interface that holds this
    /// host's address towards `node` (port `port`) and binds a socket to
    /// each of its receive queues.
    pub fn open(node: Ipv4Addr, port: u16) -> Result<XskPath, XskPathError> {
        let probe = connected(node, port)?;
        let local = local_v4(&probe, node)?;
        let name = interface_holding(*local.ip())
            .map_err(|e| fail(e.to_string()))?
            .ok_or_else(|| fail(format!("no interface holds {}, the address towards {node}", local.ip())))?;
        let ifindex = Interface::lookup(&name).map_err(|e| fail(e.to_string()))?.index;
        let mut ebpf = EbpfLoader::new()
            .load(NETDAM_CLIENT_XDP)
            .map_err(|e| fail(format!("loading the client's steering program: {e}")))?;
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
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| fail(format!("the client's object has no map {name}")))
        };
        let flows = HashMap::try_from(take("NETDAM_CLIENT_FLOWS")?).map_err(|e| fail(e.to_string()))?;
        let counts = PerCpuArray::try_from(take("NETDAM_CLIENT_COUNTS")?).map_err(|e| fail(e.to_string()))?;
        let acks = match take("NETDAM_CLIENT_ACKS")? {
            Map::Array(m) => map_acks(m)?,
            _ => return Err(fail("NETDAM_CLIENT_ACKS is not an array map")),
        };
        log::debug!(
            "AF_XDP path to {node}:{port} on {name}: {} queue(s), {}",
            sockets.len(),
            if sockets[0].zero_copy() {
                "zero-copy"
            } else {
                "copy mode"
            }
        );
        Ok(XskPath {
            node,
            port,
            rx: Mutex::new(Rx {
                sockets,
                taken: Vec::new(),
            }),
            inboxes: Mutex::default(),
            flows: Mutex::new(Flows {
                map: flows,
                free: (0..FLOW_SLOTS as u16).rev().collect(),
            }),
            acks,
            counts,
            _ebpf: Mutex::new(ebpf),
        })
    }

    /// A flow for one stripe: a UDP socket to the node whose answers the
    /// program steers, and a run of ack slots. Needs a runtime (the socket).
    pub fn flow(&self) -> Result<Flow<'_>, XskPathError> {
        let sock = connected(self.node, self.port)?;
        let local = local_v4(&sock, self.node)?;
        let requests = BatchSocket::from_std(sock).map_err(|e| fail(format!("the flow's UDP socket: {e}")))?;
        let mut flows = self.flows.lock().expect("flows lock");
        let slot = flows
            .free
            .pop()
            .ok_or_else(|| fail(format!("{FLOW_SLOTS} flows are open already")))?;
        // Acks of an earlier flow in these slots acknowledge other seqs: no clearing needed.
        if let Err(e) = flows
            .map
            .insert(local.port(), ClientFlow::new(self.node.octets(), self.port, slot), 0)
        {
            flows.free.push(slot);
            return Err(fail(format!("entering the flow: {e}")));
        }
        self.inboxes
            .lock()
            .expect("inboxes lock")
            .insert(local.port(), Default::default());
        Ok(Flow {
            path: self,
            port: local.port(),
            slot,
            requests,
        })
    }

    /// Frames delivered to a socket, strangers dropped, answers passed for
    /// want of a socket on their queue, WRITE answers kept as acks.
    pub fn counts(&self) -> Option<[u64; 4]> {
        let mut out = [0; 4];
        for (i, o) in out.iter_mut().enumerate() {
            *o = self.counts.get(&(i as u32), 0).ok()?.iter().sum();
        }
        Some(out)
    }

    /// Hands the socket answers to the flow at `port`, up to `RECV_BATCH`,
    /// to `each`, in place (their UDP payloads): first those another flow's
    /// thread took for it, then from the RX rings, keeping the other flows'
    /// answers in their inboxes. Stops handing at `each`'s first error.
    fn take(&self, port: u16, mut each: impl FnMut(&[u8]) -> Result<(), ClientError>) -> Result<usize, ClientError> {
        let mut got = 0;
        let mut result = Ok(());
        if let Some(inbox) = self.inboxes.lock().expect("inboxes lock").get_mut(&port) {
            while got < RECV_BATCH && result.is_ok() {
                let Some(d) = inbox.pop_front() else { break };
                result = each(&d);
                got += 1;
            }
        }
        let mut rx = self.rx.lock().expect("rx lock");
        let Rx { sockets, taken } = &mut *rx;
        for s in sockets.iter_mut() {
            if got == RECV_BATCH || result.is_err() {
                break;
            }
            taken.clear();
            s.take((RECV_BATCH - got) as u32, taken);
            let mut inboxes = None;
            for d in taken.iter() {
                let Some((to, payload)) = udp_payload(s.frame(d)) else {
                    continue;
                };
                if to != port {
                    if let Some(inbox) = inboxes
                        .get_or_insert_with(|| self.inboxes.lock().expect("inboxes lock"))
                        .get_mut(&to)
                    {
                        inbox.push_back(payload.to_vec());
                    }
                } else if result.is_ok() {
                    result = each(payload);
                    got += 1;
                }
            }
            s.give_back(taken);
        }
        result.map(|()| got)
    }
}

/// One stripe's way through the path.
pub(super) struct Flow<'a> {
    path: &'a XskPath,
    port: u16,
    slot: u16,
    requests: BatchSocket,
}

impl Drop for Flow<'_> {
    fn drop(&mut self) {
        let mut flows = self.path.flows.lock().expect("flows lock");
        let _ = flows.map.remove(&self.port);
        flows.free.push(self.slot);
        self.path.inboxes.lock().expect("inboxes lock").remove(&self.port);
    }
}

impl Flow<'_> {
    /// Sends every packet (`BatchSocket::send_all`).
    pub async fn send_all(&self, packets: &[Packet<'_>]) -> io::Result<()> {
        self.requests.send_all(packets).await
    }

    /// `XskPath::counts`.
    pub fn counts(&self) -> Option<[u64; 4]> {
        self.path.counts()
    }

    /// The status of the answer to the WRITE with `seq`, once its ack word is there.
    pub fn acked(&self, seq: u32) -> Option<u8> {
        let i = ack_index(self.slot, seq) as usize;
        ack_status(self.path.acks.words()[i].load(Ordering::Acquire), seq)
    }

    /// Hands the socket answers waiting to `each`; with `wait`, waits up
    /// to `WAIT` for one or, with `acks`, for an ack of a piece of `w` in
    /// flight. Neither wakes anyone (the sockets are not in the runtime's
    /// epoll set: a wake-up per answer cost a tenth of a WRITE transfer's
    /// CPU), and both mostly arrive during the transfer's own sends, whose
    /// system call carries them through the path: the wait spins, yielding,
    /// then naps.
    pub async fn recv(
        &self,
        wait: bool,
        w: &mut Window,
        acks: bool,
        each: &mut OnAnswer<'_>,
    ) -> Result<(), ClientError> {
        let start = Instant::now();
        loop {
            let got = self.path.take(self.port, |d| each(w, d))?;
            let acked = || acks && w.unanswered().any(|p| self.acked(w.seq(p)).is_some());
            if got > 0 || !wait || start.elapsed() >= WAIT || acked() {
                return Ok(());
            }
            if start.elapsed() < SPIN {
                tokio::task::yield_now().await;
            } else {
                std::thread::sleep(NAP);
            }
        }
    }
}

impl Acks {
    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `len` u64s mapped in `map_acks`, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

fn map_acks(map: MapData) -> Result<Acks, XskPathError> {
    let len = (FLOW_SLOTS * ACK_SLOTS) as usize;
    // SAFETY: mapping a BPF_F_MMAPABLE array of `len` u64s, shared, read-only.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len * 8,
            libc::PROT_READ,
            libc::MAP_SHARED,
            map.fd().as_fd().as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(fail(format!(
            "mapping the ack slots: {} (needs a BPF_F_MMAPABLE array, Linux 5.5+)",
            io::Error::last_os_error()
        )));
    }
    Ok(Acks {
        ptr: NonNull::new(p.cast()).expect("mmap returned NULL"),
        len,
        _map: map,
    })
}

/// A UDP socket connected to the node.
fn connected(node: Ipv4Addr, port: u16) -> Result<UdpSocket, XskPathError> {
    UdpSocket::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)))
        .and_then(|s| s.connect(SocketAddr::from((node, port))).map(|_| s))
        .map_err(|e| fail(format!("a UDP socket towards {node}:{port}: {e}")))
}

fn local_v4(sock: &UdpSocket, node: Ipv4Addr) -> Result<std::net::SocketAddrV4, XskPathError> {
    match sock.local_addr() {
        Ok(SocketAddr::V4(a)) => Ok(a),
        other => Err(fail(format!(
            "the UDP socket towards {node} has no IPv4 address: {other:?}"
        ))),
    }
}

/// The destination port and UDP payload of a steered frame (Ethernet,
/// IPv4 without options, UDP).
fn udp_payload(frame: &[u8]) -> Option<(u16, &[u8])> {
    let port = u16::from_be_bytes([*frame.get(36)?, *frame.get(37)?]);
    let udp_len = u16::from_be_bytes([*frame.get(38)?, *frame.get(39)?]) as usize;
    Some((port, frame.get(STEER_LEN..STEER_LEN - 8 + udp_len)?))
}
