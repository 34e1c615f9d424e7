//! The reference model: a plain executor of PROTOCOL.md on a memory image,
//! written for clarity, not speed. Frame in; verdict, frame out, memory
//! effects and the counter it bumps out. It is the oracle the XDP program
//! (and later the HLS port) is checked against.
//!
//! Scope: what the data path executes today (docs/conformance.md, "Not
//! executed yet"): the carrier rules, validation, NOP, WRITE, READ, REDUCE,
//! ACCUMULATE, FETCH_ADD, CAS, SWAP, CHAIN and the at-most-once window. MSG
//! and WRITE_NOTIFY are BAD_OPCODE after the header checks, exactly as in the
//! data path. Each peer is bound to a MAC (`neighbours`): its frames must come
//! from it and CHAIN packets to it go there; a peer without one is neither
//! served nor forwarded to (DropPeerMac, DropPeerUnresolved).

use std::{collections::HashMap, net::Ipv4Addr};

use crate::{
    chain::{
        cell, check_chain_preamble, check_hop, check_ready, check_sr_shape, hop_needs_window, parse_trailer,
        trailer_off, CellAddr, HopOp, Me, Readiness, Ready, Segment, SrFixed, SEGMENT_LEN, SR_CELL_LEN, SR_FIXED_LEN,
    },
    config::PeerEntry,
    counters::{op_status, Event},
    split::UMEM_FRAME_MAX,
    validate::{answers, check_access, check_header, len_past_datagram, needs_window},
    window::{judge, state, tag, Slot, Verdict, SLOTS},
    wire::{flags, is_unanswerable_source, Alu, Dtype, ETH_P_IPV4, HDR_LEN, IPPROTO_UDP, MAGIC, VERSION_2},
    NetdamHdr, Opcode, Region, Status,
};

/// What a node does with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Pass,
    Drop,
    Tx,
    /// Handed to the node's AF_XDP socket (MSG, WRITE_NOTIFY).
    Redirect,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub action: Action,
    /// The frame after the node: the answer for Tx, the input for Pass, the
    /// frame handed over for Redirect.
    pub frame: Vec<u8>,
    /// The counter slots bumped.
    pub counters: Vec<u32>,
}

/// A node: its configuration and its memory image.
#[derive(Clone, Debug)]
pub struct ModelNode {
    pub mac: [u8; 6],
    pub ip: Ipv4Addr,
    pub port: u16,
    pub mtu: u32,
    pub verify_csum: bool,
    pub regions: Vec<(u32, Region)>,
    pub peers: Vec<Ipv4Addr>,
    pub mem: Vec<u8>,
    /// Sources the window table holds.
    pub window_sources: usize,
    /// Windows one source IPv4 address may hold (all its ports and hops).
    pub window_per_source: usize,
    /// The at-most-once windows by (source IP, source port, hop): hop is 0
    /// for plain requests and idx + 1 for CHAIN hops (keyed by the origin).
    pub windows: HashMap<(Ipv4Addr, u16, u16), Vec<Slot>>,
    /// Readiness generation (section 6) and call word (version 2) by rkey;
    /// absent means both 0.
    pub generations: HashMap<u32, Readiness>,
    /// The MAC bound to each peer (the controller's copy of the neighbour
    /// table): where its frames must come from and CHAIN packets to it go.
    pub neighbours: HashMap<Ipv4Addr, [u8; 6]>,
    /// An AF_XDP socket serves the frame's receive queue (MSG and
    /// WRITE_NOTIFY are NO_RECEIVER otherwise).
    pub receiver: bool,
}

/// Addresses of a frame the node sends.
struct Addressing {
    eth_dst: [u8; 6],
    eth_src: [u8; 6],
    ip_src: [u8; 4],
    ip_dst: [u8; 4],
    udp_src: u16,
    udp_dst: u16,
    tos: u8,
}

fn be16(f: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([f[o], f[o + 1]])
}

fn ip_at(f: &[u8], o: usize) -> Ipv4Addr {
    Ipv4Addr::new(f[o], f[o + 1], f[o + 2], f[o + 3])
}

impl ModelNode {
    /// A node with empty memory and no windows.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mac: [u8; 6],
        ip: Ipv4Addr,
        port: u16,
        mtu: u32,
        verify_csum: bool,
        regions: Vec<(u32, Region)>,
        peers: Vec<Ipv4Addr>,
        mem_size: usize,
        window_sources: usize,
        window_per_source: usize,
    ) -> ModelNode {
        ModelNode {
            mac,
            ip,
            port,
            mtu,
            verify_csum,
            regions,
            peers,
            mem: vec![0; mem_size],
            window_sources,
            window_per_source,
            windows: HashMap::new(),
            generations: HashMap::new(),
            neighbours: HashMap::new(),
            receiver: false,
        }
    }

    fn outcome(frame: &[u8], action: Action, counter: Option<u32>) -> Outcome {
        Outcome {
            action,
            frame: frame.to_vec(),
            counters: counter.into_iter().collect(),
        }
    }

    /// Processes one frame.
    pub fn process(&mut self, f: &[u8]) -> Outcome {
        let pass = Self::outcome(f, Action::Pass, None);
        let drop = |e: Event| Self::outcome(f, Action::Drop, Some(e as u32));
        // Section 1: only unicast IPv4/UDP to this node's MAC, IP and port P.
        if f.len() < 34 || be16(f, 12) != ETH_P_IPV4 || f[0..6] != self.mac {
            return pass;
        }
        let ihl = (f[14] & 0x0F) as usize;
        if f[14] >> 4 != 4 || ihl < 5 || f[23] != IPPROTO_UDP || ip_at(f, 30) != self.ip {
            return pass;
        }
        let frag = be16(f, 20);
        if frag & 0x1FFF != 0 {
            return pass;
        }
        let l4 = 14 + ihl * 4;
        if f.len() < l4 + 8 || be16(f, l4 + 2) != self.port {
            return pass;
        }
        if frag & 0x2000 != 0 {
            return drop(Event::DropFragment);
        }
        let udp_len = be16(f, l4 + 4) as usize;
        let ip_len = be16(f, 16) as usize;
        if udp_len < 8 || l4 + udp_len > f.len() || udp_len + ihl * 4 > ip_len {
            return drop(Event::DropTruncated);
        }
        let src = ip_at(f, 26);
        if is_unanswerable_source(u32::from(src)) {
            return drop(Event::DropBadSource);
        }
        if src == self.ip {
            return drop(Event::DropOwnAddress);
        }
        // A peer's address counts only from the peer's own MAC (RESP too:
        // a spoofed answer must not reach the host's collective).
        let eth_src: [u8; 6] = f[6..12].try_into().expect("34 bytes and more");
        if self.peers.contains(&src)
            && !self
                .neighbours
                .get(&src)
                .is_some_and(|m| PeerEntry::new(*m).sent(&eth_src))
        {
            return drop(Event::DropPeerMac);
        }
        // With --verify-csum: the IPv4 header checksum (options included)
        // and a UDP checksum, which must be right and, except from a peer
        // (nodes send zero, section 1; the peer's MAC is checked above),
        // there (not zero, "none" in IPv4).
        if self.verify_csum {
            let mut seg = f[l4..l4 + udp_len].to_vec();
            let stored = be16(&seg, 6);
            seg[6] = 0;
            seg[7] = 0;
            let udp_ok = match stored {
                0 => self.peers.contains(&src),
                _ => crate::frame::udp_checksum(src, ip_at(f, 30), &seg) == stored,
            };
            if !crate::frame::ipv4_header_checksum_ok(&f[14..l4]) || !udp_ok {
                return drop(Event::DropBadChecksum);
            }
        }
        let datagram = &f[l4 + 8..l4 + udp_len];
        let Some(h) = NetdamHdr::from_bytes(datagram) else {
            return drop(Event::DropTruncated);
        };
        if h.magic != MAGIC {
            return drop(Event::DropBadMagic);
        }
        if h.flags & flags::RESP != 0 {
            return Self::outcome(f, Action::Pass, Some(Event::PassResponse as u32));
        }
        if !self.peers.is_empty() && !self.peers.contains(&src) {
            return drop(Event::DropNotPeer);
        }
        let headers = HDR_LEN + h.sr_len as usize;
        if headers > datagram.len() {
            return drop(Event::DropTruncated);
        }
        let avail = (datagram.len() - headers) as u32;
        if len_past_datagram(&h, avail) {
            return drop(Event::DropLenPastDatagram);
        }
        let payload = &datagram[headers..headers + (h.len() as usize).min(avail as usize)];
        if h.opcode == Opcode::Chain as u8 && check_chain_preamble(&h).is_ok() {
            return self.chain(f, l4, &h, &datagram[HDR_LEN..headers], payload);
        }
        let source = (src, be16(f, l4), 0);
        let mut counters = Vec::new();
        let (status, resp) = match self.execute(&h, avail, payload, source, &mut counters) {
            Ok(r) => r,
            Err(s) => (s, None),
        };
        let op = Opcode::from_u8(h.opcode);
        if status == Status::Ok && matches!(op, Some(Opcode::Msg | Opcode::WriteNotify)) {
            return Self::hand_over(f, l4, op == Some(Opcode::Msg), counters, h.opcode);
        }
        counters.push(op_status(h.opcode, status));
        let answer = match op {
            Some(op) => answers(op, h.flags, status),
            None => true,
        };
        if !answer {
            return Outcome {
                action: Action::Drop,
                frame: f.to_vec(),
                counters,
            };
        }
        let frame = self.answer(f, l4, &h, &datagram[HDR_LEN..headers], status, resp.as_deref());
        Outcome {
            action: Action::Tx,
            frame,
            counters,
        }
    }

    /// Validates and executes; the response payload for ops that return one.
    #[allow(clippy::type_complexity)]
    fn execute(
        &mut self,
        h: &NetdamHdr,
        avail: u32,
        payload: &[u8],
        source: (Ipv4Addr, u16, u16),
        counters: &mut Vec<u32>,
    ) -> Result<(Status, Option<Vec<u8>>), Status> {
        let c = check_header(h, self.mtu, avail)?;
        if c.op == Opcode::Chain {
            return Err(Status::BadOpcode);
        }
        let region = self.regions.iter().find(|(k, _)| *k == h.rkey()).map(|(_, r)| r);
        check_access(region, &c, h.addr())?;
        if matches!(c.op, Opcode::Msg | Opcode::WriteNotify) && !self.receiver {
            return Err(Status::NoReceiver);
        }
        if needs_window(&c) {
            let slot = self.claim(source, h.seq(), c.op == Opcode::Accumulate, counters)?;
            if let Some(old) = slot {
                return Ok((Status::Ok, Some(old.to_le_bytes().to_vec())));
            }
            let r = self.run(&c, h, payload);
            let old = match &r {
                Some(v) if c.op != Opcode::Accumulate => u64::from_le_bytes(v[..8].try_into().unwrap()),
                _ => 0,
            };
            self.complete(source, h.seq(), old);
            return Ok((Status::Ok, r));
        }
        Ok((Status::Ok, self.run(&c, h, payload)))
    }

    /// Claims the window slot of `seq` for `source` (section 7): `Ok(None)`
    /// to execute; `Ok(Some(old))` for a repeat of an atomic; DUPLICATE for a
    /// repeat of an ACCUMULATE (`accumulate`), STALE for an older seq, a new
    /// source whose IPv4 address holds `window_per_source` windows already
    /// (checked first) or a full table.
    fn claim(
        &mut self,
        source: (Ipv4Addr, u16, u16),
        seq: u32,
        accumulate: bool,
        counters: &mut Vec<u32>,
    ) -> Result<Option<u64>, Status> {
        if !self.windows.contains_key(&source) {
            let held = self.windows.keys().filter(|(ip, _, _)| *ip == source.0).count();
            let refused = if held >= self.window_per_source {
                Some(Event::WindowSourceFull)
            } else if self.windows.len() >= self.window_sources {
                Some(Event::WindowFull)
            } else {
                None
            };
            if let Some(e) = refused {
                counters.push(e as u32);
                return Err(Status::Stale);
            }
        }
        let slots = self
            .windows
            .entry(source)
            .or_insert_with(|| vec![Slot::default(); SLOTS]);
        let slot = &mut slots[seq as usize % SLOTS];
        match judge(slot.tag, seq) {
            Verdict::Claim => Ok(None),
            Verdict::Repeat if accumulate => Err(Status::Duplicate),
            Verdict::Repeat => Ok(Some(slot.old)),
            // A single-threaded model never leaves a slot executing.
            Verdict::InFlight => unreachable!("no concurrency in the model"),
            Verdict::Stale => Err(Status::Stale),
        }
    }

    fn complete(&mut self, source: (Ipv4Addr, u16, u16), seq: u32, old: u64) {
        let slots = self.windows.get_mut(&source).expect("claimed before");
        slots[seq as usize % SLOTS] = Slot {
            tag: tag(seq, state::DONE),
            old,
        };
    }

    /// A CHAIN packet whose preamble (version, opcode, sr_len) is valid
    /// (section 6). `sr` is its SR header, `payload` its len payload bytes.
    fn chain(&mut self, f: &[u8], l4: usize, h: &NetdamHdr, sr: &[u8], payload: &[u8]) -> Outcome {
        let fixed = SrFixed::from_bytes(sr).expect("sr_len >= 24 (preamble)");
        let segment = |i: usize| Segment::from_bytes(&sr[SR_FIXED_LEN + SEGMENT_LEN * i..]).expect("idx < n (shape)");
        let count = |s: Status| vec![op_status(Opcode::Chain as u8, s)];
        if self.peers.is_empty() {
            return Self::outcome(f, Action::Drop, Some(Event::DropChainNoPeers as u32));
        }
        let shape = match check_sr_shape(h.version, h.sr_len, &fixed) {
            Ok(shape) => shape,
            // The origin is not to be trusted: the sender gets the answer.
            Err(s) => {
                let to = self.turned_around(f, l4);
                return self.send(Action::Tx, &to, h, s, sr, &[], count(s));
            }
        };
        let origin = Ipv4Addr::from(fixed.origin_ip());
        let is_peer = |ip: Ipv4Addr| self.peers.contains(&ip);
        // The node's own host may originate; any other origin must be a peer.
        if is_unanswerable_source(fixed.origin_ip()) || !(origin == self.ip || is_peer(origin)) {
            return Self::outcome(f, Action::Drop, Some(Event::DropBadOrigin as u32));
        }
        let here = segment(shape.idx as usize);
        let next = if shape.forwards() {
            segment(shape.idx as usize + 1)
        } else {
            here
        };
        let me = Me {
            ip: u32::from(self.ip),
            port: self.port,
        };
        let trailer = (h.version == VERSION_2).then(|| {
            let at = trailer_off(shape.n);
            parse_trailer(sr[at..at + SR_CELL_LEN].try_into().expect("sr_len covers the trailer"))
        });
        let call = trailer.map_or(0, |(call, _)| call);
        let cell = trailer.map(|(_, cell_addr)| cell_addr);
        let cell_addr = cell.map_or(CellAddr::NONE, CellAddr::at);
        let region = self.regions.iter().find(|(k, _)| *k == h.rkey()).map(|(_, r)| *r);
        let next_is_peer = !shape.forwards() || is_peer(Ipv4Addr::from(next.ip()));
        let times_named = (0..shape.n as usize).filter(|i| segment(*i).names(me)).count() as u32;
        let mut counters = Vec::new();
        let mut out = payload.to_vec();
        let result = check_hop(
            h,
            &fixed,
            cell_addr,
            shape,
            &here,
            &next,
            next_is_peer,
            times_named,
            me,
            self.mtu,
            region.as_ref(),
        )
        .and_then(|hop| {
            let now = self.generations.get(&h.rkey()).copied().unwrap_or_default();
            if let Ready::Hold = check_ready(h.version, hop.op, h.tag(), call, now)? {
                let c = cell.expect("version 2") as usize;
                self.mem[c + cell::HOLD as usize..][..out.len()].copy_from_slice(&out);
                self.put_u32(c + cell::HELD_SEQ as usize, h.seq());
                let idx_port = shape.idx as u32 | (fixed.origin_port() as u32) << 16;
                self.put_u32(c + cell::HELD_IDX as usize, idx_port);
                self.put_u32(c + cell::HELD_CALL as usize, call);
                self.put_u32(c + cell::HELD_CALL as usize + 4, 0);
                self.put_u32(c + cell::HELD as usize, h.tag());
                return Err(Status::Held);
            }
            let key = (origin, fixed.origin_port(), shape.idx as u16 + 1);
            let windowed = hop_needs_window(&hop);
            if windowed {
                self.claim(key, h.seq(), true, &mut counters)?;
            }
            self.hop(
                hop.op,
                hop.vector,
                h.addr() as usize,
                fixed.dst_addr() as usize,
                &mut out,
            );
            if windowed {
                self.complete(key, h.seq(), 0);
            }
            if let (Some(c), HopOp::Write | HopOp::ReduceWrite) = (cell, hop.op) {
                self.put_u32(c as usize + cell::DONE as usize, h.tag());
            }
            Ok(hop.op)
        });
        let op = match result {
            Ok(op) => op,
            Err(s) => {
                counters.extend(count(s));
                return self.to_origin(f, h, &fixed, sr, s, &[], counters);
            }
        };
        counters.extend(count(Status::Ok));
        if !shape.forwards() {
            let answer = if op.answer_carries_payload() { &out[..] } else { &[] };
            return self.to_origin(f, h, &fixed, sr, Status::Ok, answer, counters);
        }
        let Some(mac) = self.neighbours.get(&Ipv4Addr::from(next.ip())) else {
            counters.push(Event::DropPeerUnresolved as u32);
            return Outcome {
                action: Action::Drop,
                frame: f.to_vec(),
                counters,
            };
        };
        counters.push(Event::ChainForwarded as u32);
        let to = Addressing {
            eth_dst: *mac,
            eth_src: self.mac,
            ip_src: self.ip.octets(),
            ip_dst: next.ip().to_be_bytes(),
            udp_src: self.port,
            udp_dst: next.port(),
            tos: f[15],
        };
        let mut sr = sr.to_vec();
        sr[1] += 1;
        let frame = self.frame(&to, &h.to_bytes(), &sr, &out);
        Outcome {
            action: Action::Tx,
            frame,
            counters,
        }
    }

    /// Stores a little-endian u32 at `at` (a cell field).
    fn put_u32(&mut self, at: usize, v: u32) {
        self.mem[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// Runs a hop op on the payload `out` and memory (validated ranges).
    fn hop(&mut self, op: HopOp, vector: Option<(Dtype, Alu)>, a: usize, dst: usize, out: &mut Vec<u8>) {
        let n = out.len();
        match op {
            HopOp::Nop => {}
            HopOp::Write => self.mem[dst..dst + n].copy_from_slice(out),
            HopOp::Reduce | HopOp::ReduceWrite => {
                let (d, alu) = vector.expect("vector hop");
                *out = combine(d, alu, out, &self.mem[a..a + n]);
                if op == HopOp::ReduceWrite {
                    self.mem[dst..dst + n].copy_from_slice(out);
                }
            }
            HopOp::Accumulate => {
                let (d, alu) = vector.expect("vector hop");
                let r = combine(d, alu, &self.mem[a..a + n], out);
                self.mem[a..a + n].copy_from_slice(&r);
            }
        }
    }

    /// An answer to the CHAIN's origin: to its bound MAC, or to this host's
    /// own stack when the origin is this node.
    #[allow(clippy::too_many_arguments)]
    fn to_origin(
        &self,
        f: &[u8],
        h: &NetdamHdr,
        fixed: &SrFixed,
        sr: &[u8],
        status: Status,
        payload: &[u8],
        mut counters: Vec<u32>,
    ) -> Outcome {
        let origin = Ipv4Addr::from(fixed.origin_ip());
        let (action, eth_dst) = if origin == self.ip {
            counters.push(Event::PassLocalAnswer as u32);
            (Action::Pass, self.mac)
        } else if let Some(mac) = self.neighbours.get(&origin) {
            (Action::Tx, *mac)
        } else {
            counters.push(Event::DropPeerUnresolved as u32);
            return Outcome {
                action: Action::Drop,
                frame: f.to_vec(),
                counters,
            };
        };
        let to = Addressing {
            eth_dst,
            eth_src: self.mac,
            ip_src: self.ip.octets(),
            ip_dst: origin.octets(),
            udp_src: self.port,
            udp_dst: fixed.origin_port(),
            tos: f[15],
        };
        self.send(action, &to, h, status, sr, payload, counters)
    }

    /// The response to `h` with `status` and `payload`, addressed by `to`.
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        action: Action,
        to: &Addressing,
        h: &NetdamHdr,
        status: Status,
        sr: &[u8],
        payload: &[u8],
        counters: Vec<u32>,
    ) -> Outcome {
        let payload = if status == Status::Ok { payload } else { &[] };
        let mut rh = *h;
        rh.make_response(status, payload.len() as u16);
        Outcome {
            action,
            frame: self.frame(to, &rh.to_bytes(), sr, payload),
            counters,
        }
    }

    /// The request's own addresses swapped (section 3).
    fn turned_around(&self, f: &[u8], l4: usize) -> Addressing {
        Addressing {
            eth_dst: f[6..12].try_into().unwrap(),
            eth_src: f[0..6].try_into().unwrap(),
            ip_src: f[30..34].try_into().unwrap(),
            ip_dst: f[26..30].try_into().unwrap(),
            udp_src: be16(f, l4 + 2),
            udp_dst: be16(f, l4),
            tos: f[15],
        }
    }

    /// A frame the node sends: IPv4 IHL 5, ID 0, DF, TTL 64, UDP checksum 0.
    fn frame(&self, to: &Addressing, hdr: &[u8], sr: &[u8], payload: &[u8]) -> Vec<u8> {
        let udp_len = 8 + hdr.len() + sr.len() + payload.len();
        let mut out = Vec::with_capacity(14 + 20 + udp_len);
        out.extend_from_slice(&to.eth_dst);
        out.extend_from_slice(&to.eth_src);
        out.extend_from_slice(&ETH_P_IPV4.to_be_bytes());
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[1] = to.tos;
        ip[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
        ip[6] = 0x40;
        ip[8] = 64;
        ip[9] = IPPROTO_UDP;
        ip[12..16].copy_from_slice(&to.ip_src);
        ip[16..20].copy_from_slice(&to.ip_dst);
        let c = crate::wire::ipv4_header_checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        out.extend_from_slice(&ip);
        out.extend_from_slice(&to.udp_src.to_be_bytes());
        out.extend_from_slice(&to.udp_dst.to_be_bytes());
        out.extend_from_slice(&(udp_len as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(hdr);
        out.extend_from_slice(sr);
        out.extend_from_slice(payload);
        out
    }

    /// Executes a validated request; the response payload if the op has one.
    fn run(&mut self, c: &crate::validate::Checked, h: &NetdamHdr, payload: &[u8]) -> Option<Vec<u8>> {
        let a = h.addr() as usize;
        let n = h.len() as usize;
        let word = |mem: &[u8]| u64::from_le_bytes(mem[a..a + 8].try_into().unwrap());
        let operand = |i: usize| u64::from_le_bytes(payload[i * 8..i * 8 + 8].try_into().unwrap());
        match c.op {
            Opcode::Nop => None,
            Opcode::Write | Opcode::WriteNotify => {
                self.mem[a..a + n].copy_from_slice(payload);
                None
            }
            Opcode::Msg => None,
            Opcode::Read => Some(self.mem[a..a + n].to_vec()),
            Opcode::Reduce => {
                let (d, alu) = c.vector.expect("vector op");
                Some(combine(d, alu, payload, &self.mem[a..a + n]))
            }
            Opcode::Accumulate => {
                let (d, alu) = c.vector.expect("vector op");
                let r = combine(d, alu, &self.mem[a..a + n], payload);
                self.mem[a..a + n].copy_from_slice(&r);
                None
            }
            Opcode::FetchAdd | Opcode::Swap | Opcode::Cas => {
                let old = word(&self.mem);
                let new = match c.op {
                    Opcode::FetchAdd => old.wrapping_add(operand(0)),
                    Opcode::Swap => operand(0),
                    _ if old == operand(0) => operand(1),
                    _ => old,
                };
                self.mem[a..a + 8].copy_from_slice(&new.to_le_bytes());
                Some(old.to_le_bytes().to_vec())
            }
            Opcode::Chain => unreachable!("gated above"),
        }
    }

    /// An executed MSG or WRITE_NOTIFY handed to the AF_XDP socket: the
    /// frame from its IPv4 header on, cut after the NetDAM header for
    /// WRITE_NOTIFY (section 3). An MSG too large for a UMEM frame is
    /// dropped and counted instead (it was not executed: MSG changes nothing).
    fn hand_over(f: &[u8], l4: usize, msg: bool, mut counters: Vec<u32>, opcode: u8) -> Outcome {
        let frame = if msg { &f[14..] } else { &f[14..l4 + 8 + HDR_LEN] };
        if frame.len() > UMEM_FRAME_MAX as usize {
            counters.push(Event::DropTooLargeForUmem as u32);
            return Outcome {
                action: Action::Drop,
                frame: f.to_vec(),
                counters,
            };
        }
        counters.push(op_status(opcode, Status::Ok));
        Outcome {
            action: Action::Redirect,
            frame: frame.to_vec(),
            counters,
        }
    }

    /// The request turned around (section 3).
    fn answer(&self, f: &[u8], l4: usize, h: &NetdamHdr, sr: &[u8], status: Status, resp: Option<&[u8]>) -> Vec<u8> {
        let to = self.turned_around(f, l4);
        self.send(Action::Tx, &to, h, status, sr, resp.unwrap_or(&[]), Vec::new())
            .frame
    }
}

/// alu(a[i], b[i]) element-wise on little-endian vectors.
pub fn combine(d: Dtype, alu: Alu, a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut v = a.to_vec();
    crate::alu::combine_into(d, alu, &mut v, b);
    v
}
