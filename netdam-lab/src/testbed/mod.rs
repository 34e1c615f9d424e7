//! The testbed: N test hosts `{prefix}0..{prefix}{N-1}`, each a network
//! namespace with one veth `eth0`, all on a bridge inside a switch namespace
//! `{prefix}sw`. Nothing is added to the host's own namespace.
//!
//! Addresses: host i has 198.18.0.(i+1)/24 (RFC 2544's benchmarking range)
//! and MAC 02:da:00:00:00:(i+1). The switch side of each veth runs the
//! fabric's XDP program (`switch`), pinned under the testbed's bpffs directory.
//!
//! Links have one queue each way unless `TestbedConfig::queues` asks for
//! more (`numtxqueues`/`numrxqueues` on both ends). Which receive queue a
//! frame lands on (veth has no RSS hash of its own): an skb goes to the
//! queue numbered like the transmit queue the sender picked (XPS or the
//! flow hash); an xdp_frame redirected into a veth (the XDP fabric) goes to
//! the queue of the CPU that redirects it, `smp_processor_id() %
//! real_num_rx_queues` (veth_xdp_xmit). On the XDP fabric the switch runs
//! on the sender's CPU, so senders on several CPUs reach several queues.

use std::{
    fs::File,
    net::Ipv4Addr,
    os::unix::process::CommandExt,
    path::PathBuf,
    process::{Command, Stdio},
};

use nix::sched::{setns, CloneFlags};

use crate::interrupt::OnInterrupt;
use thiserror::Error;

mod chaos;
mod members;
mod switch;
pub use chaos::{Chaos, ChaosStats};
pub use members::MemberThread;
pub use switch::{Fabric, SwitchStats};

/// Most hosts on one testbed (addresses .1 to .250).
pub const MAX_NODES: usize = 250;
/// Most queues of a testbed link (more than this machine's CPUs can use).
pub const MAX_QUEUES: u32 = 64;

/// The shape of a testbed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TestbedConfig {
    pub nodes: usize,
    pub mtu: u32,
    pub fabric: Fabric,
    /// Receive and transmit queues of every veth, both ends.
    pub queues: u32,
}

impl Default for TestbedConfig {
    fn default() -> Self {
        TestbedConfig {
            nodes: 3,
            mtu: 1500,
            fabric: Fabric::default(),
            queues: 1,
        }
    }
}
const NETNS_DIR: &str = "/run/netns";
const PIN_ROOT: &str = "/sys/fs/bpf/netdam-testbed";

#[derive(Debug, Error)]
pub enum TestbedError {
    #[error("--nodes {0}: a testbed has 1 to {MAX_NODES} hosts")]
    Nodes(usize),
    #[error("--mtu {0}: use 576 to 9000")]
    Mtu(u32),
    #[error("--queues {0}: use 1 to {MAX_QUEUES} (receive and transmit queues of each veth)")]
    Queues(u32),
    #[error("testbed prefix {0:?}: use 1 to 8 letters, digits or '-' not ending in a digit (namespace and interface names derive from it)")]
    Prefix(String),
    #[error("`{cmd}` failed: {stderr}")]
    Command { cmd: String, stderr: String },
    #[error("`ip` (iproute2) is needed to build the testbed: apt-get install iproute2 ({0})")]
    NoIp(std::io::Error),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    #[error("switch program on {port}: {detail}")]
    Switch { port: String, detail: String },
    #[error("chaos element: {0}")]
    Chaos(String),
}

/// One test host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// Its network namespace.
    pub netns: String,
    pub ip: Ipv4Addr,
    pub mac: [u8; 6],
    /// The pin directory its NetDAM node uses.
    pub pin_dir: PathBuf,
}

/// A testbed that exists. Dropping a `Testbed` made by `up` tears it down
/// (also on panic); `leak` keeps it.
#[derive(Debug)]
pub struct Testbed {
    pub prefix: String,
    pub hosts: Vec<Host>,
    pub mtu: u32,
    pub fabric: Fabric,
    /// Receive and transmit queues of every link.
    pub queues: u32,
    /// Set while this value owns the testbed (made by `up`, not leaked):
    /// its teardown, also run if the process is interrupted.
    owner: Option<OnInterrupt>,
}

pub const IFACE: &str = "eth0";

pub fn host_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, (i + 1) as u8)
}

pub fn host_mac(i: usize) -> [u8; 6] {
    [0x02, 0xDA, 0, 0, 0, (i + 1) as u8]
}

fn switch_ns(prefix: &str) -> String {
    format!("{prefix}sw")
}

fn pin_root(prefix: &str) -> PathBuf {
    PathBuf::from(PIN_ROOT).join(prefix)
}

fn check_prefix(prefix: &str) -> Result<(), TestbedError> {
    let ok = !prefix.is_empty()
        && prefix.len() <= 8
        && prefix.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !prefix.ends_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(TestbedError::Prefix(prefix.to_string()))
    }
}

fn ip(args: &[&str]) -> Result<(), TestbedError> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(TestbedError::NoIp)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(TestbedError::Command {
            cmd: format!("ip {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Runs `f` on a thread that has entered network namespace `netns`.
pub fn in_netns<T: Send + 'static>(netns: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<T, TestbedError> {
    let path = PathBuf::from(NETNS_DIR).join(netns);
    let file = File::open(&path).map_err(|e| TestbedError::Io(format!("open {}", path.display()), e))?;
    std::thread::spawn(move || {
        setns(&file, CloneFlags::CLONE_NEWNET).map_err(|e| TestbedError::Io("setns".into(), e.into()))?;
        Ok(f())
    })
    .join()
    .expect("netns thread panicked")
}

impl Testbed {
    /// Builds a testbed of `nodes` hosts on the default (XDP) fabric, after
    /// removing any leftover of the same prefix.
    pub fn up(prefix: &str, nodes: usize, mtu: u32) -> Result<Testbed, TestbedError> {
        Testbed::up_on(prefix, nodes, mtu, Fabric::default())
    }

    /// Builds a testbed of `nodes` hosts on `fabric`, after removing any leftover of the same prefix.
    pub fn up_on(prefix: &str, nodes: usize, mtu: u32, fabric: Fabric) -> Result<Testbed, TestbedError> {
        Testbed::up_with(
            prefix,
            TestbedConfig {
                nodes,
                mtu,
                fabric,
                queues: 1,
            },
        )
    }

    /// Builds a testbed shaped by `cfg`, after removing any leftover of the same prefix.
    pub fn up_with(prefix: &str, cfg: TestbedConfig) -> Result<Testbed, TestbedError> {
        let TestbedConfig {
            nodes,
            mtu,
            fabric,
            queues,
        } = cfg;
        check_prefix(prefix)?;
        if nodes == 0 || nodes > MAX_NODES {
            return Err(TestbedError::Nodes(nodes));
        }
        if !(576..=9000).contains(&mtu) {
            return Err(TestbedError::Mtu(mtu));
        }
        if queues == 0 || queues > MAX_QUEUES {
            return Err(TestbedError::Queues(queues));
        }
        Testbed::down(prefix)?;
        let mut tb = Testbed {
            prefix: prefix.to_string(),
            hosts: Vec::new(),
            mtu,
            fabric,
            queues,
            owner: Some(OnInterrupt::register({
                let prefix = prefix.to_string();
                move || {
                    if let Err(e) = Testbed::down(&prefix) {
                        eprintln!("tearing down testbed {prefix}: {e}");
                    }
                }
            })),
        };
        // On any error below, dropping `tb` removes what was made.
        let sw = switch_ns(prefix);
        ip(&["netns", "add", &sw])?;
        ip(&["-n", &sw, "link", "set", "lo", "up"])?;
        ip(&[
            "-n",
            &sw,
            "link",
            "add",
            "br0",
            "mtu",
            &mtu.to_string(),
            "type",
            "bridge",
        ])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        let mtu_s = mtu.to_string();
        let q = queues.to_string();
        let queue_args = ["numtxqueues", q.as_str(), "numrxqueues", q.as_str()];
        for i in 0..nodes {
            let ns = format!("{prefix}{i}");
            ip(&["netns", "add", &ns])?;
            tb.hosts.push(Host {
                netns: ns.clone(),
                ip: host_ip(i),
                mac: host_mac(i),
                pin_dir: pin_root(prefix).join(&ns),
            });
            let port = format!("p{i}");
            let link: Vec<&str> = ["-n", &sw, "link", "add", &port, "mtu", &mtu_s]
                .into_iter()
                .chain(queue_args)
                .chain(["type", "veth", "peer", "name", IFACE, "netns", &ns])
                .chain(queue_args)
                .collect();
            ip(&link)?;
            let mac = host_mac(i)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":");
            ip(&["-n", &ns, "link", "set", IFACE, "address", &mac, "mtu", &mtu_s])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", host_ip(i)), "dev", IFACE])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&["-n", &ns, "link", "set", IFACE, "up"])?;
            ip(&["-n", &sw, "link", "set", &port, "master", "br0", "up"])?;
        }
        tb.attach_fabric()?;
        Ok(tb)
    }

    /// A testbed that `up` made earlier (and left), without its hosts: what
    /// is needed to read its pins. Dropping it removes nothing.
    pub fn existing(prefix: &str) -> Result<Testbed, TestbedError> {
        check_prefix(prefix)?;
        Ok(Testbed {
            prefix: prefix.to_string(),
            hosts: Vec::new(),
            mtu: 0,
            fabric: Fabric::default(),
            queues: 0,
            owner: None,
        })
    }

    /// Removes every namespace and pin of testbed `prefix`; succeeds if there is none.
    pub fn down(prefix: &str) -> Result<(), TestbedError> {
        check_prefix(prefix)?;
        let mut first_err = None;
        if let Ok(entries) = std::fs::read_dir(NETNS_DIR) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                let Some(rest) = name.strip_prefix(prefix) else {
                    continue;
                };
                let host = !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit());
                if host {
                    forget_node_records(&pin_root(prefix).join(&name));
                }
                if rest == "sw" || host {
                    stop_processes_in(&name);
                    if let Err(err) = ip(&["netns", "del", &name]) {
                        first_err.get_or_insert(err);
                    }
                }
            }
        }
        let pins = pin_root(prefix);
        if pins.exists() {
            if let Err(e) = std::fs::remove_dir_all(&pins) {
                first_err.get_or_insert(TestbedError::Io(format!("remove {}", pins.display()), e));
            }
        }
        // The shared parent goes once no testbed uses it.
        let _ = std::fs::remove_dir(PIN_ROOT);
        first_err.map_or(Ok(()), Err)
    }

    /// A command that runs inside host `i`'s network namespace (only the
    /// network namespace: bpffs and the file system stay the host's).
    pub fn command(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Result<Command, TestbedError> {
        let path = PathBuf::from(NETNS_DIR).join(&self.hosts[i].netns);
        let file = File::open(&path).map_err(|e| TestbedError::Io(format!("open {}", path.display()), e))?;
        let mut cmd = Command::new(program);
        // SAFETY: setns is async-signal-safe; `file` is moved into the closure and outlives the fork.
        unsafe {
            cmd.pre_exec(move || setns(&file, CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from));
        }
        Ok(cmd)
    }

    /// Runs `f` inside host `i`'s network namespace.
    pub fn in_host<T: Send + 'static>(
        &self,
        i: usize,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, TestbedError> {
        in_netns(&self.hosts[i].netns, f)
    }

    /// Keeps the testbed when this value is dropped (for `testbed up`).
    pub fn leak(mut self) {
        self.owner = None;
    }
}

/// Ends what still runs in namespace `name`, which deleting the namespace
/// would leave running (a daemon mpirun started there, the programs of an
/// interrupted run): SIGTERM, then SIGKILL to what is left after 2 s. Its
/// processes are those whose network namespace is that file's.
fn stop_processes_in(name: &str) {
    use nix::sys::signal::{kill, Signal};
    use std::os::unix::fs::MetadataExt;
    let Ok(ns) = std::fs::metadata(PathBuf::from(NETNS_DIR).join(name)) else {
        return;
    };
    let me = std::process::id();
    // A process that has exited (a zombie) has no namespace link: not listed.
    let members = || -> Vec<i32> {
        let Ok(proc) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        proc.flatten()
            .filter_map(|e| {
                let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                let net = std::fs::metadata(e.path().join("ns/net")).ok()?;
                (pid != me && net.dev() == ns.dev() && net.ino() == ns.ino()).then_some(pid as i32)
            })
            .collect()
    };
    for (signal, grace) in [
        (Signal::SIGTERM, std::time::Duration::from_secs(2)),
        (Signal::SIGKILL, std::time::Duration::from_secs(1)),
    ] {
        let pids = members();
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            let _ = kill(nix::unistd::Pid::from_raw(pid), signal);
        }
        let deadline = std::time::Instant::now() + grace;
        while !members().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// Removes what `netdam serve` recorded under /run/netdam for a host's pin
/// directory (random region keys a restart would keep, sysctls an unpin
/// would restore): its namespace goes, so nothing will use them, and a
/// later testbed of the same prefix must start afresh.
fn forget_node_records(pin_dir: &std::path::Path) {
    for record in [
        netdam_user::controller::keys::keys_path(pin_dir),
        netdam_user::controller::sysctls::record_path(pin_dir),
    ] {
        let _ = std::fs::remove_file(record);
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if self.owner.take().is_some() {
            if let Err(e) = Testbed::down(&self.prefix) {
                log::warn!("tearing down testbed {}: {e}", self.prefix);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_addresses() {
        assert!(check_prefix("nd").is_ok());
        assert!(check_prefix("t12-a").is_ok());
        assert!(check_prefix("nd1").is_err());
        assert!(check_prefix("").is_err());
        assert!(check_prefix("a/b").is_err());
        assert!(check_prefix("waytoolong").is_err());
        assert_eq!(host_ip(0), Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(host_mac(2), [2, 0xDA, 0, 0, 0, 3]);
    }

    #[test]
    fn queue_counts_are_checked_before_anything_is_made() {
        for queues in [0, MAX_QUEUES + 1] {
            let cfg = TestbedConfig {
                queues,
                ..TestbedConfig::default()
            };
            let e = Testbed::up_with("nd", cfg).unwrap_err();
            assert!(matches!(e, TestbedError::Queues(q) if q == queues), "{e}");
            assert!(e.to_string().contains("use 1 to 64"), "{e}");
        }
    }
}

/// A `netdam serve` running in a test host; stopped with SIGTERM on drop.
#[derive(Debug)]
pub struct Served {
    pub host: usize,
    child: std::process::Child,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Testbed {
    /// Starts `netdam serve --iface eth0 --pin-dir <host's> ARGS` in host `i`
    /// and waits until it serves.
    pub fn serve(&self, i: usize, netdam: &std::path::Path, args: &[String]) -> Result<Served, TestbedError> {
        self.serve_with_env(i, netdam, args, &[])
    }

    /// `serve` with extra environment variables (e.g. RUST_LOG).
    pub fn serve_with_env(
        &self,
        i: usize,
        netdam: &std::path::Path,
        args: &[String],
        envs: &[(&str, &str)],
    ) -> Result<Served, TestbedError> {
        use std::io::{BufRead, BufReader};
        let mut cmd = self.command(i, netdam)?;
        cmd.envs(envs.iter().copied());
        cmd.arg("serve")
            .arg("--iface")
            .arg(IFACE)
            .arg("--pin-dir")
            .arg(&self.hosts[i].pin_dir)
            .args(args);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| TestbedError::Io(format!("start {}", netdam.display()), e))?;
        let stderr = child.stderr.take().expect("piped stderr");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        let name = self.hosts[i].netns.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("serving NetDAM on") {
                    let _ = tx.send(());
                }
                log::debug!("[{name}] {line}");
                sink.lock().expect("log lock").push_str(&(line + "\n"));
            }
        });
        let mut served = Served { host: i, child, log };
        match rx.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(()) => Ok(served),
            Err(_) => {
                let _ = served.child.kill();
                let _ = served.child.wait();
                Err(TestbedError::Command {
                    cmd: format!("netdam serve in {}", self.hosts[i].netns),
                    stderr: served.log.lock().expect("log lock").clone(),
                })
            }
        }
    }
}

impl Served {
    /// What the process printed so far.
    pub fn log(&self) -> String {
        self.log.lock().expect("log lock").clone()
    }

    /// The process id of the serve.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. SIGHUP: a reload with --config) and returns at once.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), signal);
    }

    /// SIGTERM, then wait; returns whether it exited cleanly.
    pub fn stop(mut self) -> bool {
        self.terminate()
    }

    /// Sends `signal` (SIGKILL: as a crash would end it), then waits;
    /// returns whether it exited cleanly.
    pub fn stop_with(mut self, signal: nix::sys::signal::Signal) -> bool {
        self.signal_and_wait(signal)
    }

    fn terminate(&mut self) -> bool {
        self.signal_and_wait(nix::sys::signal::Signal::SIGTERM)
    }

    fn signal_and_wait(&mut self, signal: nix::sys::signal::Signal) -> bool {
        if let Ok(Some(status)) = self.child.try_wait() {
            return status.success();
        }
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, signal);
        for _ in 0..100 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.terminate();
    }
}
