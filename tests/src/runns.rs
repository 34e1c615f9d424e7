//! A network namespace for BPF_PROG_TEST_RUN: the node's interface `nd0`
//! with its MAC and address, as on a real node (test runs arrive on it, an
//! AF_XDP socket binds to its queue 0). CHAIN next hops come from the peer
//! table's MACs (`Node::bind_peer_macs`), not from the kernel.

use std::{fs::File, marker::PhantomData, net::Ipv4Addr, process::Command};

use netdam_user::Node;

use crate::{
    ip,
    progrun::{run_with_ctx, Outcome},
};

/// Removed on drop (also on panic).
pub struct RunNetns {
    name: String,
    file: File,
    /// The node's interface inside the namespace.
    pub ifindex: u32,
}

fn mac_text(m: &[u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

impl RunNetns {
    /// Interface `nd0` with `mac` and `ip`/24.
    pub fn new(prefix: &str, mac: [u8; 6], addr: Ipv4Addr) -> RunNetns {
        crate::require_root();
        let name = format!("{prefix}run");
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        ip(&["netns", "add", &name]);
        let file = File::open(format!("/run/netns/{name}")).expect("the new netns");
        let mut ns = RunNetns { name, file, ifindex: 0 };
        let n = ns.name.clone();
        ip(&[
            "-n",
            &n,
            "link",
            "add",
            "nd0",
            "address",
            &mac_text(&mac),
            "type",
            "veth",
            "peer",
            "name",
            "nd1",
        ]);
        ip(&["-n", &n, "link", "set", "nd0", "up"]);
        ip(&["-n", &n, "link", "set", "nd1", "up"]);
        ip(&["-n", &n, "addr", "add", &format!("{addr}/24"), "dev", "nd0"]);
        // SAFETY: a NUL-terminated name.
        ns.ifindex = ns.enter(|| unsafe { libc::if_nametoindex(c"nd0".as_ptr()) });
        assert!(ns.ifindex != 0, "nd0 has no ifindex");
        ns
    }

    /// Runs `f` inside the namespace (e.g. to bind an AF_XDP socket to `nd0`).
    pub fn enter<T>(&self, f: impl FnOnce() -> T) -> T {
        let _inside = self.inside();
        f()
    }

    /// The calling thread inside the namespace until the guard drops (also
    /// on panic): for many frames, as entering costs more than a test run.
    pub fn inside(&self) -> Inside<'_> {
        let own = File::open("/proc/thread-self/ns/net").expect("this thread's netns");
        nix::sched::setns(&self.file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns into the test netns");
        Inside {
            ns: self,
            own,
            _thread: PhantomData,
        }
    }

    /// Runs one frame through the program as if it had arrived on `nd0`.
    pub fn run(&self, node: &Node, frame: &[u8]) -> Outcome {
        self.inside().run(node, frame)
    }
}

/// The calling thread inside a `RunNetns`; back in its own namespace on drop.
pub struct Inside<'a> {
    ns: &'a RunNetns,
    own: File,
    /// A namespace is the thread's: the guard stays on it.
    _thread: PhantomData<*const ()>,
}

impl Inside<'_> {
    /// Runs one frame through the program as if it had arrived on `nd0`.
    pub fn run(&self, node: &Node, frame: &[u8]) -> Outcome {
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex.
        let md: [u32; 6] = [0, frame.len() as u32, 0, self.ns.ifindex, 0, 0];
        let mut ctx = [0u8; 24];
        for (c, v) in ctx.chunks_exact_mut(4).zip(md) {
            c.copy_from_slice(&v.to_ne_bytes());
        }
        run_with_ctx(node, frame, Some(&ctx))
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        // A thread left in the test namespace must not go on, but a second
        // panic while unwinding would abort.
        if let Err(e) = nix::sched::setns(&self.own, nix::sched::CloneFlags::CLONE_NEWNET) {
            if !std::thread::panicking() {
                panic!("setns back: {e}");
            }
        }
    }
}

impl Drop for RunNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}
