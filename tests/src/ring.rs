//! A ring of testbed hosts that serve NetDAM, each with a member thread in
//! its namespace that runs the all-reduces the test hands it through the
//! library.

use std::{net::Ipv4Addr, time::Duration};

use netdam_lab::testbed::{MemberThread, Served, Testbed};
use netdam_user::{
    collective::{Allreduce, Collective, CollectiveConfig, Group, Report},
    controller::LocalNode,
};

use crate::{netdam_bin, require_root, unique_prefix};

/// Region of every member: all of its memory, READ, WRITE and ATOMIC.
pub const RKEY: u32 = 0x1234;

/// A member's report and output of one all-reduce, or its error.
pub type Answer = Result<(Report, Vec<u8>), String>;

/// N hosts serving NetDAM with `mem` of memory, peers of each other.
pub struct Ring {
    // Dropped in this order: member threads, then the nodes, then the testbed.
    members: Vec<MemberThread<LocalNode>>,
    pub served: Vec<Served>,
    pub tb: Testbed,
}

impl Ring {
    pub fn new(n: usize, mem: &str, cfg: CollectiveConfig) -> Ring {
        Ring::with_mtu(n, mem, cfg, 1500)
    }

    /// A ring on links of `mtu` (the collective's `cfg.mtu` should match).
    pub fn with_mtu(n: usize, mem: &str, cfg: CollectiveConfig, mtu: u32) -> Ring {
        require_root();
        let tb = Testbed::up(&unique_prefix(), n, mtu).expect("testbed up");
        let mut args: Vec<String> = ["--mem-size", mem, "--mode", "native", "--region"]
            .map(String::from)
            .to_vec();
        args.push(format!("{RKEY:#x}:0:{mem}:rwa"));
        for h in &tb.hosts {
            args.extend(["--peer".to_string(), h.ip.to_string()]);
        }
        let served = (0..n)
            .map(|i| tb.serve(i, &netdam_bin(), &args).expect("netdam serve"))
            .collect();
        let group = Group {
            members: tb.hosts.iter().map(|h| h.ip).collect(),
            port: netdam_common::wire::DEFAULT_PORT,
        };
        let members = tb
            .hosts
            .iter()
            .map(|h| {
                let (pin_dir, group, cfg) = (h.pin_dir.clone(), group.clone(), cfg.clone());
                MemberThread::spawn(&h.netns, move || {
                    let node = LocalNode::open(&pin_dir).map_err(|e| e.to_string())?;
                    Collective::new(node, group, cfg).map_err(|e| e.to_string())
                })
                .expect("member thread")
            })
            .collect();
        Ring { members, served, tb }
    }

    /// Runs `f` on member `i`'s collective, in its thread and namespace.
    pub fn on_member<T: Send + 'static>(
        &self,
        i: usize,
        f: impl FnOnce(&mut Collective<LocalNode>) -> T + Send + 'static,
    ) -> T {
        self.members[i]
            .submit(f)
            .recv_timeout(Duration::from_secs(60))
            .expect("the member thread answers")
    }

    pub fn ips(&self) -> Vec<Ipv4Addr> {
        self.tb.hosts.iter().map(|h| h.ip).collect()
    }

    /// Runs `op` on every member with `inputs[rank]` placed through its
    /// node's mmap; every member's report and output, or its error.
    pub fn allreduce(&self, op: &Allreduce, inputs: &[Vec<u8>]) -> Vec<Answer> {
        self.allreduce_each(&vec![*op; inputs.len()], inputs)
    }

    /// Runs `calls` back to back on every member, each member moving on to
    /// the next call as soon as its own returns, after waiting `delay(rank,
    /// call)` before placing its input; per member, every call's report and
    /// output (or its error, after which that member stops).
    pub fn run(&self, calls: &[Call], delay: impl Fn(usize, usize) -> Duration) -> Vec<Vec<Answer>> {
        let per_member = (0..self.members.len())
            .map(|rank| {
                calls
                    .iter()
                    .enumerate()
                    .map(|(c, call)| (call.op, call.inputs[rank].clone(), delay(rank, c)))
                    .collect()
            })
            .collect();
        self.run_per_member(per_member)
    }

    /// One all-reduce in which member `rank` passes `ops[rank]` (the
    /// members may disagree) with `inputs[rank]`; every member's answer.
    pub fn allreduce_each(&self, ops: &[Allreduce], inputs: &[Vec<u8>]) -> Vec<Answer> {
        let per_member = ops
            .iter()
            .zip(inputs)
            .map(|(op, input)| vec![(*op, input.clone(), Duration::ZERO)])
            .collect();
        self.run_per_member(per_member)
            .into_iter()
            .map(|mut answers| answers.remove(0))
            .collect()
    }

    /// Runs each member's own list of (op, input, delay) at once.
    fn run_per_member(&self, per_member: Vec<Vec<(Allreduce, Vec<u8>, Duration)>>) -> Vec<Vec<Answer>> {
        let pending: Vec<_> = self
            .members
            .iter()
            .zip(per_member)
            .map(|(m, mine)| {
                m.submit(move |coll| -> Vec<Answer> {
                    let mut answers = Vec::new();
                    for (op, input, wait) in mine {
                        std::thread::sleep(wait);
                        let answer = (|| {
                            coll.node()
                                .memory()
                                .write(op.input_addr, &input)
                                .map_err(|e| e.to_string())?;
                            let report = coll.allreduce(&op).map_err(|e| e.to_string())?;
                            let out = coll
                                .node()
                                .memory()
                                .read(op.output_addr, input.len())
                                .map_err(|e| e.to_string())?;
                            Ok((report, out))
                        })();
                        let failed = answer.is_err();
                        answers.push(answer);
                        if failed {
                            break;
                        }
                    }
                    answers
                })
            })
            .collect();
        pending
            .into_iter()
            .map(|rx| {
                rx.recv_timeout(Duration::from_secs(300))
                    .unwrap_or_else(|e| vec![Err(format!("no answer from the member thread: {e}"))])
            })
            .collect()
    }
}

/// One all-reduce of a `Ring::run` sequence: its op and every member's input.
#[derive(Clone, Debug)]
pub struct Call {
    pub op: Allreduce,
    pub inputs: Vec<Vec<u8>>,
}
