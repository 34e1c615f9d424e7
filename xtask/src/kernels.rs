//! `cargo xtask test --kernels`: the kernel matrix (docs/kernels.md). Each
//! tested kernel (Debian's 6.1 and 6.12 cloud kernels, newest of each series)
//! boots in three qemu guests joined by a bridge in the network namespace
//! `ndvm`; each guest serves NetDAM in native XDP on virtio_net and runs
//! tests/vm/init.sh: the conformance vectors (guest 0), a WRITE/READ round
//! trip to the next guest and a 3-member all-reduce. Nothing is installed
//! on the host but qemu and busybox-static: the kernels are unpacked under
//! the cache, and nothing touches the host's network namespace.

use std::{
    collections::BTreeMap,
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{bail, Context as _, Result};

/// Downloaded packages and unpacked kernels, kept between runs (CI caches it).
const CACHE: &str = "/var/cache/netdam-vm";
/// The project's own namespace: the bridge and the guests' taps live there.
const NETNS: &str = "ndvm";
const BRIDGE: &str = "ndvmbr";
/// Guests boot, run the vectors and the steps in well under this with KVM.
const TIMEOUT_KVM: Duration = Duration::from_secs(360);
/// Without KVM, qemu emulates every instruction.
const TIMEOUT_TCG: Duration = Duration::from_secs(1800);
/// The packages' listings are refreshed at most this often.
const APT_UPDATE_EVERY: Duration = Duration::from_secs(24 * 3600);
/// What the guests load, with their dependencies, unless built in: the NIC
/// (virtio_pci and virtio_net) and veth for the vectors' namespace.
const MODULES: [&str; 3] = ["virtio_pci", "virtio_net", "veth"];

/// A series of kernels: the newest Debian package of it is tested.
struct Series {
    name: &'static str,
    /// `apt-cache search --names-only` pattern of its image packages.
    pattern: &'static str,
    /// Used when the package lists cannot be searched (no Debian bookworm sources).
    pinned: &'static str,
}

const SERIES: [Series; 2] = [
    Series {
        name: "6.1",
        pattern: r"^linux-image-6\.1\.0-[0-9]+-cloud-amd64$",
        pinned: "linux-image-6.1.0-57-cloud-amd64",
    },
    Series {
        name: "6.12",
        pattern: r"^linux-image-6\.12\.[0-9]+\+deb12-cloud-amd64$",
        pinned: "linux-image-6.12.118+deb12-cloud-amd64",
    },
];

/// One guest on the link; the queue counts give both XDP_TX cases of
/// virtio_net with 2 vCPUs: dedicated queues (queue pairs >= 2 x CPUs) and shared, locked ones.
struct Guest {
    name: &'static str,
    ip: &'static str,
    mac: &'static str,
    queue_pairs: u32,
}

const GUESTS: [Guest; 3] = [
    Guest {
        name: "g0",
        ip: "198.18.7.1",
        mac: "52:54:00:da:07:01",
        queue_pairs: 4,
    },
    Guest {
        name: "g1",
        ip: "198.18.7.2",
        mac: "52:54:00:da:07:02",
        queue_pairs: 2,
    },
    Guest {
        name: "g2",
        ip: "198.18.7.3",
        mac: "52:54:00:da:07:03",
        queue_pairs: 1,
    },
];

/// The steps of init.sh, in the table's order, with their column names.
const STEPS: [(&str, &str); 6] = [
    ("kernel", "boot"),
    ("serve", "serve native"),
    ("vectors", "vectors"),
    ("peers", "peers"),
    ("write-read", "write/read"),
    ("allreduce", "allreduce"),
];

/// Whether `cargo xtask test` (without --kernels) runs the matrix here: where
/// /dev/kvm opens (with KVM, or under TCG where nested KVM runs no guest); the
/// reason when not.
pub fn kvm_usable() -> Result<(), String> {
    match fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err("there is no /dev/kvm".into()),
        Err(e) => Err(format!("/dev/kvm cannot be opened ({e})")),
    }
}

/// Seconds a kernel gets to print its banner under KVM before KVM is taken as not usable.
const KVM_PROBE: Duration = Duration::from_secs(30);

/// Whether qemu runs a guest with KVM here: /dev/kvm opens, and `kernel`
/// boots far enough to print its banner (nested KVM can open and then hang
/// or refuse the CPU model); the reason when not.
fn probe_kvm(kernel: &Kernel, work: &Path) -> Result<(), String> {
    kvm_usable()?;
    let log = work.join("kvm-probe.log");
    let _ = fs::remove_file(&log);
    let stderr = fs::File::create(log.with_extension("qemu")).map_err(|e| e.to_string())?;
    let mut q = Command::new("qemu-system-x86_64")
        .args([
            "-enable-kvm",
            "-cpu",
            "host",
            "-smp",
            "1",
            "-m",
            "256",
            "-nodefaults",
            "-no-reboot",
        ])
        .args(["-display", "none", "-serial"])
        .arg(format!("file:{}", log.display()))
        .arg("-kernel")
        .arg(&kernel.vmlinuz)
        .args(["-append", "console=ttyS0 panic=-1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("qemu-system-x86_64 does not start ({e})"))?;
    let started = Instant::now();
    let verdict = loop {
        if fs::read_to_string(&log).is_ok_and(|l| l.contains("Linux version")) {
            break Ok(());
        }
        if let Ok(Some(status)) = q.try_wait() {
            let err = fs::read_to_string(log.with_extension("qemu")).unwrap_or_default();
            break Err(format!(
                "qemu -enable-kvm -cpu host exits ({status}): {}",
                err.lines().next().unwrap_or("").trim()
            ));
        }
        if started.elapsed() > KVM_PROBE || INTERRUPTED.load(Ordering::Relaxed) {
            break Err(format!(
                "a kernel under qemu -enable-kvm printed nothing in {} s (KVM opens but runs no guest: nested KVM?)",
                KVM_PROBE.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = q.kill();
    let _ = q.wait();
    verdict
}

/// Installs what the matrix needs: qemu and a static busybox for the guests.
pub fn setup() -> Result<()> {
    let missing: Vec<&str> = [
        ("qemu-system-x86", Path::new("/usr/bin/qemu-system-x86_64")),
        ("busybox-static", Path::new("/bin/busybox")),
    ]
    .into_iter()
    .filter(|(pkg, file)| !file.exists() || !dpkg_installed(pkg))
    .map(|(pkg, _)| pkg)
    .collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!("    kernel matrix: installing {}", missing.join(" "));
    apt_update(true)?;
    let mut c = Command::new("apt-get");
    c.env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y", "-qq"])
        .args(&missing);
    crate::cmd(&mut c).with_context(|| format!("the kernel matrix needs {}: apt-get install them", missing.join(" ")))
}

fn dpkg_installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

/// `apt-get update`, unless done in the last day (or `force`).
fn apt_update(force: bool) -> Result<()> {
    let stamp = Path::new(CACHE).join("apt-updated");
    let fresh = fs::metadata(&stamp)
        .and_then(|m| m.modified())
        .is_ok_and(|t| SystemTime::now().duration_since(t).unwrap_or_default() < APT_UPDATE_EVERY);
    if fresh && !force {
        return Ok(());
    }
    let ok = Command::new("apt-get")
        .args(["update", "-qq"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        println!("    warning: apt-get update failed; using the package lists as they are");
        return Ok(());
    }
    fs::create_dir_all(CACHE)?;
    fs::write(&stamp, b"")?;
    Ok(())
}

/// The newest package of the series by `apt-cache search`, else the pinned one.
fn pick(series: &Series) -> String {
    let found = Command::new("apt-cache")
        .args(["search", "--names-only", series.pattern])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut names: Vec<&str> = found.lines().filter_map(|l| l.split(" - ").next()).collect();
    names.sort_by_key(|n| version_key(n));
    names
        .last()
        .map_or_else(|| series.pinned.to_string(), |n| n.to_string())
}

/// Numbers in a package name, for ordering 6.1.0-9 before 6.1.0-57.
fn version_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect()
}

/// An unpacked kernel package: its image, its modules' directory and version.
struct Kernel {
    series: &'static str,
    package: String,
    vmlinuz: PathBuf,
    modules: PathBuf,
}

/// Downloads (once) and unpacks (once) the package; never installs it.
fn fetch(series: &'static Series) -> Result<Kernel> {
    let package = pick(series);
    let debs = Path::new(CACHE).join("debs");
    fs::create_dir_all(&debs)?;
    let deb_of = |dir: &Path| -> Option<PathBuf> {
        fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{package}_")) && n.ends_with(".deb"))
            })
    };
    let deb = match deb_of(&debs) {
        Some(d) => d,
        None => {
            println!("    downloading {package}");
            crate::cmd(
                Command::new("apt-get")
                    .current_dir(&debs)
                    // The cache belongs to root; apt's sandbox user could not write there.
                    .args(["-o", "APT::Sandbox::User=root", "download", &package]),
            )
            .with_context(|| {
                format!(
                    "cannot download {package} (the {} series): the matrix needs Debian bookworm's package sources in apt",
                    series.name
                )
            })?;
            deb_of(&debs).with_context(|| format!("apt-get download left no {package}_*.deb in {}", debs.display()))?
        }
    };
    let root = Path::new(CACHE).join("kernels").join(&package);
    let done = root.join(".unpacked");
    if !done.exists() {
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root)?;
        crate::cmd(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
        fs::write(&done, b"")?;
    }
    let boot = root.join("boot");
    let vmlinuz = only_entry(&boot, "vmlinuz-")?;
    let version = vmlinuz.file_name().unwrap().to_string_lossy()["vmlinuz-".len()..].to_string();
    let modules = root.join("lib/modules").join(&version);
    Ok(Kernel {
        series: series.name,
        package,
        vmlinuz,
        modules,
    })
}

fn only_entry(dir: &Path, prefix: &str) -> Result<PathBuf> {
    fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(prefix)))
        .with_context(|| format!("no {prefix}* in {}", dir.display()))
}

/// Every `.ko*` file under the kernel's modules, by module name (`-` read as `_`).
fn module_files(dir: &Path, out: &mut BTreeMap<String, PathBuf>) -> Result<()> {
    for e in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        if p.is_dir() {
            module_files(&p, out)?;
        } else if let Some(name) = p.file_name().and_then(|n| n.to_str()) {
            if let Some(i) = name.find(".ko") {
                out.insert(name[..i].replace('-', "_"), p.clone());
            }
        }
    }
    Ok(())
}

/// A module's object, decompressed (busybox's insmod takes plain ELF).
fn module_object(path: &Path) -> Result<Vec<u8>> {
    let name = path.to_string_lossy();
    let tool = if name.ends_with(".xz") {
        "xz"
    } else if name.ends_with(".zst") {
        "zstd"
    } else if name.ends_with(".gz") {
        "gzip"
    } else {
        return fs::read(path).with_context(|| format!("reading {name}"));
    };
    let out = Command::new(tool)
        .args(["-dc"])
        .arg(path)
        .output()
        .with_context(|| format!("{tool} to decompress {name}"))?;
    if !out.status.success() {
        bail!("{tool} -dc {name} failed");
    }
    Ok(out.stdout)
}

/// The `depends=` field of a module's .modinfo (what modinfo prints, without kmod).
fn depends(object: &[u8]) -> Vec<String> {
    object
        .split(|b| *b == 0)
        .find_map(|s| s.strip_prefix(b"depends="))
        .map(|d| {
            String::from_utf8_lossy(d)
                .split(',')
                .filter(|m| !m.is_empty())
                .map(|m| m.replace('-', "_"))
                .collect()
        })
        .unwrap_or_default()
}

/// The modules to load, dependencies first, with their objects; those built
/// into the kernel (modules.builtin) are left out.
fn module_chain(kernel: &Kernel) -> Result<Vec<(String, Vec<u8>)>> {
    let mut files = BTreeMap::new();
    module_files(&kernel.modules.join("kernel"), &mut files)?;
    let builtin = fs::read_to_string(kernel.modules.join("modules.builtin")).unwrap_or_default();
    let is_builtin = |m: &str| {
        builtin.lines().any(|l| {
            l.rsplit('/')
                .next()
                .and_then(|f| f.strip_suffix(".ko"))
                .is_some_and(|f| f.replace('-', "_") == m)
        })
    };
    let mut order: Vec<(String, Vec<u8>)> = Vec::new();
    fn visit(
        m: &str,
        files: &BTreeMap<String, PathBuf>,
        is_builtin: &dyn Fn(&str) -> bool,
        order: &mut Vec<(String, Vec<u8>)>,
    ) -> Result<()> {
        if order.iter().any(|(n, _)| n == m) || is_builtin(m) {
            return Ok(());
        }
        let path = files
            .get(m)
            .with_context(|| format!("module {m} is neither a file of the package nor built in"))?;
        let object = module_object(path)?;
        for d in depends(&object) {
            visit(&d, files, is_builtin, order)?;
        }
        order.push((m.to_string(), object));
        Ok(())
    }
    for m in MODULES {
        visit(m, &files, &is_builtin, &mut order)?;
    }
    Ok(order)
}

/// A newc cpio archive, what the kernel unpacks as its initramfs.
struct Cpio {
    out: Vec<u8>,
    ino: u32,
    dirs: Vec<String>,
}

impl Cpio {
    fn new() -> Cpio {
        Cpio {
            out: Vec::new(),
            ino: 1,
            dirs: Vec::new(),
        }
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        let name = name.trim_start_matches('/');
        let fields = [
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len() as u32,
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0,
        ];
        self.ino += 1;
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    /// A directory and its parents, each once.
    fn dir(&mut self, path: &str) {
        let path = path.trim_matches('/');
        if path.is_empty() || self.dirs.iter().any(|d| d == path) {
            return;
        }
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.dirs.push(path.to_string());
        self.entry(path, 0o040755, (0, 0), &[]);
    }

    fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        if let Some((parent, _)) = path.trim_start_matches('/').rsplit_once('/') {
            self.dir(parent);
        }
        self.entry(path, 0o100000 | mode, (0, 0), data);
    }

    fn symlink(&mut self, path: &str, target: &str) {
        self.entry(path, 0o120777, (0, 0), target.as_bytes());
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.out
    }
}

/// The shared libraries `ldd` names for a binary (and its loader).
fn libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .with_context(|| format!("ldd {}", binary.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|l| {
            let path = l.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

/// What every guest runs, the same for every kernel.
pub struct Userland {
    /// (path in the guest, host file).
    files: Vec<(String, PathBuf)>,
    init: PathBuf,
}

impl Userland {
    /// `netdam`, the vectors test binary (with the vectors where it reads
    /// them), iproute2's `ip` (the vectors make a namespace with a veth),
    /// busybox, and their libraries.
    pub fn new(root: &Path, netdam: &Path, vectors_test: &Path) -> Result<Userland> {
        let ip = PathBuf::from("/usr/sbin/ip");
        let busybox = PathBuf::from("/bin/busybox");
        let mut files = vec![
            ("/usr/bin/netdam".to_string(), netdam.to_path_buf()),
            ("/usr/bin/vectors-test".to_string(), vectors_test.to_path_buf()),
            ("/usr/sbin/ip".to_string(), ip.clone()),
            ("/bin/busybox".to_string(), busybox),
        ];
        let vectors = root.join("tests/vectors/netdam.jsonl");
        files.push((vectors.to_string_lossy().into_owned(), vectors));
        for bin in [netdam, vectors_test, ip.as_path()] {
            for lib in libraries(bin)? {
                let guest = lib.to_string_lossy().into_owned();
                if !files.iter().any(|(g, _)| *g == guest) {
                    files.push((guest, lib));
                }
            }
        }
        for (_, host) in &files {
            if !host.exists() {
                bail!("{} is missing (the guests need it)", host.display());
            }
        }
        Ok(Userland {
            files,
            init: root.join("tests/vm/init.sh"),
        })
    }

    /// The initramfs of a kernel: the userland and the kernel's `modules`.
    fn initramfs(&self, modules: &[(String, Vec<u8>)]) -> Result<Vec<u8>> {
        let mut c = Cpio::new();
        for d in [
            "bin", "sbin", "usr/bin", "usr/sbin", "dev", "proc", "sys", "run", "tmp", "root",
        ] {
            c.dir(d);
        }
        c.entry("dev/console", 0o020600, (5, 1), &[]);
        // The interpreter of /init; init.sh installs busybox's other applets.
        c.symlink("bin/sh", "busybox");
        let init = fs::read(&self.init).with_context(|| format!("reading {}", self.init.display()))?;
        c.file("init", 0o755, &init);
        for (guest, host) in &self.files {
            let data = fs::read(host).with_context(|| format!("reading {}", host.display()))?;
            c.file(guest, 0o755, &data);
        }
        for (name, object) in modules {
            c.file(&format!("lib/modules/{name}.ko"), 0o644, object);
        }
        let order: String = modules.iter().map(|(n, _)| format!("{n}\n")).collect();
        c.file("lib/modules/order", 0o644, order.as_bytes());
        Ok(c.finish())
    }
}

/// With `--json`, stdout carries the JSON alone: until `restore`, what is
/// printed to it (progress, the children's output) goes to stderr.
pub struct StdoutToStderr(libc::c_int);

impl StdoutToStderr {
    pub fn new() -> Result<StdoutToStderr> {
        std::io::stdout().flush()?;
        // SAFETY: plain descriptor calls on the process's own stdout and stderr.
        let saved = unsafe { libc::dup(1) };
        if saved < 0 || unsafe { libc::dup2(2, 1) } < 0 {
            bail!("cannot point stdout at stderr: {}", std::io::Error::last_os_error());
        }
        Ok(StdoutToStderr(saved))
    }

    fn restore(self) -> Result<()> {
        std::io::stdout().flush()?;
        // SAFETY: `self.0` is the descriptor `new` saved.
        if unsafe { libc::dup2(self.0, 1) } < 0 {
            bail!("cannot restore stdout: {}", std::io::Error::last_os_error());
        }
        // SAFETY: as above; it is not used again.
        unsafe { libc::close(self.0) };
        Ok(())
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// The namespace with the bridge and the taps, and the qemu processes in it:
/// all removed on drop (also on error, timeout and Ctrl-C).
struct Link {
    qemus: Vec<Child>,
}

impl Link {
    fn up() -> Result<Link> {
        let _ = Command::new("ip").args(["netns", "del", NETNS]).output();
        ip(&["netns", "add", NETNS])?;
        let link = Link { qemus: Vec::new() };
        ip(&["-n", NETNS, "link", "add", BRIDGE, "type", "bridge"])?;
        ip(&["-n", NETNS, "link", "set", BRIDGE, "up"])?;
        for (i, g) in GUESTS.iter().enumerate() {
            let tap = format!("ndvmtap{i}");
            let mut args = vec!["-n", NETNS, "tuntap", "add", "dev", &tap, "mode", "tap"];
            // qemu opens a tap of several queues with IFF_MULTI_QUEUE, one queue without.
            if g.queue_pairs > 1 {
                args.push("multi_queue");
            }
            ip(&args)?;
            ip(&["-n", NETNS, "link", "set", &tap, "master", BRIDGE, "up"])?;
        }
        Ok(link)
    }

    fn stop_qemus(&mut self) {
        for q in &mut self.qemus {
            let _ = q.kill();
            let _ = q.wait();
        }
        self.qemus.clear();
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.stop_qemus();
        let _ = Command::new("ip").args(["netns", "del", NETNS]).output();
    }
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip").args(args).output().context("running ip")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum Accel {
    Kvm,
    Tcg,
}

/// One guest's qemu, in the namespace, console to `log`.
fn qemu(kernel: &Kernel, initrd: &Path, g: &Guest, index: usize, accel: Accel, log: &Path) -> Result<Child> {
    let group: Vec<&str> = GUESTS.iter().map(|g| g.ip).collect();
    let append = format!(
        "console=ttyS0 quiet panic=-1 netdam.ip={} netdam.group={} netdam.vectors={}",
        g.ip,
        group.join(","),
        u8::from(index == 0)
    );
    let q = g.queue_pairs;
    let mut netdev = format!("tap,id=n0,ifname=ndvmtap{index},script=no,downscript=no,vhost=off");
    // ctrl_guest_offloads (on by default) lets virtio_net turn the guest offloads off for XDP.
    let mut device = format!("virtio-net-pci,netdev=n0,mac={},ctrl_guest_offloads=on", g.mac);
    if q > 1 {
        netdev += &format!(",queues={q}");
        device += &format!(",mq=on,vectors={}", 2 * q + 2);
    }
    let mut c = Command::new("nsenter");
    c.arg(format!("--net=/run/netns/{NETNS}")).arg("qemu-system-x86_64");
    match accel {
        Accel::Kvm => c.args(["-enable-kvm", "-cpu", "host"]),
        // One host thread for all vCPUs (not MTTCG): a 6.12 guest's kernel
        // rewriting its own code (static keys, through an int3) was met
        // mid-rewrite by its other vCPU under MTTCG and died with `Oops:
        // int3`, at boot or later (docs/kernels.md).
        Accel::Tcg => c.args(["-accel", "tcg,thread=single", "-cpu", "max"]),
    };
    c.args([
        "-smp",
        "2",
        "-m",
        "1024",
        "-nodefaults",
        "-no-reboot",
        "-display",
        "none",
    ])
    .arg("-serial")
    .arg(format!("file:{}", log.display()))
    .arg("-kernel")
    .arg(&kernel.vmlinuz)
    .arg("-initrd")
    .arg(initrd)
    .args(["-append", &append, "-netdev", &netdev, "-device", &device])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(fs::File::create(log.with_extension("qemu"))?);
    c.spawn().context("starting qemu-system-x86_64 (nsenter)")
}

/// What one guest printed: each step's (ok, detail, lines after a failure).
#[derive(Default)]
struct GuestReport {
    steps: BTreeMap<String, (bool, String, Vec<String>)>,
    ended: bool,
}

fn parse(log: &str) -> GuestReport {
    let mut r = GuestReport::default();
    let mut last: Option<String> = None;
    for line in log.lines() {
        if let Some(rest) = line.find("NDVM ").map(|i| &line[i + 5..]) {
            let mut words = rest.trim_end().splitn(3, ' ');
            let step = words.next().unwrap_or("").to_string();
            if step == "end" {
                r.ended = true;
                continue;
            }
            let ok = words.next() == Some("ok");
            let detail = words.next().unwrap_or("").to_string();
            r.steps.insert(step.clone(), (ok, detail, Vec::new()));
            last = Some(step);
        } else if let (Some(body), Some(step)) = (line.strip_prefix("    | "), &last) {
            if let Some(s) = r.steps.get_mut(step) {
                s.2.push(body.to_string());
            }
        }
    }
    r
}

/// One kernel's row of the matrix.
struct Row {
    series: &'static str,
    package: String,
    version: String,
    accel: Accel,
    seconds: u64,
    /// Why the run stopped early (timeout, qemu failure), if it did.
    error: Option<String>,
    guests: Vec<GuestReport>,
}

impl Row {
    /// ok when every guest that runs the step says ok (the vectors run on g0 only).
    fn step(&self, step: &str) -> bool {
        let runs: Vec<_> = self
            .guests
            .iter()
            .enumerate()
            .filter(|(i, _)| step != "vectors" || *i == 0)
            .collect();
        !runs.is_empty() && runs.iter().all(|(_, g)| g.steps.get(step).is_some_and(|s| s.0))
    }

    fn ok(&self) -> bool {
        self.error.is_none() && STEPS.iter().all(|(s, _)| self.step(s))
    }

    fn xdp_tx(&self) -> String {
        self.guests
            .iter()
            .zip(&GUESTS)
            .map(|(r, g)| {
                let mode = r
                    .steps
                    .get("serve")
                    .and_then(|s| s.1.rsplit(' ').next().map(str::to_string))
                    .unwrap_or_else(|| "?".into());
                format!("{}:{}q {mode}", g.name, g.queue_pairs)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Boots the kernel's guests, waits for them (or the timeout), reads their logs.
fn run_kernel(kernel: &Kernel, userland: &Userland, work: &Path, accel: Accel) -> Result<Row> {
    let modules = module_chain(kernel)?;
    let initrd = work.join(format!("{}.cpio", kernel.package));
    fs::write(&initrd, userland.initramfs(&modules)?)?;
    let started = Instant::now();
    let timeout = if accel == Accel::Kvm { TIMEOUT_KVM } else { TIMEOUT_TCG };
    let mut link = Link::up()?;
    let logs: Vec<PathBuf> = GUESTS
        .iter()
        .map(|g| work.join(format!("{}-{}.log", kernel.package, g.name)))
        .collect();
    for (i, g) in GUESTS.iter().enumerate() {
        let _ = fs::remove_file(&logs[i]);
        link.qemus.push(qemu(kernel, &initrd, g, i, accel, &logs[i])?);
    }
    let mut error = None;
    let mut exits = vec![None; GUESTS.len()];
    while exits.iter().any(Option::is_none) {
        if INTERRUPTED.load(Ordering::Relaxed) {
            bail!("interrupted: the guests are stopped and namespace {NETNS} removed");
        }
        if started.elapsed() > timeout {
            error = Some(format!(
                "timeout after {} s: the guests were stopped",
                timeout.as_secs()
            ));
            break;
        }
        for (q, e) in link.qemus.iter_mut().zip(exits.iter_mut()) {
            if e.is_none() {
                *e = q.try_wait()?;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    link.stop_qemus();
    drop(link);
    let qemu_err = |i: usize| fs::read_to_string(logs[i].with_extension("qemu")).unwrap_or_default();
    for (i, e) in exits.iter().enumerate() {
        if let Some(s) = e.filter(|s| !s.success()) {
            error.get_or_insert(format!(
                "qemu of {} exited with {s}: {}",
                GUESTS[i].name,
                qemu_err(i).trim()
            ));
        }
    }
    let guests: Vec<GuestReport> = logs
        .iter()
        .map(|l| parse(&String::from_utf8_lossy(&fs::read(l).unwrap_or_default())))
        .collect();
    let version = guests
        .iter()
        .find_map(|g| g.steps.get("kernel").map(|k| k.1.clone()))
        .unwrap_or_else(|| "?".into());
    Ok(Row {
        series: kernel.series,
        package: kernel.package.clone(),
        version,
        accel,
        seconds: started.elapsed().as_secs(),
        error,
        guests,
    })
}

fn okf(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "FAIL"
    }
}

fn print_table(rows: &[Row], work: &Path) {
    let mut header = vec!["series".to_string(), "kernel".into()];
    header.extend(STEPS.iter().map(|(_, col)| col.to_string()));
    header.extend(["XDP_TX queues".into(), "accel".into(), "time".into()]);
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut l = vec![r.series.to_string(), r.version.clone()];
            l.extend(STEPS.iter().map(|(s, _)| okf(r.step(s)).to_string()));
            l.push(r.xdp_tx());
            l.push(if r.accel == Accel::Kvm { "kvm" } else { "tcg" }.into());
            l.push(format!("{} s", r.seconds));
            l
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let show = |cells: &[String]| {
        let s: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", s.join("  ").trim_end());
    };
    show(&header);
    for l in &lines {
        show(l);
    }
    for r in rows {
        if let Some(e) = &r.error {
            println!("{} ({}): {e}", r.series, r.package);
        }
        for (g, rep) in GUESTS.iter().zip(&r.guests) {
            for (step, (ok, detail, more)) in &rep.steps {
                if !ok {
                    println!("{} {} {step}: FAIL {detail}", r.version, g.name);
                    for m in more {
                        println!("    | {m}");
                    }
                }
            }
            if !rep.ended {
                println!(
                    "{} {}: the guest did not finish; its console: {}",
                    r.version,
                    g.name,
                    work.join(format!("{}-{}.log", r.package, g.name)).display()
                );
            }
        }
    }
}

fn json(rows: &[Row]) -> serde_json::Value {
    serde_json::Value::Array(
        rows.iter()
            .map(|r| {
                let guests: Vec<serde_json::Value> = GUESTS
                    .iter()
                    .zip(&r.guests)
                    .map(|(g, rep)| {
                        let steps: serde_json::Map<String, serde_json::Value> = rep
                            .steps
                            .iter()
                            .map(|(s, (ok, detail, more))| {
                                (
                                    s.clone(),
                                    serde_json::json!({"ok": ok, "detail": detail, "output": more}),
                                )
                            })
                            .collect();
                        serde_json::json!({
                            "name": g.name, "ip": g.ip, "queue_pairs": g.queue_pairs,
                            "finished": rep.ended, "steps": steps,
                        })
                    })
                    .collect();
                let steps: serde_json::Map<String, serde_json::Value> = STEPS
                    .iter()
                    .map(|(s, _)| (s.to_string(), serde_json::Value::Bool(r.step(s))))
                    .collect();
                serde_json::json!({
                    "series": r.series, "package": r.package, "kernel": r.version,
                    "accel": if r.accel == Accel::Kvm { "kvm" } else { "tcg" },
                    "seconds": r.seconds, "ok": r.ok(), "error": r.error,
                    "steps": steps, "guests": guests,
                })
            })
            .collect(),
    )
}

/// Runs the matrix: every series (or those named), one after the other;
/// fails if any step failed.
pub fn run(root: &Path, userland: &Userland, only: &[String], json_out: Option<StdoutToStderr>) -> Result<()> {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGTERM,
            on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
    apt_update(false)?;
    let work = root.join("target/kernels");
    fs::create_dir_all(&work)?;
    let kernels: Vec<Kernel> = SERIES
        .iter()
        .filter(|s| only.is_empty() || only.iter().any(|o| o == s.name))
        .map(fetch)
        .collect::<Result<_>>()?;
    let accel = match probe_kvm(&kernels[0], &work) {
        Ok(()) => Accel::Kvm,
        Err(why) => {
            println!("    note: {why}; running the guests under TCG (slow)");
            Accel::Tcg
        }
    };
    let mut rows = Vec::new();
    for kernel in &kernels {
        let series = kernel.series;
        println!(
            "==> kernel matrix: {} ({}): 3 guests, native XDP on virtio_net",
            kernel.package, series
        );
        rows.push(run_kernel(kernel, userland, &work, accel)?);
    }
    if let Some(quiet) = json_out {
        quiet.restore()?;
        let mut out = std::io::stdout();
        serde_json::to_writer_pretty(&mut out, &json(&rows))?;
        writeln!(out)?;
    } else {
        print_table(&rows, &work);
        println!(
            "host: {} (the other tiers); guests' consoles under {}",
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim(),
            work.display()
        );
    }
    let failed: Vec<&str> = rows.iter().filter(|r| !r.ok()).map(|r| r.series).collect();
    if !failed.is_empty() {
        bail!("the kernel matrix failed on {}", failed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_package_sorts_by_numbers() {
        let mut names = [
            "linux-image-6.1.0-57-cloud-amd64",
            "linux-image-6.1.0-9-cloud-amd64",
            "linux-image-6.1.0-100-cloud-amd64",
        ];
        names.sort_by_key(|n| version_key(n));
        assert_eq!(names.last(), Some(&"linux-image-6.1.0-100-cloud-amd64"));
    }

    #[test]
    fn depends_is_read_from_modinfo() {
        let object = b"\0license=GPL\0depends=net_failover,virtio-ring\0vermagic=6.1\0";
        assert_eq!(depends(object), ["net_failover", "virtio_ring"]);
        assert!(depends(b"\0depends=\0").is_empty());
    }

    #[test]
    fn console_lines_become_steps() {
        let log = "[    1.0] virtio_net virtio0 eth0: something\n\
                   NDVM kernel ok 6.1.0-57-cloud-amd64\n\
                   [    2.0] random: crng init done\n\
                   NDVM serve FAIL netdam serve --mode native did not come up\n    \
                   | the verifier rejected it\n    \
                   | processed 10 insns\n\
                   NDVM end\n";
        let r = parse(log);
        assert!(r.ended);
        assert_eq!(r.steps["kernel"].1, "6.1.0-57-cloud-amd64");
        let serve = &r.steps["serve"];
        assert!(!serve.0);
        assert_eq!(serve.2, ["the verifier rejected it", "processed 10 insns"]);
    }

    fn guest(steps: &[&str]) -> GuestReport {
        let log: String = steps.iter().map(|s| format!("NDVM {s} ok fine\n")).collect::<String>() + "NDVM end\n";
        parse(&log)
    }

    fn row(guests: Vec<GuestReport>) -> Row {
        Row {
            series: "6.1",
            package: "p".into(),
            version: "v".into(),
            accel: Accel::Tcg,
            seconds: 1,
            error: None,
            guests,
        }
    }

    #[test]
    fn a_kernel_passes_only_with_every_step_on_every_guest() {
        let all = ["kernel", "serve", "peers", "write-read", "allreduce"];
        let with_vectors = [&all[..], &["vectors"]].concat();
        let passing = || vec![guest(&with_vectors), guest(&all), guest(&all)];
        // The vectors run on guest 0 only.
        assert!(row(passing()).ok());
        let mut r = row(passing());
        r.guests[2] = guest(&all[..4]);
        assert!(!r.step("allreduce") && r.step("serve") && !r.ok());
        let mut r = row(passing());
        r.guests[0] = guest(&all);
        assert!(!r.step("vectors") && !r.ok());
        let mut r = row(passing());
        r.error = Some("timeout".into());
        assert!(!r.ok());
        assert!(!row(vec![]).ok());
    }

    #[test]
    fn cpio_entries_are_newc_and_aligned() {
        let mut c = Cpio::new();
        c.file("usr/bin/x", 0o755, b"abc");
        let out = c.finish();
        assert!(out.starts_with(b"070701"));
        assert_eq!(out.len() % 4, 0);
        // usr, usr/bin, the file, the trailer.
        assert_eq!(out.windows(6).filter(|w| w == b"070701").count(), 4);
        assert!(out.windows(10).any(|w| w == b"TRAILER!!!"));
    }
}
