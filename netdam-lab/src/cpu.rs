//! CPU time of the whole machine, for benchmarks that report CPU per unit of work.

/// Busy time of all CPUs so far, ns (/proc/stat: every field but idle and
/// iowait; guest time is in user already). 0 where /proc/stat is unreadable.
pub fn machine_busy_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal
    let busy: u64 = f
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    busy * 1_000_000_000 / hz
}

#[cfg(test)]
mod tests {
    #[test]
    fn busy_time_grows_with_work() {
        let before = super::machine_busy_ns();
        assert!(before > 0, "/proc/stat gave no busy time");
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(super::machine_busy_ns() > before);
    }
}
