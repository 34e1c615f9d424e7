//! The AF_XDP path of a client's transfers (docs/client.md, "The AF_XDP
//! path"). A small XDP program (`netdam_client_rx`) on the interface that
//! reaches the node takes the transfers' answers off the kernel's UDP
//! stack: a WRITE's answer becomes an ack word in memory the client maps,
//! and the frame is dropped; any other answer (a READ's data) lands in the
//! flow's AF_XDP socket. Requests leave through each flow's UDP socket, many per
//! system call with UDP GSO. (Sending through an AF_XDP TX ring was
//! measured too: in copy mode, veth's, the kernel builds an skb per frame,
//! where GSO builds one per 44, and the transfer was 10 to 25% slower.)
//!
//! One `XskPath` a client: the program (attached for the client's
//! lifetime, as a bpf_link, so it goes when the process does, killed or
//! not), a UMEM per receive queue and the ack slots. One `Flow` a stripe of
//! a transfer: a UDP socket whose port the program knows, a run of ack
//! slots, and on each queue an AF_XDP socket of its own sharing the queue's
//! UMEM (so no stripe's thread reads another's answers). The program needs the interface to itself: a host that serves a
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
use netdam_common::steer::{
    ack_index, ack_status, socket_index, ClientFlow, ACK_SLOTS, FLOW_SLOTS, QUEUE_SLOTS, STEER_LEN,
};

use super::{
    batch::{BatchSocket, RECV_BATCH},
    window::Window,
    ClientError, OnAnswer,
};
use crate::{
    afxdp::{SharedRx, UmemView, XskSocket},
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

/// A receive queue's UMEM: its owner socket (whose fill ring every flow's
/// socket on the queue draws from and gives back to) and a view of its
/// frames for the flows' threads.
struct Queue {
    // The view goes before the socket that owns the memory.
    view: UmemView,
    owner: Mutex<XskSocket>,
}

/// A flow's slot: its run of ack slots and its sockets, one per queue,
/// kept from flow to flow (closing a socket would strand the frames in its
/// RX ring).
struct Slot {
    index: u16,
    sockets: Vec<SharedRx>,
}

/// The flow table, the slots free for new flows, and the socket map.
struct Flows {
    map: HashMap<MapData, u16, ClientFlow>,
    free: Vec<Slot>,
    made: u16,
    xsks: XskMap<MapData>,
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
    ifindex: u32,
    // The flows' sockets close before the UMEMs they share.
    flows: Mutex<Flows>,
    queues: Vec<Queue>,
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
        let mut ebpf = EbpfLoader::new().load(NETDAM_CLIENT_XDP).map_err(|e| {
            fail(format!(
                "loading the client's steering program: {e} (the AF_XDP path needs root, or CAP_BPF, \
                     CAP_NET_ADMIN and CAP_NET_RAW; without them, leave out --afxdp)"
            ))
        })?;
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
        let count = rx_queues(&name)
            .map_err(|e| fail(e.to_string()))?
            .current
            .min(QUEUE_SLOTS);
        let mut queues = Vec::new();
        for q in 0..count {
            let owner = XskSocket::bind(ifindex, q, FRAMES)
                .map_err(|e| fail(format!("an AF_XDP socket on queue {q} of {name}: {e}")))?;
            // SAFETY: `Queue` drops the view before the socket.
            let view = unsafe { owner.umem_view() };
            queues.push(Queue {
                view,
                owner: Mutex::new(owner),
            });
        }
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| fail(format!("the client's object has no map {name}")))
        };
        let flows = HashMap::try_from(take("NETDAM_CLIENT_FLOWS")?).map_err(|e| fail(e.to_string()))?;
        let xsks = XskMap::try_from(take("NETDAM_CLIENT_XSKS")?).map_err(|e| fail(e.to_string()))?;
        let counts = PerCpuArray::try_from(take("NETDAM_CLIENT_COUNTS")?).map_err(|e| fail(e.to_string()))?;
        let acks = match take("NETDAM_CLIENT_ACKS")? {
            Map::Array(m) => map_acks(m)?,
            _ => return Err(fail("NETDAM_CLIENT_ACKS is not an array map")),
        };
        let Some(first) = queues.first() else {
            return Err(fail(format!("{name} reports no receive queue")));
        };
        let zero_copy = first.owner.lock().expect("owner lock").zero_copy();
        log::debug!(
            "AF_XDP path to {node}:{port} on {name}: {} queue(s), {}",
            queues.len(),
            if zero_copy { "zero-copy" } else { "copy mode" }
        );
        Ok(XskPath {
            node,
            port,
            ifindex,
            queues,
            flows: Mutex::new(Flows {
                map: flows,
                free: Vec::new(),
                made: 0,
                xsks,
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
        let slot = match flows.free.pop() {
            Some(slot) => slot,
            None => self.new_slot(&mut flows)?,
        };
        // Acks of an earlier flow in these slots acknowledge other seqs: no clearing needed.
        if let Err(e) = flows.map.insert(
            local.port(),
            ClientFlow::new(self.node.octets(), self.port, slot.index),
            0,
        ) {
            flows.free.push(slot);
            return Err(fail(format!("entering the flow: {e}")));
        }
        Ok(Flow {
            path: self,
            port: local.port(),
            slot: Some(slot),
            requests,
            taken: Vec::new(),
        })
    }

    /// A new slot: a socket per queue sharing the queue's UMEM, entered in
    /// the socket map.
    fn new_slot(&self, flows: &mut Flows) -> Result<Slot, XskPathError> {
        if u32::from(flows.made) == FLOW_SLOTS {
            return Err(fail(format!("{FLOW_SLOTS} flows are open already")));
        }
        let index = flows.made;
        let mut sockets = Vec::new();
        for (q, queue) in self.queues.iter().enumerate() {
            let s = queue
                .owner
                .lock()
                .expect("owner lock")
                .bind_shared_rx(self.ifindex, FRAMES)
                .map_err(|e| fail(format!("a flow's AF_XDP socket on queue {q}: {e}")))?;
            flows
                .xsks
                .set(socket_index(index, q as u32), s.fd().as_raw_fd(), 0)
                .map_err(|e| fail(format!("entering a flow's socket on queue {q}: {e}")))?;
            sockets.push(s);
        }
        flows.made += 1;
        Ok(Slot { index, sockets })
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
}

/// One stripe's way through the path.
pub(super) struct Flow<'a> {
    path: &'a XskPath,
    port: u16,
    /// Taken back by the path on drop.
    slot: Option<Slot>,
    requests: BatchSocket,
    taken: Vec<libc::xdp_desc>,
}

impl Drop for Flow<'_> {
    fn drop(&mut self) {
        let mut flows = self.path.flows.lock().expect("flows lock");
        let _ = flows.map.remove(&self.port);
        if let Some(mut slot) = self.slot.take() {
            // Late answers in the sockets go back to the fill rings.
            for (queue, s) in self.path.queues.iter().zip(&mut slot.sockets) {
                self.taken.clear();
                s.take(u32::MAX, &mut self.taken);
                queue.owner.lock().expect("owner lock").give_back(&self.taken);
            }
            flows.free.push(slot);
        }
    }
}

impl Flow<'_> {
    /// The flow's UDP socket, which sends its requests.
    pub fn requests(&self) -> &BatchSocket {
        &self.requests
    }

    /// `XskPath::counts`.
    pub fn counts(&self) -> Option<[u64; 4]> {
        self.path.counts()
    }

    fn slot(&self) -> &Slot {
        self.slot.as_ref().expect("a live flow has its slot")
    }

    /// The status of the answer to the WRITE with `seq`, once its ack word is there.
    pub fn acked(&self, seq: u32) -> Option<u8> {
        let i = ack_index(self.slot().index, seq) as usize;
        ack_status(self.path.acks.words()[i].load(Ordering::Acquire), seq)
    }

    /// Hands the answers in the flow's sockets, up to `RECV_BATCH`, to
    /// `each`, in place (their UDP payloads); stops handing at `each`'s
    /// first error.
    fn take(&mut self, mut each: impl FnMut(&[u8]) -> Result<(), ClientError>) -> Result<usize, ClientError> {
        let (mut got, mut result) = (0, Ok(()));
        let slot = self.slot.as_mut().expect("a live flow has its slot");
        for (queue, s) in self.path.queues.iter().zip(&mut slot.sockets) {
            if got == RECV_BATCH || result.is_err() {
                break;
            }
            self.taken.clear();
            s.take((RECV_BATCH - got) as u32, &mut self.taken);
            for d in &self.taken {
                if let (Some(payload), true) = (udp_payload(queue.view.bytes(d.addr, d.len)), result.is_ok()) {
                    result = each(payload);
                    got += 1;
                }
            }
            if !self.taken.is_empty() {
                queue.owner.lock().expect("owner lock").give_back(&self.taken);
            }
        }
        result.map(|()| got)
    }

    /// Hands the socket answers waiting to `each`; with `wait`, waits up
    /// to `WAIT` for one or, with `acks`, for an ack of a piece of `w` in
    /// flight. Neither wakes anyone (the sockets are not in the runtime's
    /// epoll set: a wake-up per answer cost a tenth of a WRITE transfer's
    /// CPU), and both mostly arrive during the transfer's own sends, whose
    /// system call carries them through the path: the wait spins, yielding,
    /// then naps.
    pub async fn recv(
        &mut self,
        wait: bool,
        w: &mut Window,
        acks: bool,
        each: &mut OnAnswer<'_>,
    ) -> Result<(), ClientError> {
        let start = Instant::now();
        loop {
            let got = self.take(|d| each(w, d))?;
            if got > 0
                || !wait
                || start.elapsed() >= WAIT
                || (acks && w.unanswered().any(|p| self.acked(w.seq(p)).is_some()))
            {
                return Ok(());
            }
            if start.elapsed() < SPIN {
                // Let another stripe on this CPU run (sched_yield), then the runtime.
                std::thread::yield_now();
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

/// The UDP payload of a steered frame (Ethernet, IPv4 without options, UDP).
fn udp_payload(frame: &[u8]) -> Option<&[u8]> {
    let udp_len = u16::from_be_bytes([*frame.get(38)?, *frame.get(39)?]) as usize;
    frame.get(STEER_LEN..STEER_LEN - 8 + udp_len)
}
