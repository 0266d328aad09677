//! The Docker runtime writing files into a container while Docker starts it
//! (`ContainerRuntime::create_filled`), against the real daemon: what the fill writes is in
//! the running container, and a fill that fails, or a start that fails after the fill,
//! leaves no container behind.

use super::harness::{guest_bin, unique};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use warren_api::{ApiError, ErrorCode};
use warren_node::runtime::docker::{remove_node_resources_blocking, DockerRuntime};
use warren_node::runtime::subnets::Cidr;
use warren_node::runtime::{ContainerRuntime, ContainerSpec, RootFill, RuntimeError};

/// Writes `/filled` in the container's root.
struct WriteFile;

#[async_trait::async_trait]
impl RootFill for WriteFile {
    async fn fill(&self, root: std::fs::File) -> Result<(), ApiError> {
        let path = format!("/proc/self/fd/{}/filled", root.as_raw_fd());
        std::fs::write(path, "written while starting")
            .map_err(|e| ApiError::internal(e.to_string()))
    }
}

/// Refuses, as a damaged snapshot would.
struct Refuses;

#[async_trait::async_trait]
impl RootFill for Refuses {
    async fn fill(&self, _root: std::fs::File) -> Result<(), ApiError> {
        Err(ApiError::new(ErrorCode::Conflict, "refused by the test"))
    }
}

/// Puts a file where the guest binary's mount point goes, so that runc, which makes the
/// container's mounts after Docker mounted its root, fails the start after the files went in.
struct BreaksTheStart;

#[async_trait::async_trait]
impl RootFill for BreaksTheStart {
    async fn fill(&self, root: std::fs::File) -> Result<(), ApiError> {
        let path = format!("/proc/self/fd/{}/.warren", root.as_raw_fd());
        let _ = std::fs::remove_dir_all(&path);
        std::fs::write(&path, "not a directory").map_err(|e| ApiError::internal(e.to_string()))
    }
}

/// Everything of this test's node goes, however the test ends.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        remove_node_resources_blocking(&self.0);
    }
}

#[tokio::test]
async fn files_go_in_while_the_container_starts_and_failures_leave_no_container() {
    let node_id = format!("tf{}", unique());
    let _cleanup = Cleanup(node_id.clone());
    let pool = Cidr::parse("10.200.0.0/16").unwrap();
    let rt = DockerRuntime::connect(None, &node_id, pool).await.unwrap();
    let spec = |id: &str| ContainerSpec {
        sandbox_id: id.to_string(),
        image: warren_node::config::DEFAULT_IMAGE.to_string(),
        resources: warren_api::sandbox::INSTANCE_TYPES[0].1,
        env: BTreeMap::new(),
        guest_binary: PathBuf::from(guest_bin()),
        run_dir_mb: 64,
        seed: None,
    };

    let (info, filled) = rt.create_filled(&spec("ok"), &WriteFile).await.unwrap();
    assert!(filled, "Docker's mount was seen");
    assert!(info.running);
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{}/root/filled", info.pid)).unwrap(),
        "written while starting"
    );

    let e = rt.create_filled(&spec("bad"), &Refuses).await.unwrap_err();
    assert!(
        matches!(&e, RuntimeError::Fill(a) if a.code == ErrorCode::Conflict),
        "{e}"
    );
    assert!(
        rt.inspect("bad").await.unwrap().is_none(),
        "no container left"
    );
    let left: Vec<String> = rt
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.sandbox_id)
        .collect();
    assert_eq!(left, vec!["ok".to_string()]);

    // The files went in, then the start failed: no container either.
    let e = rt
        .create_filled(&spec("broken"), &BreaksTheStart)
        .await
        .unwrap_err();
    assert!(matches!(&e, RuntimeError::Docker(_)), "{e}");
    assert!(
        rt.inspect("broken").await.unwrap().is_none(),
        "no container left"
    );
}
