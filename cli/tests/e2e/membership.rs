//! Only members act as members: the attacker holds the join token (so it can get a
//! CA-signed certificate of its own) or a certificate of a removed node, and tries to become
//! another node, speak Raft as another node, or move sandboxes it does not own.

use super::cluster_harness::TestCluster;
use super::harness::unique;
use openraft::{CommittedLeaderId, LogId, Vote};
use reqwest::Method;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use std::time::Duration;
use warren_consensus::join::JoinResponse;
use warren_consensus::rpc::{self, Reply, Request};
use warren_consensus::Command;
use warren_transport::{tls, NodeIdentity, Peers, StreamKind};

/// Joins as `name` with the cluster's token, as a new node would: its identity and id.
pub(super) async fn join_as(c: &TestCluster, name: &str) -> (NodeIdentity, u64) {
    let (key_pem, csr) = tls::new_key_and_csr(name).unwrap();
    let req = c.join_request(name, &csr);
    let (status, body) = c.post_join(0, &req).await;
    assert_eq!(status, 200, "{body}");
    let resp: JoinResponse = serde_json::from_value(body).unwrap();
    assert!(resp.verify(c.join_token()));
    let identity = NodeIdentity {
        name: name.into(),
        cert_pem: resp.cert_pem,
        key_pem,
        ca_pem: resp.ca_pem,
    };
    (identity, resp.node_id)
}

/// Sends one RPC to node `i` as the holder of `identity`.
pub(super) async fn rpc_to(c: &TestCluster, i: usize, peers: &Peers, req: Request) -> Reply {
    rpc::call(
        peers,
        &warren_consensus::generation::Generation::none(),
        &format!("127.0.0.1:{}", c.nodes[i].peer_port),
        &c.nodes[i].name,
        req,
        Duration::from_secs(5),
    )
    .await
    .unwrap()
}

/// `GET /healthz` sent to node `i` as a forwarded request (an HTTP stream of the peer
/// protocol): what came back, empty when the stream was closed unanswered (also when the
/// node stopped the stream before the request was all written: refused at once).
async fn http_over_peer_stream(c: &TestCluster, i: usize, peers: &Peers) -> String {
    let addr = format!("127.0.0.1:{}", c.nodes[i].peer_port)
        .parse()
        .unwrap();
    let (mut send, mut recv) = peers
        .open(addr, &c.nodes[i].name, StreamKind::Http)
        .await
        .unwrap();
    let request = b"GET /healthz HTTP/1.1\r\nhost: peer\r\nconnection: close\r\n\r\n";
    if send.write_all(request).await.is_err() {
        return String::new();
    }
    // Not finished: hyper's server closes a connection whose client half-closed. It closes
    // this one after its answer (`connection: close`).
    let read = tokio::time::timeout(Duration::from_secs(10), recv.read_to_end(1 << 20)).await;
    match read {
        Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Ok(Err(_)) => String::new(),
        Err(_) => panic!("the forwarded request got neither an answer nor a close"),
    }
}

fn term_of(view: &serde_json::Value) -> u64 {
    view["term"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_token_holder_cannot_take_a_members_name_or_change_what_a_joiner_signed() {
    let c = TestCluster::start(2, 1).await;
    let leader = c.nodes[c.leader().await].name.clone();

    // The leader's name, with the token but another key: its certificate would let the
    // holder answer as the leader.
    let (_key, csr) = tls::new_key_and_csr(&leader).unwrap();
    let req = c.join_request(&leader, &csr);
    let (status, body) = c.post_join(1, &req).await;
    assert_eq!(status, 409, "registered over the leader: {body}");
    assert_eq!(body["code"], "ALREADY_EXISTS", "{body}");

    // A signed join whose addresses were changed on the way (the join endpoint is plain
    // HTTP): refused, and no node is registered.
    let name = format!("j{}", &unique()[..8]);
    let (_key, csr) = tls::new_key_and_csr(&name).unwrap();
    let mut req = c.join_request(&name, &csr);
    req.peer_addr = "127.0.0.1:4444".into();
    let (status, body) = c.post_join(0, &req).await;
    assert_eq!(status, 403, "a changed join was admitted: {body}");
    let view = c.view(0).await.unwrap();
    assert!(
        !view["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["id"] == name.as_str()),
        "{view}"
    );

    // The same key asking again (a lost answer) gets the same id, bound in the certificate.
    req.peer_addr = "127.0.0.1:9".into();
    let (s1, first) = c.post_join(0, &req).await;
    let (s2, second) = c.post_join(1, &req).await;
    assert_eq!((s1, s2), (200, 200), "{first} {second}");
    assert_eq!(first["node_id"], second["node_id"]);
    let cert = second["cert_pem"].as_str().unwrap();
    let der = CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
    let peer = tls::peer_id(&der).unwrap();
    assert_eq!(peer.node, first["node_id"].as_u64());
    assert_eq!(peer.key_id, tls::key_id_of_csr(&csr).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certified_peer_cannot_speak_as_another_node_nor_move_what_it_does_not_own() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let c = TestCluster::start(3, 1).await;
    let leader_idx = c.leader().await;
    let view = c.view(leader_idx).await.unwrap();
    let term = term_of(&view);
    let leader_id = view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == c.nodes[leader_idx].name.as_str())
        .unwrap()["raft_id"]
        .as_u64()
        .unwrap();
    let follower = (leader_idx + 1) % 3;

    // A sandbox, owned by some member.
    let sandbox = format!("m-{}", &unique()[..8]);
    let r = c.nodes[0]
        .client
        .request(Method::PUT, &format!("/v1/sandboxes/{sandbox}"))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());

    // The attacker joins for real: a CA-signed certificate, bound to its own id.
    let name = format!("mallory{}", &unique()[..6]);
    let (identity, mallory) = join_as(&c, &name).await;
    let peers = Peers::bind("127.0.0.1:0".parse().unwrap(), &identity).unwrap();

    // As the leader of a newer term: entries (a follower would take the sender as leader).
    let append = Request::AppendEntries(openraft::raft::AppendEntriesRequest {
        vote: Vote::new_committed(term + 5, leader_id),
        prev_log_id: None,
        entries: vec![],
        leader_commit: None,
    });
    let reply = rpc_to(&c, follower, &peers, append).await;
    assert!(
        matches!(reply, Reply::Refused(_)),
        "entries in the leader's name were taken: {reply:?}"
    );

    // As the leader, at a higher term: a vote request with a log far ahead.
    let ahead = Some(LogId::new(
        CommittedLeaderId::new(term + 6, leader_id),
        1_000_000,
    ));
    let vote = Request::Vote(openraft::raft::VoteRequest::new(
        Vote::new(term + 6, leader_id),
        ahead,
    ));
    let reply = rpc_to(&c, follower, &peers, vote).await;
    assert!(
        matches!(reply, Reply::Refused(_)),
        "a vote request in the leader's name was taken: {reply:?}"
    );

    // Taking the sandbox: a move of it to the attacker, proposed through the leader. Its
    // placement is at epoch 1 (placed once); a few more are tried in case it moved (a
    // wrong epoch is a no-op, the right one a theft).
    for e in 1..=3u64 {
        let mv = Request::Propose(Command::Move {
            sandbox: sandbox.clone(),
            expected_epoch: e,
            node: mallory,
            handoff: None,
        });
        let reply = rpc_to(&c, leader_idx, &peers, mv).await;
        assert!(
            matches!(reply, Reply::Refused(_)),
            "a non-owner's move of {sandbox} was committed: {reply:?}"
        );
    }

    // Pointing the leader's traffic (Raft, forwarded requests) at an address of its own:
    // a node says only where it is itself.
    let hijack = Request::Propose(Command::SetAddresses {
        node: leader_id,
        api_addr: "127.0.0.1:9".into(),
        peer_addr: "127.0.0.1:9".into(),
    });
    let reply = rpc_to(&c, leader_idx, &peers, hijack).await;
    assert!(
        matches!(reply, Reply::Refused(_)),
        "another node's addresses were changed: {reply:?}"
    );

    // A forwarded HTTP request, as a member may send: answered while it is one.
    assert!(
        http_over_peer_stream(&c, follower, &peers)
            .await
            .starts_with("HTTP/1.1 200"),
        "a member's forwarded request was not served: {:?}",
        http_over_peer_stream(&c, follower, &peers).await
    );

    // The term did not move and the leader still leads.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = c.view(follower).await.unwrap();
    assert_eq!(
        term_of(&after),
        term,
        "the forged messages disturbed the cluster: {after}"
    );

    // Removed, its certificate opens nothing, not even a placement of a new sandbox.
    c.remove_node(0, &name).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let place = Request::Propose(Command::Place {
        sandbox: format!("x-{}", &unique()[..8]),
        node: leader_id,
        expected_epoch: 0,
        tenant: None,
        size: None,
    });
    let reply = rpc_to(&c, leader_idx, &peers, place).await;
    assert!(
        matches!(&reply, Reply::Refused(why) if why.contains("removed")),
        "a removed node's proposal was taken: {reply:?}"
    );
    let answer = http_over_peer_stream(&c, follower, &peers).await;
    assert!(
        answer.is_empty(),
        "a removed node's forwarded request was served: {answer:?}"
    );
    peers.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_lost_its_disk_does_not_rejoin_under_its_old_id() {
    let mut c = TestCluster::start(3, 1).await;
    let leader = c.leader().await;
    let victim = (leader + 1) % 3;
    let name = c.nodes[victim].name.clone();
    let old_id = raft_id_of(&c, leader, &name).await;

    // Its disk is gone; it starts again under the same name, from an empty log.
    c.kill(victim);
    std::fs::remove_dir_all(c.data_dir(victim)).unwrap();
    let refused = c.try_restart(victim);
    assert!(
        refused.is_err(),
        "a node with an empty log rejoined as node {old_id}: {:?}",
        raft_id_of(&c, leader, &name).await
    );

    // Once an operator removed the old member, the name joins again, as a new node.
    let r = c.nodes[leader]
        .client
        .request(
            Method::DELETE,
            &format!("/v1/cluster/nodes/{name}?force=true"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap());
    c.try_restart(victim).unwrap();
    let formed = c
        .wait(Duration::from_secs(60), |v| {
            v["nodes"].as_array().is_some_and(|a| {
                a.iter()
                    .any(|n| n["id"] == name.as_str() && n["state"] == "up")
            })
        })
        .await;
    assert!(formed, "the wiped node did not join again");
    let new_id = raft_id_of(&c, leader, &name).await;
    assert_ne!(new_id, old_id, "the node id was reused");
}

async fn raft_id_of(c: &TestCluster, i: usize, name: &str) -> u64 {
    let view = c.view(i).await.unwrap();
    view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == name)
        .and_then(|n| n["raft_id"].as_u64())
        .unwrap_or(0)
}
