//! MPI jobs on the testbed: `mpirun` started in host 0 with rank i in the
//! i-th host given, reached through an rsh agent that enters the host's
//! network namespace (no ssh), with OpenMPI's TCP transport bound to the
//! testbed's subnet. What the all-reduce bench, the PMPI library's tests
//! and the MPI benchmarks share.

use std::{
    ffi::OsStr,
    net::Ipv4Addr,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use thiserror::Error;

use crate::testbed::{Testbed, TestbedError};

#[derive(Debug, Error)]
pub enum MpiError {
    #[error("{host} is not a host of testbed {prefix}")]
    UnknownHost { host: Ipv4Addr, prefix: String },
    #[error("`{0}` is needed: install OpenMPI (apt-get install openmpi-bin libopenmpi-dev; `cargo xtask setup` does)")]
    Missing(&'static str),
    #[error("mpirun still running after {limit:?}: killed (its launch hangs now and then, an orted never calling back; run it again, with --mca plm_base_verbose 5 to see where); it had printed:\n{output}")]
    Hung { limit: Duration, output: String },
    #[error(transparent)]
    Testbed(#[from] TestbedError),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
}

/// The rsh agent of a testbed's MPI jobs, a script in the temporary
/// directory, removed on drop.
pub struct Mpirun {
    agent: PathBuf,
}

impl Mpirun {
    /// Writes the agent for `tb`'s hosts: `agent HOST CMD...` runs CMD in
    /// HOST's namespace.
    pub fn new(tb: &Testbed) -> Result<Mpirun, MpiError> {
        let cases: String = tb
            .hosts
            .iter()
            .map(|h| format!("  {}) ns={} ;;\n", h.ip, h.netns))
            .collect();
        let script = format!(
            "#!/bin/sh\n# mpirun's rsh agent for the testbed: enter the host's namespace, run the command.\n\
             host=$1; shift\ncase $host in\n{cases}  *) echo \"unknown host $host\" >&2; exit 1 ;;\nesac\n\
             exec nsenter --net=/var/run/netns/$ns sh -c \"$*\"\n"
        );
        let agent = std::env::temp_dir().join(format!("netdam-mpi-agent-{}-{}", tb.prefix, std::process::id()));
        let io = |e| MpiError::Io(format!("writing {}", agent.display()), e);
        std::fs::write(&agent, script).map_err(io)?;
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).map_err(io)?;
        Ok(Mpirun { agent })
    }

    /// `mpirun` in host 0 with one rank in each of `hosts`, in order, every
    /// option set but the program: append `-x NAME` exports, the program
    /// and its arguments.
    pub fn command(&self, tb: &Testbed, hosts: &[Ipv4Addr]) -> Result<Command, MpiError> {
        for h in hosts {
            if !tb.hosts.iter().any(|t| t.ip == *h) {
                return Err(MpiError::UnknownHost {
                    host: *h,
                    prefix: tb.prefix.clone(),
                });
            }
        }
        let hosts: Vec<String> = hosts.iter().map(Ipv4Addr::to_string).collect();
        let mut cmd = tb.command(0, "mpirun")?;
        cmd.args([
            "--allow-run-as-root",
            "-np",
            &hosts.len().to_string(),
            "-H",
            &hosts.join(","),
        ])
        .args([OsStr::new("--mca"), OsStr::new("plm_rsh_agent"), self.agent.as_os_str()])
        .args(["--mca", "plm_rsh_no_tree_spawn", "1"])
        .args(["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"])
        .args(["--mca", "btl_tcp_if_include", "198.18.0.0/24"])
        .args(["--mca", "oob_tcp_if_include", "198.18.0.0/24"])
        // More ranks than cores here: busy-polling ranks would starve each other.
        .args(["--mca", "mpi_yield_when_idle", "1", "--bind-to", "none"]);
        Ok(cmd)
    }
}

impl Drop for Mpirun {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.agent);
    }
}

/// `cmd`'s output, or `MpiError::Hung` once it has run longer than `limit`
/// (then it is killed). Its output must fit the pipes while it runs (a few
/// lines per rank do).
pub fn output_within(cmd: &mut Command, limit: Duration) -> Result<Output, MpiError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = match cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && program == "mpirun" => {
            return Err(MpiError::Missing("mpirun"))
        }
        r => r.map_err(|e| MpiError::Io(format!("starting {program}"), e))?,
    };
    let deadline = Instant::now() + limit;
    let io = |e| MpiError::Io(format!("waiting for {program}"), e);
    while child.try_wait().map_err(io)?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            // What it wrote before it was killed: where it stopped.
            let output = child
                .wait_with_output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr))
                .unwrap_or_default();
            return Err(MpiError::Hung { limit, output });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().map_err(io)
}

/// Compiles C sources with `mpicc` (-O2, warnings as errors) into `exe`.
pub fn mpicc(sources: &[&Path], extra: &[&str], exe: &Path) -> Result<(), MpiError> {
    let out = Command::new("mpicc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(exe)
        .args(sources)
        .args(extra)
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => MpiError::Missing("mpicc"),
            _ => MpiError::Io("running mpicc".into(), e),
        })?;
    if !out.status.success() {
        return Err(MpiError::Io(
            format!("mpicc {}", exe.display()),
            std::io::Error::other(String::from_utf8_lossy(&out.stderr).into_owned()),
        ));
    }
    Ok(())
}
