//! A ring of testbed hosts that serve NetDAM, each with a member thread
//! that lives in its namespace (the collective's socket is bound there) and
//! runs the all-reduces the test hands it through the library.

use std::{
    net::Ipv4Addr,
    sync::mpsc::{channel, Receiver, Sender},
    thread::JoinHandle,
    time::Duration,
};

use netdam_user::{
    collective::{Allreduce, Collective, CollectiveConfig, Group, Report},
    controller::LocalNode,
    testbed::{Served, Testbed},
};

use crate::{netdam_bin, require_root, unique_prefix};

/// Region of every member: all of its memory, READ, WRITE and ATOMIC.
pub const RKEY: u32 = 0x1234;

/// What a member thread is asked to do.
enum Job {
    /// Place the input, run one all-reduce, read the output.
    Run(Allreduce, Vec<u8>),
}

type Answer = Result<(Report, Vec<u8>), String>;

struct Member {
    jobs: Option<Sender<Job>>,
    answers: Receiver<Answer>,
    thread: Option<JoinHandle<()>>,
}

/// N hosts serving NetDAM with `mem` of memory, peers of each other.
pub struct Ring {
    // Dropped in this order: member threads, then the nodes, then the testbed.
    members: Vec<Member>,
    pub served: Vec<Served>,
    pub tb: Testbed,
}

impl Ring {
    pub fn new(n: usize, mem: &str, cfg: CollectiveConfig) -> Ring {
        require_root();
        let tb = Testbed::up(&unique_prefix(), n, 1500).expect("testbed up");
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
        let members = (0..n).map(|i| member(&tb, i, group.clone(), cfg.clone())).collect();
        Ring { members, served, tb }
    }

    pub fn ips(&self) -> Vec<Ipv4Addr> {
        self.tb.hosts.iter().map(|h| h.ip).collect()
    }

    /// Runs `op` on every member with `inputs[rank]`; every member's
    /// report and output, or its error.
    pub fn allreduce(&self, op: &Allreduce, inputs: &[Vec<u8>]) -> Vec<Answer> {
        for (m, input) in self.members.iter().zip(inputs) {
            m.jobs
                .as_ref()
                .expect("member thread")
                .send(Job::Run(*op, input.clone()))
                .expect("member thread alive");
        }
        self.members
            .iter()
            .map(|m| {
                m.answers
                    .recv_timeout(Duration::from_secs(300))
                    .unwrap_or_else(|e| Err(format!("no answer from the member thread: {e}")))
            })
            .collect()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn member(tb: &Testbed, i: usize, group: Group, cfg: CollectiveConfig) -> Member {
    let netns = std::fs::File::open(format!("/run/netns/{}", tb.hosts[i].netns)).expect("netns");
    let pin_dir = tb.hosts[i].pin_dir.clone();
    let (jobs, job_rx) = channel::<Job>();
    let (answer_tx, answers) = channel::<Answer>();
    let (ready_tx, ready) = channel::<Result<(), String>>();
    let thread = std::thread::spawn(move || {
        let setup = nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("setns: {e}"))
            .and_then(|_| LocalNode::open(&pin_dir).map_err(|e| e.to_string()))
            .and_then(|node| Collective::new(node, group, cfg).map_err(|e| e.to_string()));
        let mut coll = match setup {
            Ok(c) => {
                let _ = ready_tx.send(Ok(()));
                c
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
                return;
            }
        };
        for Job::Run(op, input) in job_rx {
            let mut run = || -> Result<(Report, Vec<u8>), String> {
                coll.node()
                    .memory()
                    .write(op.input_addr, &input)
                    .map_err(|e| e.to_string())?;
                let report = coll.allreduce(&op).map_err(|e| e.to_string())?;
                let mut out = vec![0u8; input.len()];
                coll.node()
                    .memory()
                    .read(op.output_addr, &mut out)
                    .map_err(|e| e.to_string())?;
                Ok((report, out))
            };
            if answer_tx.send(run()).is_err() {
                break;
            }
        }
    });
    ready
        .recv()
        .expect("member thread started")
        .unwrap_or_else(|e| panic!("member {i}: {e}"));
    Member {
        jobs: Some(jobs),
        answers,
        thread: Some(thread),
    }
}
