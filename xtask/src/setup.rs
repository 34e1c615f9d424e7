//! `cargo xtask setup`: every tool and kernel facility the build and the
//! tests need, installed or switched on if missing, quickly when present.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context as _, Result};

/// The bpf-linker whose LLVM matches the pinned nightly's.
const BPF_LINKER_VERSION: &str = "0.10.4";

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn require_root(what: &str) -> Result<()> {
    if !is_root() {
        bail!("{what} loads XDP programs and makes network namespaces: run it as root (sudo -E {what})");
    }
    Ok(())
}

fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn step(what: &str, program: &str, args: &[&str], how: &str) -> Result<()> {
    println!("    {what}: {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .status()
        .with_context(|| format!("{what}: cannot start {program}; {how}"))?;
    if !status.success() {
        bail!("{what} failed ({status}); {how}");
    }
    Ok(())
}

pub fn run(root: &Path) -> Result<()> {
    println!("==> setup");
    let toolchains = output("rustup", &["toolchain", "list"])
        .context("rustup is missing: install Rust with rustup (https://rustup.rs) first")?;
    if !toolchains.lines().any(|l| l.starts_with("nightly")) {
        step(
            "nightly toolchain",
            "rustup",
            &[
                "toolchain",
                "install",
                "nightly",
                "--profile",
                "minimal",
                "--component",
                "rust-src",
            ],
            "the eBPF crate builds with nightly's -Z build-std",
        )?;
    }
    let components = output(
        "rustup",
        &["component", "list", "--toolchain", "nightly", "--installed"],
    )
    .unwrap_or_default();
    if !components.lines().any(|l| l.starts_with("rust-src")) {
        step(
            "nightly rust-src",
            "rustup",
            &["component", "add", "rust-src", "--toolchain", "nightly"],
            "-Z build-std=core needs the core sources",
        )?;
    }
    let linker = output("bpf-linker", &["--version"]).unwrap_or_default();
    if !linker.contains(BPF_LINKER_VERSION) {
        step(
            "bpf-linker",
            "cargo",
            &["install", "bpf-linker", "--version", BPF_LINKER_VERSION, "--locked"],
            "bpf-linker links the eBPF object (its LLVM must match nightly's); about 2 minutes",
        )?;
    }
    if output("ip", &["-V"]).is_none() {
        if !is_root() {
            bail!("`ip` (iproute2) is missing: apt-get install iproute2");
        }
        step(
            "iproute2",
            "apt-get",
            &["install", "-y", "iproute2"],
            "install iproute2 by hand",
        )?;
    }
    if is_root() {
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        if !mounts
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some("/sys/fs/bpf") && l.split_whitespace().nth(2) == Some("bpf"))
        {
            step(
                "bpffs",
                "mount",
                &["-t", "bpf", "bpf", "/sys/fs/bpf"],
                "the kernel needs CONFIG_BPF_SYSCALL",
            )?;
        }
        raise_memlock();
    }
    let python = python_env(root)?;
    println!(
        "    ok: nightly + rust-src, bpf-linker {BPF_LINKER_VERSION}, iproute2{}, Python {python}",
        if is_root() {
            ", bpffs, memlock"
        } else {
            " (not root: bpffs and memlock left as they are)"
        }
    );
    Ok(())
}

/// The Python packages of the tests' environment, pinned: numpy, pytest,
/// maturin (builds the netdam module) and mpi4py (MPI tests; built from
/// source against the system's OpenMPI).
const PYTHON_PACKAGES: [&str; 4] = ["numpy==2.4.6", "pytest==9.0.3", "maturin==1.15.0", "mpi4py==4.1.2"];

/// The tests' Python: $NETDAM_PYTHON (an environment of your own with
/// PYTHON_PACKAGES), else the venv `cargo xtask setup` makes in target/venv.
pub fn venv_python(root: &Path) -> PathBuf {
    std::env::var_os("NETDAM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/venv/bin/python"))
}

/// Makes target/venv with PYTHON_PACKAGES when it is missing or its pins
/// changed (a stamp file in it records them); says what it uses.
fn python_env(root: &Path) -> Result<String> {
    if let Some(own) = std::env::var_os("NETDAM_PYTHON") {
        return Ok(format!("{} ($NETDAM_PYTHON)", PathBuf::from(own).display()));
    }
    let venv = root.join("target/venv");
    let stamp = venv.join("netdam-packages.txt");
    let pins = PYTHON_PACKAGES.join("\n");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == pins) {
        return Ok(format!("venv {}", venv.display()));
    }
    if output("python3", &["-c", "import venv, ensurepip"]).is_none() {
        if !is_root() {
            bail!("python3 with venv is missing: apt-get install python3-venv python3-dev");
        }
        step(
            "Python",
            "apt-get",
            &["install", "-y", "-qq", "python3-venv", "python3-dev"],
            "install python3-venv and python3-dev by hand",
        )?;
    }
    // mpi4py compiles against the system's MPI with mpicc.
    if !is_root() && output("mpicc", &["--showme:version"]).is_none() {
        return Ok("none yet (OpenMPI is missing and installing it needs root: \
                   `sudo -E cargo xtask setup`; tier 1 does not need it)"
            .into());
    }
    openmpi()?;
    let venv_arg = venv.to_str().context("the checkout's path is not UTF-8")?;
    step(
        "Python venv",
        "python3",
        &["-m", "venv", "--clear", venv_arg],
        "the tests' Python packages go into target/venv",
    )?;
    let pip = venv.join("bin/pip");
    let pip = pip.to_str().context("the checkout's path is not UTF-8")?;
    let mut args = vec!["install", "--quiet", "--no-binary", "mpi4py"];
    args.extend(PYTHON_PACKAGES);
    step(
        "Python packages (mpi4py builds against OpenMPI: about a minute)",
        pip,
        &args,
        "pip needs PyPI, and mpi4py needs mpicc (libopenmpi-dev)",
    )?;
    std::fs::write(&stamp, pins).with_context(|| format!("writing {}", stamp.display()))?;
    Ok(format!("venv {}", venv.display()))
}

/// OpenMPI (mpicc, mpirun), from the distribution's packages: the build
/// compiles libnetdam_mpi.so with mpicc, its tests and the all-reduce
/// comparison run mpirun.
pub fn openmpi() -> Result<()> {
    if output("mpicc", &["--showme:version"]).is_some() && output("mpirun", &["--version"]).is_some() {
        return Ok(());
    }
    if !is_root() {
        bail!("OpenMPI is missing: apt-get install openmpi-bin libopenmpi-dev");
    }
    step(
        "package lists",
        "apt-get",
        &["update", "-qq"],
        "install openmpi-bin and libopenmpi-dev by hand",
    )?;
    step(
        "OpenMPI",
        "apt-get",
        &["install", "-y", "-qq", "openmpi-bin", "libopenmpi-dev"],
        "libnetdam_mpi.so builds with mpicc, its tests and the all-reduce benchmark run mpirun, mpi4py builds against it; install openmpi-bin and libopenmpi-dev by hand",
    )
}

/// What MPICH's test suite (the third-party MPI client of tier 3 and of
/// `bench mpi`) needs: OpenMPI, xz to unpack Debian's mpich source
/// package (apt fetches it), make and gcc to build it.
pub fn mpich_suite() -> Result<()> {
    openmpi()?;
    apt_tools(
        "MPICH's test suite",
        &[("xz", "xz-utils"), ("make", "make"), ("gcc", "gcc")],
    )
}

/// What the HLS port's checks need (`make -C fpga-port test`): make, gcc
/// (with its sanitizer runtimes), clang and nm.
pub fn fpga_tools() -> Result<()> {
    apt_tools(
        "the HLS port's checks",
        &[("make", "make"), ("gcc", "gcc"), ("nm", "binutils"), ("clang", "clang")],
    )
}

/// What the C API's test (tests/tests/capi.rs) needs: cc to build its C
/// program against netdam.h, c++ to compile the header as C++.
pub fn capi_tools() -> Result<()> {
    apt_tools("the C API's test", &[("cc", "gcc"), ("c++", "g++")])
}

/// `tools` (command, package) for `purpose`: those missing from the
/// distribution's packages (as root), else named.
fn apt_tools(purpose: &str, tools: &[(&str, &str)]) -> Result<()> {
    let missing: Vec<&str> = tools
        .iter()
        .filter(|(cmd, _)| output(cmd, &["--version"]).is_none())
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing for {purpose}: {}; apt-get install {}",
            missing.join(", "),
            missing.join(" ")
        );
    }
    step(
        "package lists",
        "apt-get",
        &["update", "-qq"],
        "install the packages by hand",
    )?;
    let mut args = vec!["install", "-y", "-qq"];
    args.extend(&missing);
    step(
        &format!("packages for {purpose}"),
        "apt-get",
        &args,
        &format!("install {} by hand", missing.join(" ")),
    )
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; children inherit
/// the raised limit. Without CAP_SYS_RESOURCE the soft limit goes up to the hard one.
fn raise_memlock() {
    let mut lim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: valid rlimit structs.
    unsafe {
        if libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) == 0 || libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) != 0 {
            return;
        }
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) != 0 {
            eprintln!(
                "    warning: cannot raise RLIMIT_MEMLOCK: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}
