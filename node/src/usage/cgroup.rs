//! The CPU time a container's processes used, from the kernel's cgroup accounting: v1
//! `cpuacct.usage` (nanoseconds), v2 `cpu.stat` `usage_usec`. The container's cgroup is
//! found from its main process (`/proc/<pid>/cgroup`) and the hierarchy's mount
//! (`/proc/self/mountinfo`); on a hybrid host (v1 controllers, an empty v2 tree beside them)
//! the v1 `cpuacct` hierarchy is the one that holds the count. These files are the kernel's:
//! nothing a sandbox can write is read or followed here.

use crate::runtime::host_work::cgroups::{parse_usage, unescape, UsageFormat};
use std::path::PathBuf;

/// The cgroup of a process, per hierarchy kind, as `/proc/<pid>/cgroup` lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcCgroups {
    /// Its path in the v1 hierarchy that has `cpuacct`.
    pub cpuacct: Option<String>,
    /// Its path in the v2 (unified) hierarchy.
    pub unified: Option<String>,
}

/// Parses `/proc/<pid>/cgroup` (`ID:CONTROLLERS:PATH` lines; v2 is `0::PATH`).
pub fn parse_proc_cgroup(text: &str) -> ProcCgroups {
    let mut out = ProcCgroups::default();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.is_empty() {
            out.unified = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "cpuacct") {
            out.cpuacct = Some(path.to_string());
        }
    }
    out
}

/// Where a hierarchy is mounted: the cgroup path at its root and the mount point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub root: String,
    pub point: PathBuf,
}

/// The mounts of the `cpuacct` v1 hierarchy and of the v2 hierarchy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupMounts {
    pub cpuacct: Option<Mount>,
    pub unified: Option<Mount>,
}

/// Parses `/proc/self/mountinfo`: `ID PARENT MAJ:MIN ROOT POINT OPTS [TAGS] - FSTYPE SRC SUPER`.
pub fn parse_mountinfo(text: &str) -> CgroupMounts {
    let mut out = CgroupMounts::default();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 5 || r.len() < 3 {
            continue;
        }
        let mount = Mount {
            root: unescape(l[3]),
            point: PathBuf::from(unescape(l[4])),
        };
        match r[0] {
            "cgroup2" if out.unified.is_none() => out.unified = Some(mount),
            "cgroup" if out.cpuacct.is_none() && r[2].split(',').any(|o| o == "cpuacct") => {
                out.cpuacct = Some(mount)
            }
            _ => {}
        }
    }
    out
}

/// Which file holds the count, and in which format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuFile {
    /// v1 `cpuacct.usage`: nanoseconds, one number.
    V1(PathBuf),
    /// v2 `cpu.stat`: `usage_usec N` among other keys.
    V2(PathBuf),
}

/// The file under `mount` for a process in cgroup `path`.
fn under(mount: &Mount, path: &str) -> Option<PathBuf> {
    let rel = if mount.root == "/" {
        path
    } else {
        path.strip_prefix(mount.root.as_str())?
    };
    let rel = rel.trim_start_matches('/');
    if rel.split('/').any(|c| c == "..") {
        return None;
    }
    Some(mount.point.join(rel))
}

/// The counter file of a process in `cgroups`, given the host's `mounts` (v1 `cpuacct`
/// first: on a hybrid host the v2 tree counts nothing of the container's).
pub fn cpu_file(cgroups: &ProcCgroups, mounts: &CgroupMounts) -> Option<CpuFile> {
    if let (Some(p), Some(m)) = (&cgroups.cpuacct, &mounts.cpuacct) {
        return under(m, p).map(|d| CpuFile::V1(d.join("cpuacct.usage")));
    }
    if let (Some(p), Some(m)) = (&cgroups.unified, &mounts.unified) {
        return under(m, p).map(|d| CpuFile::V2(d.join("cpu.stat")));
    }
    None
}

impl CpuFile {
    /// Reads the counter, in nanoseconds.
    pub fn read(&self) -> std::io::Result<u64> {
        let (path, format) = match self {
            CpuFile::V1(p) => (p, UsageFormat::V1Nanoseconds),
            CpuFile::V2(p) => (p, UsageFormat::V2CpuStat),
        };
        parse_usage(format, &std::fs::read_to_string(path)?).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} holds no CPU count", path.display()),
            )
        })
    }
}

/// The host's cgroup mounts, read once.
pub fn host_mounts() -> std::io::Result<CgroupMounts> {
    Ok(parse_mountinfo(&std::fs::read_to_string(
        "/proc/self/mountinfo",
    )?))
}

/// The counter file of the process `pid` (a container's main process).
pub fn cpu_file_of(pid: u32, mounts: &CgroupMounts) -> std::io::Result<CpuFile> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
    cpu_file(&parse_proc_cgroup(&text), mounts).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("process {pid} is in no CPU-accounting cgroup this host mounts"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // As this machine's kernel writes them (Docker on cgroup v1, hybrid with systemd).
    const HYBRID_PROC: &str = "12:pids:/docker/abc\n5:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/docker/abc\n";
    const HYBRID_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
30 31 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
";
    // A v2-only host with Docker's systemd driver.
    const V2_PROC: &str = "0::/system.slice/docker-abc.scope\n";
    const V2_MOUNTS: &str = "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";

    #[test]
    fn v1_cpuacct_wins_on_a_hybrid_host() {
        let f = cpu_file(
            &parse_proc_cgroup(HYBRID_PROC),
            &parse_mountinfo(HYBRID_MOUNTS),
        );
        assert_eq!(
            f,
            Some(CpuFile::V1(
                "/sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage".into()
            ))
        );
    }

    #[test]
    fn v2_only_hosts_read_cpu_stat() {
        let f = cpu_file(&parse_proc_cgroup(V2_PROC), &parse_mountinfo(V2_MOUNTS));
        assert_eq!(
            f,
            Some(CpuFile::V2(
                "/sys/fs/cgroup/system.slice/docker-abc.scope/cpu.stat".into()
            ))
        );
    }

    #[test]
    fn a_mount_of_a_sub_tree_and_escapes_are_followed_and_dot_dot_is_not() {
        let m =
            parse_mountinfo("40 23 0:30 /docker /mnt/cg\\040acct rw - cgroup cgroup rw,cpuacct\n");
        let c = ProcCgroups {
            cpuacct: Some("/docker/abc".into()),
            unified: None,
        };
        assert_eq!(
            cpu_file(&c, &m),
            Some(CpuFile::V1("/mnt/cg acct/abc/cpuacct.usage".into()))
        );
        let outside = ProcCgroups {
            cpuacct: Some("/other/abc".into()),
            unified: None,
        };
        assert_eq!(cpu_file(&outside, &m), None);
        let dots = ProcCgroups {
            cpuacct: Some("/docker/../../etc".into()),
            unified: None,
        };
        assert_eq!(cpu_file(&dots, &m), None);
        assert_eq!(cpu_file(&ProcCgroups::default(), &m), None);
    }
}
