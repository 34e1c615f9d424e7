//! Members of a collective as threads inside test hosts' namespaces: each
//! owns its `Collective` (whose socket must be bound in its namespace) and
//! runs whatever closure it is handed. Tests and benchmarks drive a whole
//! group from one process this way.

use std::{
    fs::File,
    sync::mpsc::{channel, Receiver, Sender},
    thread::JoinHandle,
};

use nix::sched::{setns, CloneFlags};

use super::{TestbedError, NETNS_DIR};
use netdam_user::collective::{Collective, MemberNode};

type Job<N> = Box<dyn FnOnce(&mut Collective<N>) + Send>;

/// One member's thread. Dropping it ends the thread after its current job.
pub struct MemberThread<N: MemberNode> {
    jobs: Option<Sender<Job<N>>>,
    thread: Option<JoinHandle<()>>,
}

impl<N: MemberNode + 'static> MemberThread<N> {
    /// A thread in namespace `netns` whose collective `make` builds there.
    pub fn spawn<F>(netns: &str, make: F) -> Result<MemberThread<N>, TestbedError>
    where
        F: FnOnce() -> Result<Collective<N>, String> + Send + 'static,
    {
        let path = std::path::Path::new(NETNS_DIR).join(netns);
        let file = File::open(&path).map_err(|e| TestbedError::Io(format!("open {}", path.display()), e))?;
        let (jobs, job_rx) = channel::<Job<N>>();
        let (ready_tx, ready) = channel::<Result<(), String>>();
        let thread = std::thread::spawn(move || {
            let made = setns(&file, CloneFlags::CLONE_NEWNET)
                .map_err(|e| format!("setns: {e}"))
                .and_then(|_| make());
            let mut coll = match made {
                Ok(c) => c,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(()));
            for job in job_rx {
                job(&mut coll);
            }
        });
        let started = ready.recv().unwrap_or_else(|_| Err("the member thread died".into()));
        started.map_err(|e| TestbedError::Command {
            cmd: format!("collective member in {netns}"),
            stderr: e,
        })?;
        Ok(MemberThread {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// Runs `f` on the member's collective; its result comes on the receiver.
    pub fn submit<R, F>(&self, f: F) -> Receiver<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut Collective<N>) -> R + Send + 'static,
    {
        let (tx, rx) = channel();
        let job: Job<N> = Box::new(move |c| {
            let _ = tx.send(f(c));
        });
        if let Some(jobs) = &self.jobs {
            // A dead thread drops the job, and with it the sender: the receiver reports it.
            let _ = jobs.send(job);
        }
        rx
    }
}

impl<N: MemberNode> Drop for MemberThread<N> {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
