//! CPU time the whole machine spent, from `/proc/stat`: what a step cost in CPU, whoever
//! did the work (the node, Docker, runc, the kernel). On a machine with few CPUs, a step
//! that does N times the work of another cannot take less than its CPU time divided by
//! the CPU count, however parallel it is.

use std::time::Duration;

/// Busy CPU time of every CPU together since boot (user, nice, system, irq, softirq,
/// steal), or `None` where `/proc/stat` cannot be read.
pub fn busy() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    busy_from(&stat, ticks_per_second())
}

fn busy_from(stat: &str, hz: u64) -> Option<Duration> {
    let t = warren_node::runtime::host_load::parse_stat(stat)?;
    let ticks = t.total - t.idle;
    Some(Duration::from_secs_f64(ticks as f64 / hz as f64))
}

fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as u64
    } else {
        100
    }
}

/// CPU time (user + system) process `pid` used so far, from `/proc/<pid>/stat`.
pub fn process(pid: u32) -> anyhow::Result<Duration> {
    use anyhow::Context;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start at state (field 3).
    let rest = stat.rsplit_once(')').context("stat format")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11).context("utime")?.parse()?;
    let stime: u64 = f.get(12).context("stime")?.parse()?;
    Ok(Duration::from_secs_f64(
        (utime + stime) as f64 / ticks_per_second() as f64,
    ))
}

/// The machine's CPU count (as the scheduler sees it).
pub fn count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_time_leaves_out_idle_and_iowait() {
        let stat = "cpu  100 5 50 900 40 3 2 0 0 0\ncpu0 50 2 25 450 20 1 1 0 0 0\n";
        assert_eq!(busy_from(stat, 100), Some(Duration::from_secs_f64(1.60)));
        assert_eq!(busy_from("intr 1 2 3\n", 100), None);
    }
}
