//! Taking a warm container for a sandbox: it becomes the sandbox's container (its name,
//! limits and host name), then gets the sandbox's files through its mount.

use super::super::{
    copy_fork_files, docker_err, nano_cpus, status_of, DockerRuntime, RuntimeError,
};
use super::Warm;
use crate::runtime::{root_mount, uts, ContainerInfo, ContainerSpec, RootFill};
use bollard::query_parameters::RenameContainerOptionsBuilder;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Why a warm container did not become the sandbox's.
pub(in crate::runtime::docker) enum TakeFailed {
    /// Before it was the sandbox's: it is gone, and the sandbox can start cold.
    Before(RuntimeError),
    /// After: the create failed (the container is removed).
    After(RuntimeError),
}

impl DockerRuntime {
    /// Makes `w` the container of `spec`'s sandbox and writes its files (a fork's `seed`,
    /// or `fill`). Whether `fill` ran.
    pub(in crate::runtime::docker) async fn take_over(
        self: &Arc<Self>,
        w: Warm,
        spec: &ContainerSpec,
        fill: Option<&dyn RootFill>,
    ) -> Result<(ContainerInfo, bool), TakeFailed> {
        let name = self.container_name(&spec.sandbox_id);
        let t = Instant::now();
        if let Err(e) = self.adopt_warm(&w, spec, &name).await {
            // Whichever name it has now (its link goes with it).
            let _ = self.remove_named(&w.name).await;
            let _ = self.remove_named(&name).await;
            return Err(TakeFailed::Before(e));
        }
        let adopted_ms = t.elapsed().as_millis() as u64;
        let written = async {
            let mut filled = false;
            if let Some(seed) = &spec.seed {
                let merged = w.merged.clone().ok_or_else(|| {
                    RuntimeError::Other("the warm container's root is not visible".into())
                })?;
                let copied =
                    copy_fork_files(&self.host_pool(), &name, &seed.upper, &merged, true).await;
                seed.done();
                copied?;
            }
            if let Some(fill) = fill {
                let root = match &w.merged {
                    Some(m) => root_mount::open_if_mounted(m).ok().flatten(),
                    None => None,
                };
                if let Some(root) = root {
                    fill.fill(root).await.map_err(RuntimeError::Fill)?;
                    filled = true;
                }
            }
            Ok((self.current_info(&name).await?, filled))
        }
        .await;
        if written.is_err() {
            // With its link.
            let _ = self.remove_named(&name).await;
        }
        tracing::debug!(container = %name, adopted_ms, written_ms = t.elapsed().as_millis() as u64 - adopted_ms,
            ok = written.is_ok(), "warm container taken");
        written.map_err(TakeFailed::After)
    }

    /// The steps that make `w` the sandbox's container, named `name`.
    async fn adopt_warm(
        &self,
        w: &Warm,
        spec: &ContainerSpec,
        name: &str,
    ) -> Result<(), RuntimeError> {
        let rename = || {
            self.docker.rename_container(
                &w.name,
                RenameContainerOptionsBuilder::default().name(name).build(),
            )
        };
        match rename().await {
            Ok(()) => {}
            Err(e) if status_of(&e) == Some(409) => {
                // A leftover of an attempt that died half-way: replace it.
                self.force_remove(name).await?;
                rename().await.map_err(docker_err)?;
            }
            Err(e) => return Err(docker_err(e)),
        }
        let mem = (spec.resources.memory_mb * 1024 * 1024) as i64;
        let limits = bollard::models::ContainerUpdateBody {
            nano_cpus: Some(nano_cpus(spec.resources.cpus)),
            memory: Some(mem),
            memory_swap: Some(mem),
            pids_limit: Some(spec.resources.pids as i64),
            ..Default::default()
        };
        self.docker
            .update_container(name, limits)
            .await
            .map_err(docker_err)?;
        w.host
            .set(&spec.sandbox_id)
            .await
            .map_err(|e| RuntimeError::Other(format!("cannot set the host name: {e}")))
    }

    /// Gives a restarted container that was a warm one its sandbox's host name again
    /// (Docker writes the one it was made with at every start). `c`: the container as
    /// inspected after its start.
    pub(in crate::runtime::docker) async fn rename_host_after_start(
        &self,
        c: &bollard::models::ContainerInspectResponse,
        sandbox_id: &str,
    ) -> Result<(), RuntimeError> {
        let host = HostName::of(c, self.hosts_file(c));
        if host.current == sandbox_id {
            return Ok(());
        }
        host.set(sandbox_id)
            .await
            .map_err(|e| RuntimeError::Other(format!("cannot set the host name: {e}")))
    }
}

/// Where a running container's host name lives: its files and its processes' UTS namespace.
pub(super) struct HostName {
    /// The container's main process (0 when this process cannot see it).
    pub(super) pid: u32,
    hostname_path: Option<PathBuf>,
    hosts_path: Option<PathBuf>,
    /// The name the container was made with.
    current: String,
}

impl HostName {
    /// `hosts`: the container's `/etc/hosts` on this host (`DockerRuntime::hosts_file`).
    pub(super) fn of(
        c: &bollard::models::ContainerInspectResponse,
        hosts: Option<PathBuf>,
    ) -> HostName {
        let pid = c.state.as_ref().and_then(|s| s.pid).unwrap_or(0).max(0) as u32;
        // 0: not in this process's view (the engine runs in another pid namespace).
        let pid = if Path::new(&format!("/proc/{pid}")).exists() {
            pid
        } else {
            0
        };
        HostName {
            pid,
            hostname_path: c.hostname_path.as_ref().map(PathBuf::from),
            hosts_path: hosts,
            current: c
                .config
                .as_ref()
                .and_then(|c| c.hostname.clone())
                .unwrap_or_default(),
        }
    }

    /// Gives the container the host name `hostname` in its files and its UTS namespace.
    /// The files are the engine's (`/var/lib/docker/containers/<id>/…`, bind-mounted into
    /// the container, so the sandbox can change what they hold but not where they are):
    /// what the sandbox wrote into `/etc/hosts` is read only up to `HOSTS_LIMIT`, and a
    /// larger one is replaced by a fresh one.
    async fn set(&self, hostname: &str) -> std::io::Result<()> {
        if let Some(p) = &self.hostname_path {
            tokio::fs::write(p, format!("{hostname}\n")).await?;
        }
        if let Some(p) = &self.hosts_path {
            let hosts = match read_bounded(p, HOSTS_LIMIT).await? {
                Some(hosts) => uts::rename_in_hosts(&hosts, &self.current, hostname),
                None => format!("127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\t{hostname}\n"),
            };
            tokio::fs::write(p, hosts).await?;
        }
        let (pid, name) = (self.pid, hostname.to_string());
        tokio::task::spawn_blocking(move || uts::set_hostname(pid, &name))
            .await
            .map_err(std::io::Error::other)?
    }
}

/// The most of a container's `/etc/hosts` the node reads.
const HOSTS_LIMIT: u64 = 1 << 20;

/// A text file's content if it has at most `limit` bytes (`None` if it is larger or not
/// text): a file the sandbox could have made any size is never read whole.
async fn read_bounded(path: &Path, limit: u64) -> std::io::Result<Option<String>> {
    use tokio::io::AsyncReadExt;
    let file = tokio::fs::File::open(path).await?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).await?;
    if bytes.len() as u64 > limit {
        return Ok(None);
    }
    Ok(String::from_utf8(bytes).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_huge_hosts_file_is_not_read_whole() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("hosts");
        std::fs::write(&p, "127.0.0.1 localhost\n").unwrap();
        assert_eq!(
            read_bounded(&p, HOSTS_LIMIT).await.unwrap().as_deref(),
            Some("127.0.0.1 localhost\n")
        );
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(HOSTS_LIMIT * 64).unwrap();
        assert_eq!(read_bounded(&p, HOSTS_LIMIT).await.unwrap(), None);
    }
}
