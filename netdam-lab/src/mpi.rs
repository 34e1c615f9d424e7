//! MPI jobs on the testbed: `mpirun` started in host 0 with rank i in the
//! i-th host given, reached through an rsh agent that enters the host's
//! network namespace (no ssh), with OpenMPI's TCP transport bound to the
//! testbed's subnet. What the all-reduce bench, the PMPI library's tests
//! and the MPI benchmarks share.

use std::{
    ffi::OsStr,
    net::Ipv4Addr,
    os::unix::fs::PermissionsExt,
    path::Path,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use thiserror::Error;

use crate::{
    interrupt::TempPath,
    testbed::{Served, Testbed, TestbedError},
};

#[derive(Debug, Error)]
pub enum MpiError {
    #[error("{host} is not a host of testbed {prefix}")]
    UnknownHost { host: Ipv4Addr, prefix: String },
    #[error("`{0}` is needed: install OpenMPI (apt-get install openmpi-bin libopenmpi-dev; `cargo xtask setup` does)")]
    Missing(&'static str),
    #[error("mpirun still running after {limit:?}: killed (with --mca plm_base_verbose 5 it says where its launch stopped); it had printed:\n{output}")]
    Hung { limit: Duration, output: String },
    #[error(transparent)]
    Testbed(#[from] TestbedError),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
}

/// The rsh agent of a testbed's MPI jobs, a script in the temporary
/// directory, and the daemons' session directories beside it; removed on
/// drop.
pub struct Mpirun {
    agent: TempPath,
    _sessions: TempPath,
}

impl Mpirun {
    /// Writes the agent for `tb`'s hosts: `agent HOST CMD...` runs CMD in
    /// HOST's namespace.
    pub fn new(tb: &Testbed) -> Result<Mpirun, MpiError> {
        let base = std::env::temp_dir().join(format!("netdam-mpi-{}-{}", tb.prefix, std::process::id()));
        let agent = TempPath::new(base.with_extension("agent"));
        let sessions = TempPath::new(base.with_extension("sessions"));
        let cases: String = tb
            .hosts
            .iter()
            .map(|h| format!("  {}) ns={} ;;\n", h.ip, h.netns))
            .collect();
        // The hosts share one file system and one host name, so every
        // daemon gets a session directory of its own: in a shared one,
        // daemons starting at once fail to make theirs now and then
        // ("File exists"), and a daemonized orted that fails leaves
        // mpirun waiting for it for ever.
        let script = format!(
            "#!/bin/sh\n# mpirun's rsh agent for the testbed: enter the host's namespace, run the command.\n\
             host=$1; shift\ncase $host in\n{cases}  *) echo \"unknown host $host\" >&2; exit 1 ;;\nesac\n\
             export OMPI_MCA_orte_tmpdir_base={}/$ns\nmkdir -p \"$OMPI_MCA_orte_tmpdir_base\"\n\
             exec nsenter --net=/var/run/netns/$ns sh -c \"$*\"\n",
            sh_quote(&sessions.path().to_string_lossy())
        );
        write_script(agent.path(), &script)?;
        Ok(Mpirun {
            agent,
            _sessions: sessions,
        })
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
        .args([
            OsStr::new("--mca"),
            OsStr::new("plm_rsh_agent"),
            self.agent.path().as_os_str(),
        ])
        .args(["--mca", "plm_rsh_no_tree_spawn", "1"])
        // No hwloc topology shared through memory, which daemons writing
        // it at once on one machine crashed in now and then (ranks are not
        // bound here anyway). (--leave-session-attached would make a
        // daemon's failure fail the launch at once, but it made every
        // libnetdam_mpi call 3 to 4 times slower, measured with IMB.)
        .args(["--mca", "rtc", "^hwloc"])
        .args(["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"])
        .args(["--mca", "btl_tcp_if_include", "198.18.0.0/24"])
        .args(["--mca", "oob_tcp_if_include", "198.18.0.0/24"])
        // More ranks than cores here: busy-polling ranks would starve each other.
        .args(["--mca", "mpi_yield_when_idle", "1", "--bind-to", "none"]);
        Ok(cmd)
    }
}

/// The nodes of an MPI job's libnetdam_mpi: every host of a testbed
/// served with `mem` bytes of node memory, all of it region `rkey` (rwa)
/// and the collective's scratch area, every host a peer of every other.
/// Stopped on drop.
pub struct NetdamNodes {
    pub rkey: u32,
    pub mem: u64,
    _served: Vec<Served>,
}

impl NetdamNodes {
    /// `netdam serve` on every host of `tb`, with `extra` arguments (e.g. `--mode native`).
    pub fn serve(tb: &Testbed, netdam: &Path, rkey: u32, mem: u64, extra: &[&str]) -> Result<NetdamNodes, MpiError> {
        let mut args = vec![
            "--mem-size".to_string(),
            mem.to_string(),
            "--region".into(),
            format!("{rkey:#x}:0:{mem}:rwa"),
        ];
        for h in &tb.hosts {
            args.extend(["--peer".to_string(), h.ip.to_string()]);
        }
        args.extend(extra.iter().map(|a| a.to_string()));
        let served = (0..tb.hosts.len())
            .map(|i| tb.serve(i, netdam, &args))
            .collect::<Result<_, _>>()?;
        Ok(NetdamNodes {
            rkey,
            mem,
            _served: served,
        })
    }

    /// The ranks' settings for these nodes (netdam.h's netdam_settings_load),
    /// NETDAM_PIN_DIR aside, which `Preload` sets per rank.
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        vec![
            ("NETDAM_RKEY", format!("{:#x}", self.rkey)),
            ("NETDAM_SCRATCH_ADDR", "0".into()),
            ("NETDAM_SCRATCH_LEN", self.mem.to_string()),
        ]
    }
}

/// libnetdam_mpi in the ranks of a testbed job: a script that the ranks'
/// program runs through (put it before the program after
/// `Mpirun::command`). It clears the settings the ranks could inherit,
/// sets NETDAM_PIN_DIR to the rank's node, the job's other settings, and
/// LD_PRELOAD for the program alone. Removed on drop.
pub struct Preload {
    script: TempPath,
}

impl Preload {
    /// Every rank with the node of its host (rank i runs in the i-th host
    /// given to `Mpirun::command`). `settings`: NAME=VALUE pairs every rank
    /// gets (NETDAM_RKEY, ...).
    pub fn of_hosts(
        tb: &Testbed,
        hosts: &[Ipv4Addr],
        library: &Path,
        settings: &[(&str, String)],
    ) -> Result<Preload, MpiError> {
        let pin_dirs = hosts
            .iter()
            .map(|h| {
                let host = tb
                    .hosts
                    .iter()
                    .find(|t| t.ip == *h)
                    .ok_or_else(|| MpiError::UnknownHost {
                        host: *h,
                        prefix: tb.prefix.clone(),
                    })?;
                Ok(Some(host.pin_dir.as_path()))
            })
            .collect::<Result<Vec<_>, MpiError>>()?;
        Preload::new(&pin_dirs, Some(library), settings)
    }

    /// Rank i with the node pinned at `pin_dirs[i]`, or with none
    /// configured where that is None; the library preloaded when given
    /// (without it, the same settings for a run of MPI alone).
    pub fn new(
        pin_dirs: &[Option<&Path>],
        library: Option<&Path>,
        settings: &[(&str, String)],
    ) -> Result<Preload, MpiError> {
        let cases: String = pin_dirs
            .iter()
            .enumerate()
            .map(|(rank, pin)| match pin {
                Some(p) => format!(
                    "  {rank}) export NETDAM_PIN_DIR={} ;;\n",
                    sh_quote(&p.to_string_lossy())
                ),
                None => format!("  {rank}) ;;\n"),
            })
            .collect();
        let exports: String = settings
            .iter()
            .map(|(name, value)| format!("export {name}={}\n", sh_quote(value)))
            .collect();
        let preload = library
            .map(|l| format!("LD_PRELOAD={} ", sh_quote(&l.to_string_lossy())))
            .unwrap_or_default();
        let script = format!(
            "#!/bin/sh\n# libnetdam_mpi for this rank: the node of its testbed host, the job's settings.\n\
             unset NETDAM_CONFIG NETDAM_IFACE NETDAM_PIN_DIR\n\
             case $OMPI_COMM_WORLD_RANK in\n{cases}  *) echo \"rank $OMPI_COMM_WORLD_RANK has no place in this job\" >&2; exit 1 ;;\nesac\n\
             {exports}{preload}exec \"$@\"\n"
        );
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = TempPath::new(std::env::temp_dir().join(format!("netdam-mpi-preload-{}-{n}", std::process::id())));
        write_script(path.path(), &script)?;
        Ok(Preload { script: path })
    }

    /// The script: `mpirun ... SCRIPT PROGRAM ARGS...`.
    pub fn path(&self) -> &Path {
        self.script.path()
    }
}

/// libnetdam_mpi's counts at MPI_Finalize with NETDAM_MPI_VERBOSE=1, one
/// line per rank on its stderr (`netdam-mpi: rank R: offloaded N (...),
/// fell back M (...)`), summed over the ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffloadCounts {
    pub ranks: u32,
    pub offloaded: u64,
    pub fallen_back: u64,
}

impl OffloadCounts {
    /// The counts in a job's output; None when no rank printed any.
    pub fn parse(output: &str) -> Option<OffloadCounts> {
        let number_after = |line: &str, word: &str| -> Option<u64> {
            let rest = &line[line.find(word)? + word.len()..];
            rest.split(|c: char| !c.is_ascii_digit())
                .find(|t| !t.is_empty())?
                .parse()
                .ok()
        };
        let mut counts = OffloadCounts::default();
        for line in output.lines().filter(|l| l.contains("netdam-mpi: rank ")) {
            if let (Some(o), Some(f)) = (number_after(line, "offloaded "), number_after(line, "fell back ")) {
                counts += OffloadCounts {
                    ranks: 1,
                    offloaded: o,
                    fallen_back: f,
                };
            }
        }
        (counts.ranks > 0).then_some(counts)
    }
}

impl std::ops::AddAssign for OffloadCounts {
    fn add_assign(&mut self, o: OffloadCounts) {
        self.ranks += o.ranks;
        self.offloaded += o.offloaded;
        self.fallen_back += o.fallen_back;
    }
}

/// Writes an executable script.
fn write_script(path: &Path, script: &str) -> Result<(), MpiError> {
    let io = |e| MpiError::Io(format!("writing {}", path.display()), e);
    std::fs::write(path, script).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(io)
}

/// `s` as one word of sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
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

/// What mpirun says when a daemon it launched failed to start.
const DAEMON_FAILED: &str = "ORTE was unable to reliably start one or more daemons";

/// `output_within`, run once more if the first run hung or a daemon failed
/// to start: daemons of one machine's hosts starting at once have failed
/// now and then (see `Mpirun::new` for what was done about it), while a job
/// that fails or hangs for its own reasons does so twice.
pub fn output_within_retry(cmd: &mut Command, limit: Duration) -> Result<Output, MpiError> {
    match output_within(cmd, limit) {
        Err(MpiError::Hung { output, .. }) => {
            eprintln!("mpirun hung (killed after {limit:?}), once more; it had printed:\n{output}");
            output_within(cmd, limit)
        }
        Ok(out) if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains(DAEMON_FAILED) => {
            eprintln!(
                "a daemon of mpirun failed to start, once more; it said:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            output_within(cmd, limit)
        }
        out => out,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offload_counts_summed_over_ranks() {
        let out =
            "some output\nnetdam-mpi: rank 1: offloaded 12 (allreduce 12, allgather 0), fell back 3 (type 2, op 1)\n\
                   netdam-mpi: rank 0: offloaded 10 (allreduce 10, allgather 0), fell back 5 (type 5, op 0)\n";
        assert_eq!(
            OffloadCounts::parse(out),
            Some(OffloadCounts {
                ranks: 2,
                offloaded: 22,
                fallen_back: 8
            })
        );
        assert_eq!(OffloadCounts::parse(" No Errors\n"), None);
    }

    /// The script run by hand as ranks 0, 1 and 2 of a job of two: `env`
    /// in place of the program.
    #[test]
    fn preload_script_gives_each_rank_its_node_and_no_other_settings() {
        let lib = Path::new("/nonexistent/lib netdam_mpi.so");
        let p = Preload::new(
            &[Some(Path::new("/pins/it's")), None],
            Some(lib),
            &[("NETDAM_RKEY", "0x5 7".into())],
        )
        .unwrap();
        let rank = |r: &str| {
            Command::new(p.path())
                .arg("env")
                .env("OMPI_COMM_WORLD_RANK", r)
                .env("NETDAM_IFACE", "inherited")
                .env("NETDAM_PIN_DIR", "inherited")
                .output()
                .unwrap()
        };
        let vars = |o: &Output| -> Vec<String> {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.starts_with("NETDAM_") || l.starts_with("LD_PRELOAD="))
                .map(String::from)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect()
        };
        let r0 = rank("0");
        assert!(r0.status.success());
        assert_eq!(
            vars(&r0),
            [
                "LD_PRELOAD=/nonexistent/lib netdam_mpi.so",
                "NETDAM_PIN_DIR=/pins/it's",
                "NETDAM_RKEY=0x5 7"
            ]
        );
        let r1 = rank("1");
        assert_eq!(
            vars(&r1),
            ["LD_PRELOAD=/nonexistent/lib netdam_mpi.so", "NETDAM_RKEY=0x5 7"]
        );
        let r2 = rank("2");
        assert!(!r2.status.success());
        assert!(String::from_utf8_lossy(&r2.stderr).contains("rank 2 has no place in this job"));
        let script = p.path().to_path_buf();
        drop(p);
        assert!(!script.exists(), "removed on drop");
    }

    #[test]
    fn preload_script_quotes_its_words() {
        assert_eq!(sh_quote("/a b/it's"), "'/a b/it'\\''s'");
    }
}
