//! The NetDAM client library: requests over kernel UDP with a per-request
//! timeout, retransmission of idempotent ops, and large transfers split into
//! MTU-sized requests with a bounded window in flight. WRITE and READ
//! transfers send and receive in batches (`batch`), or through an AF_XDP
//! socket (`xsk`), under one window's bookkeeping (`window`).

mod batch;
mod window;
mod xsk;

pub use xsk::NETDAM_CLIENT_XDP;

use std::{
    collections::HashMap,
    net::{Ipv4Addr, SocketAddr},
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use futures::{stream, StreamExt, TryStreamExt};
use netdam_common::{
    wire::{flags, Alu, Dtype, CARRIER_LEN, DEFAULT_PORT, HDR_LEN},
    NetdamHdr, Opcode, Status,
};
use thiserror::Error;
use tokio::{net::UdpSocket, sync::oneshot, task::JoinHandle};

use self::{
    batch::{BatchSocket, Packet, RecvBufs},
    window::Window,
};

/// The most stripes a transfer is split into by default (`streams` 0).
const MAX_STREAMS: usize = 4;
/// Requests per stripe at least: below, the threads cost more than they bring.
const MIN_STRIPE: usize = 512;

#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The node's port P.
    pub port: u16,
    /// How long to wait for each answer before resending.
    pub timeout: Duration,
    /// Resends of an idempotent request before giving up.
    pub retries: u32,
    /// Requests in flight at once in a transfer (fewer than 1024, section
    /// 7), shared out among its stripes. 192: veth's rings hold 256 frames,
    /// and 3 stripes of 128 overran them now and then (a resend after a
    /// timeout); 3 of 64 measured best (docs/client.md).
    pub window: usize,
    /// IP MTU of the path: sets the largest payload per request.
    pub mtu: u32,
    /// Threads (each with its own socket) a large WRITE or READ transfer is
    /// split across, a contiguous stripe each: on a host whose CPUs each
    /// carry their own sends through the path (veth, and NICs' transmit
    /// queues), one thread is one CPU's worth. 1 turns striping off; 0
    /// (the default) is one per CPU, one more on the AF_XDP path (whose
    /// waits cost little, so a third stripe fills the gaps; figures in
    /// docs/client.md), at most 4.
    pub streams: usize,
    /// Take WRITE and READ transfers' answers off the kernel's UDP stack
    /// (`xsk`, docs/client.md): a steering program on the interface that
    /// reaches the node, which must have no XDP program of its own (no
    /// `netdam serve` on it), keeps WRITE acks in mapped memory and hands
    /// READ data to AF_XDP sockets.
    pub afxdp: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            port: DEFAULT_PORT,
            timeout: Duration::from_millis(200),
            retries: 10,
            window: 192,
            mtu: 1500,
            streams: 0,
            afxdp: false,
        }
    }
}

impl ClientConfig {
    /// Payload bytes that fit one request (and its answer) on the path.
    pub fn max_payload(&self) -> usize {
        (self.mtu as usize).saturating_sub(CARRIER_LEN - 14 + HDR_LEN)
    }
}

#[derive(Debug, Error)]
pub enum ClientError {
    #[error("{op} to {node}: no answer after {attempts} attempt(s) of {timeout:?} each; is `netdam serve` running there, on port {port}?")]
    Timeout {
        op: &'static str,
        node: Ipv4Addr,
        port: u16,
        attempts: u32,
        timeout: Duration,
    },
    #[error("{op} at {addr:#x} refused by {node}: {}{}", status.name(), status_hint(*status))]
    Refused {
        op: &'static str,
        node: Ipv4Addr,
        addr: u64,
        status: Status,
    },
    #[error("malformed answer from {node}: {what}")]
    Malformed { node: Ipv4Addr, what: String },
    #[error("{op}: {what}")]
    Usage { op: &'static str, what: String },
    #[error("UDP socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("the AF_XDP path to {node}: {source}")]
    AfXdp {
        node: Ipv4Addr,
        #[source]
        source: xsk::XskPathError,
    },
}

impl ClientError {
    /// Exit code of the `netdam` command: 3 no answer, 4 refused, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            ClientError::Timeout { .. } => 3,
            ClientError::Refused { .. } => 4,
            _ => 1,
        }
    }
}

/// What a status means for the person who got it.
pub fn status_hint(s: Status) -> &'static str {
    match s {
        Status::Ok => "",
        Status::BadVersion => " (the node speaks another protocol version)",
        Status::BadOpcode => " (the node does not execute this op)",
        Status::OutOfBounds => {
            " (the range leaves the region: check --addr and the length against the node's --region)"
        }
        Status::BadKey => " (no region has this rkey: check --rkey against the node's --region)",
        Status::BadLength => " (the length does not suit the op)",
        Status::Misaligned => " (align the address and length to the element width, 8 for atomics)",
        Status::BadDtype => " (unknown dtype or alu, or a bitwise alu on f32)",
        Status::NotReady => " (the region's generation is behind the tag: retry later)",
        Status::NoReceiver => {
            " (nothing on the node receives MSG or WRITE_NOTIFY: run `netdam recv` or an afxdp::Endpoint beside its `netdam serve`)"
        }
        Status::Duplicate => " (already executed once)",
        Status::Stale => " (an older seq or generation than the node has seen)",
        Status::BadSr => " (bad SR header or segment)",
        Status::TooLarge => " (the answer would not fit the MTU: lower --mtu or the length)",
        Status::Forbidden => " (the region does not permit this op: see its PERMS letters)",
        Status::Held => " (a version-2 CHAIN's partial waits at that member until it contributes)",
        Status::Mismatch => {
            " (that member contributed to another call: the members' count, dtype or op differ; or the frame's call word is wrong)"
        }
    }
}

/// A node's answer.
#[derive(Clone, Debug)]
pub struct Reply {
    pub hdr: NetdamHdr,
    pub payload: Vec<u8>,
}

/// An answer in a transfer's receive buffer.
struct Answer<'a> {
    hdr: NetdamHdr,
    payload: &'a [u8],
}

type Pending = Arc<Mutex<HashMap<u32, oneshot::Sender<Reply>>>>;

/// A client of one node.
pub struct Client {
    sock: Arc<UdpSocket>,
    node: Ipv4Addr,
    cfg: ClientConfig,
    pending: Pending,
    seq: AtomicU32,
    receiver: JoinHandle<()>,
    /// The AF_XDP path of transfers (`ClientConfig::afxdp`), shared by their stripes.
    xsk: Option<xsk::XskPath>,
}

impl Drop for Client {
    fn drop(&mut self) {
        self.receiver.abort();
    }
}

impl Client {
    /// A client of the node at `node`, from an ephemeral local port.
    pub async fn connect(node: Ipv4Addr, cfg: ClientConfig) -> Result<Client, ClientError> {
        let sock = std::net::UdpSocket::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)))?;
        sock.connect(SocketAddr::from((node, cfg.port)))?;
        sock.set_nonblocking(true)?;
        batch::grow_buffers(&sock);
        let sock = Arc::new(UdpSocket::from_std(sock)?);
        let pending: Pending = Arc::default();
        let receiver = tokio::spawn(receive(sock.clone(), pending.clone()));
        let xsk = match cfg.afxdp {
            true => Some(xsk::XskPath::open(node, cfg.port).map_err(|source| ClientError::AfXdp { node, source })?),
            false => None,
        };
        Ok(Client {
            xsk,
            sock,
            node,
            cfg,
            pending,
            seq: AtomicU32::new(rand::random()),
            receiver,
        })
    }

    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// Sends `hdr` + `payload` and waits for the answer, resending on
    /// timeout when `idempotent`. A non-OK status is `Refused`.
    pub async fn request(&self, mut hdr: NetdamHdr, payload: &[u8], idempotent: bool) -> Result<Reply, ClientError> {
        let op = Opcode::from_u8(hdr.opcode).map_or("request", Opcode::name);
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        hdr.set_seq(seq);
        let mut packet = Vec::with_capacity(HDR_LEN + payload.len());
        packet.extend_from_slice(&hdr.to_bytes());
        packet.extend_from_slice(payload);
        let (tx, mut rx) = oneshot::channel();
        self.pending.lock().expect("pending lock").insert(seq, tx);
        let attempts = if idempotent { 1 + self.cfg.retries } else { 1 };
        let mut result: Option<Result<Reply, ClientError>> = None;
        for _ in 0..attempts {
            if let Err(e) = self.sock.send(&packet).await {
                result = Some(Err(e.into()));
                break;
            }
            if let Ok(r) = tokio::time::timeout(self.cfg.timeout, &mut rx).await {
                result = r.ok().map(Ok);
                break;
            }
        }
        self.pending.lock().expect("pending lock").remove(&seq);
        let reply = match result {
            Some(r) => r?,
            None => {
                return Err(ClientError::Timeout {
                    op,
                    node: self.node,
                    port: self.cfg.port,
                    attempts,
                    timeout: self.cfg.timeout,
                })
            }
        };
        match Status::from_u8(reply.hdr.status) {
            Some(Status::Ok) => Ok(reply),
            Some(status) => Err(ClientError::Refused {
                op,
                node: self.node,
                addr: hdr.addr(),
                status,
            }),
            None => Err(ClientError::Malformed {
                node: self.node,
                what: format!("unknown status {}", reply.hdr.status),
            }),
        }
    }

    /// MSG (section 3): hands `body` to the node's AF_XDP receiver and waits
    /// for its acknowledgement, resending on timeout. Delivery is at least
    /// once: a receiver that must not see a message twice keys on its seq.
    /// `rkey` names a region with the MSG permission and `addr` lies in it.
    pub async fn msg(&self, rkey: u32, addr: u64, body: &[u8]) -> Result<(), ClientError> {
        let mut h = NetdamHdr::request(Opcode::Msg);
        h.flags = flags::ACK_REQ;
        h.set_rkey(rkey);
        h.set_addr(addr);
        h.set_len(body.len() as u16);
        self.request(h, body, true).await.map(|_| ())
    }

    /// WRITE_NOTIFY (section 3): writes `data` at `addr` and hands only the
    /// headers to the node's AF_XDP receiver. The node answers only a
    /// failure, so success is no answer within the timeout; it is not resent.
    pub async fn write_notify(&self, rkey: u32, addr: u64, data: &[u8]) -> Result<(), ClientError> {
        let mut h = NetdamHdr::request(Opcode::WriteNotify);
        h.set_rkey(rkey);
        h.set_addr(addr);
        h.set_len(data.len() as u16);
        match self.request(h, data, false).await {
            Err(ClientError::Timeout { .. }) => Ok(()),
            Err(e) => Err(e),
            Ok(_) => Ok(()),
        }
    }

    /// NOP: liveness and round-trip time.
    pub async fn ping(&self) -> Result<Duration, ClientError> {
        let t = Instant::now();
        self.request(NetdamHdr::request(Opcode::Nop), &[], true).await?;
        Ok(t.elapsed())
    }

    /// Writes `data` at `addr` of region `rkey`, in MTU-sized acknowledged
    /// WRITEs with `window` in flight (shared out among the stripes), sent
    /// and answered in batches (one system call for many requests), striped
    /// over threads (`ClientConfig::streams`); `progress` gets the bytes of
    /// each finished piece.
    pub async fn write(
        &self,
        rkey: u32,
        addr: u64,
        data: &[u8],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<(), ClientError> {
        let unit = self.unit("write")?;
        let (ranges, window) = self.stripes(data.len().div_ceil(unit));
        let stripes = ranges
            .into_iter()
            .map(|r| {
                let part = &data[r.start * unit..data.len().min(r.end * unit)];
                self.write_stripe(rkey, addr + (r.start * unit) as u64, part, unit, window, progress)
            })
            .collect();
        self.run_stripes(stripes).await
    }

    async fn write_stripe(
        &self,
        rkey: u32,
        addr: u64,
        data: &[u8],
        unit: usize,
        window: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<(), ClientError> {
        let piece = |i: usize| {
            let bytes = &data[i * unit..data.len().min((i + 1) * unit)];
            let mut h = NetdamHdr::request(Opcode::Write);
            h.flags = flags::ACK_REQ;
            h.set_rkey(rkey);
            h.set_addr(addr + (i * unit) as u64);
            h.set_len(bytes.len() as u16);
            (h, bytes)
        };
        self.transfer("WRITE", data.len().div_ceil(unit), window, piece, |i, _| {
            progress(unit.min(data.len() - i * unit));
            Ok(())
        })
        .await
    }

    /// Reads `len` bytes at `addr` of region `rkey`, in MTU-sized READs,
    /// batched and striped like `write`.
    pub async fn read(
        &self,
        rkey: u32,
        addr: u64,
        len: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<u8>, ClientError> {
        let unit = self.unit("read")?;
        let mut out = vec![0u8; len];
        let (ranges, window) = self.stripes(len.div_ceil(unit));
        let mut rest = out.as_mut_slice();
        let mut stripes = Vec::new();
        for r in ranges {
            let (part, tail) = rest.split_at_mut((r.end * unit).min(len) - r.start * unit);
            rest = tail;
            stripes.push(self.read_stripe(rkey, addr + (r.start * unit) as u64, part, unit, window, progress));
        }
        self.run_stripes(stripes).await?;
        Ok(out)
    }

    async fn read_stripe(
        &self,
        rkey: u32,
        addr: u64,
        out: &mut [u8],
        unit: usize,
        window: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<(), ClientError> {
        let len = out.len();
        let padding = vec![0u8; unit];
        let size = |i: usize| unit.min(len - i * unit);
        let piece = |i: usize| {
            let mut h = NetdamHdr::request(Opcode::Read);
            h.set_rkey(rkey);
            h.set_addr(addr + (i * unit) as u64);
            h.set_len(size(i) as u16);
            (h, &padding[..size(i)])
        };
        self.transfer("READ", len.div_ceil(unit), window, piece, |i, r| {
            let n = size(i);
            if r.payload.len() != n || r.hdr.len() as usize != n {
                return Err(ClientError::Malformed {
                    node: self.node,
                    what: format!(
                        "READ of {n} bytes answered with {} (len {})",
                        r.payload.len(),
                        r.hdr.len()
                    ),
                });
            }
            out[i * unit..i * unit + n].copy_from_slice(r.payload);
            progress(n);
            Ok(())
        })
        .await
    }

    /// `ClientConfig::streams`, 0 resolved.
    fn streams(&self) -> usize {
        match self.cfg.streams {
            0 => {
                let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
                (cpus + usize::from(self.xsk.is_some())).min(MAX_STREAMS)
            }
            n => n,
        }
    }

    /// The pieces 0..n as contiguous stripes, one per stream (fewer when a
    /// stripe would be short of MIN_STRIPE), and each stripe's share of
    /// the window.
    fn stripes(&self, n: usize) -> (Vec<std::ops::Range<usize>>, usize) {
        let k = self.streams().min(n / MIN_STRIPE).max(1);
        (
            (0..k).map(|j| j * n / k..(j + 1) * n / k).collect(),
            self.cfg.window.div_ceil(k),
        )
    }

    /// Runs the stripes of a transfer: one here; several on threads of
    /// their own, each with its own runtime and socket (the calling
    /// runtime thread waits for them, as for a blocking call).
    async fn run_stripes<F>(&self, mut stripes: Vec<F>) -> Result<(), ClientError>
    where
        F: std::future::Future<Output = Result<(), ClientError>> + Send,
    {
        if stripes.len() == 1 {
            return stripes.pop().expect("one stripe").await;
        }
        let run = || {
            std::thread::scope(|s| {
                let threads: Vec<_> = stripes
                    .into_iter()
                    .map(|stripe| {
                        s.spawn(move || {
                            tokio::runtime::Builder::new_current_thread()
                                .enable_all()
                                .build()?
                                .block_on(stripe)
                        })
                    })
                    .collect();
                // The scope joins every thread; the first error is the answer.
                threads
                    .into_iter()
                    .try_for_each(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            })
        };
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(run),
            _ => run(),
        }
    }

    /// `n` idempotent requests, piece i being `piece(i)`, through a socket of
    /// their own: up to `window` unanswered, sent in batches, each resent
    /// after the timeout with its seq, up to `retries` times; `answered`
    /// gets each piece's OK answer once.
    async fn transfer<'a>(
        &self,
        op: &'static str,
        n: usize,
        window: usize,
        piece: impl Fn(usize) -> (NetdamHdr, &'a [u8]) + Sync,
        mut answered: impl FnMut(usize, Answer<'_>) -> Result<(), ClientError> + Send,
    ) -> Result<(), ClientError> {
        let count = u32::try_from(n).map_err(|_| ClientError::Usage {
            op,
            what: format!("{n} requests are more than one transfer can number"),
        })?;
        let mut path = match &self.xsk {
            Some(x) => Path::Xsk(x.flow().map_err(|source| ClientError::AfXdp {
                node: self.node,
                source,
            })?),
            None => Path::Udp(BatchSocket::connect(self.node, self.cfg.port).await?),
        };
        let base = self.seq.fetch_add(count, Ordering::Relaxed);
        let attempts = 1 + self.cfg.retries;
        let mut w = Window::new(base, n, window, self.cfg.timeout, attempts);
        let mut bufs = RecvBufs::new(self.cfg.mtu as usize);
        let mut due = Vec::new();
        let mut acks = Vec::new();
        // On the AF_XDP path a WRITE's answers end in the flow's ack slots.
        let acks_in_memory = n > 0 && piece(0).0.opcode == Opcode::Write as u8;
        while !w.finished() {
            w.due(Instant::now(), usize::MAX, &mut due)
                .map_err(|e| ClientError::Timeout {
                    op,
                    node: self.node,
                    port: self.cfg.port,
                    attempts: e.attempts,
                    timeout: self.cfg.timeout,
                })?;
            let packets: Vec<Packet> = due
                .iter()
                .map(|&p| {
                    let (mut h, payload) = piece(p);
                    h.set_seq(w.seq(p));
                    Packet {
                        hdr: h.to_bytes(),
                        payload,
                    }
                })
                .collect();
            path.send_all(&packets).await?;
            let mut settle = |w: &mut Window, hdr: NetdamHdr, payload: &[u8]| {
                let Some(p) = w.answer(hdr.seq()) else {
                    return Ok(());
                };
                match Status::from_u8(hdr.status) {
                    Some(Status::Ok) => answered(p, Answer { hdr, payload }),
                    Some(status) => Err(ClientError::Refused {
                        op,
                        node: self.node,
                        addr: piece(p).0.addr(),
                        status,
                    }),
                    None => Err(ClientError::Malformed {
                        node: self.node,
                        what: format!("unknown status {}", hdr.status),
                    }),
                }
            };
            let mut each = |w: &mut Window, datagram: &[u8]| match response(datagram) {
                Some((hdr, payload)) => settle(w, hdr, payload),
                None => Ok(()),
            };
            // Wait only when nothing was sent: the window is full or every piece is out.
            match (packets.is_empty(), w.next_deadline()) {
                (true, Some(deadline)) => {
                    let waited = path.recv(&mut bufs, true, &mut w, acks_in_memory, &mut each);
                    if let Ok(r) = tokio::time::timeout_at(deadline.into(), waited).await {
                        r?;
                    }
                }
                _ => path.recv(&mut bufs, false, &mut w, acks_in_memory, &mut each).await?,
            }
            if let (Path::Xsk(flow), true) = (&path, acks_in_memory) {
                // A WRITE's answer kept as an ack word stands for its header.
                acks.clear();
                acks.extend(
                    w.unanswered()
                        .filter_map(|p| flow.acked(w.seq(p)).map(|status| (p, status))),
                );
                for &(p, status) in &acks {
                    let (mut hdr, _) = piece(p);
                    hdr.set_seq(w.seq(p));
                    hdr.flags |= flags::RESP;
                    hdr.status = status;
                    settle(&mut w, hdr, &[])?;
                }
            }
        }
        log::debug!("{op}: {n} requests, {} resent", w.resends());
        if let Path::Xsk(flow) = &path {
            if let Some([delivered, strangers, unsteered, acked]) = flow.counts() {
                log::debug!(
                    "AF_XDP path: {acked} WRITE answers kept as acks, {delivered} answers delivered to the sockets, \
                     {strangers} strangers' frames dropped, {unsteered} answers without a socket on their queue"
                );
            }
        }
        Ok(())
    }

    /// REDUCE: alu(v[i], mem[i]) for the little-endian vector `v` against
    /// memory at `addr`, split into MTU-sized requests; memory is unchanged.
    pub async fn reduce(&self, rkey: u32, addr: u64, dtype: Dtype, alu: Alu, v: &[u8]) -> Result<Vec<u8>, ClientError> {
        let unit = self.vector_unit("reduce", dtype, v)?;
        let mut out = vec![0u8; v.len()];
        let mut answers = stream::iter(v.chunks(unit).enumerate())
            .map(|(i, piece)| async move {
                let h = vector_header(Opcode::Reduce, rkey, addr + (i * unit) as u64, dtype, alu, piece.len());
                let r = self.request(h, piece, true).await?;
                if r.payload.len() != piece.len() {
                    return Err(ClientError::Malformed {
                        node: self.node,
                        what: format!("REDUCE of {} bytes answered with {}", piece.len(), r.payload.len()),
                    });
                }
                Ok((i, r.payload))
            })
            .buffer_unordered(self.cfg.window.max(1));
        while let Some((i, data)) = answers.try_next().await? {
            out[i * unit..i * unit + data.len()].copy_from_slice(&data);
        }
        Ok(out)
    }

    /// ACCUMULATE: mem[i] = alu(mem[i], v[i]), acknowledged, in MTU-sized
    /// requests. Every attempt of a request reuses its seq, so a node's
    /// at-most-once window (section 7) keeps ADD and XOR exact under
    /// retransmission; NOT_READY (contention on the node) is retried.
    pub async fn accumulate(&self, rkey: u32, addr: u64, dtype: Dtype, alu: Alu, v: &[u8]) -> Result<(), ClientError> {
        let unit = self.vector_unit("accumulate", dtype, v)?;
        stream::iter(v.chunks(unit).enumerate())
            .map(|(i, piece)| async move {
                let mut h = vector_header(
                    Opcode::Accumulate,
                    rkey,
                    addr + (i * unit) as u64,
                    dtype,
                    alu,
                    piece.len(),
                );
                h.flags = flags::ACK_REQ;
                for _ in 0..self.cfg.retries.max(1) {
                    match self.request(h, piece, true).await {
                        Err(ClientError::Refused {
                            status: Status::NotReady,
                            ..
                        }) => tokio::time::sleep(Duration::from_millis(1)).await,
                        other => return other.map(|_| ()),
                    }
                }
                Err(ClientError::Refused {
                    op: "ACCUMULATE",
                    node: self.node,
                    addr: h.addr(),
                    status: Status::NotReady,
                })
            })
            .buffer_unordered(self.cfg.window.max(1))
            .try_collect::<()>()
            .await
    }

    /// FETCH_ADD: `mem64[addr] += v`; returns the old value.
    pub async fn fetch_add(&self, rkey: u32, addr: u64, v: u64) -> Result<u64, ClientError> {
        self.atomic(Opcode::FetchAdd, rkey, addr, &[v]).await
    }

    /// CAS: `mem64[addr] = new` if it holds `expected`; returns the old value.
    pub async fn cas(&self, rkey: u32, addr: u64, expected: u64, new: u64) -> Result<u64, ClientError> {
        self.atomic(Opcode::Cas, rkey, addr, &[expected, new]).await
    }

    /// SWAP: `mem64[addr] = new`; returns the old value.
    pub async fn swap(&self, rkey: u32, addr: u64, new: u64) -> Result<u64, ClientError> {
        self.atomic(Opcode::Swap, rkey, addr, &[new]).await
    }

    /// An atomic. Every attempt reuses the request's seq, so the node's
    /// at-most-once window executes it once and answers a repeat with the
    /// stored old value (section 7).
    async fn atomic(&self, op: Opcode, rkey: u32, addr: u64, operands: &[u64]) -> Result<u64, ClientError> {
        let payload: Vec<u8> = operands.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut h = NetdamHdr::request(op);
        h.set_rkey(rkey);
        h.set_addr(addr);
        h.set_len(payload.len() as u16);
        let r = self.request(h, &payload, true).await?;
        let old: [u8; 8] =
            r.payload
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| ClientError::Malformed {
                    node: self.node,
                    what: format!("{} answered with {} payload bytes, not 8", op.name(), r.payload.len()),
                })?;
        Ok(u64::from_le_bytes(old))
    }

    /// Bytes of vector per request: the MTU's payload, in whole elements.
    fn vector_unit(&self, op: &'static str, dtype: Dtype, v: &[u8]) -> Result<usize, ClientError> {
        let w = dtype.width() as usize;
        if v.is_empty() || !v.len().is_multiple_of(w) {
            return Err(ClientError::Usage {
                op,
                what: format!(
                    "{} bytes are not a whole number of {w}-byte {} elements",
                    v.len(),
                    dtype.name()
                ),
            });
        }
        match self.unit(op)? / w * w {
            0 => Err(ClientError::Usage {
                op,
                what: format!("MTU {} leaves no room for one element", self.cfg.mtu),
            }),
            n => Ok(n),
        }
    }

    fn unit(&self, op: &'static str) -> Result<usize, ClientError> {
        match self.cfg.max_payload() {
            0 => Err(ClientError::Usage {
                op,
                what: format!("MTU {} leaves no room for a payload", self.cfg.mtu),
            }),
            n => Ok(n),
        }
    }
}

/// What a transfer does with each answer's datagram, its window at hand.
type OnAnswer<'a> = dyn FnMut(&mut Window, &[u8]) -> Result<(), ClientError> + Send + 'a;

/// How a transfer's requests leave and its answers arrive.
enum Path<'a> {
    Udp(BatchSocket),
    Xsk(xsk::Flow<'a>),
}

impl Path<'_> {
    async fn send_all(&mut self, packets: &[Packet<'_>]) -> std::io::Result<()> {
        match self {
            Path::Udp(s) => s.send_all(packets).await,
            Path::Xsk(x) => x.requests().send_all(packets).await,
        }
    }

    /// Hands each answer waiting (with `wait`, once one is there) to
    /// `each`; on the AF_XDP path, with `acks`, an ack of a piece of `w` in
    /// flight also ends the wait.
    async fn recv(
        &mut self,
        bufs: &mut RecvBufs,
        wait: bool,
        w: &mut Window,
        acks: bool,
        each: &mut OnAnswer<'_>,
    ) -> Result<(), ClientError> {
        match self {
            Path::Udp(s) => {
                let got = s.recv(bufs, wait).await?;
                (0..got).try_for_each(|k| each(w, bufs.get(k)))
            }
            Path::Xsk(x) => x.recv(wait, w, acks, each).await,
        }
    }
}

fn vector_header(op: Opcode, rkey: u32, addr: u64, dtype: Dtype, alu: Alu, len: usize) -> NetdamHdr {
    let mut h = NetdamHdr::request(op);
    h.dtype = dtype as u8;
    h.alu = alu as u8;
    h.set_rkey(rkey);
    h.set_addr(addr);
    h.set_len(len as u16);
    h
}

/// Hands each response to the request waiting for its seq; late duplicates
/// and anything that is not a NetDAM response are ignored.
async fn receive(sock: Arc<UdpSocket>, pending: Pending) {
    let mut buf = vec![0u8; 65536];
    loop {
        let n = match sock.recv(&mut buf).await {
            Ok(n) => n,
            Err(e) => {
                // ICMP port unreachable surfaces here on a connected socket: keep waiting, the timeout reports it.
                log::debug!("recv: {e}");
                if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    continue;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Some((hdr, payload)) = response(&buf[..n]) else {
            continue;
        };
        let waiter = pending.lock().expect("pending lock").remove(&hdr.seq());
        if let Some(tx) = waiter {
            let _ = tx.send(Reply {
                hdr,
                payload: payload.to_vec(),
            });
        }
    }
}

/// A NetDAM response's header and payload; `None` for anything else.
fn response(datagram: &[u8]) -> Option<(NetdamHdr, &[u8])> {
    let hdr = NetdamHdr::from_bytes(datagram).filter(NetdamHdr::is_response)?;
    let end = (HDR_LEN + hdr.sr_len as usize + hdr.len() as usize).min(datagram.len());
    let start = (HDR_LEN + hdr.sr_len as usize).min(end);
    Some((hdr, &datagram[start..end]))
}
