//! A STREAM-style memory bandwidth probe (copy and triad) on buffers of its
//! own, pinned to one core: the application whose bandwidth I/O takes away.

use std::time::{Duration, Instant};

/// Bandwidth the probe reached, GB/s (10^9 bytes), STREAM's byte counting:
/// copy moves 16 bytes per element, triad 24.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Bandwidth {
    pub copy_gbs: f64,
    pub triad_gbs: f64,
}

pub struct Probe {
    a: Vec<f64>,
    b: Vec<f64>,
    c: Vec<f64>,
    core: Option<usize>,
}

impl Probe {
    /// Three arrays of `bytes` each (make them larger than the last-level cache).
    pub fn new(bytes: usize, core: Option<usize>) -> Probe {
        let n = bytes / 8;
        Probe {
            a: vec![1.0; n],
            b: vec![2.0; n],
            c: vec![0.0; n],
            core,
        }
    }

    /// Runs copy and triad alternately for `time` on the probe's core and
    /// returns the mean bandwidth of each.
    pub fn run(&mut self, time: Duration) -> Bandwidth {
        let old = self.core.map(pin);
        let (mut copy_t, mut triad_t, mut passes) = (Duration::ZERO, Duration::ZERO, 0u32);
        let end = Instant::now() + time;
        while Instant::now() < end || passes == 0 {
            let t = Instant::now();
            self.c.copy_from_slice(&self.a);
            std::hint::black_box(&self.c);
            copy_t += t.elapsed();
            let t = Instant::now();
            let s = 3.0;
            for ((a, b), c) in self.a.iter_mut().zip(&self.b).zip(&self.c) {
                *a = b + s * c;
            }
            std::hint::black_box(&self.a);
            triad_t += t.elapsed();
            passes += 1;
        }
        if let Some(Some(mask)) = old {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &mask);
        }
        let n = self.a.len() as f64 * passes as f64;
        Bandwidth {
            copy_gbs: 16.0 * n / copy_t.as_secs_f64() / 1e9,
            triad_gbs: 24.0 * n / triad_t.as_secs_f64() / 1e9,
        }
    }
}

/// Pins the calling thread to `core`; returns the old mask to restore.
fn pin(core: usize) -> Option<nix::sched::CpuSet> {
    let me = nix::unistd::Pid::from_raw(0);
    let old = nix::sched::sched_getaffinity(me).ok()?;
    let mut set = nix::sched::CpuSet::new();
    set.set(core).ok()?;
    nix::sched::sched_setaffinity(me, &set).ok()?;
    Some(old)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_probe_measures_something_and_computes_triad() {
        let mut p = super::Probe::new(1 << 20, None);
        let bw = p.run(std::time::Duration::from_millis(20));
        assert!(bw.copy_gbs > 0.0 && bw.triad_gbs > 0.0);
        // The last pass copied a into c, then set a = b + 3c.
        assert!(p.a.iter().zip(&p.c).all(|(a, c)| *a == 2.0 + 3.0 * c));
        assert!(p.c[0] >= 1.0);
    }
}
