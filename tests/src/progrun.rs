//! The XDP program under BPF_PROG_TEST_RUN: frames in, verdict and frame out.

use std::net::Ipv4Addr;

use aya::programs::{TestRun, TestRunOptions};
use netdam_common::{frame::Endpoint, region::perm, wire::DEFAULT_PORT, Region};
use netdam_user::{controller::NodeSpec, Node};

pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_TX: u32 = 3;
pub const XDP_REDIRECT: u32 = 4;

/// The node the frames are addressed to.
pub const NODE: Endpoint = Endpoint {
    mac: [0x02, 0xDA, 0, 0, 0, 1],
    ip: Ipv4Addr::new(198, 18, 0, 1),
    port: DEFAULT_PORT,
};
/// The client that sends them.
pub const CLIENT: Endpoint = Endpoint {
    mac: [0x02, 0xDA, 0, 0, 0, 2],
    ip: Ipv4Addr::new(198, 18, 0, 2),
    port: 40000,
};

pub const RKEY_RW: u32 = 0x1234;
pub const RKEY_RO: u32 = 0x5678;
/// The read-write region: [0x1000, +256 KiB), so that it spans a 64 KiB chunk boundary.
pub const RW: Region = Region {
    base: 0x1000,
    size: 256 << 10,
    perms: perm::ALL,
    _reserved: 0,
};
pub const RO: Region = Region {
    base: 0x80000,
    size: 4096,
    perms: perm::READ,
    _reserved: 0,
};

/// A standard spec for program tests: 1 MiB of memory, two regions, no
/// peers, no BAD_KEY rate limit.
pub fn spec() -> NodeSpec {
    NodeSpec {
        port: DEFAULT_PORT,
        mem_size: 1 << 20,
        mac: NODE.mac,
        ipv4: NODE.ip,
        mtu: 1500,
        regions: vec![(RKEY_RW, RW), (RKEY_RO, RO)],
        peers: vec![],
        verify_csum: false,
        window_sources: 64,
        window_per_source: 64,
        // Unlimited, as the model and the C engine behave.
        bad_key_limit: 0,
        // Not attached: BPF_PROG_TEST_RUN frames come on queue 0.
        queue_slots: 1,
    }
}

/// What the program did with one frame.
#[derive(Debug)]
pub struct Outcome {
    pub action: u32,
    pub frame: Vec<u8>,
}

/// Loads the program unpinned (nothing is left behind) with `spec`.
pub fn load(spec: &NodeSpec) -> Node {
    crate::require_root();
    Node::load(spec, None).expect("load the NetDAM XDP program")
}

/// Runs one frame through the program.
pub fn run(node: &Node, frame: &[u8]) -> Outcome {
    run_with_ctx(node, frame, None)
}

/// Runs one frame through the program with an `xdp_md` context (which
/// names the ingress interface), if given.
pub fn run_with_ctx(node: &Node, frame: &[u8], ctx: Option<&[u8]>) -> Outcome {
    let mut out = vec![0u8; frame.len() + 256];
    let opts = TestRunOptions {
        data_in: Some(frame),
        data_out: Some(&mut out),
        ctx_in: ctx,
        ..Default::default()
    };
    let r = node.program().test_run(opts).expect("BPF_PROG_TEST_RUN");
    out.truncate(r.data_size_out as usize);
    Outcome {
        action: r.return_value,
        frame: out,
    }
}
