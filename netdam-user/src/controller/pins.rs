//! The pin directory of a node: where its maps live between runs.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use aya::maps::MapData;

use super::{queues::PER_QUEUE_MAPS, ControllerError, INJECTOR_PINS, PINNED_MAPS};

/// bpffs magic number (statfs f_type).
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// The default pin directory of a node attached to `iface`.
pub fn default_dir(iface: &str) -> PathBuf {
    PathBuf::from("/sys/fs/bpf/netdam").join(iface)
}

/// Creates `dir` on a bpffs.
pub fn prepare_dir(dir: &Path) -> Result<(), ControllerError> {
    let mut probe = dir.to_path_buf();
    while !probe.exists() {
        if !probe.pop() {
            break;
        }
    }
    let fs = nix::sys::statfs::statfs(&probe)
        .map_err(|e| ControllerError::Io(format!("statfs {}", probe.display()), e.into()))?;
    if fs.filesystem_type().0 as i64 != BPF_FS_MAGIC {
        return Err(ControllerError::NoBpffs(probe));
    }
    std::fs::create_dir_all(dir).map_err(|e| ControllerError::Io(format!("create {}", dir.display()), e))
}

/// Checks every map already pinned in `dir` against the object's
/// definition (with `max_entries` overrides). Returns whether any was found.
/// A per-queue map (`queues::PER_QUEUE_MAPS`) that differs only in its
/// slots (the interface has another queue count) is unpinned once all the
/// others match, so that the load pins one of the right size: nothing in it
/// must outlive a reload.
pub fn check_compatible(dir: &Path, object: &[u8], overrides: &HashMap<&str, u32>) -> Result<bool, ControllerError> {
    let obj = aya_obj::Object::parse(object).map_err(|e| ControllerError::Load {
        hint: "the embedded XDP object does not parse".into(),
        detail: e.to_string(),
    })?;
    let mut found = false;
    let mut resized = Vec::new();
    for name in PINNED_MAPS {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        found = true;
        let def = obj.maps.get(name).expect("pinned maps are defined in the object");
        let want_entries = overrides.get(name).copied().unwrap_or(def.max_entries());
        let info = MapData::from_pin(&path)
            .and_then(|m| m.info())
            .map_err(|e| ControllerError::Map(name, e))?;
        let have = (
            info.map_type().map(|t| t as u32).unwrap_or(u32::MAX),
            info.key_size(),
            info.value_size(),
            info.max_entries(),
            info.map_flags(),
        );
        let want = (
            def.map_type(),
            def.key_size(),
            def.value_size(),
            want_entries,
            def.map_flags(),
        );
        let same_but_slots = (have.0, have.1, have.2, have.4) == (want.0, want.1, want.2, want.4);
        if have != want && same_but_slots && PER_QUEUE_MAPS.contains(&name) {
            resized.push((path, have.3, want.3));
            continue;
        }
        if have != want {
            let show = |t: (u32, u32, u32, u32, u32)| {
                format!(
                    "type {} key {} B value {} B max_entries {} flags {:#x}",
                    t.0, t.1, t.2, t.3, t.4
                )
            };
            return Err(ControllerError::PinnedLayoutMismatch {
                path,
                dir: dir.to_path_buf(),
                found: show(have),
                wanted: show(want),
            });
        }
    }
    for (path, had, now) in resized {
        std::fs::remove_file(&path).map_err(|e| ControllerError::Io(format!("remove {}", path.display()), e))?;
        log::warn!(
            "{} had {had} receive queue slot(s), the interface now has {now}: replaced by a new map \
             (AF_XDP endpoints opened before must be opened again; per-queue counts start at 0)",
            path.display()
        );
    }
    Ok(found)
}

/// A file of the node pinned in `pin_dir` kept under `dir` (bpffs holds
/// maps and programs only): named after the pin directory, `/` as `%`.
pub fn state_path(dir: &str, pin_dir: &Path) -> PathBuf {
    let name: String = pin_dir
        .to_string_lossy()
        .trim_matches('/')
        .chars()
        .map(|c| if c == '/' { '%' } else { c })
        .collect();
    Path::new(dir).join(format!("{name}.json"))
}

/// Removes the node's pinned maps (and its injector) and, if then empty,
/// the directory. Returns what was removed.
pub fn unpin(dir: &Path) -> Result<Vec<PathBuf>, ControllerError> {
    let mut removed = Vec::new();
    for name in PINNED_MAPS.iter().chain(&INJECTOR_PINS) {
        let p = dir.join(name);
        if p.exists() {
            std::fs::remove_file(&p).map_err(|e| ControllerError::Io(format!("remove {}", p.display()), e))?;
            removed.push(p);
        }
    }
    let keys = super::keys::keys_path(dir);
    if keys.exists() {
        std::fs::remove_file(&keys).map_err(|e| ControllerError::Io(format!("remove {}", keys.display()), e))?;
        removed.push(keys);
    }
    let _ = std::fs::remove_dir(dir);
    Ok(removed)
}
