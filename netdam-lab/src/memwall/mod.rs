//! `netdam-lab bench memwall`: the seed's DDIO and memory-wall tests in
//! software, on a two-host testbed (host 0 sends, host 1 serves NetDAM).
//!
//! 1. Bandwidth under I/O: a STREAM probe (`probe`) runs on a chosen core
//!    while traffic arrives at a chosen rate in each delivery mode; per mode
//!    the probe's bandwidth as a fraction of idle, the bytes the receive
//!    path handed the host per payload byte, and the delivered rate.
//! 2. Hold-time sweep: the application (`receive`) holds each message for a
//!    time before reading its payload; the read cost and throughput per
//!    hold time and mode.
//! 3. Memory-controller counters beside each row where the host has them
//!    (`hwcounters`); otherwise it says why, once.

mod hwcounters;
mod probe;
pub mod receive;
mod traffic;

use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

pub use hwcounters::{HwCounters, MemTraffic};
pub use probe::{Bandwidth, Probe};
use serde::Serialize;
use thiserror::Error;

use netdam_user::{
    afxdp::XskError,
    controller::{
        split::{RingSpec, SplitTable},
        ControllerError, LocalNode,
    },
    stats::Stats,
};

use crate::testbed::{Testbed, TestbedError};

pub const RKEY: u32 = 0x1234;
/// The kernel UDP socket's port (mode socket).
pub const SOCKET_PORT: u16 = 9100;
/// The split port (mode split) and the payload bytes it keeps.
pub const SPLIT_PORT: u16 = 9200;
pub const SPLIT_KEEP: u32 = 64;

/// How a message reaches the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Plain UDP into a kernel socket, copied into the application's buffer (recvmmsg).
    Socket,
    /// NetDAM MSG: the whole frame into AF_XDP UMEM.
    AfXdp,
    /// NetDAM WRITE: the payload into NetDAM memory; the host is not told.
    Write,
    /// NetDAM WRITE_NOTIFY: the payload into NetDAM memory, the headers to the host.
    WriteNotify,
    /// Header split: the first 64 payload bytes to the host, the rest into NetDAM memory.
    Split,
}

impl Mode {
    pub const ALL: [Mode; 5] = [Mode::Socket, Mode::AfXdp, Mode::Write, Mode::WriteNotify, Mode::Split];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Socket => "socket",
            Mode::AfXdp => "af_xdp",
            Mode::Write => "write",
            Mode::WriteNotify => "write_notify",
            Mode::Split => "split",
        }
    }
}

#[derive(Debug, Error)]
pub enum MemwallError {
    #[error(transparent)]
    Testbed(#[from] TestbedError),
    #[error(transparent)]
    Controller(#[from] ControllerError),
    #[error(transparent)]
    Xsk(#[from] XskError),
    #[error("setting up header split: {0}")]
    Split(#[from] netdam_user::controller::split::SplitError),
    #[error("the traffic generator: {0}")]
    Generator(String),
    #[error("the receiver: {0}")]
    Receiver(String),
    #[error("--{0}")]
    Config(String),
}

#[derive(Clone, Debug, Serialize)]
pub struct MemwallConfig {
    /// Payload bytes per message.
    pub size: usize,
    /// Messages per second the generator sends (0: as fast as it can).
    pub rate: u64,
    /// Seconds per measurement.
    pub secs: f64,
    /// Hold times of the sweep.
    pub holds_us: Vec<u64>,
    /// Bytes of each of the probe's three arrays.
    pub probe_bytes: usize,
    /// Core the probe is pinned to.
    pub probe_core: Option<usize>,
    /// Test host name prefix.
    pub prefix: String,
}

impl MemwallConfig {
    /// The seed's hold times, 10 us to 100 ms, 1 KiB messages at 100,000 per
    /// second (0.8 Gbit/s of payload), 3 s per measurement, 64 MiB arrays.
    pub fn full() -> MemwallConfig {
        MemwallConfig {
            size: 1024,
            rate: 100_000,
            secs: 3.0,
            holds_us: vec![10, 50, 100, 1_000, 10_000, 100_000],
            probe_bytes: 64 << 20,
            probe_core: Some(1),
            prefix: "mw".into(),
        }
    }

    /// The smoke configuration (the tests use it): every row, 0.2 s each.
    pub fn quick() -> MemwallConfig {
        MemwallConfig {
            rate: 20_000,
            secs: 0.2,
            probe_bytes: 8 << 20,
            ..MemwallConfig::full()
        }
    }

    fn check(&self) -> Result<(), MemwallError> {
        let max = 1500 - 28 - 32;
        if self.size == 0 || self.size > max {
            return Err(MemwallError::Config(format!(
                "size {} is not valid: 1 to {max} bytes (a NetDAM message in a 1500-byte MTU)",
                self.size
            )));
        }
        if self.secs.is_nan() || self.secs <= 0.0 {
            return Err(MemwallError::Config(format!(
                "secs {} is not valid: give a positive time",
                self.secs
            )));
        }
        Ok(())
    }

    /// Measurements `run` makes: two idle probes, one per mode, one per mode and hold.
    pub fn measurements(&self) -> usize {
        2 + Mode::ALL.len() * (1 + self.holds_us.len())
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct BandwidthRow {
    pub mode: Mode,
    /// Messages per second the generator sent and the receiver took.
    pub sent_per_s: f64,
    pub delivered_per_s: f64,
    /// The probe under this traffic, and as a fraction of idle.
    pub probe: Bandwidth,
    pub copy_retained: f64,
    pub triad_retained: f64,
    /// Bytes the receive path handed the host per payload byte delivered.
    pub host_bytes_per_payload_byte: f64,
    /// The same per message.
    pub host_bytes_per_message: f64,
    /// Memory-controller traffic, where the host has counters.
    pub memory: Option<MemTraffic>,
}

#[derive(Clone, Debug, Serialize)]
pub struct HoldRow {
    pub mode: Mode,
    pub hold_us: u64,
    /// Messages read per second after their hold.
    pub consumed_per_s: f64,
    /// Nanoseconds per KiB of payload read after the hold (None: the host is
    /// not told of the message, so it has nothing to read).
    pub read_ns_per_kib: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemwallReport {
    pub config: MemwallConfig,
    pub cpus: usize,
    pub kernel: String,
    /// Why memory-controller counters are missing (None: they were read).
    pub hw_counters_missing: Option<String>,
    pub idle: Bandwidth,
    pub bandwidth: Vec<BandwidthRow>,
    pub holds: Vec<HoldRow>,
}

/// One measurement's raw figures.
pub struct Measured {
    /// Seconds the traffic ran.
    pub elapsed: f64,
    /// Messages the generator sent.
    pub sent: u64,
    /// What the receiving application did.
    pub consumed: receive::Consumed,
    /// WRITEs the node executed (mode write: its deliveries).
    pub writes: u64,
    pub probe: Option<Bandwidth>,
    pub memory: Option<MemTraffic>,
    /// CPU time all CPUs spent busy (not idle) while the traffic ran, ns:
    /// generator, kernel paths, receiver, everything.
    pub machine_busy_ns: u64,
}

impl Measured {
    /// Busy CPU time of the whole machine per delivered message, ns.
    pub fn machine_ns_per_message(&self, mode: Mode) -> f64 {
        self.machine_busy_ns as f64 / (self.delivered_per_s(mode) * self.elapsed).max(1.0)
    }

    /// CPU time of the receiving application's thread per message, ns.
    pub fn receiver_ns_per_message(&self) -> f64 {
        self.consumed.cpu_ns as f64 / self.consumed.messages.max(1) as f64
    }

    /// Messages that reached their destination per second: the
    /// application's for the modes that tell it, the node's for WRITE.
    pub fn delivered_per_s(&self, mode: Mode) -> f64 {
        let n = if mode == Mode::Write {
            self.writes
        } else {
            self.consumed.messages
        };
        n as f64 / self.elapsed
    }

    pub fn sent_per_s(&self) -> f64 {
        self.sent as f64 / self.elapsed
    }

    /// Bytes the receive path handed the host per message.
    pub fn host_bytes_per_message(&self) -> f64 {
        self.consumed.delivered_bytes as f64 / self.consumed.messages.max(1) as f64
    }
}

/// What one measurement sends and how the application receives it.
#[derive(Clone, Copy, Debug)]
pub struct Traffic {
    pub mode: Mode,
    /// Payload bytes per message.
    pub size: usize,
    /// Messages per second (0: as fast as the generator goes).
    pub rate: u64,
    /// How long the application holds each message before reading it.
    pub hold: Duration,
    pub time: Duration,
}

/// The two-host testbed the measurements run on: host 0 sends, host 1
/// serves NetDAM (64 MiB, region 0x1234 over the low 32 MiB with rwm, port
/// 9200 split with 64 bytes kept, the ring above the region) and receives.
pub struct Rig {
    tb: Testbed,
    served: Option<crate::testbed::Served>,
    hw: HwCounters,
}

impl Rig {
    /// Builds the testbed (hosts PREFIX0 and PREFIX1) and serves NetDAM on
    /// host 1 with the `netdam` binary given.
    pub fn up(prefix: &str, netdam: &Path) -> Result<Rig, MemwallError> {
        let tb = Testbed::up(prefix, 2, 1500)?;
        let serve_args: Vec<String> = [
            "--mem-size",
            "64MiB",
            "--region",
            &format!("{RKEY:#x}:0:32MiB:rwm"),
            "--mode",
            "native",
        ]
        .map(String::from)
        .to_vec();
        let served = tb.serve(1, netdam, &serve_args)?;
        let node = LocalNode::open(&tb.hosts[1].pin_dir)?;
        SplitTable::open(&tb.hosts[1].pin_dir)?.add(
            &node.config,
            SPLIT_PORT,
            SPLIT_KEEP,
            &RingSpec {
                slots: Some(4096),
                ..Default::default()
            },
        )?;
        Ok(Rig {
            tb,
            served: Some(served),
            hw: HwCounters::detect(),
        })
    }

    /// Why there are no memory-controller counters, if there are none.
    pub fn hw_counters_missing(&self) -> Option<String> {
        match &self.hw {
            HwCounters::Missing(why) => Some(why.clone()),
            HwCounters::Available { .. } => None,
        }
    }

    /// Sends `t` and receives it; with a probe, runs it meanwhile (and reads
    /// the memory-controller counters where the host has them).
    pub fn measure(&mut self, t: &Traffic, probe: Option<&mut Probe>) -> Result<Measured, MemwallError> {
        let (mode, hold) = (t.mode, t.hold);
        let pin_dir = self.tb.hosts[1].pin_dir.clone();
        let stop_rx = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let netns = format!("/run/netns/{}", self.tb.hosts[1].netns);
        let receiver = {
            let stop = stop_rx.clone();
            std::thread::spawn(move || -> Result<receive::Consumed, MemwallError> {
                let f = std::fs::File::open(&netns).map_err(|e| MemwallError::Receiver(format!("{netns}: {e}")))?;
                nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(|e| MemwallError::Receiver(format!("entering {netns}: {e}")))?;
                receive::receive(mode, &pin_dir, hold, &stop, move || {
                    let _ = ready_tx.send(());
                })
            })
        };
        if ready.recv_timeout(Duration::from_secs(10)).is_err() {
            stop_rx.store(true, Ordering::Relaxed);
            return Err(receiver
                .join()
                .expect("receiver thread")
                .err()
                .unwrap_or_else(|| MemwallError::Receiver("did not start within 10 s".into())));
        }
        let writes_before = self.writes()?;
        let stop_tx = Arc::new(AtomicBool::new(false));
        let gen = traffic::spawn(
            &self.tb.hosts[0].netns,
            traffic::frame(mode, t.size),
            t.rate,
            stop_tx.clone(),
        );
        let start = Instant::now();
        let busy_before = crate::cpu::machine_busy_ns();
        let (probe, memory) = match probe {
            Some(p) => {
                let perf = self.hw.start(t.time);
                let bw = p.run(t.time);
                (Some(bw), perf.and_then(|c| HwCounters::finish(c, t.time)))
            }
            None => {
                std::thread::sleep(t.time);
                (None, None)
            }
        };
        stop_tx.store(true, Ordering::Relaxed);
        let machine_busy_ns = crate::cpu::machine_busy_ns().saturating_sub(busy_before);
        let sent = gen.join().expect("generator thread");
        let elapsed = start.elapsed().as_secs_f64();
        // Let the last frames arrive and their holds end before the receiver stops.
        if sent.is_ok() {
            std::thread::sleep(hold + Duration::from_millis(20));
        }
        stop_rx.store(true, Ordering::Relaxed);
        let consumed = receiver.join().expect("receiver thread");
        let (sent, consumed) = (sent?, consumed?);
        let writes = self.writes()? - writes_before;
        Ok(Measured {
            elapsed,
            sent,
            consumed,
            writes,
            probe,
            memory,
            machine_busy_ns,
        })
    }

    fn writes(&self) -> Result<u64, MemwallError> {
        Ok(Stats::read_pinned(&self.tb.hosts[1].pin_dir)?.requests("WRITE", netdam_common::Status::Ok))
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(s) = self.served.take() {
            s.stop();
        }
    }
}

/// Runs the memory-wall bench; `progress(done, total, what)` before each measurement.
pub fn run(
    cfg: &MemwallConfig,
    netdam: &Path,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<MemwallReport, MemwallError> {
    cfg.check()?;
    let mut rig = Rig::up(&cfg.prefix, netdam)?;
    let mut probe = Probe::new(cfg.probe_bytes, cfg.probe_core);
    let total = cfg.measurements();
    let mut done = 0;
    let time = Duration::from_secs_f64(cfg.secs);
    let traffic = |mode, hold| Traffic {
        mode,
        size: cfg.size,
        rate: cfg.rate,
        hold,
        time,
    };
    progress(done, total, "idle probe");
    let idle_a = probe.run(time);
    done += 1;
    let mut bandwidth = Vec::new();
    for mode in Mode::ALL {
        progress(done, total, &format!("bandwidth under {} traffic", mode.name()));
        bandwidth.push((mode, rig.measure(&traffic(mode, Duration::ZERO), Some(&mut probe))?));
        done += 1;
    }
    progress(done, total, "idle probe");
    let idle_b = probe.run(time);
    done += 1;
    let idle = Bandwidth {
        copy_gbs: (idle_a.copy_gbs + idle_b.copy_gbs) / 2.0,
        triad_gbs: (idle_a.triad_gbs + idle_b.triad_gbs) / 2.0,
    };
    let bandwidth = bandwidth
        .into_iter()
        .map(|(mode, m)| {
            let probe = m.probe.unwrap_or_default();
            let payload = (m.consumed.messages * cfg.size as u64).max(1);
            BandwidthRow {
                mode,
                sent_per_s: m.sent_per_s(),
                delivered_per_s: m.delivered_per_s(mode),
                probe,
                copy_retained: probe.copy_gbs / idle.copy_gbs,
                triad_retained: probe.triad_gbs / idle.triad_gbs,
                host_bytes_per_payload_byte: m.consumed.delivered_bytes as f64 / payload as f64,
                host_bytes_per_message: m.host_bytes_per_message(),
                memory: m.memory,
            }
        })
        .collect();
    let mut holds = Vec::new();
    for mode in Mode::ALL {
        for &h in &cfg.holds_us {
            progress(done, total, &format!("{} held {} us", mode.name(), h));
            let m = rig.measure(&traffic(mode, Duration::from_micros(h)), None)?;
            done += 1;
            let c = m.consumed;
            holds.push(HoldRow {
                mode,
                hold_us: h,
                consumed_per_s: m.delivered_per_s(mode),
                read_ns_per_kib: (c.read_bytes > 0).then(|| c.read_ns as f64 / (c.read_bytes as f64 / 1024.0)),
            });
        }
    }
    progress(done, total, "done");
    Ok(MemwallReport {
        config: cfg.clone(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        kernel: nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default(),
        hw_counters_missing: rig.hw_counters_missing(),
        idle,
        bandwidth,
        holds,
    })
}

impl MemwallReport {
    /// The two tables, for the terminal.
    pub fn table(&self) -> String {
        let c = &self.config;
        let mut s = format!(
            "memory wall: {} B messages at {} per second, {} s per measurement, probe on core {} ({} MiB arrays), {} CPUs, Linux {}\n",
            c.size,
            if c.rate == 0 { "as many as possible".to_string() } else { c.rate.to_string() },
            c.secs,
            c.probe_core.map_or("any".into(), |x| x.to_string()),
            c.probe_bytes >> 20,
            self.cpus,
            self.kernel
        );
        if let Some(why) = &self.hw_counters_missing {
            s += &format!("no memory-controller counters: {why}; software measures only\n");
        }
        s += &format!(
            "idle probe: copy {:.2} GB/s, triad {:.2} GB/s\n\n",
            self.idle.copy_gbs, self.idle.triad_gbs
        );
        s += &format!(
            "{:<13}{:>12}{:>12}{:>10}{:>10}{:>10}{:>10}{:>12}{:>12}",
            "mode", "sent/s", "delivered/s", "copy GB/s", "retained", "triad", "retained", "host B/msg", "host B/B"
        );
        let mem = self.bandwidth.iter().any(|r| r.memory.is_some());
        if mem {
            s += &format!("{:>10}{:>10}", "mem rd", "mem wr");
        }
        s += "\n";
        for r in &self.bandwidth {
            s += &format!(
                "{:<13}{:>12.0}{:>12.0}{:>10.2}{:>10.3}{:>10.2}{:>10.3}{:>12.1}{:>12.3}",
                r.mode.name(),
                r.sent_per_s,
                r.delivered_per_s,
                r.probe.copy_gbs,
                r.copy_retained,
                r.probe.triad_gbs,
                r.triad_retained,
                r.host_bytes_per_message,
                r.host_bytes_per_payload_byte
            );
            if let Some(m) = r.memory {
                s += &format!("{:>10.2}{:>10.2}", m.read_gbs, m.write_gbs);
            }
            s += "\n";
        }
        s +=
            "\nhold-time sweep: each message read in full after the hold (ns per KiB read; messages read per second)\n";
        s += &format!("{:<13}", "mode");
        for h in &c.holds_us {
            s += &format!("{:>20}", format!("{} held", hold_text(*h)));
        }
        s += "\n";
        for mode in Mode::ALL {
            s += &format!("{:<13}", mode.name());
            for r in self.holds.iter().filter(|r| r.mode == mode) {
                let cell = match r.read_ns_per_kib {
                    Some(ns) => format!("{ns:.0} ns/KiB {:.0}/s", r.consumed_per_s),
                    None => format!("n/a {:.0}/s", r.consumed_per_s),
                };
                s += &format!("{cell:>20}");
            }
            s += "\n";
        }
        s += "n/a: the host is not told of a WRITE, so it reads nothing (its rate is the node's).\n";
        s
    }

    /// Writes memwall.json and the two plots into `dir`; returns their paths.
    pub fn save(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let json = dir.join("memwall.json");
        std::fs::write(
            &json,
            serde_json::to_string_pretty(self).map_err(std::io::Error::other)?,
        )?;
        let retained: Vec<(&str, f64)> = self
            .bandwidth
            .iter()
            .map(|r| (r.mode.name(), r.triad_retained))
            .collect();
        let touched: Vec<(&str, f64)> = self
            .bandwidth
            .iter()
            .map(|r| (r.mode.name(), r.host_bytes_per_payload_byte))
            .collect();
        let bars = dir.join("memwall-bandwidth.svg");
        std::fs::write(
            &bars,
            crate::plot::bars(
                "Triad bandwidth retained under I/O (top) and host bytes per payload byte (bottom)",
                &retained,
                &touched,
            ),
        )?;
        let series: Vec<crate::plot::Series> = Mode::ALL
            .iter()
            .filter(|m| **m != Mode::Write)
            .map(|m| crate::plot::Series {
                name: m.name().into(),
                points: self
                    .holds
                    .iter()
                    .filter(|r| r.mode == *m)
                    .filter_map(|r| r.read_ns_per_kib.map(|ns| (r.hold_us as f64, ns)))
                    .collect(),
            })
            .collect();
        let sweep = dir.join("memwall-holds.svg");
        std::fs::write(
            &sweep,
            crate::plot::svg(
                "Read cost after holding a message",
                "hold time (us)",
                "ns per KiB read",
                &series,
            ),
        )?;
        Ok(vec![json, bars, sweep])
    }
}

fn hold_text(us: u64) -> String {
    match us {
        u if u >= 1_000 && u.is_multiple_of(1_000) => format!("{} ms", u / 1_000),
        u => format!("{u} us"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_are_checked_and_counted() {
        let q = MemwallConfig::quick();
        assert!(q.check().is_ok());
        assert_eq!(q.measurements(), 2 + 5 * 7);
        let bad = MemwallConfig { size: 0, ..q.clone() };
        assert!(matches!(bad.check(), Err(MemwallError::Config(_))));
        let bad = MemwallConfig { secs: 0.0, ..q };
        assert!(bad.check().is_err());
        assert_eq!(hold_text(10), "10 us");
        assert_eq!(hold_text(100_000), "100 ms");
        let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(names, ["socket", "af_xdp", "write", "write_notify", "split"]);
    }
}
