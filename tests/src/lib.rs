//! Shared harness of the privileged tests: the real XDP program loaded into
//! the real kernel, driven through BPF_PROG_TEST_RUN, and the namespace
//! testbed. Every test here needs root; `cargo xtask test` runs them.

pub mod cengine;
pub mod hostile;
pub mod progrun;
pub mod ring;
pub mod runns;

/// Fails the test with a clear message when not root.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!(
            "this test loads XDP programs and makes network namespaces: it needs root (run `sudo -E cargo xtask test`)"
        );
    }
    // Ctrl-C or SIGTERM in the middle of a test removes its testbeds.
    netdam_lab::interrupt::clean_up_on_signals("test").expect("watching for SIGINT and SIGTERM");
}

/// A fresh directory `netdam-test-NAME-PID` in the temporary directory,
/// removed on drop (also on panic, and on Ctrl-C through `require_root`'s
/// handler).
pub fn temp_dir(name: &str) -> netdam_lab::interrupt::TempPath {
    let dir = netdam_lab::interrupt::TempPath::new(
        std::env::temp_dir().join(format!("netdam-test-{name}-{}", std::process::id())),
    );
    let _ = std::fs::remove_dir_all(dir.path());
    std::fs::create_dir_all(dir.path()).expect("a temporary directory");
    dir
}

/// A testbed prefix no other test (or test binary) uses at the same time.
pub fn unique_prefix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let letter = (b'a' + (n % 26) as u8) as char;
    format!("t{}{}", std::process::id() % 100_000, letter)
}

/// The netdam binary under test: $NETDAM_BIN (set by `cargo xtask test`),
/// else the workspace's release build.
pub fn netdam_bin() -> std::path::PathBuf {
    let p = std::env::var_os("NETDAM_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/netdam"));
    assert!(
        p.exists(),
        "{} is missing: build it with `cargo xtask build` (or run `cargo xtask test`)",
        p.display()
    );
    p
}

/// The netdam-lab binary (testbed and bench commands): $NETDAM_LAB_BIN, else
/// the one beside the netdam binary under test.
pub fn netdam_lab_bin() -> std::path::PathBuf {
    let p = std::env::var_os("NETDAM_LAB_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| netdam_bin().with_file_name("netdam-lab"));
    assert!(
        p.exists(),
        "{} is missing: build it with `cargo xtask build` (or run `cargo xtask test`)",
        p.display()
    );
    p
}

/// libnetdam_mpi.so, the PMPI library under test: $NETDAM_MPI_LIB, else
/// the one `cargo xtask build` puts beside the netdam binary under test.
pub fn netdam_mpi_lib() -> std::path::PathBuf {
    let p = std::env::var_os("NETDAM_MPI_LIB")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| netdam_bin().with_file_name("libnetdam_mpi.so"));
    assert!(
        p.exists(),
        "{} is missing: build it with `cargo xtask build` (or run `cargo xtask test`)",
        p.display()
    );
    p
}

/// The tests' Python (numpy, pytest, maturin, mpi4py): $NETDAM_PYTHON (set
/// by `cargo xtask test`), else the venv `cargo xtask setup` makes in target/venv.
pub fn venv_python() -> std::path::PathBuf {
    let p = std::env::var_os("NETDAM_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python"));
    assert!(
        p.exists(),
        "{} is missing: make it with `cargo xtask setup` (or set NETDAM_PYTHON to a Python with numpy and mpi4py)",
        p.display()
    );
    p
}

/// Runs `ip ARGS` (iproute2), failing with what it said.
pub fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .expect("run ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `netdam ARGS` in testbed host `i`.
pub fn netdam(tb: &netdam_lab::testbed::Testbed, i: usize, args: &[&str]) -> std::process::Output {
    tb.command(i, netdam_bin())
        .expect("a command in the host's namespace")
        .args(args)
        .output()
        .expect("run netdam")
}

/// The stdout of a command that must have succeeded; its output otherwise.
pub fn ok(o: &std::process::Output) -> String {
    assert!(
        o.status.success(),
        "netdam failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A seeded xorshift generator: tests and fuzzing reproduce from the seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A pin directory of the test's own, removed on drop (also on panic).
pub struct PinDir(pub std::path::PathBuf);

impl PinDir {
    /// /sys/fs/bpf/netdam-test-PID-NAME.
    pub fn new(name: &str) -> PinDir {
        PinDir(std::path::PathBuf::from(format!(
            "/sys/fs/bpf/netdam-test-{}-{name}",
            std::process::id()
        )))
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        let _ = netdam_user::controller::pins::unpin(&self.0);
    }
}

/// Whether host `from` gets an answer to `netdam ping` from the node
/// served in host `node` (a NOP, two retries of 200 ms).
pub fn pinged(tb: &netdam_lab::testbed::Testbed, from: usize, node: usize) -> bool {
    tb.command(from, netdam_bin())
        .unwrap()
        .args(["ping", "--node", &tb.hosts[node].ip.to_string(), "--count", "1"])
        .args(["--timeout-ms", "200", "--retries", "2"])
        .output()
        .expect("netdam ping")
        .status
        .success()
}
