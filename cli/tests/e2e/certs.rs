//! Node certificates, as an attacker would go after them: the cluster CA's private key is
//! nowhere but in the signing node's CA file (not in any node's Raft log, nor on a node that
//! joined); a member gets a certificate only for the key it registered, under its own name;
//! certificates are short-lived and every node renews its own before it expires, through a
//! signer, also when it joined through a node that holds no CA key.

use super::cluster_harness::{exec_through, owner_of, TestCluster};
use super::harness::unique;
use super::membership::{join_as, rpc_to};
use rustls::pki_types::pem::PemObject;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warren_consensus::rpc::{Reply, Request};
use warren_transport::{tls, Peers};

/// Regular files under `dir` that contain `needle`, except those at the paths (relative to
/// `dir`) in `except`.
fn files_holding(dir: &Path, needle: &[u8], except: &[&str]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                todo.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .to_string();
            if !meta.is_file() || except.contains(&rel.as_str()) {
                continue;
            }
            if std::fs::read(&path).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)) {
                found.push(path);
            }
        }
    }
    found
}

fn cert_of(c: &TestCluster, i: usize) -> String {
    let path = c.data_dir(i).join("cluster/identity.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    v["identity"]["cert_pem"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cluster_ca_key_is_in_no_raft_log_and_on_no_node_but_the_signers_ca_file() {
    let c = TestCluster::start(2, 1).await;
    // Some traffic through the log besides the bootstrap.
    owner_of(&c, 1, &format!("ca-{}", &unique()[..8])).await;
    let ca_file = c.data_dir(0).join("cluster/ca.pem");
    let pem = std::fs::read_to_string(&ca_file).expect("the bootstrap node's CA file");
    assert!(pem.contains("PRIVATE KEY"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&ca_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let needle = b"PRIVATE KEY";
    // identity.json holds each node's own key; the CA file the CA's.
    let leaks: Vec<PathBuf> = [
        files_holding(
            &c.data_dir(0),
            needle,
            &["cluster/identity.json", "cluster/ca.pem"],
        ),
        files_holding(&c.data_dir(1), needle, &["cluster/identity.json"]),
        files_holding(&c.store_dir(), needle, &[]),
    ]
    .concat();
    assert!(
        leaks.is_empty(),
        "a private key is stored outside identity.json and the CA file: {leaks:?}"
    );
    assert!(!c.data_dir(1).join("cluster/ca.pem").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_signer_signs_only_the_key_a_member_registered_under_its_own_name() {
    let c = TestCluster::start(2, 1).await;
    let name = format!("m{}", &unique()[..8]);
    let (mallory, mallory_id) = join_as(&c, &name).await;
    let peers = Peers::bind("127.0.0.1:0".parse().unwrap(), &mallory).unwrap();
    let sign = |node, csr_pem: String| Request::Sign { node, csr_pem };
    let refused = |r: &Reply| matches!(r, Reply::Signed(Err(_)) | Reply::Refused(_));

    // A certificate for the bootstrap node (id 1, its name), made with mallory's key.
    let as_leader = tls::csr_for_key(&c.nodes[0].name, &mallory.key_pem).unwrap();
    let r = rpc_to(&c, 0, &peers, sign(1, as_leader)).await;
    assert!(refused(&r), "signed another member's identity: {r:?}");
    // Its own id with a key it did not register (a stolen certificate's owner re-keyed).
    let (_other_key, other_csr) = tls::new_key_and_csr(&name).unwrap();
    let r = rpc_to(&c, 0, &peers, sign(mallory_id, other_csr.clone())).await;
    assert!(
        refused(&r),
        "signed a key the member did not register: {r:?}"
    );
    // Through a member without the CA key: forwarded to the signer, refused the same.
    let r = rpc_to(&c, 1, &peers, sign(mallory_id, other_csr)).await;
    assert!(refused(&r), "a non-signer signed: {r:?}");

    // Its own registered key: signed, for its own name and id only.
    let own = tls::csr_for_key("n1-please", &mallory.key_pem).unwrap();
    let r = rpc_to(&c, 0, &peers, sign(mallory_id, own.clone())).await;
    let Reply::Signed(Ok(cert)) = r else {
        panic!("a member's own renewal was refused: {r:?}")
    };
    let der = rustls::pki_types::CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
    let who = tls::peer_id(&der).unwrap();
    assert_eq!(
        (who.name.as_str(), who.node),
        (name.as_str(), Some(mallory_id))
    );

    // Removed, it gets nothing more.
    c.remove_node(0, &name).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = rpc_to(&c, 0, &peers, sign(mallory_id, own)).await;
    assert!(refused(&r), "a removed node renewed its certificate: {r:?}");
    peers.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn certificates_are_renewed_before_they_expire_also_on_nodes_that_joined_through_a_non_signer(
) {
    let lifetime = 10;
    let mut c = TestCluster::start_with(2, 1, &format!("cert_lifetime_s = {lifetime}\n")).await;
    let token = c.join_token().to_string();
    // Node 3 joins through node 2, which holds no CA key.
    let third = c.add_node_via("r1", &token, 1).await;
    assert!(!c.data_dir(third).join("cluster/ca.pem").exists());
    let first: Vec<String> = (0..3).map(|i| cert_of(&c, i)).collect();
    let sandbox = format!("cert-{}", &unique()[..8]);
    owner_of(&c, 0, &sandbox).await;

    // Two and a half lifetimes: every certificate the nodes started with has expired.
    tokio::time::sleep(Duration::from_secs(lifetime * 5 / 2)).await;
    let now = tls::unix_now();
    for (i, was) in first.iter().enumerate() {
        let cert = cert_of(&c, i);
        assert_ne!(&cert, was, "node {i} did not renew its certificate");
        let v = tls::validity_of(&cert).unwrap();
        assert!(
            v.not_after > now,
            "node {i}'s stored certificate expired: {v:?}"
        );
        assert!(
            v.not_after <= now + lifetime as i64,
            "node {i}'s certificate outlives the setting: {v:?}"
        );
    }
    // The cluster still works between all nodes: requests through each are forwarded to the
    // owner, over connections made with the renewed certificates.
    let http = reqwest::Client::new();
    for (i, n) in c.nodes.iter().enumerate() {
        let r = exec_through(
            &http,
            &n.url,
            c.admin_key(),
            &sandbox,
            "echo ok",
            Duration::from_secs(20),
        )
        .await;
        assert!(
            matches!(&r, Ok((200, _, _))),
            "an exec through node {i} failed: {r:?}"
        );
    }
    let all_up = |v: &serde_json::Value| {
        v["leader"].is_string()
            && v["nodes"]
                .as_array()
                .is_some_and(|a| a.len() == 3 && a.iter().all(|x| x["state"] == "up"))
    };
    assert!(c.wait(Duration::from_secs(10), all_up).await);
    for (i, n) in c.nodes.iter().enumerate() {
        let expired = n
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("certificate has expired"));
        assert!(!expired, "node {i} logged an expired certificate");
    }
}

/// A cluster whose CA file is gone from every member (a backup restored without it, as
/// docs/operations.md warns) cannot sign a joining node's certificate. The join is refused
/// at once with a reason that says what to do, instead of being answered "try again" for
/// every one of the joiner's tries, and the registration it made goes again instead of
/// staying behind as a `joining` node nobody runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_join_no_member_can_sign_is_refused_at_once_and_leaves_no_registration() {
    let mut c = TestCluster::start(2, 1).await;
    let ca_file = c.data_dir(0).join("cluster/ca.pem");
    std::fs::rename(&ca_file, ca_file.with_extension("pem.away")).unwrap();
    c.restart(0);
    let up = c
        .wait_everywhere(Duration::from_secs(30), |v| {
            v["nodes"]
                .as_array()
                .is_some_and(|a| a.len() == 2 && a.iter().all(|x| x["state"] == "up"))
        })
        .await;
    assert!(up, "the nodes are not both up again: {:?}", c.view(0).await);

    let name = format!("j{}", &unique()[..8]);
    let (_key, csr) = tls::new_key_and_csr(&name).unwrap();
    let req = c.join_request(&name, &csr);
    for via in [1, 0] {
        let asked = std::time::Instant::now();
        let (status, body) = c.post_join(via, &req).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (409, Some("CONFLICT")),
            "through node {via}: {body}"
        );
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains("CA file"), "{message}");
        assert!(
            asked.elapsed() < Duration::from_secs(15),
            "the refusal took {:?}",
            asked.elapsed()
        );
    }
    let gone = c
        .wait_everywhere(Duration::from_secs(10), |v| {
            !v["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["id"] == name.as_str())
        })
        .await;
    assert!(
        gone,
        "the refused node is still registered: {:?}",
        c.view(0).await
    );
}
