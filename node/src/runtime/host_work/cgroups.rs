//! Where this machine's cgroup controllers are, and what the host-work cgroup's files say:
//! pure functions over `/proc/self/mountinfo` and the limits, tested without a kernel.

use std::path::{Path, PathBuf};

/// The hierarchies the host-work cgroup lives in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// cgroup v1: one mount per controller (or a few controllers per mount). Threads can be
    /// placed one by one (`tasks`), so the node's own work threads join too.
    V1 {
        cpu: PathBuf,
        cpuacct: Option<PathBuf>,
        blkio: Option<PathBuf>,
    },
    /// cgroup v2: one tree. Only whole processes can be placed (`cgroup.procs`) outside a
    /// threaded subtree, so only the node's child processes join.
    V2 { root: PathBuf },
}

/// The limits of the host-work cgroup.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// CPUs' worth of time per period (0: no quota).
    pub cpus: f64,
    /// Bytes per second read and written on each throttled device (0: no limit).
    pub io_bps: u64,
}

/// The CFS period the quota is a share of.
pub const CPU_PERIOD_US: u64 = 100_000;

/// Relative CPU weight when the CPU is contended: a quarter of a default cgroup's, so that
/// host work yields to the node and to sandboxes before its quota is even reached.
const V1_SHARES: u64 = 256;
const V2_WEIGHT: u64 = 25;

/// Finds the cgroup hierarchies in a `/proc/self/mountinfo`. v1 wins where its `cpu`
/// controller is mounted (a hybrid machine's unified mount then holds no controllers).
pub fn layout(mountinfo: &str) -> Option<Layout> {
    let mut cpu = None;
    let mut cpuacct = None;
    let mut blkio = None;
    let mut v2 = None;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = match left.split(' ').nth(4) {
            Some(m) => PathBuf::from(unescape(m)),
            None => continue,
        };
        let mut right = right.split(' ');
        let fstype = right.next().unwrap_or_default();
        let _source = right.next();
        let options = right.next().unwrap_or_default();
        match fstype {
            "cgroup" => {
                for o in options.split(',') {
                    let slot = match o {
                        "cpu" => &mut cpu,
                        "cpuacct" => &mut cpuacct,
                        "blkio" => &mut blkio,
                        _ => continue,
                    };
                    slot.get_or_insert_with(|| mount_point.clone());
                }
            }
            "cgroup2" => {
                v2.get_or_insert(mount_point);
            }
            _ => {}
        }
    }
    match (cpu, v2) {
        (Some(cpu), _) => Some(Layout::V1 {
            cpu,
            cpuacct,
            blkio,
        }),
        (None, Some(root)) => Some(Layout::V2 { root }),
        (None, None) => None,
    }
}

/// mountinfo escapes spaces, tabs, newlines and backslashes as octal (`\040`).
pub(crate) fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let digits = std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or_default();
            if let Ok(v) = u8::from_str_radix(digits, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One file to write in a cgroup directory, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub dir: PathBuf,
    pub file: &'static str,
    pub value: String,
}

impl Layout {
    /// The cgroup directories named `name` (one per distinct hierarchy).
    pub fn dirs(&self, name: &str) -> Vec<PathBuf> {
        let mut dirs = match self {
            Layout::V1 {
                cpu,
                cpuacct,
                blkio,
            } => {
                let mut d = vec![cpu.join(name)];
                d.extend(cpuacct.iter().map(|p| p.join(name)));
                d.extend(blkio.iter().map(|p| p.join(name)));
                d
            }
            Layout::V2 { root } => vec![root.join(name)],
        };
        dirs.sort();
        dirs.dedup();
        dirs
    }

    /// The files that hold `limits` for the cgroup `name`, `devices` the block devices
    /// (`major:minor`) whose bandwidth is limited.
    pub fn settings(&self, name: &str, limits: Limits, devices: &[(u32, u32)]) -> Vec<Setting> {
        let set = |dir: &Path, file: &'static str, value: String| Setting {
            dir: dir.join(name),
            file,
            value,
        };
        let quota = (limits.cpus > 0.0).then(|| cpu_quota_us(limits.cpus));
        let mut out = Vec::new();
        match self {
            Layout::V1 { cpu, blkio, .. } => {
                out.push(set(cpu, "cpu.cfs_period_us", CPU_PERIOD_US.to_string()));
                out.push(set(
                    cpu,
                    "cpu.cfs_quota_us",
                    quota.map_or("-1".into(), |q| q.to_string()),
                ));
                out.push(set(cpu, "cpu.shares", V1_SHARES.to_string()));
                if let Some(blkio) = blkio {
                    for (major, minor) in devices {
                        // 0 removes a device's limit.
                        let v = format!("{major}:{minor} {}", limits.io_bps);
                        out.push(set(blkio, "blkio.throttle.read_bps_device", v.clone()));
                        out.push(set(blkio, "blkio.throttle.write_bps_device", v));
                    }
                }
            }
            Layout::V2 { root } => {
                let max = quota.map_or("max".into(), |q| q.to_string());
                out.push(set(root, "cpu.max", format!("{max} {CPU_PERIOD_US}")));
                out.push(set(root, "cpu.weight", V2_WEIGHT.to_string()));
                for (major, minor) in devices {
                    let bps = match limits.io_bps {
                        0 => "max".to_string(),
                        n => n.to_string(),
                    };
                    out.push(set(
                        root,
                        "io.max",
                        format!("{major}:{minor} rbps={bps} wbps={bps}"),
                    ));
                }
            }
        }
        out
    }

    /// The controllers the v2 root must hand down for the settings to exist.
    pub fn v2_controllers(&self) -> Option<&'static str> {
        matches!(self, Layout::V2 { .. }).then_some("+cpu +io")
    }

    /// The files a process writes `0` to, to move itself into the cgroup `name`.
    pub fn process_files(&self, name: &str) -> Vec<PathBuf> {
        self.dirs(name)
            .into_iter()
            .map(|d| d.join("cgroup.procs"))
            .collect()
    }

    /// The files a thread writes its id to, to move itself (alone) into the cgroup `name`;
    /// none where a thread cannot be placed apart from its process (v2).
    pub fn thread_files(&self, name: &str) -> Vec<PathBuf> {
        match self {
            Layout::V1 { .. } => self
                .dirs(name)
                .into_iter()
                .map(|d| d.join("tasks"))
                .collect(),
            Layout::V2 { .. } => Vec::new(),
        }
    }

    /// Where the cgroup's CPU use (nanoseconds) is read.
    pub fn usage(&self, name: &str) -> Option<(PathBuf, UsageFormat)> {
        match self {
            Layout::V1 { cpu, cpuacct, .. } => Some((
                cpuacct
                    .as_ref()
                    .unwrap_or(cpu)
                    .join(name)
                    .join("cpuacct.usage"),
                UsageFormat::V1Nanoseconds,
            )),
            Layout::V2 { root } => Some((root.join(name).join("cpu.stat"), UsageFormat::V2CpuStat)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageFormat {
    V1Nanoseconds,
    V2CpuStat,
}

/// CPU time used, in nanoseconds, from a usage file's text.
pub fn parse_usage(format: UsageFormat, text: &str) -> Option<u64> {
    match format {
        UsageFormat::V1Nanoseconds => text.trim().parse().ok(),
        UsageFormat::V2CpuStat => text.lines().find_map(|l| {
            let v = l.strip_prefix("usage_usec ")?;
            v.trim().parse::<u64>().ok().map(|us| us * 1000)
        }),
    }
}

/// `cpus` CPUs' worth of each period, at least a millisecond (the kernel's minimum).
pub fn cpu_quota_us(cpus: f64) -> u64 {
    ((cpus * CPU_PERIOD_US as f64).round() as u64).max(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine's mountinfo (Debian 12 VM, Docker on cgroup v1, hybrid).
    const V1_HYBRID: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
33 31 0:28 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
36 31 0:31 / /sys/fs/cgroup/cpu rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu
37 31 0:32 / /sys/fs/cgroup/cpuacct rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpuacct
38 31 0:33 / /sys/fs/cgroup/blkio rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,blkio
";

    /// A systemd machine on the unified hierarchy.
    const V2: &str = "\
26 31 0:24 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
35 26 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    /// cpu and cpuacct on one mount, as most distributions do on v1.
    const V1_COMOUNTED: &str = "\
36 31 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct
38 31 0:33 / /sys/fs/cgroup/blkio rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,blkio
";

    #[test]
    fn finds_v1_controllers_on_a_hybrid_machine() {
        assert_eq!(
            layout(V1_HYBRID),
            Some(Layout::V1 {
                cpu: "/sys/fs/cgroup/cpu".into(),
                cpuacct: Some("/sys/fs/cgroup/cpuacct".into()),
                blkio: Some("/sys/fs/cgroup/blkio".into()),
            })
        );
        assert_eq!(
            layout(V2),
            Some(Layout::V2 {
                root: "/sys/fs/cgroup".into()
            })
        );
        assert_eq!(layout("25 30 0:23 / /sys rw - sysfs sysfs rw\n"), None);
    }

    #[test]
    fn comounted_controllers_share_one_directory() {
        let l = layout(V1_COMOUNTED).unwrap();
        assert_eq!(
            l.dirs("hw"),
            vec![
                PathBuf::from("/sys/fs/cgroup/blkio/hw"),
                PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/hw"),
            ]
        );
        assert_eq!(l.thread_files("hw").len(), 2);
        assert_eq!(
            l.usage("hw").unwrap().0,
            PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/hw/cpuacct.usage")
        );
    }

    #[test]
    fn v1_settings_hold_the_quota_shares_and_device_limits() {
        let l = layout(V1_HYBRID).unwrap();
        let s = l.settings(
            "hw",
            Limits {
                cpus: 0.5,
                io_bps: 1 << 20,
            },
            &[(254, 0)],
        );
        let get = |file: &str| {
            s.iter()
                .find(|x| x.file == file)
                .map(|x| (x.dir.clone(), x.value.clone()))
                .unwrap()
        };
        assert_eq!(
            get("cpu.cfs_quota_us"),
            ("/sys/fs/cgroup/cpu/hw".into(), "50000".into())
        );
        assert_eq!(get("cpu.cfs_period_us").1, "100000");
        assert_eq!(get("cpu.shares").1, "256");
        assert_eq!(
            get("blkio.throttle.write_bps_device"),
            ("/sys/fs/cgroup/blkio/hw".into(), "254:0 1048576".into())
        );
        // No quota: -1, the kernel's "unlimited".
        let open = l.settings(
            "hw",
            Limits {
                cpus: 0.0,
                io_bps: 0,
            },
            &[],
        );
        assert!(open
            .iter()
            .any(|x| x.file == "cpu.cfs_quota_us" && x.value == "-1"));
        assert!(!open.iter().any(|x| x.file.starts_with("blkio")));
    }

    #[test]
    fn v2_settings_and_placement() {
        let l = layout(V2).unwrap();
        let s = l.settings(
            "hw",
            Limits {
                cpus: 1.5,
                io_bps: 0,
            },
            &[(8, 0)],
        );
        assert!(s
            .iter()
            .any(|x| x.file == "cpu.max" && x.value == "150000 100000"));
        assert!(s
            .iter()
            .any(|x| x.file == "io.max" && x.value == "8:0 rbps=max wbps=max"));
        assert_eq!(l.v2_controllers(), Some("+cpu +io"));
        // Threads cannot leave their process's cgroup on v2; processes can.
        assert!(l.thread_files("hw").is_empty());
        assert_eq!(
            l.process_files("hw"),
            vec![PathBuf::from("/sys/fs/cgroup/hw/cgroup.procs")]
        );
    }

    #[test]
    fn usage_is_read_in_both_formats() {
        assert_eq!(
            parse_usage(UsageFormat::V1Nanoseconds, "123456789\n"),
            Some(123_456_789)
        );
        let stat = "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\nnr_periods 0\n";
        assert_eq!(parse_usage(UsageFormat::V2CpuStat, stat), Some(2_500_000));
        assert_eq!(parse_usage(UsageFormat::V2CpuStat, "nr_periods 1\n"), None);
    }

    #[test]
    fn quota_has_a_floor_and_mount_points_are_unescaped() {
        assert_eq!(cpu_quota_us(0.001), 1000);
        assert_eq!(cpu_quota_us(2.0), 200_000);
        let line = "36 31 0:31 / /sys/fs/cgroup/my\\040cpu rw - cgroup cgroup rw,cpu\n";
        assert_eq!(
            layout(line),
            Some(Layout::V1 {
                cpu: "/sys/fs/cgroup/my cpu".into(),
                cpuacct: None,
                blkio: None
            })
        );
    }
}
