//! How loaded this host is: its CPUs from the kernel's `/proc/stat` (the first `cpu` line:
//! time each state took, in ticks, summed over every CPU), its memory from `/proc/meminfo`.
//! Used to start background work (warm containers) only while the sandboxes leave CPU idle,
//! and to size what the node takes on.

use std::time::Duration;

/// Cumulative ticks: idle (idle and iowait) and all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ticks {
    pub idle: u64,
    pub total: u64,
}

/// Parses the `cpu` line of `/proc/stat`. None when there is none or it is malformed.
pub fn parse_stat(text: &str) -> Option<Ticks> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    if fields.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal guest guest_nice: guest time is
    // already counted in user and nice.
    let counted = &fields[..fields.len().min(8)];
    let idle = fields[3] + fields.get(4).copied().unwrap_or(0);
    Some(Ticks {
        idle,
        total: counted.iter().sum(),
    })
}

/// The fraction of CPU time left idle between two readings (None: no time passed).
pub fn idle_between(before: Ticks, after: Ticks) -> Option<f64> {
    let total = after.total.checked_sub(before.total)?;
    let idle = after.idle.checked_sub(before.idle)?;
    (total > 0).then(|| (idle as f64 / total as f64).clamp(0.0, 1.0))
}

fn read() -> Option<Ticks> {
    parse_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The idle fraction of this host's CPUs over the next `over` (None where `/proc/stat`
/// cannot be read).
pub async fn idle_over(over: Duration) -> Option<f64> {
    let before = read()?;
    tokio::time::sleep(over).await;
    idle_between(before, read()?)
}

/// A field of `/proc/meminfo` (`Name:   123 kB`), in MiB.
pub fn parse_meminfo(text: &str, field: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.split(':').next() == Some(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

/// This host's memory, MiB (None where `/proc/meminfo` cannot be read).
pub fn memory_total_mb() -> Option<u64> {
    parse_meminfo(&std::fs::read_to_string("/proc/meminfo").ok()?, "MemTotal")
}

/// The memory this host has available for new work now, MiB (`MemAvailable`).
pub fn memory_available_mb() -> Option<u64> {
    parse_meminfo(
        &std::fs::read_to_string("/proc/meminfo").ok()?,
        "MemAvailable",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str =
        "cpu  100 5 50 800 40 1 2 2 30 0\ncpu0 50 2 25 400 20 0 1 1 15 0\nintr 1 2\n";

    #[test]
    fn reads_the_summary_line() {
        // Guest time (30) is inside user already: not counted twice.
        assert_eq!(
            parse_stat(STAT),
            Some(Ticks {
                idle: 840,
                total: 1000
            })
        );
        assert_eq!(parse_stat("cpu0 1 2 3 4\n"), None);
        assert_eq!(parse_stat("cpu  1 x 3 4\n"), None);
        assert_eq!(parse_stat("cpu  1 2\n"), None);
    }

    #[test]
    fn reads_meminfo_fields() {
        let text =
            "MemTotal:       24676820 kB\nMemFree:         1000 kB\nMemAvailable:   2097152 kB\n";
        assert_eq!(parse_meminfo(text, "MemTotal"), Some(24098));
        assert_eq!(parse_meminfo(text, "MemAvailable"), Some(2048));
        assert_eq!(parse_meminfo(text, "Mem"), None);
        assert_eq!(parse_meminfo("MemTotal: x kB", "MemTotal"), None);
    }

    #[test]
    fn idle_is_the_share_of_the_time_between() {
        let a = Ticks {
            idle: 100,
            total: 200,
        };
        let b = Ticks {
            idle: 130,
            total: 300,
        };
        assert_eq!(idle_between(a, b), Some(0.3));
        assert_eq!(idle_between(a, a), None);
        assert_eq!(idle_between(b, a), None);
    }
}
