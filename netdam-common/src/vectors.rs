//! The conformance vectors: frames, their expected verdicts and answers, and
//! memory before and after, generated from the reference model. Language
//! neutral (JSON lines, bytes as hex) so that the XDP program, the HLS port
//! and anything else that speaks PROTOCOL.md are held to the same cases.
//! Format and coverage: tests/vectors/README.md.

use std::{collections::BTreeMap, net::Ipv4Addr};

use serde::{Deserialize, Serialize};

use crate::{
    chain::{
        cell, trailer_bytes, HopOp, Readiness, Segment as SrSegment, SrFixed, SEGMENT_LEN, SR_CELL_LEN, SR_FIXED_LEN,
    },
    frame::{netdam_frame, udp_frame, Endpoint, Ipv4Opts},
    model::{Action, ModelNode},
    region::perm,
    wire::{flags, Alu, Dtype, DEFAULT_PORT, VERSION, VERSION_2},
    NetdamHdr, Opcode, Region,
};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionCfg {
    pub rkey: u32,
    pub base: u64,
    pub size: u64,
    /// Bits: 1 READ, 2 WRITE, 4 ATOMIC, 8 MSG.
    pub perms: u32,
}

/// The node a vector runs on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCfg {
    pub mac: String,
    pub ip: Ipv4Addr,
    pub port: u16,
    pub mtu: u32,
    pub mem_size: u64,
    pub verify_csum: bool,
    pub window_sources: u32,
    /// Windows one source IPv4 address may hold (its ports and CHAIN origin ports together).
    pub window_per_source: u32,
    pub regions: Vec<RegionCfg>,
    pub peers: Vec<Ipv4Addr>,
    /// The MACs bound to the peers (the controller copies them from the
    /// neighbour table): where their frames must come from and CHAIN packets to them go.
    pub neighbours: Vec<NeighbourCfg>,
    /// Readiness generations by rkey (absent: 0).
    pub generations: Vec<GenerationCfg>,
    /// An AF_XDP socket is bound to the node's receive queue 0 (MSG and
    /// WRITE_NOTIFY are handed over; NO_RECEIVER otherwise).
    #[serde(default, skip_serializing_if = "core::ops::Not::not")]
    pub receiver: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighbourCfg {
    pub ip: Ipv4Addr,
    pub mac: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenerationCfg {
    pub rkey: u32,
    pub generation: u32,
    /// The call word raised with the generation (version 2); absent: 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub call: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub addr: u64,
    pub hex: String,
}

/// One frame in, what comes out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub input: String,
    /// "tx", "pass", "drop" or "redirect" (to the AF_XDP socket).
    pub verdict: String,
    /// The answer for tx, the untouched input for pass, empty for drop, the
    /// frame handed over for redirect.
    pub output: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vector {
    pub name: String,
    /// The rule of PROTOCOL.md it checks, "§section: rule".
    pub rule: String,
    pub node: NodeCfg,
    /// Memory before the first step (everything else is zero).
    pub memory: Vec<Segment>,
    /// Frames in order on one node; window state carries from step to step.
    pub steps: Vec<Step>,
    /// Memory after the last step, for the ranges the vector touches and their neighbours.
    pub memory_after: Vec<Segment>,
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

impl NodeCfg {
    pub fn mac_bytes(&self) -> [u8; 6] {
        unhex(&self.mac).try_into().expect("6-byte MAC")
    }

    pub fn regions(&self) -> Vec<(u32, Region)> {
        self.regions
            .iter()
            .map(|r| {
                (
                    r.rkey,
                    Region {
                        base: r.base,
                        size: r.size,
                        perms: r.perms,
                        _reserved: 0,
                    },
                )
            })
            .collect()
    }

    /// (IPv4, MAC) of every neighbour entry.
    pub fn neighbours(&self) -> Vec<(Ipv4Addr, [u8; 6])> {
        self.neighbours
            .iter()
            .map(|n| (n.ip, unhex(&n.mac).try_into().expect("6-byte MAC")))
            .collect()
    }

    pub fn model(&self) -> ModelNode {
        let mut m = ModelNode::new(
            self.mac_bytes(),
            self.ip,
            self.port,
            self.mtu,
            self.verify_csum,
            self.regions(),
            self.peers.clone(),
            self.mem_size as usize,
            self.window_sources as usize,
            self.window_per_source as usize,
        );
        m.neighbours = self.neighbours().into_iter().collect();
        m.generations = self
            .generations
            .iter()
            .map(|g| (g.rkey, Readiness::new(g.generation, g.call)))
            .collect();
        m.receiver = self.receiver;
        m
    }
}

pub const NODE_MAC: [u8; 6] = [0x02, 0xDA, 0, 0, 0, 1];
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const RKEY_RW: u32 = 0x1234;
pub const RKEY_RO: u32 = 0x5678;
/// [0x1000, +256 KiB): spans the chunk boundaries at 0x10000..0x40000.
pub const RW_BASE: u64 = 0x1000;
pub const RW_SIZE: u64 = 256 << 10;
pub const RO_BASE: u64 = 0x80000;
pub const RO_SIZE: u64 = 4096;

pub fn default_node() -> NodeCfg {
    NodeCfg {
        mac: hex(&NODE_MAC),
        ip: NODE_IP,
        port: DEFAULT_PORT,
        mtu: 1500,
        mem_size: 1 << 20,
        verify_csum: false,
        window_sources: 256,
        // No cap below the table: the vectors of one configuration share a
        // node and one client address (each vector its own port).
        window_per_source: 256,
        regions: vec![
            RegionCfg {
                rkey: RKEY_RW,
                base: RW_BASE,
                size: RW_SIZE,
                perms: perm::ALL,
            },
            RegionCfg {
                rkey: RKEY_RO,
                base: RO_BASE,
                size: RO_SIZE,
                perms: perm::READ,
            },
        ],
        peers: vec![],
        neighbours: [CLIENT_IP, HOP_A, HOP_B]
            .iter()
            .map(|ip| NeighbourCfg {
                ip: *ip,
                mac: hex(&mac_of(*ip)),
            })
            .collect(),
        generations: vec![],
        receiver: false,
    }
}

/// The client of the vectors; the CHAIN origin.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// Two other NetDAM nodes that CHAIN vectors route through.
pub const HOP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
pub const HOP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 4);
/// A host on the node's subnet without a neighbour entry.
pub const UNRESOLVED: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 9);

/// Test hosts' MACs: 02:da:00:00:00:(last octet of the address).
pub fn mac_of(ip: Ipv4Addr) -> [u8; 6] {
    [0x02, 0xDA, 0, 0, 0, ip.octets()[3]]
}

/// Builds vectors: each gets its own client port, so that windows of
/// different vectors never meet on a node that runs them all.
struct Gen {
    vectors: Vec<Vector>,
    rng: u64,
}

type Frames = Vec<Vec<u8>>;

impl Gen {
    fn client(&self) -> Endpoint {
        Endpoint {
            mac: mac_of(CLIENT_IP),
            ip: CLIENT_IP,
            port: 20000 + self.vectors.len() as u16,
        }
    }

    fn node(&self) -> Endpoint {
        Endpoint {
            mac: NODE_MAC,
            ip: NODE_IP,
            port: DEFAULT_PORT,
        }
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                (self.rng >> 24) as u8
            })
            .collect()
    }

    /// A vector: `frames` on `node` with `memory` placed first; the memory
    /// ranges `watch` (address, length) are recorded after.
    fn case(
        &mut self,
        name: &str,
        rule: &str,
        node: &NodeCfg,
        memory: &[(u64, Vec<u8>)],
        frames: Frames,
        watch: &[(u64, usize)],
    ) {
        let mut m = node.model();
        for (a, b) in memory {
            m.mem[*a as usize..*a as usize + b.len()].copy_from_slice(b);
        }
        let steps = frames
            .iter()
            .map(|f| {
                let o = m.process(f);
                let verdict = match o.action {
                    Action::Tx => "tx",
                    Action::Pass => "pass",
                    Action::Drop => "drop",
                    Action::Redirect => "redirect",
                };
                let output = if o.action == Action::Drop {
                    String::new()
                } else {
                    hex(&o.frame)
                };
                Step {
                    input: hex(f),
                    verdict: verdict.into(),
                    output,
                }
            })
            .collect();
        let memory_after = watch
            .iter()
            .map(|(a, n)| Segment {
                addr: *a,
                hex: hex(&m.mem[*a as usize..*a as usize + n]),
            })
            .collect();
        self.vectors.push(Vector {
            name: name.into(),
            rule: rule.into(),
            node: node.clone(),
            memory: memory.iter().map(|(a, b)| Segment { addr: *a, hex: hex(b) }).collect(),
            steps,
            memory_after,
        });
    }

    fn frame(&self, h: &NetdamHdr, rest: &[u8]) -> Vec<u8> {
        netdam_frame(&self.client(), &self.node(), h, rest)
    }

    /// `chain_frame` with 64 random payload bytes.
    fn chain_random(&mut self, c: &Chain) -> Vec<u8> {
        let payload = self.bytes(64);
        self.chain_frame(c, &payload)
    }

    /// A CHAIN packet at segment `c.idx`, sent by the node of the previous
    /// segment (the client, which is the origin, at idx 0).
    fn chain_frame(&self, c: &Chain, payload: &[u8]) -> Vec<u8> {
        let origin = self.client();
        let (origin_ip, origin_port) = c.origin.unwrap_or((origin.ip, origin.port));
        let mut h = NetdamHdr::request(Opcode::Chain);
        h.version = c.version;
        let sr_len = SR_FIXED_LEN + SEGMENT_LEN * c.segs.len() + c.cell.map_or(0, |_| SR_CELL_LEN);
        h.sr_len = c.sr_len.unwrap_or(sr_len as u8);
        h.dtype = c.dtype;
        h.alu = c.alu;
        h.set_addr(c.addr);
        h.set_rkey(c.rkey);
        h.set_len(payload.len() as u16);
        h.set_seq(0x0200);
        h.set_tag(c.tag);
        let n = c.n.unwrap_or(c.segs.len() as u8);
        let mut rest = SrFixed::new(n, c.idx, u32::from(origin_ip), origin_port, c.dst_addr)
            .to_bytes()
            .to_vec();
        for (ip, op) in &c.segs {
            rest.extend_from_slice(&SrSegment::new(u32::from(*ip), DEFAULT_PORT, *op).to_bytes());
        }
        if let Some(cell) = c.cell {
            let cell = u32::try_from(cell).expect("a cell address fits the trailer's 32 bits");
            rest.extend_from_slice(&trailer_bytes(c.call, cell));
        }
        // An sr_len that claims more than the segments: zeros up to it.
        rest.resize(rest.len().max(h.sr_len as usize), 0);
        rest.extend_from_slice(payload);
        let sender = match c.idx.checked_sub(1).and_then(|i| c.segs.get(i as usize)) {
            Some((ip, _)) if c.idx > 0 => Endpoint {
                mac: mac_of(*ip),
                ip: *ip,
                port: DEFAULT_PORT,
            },
            _ => origin,
        };
        netdam_frame(&sender, &self.node(), &h, &rest)
    }
}

/// A CHAIN packet for a vector: segments (node, hop op), where it is, and
/// the fields its hops use.
#[derive(Clone)]
struct Chain {
    segs: Vec<(Ipv4Addr, HopOp)>,
    idx: u8,
    /// n as sent, when a vector lies about it.
    n: Option<u8>,
    /// sr_len as sent, when a vector lies about it (the SR header is padded
    /// with zeros up to a larger one).
    sr_len: Option<u8>,
    /// The origin when it is not the client.
    origin: Option<(Ipv4Addr, u16)>,
    dtype: u8,
    alu: u8,
    rkey: u32,
    addr: u64,
    dst_addr: u64,
    tag: u32,
    /// The NetDAM header's version (1, or 2 for the version-2 CHAIN).
    version: u8,
    /// The cell address the SR header's trailer carries after its segments
    /// (version 2), with `call` before it.
    cell: Option<u64>,
    /// The trailer's call word (version 2; sent only with a cell).
    call: u32,
}

impl Chain {
    /// Three segments with this node at `idx` running `op`; i32 ADD on the
    /// read-write region, input at RW_BASE + 0x100, output at RW_BASE + 0x800.
    fn at(idx: u8, op: HopOp) -> Chain {
        let mut segs = vec![(HOP_A, HopOp::Reduce), (HOP_B, HopOp::Write)];
        segs.insert(idx as usize, (NODE_IP, op));
        Chain {
            segs,
            idx,
            n: None,
            sr_len: None,
            origin: None,
            dtype: Dtype::I32 as u8,
            alu: Alu::Add as u8,
            rkey: RKEY_RW,
            addr: RW_BASE + 0x100,
            dst_addr: RW_BASE + 0x800,
            tag: CHAIN_GEN,
            version: VERSION,
            cell: None,
            call: CHAIN_CALL,
        }
    }

    /// `at`, as a version-2 CHAIN with its cell at CHAIN_CELL and the call
    /// word of the region's generation (CHAIN_CALL).
    fn v2(idx: u8, op: HopOp) -> Chain {
        Chain {
            version: VERSION_2,
            cell: Some(CHAIN_CELL),
            ..Chain::at(idx, op)
        }
    }
}

/// The completion cell of version-2 CHAIN vectors, in the read-write region.
const CHAIN_CELL: u64 = RW_BASE + 0x1000;

/// The generation of the read-write region on CHAIN vectors' node.
const CHAIN_GEN: u32 = 7;

/// The call word raised with CHAIN_GEN (version 2): what version-2 CHAIN
/// vectors carry in their trailer unless they test another.
const CHAIN_CALL: u32 = 0xC0FF_EE01;

/// A call word other than CHAIN_CALL: another call's.
const OTHER_CALL: u32 = 0xC0FF_EE02;

/// The call word of the partial an old cell of the vectors holds (the
/// previous call's).
const PREVIOUS_CALL: u32 = 0xC0FF_EE00;

/// The node of the CHAIN vectors. A CHAIN runs only with a peer table
/// (docs/conformance.md 20); UNRESOLVED is a peer whose MAC the controller
/// has not bound yet.
fn chain_node() -> NodeCfg {
    NodeCfg {
        generations: vec![GenerationCfg {
            rkey: RKEY_RW,
            generation: CHAIN_GEN,
            call: CHAIN_CALL,
        }],
        peers: vec![CLIENT_IP, HOP_A, HOP_B, UNRESOLVED],
        ..default_node()
    }
}

/// CHAIN (section 6): every hop op at every position, every failure at
/// every idx, readiness, the window of ACCUMULATE hops, routing and peers.
fn chain_vectors(g: &mut Gen) {
    let node = chain_node();
    let input = RW_BASE + 0x100;
    let output = RW_BASE + 0x800;
    let watch = [(input, 64), (output, 64)];
    let place = |g: &mut Gen| vec![(input, g.bytes(64)), (output, g.bytes(64))];
    let position = |idx: u8| ["first", "middle", "last"][idx as usize];
    for op in HopOp::ALL {
        for idx in 0..3u8 {
            let mem = place(g);
            let c = Chain::at(idx, *op);
            let f = g.chain_random(&c);
            let what = if idx < 2 {
                "forwards to the next segment"
            } else {
                "answers the origin"
            };
            g.case(
                &format!("chain_{}_{}", op.name().to_lowercase(), position(idx)),
                &format!("§6: a {} hop runs, then {what}", op.name()),
                &node,
                &mem,
                vec![f],
                &watch,
            );
        }
    }
    for (dtype, alu) in [(Dtype::F32, Alu::Add), (Dtype::U64, Alu::Max), (Dtype::I64, Alu::Min)] {
        let mem = place(g);
        let c = Chain {
            dtype: dtype as u8,
            alu: alu as u8,
            ..Chain::at(1, HopOp::ReduceWrite)
        };
        let f = g.chain_random(&c);
        g.case(
            &format!("chain_reduce_write_{}_{}", dtype.name(), alu.name()).to_lowercase(),
            "§6: REDUCE_WRITE combines with every dtype and alu",
            &node,
            &mem,
            vec![f],
            &watch,
        );
    }
    // A hop across a 64 KiB chunk boundary of memory.
    let edge = 0x10000 - 32;
    let mem = vec![(edge, g.bytes(64)), (edge + 0x1000, g.bytes(64))];
    let c = Chain {
        addr: edge,
        dst_addr: edge + 0x1000,
        ..Chain::at(1, HopOp::ReduceWrite)
    };
    let f = g.chain_random(&c);
    g.case(
        "chain_across_chunks",
        "§6: a hop's ranges may span memory chunks",
        &node,
        &mem,
        vec![f],
        &[(edge, 64), (edge + 0x1000, 64)],
    );
    // Every failure at every idx: answered to the origin, memory untouched.
    type Spoil = fn(&mut Chain);
    let failures: [(&str, &str, Spoil); 8] = [
        ("bad_key", "BAD_KEY", |c| c.rkey = 0x9999),
        ("forbidden", "FORBIDDEN", |c| c.rkey = RKEY_RO),
        ("out_of_bounds", "OUT_OF_BOUNDS (dst_addr range)", |c| {
            c.dst_addr = RW_BASE + RW_SIZE - 32
        }),
        ("bad_dtype", "BAD_DTYPE", |c| c.alu = Alu::Xor as u8 + 9),
        ("misaligned", "MISALIGNED", |c| c.addr += 2),
        ("not_ready", "NOT_READY (tag > generation)", |c| c.tag = CHAIN_GEN + 1),
        ("stale", "STALE (tag < generation)", |c| c.tag = CHAIN_GEN - 1),
        ("not_named", "BAD_SR (the segment names another node)", |c| {
            c.segs[c.idx as usize].0 = UNRESOLVED
        }),
    ];
    for (name, status, spoil) in failures {
        for idx in 0..3u8 {
            let mem = place(g);
            let mut c = Chain::at(idx, HopOp::ReduceWrite);
            if name == "forbidden" {
                c.addr = RO_BASE;
                c.dst_addr = RO_BASE + 0x100;
            }
            spoil(&mut c);
            let f = g.chain_random(&c);
            g.case(
                &format!("chain_{name}_{}", position(idx)),
                &format!("§6: a failing hop answers the origin with {status}; the chain stops"),
                &node,
                &mem,
                vec![f],
                &watch,
            );
        }
    }
    let simple: [(&str, &str, Spoil); 6] = [
        (
            "chain_n_mismatch",
            "§6: n that disagrees with sr_len is BAD_SR to the sender",
            |c| c.n = Some(4),
        ),
        ("chain_idx_past_n", "§6: idx >= n is BAD_SR to the sender", |c| {
            c.idx = 3;
            c.n = Some(3)
        }),
        ("chain_unknown_hop_op", "§6: an unknown hop op is BAD_SR", |c| {
            c.segs[1].1 = HopOp::Write;
            c.dtype = 0;
        }),
        (
            "chain_next_is_self",
            "§6: a next segment naming this node again is BAD_SR (docs/conformance.md 13)",
            |c| c.segs[2].0 = NODE_IP,
        ),
        (
            "chain_no_route_forward",
            "§6: a forward to a peer with no MAC bound is dropped and counted (docs/conformance.md 19)",
            |c| c.segs[2].0 = UNRESOLVED,
        ),
        (
            "chain_local_origin",
            "§6: an answer to an origin on this host goes to its stack",
            |c| c.origin = Some((NODE_IP, 20999)),
        ),
    ];
    for (name, rule, spoil) in simple {
        let mem = place(g);
        let mut c = Chain::at(1, HopOp::ReduceWrite);
        if name == "chain_local_origin" {
            c = Chain::at(2, HopOp::Write);
        }
        spoil(&mut c);
        let mut f = g.chain_random(&c);
        if name == "chain_unknown_hop_op" {
            // The segment of this node (idx 1) names op 0x02 (READ, not a hop op).
            let at = 14 + 20 + 8 + 32 + SR_FIXED_LEN + SEGMENT_LEN + 6;
            f[at] = 0x02;
        }
        g.case(name, rule, &node, &mem, vec![f], &watch);
    }
    let mut h = NetdamHdr::request(Opcode::Chain);
    h.sr_len = 20;
    h.set_len(4);
    let f = g.frame(&h, &[0; 24]);
    g.case(
        "chain_sr_len_not_multiple_of_8",
        "§5: CHAIN sr_len must be 16 + 8n (BAD_SR to the sender)",
        &node,
        &[],
        vec![f],
        &[],
    );
    let f = g.chain_frame(&Chain::at(1, HopOp::Nop), &[]);
    g.case(
        "chain_len_zero",
        "§3: a CHAIN needs a payload (BAD_LENGTH)",
        &node,
        &[],
        vec![f],
        &[],
    );
    // Peers: the origin must be one, and so must the next segment.
    let peers = NodeCfg {
        peers: vec![CLIENT_IP, HOP_A, HOP_B],
        ..node.clone()
    };
    let mem = place(g);
    let ok = g.chain_random(&Chain::at(1, HopOp::ReduceWrite));
    let mut stranger = Chain::at(1, HopOp::ReduceWrite);
    stranger.segs[2].0 = Ipv4Addr::new(198, 18, 0, 5);
    let to_stranger = g.chain_random(&stranger);
    let mut foreign = Chain::at(1, HopOp::ReduceWrite);
    foreign.origin = Some((Ipv4Addr::new(198, 18, 0, 5), 7));
    let from_foreign = g.chain_random(&foreign);
    let mut loopback = Chain::at(1, HopOp::ReduceWrite);
    loopback.origin = Some((Ipv4Addr::new(127, 0, 0, 1), 7));
    let from_loopback = g.chain_random(&loopback);
    g.case(
        "chain_peers_only",
        "§6: with a peer table a CHAIN forwards only to peers (BAD_SR) and drops a non-peer origin",
        &peers,
        &mem,
        vec![ok, to_stranger, from_foreign, from_loopback],
        &watch,
    );
    let mem = place(g);
    let mut c = Chain::at(2, HopOp::Write);
    c.origin = Some((UNRESOLVED, 7));
    let f = g.chain_random(&c);
    g.case(
        "chain_no_route_answer",
        "§6: an answer to a peer with no MAC bound is dropped and counted (docs/conformance.md 19)",
        &node,
        &mem,
        vec![f],
        &watch,
    );
    relay_vectors(g, &node);
    // The window of a non-idempotent hop: key (origin, port, seq, idx).
    let mem = place(g);
    let c = Chain::at(1, HopOp::Accumulate);
    let f = g.chain_random(&c);
    let mut other_idx = Chain::at(2, HopOp::Accumulate);
    other_idx.segs[1].0 = HOP_B;
    other_idx.segs[0].0 = HOP_A;
    let f2 = g.chain_random(&other_idx);
    g.case(
        "chain_accumulate_add_once",
        "§7: an ACCUMULATE ADD hop runs once per (origin, seq, idx); a repeat is DUPLICATE",
        &node,
        &mem,
        vec![f.clone(), f, f2],
        &watch,
    );
    // A CHAIN origin spraying origin ports holds at most --window-per-source
    // windows here; another origin is still served.
    let capped = NodeCfg {
        window_sources: 8,
        window_per_source: 2,
        ..node.clone()
    };
    let mem = place(g);
    let port = g.client().port;
    let frames = [
        (CLIENT_IP, port),
        (CLIENT_IP, port + 1),
        (CLIENT_IP, port + 2),
        (HOP_B, port),
    ]
    .into_iter()
    .map(|origin| {
        let c = Chain {
            origin: Some(origin),
            ..Chain::at(1, HopOp::Accumulate)
        };
        g.chain_random(&c)
    })
    .collect();
    g.case(
        "chain_window_per_source_full",
        "§7: an ACCUMULATE ADD hop whose origin address holds --window-per-source windows is STALE to the \
         origin, not run; another origin is served (docs/conformance.md 12)",
        &capped,
        &mem,
        frames,
        &watch,
    );
    let mem = place(g);
    let c = Chain {
        alu: Alu::Max as u8,
        ..Chain::at(1, HopOp::Accumulate)
    };
    let f = g.chain_random(&c);
    g.case(
        "chain_accumulate_max_repeats",
        "§4: an idempotent ACCUMULATE hop needs no window: a repeat runs again, changing nothing",
        &node,
        &mem,
        vec![f.clone(), f],
        &watch,
    );
}

/// Version 2 of CHAIN (docs/PROTOCOL.md, the version-2 section): the
/// trailer (call word, cell address) and the cell's checks, readiness that
/// holds a partial one generation ahead (its call word in held_call) and
/// answers a copy one generation behind STALE (as version 1 does: its origin
/// repairs the chunk, the node does not), the call word compared at the
/// generation (MISMATCH; not for NOP, not in version 1), the `done` stamp,
/// the version-2 sr_len (BAD_SR, at most 14 segments), and version 2
/// refused outside CHAIN.
fn chain_v2_vectors(g: &mut Gen) {
    let node = chain_node();
    let input = RW_BASE + 0x100;
    let output = RW_BASE + 0x800;
    let cell_len = (cell::HDR_LEN + 64) as usize;
    let watch = [(input, 64), (output, 64), (CHAIN_CELL, cell_len)];
    // The cell as a previous generation left it: done 6, a partial of
    // generation 6 held at idx 0 by seq 0x1ff, of the previous call.
    let old_cell = |g: &mut Gen| {
        let mut c = Vec::with_capacity(cell_len);
        c.extend_from_slice(&(CHAIN_GEN - 1).to_le_bytes());
        c.extend_from_slice(&(CHAIN_GEN - 1).to_le_bytes());
        c.extend_from_slice(&0x1FFu32.to_le_bytes());
        c.extend_from_slice(&[0; 4]);
        c.extend_from_slice(&PREVIOUS_CALL.to_le_bytes());
        c.extend_from_slice(&[0; 4]);
        c.extend_from_slice(&g.bytes(64));
        c
    };
    let place = |g: &mut Gen| {
        let c = old_cell(g);
        vec![(input, g.bytes(64)), (output, g.bytes(64)), (CHAIN_CELL, c)]
    };
    let position = |idx: u8| ["first", "middle", "last"][idx as usize];
    let name = |op: HopOp| op.name().to_lowercase();
    // tag == generation: the hop runs as in version 1; WRITE and REDUCE_WRITE stamp done.
    for op in HopOp::ALL {
        for idx in 0..3u8 {
            let mem = place(g);
            let f = g.chain_random(&Chain::v2(idx, *op));
            let rule = match op {
                HopOp::Write | HopOp::ReduceWrite => {
                    "§v2: at tag == generation a version-2 WRITE or REDUCE_WRITE hop runs as in version 1, then sets the cell's done to the tag"
                }
                _ => "§v2: at tag == generation a version-2 hop runs as in version 1 (only WRITE and REDUCE_WRITE set done)",
            };
            g.case(
                &format!("chain_v2_{}_{}", name(*op), position(idx)),
                rule,
                &node,
                &mem,
                vec![f],
                &watch,
            );
        }
    }
    // tag == generation + 1: REDUCE and REDUCE_WRITE are held in the cell.
    for op in [HopOp::Reduce, HopOp::ReduceWrite] {
        for idx in 0..3u8 {
            let mem = place(g);
            let c = Chain {
                tag: CHAIN_GEN + 1,
                ..Chain::v2(idx, op)
            };
            let f = g.chain_random(&c);
            g.case(
                &format!("chain_v2_{}_held_{}", name(op), position(idx)),
                "§v2: a REDUCE or REDUCE_WRITE hop at tag == generation + 1 is held: the payload in the cell's hold, then held_seq, held_idx and held_port (the origin_port), then held_call (the trailer's call word) and its zero, then held = tag; the origin is answered HELD (SR idx = this hop), nothing else stored",
                &node,
                &mem,
                vec![f],
                &watch,
            );
        }
    }
    for op in [HopOp::Write, HopOp::Accumulate] {
        let mem = place(g);
        let c = Chain {
            tag: CHAIN_GEN + 1,
            ..Chain::v2(1, op)
        };
        let f = g.chain_random(&c);
        g.case(
            &format!("chain_v2_{}_ahead_not_ready", name(op)),
            "§v2: a WRITE or ACCUMULATE hop at tag == generation + 1 is NOT_READY (only REDUCE and REDUCE_WRITE are held)",
            &node,
            &mem,
            vec![f],
            &watch,
        );
    }
    // tag == generation - 1: STALE, as in version 1 (the origin repairs the chunk).
    for op in [HopOp::Reduce, HopOp::ReduceWrite, HopOp::Write, HopOp::Accumulate] {
        let mem = place(g);
        let c = Chain {
            tag: CHAIN_GEN - 1,
            ..Chain::v2(1, op)
        };
        let f = g.chain_random(&c);
        g.case(
            &format!("chain_v2_{}_behind_stale", name(op)),
            "§v2: a version-2 hop at tag == generation - 1 is STALE to the origin, as in version 1 (no node repairs it: its origin does), nothing stored (data or cell)",
            &node,
            &mem,
            vec![f],
            &watch,
        );
    }
    // Even when the program names this node again further on (a ring does),
    // or at its last segment.
    let twice = |op: HopOp| Chain {
        segs: vec![
            (NODE_IP, op),
            (HOP_A, HopOp::ReduceWrite),
            (NODE_IP, HopOp::Write),
            (HOP_B, HopOp::Write),
        ],
        tag: CHAIN_GEN - 1,
        ..Chain::v2(0, op)
    };
    let mem = place(g);
    let frames = vec![
        g.chain_random(&twice(HopOp::Reduce)),
        g.chain_random(&twice(HopOp::ReduceWrite)),
        g.chain_random(&Chain {
            tag: CHAIN_GEN - 1,
            ..Chain::v2(2, HopOp::Reduce)
        }),
    ];
    g.case(
        "chain_v2_behind_stale_named_again",
        "§v2: a version-2 hop at tag == generation - 1 is STALE even when the program names this node again later or the hop is the last: the packet never skips ahead",
        &node,
        &mem,
        frames,
        &watch,
    );
    // Far from the generation: as in version 1.
    for (what, tag, status) in [
        ("ahead", CHAIN_GEN + 2, "NOT_READY"),
        ("behind", CHAIN_GEN - 2, "STALE"),
    ] {
        for op in [HopOp::Reduce, HopOp::ReduceWrite, HopOp::Write] {
            let mem = place(g);
            let c = Chain {
                tag,
                ..Chain::v2(1, op)
            };
            let f = g.chain_random(&c);
            g.case(
                &format!("chain_v2_{}_far_{what}", name(op)),
                &format!(
                    "§v2: a version-2 hop whose tag is more than one generation {what} is {status}, as in version 1"
                ),
                &node,
                &mem,
                vec![f],
                &watch,
            );
        }
    }
    // The call word (compared at tag == generation only, for every hop op but NOP).
    for op in [HopOp::Reduce, HopOp::ReduceWrite, HopOp::Write, HopOp::Accumulate] {
        for idx in 0..3u8 {
            let mem = place(g);
            let c = Chain {
                call: OTHER_CALL,
                ..Chain::v2(idx, op)
            };
            let f = g.chain_random(&c);
            g.case(
                &format!("chain_v2_{}_mismatch_{}", name(op), position(idx)),
                "§v2: at tag == generation a version-2 hop whose trailer's call differs from the region's call word is MISMATCH to the origin (SR idx = this hop); nothing is stored (data or cell) and the chain stops there",
                &node,
                &mem,
                vec![f],
                &watch,
            );
        }
    }
    let mem = place(g);
    let other = g.chain_random(&Chain {
        call: OTHER_CALL,
        ..Chain::v2(1, HopOp::Accumulate)
    });
    let same = g.chain_random(&Chain::v2(1, HopOp::Accumulate));
    g.case(
        "chain_v2_accumulate_mismatch_claims_no_window",
        "§v2: a MISMATCH hop claims no slot of the at-most-once window (§7): an ACCUMULATE ADD of the same seq with the region's call word runs after it",
        &node,
        &mem,
        vec![other, same],
        &watch,
    );
    for op in [HopOp::Reduce, HopOp::ReduceWrite] {
        let mem = place(g);
        let c = Chain {
            call: OTHER_CALL,
            tag: CHAIN_GEN + 1,
            ..Chain::v2(1, op)
        };
        let f = g.chain_random(&c);
        g.case(
            &format!("chain_v2_{}_held_other_call", name(op)),
            "§v2: a REDUCE or REDUCE_WRITE hop at tag == generation + 1 is held whatever its call word (the node compares calls at tag == generation only); the cell's held_call is the trailer's call, which the host compares with its own when it raises the generation",
            &node,
            &mem,
            vec![f],
            &watch,
        );
    }
    let mem = place(g);
    let frames = [
        (HopOp::ReduceWrite, CHAIN_GEN - 1),
        (HopOp::Write, CHAIN_GEN + 1),
        (HopOp::Accumulate, CHAIN_GEN + 1),
        (HopOp::Reduce, CHAIN_GEN + 2),
    ]
    .into_iter()
    .map(|(op, tag)| {
        let c = Chain {
            call: OTHER_CALL,
            tag,
            ..Chain::v2(1, op)
        };
        g.chain_random(&c)
    })
    .collect();
    g.case(
        "chain_v2_other_call_off_generation",
        "§v2: away from tag == generation the call word is not compared: with another call a hop one behind is STALE, a WRITE or ACCUMULATE one ahead NOT_READY, a hop two ahead NOT_READY",
        &node,
        &mem,
        frames,
        &watch,
    );
    let mem = place(g);
    let frames = [(1u8, CHAIN_GEN), (2, CHAIN_GEN), (1, CHAIN_GEN + 1)]
        .into_iter()
        .map(|(idx, tag)| {
            let c = Chain {
                call: OTHER_CALL,
                tag,
                ..Chain::v2(idx, HopOp::Nop)
            };
            g.chain_random(&c)
        })
        .collect();
    g.case(
        "chain_v2_nop_ignores_the_call",
        "§v2: a NOP hop skips readiness, the call word included: with another call it runs (forwards, or answers the origin with the payload)",
        &node,
        &mem,
        frames,
        &watch,
    );
    let mem = place(g);
    let frames = [HopOp::Reduce, HopOp::ReduceWrite, HopOp::Write, HopOp::Accumulate]
        .into_iter()
        .map(|op| g.chain_random(&Chain::at(1, op)))
        .collect();
    g.case(
        "chain_v1_ignores_the_call",
        "§v2: a version-1 CHAIN has no trailer, so no call word: at tag == generation every hop op runs whatever the region's call word, as in version 1 (no cell touched)",
        &node,
        &mem,
        frames,
        &watch,
    );
    // A region raised without a call word has call 0, an ordinary word.
    let zero = NodeCfg {
        generations: vec![GenerationCfg {
            rkey: RKEY_RW,
            generation: CHAIN_GEN,
            call: 0,
        }],
        ..node.clone()
    };
    let mem = place(g);
    let runs = g.chain_random(&Chain {
        call: 0,
        ..Chain::v2(1, HopOp::ReduceWrite)
    });
    let mismatch = g.chain_random(&Chain::v2(1, HopOp::ReduceWrite));
    g.case(
        "chain_v2_call_zero_is_a_word",
        "§v2: a region raised without a call word has call 0, an ordinary word: a hop whose call is 0 runs, one whose call is another is MISMATCH",
        &zero,
        &mem,
        vec![runs, mismatch],
        &watch,
    );
    // The cell: 8-aligned and inside the region with room for the held partial.
    let mem = place(g);
    let c = Chain {
        cell: Some(CHAIN_CELL + 4),
        ..Chain::v2(1, HopOp::ReduceWrite)
    };
    let f = g.chain_random(&c);
    let mut held = c.clone();
    held.tag = CHAIN_GEN + 1;
    let f2 = g.chain_random(&held);
    g.case(
        "chain_v2_cell_misaligned",
        "§v2: a cell_addr that is not 8-aligned is MISALIGNED to the origin (held or not)",
        &node,
        &mem,
        vec![f, f2],
        &watch,
    );
    let end = RW_BASE + RW_SIZE;
    let edge = end - cell::HDR_LEN - 64;
    let mem = vec![(input, g.bytes(64)), (output, g.bytes(64))];
    let frames = [Some(edge), Some(edge + 8), Some(RW_BASE - 8), Some(RO_BASE)]
        .into_iter()
        .map(|cell| {
            let c = Chain {
                cell,
                ..Chain::v2(1, HopOp::ReduceWrite)
            };
            g.chain_random(&c)
        })
        .collect();
    g.case(
        "chain_v2_cell_out_of_bounds",
        "§v2: [cell_addr, cell_addr + 24 + len) must lie in the region: a cell that just fits is stamped, one past the end, before the base or in another region is OUT_OF_BOUNDS",
        &node,
        &mem,
        frames,
        &[(input, 64), (output, 64), (edge, cell_len)],
    );
    let mem = place(g);
    // Misaligned, and past all memory (the trailer's cell address is 32 bits).
    let frames = [Some(CHAIN_CELL + 4), Some(0xFFFF_FFF8)]
        .into_iter()
        .map(|cell| {
            let c = Chain {
                cell,
                tag: CHAIN_GEN + 1,
                ..Chain::v2(1, HopOp::Nop)
            };
            g.chain_random(&c)
        })
        .collect();
    g.case(
        "chain_v2_nop_ignores_the_cell",
        "§v2: a NOP hop ignores the cell (neither alignment nor bounds) and readiness",
        &node,
        &mem,
        frames,
        &watch,
    );
    // sr_len of version 2 is 16 + 8n + 8; version 1 has no trailer.
    let mem = place(g);
    let c = Chain {
        cell: None,
        ..Chain::v2(1, HopOp::ReduceWrite)
    };
    let f = g.chain_random(&c);
    g.case(
        "chain_v2_sr_len_without_cell",
        "§v2: a version-2 CHAIN whose sr_len is not 16 + 8n + 8 is BAD_SR to the sender",
        &node,
        &mem,
        vec![f],
        &watch,
    );
    // A version-2 CHAIN failing the header's sr_len check is BAD_SR, not
    // BAD_VERSION: not a multiple of 8, below one segment, above 136.
    let mem = place(g);
    let frames = [44u8, 20, 16, 144]
        .into_iter()
        .map(|sr_len| {
            let c = Chain {
                sr_len: Some(sr_len),
                ..Chain::v2(1, HopOp::ReduceWrite)
            };
            g.chain_random(&c)
        })
        .collect();
    g.case(
        "chain_v2_sr_len_bad",
        "§v2: a version-2 CHAIN whose sr_len fails section 5's check (not a multiple of 8, under 24, over 136) is BAD_SR to the sender, not BAD_VERSION",
        &node,
        &mem,
        frames,
        &watch,
    );
    // At most 14 segments: 15 would take sr_len to 144.
    let ring = |n: usize| {
        let mut segs: Vec<_> = (0..n)
            .map(|i| (if i % 2 == 0 { HOP_A } else { HOP_B }, HopOp::Write))
            .collect();
        segs[0].1 = HopOp::Reduce;
        segs[1] = (NODE_IP, HopOp::ReduceWrite);
        Chain {
            segs,
            ..Chain::v2(1, HopOp::ReduceWrite)
        }
    };
    let mem = place(g);
    let f = g.chain_random(&ring(15));
    g.case(
        "chain_v2_fifteen_segments",
        "§v2: a version-2 program of 15 segments (sr_len 16 + 120 + 8 = 144, over 136) is BAD_SR to the sender",
        &node,
        &mem,
        vec![f],
        &watch,
    );
    let mem = place(g);
    let f = g.chain_random(&ring(14));
    g.case(
        "chain_v2_fourteen_segments",
        "§v2: a version-2 program of 14 segments (sr_len 136, a ring of 8) runs",
        &node,
        &mem,
        vec![f],
        &watch,
    );
    let mem = place(g);
    let c = Chain {
        cell: Some(CHAIN_CELL),
        ..Chain::at(1, HopOp::ReduceWrite)
    };
    let f = g.chain_random(&c);
    g.case(
        "chain_v1_sr_len_with_cell",
        "§6: a version-1 CHAIN has no cell trailer: sr_len 16 + 8n + 8 is BAD_SR to the sender",
        &node,
        &mem,
        vec![f],
        &watch,
    );
    // Version 2 means something for CHAIN only.
    let mut write = acked(req(Opcode::Write, RKEY_RW, input, 8));
    write.version = VERSION_2;
    let write = g.frame(&write, &[0xAB; 8]);
    let mut read = req(Opcode::Read, RKEY_RW, input, 8);
    read.version = VERSION_2;
    let read = g.frame(&read, &[0; 8]);
    let mut reduce = vector_req(Opcode::Reduce, Dtype::I32, Alu::Add, input, 8);
    reduce.version = VERSION_2;
    let reduce = g.frame(&reduce, &[1; 8]);
    let v3 = Chain {
        version: 3,
        ..Chain::v2(1, HopOp::ReduceWrite)
    };
    let v3 = g.chain_random(&v3);
    g.case(
        "chain_v2_version_2_outside_chain",
        "§v2: version 2 on any opcode but CHAIN is BAD_VERSION (and version 3 on CHAIN)",
        &node,
        &mem,
        vec![write, read, reduce, v3],
        &watch,
    );
}

/// What keeps a CHAIN from being a relay or an amplifier
/// (docs/conformance.md 20): no CHAIN without peers, segment ports must be
/// P, a node is named at most twice, and NOP hops need a key.
fn relay_vectors(g: &mut Gen, node: &NodeCfg) {
    let input = RW_BASE + 0x100;
    let watch = [(input, 64), (RW_BASE + 0x800, 64)];
    let mem = vec![(input, g.bytes(64))];
    let no_peers = NodeCfg {
        peers: vec![],
        ..node.clone()
    };
    let f = g.chain_random(&Chain::at(1, HopOp::Nop));
    g.case(
        "chain_without_peers",
        "§6: with an empty peer table a CHAIN is dropped and counted, never run, forwarded or answered (docs/conformance.md 20)",
        &no_peers,
        &mem,
        vec![f],
        &watch,
    );
    let mut f = g.chain_random(&Chain::at(1, HopOp::ReduceWrite));
    // Segment 2's port: 53 instead of P.
    let at = 14 + 20 + 8 + 32 + SR_FIXED_LEN + 2 * SEGMENT_LEN + 4;
    f[at..at + 2].copy_from_slice(&53u16.to_be_bytes());
    g.case(
        "chain_next_port_not_p",
        "§6: a next segment on a port other than P names no NetDAM node: BAD_SR (docs/conformance.md 20)",
        node,
        &mem,
        vec![f],
        &watch,
    );
    let ping_pong = |times: usize| {
        let segs = (0..2 * times - 1)
            .map(|i| {
                if i % 2 == 0 {
                    (NODE_IP, HopOp::Nop)
                } else {
                    (HOP_A, HopOp::Nop)
                }
            })
            .collect();
        Chain {
            segs,
            ..Chain::at(0, HopOp::Nop)
        }
    };
    let twice = g.chain_random(&ping_pong(2));
    let thrice = g.chain_random(&ping_pong(3));
    let eight = g.chain_random(&ping_pong(8));
    g.case(
        "chain_named_at_most_twice",
        "§6: a program may name a node twice (a ring does); three times or more is BAD_SR (docs/conformance.md 20)",
        node,
        &mem,
        vec![twice, thrice, eight],
        &watch,
    );
    let mut c = Chain::at(1, HopOp::Nop);
    c.rkey = 0x9999;
    let bad_key = g.chain_random(&c);
    let mut c = Chain::at(1, HopOp::Nop);
    c.dst_addr = RW_BASE + RW_SIZE;
    let out_of_bounds = g.chain_random(&c);
    let mut c = Chain::at(1, HopOp::Nop);
    c.rkey = RKEY_RO;
    c.addr = RO_BASE;
    c.dst_addr = RO_BASE;
    let read_only = g.chain_random(&c);
    g.case(
        "chain_nop_needs_a_key",
        "§6: a NOP hop needs an rkey naming a region that holds both ranges (BAD_KEY, OUT_OF_BOUNDS), but no permission (docs/conformance.md 20)",
        node,
        &mem,
        vec![bad_key, out_of_bounds, read_only],
        &watch,
    );
}

/// MSG and WRITE_NOTIFY (section 3): handed to the AF_XDP socket of a node
/// that has one, NO_RECEIVER on a node that has none. An MSG names a region
/// with the MSG permission; its empty range must lie inside it.
fn handover_vectors(g: &mut Gen) {
    let n = default_node();
    let served = NodeCfg {
        receiver: true,
        ..default_node()
    };
    let msg = g.bytes(100);
    let data = g.bytes(64);
    let addr = RW_BASE + 0x100;
    let watch = [(addr - 8, 80)];
    let f = g.frame(&req(Opcode::Msg, RKEY_RW, RW_BASE, 100), &msg);
    g.case(
        "msg_delivered",
        "§3: MSG is handed to the AF_XDP socket without its Ethernet header",
        &served,
        &[],
        vec![f],
        &[],
    );
    let f = g.frame(&acked(req(Opcode::Msg, RKEY_RW, RW_BASE, 100)), &msg);
    g.case(
        "msg_ack_req_delivered",
        "§3: MSG with ACK_REQ is still handed over (the receiver answers)",
        &served,
        &[],
        vec![f],
        &[],
    );
    let f = g.frame(&req(Opcode::Msg, RKEY_RW, RW_BASE, 100), &msg);
    g.case(
        "msg_no_receiver",
        "§3: MSG to a node without an AF_XDP socket is NO_RECEIVER",
        &n,
        &[],
        vec![f],
        &[],
    );
    let f = g.frame(&req(Opcode::Msg, RKEY_RO, RO_BASE, 100), &msg);
    g.case(
        "msg_forbidden",
        "§3: MSG needs the MSG permission (FORBIDDEN before NO_RECEIVER)",
        &served,
        &[],
        vec![f],
        &[],
    );
    let f = g.frame(&req(Opcode::Msg, RKEY_RW, RW_BASE, 0), &[]);
    g.case(
        "msg_empty",
        "§3: len 0 is valid only for NOP, READ and WRITE (BAD_LENGTH)",
        &served,
        &[],
        vec![f],
        &[],
    );
    let f = g.frame(&req(Opcode::WriteNotify, RKEY_RW, addr, 64), &data);
    g.case(
        "write_notify_delivered",
        "§3: WRITE_NOTIFY writes, then hands over only the IPv4, UDP and NetDAM headers",
        &served,
        &[],
        vec![f],
        &watch,
    );
    let f = g.frame(&acked(req(Opcode::WriteNotify, RKEY_RW, addr, 64)), &data);
    g.case(
        "write_notify_ack_req_silent",
        "§3: WRITE_NOTIFY answers only when status is not OK, even with ACK_REQ",
        &served,
        &[],
        vec![f],
        &watch,
    );
    let f = g.frame(&req(Opcode::WriteNotify, RKEY_RW, addr, 64), &data);
    g.case(
        "write_notify_no_receiver",
        "§5: a WRITE_NOTIFY that is NO_RECEIVER writes nothing",
        &n,
        &[],
        vec![f],
        &watch,
    );
    let f = g.frame(&req(Opcode::WriteNotify, RKEY_RW, end_of_rw() - 32, 64), &data);
    g.case(
        "write_notify_out_of_bounds",
        "§3: WRITE_NOTIFY is bounds-checked like WRITE, and writes nothing",
        &served,
        &[],
        vec![f],
        &[(end_of_rw() - 40, 40)],
    );
    let f = g.frame(&req(Opcode::WriteNotify, RKEY_RO, RO_BASE, 64), &data);
    g.case(
        "write_notify_forbidden",
        "§3: WRITE_NOTIFY needs WRITE",
        &served,
        &[],
        vec![f],
        &[(RO_BASE, 64)],
    );
}

/// ATOMIC alone reads and writes words that READ and WRITE would not
/// (docs/conformance.md 23): the RO region with only the `a` bit.
fn atomic_permission_vectors(g: &mut Gen) {
    let atomic_only = NodeCfg {
        regions: default_node()
            .regions
            .into_iter()
            .map(|r| match r.rkey {
                RKEY_RO => RegionCfg {
                    perms: perm::ATOMIC,
                    ..r
                },
                _ => r,
            })
            .collect(),
        ..default_node()
    };
    let read = g.frame(&req(Opcode::Read, RKEY_RO, RO_BASE, 8), &[0u8; 8]);
    let write = g.frame(&acked(req(Opcode::Write, RKEY_RO, RO_BASE, 8)), &7u64.to_le_bytes());
    let mut h = req(Opcode::FetchAdd, RKEY_RO, RO_BASE, 8);
    h.set_seq(1);
    let fetch_add = g.frame(&h, &1u64.to_le_bytes());
    let mut h = req(Opcode::Cas, RKEY_RO, RO_BASE + 8, 16);
    h.set_seq(2);
    let cas_read = g.frame(&h, &[0u8; 16]);
    let mut h = acked(vector_req(Opcode::Accumulate, Dtype::U32, Alu::And, RO_BASE + 8, 8));
    h.set_rkey(RKEY_RO);
    let and_zero = g.frame(&h, &[0u8; 8]);
    g.case(
        "atomic_only_region_reads_and_writes_words",
        "§3: a region with ATOMIC alone refuses READ and WRITE (FORBIDDEN), but FETCH_ADD answers the old value and adds, a CAS that misses answers a word unchanged, and ACCUMULATE AND 0 clears it (docs/conformance.md 23)",
        &atomic_only,
        &[(RO_BASE, [100u64.to_le_bytes(), 0xDEAD_BEEFu64.to_le_bytes()].concat())],
        vec![read, write, fetch_add, cas_read, and_zero],
        &[(RO_BASE, 16)],
    );
}

fn end_of_rw() -> u64 {
    RW_BASE + RW_SIZE
}

fn req(op: Opcode, rkey: u32, addr: u64, len: u16) -> NetdamHdr {
    let mut h = NetdamHdr::request(op);
    h.set_rkey(rkey);
    h.set_addr(addr);
    h.set_len(len);
    h.set_seq(0x0100);
    h.set_tag(0x7A6);
    h
}

fn acked(mut h: NetdamHdr) -> NetdamHdr {
    h.flags |= flags::ACK_REQ;
    h
}

fn vector_req(op: Opcode, d: Dtype, a: Alu, addr: u64, len: u16) -> NetdamHdr {
    let mut h = req(op, RKEY_RW, addr, len);
    h.dtype = d as u8;
    h.alu = a as u8;
    h
}

/// Every vector, in a fixed order.
pub fn generate() -> Vec<Vector> {
    let mut g = Gen {
        vectors: Vec::new(),
        rng: 0x5EED_CAFE,
    };
    let n = default_node();
    let end = RW_BASE + RW_SIZE;

    // Section 3: NOP, WRITE, READ, and the header checks of section 5.
    let f = g.frame(&req(Opcode::Nop, 0, 0, 0), &[]);
    g.case(
        "nop",
        "§3: NOP answers OK, no payload, checks no key",
        &n,
        &[],
        vec![f],
        &[],
    );
    let f = g.frame(&acked(req(Opcode::Nop, 0, 0, 0)), &[]);
    g.case("nop_ack_req", "§3: the answer keeps ACK_REQ", &n, &[], vec![f], &[]);
    let f = g.frame(&req(Opcode::Nop, 0, 0, 4), &[0; 4]);
    g.case(
        "nop_with_len",
        "§3: len 0 is required for NOP (BAD_LENGTH)",
        &n,
        &[],
        vec![f],
        &[],
    );
    let mut h = req(Opcode::Nop, 0, 0, 4);
    h.version = 2;
    h.opcode = 0x7F;
    let f = g.frame(&h, &[0; 4]);
    g.case(
        "bad_version_first",
        "§5: BAD_VERSION is checked first",
        &n,
        &[],
        vec![f],
        &[],
    );
    let mut h = req(Opcode::Nop, 0, 0, 0);
    h.opcode = 0x7F;
    let f = g.frame(&h, &[]);
    g.case(
        "bad_opcode",
        "§5: an unknown opcode is BAD_OPCODE",
        &n,
        &[],
        vec![f],
        &[],
    );
    let mut h = acked(req(Opcode::Write, RKEY_RW, RW_BASE, 4));
    h.sr_len = 24;
    let f = g.frame(&h, &[0; 28]);
    g.case(
        "sr_on_write",
        "§5: sr_len on an op other than CHAIN is BAD_SR (docs/conformance.md 1)",
        &n,
        &[],
        vec![f],
        &[(RW_BASE, 8)],
    );
    for (name, rule, addr, len) in [
        (
            "write_first_byte",
            "§3: bounds, the first byte of a region",
            RW_BASE,
            1u16,
        ),
        ("write_last_byte", "§3: bounds, the last byte of a region", end - 1, 1),
        (
            "write_one_past",
            "§3: bounds, one byte past the region is OUT_OF_BOUNDS, nothing written",
            end - 1,
            2,
        ),
        (
            "write_before_base",
            "§3: bounds, one byte before the region",
            RW_BASE - 1,
            2,
        ),
        ("write_len_0_at_end", "§3: len 0 is valid for WRITE", end, 0),
        (
            "write_max_len",
            "§1: a payload up to the MTU (1440 bytes at 1500)",
            0x10000 - 700,
            1440,
        ),
    ] {
        let data = g.bytes(len as usize);
        let f = g.frame(&acked(req(Opcode::Write, RKEY_RW, addr, len)), &data);
        g.case(
            name,
            rule,
            &n,
            &[],
            vec![f],
            &[(addr.saturating_sub(4).max(RW_BASE - 8), len as usize + 8)],
        );
    }
    let data = g.bytes(64);
    let f = g.frame(&req(Opcode::Write, RKEY_RW, RW_BASE + 64, 64), &data);
    g.case(
        "write_unacked",
        "§3: WRITE answers only with ACK_REQ or an error",
        &n,
        &[],
        vec![f],
        &[(RW_BASE + 60, 72)],
    );
    let mem = g.bytes(1440);
    for (name, rule, addr, len, pad) in [
        (
            "read_across_chunks",
            "§3: READ returns the memory; ranges may cross internal chunks",
            0x10000 - 700,
            1440u16,
            1440usize,
        ),
        ("read_len_0", "§3: len 0 is valid for READ", 0x10000 - 700, 0, 0),
        (
            "read_without_padding",
            "§3: a READ without its padding is BAD_LENGTH",
            0x10000 - 700,
            64,
            63,
        ),
        (
            "read_too_large",
            "§5: an answer larger than the MTU is TOO_LARGE",
            0x10000 - 700,
            1441,
            1441,
        ),
    ] {
        let f = g.frame(&req(Opcode::Read, RKEY_RW, addr, len), &vec![0; pad]);
        g.case(name, rule, &n, &[(0x10000 - 700, mem.clone())], vec![f], &[]);
    }
    let f = g.frame(&acked(req(Opcode::Write, 0xBAD, RW_BASE, 4)), &[1; 4]);
    g.case(
        "bad_key",
        "§8: a rkey that names no region is BAD_KEY",
        &n,
        &[],
        vec![f],
        &[(RW_BASE, 8)],
    );
    let f = g.frame(&acked(req(Opcode::Write, RKEY_RO, RO_BASE, 4)), &[1; 4]);
    g.case(
        "forbidden",
        "§3: WRITE needs WRITE permission (FORBIDDEN)",
        &n,
        &[],
        vec![f],
        &[(RO_BASE, 8)],
    );
    let f = g.frame(&req(Opcode::Read, RKEY_RO, RW_BASE, 4), &[0; 4]);
    g.case(
        "range_in_other_region",
        "§8: the range must lie in the region the rkey names",
        &n,
        &[],
        vec![f],
        &[],
    );

    // Section 4: every dtype x alu, for REDUCE and ACCUMULATE, across a chunk boundary.
    let at = 0x10000 - 32;
    for &d in Dtype::ALL {
        for &a in Alu::ALL {
            let v = g.bytes(64);
            let m = g.bytes(64);
            let bad = d == Dtype::F32 && a.is_bitwise();
            let f = g.frame(&vector_req(Opcode::Reduce, d, a, at, 64), &v);
            let what = if bad {
                "a bitwise alu on f32 is BAD_DTYPE"
            } else {
                "v[i] = alu(v[i], mem[i]), memory unchanged"
            };
            g.case(
                &format!("reduce_{}_{}", d.name(), a.name().to_lowercase()),
                &format!("§4: REDUCE {} {}: {what}", d.name(), a.name()),
                &n,
                &[(at, m.clone())],
                vec![f],
                &[(at, 64)],
            );
            let f = g.frame(&acked(vector_req(Opcode::Accumulate, d, a, at, 64)), &v);
            let what = if bad {
                "a bitwise alu on f32 is BAD_DTYPE"
            } else {
                "mem[i] = alu(mem[i], v[i])"
            };
            g.case(
                &format!("accumulate_{}_{}", d.name(), a.name().to_lowercase()),
                &format!("§4: ACCUMULATE {} {}: {what}", d.name(), a.name()),
                &n,
                &[(at, m)],
                vec![f],
                &[(at - 8, 80)],
            );
        }
    }
    let f = g.frame(
        &vector_req(Opcode::Reduce, Dtype::I64, Alu::Add, RW_BASE + 4, 16),
        &[0; 16],
    );
    g.case(
        "vector_misaligned_addr",
        "§3: vector ops need addr aligned to the element width (MISALIGNED)",
        &n,
        &[],
        vec![f],
        &[],
    );
    let f = g.frame(&vector_req(Opcode::Reduce, Dtype::I32, Alu::Add, RW_BASE, 6), &[0; 6]);
    g.case(
        "vector_misaligned_len",
        "§3: vector ops need len aligned to the element width",
        &n,
        &[],
        vec![f],
        &[],
    );
    let mut h = vector_req(Opcode::Reduce, Dtype::I32, Alu::Add, RW_BASE, 8);
    h.dtype = 9;
    let f = g.frame(&h, &[0; 8]);
    g.case(
        "unknown_dtype",
        "§4: an unknown dtype is BAD_DTYPE",
        &n,
        &[],
        vec![f],
        &[],
    );
    // f32 specials: NaN canonical, signed zeros, subnormals.
    let specials: Vec<u8> = [0x7FC0_0001u32, 0x8000_0000, 0x0000_0001, 0x7F80_0000]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let mem: Vec<u8> = [0x3F80_0000u32, 0x8000_0000, 0x807F_FFFF, 0xFF80_0000]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let f = g.frame(
        &vector_req(Opcode::Reduce, Dtype::F32, Alu::Add, RW_BASE, 16),
        &specials,
    );
    g.case(
        "f32_add_specials",
        "§4: f32 ADD: canonical NaN, signed zeros, subnormals, inf - inf",
        &n,
        &[(RW_BASE, mem.clone())],
        vec![f],
        &[],
    );
    let f = g.frame(
        &vector_req(Opcode::Reduce, Dtype::F32, Alu::Min, RW_BASE, 16),
        &specials,
    );
    g.case(
        "f32_min_specials",
        "§4: f32 MIN: a NaN yields the other operand, -0 < +0",
        &n,
        &[(RW_BASE, mem)],
        vec![f],
        &[],
    );

    // Atomics (section 3) and the at-most-once window (section 7).
    let w = RW_BASE + 0x800;
    let word = |v: u64| v.to_le_bytes().to_vec();
    let fa = |g: &Gen, seq: u32, v: u64| {
        let mut h = req(Opcode::FetchAdd, RKEY_RW, w, 8);
        h.set_seq(seq);
        g.frame(&h, &v.to_le_bytes())
    };
    let f = fa(&g, 1, 5);
    g.case(
        "fetch_add",
        "§3: FETCH_ADD adds and answers the old value",
        &n,
        &[(w, word(100))],
        vec![f],
        &[(w, 8)],
    );
    let mut h = req(Opcode::Swap, RKEY_RW, w, 8);
    h.set_seq(1);
    let f = g.frame(&h, &word(7));
    g.case(
        "swap",
        "§3: SWAP stores and answers the old value",
        &n,
        &[(w, word(100))],
        vec![f],
        &[(w, 8)],
    );
    for (name, expected) in [("cas_hit", 100u64), ("cas_miss", 99)] {
        let mut h = req(Opcode::Cas, RKEY_RW, w, 16);
        h.set_seq(1);
        let mut p = word(expected);
        p.extend(word(9));
        let f = g.frame(&h, &p);
        g.case(
            name,
            "§3: CAS stores new only if memory holds expected; answers the old value",
            &n,
            &[(w, word(100))],
            vec![f],
            &[(w, 8)],
        );
    }
    let f = g.frame(&req(Opcode::FetchAdd, RKEY_RW, w + 4, 8), &word(1));
    g.case(
        "atomic_misaligned",
        "§3: atomics need addr aligned to 8",
        &n,
        &[],
        vec![f],
        &[],
    );
    let f = g.frame(&req(Opcode::Cas, RKEY_RW, w, 8), &word(1));
    g.case("cas_bad_length", "§3: CAS needs len 16", &n, &[], vec![f], &[]);
    let f = g.frame(&req(Opcode::FetchAdd, RKEY_RO, RO_BASE, 8), &word(1));
    g.case(
        "atomic_forbidden",
        "§3: atomics need ATOMIC permission",
        &n,
        &[],
        vec![f],
        &[],
    );
    let f = fa(&g, 7, 1);
    g.case(
        "repeat_answered_from_window",
        "§7: a repeated atomic is answered OK with the stored old value, not executed again",
        &n,
        &[(w, word(40))],
        vec![f.clone(), f],
        &[(w, 8)],
    );
    let (f1, f2) = (fa(&g, 10, 1), fa(&g, 5, 1));
    g.case(
        "reorder_inside_window",
        "§7: an earlier seq in another slot still executes (reordering)",
        &n,
        &[],
        vec![f1, f2],
        &[(w, 8)],
    );
    let (f1, f2, f3) = (fa(&g, 1000, 1), fa(&g, 2024, 1), fa(&g, 1000, 1));
    g.case(
        "stale_after_slot_reuse",
        "§7: a seq earlier than its slot's is STALE and not executed",
        &n,
        &[],
        vec![f1, f2, f3],
        &[(w, 8)],
    );
    let mut h = acked(vector_req(Opcode::Accumulate, Dtype::U32, Alu::Add, RW_BASE, 8));
    h.set_seq(3);
    let f = g.frame(&h, &[1, 0, 0, 0, 2, 0, 0, 0]);
    g.case(
        "accumulate_add_duplicate",
        "§7: a repeated ACCUMULATE ADD is DUPLICATE and not applied again",
        &n,
        &[],
        vec![f.clone(), f],
        &[(RW_BASE, 8)],
    );
    let full = NodeCfg {
        window_sources: 1,
        window_per_source: 1,
        ..default_node()
    };
    let first = fa(&g, 1, 1);
    let mut other = g.client();
    other.port += 10_000;
    let mut h = req(Opcode::FetchAdd, RKEY_RW, w, 8);
    h.set_seq(1);
    let second = netdam_frame(&other, &g.node(), &h, &word(1));
    g.case(
        "window_table_full",
        "§7: a new source finding the window table full is STALE, not executed (docs/conformance.md 12)",
        &full,
        &[],
        vec![first, second],
        &[(w, 8)],
    );
    // One address spraying source ports gets --window-per-source windows;
    // its existing windows and other addresses are still served.
    let capped = NodeCfg {
        window_sources: 8,
        window_per_source: 3,
        ..default_node()
    };
    let from = |g: &Gen, ip: Ipv4Addr, port_offset: u16, seq: u32| {
        let mut h = req(Opcode::FetchAdd, RKEY_RW, w, 8);
        h.set_seq(seq);
        let e = Endpoint {
            mac: mac_of(ip),
            ip,
            port: g.client().port + port_offset,
        };
        netdam_frame(&e, &g.node(), &h, &word(1))
    };
    let frames = vec![
        from(&g, CLIENT_IP, 0, 1),
        from(&g, CLIENT_IP, 1, 1),
        from(&g, CLIENT_IP, 2, 1),
        from(&g, CLIENT_IP, 3, 1),
        from(&g, CLIENT_IP, 0, 1),
        from(&g, CLIENT_IP, 0, 2),
        from(&g, HOP_A, 3, 1),
    ];
    g.case(
        "window_per_source_full",
        "§7: a new source whose IPv4 address holds --window-per-source windows is STALE, not executed; \
         that address's windows and other addresses are served (docs/conformance.md 12)",
        &capped,
        &[],
        frames,
        &[(w, 8)],
    );

    // Section 1: the carrier.
    let nop = req(Opcode::Nop, 0, 0, 0);
    let c = g.client();
    let node = g.node();
    let mut arp = vec![0xFF; 6];
    arp.extend_from_slice(&c.mac);
    arp.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&c.mac);
    arp.extend_from_slice(&c.ip.octets());
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&NODE_IP.octets());
    g.case("arp_passes", "§1: ARP is passed untouched", &n, &[], vec![arp], &[]);
    for (name, proto) in [("icmp_passes", 1u8), ("tcp_to_port_p_passes", 6)] {
        let mut f = udp_frame(&c, &node, &Ipv4Opts::default(), &nop.to_bytes());
        f[23] = proto;
        g.case(
            name,
            "§1: IPv4 other than UDP is passed untouched",
            &n,
            &[],
            vec![f],
            &[],
        );
    }
    let mut v6 = NODE_MAC.to_vec();
    v6.extend_from_slice(&c.mac);
    v6.extend_from_slice(&[0x86, 0xDD, 0x60, 0, 0, 0, 0, 40, 17, 64]);
    v6.extend_from_slice(&[0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    v6.extend_from_slice(&[0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    v6.extend_from_slice(&[0x9C, 0x40, (DEFAULT_PORT >> 8) as u8, DEFAULT_PORT as u8, 0, 40, 0, 0]);
    v6.extend_from_slice(&nop.to_bytes());
    g.case("ipv6_passes", "§1: IPv6 is passed untouched", &n, &[], vec![v6], &[]);
    let plain = g.frame(&nop, &[]);
    let mut vlan = plain[..12].to_vec();
    vlan.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
    vlan.extend_from_slice(&plain[12..]);
    g.case(
        "vlan_tagged_passes",
        "§1: VLAN-tagged frames it does not parse are passed untouched",
        &n,
        &[],
        vec![vlan],
        &[],
    );
    let f = udp_frame(
        &c,
        &Endpoint {
            port: DEFAULT_PORT + 1,
            ..node
        },
        &Ipv4Opts::default(),
        &nop.to_bytes(),
    );
    g.case(
        "other_udp_port_passes",
        "§1: UDP to another port is passed untouched",
        &n,
        &[],
        vec![f],
        &[],
    );
    let f = udp_frame(
        &c,
        &Endpoint { mac: [0xFF; 6], ..node },
        &Ipv4Opts::default(),
        &nop.to_bytes(),
    );
    g.case(
        "broadcast_mac_passes",
        "§1: broadcast frames are passed untouched",
        &n,
        &[],
        vec![f],
        &[],
    );
    let f = udp_frame(
        &c,
        &node,
        &Ipv4Opts {
            frag: 0x2000,
            ..Default::default()
        },
        &nop.to_bytes(),
    );
    g.case(
        "first_fragment_dropped",
        "§1: a first IP fragment to port P is dropped",
        &n,
        &[],
        vec![f],
        &[],
    );
    let f = udp_frame(
        &c,
        &node,
        &Ipv4Opts {
            frag: 185,
            ..Default::default()
        },
        &nop.to_bytes(),
    );
    g.case(
        "later_fragment_passes",
        "§1: later fragments are passed untouched",
        &n,
        &[],
        vec![f],
        &[],
    );
    let mut h = nop;
    h.magic = 0xDB;
    let f = g.frame(&h, &[]);
    g.case("bad_magic_dropped", "§5: bad magic is dropped", &n, &[], vec![f], &[]);
    let f = udp_frame(&c, &node, &Ipv4Opts::default(), &nop.to_bytes()[..20]);
    g.case(
        "truncated_header_dropped",
        "§5: a truncated NetDAM header is dropped",
        &n,
        &[],
        vec![f],
        &[],
    );
    let f = g.frame(&req(Opcode::Write, RKEY_RW, RW_BASE, 100), &[0; 99]);
    g.case(
        "len_past_datagram_dropped",
        "§5: len larger than the datagram is dropped",
        &n,
        &[],
        vec![f],
        &[(RW_BASE, 100)],
    );
    let f = netdam_frame(
        &Endpoint {
            ip: Ipv4Addr::LOCALHOST,
            ..c
        },
        &node,
        &nop,
        &[],
    );
    g.case(
        "loopback_source_dropped",
        "§1: a source in 127.0.0.0/8 is never answered",
        &n,
        &[],
        vec![f],
        &[],
    );
    let mut h = req(Opcode::Write, RKEY_RW, RW_BASE, 4);
    h.flags = flags::RESP;
    let f = g.frame(&h, &[1; 4]);
    g.case(
        "response_goes_to_host",
        "§3: a RESP packet is never executed; it is passed to the host",
        &n,
        &[],
        vec![f],
        &[(RW_BASE, 4)],
    );
    let opts = Ipv4Opts {
        options: vec![1, 1, 1, 0],
        tos: 0x28,
        ..Default::default()
    };
    let mut body = req(Opcode::Read, RKEY_RW, RW_BASE, 16).to_bytes().to_vec();
    body.extend_from_slice(&[0; 16]);
    let f = udp_frame(&c, &node, &opts, &body);
    let mem = g.bytes(16);
    g.case(
        "ip_options_dropped_in_answer",
        "§3: the answer has IHL 5, TOS copied, ID 0, DF, TTL 64",
        &n,
        &[(RW_BASE, mem)],
        vec![f],
        &[],
    );
    let mut f = g.frame(&nop, &[]);
    f.extend_from_slice(&[0xEE; 18]);
    g.case(
        "ethernet_padding_ignored",
        "§1: the datagram ends where the UDP length says",
        &n,
        &[],
        vec![f],
        &[],
    );
    let peers = NodeCfg {
        peers: vec![Ipv4Addr::new(198, 18, 0, 2)],
        ..default_node()
    };
    let f = netdam_frame(
        &Endpoint {
            ip: Ipv4Addr::new(198, 18, 0, 99),
            ..c
        },
        &node,
        &acked(req(Opcode::Write, RKEY_RW, RW_BASE, 4)),
        &[1; 4],
    );
    let f2 = g.frame(&nop, &[]);
    g.case(
        "non_peer_dropped",
        "§1: with a peer table, a non-peer is dropped and a peer is answered",
        &peers,
        &[],
        vec![f, f2],
        &[(RW_BASE, 4)],
    );
    // A peer counts only from its own MAC, for answers too; nobody sends the
    // node's own address from the wire (docs/conformance.md 19).
    let bound = NodeCfg {
        peers: vec![CLIENT_IP],
        ..default_node()
    };
    let spoofer = Endpoint {
        mac: [0x02, 0xBA, 0xD0, 0, 0, 1],
        ..g.client()
    };
    let spoofed = netdam_frame(&spoofer, &node, &nop, &[]);
    let honest = g.frame(&nop, &[]);
    let mut answer = nop;
    answer.flags |= flags::RESP;
    let spoofed_answer = netdam_frame(&spoofer, &node, &answer, &[]);
    let honest_answer = g.frame(&answer, &[]);
    g.case(
        "peer_bound_to_its_mac",
        "§1: a peer's address from another MAC is dropped, requests and answers alike; from the peer's MAC it is served (docs/conformance.md 19)",
        &bound,
        &[],
        vec![spoofed, honest, spoofed_answer, honest_answer],
        &[],
    );
    let unbound = NodeCfg {
        neighbours: vec![],
        ..bound.clone()
    };
    let f = g.frame(&nop, &[]);
    g.case(
        "peer_without_a_mac",
        "§1: a peer whose MAC is not bound yet is not served (docs/conformance.md 19)",
        &unbound,
        &[],
        vec![f],
        &[],
    );
    let me = Endpoint {
        mac: mac_of(CLIENT_IP),
        ip: NODE_IP,
        port: 4000,
    };
    let f = netdam_frame(&me, &node, &acked(req(Opcode::Write, RKEY_RW, RW_BASE, 4)), &[7; 4]);
    g.case(
        "own_address_source",
        "§1: a datagram claiming the node's own address as its source is dropped (docs/conformance.md 19)",
        &default_node(),
        &[],
        vec![f],
        &[(RW_BASE, 4)],
    );
    let csum = NodeCfg {
        verify_csum: true,
        ..default_node()
    };
    let good = g.frame(&nop, &[]);
    let mut bad = good.clone();
    bad[40] ^= 0x55;
    g.case(
        "verify_csum",
        "§1: with --verify-csum a wrong UDP checksum is dropped (docs/conformance.md 5)",
        &csum,
        &[],
        vec![bad, good],
        &[],
    );
    // The IPv4 header checksum covers the options; the IP ID is outside
    // the UDP checksum, so only the header checksum is wrong.
    let mut bad_ip = g.frame(&nop, &[]);
    bad_ip[18] ^= 0x01;
    let opts = Ipv4Opts {
        options: vec![1, 1, 1, 0],
        ..Default::default()
    };
    let with_options = udp_frame(&g.client(), &node, &opts, &nop.to_bytes());
    let mut bad_option = with_options.clone();
    bad_option[35] ^= 0x80;
    g.case(
        "verify_csum_ipv4_header",
        "§1: with --verify-csum a wrong IPv4 header checksum, over the options too, is dropped (docs/conformance.md 5)",
        &csum,
        &[],
        vec![bad_ip.clone(), bad_option, with_options],
        &[],
    );
    let mut zero = g.frame(&nop, &[]);
    zero[40] = 0;
    zero[41] = 0;
    g.case(
        "verify_csum_zero_udp_checksum",
        "§1: with --verify-csum a UDP checksum of zero (none) is dropped too (docs/conformance.md 5)",
        &csum,
        &[],
        vec![zero.clone()],
        &[],
    );
    let csum_peers = NodeCfg {
        peers: vec![CLIENT_IP],
        ..csum.clone()
    };
    g.case(
        "verify_csum_zero_udp_checksum_from_a_peer",
        "§1: with --verify-csum a peer (from its MAC) may send UDP checksum 0, as nodes do (docs/conformance.md 5)",
        &csum_peers,
        &[],
        vec![zero.clone()],
        &[],
    );
    g.case(
        "checksums_not_verified_by_default",
        "§1: without --verify-csum a zero UDP checksum and a wrong IPv4 header checksum are served (docs/conformance.md 5)",
        &default_node(),
        &[],
        vec![zero, bad_ip],
        &[],
    );
    chain_vectors(&mut g);
    handover_vectors(&mut g);
    atomic_permission_vectors(&mut g);
    chain_v2_vectors(&mut g);
    g.vectors
}

/// The vectors as JSON lines.
pub fn to_jsonl(v: &[Vector]) -> String {
    v.iter()
        .map(|x| serde_json::to_string(x).expect("serialize") + "\n")
        .collect()
}

pub fn from_jsonl(s: &str) -> Vec<Vector> {
    s.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a vector"))
        .collect()
}

const README_HEAD: &str = "# Conformance vectors

`netdam.jsonl` holds the vectors, one JSON object a line, generated from the
reference model (`netdam-common/src/model.rs`) by `cargo xtask vectors`;
this page is generated with them. Do not edit either by hand: a test fails
when the checked-in set differs from what the model generates.

Fields of a vector:

| field | meaning |
|---|---|
| name | unique name |
| rule | the rule of PROTOCOL.md it checks, \"§section: rule\" |
| node | the node: mac (hex), ip, port (P), mtu, mem_size, verify_csum, window_sources, window_per_source (windows one source IPv4 address may hold), regions (rkey, base, size, perms: 1 READ 2 WRITE 4 ATOMIC 8 MSG), peers |
| memory | segments (addr, hex) placed in zeroed NetDAM memory before the first step |
| steps | frames in order on the same node (window state carries over): input (hex Ethernet frame), verdict (tx, pass or drop), output (the answer for tx, the untouched input for pass, empty for drop) |
| memory_after | segments (addr, hex) memory must hold after the last step |

Every vector's client uses its own UDP source port, so an implementation may
run all vectors of one node configuration on one node in any order, resetting
memory between them (windows count against one client address there: a
configuration whose window_per_source is below its window_sources has one
vector only). No vector depends on a choice PROTOCOL.md leaves free
(which window an LRU evicts, timing, concurrency).

A node with `receiver` has an AF_XDP socket bound to its receive queue 0:
MSG and WRITE_NOTIFY are handed to it (verdict redirect, output the frame as
the socket receives it).

Not covered yet (and why): NOT_READY under compare-and-swap contention (not
deterministic); an MSG larger than a UMEM frame (needs a jumbo frame;
tested on a jumbo testbed, `tests/afxdp.rs`); header split (section 9: it takes
a slot of a ring in NetDAM memory whose position is state outside the
vector format; tested on the testbed, `tests/afxdp.rs`).

## Rules and the vectors that check them

";

/// tests/vectors/README.md: the format and the table of rules and the vectors that check them.
pub fn readme(v: &[Vector]) -> String {
    let mut by_rule: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for x in v {
        by_rule.entry(x.rule.as_str()).or_default().push(x.name.as_str());
    }
    let mut out = String::from(README_HEAD);
    out.push_str("| rule of PROTOCOL.md | vectors |\n|---|---|\n");
    for (rule, names) in by_rule {
        out.push_str(&format!("| {} | {} |\n", rule.replace('|', "\\|"), names.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checked-in vectors are what the model generates now.
    #[test]
    fn checked_in_vectors_match_the_model() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/vectors/netdam.jsonl");
        let on_disk =
            std::fs::read_to_string(path).expect("tests/vectors/netdam.jsonl (make it with `cargo xtask vectors`)");
        let v = generate();
        assert!(
            on_disk == to_jsonl(&v),
            "tests/vectors/netdam.jsonl differs from what the model generates: run `cargo xtask vectors` and review the diff"
        );
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/vectors/README.md"))
            .unwrap_or_default();
        assert!(
            readme == super::readme(&v),
            "tests/vectors/README.md is stale: run `cargo xtask vectors`"
        );
    }

    #[test]
    fn names_are_unique_and_rules_are_named() {
        let v = generate();
        let mut names: Vec<&str> = v.iter().map(|x| x.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), v.len());
        assert!(v.iter().all(|x| x.rule.starts_with('§')));
        assert!(from_jsonl(&to_jsonl(&v)) == v);
    }
}
