//! Tier 2: every conformance vector of tests/vectors/ through the real XDP
//! program (BPF_PROG_TEST_RUN): verdict, output frame and memory must match.

use std::collections::HashMap;

use netdam_common::{
    chain::Readiness,
    vectors::{from_jsonl, unhex, NodeCfg},
};
use netdam_tests::{progrun::*, runns::RunNetns, unique_prefix};
use netdam_user::{afxdp::XskSocket, Node, NodeSpec};

fn spec_of(c: &NodeCfg) -> NodeSpec {
    NodeSpec {
        port: c.port,
        mem_size: c.mem_size,
        mac: c.mac_bytes(),
        ipv4: c.ip,
        mtu: c.mtu,
        regions: c.regions(),
        peers: c.peers.clone(),
        verify_csum: c.verify_csum,
        window_sources: c.window_sources,
        window_per_source: c.window_per_source,
        // The model and the vectors have no BAD_KEY rate limit.
        bad_key_limit: 0,
        // Run through BPF_PROG_TEST_RUN: frames come on queue 0.
        queue_slots: 1,
    }
}

#[test]
fn every_vector_matches_the_xdp_program() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/vectors/netdam.jsonl"))
        .expect("tests/vectors/netdam.jsonl");
    let vectors = from_jsonl(&text);
    assert!(vectors.len() > 100, "the vector set is unexpectedly small");
    // One node per configuration, its peers bound to the configuration's
    // MACs; vectors use distinct client ports, so their windows never meet.
    let mut nodes: HashMap<String, (Node, RunNetns, Option<XskSocket>)> = HashMap::new();
    for v in &vectors {
        let key = serde_json::to_string(&v.node).unwrap();
        let (node, ns, _) = nodes.entry(key).or_insert_with(|| {
            let mut node = load(&spec_of(&v.node));
            node.bind_peer_macs(&v.node.neighbours()).unwrap();
            for g in &v.node.generations {
                node.set_readiness(g.rkey, Readiness::new(g.generation, g.call))
                    .unwrap();
            }
            let ns = RunNetns::new(&unique_prefix(), v.node.mac_bytes(), v.node.ip);
            // A receiver: a real AF_XDP socket on queue 0 of nd0, the queue test runs arrive on.
            let xsk = v.node.receiver.then(|| {
                let s = ns
                    .enter(|| XskSocket::bind(ns.ifindex, 0, 64))
                    .expect("bind an AF_XDP socket to nd0");
                node.set_receiver(0, s.fd()).expect("enter the socket in NETDAM_XSKS");
                s
            });
            (node, ns, xsk)
        });
        node.memory().write(0, &vec![0u8; v.node.mem_size as usize]).unwrap();
        for seg in &v.memory {
            node.memory().write(seg.addr, &unhex(&seg.hex)).unwrap();
        }
        for (i, step) in v.steps.iter().enumerate() {
            let o = ns.run(node, &unhex(&step.input));
            let verdict = match o.action {
                XDP_TX => "tx",
                XDP_PASS => "pass",
                XDP_DROP => "drop",
                XDP_REDIRECT => "redirect",
                other => panic!("{}: step {i}: XDP action {other}", v.name),
            };
            assert_eq!(
                verdict,
                step.verdict,
                "{} ({}): step {i} verdict; the node's counters: {:?}",
                v.name,
                v.rule,
                netdam_user::stats::Stats::from_counters(&node.counters().unwrap())
            );
            if verdict != "drop" {
                assert_eq!(
                    o.frame,
                    unhex(&step.output),
                    "{} ({}): step {i} output frame",
                    v.name,
                    v.rule
                );
            }
        }
        for seg in &v.memory_after {
            let want = unhex(&seg.hex);
            let got = node.memory().read(seg.addr, want.len()).unwrap();
            assert_eq!(got, want, "{} ({}): memory at {:#x}", v.name, v.rule, seg.addr);
        }
    }
    println!(
        "{} vectors matched on {} node configurations",
        vectors.len(),
        nodes.len()
    );
}
