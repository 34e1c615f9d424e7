//! The kernel setting `serve` turns on for CHAIN on the served interface
//! (accept_local, for chain answers to this very host), put back even when
//! the controller dies without cleaning up. IPv4 forwarding, which the
//! FIB-based next hops of earlier versions needed, is no longer turned on
//! (next hops are the peers' bound MACs); a record of it left by an earlier
//! version is restored at the next start.
//!
//! The original values are written to a record under /run before anything
//! changes, so a SIGKILL, a crash or a power cut cannot lose them: the next
//! `serve` on the same pin directory keeps the recorded originals (instead
//! of saving the "1" it finds), and a clean exit or `netdam unpin` writes
//! them back and removes the record. /run is a tmpfs, emptied at boot, when
//! the settings return to their defaults too. The record names the network
//! namespace it was made in: settings are per namespace, so it is restored
//! only from there.

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Where the records live (a tmpfs: gone at boot, as the settings are).
pub const RECORD_DIR: &str = "/run/netdam/sysctls";

/// What `serve` turns on, and why (for the log).
const SETTINGS: [(&str, &str); 1] = [(
    "accept_local",
    "accepting its own address as a source, for chain answers to this host",
)];

#[derive(Debug, Error)]
pub enum SysctlError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the saved settings {path} are unreadable ({detail}): check them by hand, then remove the file")]
    Corrupt { path: PathBuf, detail: String },
    #[error(
        "the settings saved in {path} belong to another network namespace: run this inside the node's \
         namespace (ip netns exec NS ...) to restore them"
    )]
    OtherNamespace { path: PathBuf },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Saved {
    path: PathBuf,
    original: String,
}

#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    /// Inode of the network namespace the settings belong to.
    netns: u64,
    settings: Vec<Saved>,
}

/// The settings turned on for a served interface; restored on drop.
#[derive(Debug)]
pub struct ChainSysctls {
    record: PathBuf,
    saved: Vec<Saved>,
}

/// The record of the node pinned in `pin_dir`: one file per pin directory.
pub fn record_path(pin_dir: &Path) -> PathBuf {
    super::pins::state_path(RECORD_DIR, pin_dir)
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> SysctlError + 'a {
    move |source| SysctlError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// The calling thread's network namespace.
fn netns() -> Result<u64, SysctlError> {
    let ns = Path::new("/proc/thread-self/ns/net");
    Ok(std::fs::metadata(ns).map_err(io("reading", ns))?.ino())
}

fn read_record(path: &Path) -> Result<Option<Record>, SysctlError> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| SysctlError::Corrupt {
            path: path.to_path_buf(),
            detail: e.to_string(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("reading", path)(e)),
    }
}

fn write_record(path: &Path, record: &Record) -> Result<(), SysctlError> {
    let dir = path.parent().expect("records have a directory");
    std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    // Whole or not at all: a rename over the old record.
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(record).expect("plain data")).map_err(io("writing", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("writing", path))
}

fn write_setting(s: &Saved) -> Result<(), SysctlError> {
    std::fs::write(&s.path, s.original.trim()).map_err(io("restoring", &s.path))
}

impl ChainSysctls {
    /// Turns the settings on for `iface`, first recording the originals for
    /// the node pinned in `pin_dir` (or keeping those an earlier, killed
    /// controller recorded).
    pub fn turn_on(iface: &str, pin_dir: &Path) -> Result<ChainSysctls, SysctlError> {
        let record = record_path(pin_dir);
        let netns = netns()?;
        let earlier = match read_record(&record)? {
            Some(r) if r.netns == netns => {
                log::warn!(
                    "a controller of {} did not restore its kernel settings (killed?): keeping the originals saved in {}",
                    pin_dir.display(),
                    record.display()
                );
                r.settings
            }
            _ => Vec::new(),
        };
        // Settings an earlier version turned on and this one does not.
        for s in earlier
            .iter()
            .filter(|s| !SETTINGS.iter().any(|(n, _)| s.path.ends_with(n)))
        {
            write_setting(s)?;
            log::info!("restored {} to {}", s.path.display(), s.original.trim());
        }
        let mut saved = Vec::new();
        for (name, _) in SETTINGS {
            let path = PathBuf::from(format!("/proc/sys/net/ipv4/conf/{iface}/{name}"));
            let now = std::fs::read_to_string(&path).map_err(io("reading", &path))?;
            let original = earlier
                .iter()
                .find(|s| s.path == path)
                .map_or(now, |s| s.original.clone());
            if original.trim() != "1" {
                saved.push(Saved { path, original });
            }
        }
        let guard = ChainSysctls { record, saved };
        if guard.saved.is_empty() {
            // Nothing to restore: no record either.
            guard.remove_record()?;
        } else {
            write_record(
                &guard.record,
                &Record {
                    netns,
                    settings: guard.saved.clone(),
                },
            )?;
        }
        for s in &guard.saved {
            std::fs::write(&s.path, "1").map_err(io("turning on", &s.path))?;
            let why = SETTINGS
                .iter()
                .find(|(n, _)| s.path.ends_with(n))
                .map_or("", |(_, w)| w);
            log::info!("turned on {why} ({}; restored on exit)", s.path.display());
        }
        Ok(guard)
    }

    fn remove_record(&self) -> Result<(), SysctlError> {
        match std::fs::remove_file(&self.record) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("removing", &self.record)(e)),
            _ => Ok(()),
        }
    }

    /// Puts the original values back and removes the record.
    pub fn restore(mut self) -> Result<(), SysctlError> {
        self.restore_in_place()
    }

    fn restore_in_place(&mut self) -> Result<(), SysctlError> {
        for s in std::mem::take(&mut self.saved) {
            write_setting(&s)?;
        }
        self.remove_record()
    }
}

impl Drop for ChainSysctls {
    fn drop(&mut self) {
        if let Err(e) = self.restore_in_place() {
            log::warn!("{e}");
        }
    }
}

/// Restores what a controller of the node pinned in `pin_dir` recorded and
/// did not put back (`netdam unpin`); the settings restored.
pub fn restore_recorded(pin_dir: &Path) -> Result<Vec<PathBuf>, SysctlError> {
    let path = record_path(pin_dir);
    let Some(record) = read_record(&path)? else {
        return Ok(Vec::new());
    };
    if record.netns != netns()? {
        return Err(SysctlError::OtherNamespace { path });
    }
    for s in &record.settings {
        write_setting(s)?;
    }
    std::fs::remove_file(&path).map_err(io("removing", &path))?;
    Ok(record.settings.into_iter().map(|s| s.path).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_record_per_pin_directory() {
        assert_eq!(
            record_path(Path::new("/sys/fs/bpf/netdam/eth0")),
            Path::new("/run/netdam/sysctls/sys%fs%bpf%netdam%eth0.json")
        );
        assert_ne!(
            record_path(Path::new("/sys/fs/bpf/a/b")),
            record_path(Path::new("/sys/fs/bpf/a_b"))
        );
    }

    #[test]
    fn records_round_trip_and_corruption_is_named() {
        let dir = std::env::temp_dir().join(format!("netdam-sysctl-test-{}", std::process::id()));
        let path = dir.join("r.json");
        let r = Record {
            netns: 4026531840,
            settings: vec![Saved {
                path: "/proc/sys/net/ipv4/conf/eth0/forwarding".into(),
                original: "0\n".into(),
            }],
        };
        write_record(&path, &r).unwrap();
        assert_eq!(read_record(&path).unwrap(), Some(r));
        std::fs::write(&path, "{").unwrap();
        let e = read_record(&path).unwrap_err().to_string();
        assert!(e.contains("unreadable") && e.contains("r.json"), "{e}");
        assert_eq!(read_record(&dir.join("none.json")).unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
