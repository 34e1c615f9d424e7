//! `netdam serve`'s settings from a TOML file (`--config`, e.g.
//! /etc/netdam/netdam.toml; dist/netdam.toml is a commented example).
//! Each key is named as serve's flag (`mem-size` for --mem-size), except the
//! repeatable ones: `peers = [...]` and `[[region]]` tables. A flag given on
//! the command line wins over the file (a list flag replaces the file's
//! list). Unknown keys are errors, so that a typo never silently leaves a
//! setting at its default.

use std::{
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
};

use netdam_common::{
    config::{MEM_CHUNK, MEM_MAX},
    region::perms_from_letters,
    wire::DEFAULT_PORT,
    Region,
};
use thiserror::Error;
use toml::{Table, Value};

use crate::{
    args::{parse_number, parse_size, perm_letters},
    controller::{keys::RegionArg, pins, AttachMode, ControllerError, NodeSpec},
};

/// Where the systemd unit (dist/netdam.service) reads the config.
pub const DEFAULT_PATH: &str = "/etc/netdam/netdam.toml";

/// The top-level keys of the file.
pub const KEYS: &[&str] = &[
    "iface",
    "port",
    "mem-size",
    "mode",
    "ip",
    "peers",
    "region",
    "verify-csum",
    "bad-key-limit",
    "window-sources",
    "window-per-source",
    "window-idle",
    "pin-dir",
    "metrics",
];
/// The keys of a `[[region]]` table.
pub const REGION_KEYS: &[&str] = &["key", "base", "size", "perms"];

/// Defaults of what neither a flag nor the file sets.
pub const DEFAULT_MEM_SIZE: u64 = 64 << 20;
pub const DEFAULT_BAD_KEY_LIMIT: u32 = 100;
pub const DEFAULT_WINDOW_SOURCES: u32 = 1024;
pub const DEFAULT_WINDOW_IDLE: u64 = 30;
/// --window-sources' bounds (the controller bounds the table further).
pub const WINDOW_SOURCES_MAX: u32 = 1_000_000;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("reading the config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{path}: unknown key `{key}`{hint}; the keys are {known}")]
    UnknownKey {
        path: PathBuf,
        key: String,
        /// ", did you mean `x`?" when a known key is close.
        hint: String,
        known: String,
    },
    #[error("{path}: `{key} = {value}` is not valid: {expected}")]
    BadValue {
        path: PathBuf,
        key: String,
        value: String,
        expected: String,
    },
    #[error("{path}: region {index} has no `{key}` (a region needs base, size and perms; key is optional)")]
    RegionMissing {
        path: PathBuf,
        index: usize,
        key: &'static str,
    },
    #[error("no interface to serve: pass --iface IF, or set `iface = \"IF\"` in the config file")]
    NoIface,
    /// What loading would refuse (`ServeSettings::check`).
    #[error("{source}{stand_ins}")]
    Refused {
        #[source]
        source: Box<ControllerError>,
        /// Which keys stood in for random ones, if any did.
        stand_ins: String,
    },
}

/// serve's settings as one source (the command line, or a file) gives
/// them: `None` where it says nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServeConfig {
    pub iface: Option<String>,
    pub port: Option<u16>,
    pub mem_size: Option<u64>,
    pub mode: Option<AttachMode>,
    pub ip: Option<Ipv4Addr>,
    pub peers: Option<Vec<Ipv4Addr>>,
    pub regions: Option<Vec<RegionArg>>,
    pub verify_csum: Option<bool>,
    pub bad_key_limit: Option<u32>,
    pub window_sources: Option<u32>,
    pub window_per_source: Option<u32>,
    pub window_idle: Option<u64>,
    pub pin_dir: Option<PathBuf>,
    pub metrics: Option<SocketAddr>,
}

/// serve's settings, every one decided.
#[derive(Clone, Debug, PartialEq)]
pub struct ServeSettings {
    pub iface: String,
    pub port: u16,
    pub mem_size: u64,
    pub mode: AttachMode,
    pub ip: Option<Ipv4Addr>,
    pub peers: Vec<Ipv4Addr>,
    pub regions: Vec<RegionArg>,
    pub verify_csum: bool,
    pub bad_key_limit: u32,
    pub window_sources: u32,
    pub window_per_source: u32,
    pub window_idle: u64,
    pub pin_dir: PathBuf,
    pub metrics: Option<SocketAddr>,
}

impl ServeConfig {
    /// Reads and checks the config file at `path`.
    pub fn load(path: &Path) -> Result<ServeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        ServeConfig::parse(&text, path)
    }

    /// Parses the text of the config file `path` (named in the errors).
    pub fn parse(text: &str, path: &Path) -> Result<ServeConfig, ConfigError> {
        let table: Table = text.parse().map_err(|e: toml::de::Error| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let f = File { path };
        let mut c = ServeConfig::default();
        for (key, v) in &table {
            match key.as_str() {
                "iface" => c.iface = Some(f.string(key, v, "the interface's name, e.g. \"eth0\"")?.to_string()),
                "port" => {
                    c.port = Some(f.int(
                        key,
                        v,
                        1,
                        u16::MAX as u64,
                        &format!("a UDP port, 1 to 65535 (e.g. {DEFAULT_PORT})"),
                    )? as u16)
                }
                "mem-size" => {
                    let m = f.size(key, v)?;
                    if m == 0 || !m.is_multiple_of(MEM_CHUNK as u64) || m > MEM_MAX {
                        return Err(f.bad(key, v, "a multiple of 64KiB from 64KiB to 2GiB, e.g. \"64MiB\""));
                    }
                    c.mem_size = Some(m);
                }
                "mode" => {
                    const MODES: &str = "\"native\" (driver XDP), \"skb\" (generic XDP) or \"auto\" (native, else skb)";
                    c.mode = Some(match v.as_str() {
                        Some("native") => AttachMode::Native,
                        Some("skb") => AttachMode::Skb,
                        Some("auto") => AttachMode::Auto,
                        _ => return Err(f.bad(key, v, MODES)),
                    })
                }
                "ip" => c.ip = Some(f.ipv4(key, v)?),
                "peers" => {
                    let list = v.as_array().ok_or_else(|| {
                        f.bad(
                            key,
                            v,
                            "a list of IPv4 addresses, e.g. [\"198.18.0.2\", \"198.18.0.3\"]",
                        )
                    })?;
                    c.peers = Some(
                        list.iter()
                            .enumerate()
                            .map(|(i, p)| f.ipv4(&format!("peers[{i}]"), p))
                            .collect::<Result<_, _>>()?,
                    );
                }
                "region" => c.regions = Some(f.regions(v)?),
                "verify-csum" => c.verify_csum = Some(v.as_bool().ok_or_else(|| f.bad(key, v, "true or false"))?),
                "bad-key-limit" => {
                    c.bad_key_limit = Some(f.int(
                        key,
                        v,
                        0,
                        u32::MAX as u64,
                        "BAD_KEY answers per second per source address, 0 (unlimited) to 4294967295",
                    )? as u32)
                }
                "window-sources" => {
                    c.window_sources = Some(f.int(
                        key,
                        v,
                        1,
                        WINDOW_SOURCES_MAX as u64,
                        &format!("the sources the window table holds, 1 to {WINDOW_SOURCES_MAX}"),
                    )? as u32)
                }
                "window-per-source" => {
                    c.window_per_source = Some(f.int(
                        key,
                        v,
                        1,
                        u32::MAX as u64,
                        "the windows one source address may hold, 1 to window-sources",
                    )? as u32)
                }
                "window-idle" => {
                    c.window_idle = Some(f.int(key, v, 1, u64::MAX >> 1, "seconds, 1 or more (e.g. 30)")?)
                }
                "pin-dir" => {
                    const DIR: &str = "an absolute path on a bpffs, e.g. \"/sys/fs/bpf/netdam/eth0\"";
                    let s = f.string(key, v, DIR)?;
                    if !s.starts_with('/') {
                        return Err(f.bad(key, v, DIR));
                    }
                    c.pin_dir = Some(PathBuf::from(s));
                }
                "metrics" => {
                    const ADDR: &str = "an address and port to serve /metrics on, e.g. \"127.0.0.1:9464\"";
                    let s = f.string(key, v, ADDR)?;
                    c.metrics = Some(s.parse().map_err(|_| f.bad(key, v, ADDR))?);
                }
                _ => return Err(f.unknown(key, key, KEYS)),
            }
        }
        Ok(c)
    }

    /// These settings, with `file`'s where these say nothing.
    pub fn over(self, file: ServeConfig) -> ServeConfig {
        ServeConfig {
            iface: self.iface.or(file.iface),
            port: self.port.or(file.port),
            mem_size: self.mem_size.or(file.mem_size),
            mode: self.mode.or(file.mode),
            ip: self.ip.or(file.ip),
            peers: self.peers.or(file.peers),
            regions: self.regions.or(file.regions),
            verify_csum: self.verify_csum.or(file.verify_csum),
            bad_key_limit: self.bad_key_limit.or(file.bad_key_limit),
            window_sources: self.window_sources.or(file.window_sources),
            window_per_source: self.window_per_source.or(file.window_per_source),
            window_idle: self.window_idle.or(file.window_idle),
            pin_dir: self.pin_dir.or(file.pin_dir),
            metrics: self.metrics.or(file.metrics),
        }
    }

    /// Fills in the defaults; the interface is the one setting without one.
    pub fn resolve(self) -> Result<ServeSettings, ConfigError> {
        let iface = self.iface.ok_or(ConfigError::NoIface)?;
        let window_sources = self.window_sources.unwrap_or(DEFAULT_WINDOW_SOURCES);
        Ok(ServeSettings {
            port: self.port.unwrap_or(DEFAULT_PORT),
            mem_size: self.mem_size.unwrap_or(DEFAULT_MEM_SIZE),
            mode: self.mode.unwrap_or(AttachMode::Auto),
            ip: self.ip,
            peers: self.peers.unwrap_or_default(),
            regions: self.regions.unwrap_or_default(),
            verify_csum: self.verify_csum.unwrap_or(false),
            bad_key_limit: self.bad_key_limit.unwrap_or(DEFAULT_BAD_KEY_LIMIT),
            window_per_source: self.window_per_source.unwrap_or((window_sources / 4).max(1)),
            window_sources,
            window_idle: self.window_idle.unwrap_or(DEFAULT_WINDOW_IDLE),
            pin_dir: self.pin_dir.unwrap_or_else(|| pins::default_dir(&iface)),
            metrics: self.metrics,
            iface,
        })
    }
}

impl ServeSettings {
    /// What loading these settings would refuse (`NodeSpec::check`), found
    /// without loading: a region without a key stands in with a key no
    /// other region has. The interface's own address and MTU are not checked.
    pub fn check(&self) -> Result<(), ConfigError> {
        let mut stand_in = 0u32;
        let regions: Vec<(u32, Region)> = self
            .regions
            .iter()
            .map(|r| {
                let key = r.rkey.unwrap_or_else(|| loop {
                    stand_in += 1;
                    if !self.regions.iter().any(|o| o.rkey == Some(stand_in)) {
                        break stand_in;
                    }
                });
                (key, r.region)
            })
            .collect();
        NodeSpec {
            port: self.port,
            mem_size: self.mem_size,
            mac: [0; 6],
            ipv4: self.ip.unwrap_or(Ipv4Addr::UNSPECIFIED),
            mtu: 0,
            regions: regions.clone(),
            peers: self.peers.clone(),
            verify_csum: self.verify_csum,
            window_sources: self.window_sources,
            window_per_source: self.window_per_source,
            bad_key_limit: self.bad_key_limit,
            // The interface is not looked at; any valid count stands in.
            queue_slots: 1,
        }
        .check()
        .map_err(|source| {
            let stood: Vec<String> = regions
                .iter()
                .zip(&self.regions)
                .filter(|(_, r)| r.rkey.is_none())
                .map(|((k, r), _)| format!("{k:#x} for the region at {:#x}", r.base))
                .collect();
            ConfigError::Refused {
                source: Box::new(source),
                stand_ins: match stood.is_empty() {
                    true => String::new(),
                    false => format!(" (a region without a key is named by a stand-in: {})", stood.join(", ")),
                },
            }
        })
    }

    /// The settings as the config file writes them (every key, defaults
    /// included; a random key as "random"), for `serve --check`.
    pub fn to_toml(&self) -> Table {
        let mut t = Table::new();
        let int = |n: u64| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
        t.insert("iface".into(), self.iface.clone().into());
        t.insert("port".into(), int(self.port.into()));
        t.insert("mem-size".into(), int(self.mem_size));
        let mode = match self.mode {
            AttachMode::Native => "native",
            AttachMode::Skb => "skb",
            AttachMode::Auto => "auto",
        };
        t.insert("mode".into(), mode.into());
        if let Some(ip) = self.ip {
            t.insert("ip".into(), ip.to_string().into());
        }
        let peers: Vec<Value> = self.peers.iter().map(|p| p.to_string().into()).collect();
        t.insert("peers".into(), peers.into());
        t.insert("verify-csum".into(), self.verify_csum.into());
        t.insert("bad-key-limit".into(), int(self.bad_key_limit.into()));
        t.insert("window-sources".into(), int(self.window_sources.into()));
        t.insert("window-per-source".into(), int(self.window_per_source.into()));
        t.insert("window-idle".into(), int(self.window_idle));
        t.insert("pin-dir".into(), self.pin_dir.display().to_string().into());
        if let Some(m) = self.metrics {
            t.insert("metrics".into(), m.to_string().into());
        }
        let regions: Vec<Value> = self
            .regions
            .iter()
            .map(|r| {
                let mut rt = Table::new();
                let key = r.rkey.map_or("random".to_string(), |k| format!("{k:#x}"));
                rt.insert("key".into(), key.into());
                rt.insert("base".into(), int(r.region.base));
                rt.insert("size".into(), int(r.region.size));
                rt.insert("perms".into(), perm_letters(r.region.perms).into());
                Value::Table(rt)
            })
            .collect();
        t.insert("region".into(), regions.into());
        t
    }

    /// The settings that differ in `new` and that a running serve cannot
    /// take (the interface, the memory's size, the window table's size,
    /// what the data path answers on, where the maps and metrics live), as
    /// (key, now, new): a reload that changes one needs a restart.
    pub fn restart_needed(&self, new: &ServeSettings) -> Vec<(&'static str, String, String)> {
        let show_ip = |ip: Option<Ipv4Addr>| ip.map_or("the interface's".to_string(), |i| i.to_string());
        let show_addr = |a: Option<SocketAddr>| a.map_or("none".to_string(), |a| a.to_string());
        let pairs = [
            ("iface", self.iface.clone(), new.iface.clone()),
            ("port", self.port.to_string(), new.port.to_string()),
            ("mem-size", self.mem_size.to_string(), new.mem_size.to_string()),
            ("mode", format!("{:?}", self.mode), format!("{:?}", new.mode)),
            ("ip", show_ip(self.ip), show_ip(new.ip)),
            (
                "window-sources",
                self.window_sources.to_string(),
                new.window_sources.to_string(),
            ),
            (
                "pin-dir",
                self.pin_dir.display().to_string(),
                new.pin_dir.display().to_string(),
            ),
            ("metrics", show_addr(self.metrics), show_addr(new.metrics)),
        ];
        pairs.into_iter().filter(|(_, a, b)| a != b).collect()
    }
}

/// The file being read, for errors that name it.
struct File<'a> {
    path: &'a Path,
}

impl File<'_> {
    fn bad(&self, key: &str, v: &Value, expected: &str) -> ConfigError {
        ConfigError::BadValue {
            path: self.path.to_path_buf(),
            key: key.to_string(),
            value: v.to_string(),
            expected: expected.to_string(),
        }
    }

    /// `shown` (e.g. region[0].prems) is not a key: `bare` (prems) is none of `known`.
    fn unknown(&self, shown: &str, bare: &str, known: &[&str]) -> ConfigError {
        // The usual slips: snake_case for kebab-case, or the flag's singular/plural.
        let kebab = bare.replace('_', "-");
        let close = [
            kebab.clone(),
            format!("{kebab}s"),
            kebab.trim_end_matches('s').to_string(),
        ]
        .into_iter()
        .find(|k| k != bare && known.contains(&k.as_str()));
        ConfigError::UnknownKey {
            path: self.path.to_path_buf(),
            key: shown.to_string(),
            hint: close.map_or(String::new(), |k| {
                format!(", did you mean `{}`?", shown.replace(bare, &k))
            }),
            known: known.join(", "),
        }
    }

    fn string<'v>(&self, key: &str, v: &'v Value, expected: &str) -> Result<&'v str, ConfigError> {
        v.as_str().ok_or_else(|| self.bad(key, v, expected))
    }

    fn int(&self, key: &str, v: &Value, min: u64, max: u64, expected: &str) -> Result<u64, ConfigError> {
        v.as_integer()
            .and_then(|i| u64::try_from(i).ok())
            .filter(|i| (min..=max).contains(i))
            .ok_or_else(|| self.bad(key, v, expected))
    }

    fn ipv4(&self, key: &str, v: &Value) -> Result<Ipv4Addr, ConfigError> {
        v.as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| self.bad(key, v, "an IPv4 address in quotes, e.g. \"198.18.0.2\""))
    }

    /// Bytes: an integer, or a string with a unit ("64MiB", "0x1000").
    fn size(&self, key: &str, v: &Value) -> Result<u64, ConfigError> {
        let n = match v {
            Value::Integer(i) => u64::try_from(*i).ok(),
            Value::String(s) => parse_size(s).ok(),
            _ => None,
        };
        n.ok_or_else(|| {
            self.bad(
                key,
                v,
                "bytes: an integer, or a string with a unit (B, KiB, MiB, GiB), e.g. \"64MiB\"",
            )
        })
    }

    fn regions(&self, v: &Value) -> Result<Vec<RegionArg>, ConfigError> {
        const SHAPE: &str = "a list of tables: [[region]] with key (optional), base, size and perms";
        let list = v.as_array().ok_or_else(|| self.bad("region", v, SHAPE))?;
        list.iter()
            .enumerate()
            .map(|(i, r)| {
                let t = r
                    .as_table()
                    .ok_or_else(|| self.bad(&format!("region[{i}]"), r, SHAPE))?;
                self.region(i, t)
            })
            .collect()
    }

    fn region(&self, index: usize, t: &Table) -> Result<RegionArg, ConfigError> {
        let name = |k: &str| format!("region[{index}].{k}");
        if let Some(k) = t.keys().find(|k| !REGION_KEYS.contains(&k.as_str())) {
            let mut e = self.unknown(&name(k), k, REGION_KEYS);
            // TOML puts every key after a [[region]] line into that region.
            if let (ConfigError::UnknownKey { hint, .. }, true) = (&mut e, KEYS.contains(&k.as_str())) {
                *hint = format!(" (`{k}` is a top-level key: put it above the first [[region]])");
            }
            return Err(e);
        }
        let field = |k: &'static str| {
            t.get(k).ok_or(ConfigError::RegionMissing {
                path: self.path.to_path_buf(),
                index,
                key: k,
            })
        };
        let rkey = match t.get("key") {
            None => None,
            Some(Value::String(s)) if s == "random" => None,
            Some(v) => {
                const KEY: &str = "a 32-bit key, 0 to 0xffffffff, as an integer or a string (\"0x1234\"), \
                                   or \"random\" (or no key) for a random one";
                let n = match v {
                    Value::Integer(i) => u64::try_from(*i).ok(),
                    Value::String(s) => parse_number(s).ok(),
                    _ => None,
                };
                let k = n
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| self.bad(&name("key"), v, KEY))?;
                Some(k)
            }
        };
        let base = self.size(&name("base"), field("base")?)?;
        let size_value = field("size")?;
        let size = self.size(&name("size"), size_value)?;
        if size == 0 {
            return Err(self.bad(&name("size"), size_value, "a size above 0"));
        }
        let perms_value = field("perms")?;
        const PERMS: &str = "permission letters in a string: r=READ w=WRITE a=ATOMIC m=MSG, e.g. \"rwam\"";
        let perms = perms_value
            .as_str()
            .and_then(|s| perms_from_letters(s).ok())
            .ok_or_else(|| self.bad(&name("perms"), perms_value, PERMS))?;
        Ok(RegionArg {
            rkey,
            region: Region {
                base,
                size,
                perms,
                _reserved: 0,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netdam_common::region::perm;

    const PATH: &str = "/etc/netdam/netdam.toml";

    fn parse(text: &str) -> Result<ServeConfig, ConfigError> {
        ServeConfig::parse(text, Path::new(PATH))
    }

    fn error(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn every_key_parses() {
        let c = parse(
            r#"
            iface = "eth1"
            port = 4794
            mem-size = "128MiB"
            mode = "native"
            ip = "198.18.0.1"
            peers = ["198.18.0.2", "198.18.0.3"]
            verify-csum = true
            bad-key-limit = 0
            window-sources = 2048
            window-per-source = 16
            window-idle = 60
            pin-dir = "/sys/fs/bpf/netdam/n1"
            metrics = "127.0.0.1:9464"

            [[region]]
            key = "0x1234"
            base = 0
            size = "4MiB"
            perms = "rwam"

            [[region]]
            base = "4MiB"
            size = 4096
            perms = "r"
            "#,
        )
        .unwrap();
        assert_eq!(c.iface.as_deref(), Some("eth1"));
        assert_eq!(
            (c.port, c.mem_size, c.mode),
            (Some(4794), Some(128 << 20), Some(AttachMode::Native))
        );
        assert_eq!(c.ip, Some(Ipv4Addr::new(198, 18, 0, 1)));
        assert_eq!(c.peers.as_ref().unwrap().len(), 2);
        assert_eq!((c.verify_csum, c.bad_key_limit), (Some(true), Some(0)));
        assert_eq!(
            (c.window_sources, c.window_per_source, c.window_idle),
            (Some(2048), Some(16), Some(60))
        );
        assert_eq!(c.pin_dir, Some(PathBuf::from("/sys/fs/bpf/netdam/n1")));
        assert_eq!(c.metrics, Some("127.0.0.1:9464".parse().unwrap()));
        let r = c.regions.unwrap();
        assert_eq!(
            (r[0].rkey, r[0].region.base, r[0].region.size, r[0].region.perms),
            (Some(0x1234), 0, 4 << 20, perm::ALL)
        );
        assert_eq!(
            (r[1].rkey, r[1].region.base, r[1].region.size, r[1].region.perms),
            (None, 4 << 20, 4096, perm::READ)
        );
        // An empty file sets nothing; "random" is no key.
        assert_eq!(parse("").unwrap(), ServeConfig::default());
        let random = parse("[[region]]\nkey = \"random\"\nbase = 0\nsize = 1\nperms = \"r\"").unwrap();
        assert_eq!(random.regions.unwrap()[0].rkey, None);
    }

    #[test]
    fn flags_override_the_file_and_defaults_fill_the_rest() {
        let file =
            parse("iface = \"eth1\"\nport = 4794\npeers = [\"198.18.0.2\", \"198.18.0.3\"]\nwindow-sources = 400")
                .unwrap();
        let flags = ServeConfig {
            port: Some(5000),
            peers: Some(vec![Ipv4Addr::new(10, 0, 0, 9)]),
            ..ServeConfig::default()
        };
        let s = flags.over(file).resolve().unwrap();
        assert_eq!(s.iface, "eth1");
        assert_eq!(s.port, 5000);
        // A list flag replaces the file's list.
        assert_eq!(s.peers, [Ipv4Addr::new(10, 0, 0, 9)]);
        assert_eq!(s.mem_size, DEFAULT_MEM_SIZE);
        assert_eq!((s.window_sources, s.window_per_source), (400, 100));
        assert_eq!(s.pin_dir, PathBuf::from("/sys/fs/bpf/netdam/eth1"));
        assert_eq!((s.mode, s.metrics, s.bad_key_limit), (AttachMode::Auto, None, 100));
        assert_eq!(
            ServeConfig::default().resolve().unwrap_err().to_string(),
            "no interface to serve: pass --iface IF, or set `iface = \"IF\"` in the config file"
        );
    }

    #[test]
    fn unknown_keys_are_named_with_the_file() {
        assert_eq!(
            error("mem_size = \"64MiB\""),
            "/etc/netdam/netdam.toml: unknown key `mem_size`, did you mean `mem-size`?; the keys are iface, port, \
             mem-size, mode, ip, peers, region, verify-csum, bad-key-limit, window-sources, window-per-source, \
             window-idle, pin-dir, metrics"
        );
        assert!(error("peer = []").starts_with("/etc/netdam/netdam.toml: unknown key `peer`, did you mean `peers`?;"));
        assert!(error("colour = 1").starts_with("/etc/netdam/netdam.toml: unknown key `colour`; the keys are iface,"));
        assert_eq!(
            error("[[region]]\nbase = 0\nsize = 1\nprems = \"r\""),
            "/etc/netdam/netdam.toml: unknown key `region[0].prems`; the keys are key, base, size, perms"
        );
        assert_eq!(
            error("[[region]]\nbase = 0\nsize = 1\nperms = \"r\"\nmetrics = \"127.0.0.1:9464\""),
            "/etc/netdam/netdam.toml: unknown key `region[0].metrics` (`metrics` is a top-level key: put it above \
             the first [[region]]); the keys are key, base, size, perms"
        );
    }

    #[test]
    fn bad_values_name_the_key_the_value_and_what_is_right() {
        let cases = [
            ("port = 0", "`port = 0` is not valid: a UDP port, 1 to 65535 (e.g. 4793)"),
            ("port = \"4793\"", "`port = \"4793\"` is not valid: a UDP port, 1 to 65535 (e.g. 4793)"),
            (
                "mem-size = \"64XB\"",
                "`mem-size = \"64XB\"` is not valid: bytes: an integer, or a string with a unit (B, KiB, MiB, GiB), e.g. \"64MiB\"",
            ),
            (
                "mem-size = 100000",
                "`mem-size = 100000` is not valid: a multiple of 64KiB from 64KiB to 2GiB, e.g. \"64MiB\"",
            ),
            (
                "mem-size = \"4GiB\"",
                "`mem-size = \"4GiB\"` is not valid: a multiple of 64KiB from 64KiB to 2GiB, e.g. \"64MiB\"",
            ),
            (
                "mode = \"fast\"",
                "`mode = \"fast\"` is not valid: \"native\" (driver XDP), \"skb\" (generic XDP) or \"auto\" (native, else skb)",
            ),
            (
                "peers = [\"198.18.0.2\", \"198.18.0\"]",
                "`peers[1] = \"198.18.0\"` is not valid: an IPv4 address in quotes, e.g. \"198.18.0.2\"",
            ),
            ("verify-csum = \"yes\"", "`verify-csum = \"yes\"` is not valid: true or false"),
            (
                "window-sources = 0",
                "`window-sources = 0` is not valid: the sources the window table holds, 1 to 1000000",
            ),
            (
                "pin-dir = \"netdam\"",
                "`pin-dir = \"netdam\"` is not valid: an absolute path on a bpffs, e.g. \"/sys/fs/bpf/netdam/eth0\"",
            ),
            (
                "metrics = \"localhost\"",
                "`metrics = \"localhost\"` is not valid: an address and port to serve /metrics on, e.g. \"127.0.0.1:9464\"",
            ),
            (
                "[[region]]\nbase = 0\nsize = 0\nperms = \"r\"",
                "`region[0].size = 0` is not valid: a size above 0",
            ),
            (
                "[[region]]\nbase = 0\nsize = 1\nperms = \"rx\"",
                "`region[0].perms = \"rx\"` is not valid: permission letters in a string: r=READ w=WRITE a=ATOMIC m=MSG, e.g. \"rwam\"",
            ),
            (
                "[[region]]\nkey = 0x100000000\nbase = 0\nsize = 1\nperms = \"r\"",
                "`region[0].key = 4294967296` is not valid: a 32-bit key, 0 to 0xffffffff, as an integer or a string \
                 (\"0x1234\"), or \"random\" (or no key) for a random one",
            ),
            (
                "region = \"0:4MiB:rw\"",
                "`region = \"0:4MiB:rw\"` is not valid: a list of tables: [[region]] with key (optional), base, size and perms",
            ),
        ];
        for (text, message) in cases {
            assert_eq!(error(text), format!("{PATH}: {message}"), "{text}");
        }
        assert_eq!(
            error("[[region]]\nbase = 0\nperms = \"r\""),
            "/etc/netdam/netdam.toml: region 0 has no `size` (a region needs base, size and perms; key is optional)"
        );
        let syntax = error("port = ");
        assert!(
            syntax.starts_with("/etc/netdam/netdam.toml is not valid TOML: TOML parse error at line 1"),
            "{syntax}"
        );
        let missing = ServeConfig::load(Path::new("/nonexistent/netdam.toml"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            missing,
            "reading the config file /nonexistent/netdam.toml: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn check_finds_what_loading_would_refuse_and_to_toml_reads_back() {
        let s = parse(
            "iface = \"eth0\"\nmem-size = \"1MiB\"\npeers = [\"10.0.0.2\"]\n\
             [[region]]\nkey = 7\nbase = 0\nsize = 4096\nperms = \"rw\"\n\
             [[region]]\nbase = 4096\nsize = 4096\nperms = \"r\"",
        )
        .unwrap()
        .resolve()
        .unwrap();
        s.check().unwrap();
        // What is printed parses back to the same settings.
        let text = toml::to_string(&s.to_toml()).unwrap();
        let again = ServeConfig::parse(&text, Path::new("printed"))
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(again, s, "{text}");
        assert!(text.contains("key = \"random\""), "{text}");
        let mut outside = s.clone();
        outside.regions[1].region.base = 1 << 20;
        assert_eq!(
            outside.check().unwrap_err().to_string(),
            "region 0x1 [0x100000, +0x1000) does not lie inside the 1048576-byte NetDAM memory (a region \
             without a key is named by a stand-in: 0x1 for the region at 0x100000)"
        );
        let mut overlapping = s.clone();
        overlapping.regions[1].region.base = 100;
        assert!(matches!(
            overlapping.check(),
            Err(ConfigError::Refused { source, .. }) if matches!(*source, ControllerError::RegionsOverlap { a: 7, b: 1, .. })
        ));
        let per_source = ServeSettings {
            window_per_source: 2000,
            ..s
        };
        assert!(per_source
            .check()
            .unwrap_err()
            .to_string()
            .starts_with("--window-per-source 2000: give 1 to"));
    }

    #[test]
    fn the_shipped_example_parses() {
        let c = ServeConfig::parse(include_str!("../../dist/netdam.toml"), Path::new("dist/netdam.toml")).unwrap();
        let s = c.resolve().unwrap();
        assert_eq!(
            (s.iface.as_str(), s.mode, s.mem_size),
            ("eth0", AttachMode::Native, 256 << 20)
        );
        assert_eq!((s.peers.len(), s.regions.len()), (2, 2));
        assert_eq!((s.regions[0].rkey, s.regions[1].rkey), (None, Some(0x5eed1e55)));
        assert_eq!(s.metrics, Some("127.0.0.1:9464".parse().unwrap()));
    }

    #[test]
    fn a_reload_names_what_needs_a_restart() {
        let base = parse("iface = \"eth0\"\n[[region]]\nbase = 0\nsize = 1\nperms = \"r\"").unwrap();
        let now = base.clone().resolve().unwrap();
        let live = ServeConfig {
            peers: Some(vec![Ipv4Addr::new(198, 18, 0, 2)]),
            bad_key_limit: Some(5),
            window_idle: Some(9),
            ..ServeConfig::default()
        };
        assert!(now
            .restart_needed(&live.over(base.clone()).resolve().unwrap())
            .is_empty());
        let moved = ServeConfig {
            mem_size: Some(128 << 20),
            port: Some(9),
            ..ServeConfig::default()
        };
        assert_eq!(
            now.restart_needed(&moved.over(base).resolve().unwrap()),
            [
                ("port", "4793".to_string(), "9".to_string()),
                ("mem-size", (64u64 << 20).to_string(), (128u64 << 20).to_string())
            ]
        );
    }
}
