//! Memory-controller counters, where the host has them: `perf stat` on the
//! uncore IMC events (CAS reads and writes, 64 bytes each). On hosts
//! without them (most VMs: `perf stat` says not supported) the bench says
//! so once and reports its software measures only.

use std::{process::Command, time::Duration};

/// Why there are no counters, or how to read them.
pub enum HwCounters {
    Available { events: [String; 2] },
    Missing(String),
}

/// Memory bytes read and written per second during one measurement.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct MemTraffic {
    pub read_gbs: f64,
    pub write_gbs: f64,
}

impl HwCounters {
    pub fn detect() -> HwCounters {
        let imc = std::fs::read_dir("/sys/bus/event_source/devices")
            .map(|d| {
                d.filter_map(Result::ok)
                    .any(|e| e.file_name().to_string_lossy().starts_with("uncore_imc"))
            })
            .unwrap_or(false);
        let perf = Command::new("perf")
            .args(["stat", "-e", "instructions", "true"])
            .output();
        match perf {
            Err(e) => HwCounters::Missing(format!("perf is not installed ({e}; Debian: apt install linux-perf)")),
            Ok(o) if !o.status.success() || String::from_utf8_lossy(&o.stderr).contains("not supported") => {
                HwCounters::Missing("`perf stat` says hardware counters are not supported on this host".into())
            }
            Ok(_) if !imc => {
                HwCounters::Missing("this CPU exposes no uncore memory-controller (uncore_imc) events".into())
            }
            Ok(_) => HwCounters::Available {
                events: [
                    "uncore_imc/cas_count_read/".into(),
                    "uncore_imc/cas_count_write/".into(),
                ],
            },
        }
    }

    /// Starts `perf stat -a` over the IMC events for `time`; `finish` reads it.
    pub fn start(&self, time: Duration) -> Option<std::process::Child> {
        let HwCounters::Available { events } = self else {
            return None;
        };
        Command::new("perf")
            .args([
                "stat", "-a", "-x", ",", "-e", &events[0], "-e", &events[1], "--", "sleep",
            ])
            .arg(format!("{}", time.as_secs_f64()))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .ok()
    }

    pub fn finish(child: std::process::Child, time: Duration) -> Option<MemTraffic> {
        let out = child.wait_with_output().ok()?;
        parse_perf_csv(&String::from_utf8_lossy(&out.stderr), time)
    }
}

/// Sums the two CAS counts (in 64-byte lines, or MiB when perf scales them)
/// of `perf stat -x,` output.
fn parse_perf_csv(text: &str, time: Duration) -> Option<MemTraffic> {
    let mut read = None;
    let mut write = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < 3 {
            continue;
        }
        let Ok(v) = f[0].trim().parse::<f64>() else { continue };
        let bytes = match f[1].trim() {
            "MiB" => v * (1 << 20) as f64,
            _ => v * 64.0,
        };
        if f[2].contains("cas_count_read") {
            *read.get_or_insert(0.0) += bytes;
        } else if f[2].contains("cas_count_write") {
            *write.get_or_insert(0.0) += bytes;
        }
    }
    let s = time.as_secs_f64();
    Some(MemTraffic {
        read_gbs: read? / s / 1e9,
        write_gbs: write? / s / 1e9,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn perf_csv_is_summed_over_controllers_and_scaled() {
        let text = "1024.5,MiB,uncore_imc/cas_count_read/,2000,100.00,,\n\
                    512,MiB,uncore_imc/cas_count_write/,2000,100.00,,\n\
                    1000000,,uncore_imc/cas_count_read/,2000,100.00,,\n";
        let t = super::parse_perf_csv(text, std::time::Duration::from_secs(2)).unwrap();
        let read = (1024.5 * 1048576.0 + 64e6) / 2.0 / 1e9;
        assert!((t.read_gbs - read).abs() < 1e-9);
        assert!((t.write_gbs - 512.0 * 1048576.0 / 2.0 / 1e9).abs() < 1e-9);
        assert!(super::parse_perf_csv(
            "<not supported>,,uncore_imc/cas_count_read/",
            std::time::Duration::from_secs(1)
        )
        .is_none());
    }
}
