//! The injector from the host side (`netdam_common::inject`): the first
//! packet of each chunk leaves through the node's own `netdam_inject` XDP
//! program, run by BPF_PROG_TEST_RUN with live frames. A batch of up to
//! 1024 requests is one map update and one system call, and the chunks go
//! from NetDAM memory into the frames without passing through a socket.
//! `netdam serve` pins the program and its job map beside the node's maps.

use std::{net::Ipv4Addr, path::Path};

use aya::{
    maps::{Array, Map, MapData},
    programs::{TestRun, TestRunAttrs, TestRunOptions, Xdp},
};
use aya_obj::programs::XdpAttachType;
use netdam_common::{
    inject::{InjectJob, INJECT_HEADERS, INJECT_QUEUE},
    wire::{ipv4_header_checksum, IPPROTO_UDP},
};

use super::exchange::Transmit;
use crate::controller::{ControllerError, INJECT_PROGRAM, MAP_INJECT};

/// The frames of one batch carry up to this many bytes (a 9216-byte payload and headers).
const FRAME_MAX: usize = 9216 + INJECT_HEADERS;

pub struct Injector {
    prog: Xdp,
    jobs: Array<MapData, InjectJob>,
    job: Box<InjectJob>,
    /// BPF_PROG_TEST_RUN input: a frame of the largest size of the job, and
    /// the xdp_md that names the interface the frames leave by.
    frame: Vec<u8>,
    ctx: Vec<u8>,
    pending: Vec<u32>,
}

/// What every request of one exchange shares.
pub struct Batch<'a> {
    /// The request of chunk `first_chunk`'s UDP payload up to its data
    /// (NetDAM and SR headers); its per-request fields are patched.
    pub netdam: &'a [u8],
    pub src: (Ipv4Addr, u16),
    pub dst: (Ipv4Addr, u16),
    pub seq_base: u32,
    pub first_chunk: u32,
    pub stride: u32,
    pub chunk_bytes: u32,
    pub total_bytes: u64,
    pub input_addr: u64,
    pub output_addr: u64,
    pub cells_addr: u64,
    pub cell_stride: u64,
}

impl Injector {
    /// The injector of the node pinned in `dir`, sending out of interface
    /// `ifindex` of the calling thread's network namespace.
    pub fn open(dir: &Path, ifindex: u32) -> Result<Injector, ControllerError> {
        let prog = Xdp::from_pin(dir.join(INJECT_PROGRAM), XdpAttachType::Interface).map_err(|e| {
            ControllerError::Io(
                format!("the injector pinned in {}", dir.display()),
                std::io::Error::other(e.to_string()),
            )
        })?;
        let map = MapData::from_pin(dir.join(MAP_INJECT)).map_err(|e| ControllerError::Map(MAP_INJECT, e))?;
        let jobs = Array::try_from(Map::Array(map)).map_err(|e| ControllerError::Map(MAP_INJECT, e))?;
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex.
        let md: [u32; 6] = [0, FRAME_MAX as u32, 0, ifindex, 0, 0];
        Ok(Injector {
            prog,
            jobs,
            // SAFETY: all-zero is a valid InjectJob (integers and byte arrays).
            job: Box::new(unsafe { std::mem::zeroed() }),
            frame: vec![0; FRAME_MAX],
            ctx: md.iter().flat_map(|v| v.to_ne_bytes()).collect(),
            pending: Vec::new(),
        })
    }

    /// Sets up the requests of one exchange.
    pub fn prepare(&mut self, b: &Batch) {
        let j = &mut self.job;
        let hdr_len = 14 + 20 + 8 + b.netdam.len();
        let whole = (hdr_len + b.chunk_bytes as usize) as u16;
        let last = b.total_bytes % b.chunk_bytes as u64;
        let last = if last == 0 {
            whole
        } else {
            (hdr_len as u64 + last) as u16
        };
        let ip = |frame_len: u16| -> [u8; 20] {
            let mut h = [0u8; 20];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&(frame_len - 14).to_be_bytes());
            h[6] = 0x40; // DF
            h[8] = 64;
            h[9] = IPPROTO_UDP;
            h[12..16].copy_from_slice(&b.src.0.octets());
            h[16..20].copy_from_slice(&b.dst.0.octets());
            h
        };
        // The program stores the checksum's bytes as they lie here: network order.
        let csum = |frame_len: u16| u16::from_ne_bytes(ipv4_header_checksum(&ip(frame_len)).to_be_bytes());
        j.csum_whole = csum(whole);
        j.csum_last = csum(last);
        let mut headers = vec![0u8; 14];
        headers[12] = 0x08;
        headers.extend_from_slice(&ip(whole));
        headers.extend_from_slice(&b.src.1.to_be_bytes());
        headers.extend_from_slice(&b.dst.1.to_be_bytes());
        headers.extend_from_slice(&(whole - 34).to_be_bytes());
        headers.extend_from_slice(&[0, 0]);
        headers.extend_from_slice(b.netdam);
        j.headers = [0; INJECT_HEADERS];
        j.headers[..headers.len()].copy_from_slice(&headers);
        j.hdr_len = headers.len() as u32;
        j.seq_base = b.seq_base;
        j.first_chunk = b.first_chunk;
        j.stride = b.stride;
        j.chunk_bytes = b.chunk_bytes;
        j.total_bytes = b.total_bytes;
        j.input_addr = b.input_addr;
        j.output_addr = b.output_addr;
        j.cells_addr = b.cells_addr;
        j.cell_stride = b.cell_stride;
        self.frame.truncate(whole as usize);
        self.frame.resize(whole as usize, 0);
        let len = self.frame.len() as u32;
        self.ctx[4..8].copy_from_slice(&len.to_ne_bytes());
        self.pending.clear();
    }

    /// Runs the program once on an empty job (it sends nothing): whether
    /// this kernel lets this process run it with live frames. Linux 6.18.44
    /// here answers EPERM (the cause was not found).
    pub fn probe(&mut self) -> std::io::Result<()> {
        self.run_batch(&[])
    }

    /// One live-frames run that sends the requests `batch` (at least one
    /// repeat: an empty batch sends nothing).
    fn run_batch(&mut self, batch: &[u32]) -> std::io::Result<()> {
        self.job.taken = 0;
        self.job.count = batch.len() as u32;
        self.job.queue[..batch.len()].copy_from_slice(batch);
        self.jobs
            .set(0, self.job.as_ref(), 0)
            .map_err(|e| std::io::Error::other(format!("{MAP_INJECT}: {e}")))?;
        let opts = TestRunOptions {
            data_in: Some(&self.frame),
            ctx_in: Some(&self.ctx),
            repeat: batch.len().max(1) as u32,
            attrs: TestRunAttrs::new().xdp_live_frames(64),
            ..Default::default()
        };
        self.prog.test_run(opts).map_err(|e| {
            // The kernel's errno is in the source, which Display leaves out.
            let why = std::error::Error::source(&e).map_or(String::new(), |s| format!(": {s}"));
            std::io::Error::other(format!("BPF_PROG_TEST_RUN of {INJECT_PROGRAM}: {e}{why}"))
        })?;
        Ok(())
    }
}

impl Transmit for Injector {
    fn send(&mut self, i: usize, _seq: u32) -> std::io::Result<()> {
        // The program derives the seq from the job's seq_base and i, as the exchange does.
        self.pending.push(i as u32);
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let pending = std::mem::take(&mut self.pending);
        for batch in pending.chunks(INJECT_QUEUE) {
            self.run_batch(batch)?;
        }
        Ok(())
    }
}
