//! netdam_settings_load: the defaults, then the TOML file named by
//! $NETDAM_CONFIG, then the NETDAM_* variables, each over the one before.
//! The file's keys are the variables' names without NETDAM_, in lower case
//! with dashes (`scratch-len` for NETDAM_SCRATCH_LEN), as in serve's file;
//! unknown keys are errors, so that a typo never leaves a default in place.
//! An empty variable counts as unset.

use std::{
    ffi::{c_char, c_int},
    path::{Path, PathBuf},
};

use netdam_common::wire::DEFAULT_PORT;
use netdam_user::{
    args::{parse_number, parse_rkey, parse_size},
    collective::CollectiveConfig,
    controller::pins,
};
use thiserror::Error;
use toml::Value;

use crate::{
    error::{call, Error},
    group::netdam_group_config,
    required,
};

/// Bytes of the scratch area unless set: the sync area and three parts (input, output, cells) of about 1.3 MiB.
pub const DEFAULT_SCRATCH_LEN: u64 = 4 << 20;
/// netdam_settings.pin_dir's bytes, its NUL included.
const PIN_DIR_LEN: usize = 256;

/// netdam_settings.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct netdam_settings {
    pub pin_dir: [c_char; PIN_DIR_LEN],
    pub group: netdam_group_config,
    pub min_bytes: u64,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum SettingsError {
    #[error("{setting} is not valid: {right}")]
    Value { setting: String, right: &'static str },
    #[error("NETDAM_CONFIG={path}: {what}")]
    File { path: PathBuf, what: String },
    #[error(
        "the pin dir {0} is set but no region key: set NETDAM_RKEY (or rkey in the $NETDAM_CONFIG file) to the \
         key of the region that holds the scratch area at every member"
    )]
    NoRkey(PathBuf),
}

impl From<SettingsError> for Error {
    fn from(e: SettingsError) -> Error {
        Error::arg(e.to_string())
    }
}

/// What the variables and the file set, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub pin_dir: Option<PathBuf>,
    pub rkey: Option<u32>,
    /// Its rkey is `rkey` or 0.
    pub group: netdam_group_config,
    pub min_bytes: u64,
}

impl Default for Settings {
    fn default() -> Settings {
        let c = CollectiveConfig::default();
        Settings {
            pin_dir: None,
            rkey: None,
            group: netdam_group_config {
                port: DEFAULT_PORT,
                rkey: 0,
                scratch_addr: 0,
                scratch_len: DEFAULT_SCRATCH_LEN,
                // The node's.
                mtu: 0,
                timeout_ms: c.timeout.as_millis() as u32,
                retries: c.retries,
                patience_ms: c.patience.as_millis() as u32,
            },
            min_bytes: 0,
        }
    }
}

/// The settings, by variable name; the file's key is derived from it.
/// Within a layer, later keys win: the pin dir over the interface's.
const VARS: [&str; 11] = [
    "NETDAM_IFACE",
    "NETDAM_PIN_DIR",
    "NETDAM_RKEY",
    "NETDAM_SCRATCH_ADDR",
    "NETDAM_SCRATCH_LEN",
    "NETDAM_PORT",
    "NETDAM_MTU",
    "NETDAM_TIMEOUT_MS",
    "NETDAM_RETRIES",
    "NETDAM_PATIENCE_MS",
    "NETDAM_MIN_BYTES",
];

/// `scratch-len` for NETDAM_SCRATCH_LEN.
fn file_key(var: &str) -> String {
    var.trim_start_matches("NETDAM_").to_ascii_lowercase().replace('_', "-")
}

/// A u32 of milliseconds or a count, 1 and up (0 would read as netdam.h's default).
fn positive_u32(v: &str) -> Option<u32> {
    parse_number(v).ok()?.try_into().ok().filter(|n| *n > 0)
}

impl Settings {
    /// Sets what `var` names to `v`; what a right value is when it is not one.
    fn set(&mut self, var: &str, v: &str) -> Result<(), &'static str> {
        let g = &mut self.group;
        match var {
            "NETDAM_IFACE" => {
                let ok = !v.is_empty() && v.len() < 16 && !v.contains(['/', '\0']) && !v.contains(char::is_whitespace);
                ok.then(|| self.pin_dir = Some(pins::default_dir(v)))
                    .ok_or("give an interface name (1 to 15 characters, no '/' or spaces)")
            }
            "NETDAM_PIN_DIR" => (!v.is_empty() && v.len() < PIN_DIR_LEN && !v.contains('\0'))
                .then(|| self.pin_dir = Some(PathBuf::from(v)))
                .ok_or("give the node's pin directory (`netdam serve --pin-dir`), 1 to 255 bytes"),
            "NETDAM_RKEY" => parse_rkey(v)
                .map(|k| self.rkey = Some(k))
                .map_err(|_| "give the region's key, a u32 in decimal or 0x-hex"),
            "NETDAM_SCRATCH_ADDR" => parse_size(v)
                .ok()
                .filter(|a| a.is_multiple_of(8))
                .map(|a| g.scratch_addr = a)
                .ok_or("give an 8-byte aligned address in the node's memory, e.g. 0, 0x10000 or 64KiB"),
            "NETDAM_SCRATCH_LEN" => parse_size(v)
                .ok()
                .filter(|n| *n > 0)
                .map(|n| g.scratch_len = n)
                .ok_or("give the scratch area's bytes, e.g. 4194304, 0x400000 or 4MiB"),
            "NETDAM_PORT" => parse_number(v)
                .ok()
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p > 0)
                .map(|p| g.port = p)
                .ok_or("give the members' UDP port, 1 to 65535"),
            "NETDAM_MTU" => parse_number(v)
                .ok()
                .filter(|m| *m == 0 || (100..=9216).contains(m))
                .map(|m| g.mtu = m as u32)
                .ok_or("give the IP MTU of the group's paths, 100 to 9216 (0: the node's)"),
            "NETDAM_TIMEOUT_MS" => positive_u32(v)
                .map(|t| g.timeout_ms = t)
                .ok_or("give milliseconds per chunk attempt, 1 to 4294967295"),
            "NETDAM_RETRIES" => positive_u32(v)
                .map(|r| g.retries = r)
                .ok_or("give the resends of a chunk, 1 to 4294967295"),
            "NETDAM_PATIENCE_MS" => positive_u32(v)
                .map(|p| g.patience_ms = p)
                .ok_or("give milliseconds to wait for the other members, 1 to 4294967295"),
            "NETDAM_MIN_BYTES" => parse_size(v)
                .map(|b| self.min_bytes = b)
                .map_err(|_| "give bytes, e.g. 0, 65536 or 64KiB"),
            _ => unreachable!("{var} is one of VARS"),
        }
    }

    /// Applies the variables of `vars` that `env` sets.
    fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>, vars: &[&str]) -> Result<(), SettingsError> {
        for var in vars {
            if let Some(v) = env(var).filter(|v| !v.is_empty()) {
                self.set(var, &v).map_err(|right| SettingsError::Value {
                    setting: format!("{var}={v:?}"),
                    right,
                })?;
            }
        }
        Ok(())
    }

    /// Applies the TOML file at `path`.
    fn apply_file(&mut self, path: &Path) -> Result<(), SettingsError> {
        let file = |what: String| SettingsError::File {
            path: path.to_path_buf(),
            what,
        };
        let text = std::fs::read_to_string(path).map_err(|e| file(format!("cannot read it: {e}")))?;
        let table: toml::Table = text.parse().map_err(|e| file(format!("not TOML: {e}")))?;
        let keys: Vec<String> = VARS.iter().map(|v| file_key(v)).collect();
        if let Some(k) = table.keys().find(|k| !keys.contains(k)) {
            return Err(file(format!("unknown key {k:?}: the keys are {}", keys.join(", "))));
        }
        for (var, key) in VARS.iter().zip(&keys) {
            let Some(value) = table.get(key) else { continue };
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Integer(i) => i.to_string(),
                _ => return Err(file(format!("{key} = {value}: give a string or an integer"))),
            };
            self.set(var, &text).map_err(|right| SettingsError::Value {
                setting: format!("{key} = {value} in {}", path.display()),
                right,
            })?;
        }
        Ok(())
    }

    /// Defaults, the file named by NETDAM_CONFIG, then the variables, all read through `env`.
    pub fn load(env: &dyn Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
        let mut s = Settings::default();
        if let Some(path) = env("NETDAM_CONFIG").filter(|p| !p.is_empty()) {
            s.apply_file(Path::new(&path))?;
        }
        s.apply_env(env, &VARS)?;
        match (&s.pin_dir, s.rkey) {
            (Some(dir), None) => return Err(SettingsError::NoRkey(dir.clone())),
            (_, rkey) => s.group.rkey = rkey.unwrap_or(0),
        }
        Ok(s)
    }
}

/// The pin dir that NETDAM_PIN_DIR or NETDAM_IFACE (read through `env`) names, if any.
pub fn pin_dir_from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<PathBuf>, SettingsError> {
    let mut s = Settings::default();
    s.apply_env(env, &["NETDAM_IFACE", "NETDAM_PIN_DIR"])?;
    Ok(s.pin_dir)
}

#[no_mangle]
pub unsafe extern "C" fn netdam_settings_load(out: *mut netdam_settings) -> c_int {
    call(|| {
        let out = required(out, "out")?;
        let s = Settings::load(&|v| std::env::var(v).ok())?;
        let mut pin_dir = [0 as c_char; PIN_DIR_LEN];
        let dir = s
            .pin_dir
            .as_deref()
            .map(|d| d.as_os_str().as_encoded_bytes())
            .unwrap_or_default();
        // Shorter than PIN_DIR_LEN (`set`), so the NUL stays.
        for (c, b) in pin_dir.iter_mut().zip(dir) {
            *c = *b as c_char;
        }
        // SAFETY: netdam.h: points at a netdam_settings.
        unsafe {
            out.write(netdam_settings {
                pin_dir,
                group: s.group,
                min_bytes: s.min_bytes,
            })
        };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn load(vars: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        let env: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings::load(&|v| env.get(v).cloned())
    }

    fn file(name: &str, text: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("netdam-capi-{}-{name}.toml", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn defaults_without_anything_set() {
        let s = load(&[]).unwrap();
        assert_eq!(s, Settings::default());
        assert_eq!(s.pin_dir, None);
        let g = s.group;
        assert_eq!(
            (g.port, g.rkey, g.scratch_addr, g.scratch_len, g.mtu),
            (4793, 0, 0, 4 << 20, 0)
        );
        assert_eq!(
            (g.timeout_ms, g.retries, g.patience_ms, s.min_bytes),
            (200, 10, 30_000, 0)
        );
    }

    #[test]
    fn variables_over_the_file_over_the_defaults() {
        let f = file(
            "layers",
            "iface = \"eth0\"\nrkey = \"0x1234\"\nscratch-len = \"1MiB\"\nport = 5000\nmtu = 9000\nmin-bytes = 4096\n",
        );
        let path = f.to_str().unwrap();
        let s = load(&[("NETDAM_CONFIG", path)]).unwrap();
        assert_eq!(s.pin_dir.as_deref(), Some(Path::new("/sys/fs/bpf/netdam/eth0")));
        assert_eq!(
            (s.group.rkey, s.group.scratch_len, s.group.port),
            (0x1234, 1 << 20, 5000)
        );
        assert_eq!((s.group.mtu, s.min_bytes, s.group.retries), (9000, 4096, 10));
        let s = load(&[
            ("NETDAM_CONFIG", path),
            ("NETDAM_IFACE", "veth1"),
            ("NETDAM_PORT", "0x1000"),
            ("NETDAM_SCRATCH_ADDR", "64KiB"),
            ("NETDAM_TIMEOUT_MS", "50"),
            ("NETDAM_RETRIES", "3"),
            ("NETDAM_PATIENCE_MS", "1000"),
            ("NETDAM_MTU", ""),
        ])
        .unwrap();
        assert_eq!(s.pin_dir.as_deref(), Some(Path::new("/sys/fs/bpf/netdam/veth1")));
        let g = s.group;
        assert_eq!((g.port, g.scratch_addr, g.scratch_len), (0x1000, 65536, 1 << 20));
        assert_eq!((g.timeout_ms, g.retries, g.patience_ms), (50, 3, 1000));
        assert_eq!(g.mtu, 9000, "an empty variable is unset");
        // The pin dir wins over the interface, in the same layer.
        let s = load(&[
            ("NETDAM_CONFIG", path),
            ("NETDAM_PIN_DIR", "/sys/fs/bpf/x"),
            ("NETDAM_IFACE", "veth1"),
        ])
        .unwrap();
        assert_eq!(s.pin_dir.as_deref(), Some(Path::new("/sys/fs/bpf/x")));
        std::fs::remove_file(f).unwrap();
    }

    #[test]
    fn bad_values_name_the_variable_or_key_the_value_and_what_is_right() {
        let bad = |vars: &[(&str, &str)]| load(vars).unwrap_err().to_string();
        assert_eq!(
            bad(&[("NETDAM_PORT", "70000")]),
            "NETDAM_PORT=\"70000\" is not valid: give the members' UDP port, 1 to 65535"
        );
        assert!(bad(&[("NETDAM_MTU", "50")]).starts_with("NETDAM_MTU=\"50\" is not valid: give the IP MTU"));
        assert!(bad(&[("NETDAM_SCRATCH_ADDR", "12")]).contains("8-byte aligned"));
        assert!(bad(&[("NETDAM_SCRATCH_LEN", "lots")]).starts_with("NETDAM_SCRATCH_LEN=\"lots\""));
        assert!(bad(&[("NETDAM_RETRIES", "0")]).contains("1 to 4294967295"));
        assert!(bad(&[("NETDAM_TIMEOUT_MS", "4294967296")]).starts_with("NETDAM_TIMEOUT_MS"));
        assert!(bad(&[("NETDAM_RKEY", "0x1_0000_0000")]).contains("a u32"));
        assert!(bad(&[("NETDAM_IFACE", "a/b")]).starts_with("NETDAM_IFACE=\"a/b\""));
        assert!(bad(&[("NETDAM_PIN_DIR", &"x".repeat(256))]).contains("1 to 255 bytes"));
        assert_eq!(
            bad(&[("NETDAM_IFACE", "eth0")]),
            "the pin dir /sys/fs/bpf/netdam/eth0 is set but no region key: set NETDAM_RKEY (or rkey in the \
             $NETDAM_CONFIG file) to the key of the region that holds the scratch area at every member"
        );
        let f = file("bad", "port = 70000\n");
        let e = bad(&[("NETDAM_CONFIG", f.to_str().unwrap())]);
        assert_eq!(
            e,
            format!(
                "port = 70000 in {} is not valid: give the members' UDP port, 1 to 65535",
                f.display()
            )
        );
        std::fs::write(&f, "scratch_len = 5\n").unwrap();
        let e = bad(&[("NETDAM_CONFIG", f.to_str().unwrap())]);
        assert!(
            e.contains("unknown key \"scratch_len\": the keys are iface, pin-dir, rkey, scratch-addr"),
            "{e}"
        );
        std::fs::write(&f, "mtu = 1.5\n").unwrap();
        assert!(bad(&[("NETDAM_CONFIG", f.to_str().unwrap())]).ends_with("mtu = 1.5: give a string or an integer"));
        std::fs::write(&f, "mtu = \n").unwrap();
        assert!(bad(&[("NETDAM_CONFIG", f.to_str().unwrap())]).contains(": not TOML: "));
        std::fs::remove_file(&f).unwrap();
        assert!(bad(&[("NETDAM_CONFIG", f.to_str().unwrap())]).contains(": cannot read it: "));
    }

    #[test]
    fn the_node_s_pin_dir_from_the_environment() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |v: &str| vars.iter().find(|(k, _)| *k == v).map(|(_, x)| x.to_string())
        };
        assert_eq!(pin_dir_from_env(&env(&[])).unwrap(), None);
        assert_eq!(
            pin_dir_from_env(&env(&[("NETDAM_IFACE", "eth1"), ("NETDAM_RKEY", "bad")])).unwrap(),
            Some(PathBuf::from("/sys/fs/bpf/netdam/eth1")),
            "only the pin dir's variables are read"
        );
        assert!(pin_dir_from_env(&env(&[("NETDAM_IFACE", "")])).unwrap().is_none());
    }

    #[test]
    fn c_layout_of_the_settings() {
        // What netdam.h's structs are on x86_64 and aarch64 Linux (the C test prints them too).
        assert_eq!(std::mem::size_of::<netdam_group_config>(), 40);
        assert_eq!(std::mem::offset_of!(netdam_group_config, scratch_addr), 8);
        assert_eq!(std::mem::offset_of!(netdam_group_config, patience_ms), 36);
        assert_eq!(std::mem::offset_of!(netdam_settings, group), 256);
        assert_eq!(std::mem::size_of::<netdam_settings>(), 304);
    }
}
