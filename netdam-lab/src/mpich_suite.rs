//! MPICH's test suite (`test/mpi` of the published MPICH source), a client
//! of MPI that nobody here wrote, built unmodified against the system's MPI.
//!
//! Where it comes from: Debian's `mpich` source package, through apt, with
//! the machine's apt configuration left as it is: a private sources list
//! (the machine's own Debian mirror, a `deb-src` line for its release,
//! signed by Debian's archive keyring) and private list and cache
//! directories under the cache directory. apt checks the files against the
//! signed index as it downloads them; the upstream tarball is checked
//! against the `.dsc` again whenever it is extracted. Once downloaded, the
//! package stays in the cache: later runs do not reach the archive.
//!
//! How it is built: the suite's own way, `configure CC=mpicc` in `test/mpi`
//! (it supports other MPIs than MPICH) and `make` of the chosen programs,
//! in the cache, kept for the next run while `mpicc` stays the same.
//! Every program prints ` No Errors` on success.

use std::{
    fs::File,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use nix::fcntl::{Flock, FlockArg};
use thiserror::Error;

/// Where the source package, apt's private state and the built suite stay.
pub const DEFAULT_CACHE: &str = "/var/cache/netdam-src";
/// The keyring that signs Debian's archive (package debian-archive-keyring).
const DEBIAN_KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
/// What the suite's programs print when every check passed.
pub const NO_ERRORS: &str = " No Errors";

/// The suite's configure arguments: C only, none of the optional parts.
/// OpenMPI 4.1's mpi.h turns the MPI-1 functions removed in MPI-3.0 into
/// compile errors (the suite's dtpools calls MPI_Type_hvector and
/// MPI_Type_hindexed) though libmpi still exports them; defining
/// OMPI_OMIT_MPI1_COMPAT_DECLS=0 restores their declarations (other MPIs
/// ignore it).
const CONFIGURE_ARGS: &[&str] = &[
    "CC=mpicc",
    "CPPFLAGS=-DOMPI_OMIT_MPI1_COMPAT_DECLS=0",
    "--disable-fortran",
    "--disable-cxx",
    "--disable-romio",
    "--disable-spawn",
    "--disable-ft-tests",
];

#[derive(Debug, Error)]
pub enum SuiteError {
    #[error("`{0}` is needed to get and build the MPICH test suite: {1} (`cargo xtask setup` installs it)")]
    Missing(&'static str, &'static str),
    #[error(
        "no Debian archive among apt's sources for release {0:?} (`apt-get indextargets` lists none): \
         the MPICH test suite is Debian's mpich source package, fetched from the machine's Debian mirror"
    )]
    NoArchive(String),
    #[error("{DEBIAN_KEYRING} is missing: apt-get install debian-archive-keyring")]
    NoKeyring,
    #[error(
        "apt could not get Debian's mpich source package ({step}; private apt state in {dir}): does \
         `apt-get update` reach the Debian archive from here (a proxy goes in Acquire::http::Proxy)?\n{output}"
    )]
    Apt {
        step: &'static str,
        dir: PathBuf,
        output: String,
    },
    #[error("{0}: {1}")]
    Dsc(PathBuf, String),
    #[error("{file}: sha256 {got}, its .dsc says {want}; remove {dir} to download it again")]
    Checksum {
        file: PathBuf,
        got: String,
        want: String,
        dir: PathBuf,
    },
    #[error("{what} failed, log {log}:\n{tail}")]
    Build { what: String, log: PathBuf, tail: String },
    #[error("no test {0:?}: name one as DIR/PROGRAM of test/mpi, e.g. coll/allred")]
    BadName(String),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SuiteError {
    let what = what.into();
    move |e| SuiteError::Io(what, e)
}

/// MPICH's `test/mpi`, extracted from the cached source package and
/// configured for the system's `mpicc`.
pub struct MpichSuite {
    /// The package's version, e.g. "4.0.2-3".
    pub version: String,
    /// `.../test/mpi`.
    pub dir: PathBuf,
    cache: PathBuf,
}

impl MpichSuite {
    /// The suite from `cache` (see the module's doc), downloading the
    /// source package first if it is not there, extracting and configuring
    /// it if that was not done for this `mpicc`. One process at a time
    /// (a lock file in `cache`).
    pub fn obtain(cache: &Path) -> Result<MpichSuite, SuiteError> {
        let pkg = cache.join("mpich");
        std::fs::create_dir_all(&pkg).map_err(io(format!("creating {}", pkg.display())))?;
        let _lock = lock(cache)?;
        let dsc = match find_dsc(&pkg)? {
            Some(dsc) => dsc,
            None => download(cache, &pkg)?,
        };
        let (version, orig, sha256) = read_dsc(&dsc)?;
        let upstream = version.split('-').next().unwrap_or(&version).to_string();
        let build = pkg.join(format!("build-{upstream}"));
        let dir = build.join("test/mpi");
        let stamp = build.join(".netdam-configured");
        let identity = configure_identity();
        let configured = std::fs::read_to_string(&stamp).is_ok_and(|s| s == identity);
        if !configured {
            if build.exists() {
                std::fs::remove_dir_all(&build).map_err(io(format!("removing {}", build.display())))?;
            }
            std::fs::create_dir_all(&build).map_err(io(format!("creating {}", build.display())))?;
            check_sha256(&pkg.join(&orig), &sha256, &pkg)?;
            eprintln!("MPICH test suite: extracting test/mpi of {orig}");
            run_logged(
                Command::new("tar")
                    .arg("-xf")
                    .arg(pkg.join(&orig))
                    .arg("-C")
                    .arg(&build)
                    .args(["--strip-components=1", "--wildcards", "*/test/mpi/*"]),
                &format!("extracting test/mpi of {orig}"),
                &build.join("extract.log"),
            )?;
            eprintln!(
                "MPICH test suite: configure {} (about a minute)",
                CONFIGURE_ARGS.join(" ")
            );
            run_logged(
                Command::new("./configure").current_dir(&dir).args(CONFIGURE_ARGS),
                "configure of MPICH's test/mpi",
                &build.join("configure.log"),
            )?;
            std::fs::write(&stamp, identity).map_err(io(format!("writing {}", stamp.display())))?;
        }
        Ok(MpichSuite {
            version,
            dir,
            cache: cache.to_path_buf(),
        })
    }

    /// Builds the programs named DIR/PROGRAM (e.g. `coll/allred`) with the
    /// suite's makefiles, unchanged; their paths, in order. `make` redoes
    /// only what changed.
    pub fn build(&self, tests: &[&str]) -> Result<Vec<PathBuf>, SuiteError> {
        let _lock = lock(&self.cache)?;
        let mut paths = Vec::with_capacity(tests.len());
        for t in tests {
            let (sub, program) = t
                .split_once('/')
                .filter(|(d, p)| !d.is_empty() && !p.is_empty() && !p.contains('/'))
                .ok_or_else(|| SuiteError::BadName(t.to_string()))?;
            let sub_dir = self.dir.join(sub);
            if !sub_dir.join(format!("{program}.c")).is_file() {
                return Err(SuiteError::BadName(t.to_string()));
            }
            run_logged(
                Command::new("make").current_dir(&sub_dir).args(["-j2", program]),
                &format!("make {t}"),
                &self.dir.join("make.log"),
            )?;
            paths.push(sub_dir.join(program));
        }
        Ok(paths)
    }
}

/// What the configured tree was made with: configure's arguments and the
/// MPI compiler (another one means configuring again).
fn configure_identity() -> String {
    let show = |arg: &str| {
        Command::new("mpicc")
            .arg(arg)
            .stderr(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    format!(
        "{}\n{}{}",
        CONFIGURE_ARGS.join(" "),
        show("--showme:version"),
        show("--showme")
    )
}

fn lock(cache: &Path) -> Result<Flock<File>, SuiteError> {
    let path = cache.join("mpich.lock");
    let file = File::create(&path).map_err(io(format!("creating {}", path.display())))?;
    Flock::lock(file, FlockArg::LockExclusive)
        .map_err(|(_, e)| SuiteError::Io(format!("locking {}", path.display()), e.into()))
}

/// The `.dsc` of a completed download (the files are moved in after it).
fn find_dsc(pkg: &Path) -> Result<Option<PathBuf>, SuiteError> {
    let entries = std::fs::read_dir(pkg).map_err(io(format!("listing {}", pkg.display())))?;
    Ok(entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "dsc")))
}

/// Downloads the source package into `pkg` through apt with private
/// state; returns its `.dsc`.
fn download(cache: &Path, pkg: &Path) -> Result<PathBuf, SuiteError> {
    if !Path::new(DEBIAN_KEYRING).is_file() {
        return Err(SuiteError::NoKeyring);
    }
    let release = os_release_codename()?;
    let site = debian_site(&release)?;
    let apt = cache.join("apt");
    for d in ["lists/partial", "cache/archives/partial"] {
        let d = apt.join(d);
        std::fs::create_dir_all(&d).map_err(io(format!("creating {}", d.display())))?;
    }
    let sources = apt.join("sources.list");
    std::fs::write(
        &sources,
        format!("deb-src [signed-by={DEBIAN_KEYRING}] {site} {release} main\n"),
    )
    .map_err(io(format!("writing {}", sources.display())))?;
    let apt_get = |step: &'static str, args: &[&str], dir: &Path| -> Result<(), SuiteError> {
        let mut cmd = Command::new("apt-get");
        cmd.current_dir(dir)
            .arg("-q")
            .arg("-o")
            .arg(format!("Dir::Etc::SourceList={}", sources.display()))
            .args(["-o", "Dir::Etc::SourceParts=-"])
            .arg("-o")
            .arg(format!("Dir::State::Lists={}", apt.join("lists").display()))
            .arg("-o")
            .arg(format!("Dir::Cache={}", apt.join("cache").display()))
            // Downloads go to root's cache directory, which apt's sandbox user cannot write.
            .args(["-o", "APT::Sandbox::User=root", "-o", "Acquire::Languages=none"])
            .args(args);
        let out = cmd.output().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SuiteError::Missing("apt-get", "Debian's apt"),
            _ => SuiteError::Io("running apt-get".into(), e),
        })?;
        if !out.status.success() {
            return Err(SuiteError::Apt {
                step,
                dir: apt.clone(),
                output: format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            });
        }
        Ok(())
    };
    eprintln!(
        "MPICH test suite: downloading Debian's mpich source package ({release}) into {}",
        pkg.display()
    );
    // An unreachable archive is only a warning to a plain update.
    apt_get(
        "apt-get update of the private sources list",
        &["update", "--error-on=any"],
        cache,
    )?;
    let incoming = cache.join("mpich.incoming");
    if incoming.exists() {
        std::fs::remove_dir_all(&incoming).map_err(io(format!("removing {}", incoming.display())))?;
    }
    std::fs::create_dir_all(&incoming).map_err(io(format!("creating {}", incoming.display())))?;
    apt_get(
        "apt-get source --download-only mpich",
        &["source", "--download-only", "--only-source", "mpich"],
        &incoming,
    )?;
    // Moved in only once complete: a .dsc in `pkg` means the download finished.
    let entries = std::fs::read_dir(&incoming).map_err(io(format!("listing {}", incoming.display())))?;
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort_by_key(|p| p.extension().is_some_and(|x| x == "dsc"));
    for f in &files {
        let to = pkg.join(f.file_name().unwrap_or_default());
        std::fs::rename(f, &to).map_err(io(format!("moving {} to {}", f.display(), to.display())))?;
    }
    let _ = std::fs::remove_dir(&incoming);
    find_dsc(pkg)?.ok_or_else(|| SuiteError::Apt {
        step: "apt-get source --download-only mpich",
        dir: apt,
        output: "it ended well but left no .dsc".into(),
    })
}

/// The machine's release codename (VERSION_CODENAME of /etc/os-release).
fn os_release_codename() -> Result<String, SuiteError> {
    let text = std::fs::read_to_string("/etc/os-release").map_err(io("reading /etc/os-release"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| SuiteError::NoArchive("(no VERSION_CODENAME in /etc/os-release)".into()))
}

/// The mirror of the machine's `deb` source for `release` itself (not its
/// -updates or -security suites).
fn debian_site(release: &str) -> Result<String, SuiteError> {
    let out = Command::new("apt-get")
        .args(["indextargets", "--format", "$(SITE)", "Identifier: Packages"])
        .arg(format!("Release: {release}"))
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SuiteError::Missing("apt-get", "Debian's apt"),
            _ => SuiteError::Io("running apt-get indextargets".into(), e),
        })?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
        .ok_or_else(|| SuiteError::NoArchive(release.to_string()))
}

/// The `.dsc`'s version, its upstream tarball's name and that tarball's sha256.
fn read_dsc(dsc: &Path) -> Result<(String, String, String), SuiteError> {
    let text = std::fs::read_to_string(dsc).map_err(io(format!("reading {}", dsc.display())))?;
    parse_dsc(&text).map_err(|why| SuiteError::Dsc(dsc.to_path_buf(), why))
}

fn parse_dsc(text: &str) -> Result<(String, String, String), String> {
    let version = text
        .lines()
        .find_map(|l| l.strip_prefix("Version:"))
        .map(|v| v.trim().to_string())
        .ok_or("no Version field")?;
    let (sha256, orig) = text
        .lines()
        .skip_while(|l| !l.starts_with("Checksums-Sha256:"))
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2].contains(".orig.tar.")).then(|| (f[0].to_string(), f[2].to_string()))
        })
        .next()
        .ok_or("no .orig.tar.* among its Checksums-Sha256")?;
    Ok((version, orig, sha256))
}

fn check_sha256(file: &Path, want: &str, pkg: &Path) -> Result<(), SuiteError> {
    let out = Command::new("sha256sum")
        .arg(file)
        .output()
        .map_err(io("running sha256sum"))?;
    let got = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    if !out.status.success() || got != want {
        return Err(SuiteError::Checksum {
            file: file.to_path_buf(),
            got,
            want: want.to_string(),
            dir: pkg.to_path_buf(),
        });
    }
    Ok(())
}

/// Runs `cmd` with its output appended to `log`; on failure the error
/// holds the log's last lines. (Also how `mpi_benchmarks` builds OSU and IMB.)
pub(crate) fn run_logged(cmd: &mut Command, what: &str, log: &Path) -> Result<(), SuiteError> {
    let mut file = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io(format!("opening {}", log.display())))?;
    let _ = writeln!(file, "==> {what}");
    let err = file.try_clone().map_err(io(format!("opening {}", log.display())))?;
    let program = cmd.get_program().to_string_lossy().into_owned();
    let status = cmd.stdout(file).stderr(err).status().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound if program == "make" => SuiteError::Missing("make", "apt-get install make"),
        std::io::ErrorKind::NotFound if program == "tar" => SuiteError::Missing("tar", "apt-get install tar xz-utils"),
        _ => SuiteError::Io(format!("running {program}"), e),
    })?;
    if status.success() {
        return Ok(());
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    Err(SuiteError::Build {
        what: what.to_string(),
        log: log.to_path_buf(),
        tail: lines[lines.len().saturating_sub(30)..].join("\n"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dsc_names_the_upstream_tarball_and_its_sha256() {
        let dsc = "Format: 3.0 (quilt)\nSource: mpich\nVersion: 4.0.2-3\nChecksums-Sha1:\n \
                   1111 21800484 mpich_4.0.2.orig.tar.xz\nChecksums-Sha256:\n \
                   abcd 21800484 mpich_4.0.2.orig.tar.xz\n ef01 339140 mpich_4.0.2-3.debian.tar.xz\nFiles:\n \
                   9999 21800484 mpich_4.0.2.orig.tar.xz\n";
        assert_eq!(
            parse_dsc(dsc).unwrap(),
            ("4.0.2-3".into(), "mpich_4.0.2.orig.tar.xz".into(), "abcd".into())
        );
        assert!(parse_dsc("Version: 1\n").unwrap_err().contains("Checksums-Sha256"));
        assert!(parse_dsc("Checksums-Sha256:\n a 1 x.orig.tar.xz\n")
            .unwrap_err()
            .contains("Version"));
    }
}
