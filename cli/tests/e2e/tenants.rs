//! Tenants and scoped keys on live nodes, tried as another tenant would: every operation of
//! the OpenAPI document, called with tenant B's key on tenant A's sandbox, snapshot, secret
//! and usage, answers as if they were absent (or forbidden, for admin operations), and A's
//! things are untouched afterwards. Keys are hashed at rest; a revocation is refused by every
//! node as soon as it is answered; `/metrics` behind its token.

use super::cluster_harness::TestCluster;
use super::harness::{api_err, create, sh, unique, Node};
use std::time::{Duration, Instant};
use warren_api::keys::KeyScope;
use warren_api::snapshot::CreateSnapshotRequest;
use warren_api::ErrorCode;
use warren_client::Client;

/// A new tenant key made with the node's admin key, and a client that uses it.
async fn tenant_key(node: &Node, tenant: &str) -> (warren_api::keys::CreatedKey, Client) {
    let k = node
        .client
        .create_key(tenant, KeyScope::Tenant, None)
        .await
        .unwrap();
    let c = Client::new(&node.url, &k.key).unwrap();
    (k, c)
}

/// What tenant B must get for an operation on tenant A's things.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// 404 with this code: as if it did not exist.
    Absent(&'static str),
    /// Exactly this status (a delete of what is absent, a refused admin operation, a body
    /// that is invalid whoever sends it, an open endpoint).
    Status(u16),
    /// 200, and none of A's ids or names in the answer.
    ListsNothingOfA,
}

/// Every documented operation must be listed here: a new one fails the test until someone
/// says what another tenant gets from it.
fn expected(method: &str, path: &str) -> Expect {
    use Expect::*;
    match (method, path) {
        ("delete", "/v1/sandboxes/{id}") => Status(204),
        (_, p) if p.starts_with("/v1/sandboxes/{id}") => Absent("SANDBOX_NOT_FOUND"),
        (_, p) if p.starts_with("/v1/snapshots/{sid}") => Absent("SNAPSHOT_NOT_FOUND"),
        (_, p)
            if p.starts_with("/v1/keys")
                || p.starts_with("/v1/cluster/nodes/")
                || p.starts_with("/v1/cluster/join-")
                || p == "/v1/cluster/backup" =>
        {
            Status(403)
        }
        ("put", "/v1/tenants/{tenant}") | ("get", "/v1/tenants") => Status(403),
        ("get", "/v1/tenants/{tenant}") => Absent("NOT_FOUND"),
        // B's own namespace of secret names: A's "tok" is not B's.
        ("get", "/v1/secrets/{name}") => Absent("NOT_FOUND"),
        ("delete", "/v1/secrets/{name}") => Status(204),
        // `{}` has no value: refused before any name is looked at.
        ("put", "/v1/secrets/{name}") => Status(400),
        ("get", "/v1/sandboxes" | "/v1/snapshots" | "/v1/secrets" | "/v1/usage") => ListsNothingOfA,
        // `{}` names no sandbox; a ticket for A's sandbox is tried on its own below.
        ("post", "/v1/tickets") => Status(400),
        ("get", "/v1/cluster" | "/v1/openapi.json" | "/healthz" | "/metrics") => Status(200),
        _ => panic!("no expectation for {method} {path}: say what another tenant gets"),
    }
}

#[tokio::test]
async fn a_tenant_key_finds_nothing_of_another_tenant_through_any_operation() {
    let node = Node::start().await;
    let u = unique();
    let a = node
        .client
        .create_key(&format!("ta-{u}"), KeyScope::Tenant, Some("tenant a"))
        .await
        .unwrap();
    let (b, cb) = tenant_key(&node, &format!("tb-{u}")).await;
    let ca = Client::new(&node.url, &a.key).unwrap();

    // A's things: a sandbox with a file, a snapshot of it, a secret, usage.
    let boxa = format!("a-box-{u}");
    ca.put_sandbox(&boxa, &create(serde_json::json!({})))
        .await
        .unwrap();
    sh(&ca, &boxa, "echo A-DATA > /workspace/a.txt").await;
    let snap = ca
        .create_snapshot(
            &boxa,
            &CreateSnapshotRequest {
                name: Some("a-snap".into()),
                dirs: None,
            },
        )
        .await
        .unwrap();
    ca.put_secret("tok", "A-SECRET-VALUE").await.unwrap();
    let a_secret = ca.secret("tok").await.unwrap();
    // A sees its own (so the filters below have something to hide).
    assert!(ca
        .list_sandboxes(&[])
        .await
        .unwrap()
        .sandboxes
        .iter()
        .any(|s| s.id == boxa));
    assert!(ca
        .list_snapshots(None)
        .await
        .unwrap()
        .snapshots
        .iter()
        .any(|s| s.id == snap.id));
    let deadline = Instant::now() + Duration::from_secs(40);
    while !ca
        .usage(&[])
        .await
        .unwrap()
        .items
        .iter()
        .any(|i| i.sandbox.as_deref() == Some(boxa.as_str()))
    {
        assert!(Instant::now() < deadline, "A's usage never showed");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    // Every operation, as B, on A's things.
    let http = reqwest::Client::new();
    let doc: serde_json::Value = http
        .get(format!("{}/v1/openapi.json", node.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut probed = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, _) in item.as_object().unwrap() {
            let expect = expected(method, path);
            let concrete = path
                .replace("{id}", &boxa)
                .replace("{sid}", &snap.id)
                .replace("{path}", "workspace/a.txt")
                .replace("{name}", "tok")
                .replace("{key}", &a.id)
                .replace("{tenant}", &a.tenant)
                .replace("{node}", &node.node_id)
                .replace("{port}", "3000")
                .replace(['{', '}'], "");
            let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let resp = http
                .request(m, format!("{}{concrete}", node.url))
                .bearer_auth(&b.key)
                // Posing as an admin in the header that carries principals between nodes.
                .header("x-warren-principal", "admin default root")
                .header("content-type", "application/json")
                .body("{}")
                .timeout(Duration::from_secs(60))
                .send()
                .await
                .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
            let status = resp.status().as_u16();
            let body = resp.text().await.unwrap_or_default();
            let what = format!("{method} {concrete} as tenant B: {status} {body}");
            match expect {
                Expect::Absent(code) => {
                    assert_eq!(status, 404, "{what}");
                    let e: serde_json::Value = serde_json::from_str(&body).unwrap();
                    assert_eq!(e["code"], code, "{what}");
                }
                Expect::Status(s) => assert_eq!(status, s, "{what}"),
                Expect::ListsNothingOfA => {
                    assert_eq!(status, 200, "{what}");
                    for a_thing in [&boxa, &snap.id, "tok", "a-snap"] {
                        assert!(!body.contains(a_thing), "{what} shows {a_thing}");
                    }
                }
            }
            probed += 1;
        }
    }
    assert!(probed > 50, "only {probed} operations probed");

    // The same by the other ways in: a ticket, a restore or a new sandbox from A's snapshot.
    let r = cb
        .request(reqwest::Method::POST, "/v1/tickets")
        .json(&serde_json::json!({"sandbox": boxa, "scope": "terminal"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "a ticket for A's sandbox");
    let boxb = format!("b-box-{u}");
    let from_a = cb
        .put_sandbox(
            &boxb,
            &create(serde_json::json!({"from_snapshot": snap.id})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_err(from_a).1, ErrorCode::SnapshotNotFound);
    cb.put_sandbox(&boxb, &create(serde_json::json!({})))
        .await
        .unwrap();
    let restore = cb.restore(&boxb, &snap.id).await.unwrap_err();
    assert_eq!(api_err(restore).1, ErrorCode::SnapshotNotFound);
    assert!(
        !sh(&cb, &boxb, "cat /workspace/a.txt 2>&1 || true")
            .await
            .contains("A-DATA"),
        "B's sandbox got A's files"
    );
    // A tenant key cannot make keys (and so cannot make itself an admin).
    let e = cb
        .create_key(&format!("tb-{u}"), KeyScope::Admin, None)
        .await
        .unwrap_err();
    assert_eq!(api_err(e).0, 403);

    // A's things are as A left them.
    let s = ca.get_sandbox(&boxa).await.unwrap();
    assert_eq!(s.id, boxa);
    assert_eq!(
        sh(&ca, &boxa, "cat /workspace/a.txt").await.trim(),
        "A-DATA"
    );
    assert_eq!(ca.get_snapshot(&snap.id).await.unwrap().id, snap.id);
    assert_eq!(ca.secret("tok").await.unwrap(), a_secret);
    // The admin sees both tenants' sandboxes.
    let all = node.client.list_sandboxes(&[]).await.unwrap().sandboxes;
    assert!(all.iter().any(|s| s.id == boxa) && all.iter().any(|s| s.id == boxb));

    // Keys are listed without values and stored only as hashes.
    let listed = node.client.keys().await.unwrap();
    let text = serde_json::to_string(&listed).unwrap();
    assert!(listed
        .keys
        .iter()
        .any(|k| k.id == a.id && k.tenant == format!("ta-{u}")));
    let secret_part = a.key.rsplit('_').next().unwrap();
    assert!(!text.contains(secret_part));
    node.terminate();
    let mut node = node;
    node.wait_exit(Duration::from_secs(30));
    let found = std::process::Command::new("grep")
        .args(["-rl", secret_part])
        .arg(&node.data_dir)
        .output()
        .unwrap();
    assert!(
        found.stdout.is_empty(),
        "a key's value is on disk: {}",
        String::from_utf8_lossy(&found.stdout)
    );
    node.restart().await;

    // Revoked: refused at once, the other tenant still served.
    node.client.revoke_key(&b.id).await.unwrap();
    let e = cb.get_sandbox(&boxb).await.unwrap_err();
    assert_eq!(api_err(e).0, 401);
    assert_eq!(ca.get_sandbox(&boxa).await.unwrap().id, boxa);
    node.client.delete_sandbox(&boxa).await.unwrap();
    node.client.delete_sandbox(&boxb).await.unwrap();
}

#[tokio::test]
async fn keys_made_and_revoked_through_one_node_hold_at_once_on_every_node() {
    let c = TestCluster::start(3, 1).await;
    let u = unique();
    let root = &c.nodes[0].client;
    let k = root
        .create_key(&format!("t-{u}"), KeyScope::Tenant, None)
        .await
        .unwrap();
    // Used at once through another node, which may not have applied it yet.
    let via2 = Client::new(&c.nodes[2].url, &k.key).unwrap();
    let id = format!("k-{u}");
    via2.put_sandbox(&id, &create(serde_json::json!({})))
        .await
        .unwrap();
    // Another tenant, through a third node, finds nothing (the owner decides by the entry's
    // principal, carried over QUIC).
    let other = root
        .create_key(&format!("o-{u}"), KeyScope::Tenant, None)
        .await
        .unwrap();
    for i in 0..3 {
        let co = Client::new(&c.nodes[i].url, &other.key).unwrap();
        let e = co.sh(&id, "echo hi").await.unwrap_err();
        assert_eq!(api_err(e).1, ErrorCode::SandboxNotFound, "through node {i}");
        let ck = Client::new(&c.nodes[i].url, &k.key).unwrap();
        assert_eq!(ck.sh(&id, "echo hi").await.unwrap().stdout.trim(), "hi");
    }
    // A ticket carries its tenant and opens once, also when the second use enters through
    // another node (the owner redeems it again, whatever the entry node said).
    let t: serde_json::Value = via2
        .request(reqwest::Method::POST, "/v1/tickets")
        .json(&serde_json::json!({"sandbox": id, "scope": "watch"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ticket = t["ticket"].as_str().unwrap().to_string();
    let http = reqwest::Client::new();
    let watch = |i: usize| {
        http.get(format!(
            "{}/v1/sandboxes/{id}/watch?path=/workspace&ticket={ticket}",
            c.nodes[i].url
        ))
        .header("accept", "text/event-stream")
        .send()
    };
    let first = watch(1).await.unwrap();
    assert_eq!(first.status(), 200);
    drop(first);
    assert_eq!(watch(2).await.unwrap().status(), 401, "a ticket used twice");
    // `GET /v1/cluster` counts a tenant's own sandboxes only and shows it no peer addresses.
    let view = |key: String, i: usize| {
        let url = format!("{}/v1/cluster", c.nodes[i].url);
        let http = http.clone();
        async move {
            let v: serde_json::Value = http
                .get(url)
                .bearer_auth(key)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let nodes = v["nodes"].as_array().unwrap().clone();
            let placed: u64 = nodes.iter().map(|n| n["sandboxes"].as_u64().unwrap()).sum();
            let addressed = nodes.iter().filter(|n| n["peer_addr"] != "").count();
            (nodes.len(), placed, addressed)
        }
    };
    assert_eq!(
        view(other.key.clone(), 0).await,
        (3, 0, 0),
        "another tenant's view"
    );
    assert_eq!(
        view(k.key.clone(), 1).await,
        (3, 1, 0),
        "the tenant's own view"
    );
    let (n, placed, addressed) = view(c.admin_key().to_string(), 2).await;
    assert!(
        n == 3 && placed >= 1 && addressed == 3,
        "the admin's view: {placed} {addressed}"
    );
    // Revoked through node 1: every node refuses it once the revocation is answered.
    c.nodes[1].client.revoke_key(&k.id).await.unwrap();
    for i in 0..3 {
        let ck = Client::new(&c.nodes[i].url, &k.key).unwrap();
        let e = ck.get_sandbox(&id).await.unwrap_err();
        assert_eq!(api_err(e).0, 401, "node {i} still took a revoked key");
    }
    root.delete_sandbox(&id).await.unwrap();
}

#[tokio::test]
async fn metrics_need_their_token_or_an_admin_key_when_one_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("metrics-token");
    let token = format!("scrape-{}{}", unique(), unique());
    std::fs::write(&token_file, &token).unwrap();
    let node = Node::start_with(
        "127.0.0.1:0",
        &["--metrics-token-file", token_file.to_str().unwrap()],
    )
    .await;
    let (tenant, _) = tenant_key(&node, "scraper").await;
    let http = reqwest::Client::new();
    let url = format!("{}/metrics", node.url);
    let status = |bearer: Option<String>| {
        let mut r = http.get(&url);
        if let Some(b) = bearer {
            r = r.bearer_auth(b);
        }
        async move { r.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status(None).await, 401);
    assert_eq!(status(Some(format!("{token}x"))).await, 401);
    assert_eq!(status(Some(tenant.key.clone())).await, 401);
    assert_eq!(status(Some(token.clone())).await, 200);
    assert_eq!(status(Some(node.key.clone())).await, 200);
}

#[tokio::test]
async fn a_key_over_its_rate_gets_429_with_retry_after_while_another_key_is_served() {
    let node = Node::start_with(
        "127.0.0.1:0",
        &["--rate-limit-per-s", "2", "--rate-limit-burst", "5"],
    )
    .await;
    let (noisy, _) = tenant_key(&node, "noisy").await;
    let (quiet, _) = tenant_key(&node, "quiet").await;
    let http = reqwest::Client::new();
    let url = format!("{}/v1/secrets", node.url);
    let burst = futures_util::future::join_all(
        (0..30).map(|_| http.get(&url).bearer_auth(&noisy.key).send()),
    )
    .await;
    let (mut served, mut limited) = (0, 0);
    for r in burst {
        let r = r.unwrap();
        match r.status().as_u16() {
            200 => served += 1,
            429 => {
                limited += 1;
                let after: u64 = r.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!((1..=5).contains(&after), "retry-after {after}");
                let e: serde_json::Value = r.json().await.unwrap();
                assert_eq!(e["code"], "RATE_LIMITED");
                assert_eq!(e["retryable"], true);
            }
            other => panic!("{other}"),
        }
    }
    // The burst and what the rate refilled meanwhile, no more.
    assert!(
        (5..=10).contains(&served),
        "{served} served, {limited} limited"
    );
    assert_eq!(served + limited, 30);
    // Another key is not held up by the first one's limit.
    for _ in 0..4 {
        let r = http.get(&url).bearer_auth(&quiet.key).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let r = http.get(&url).bearer_auth(&noisy.key).send().await.unwrap();
    assert_eq!(
        r.status(),
        200,
        "the limited key is served again after its wait"
    );
}

/// Tenant B names tenant A's secret in its own sandbox's egress rule: the proxy refuses the
/// request as for an unknown secret instead of sending A's value; B's secret of the same name
/// is B's, and A's sandbox with the same rule still gets A's.
#[tokio::test]
async fn a_sandboxs_egress_rules_open_only_its_own_tenants_secrets() {
    use super::egress::{sandbox_with_rule, Upstream};
    let node = Node::start_with("127.0.0.1:0", &["--egress-allow-net", "127.0.0.0/8"]).await;
    let up = Upstream::start("127.0.0.6");
    let u = unique();
    let (_, ca) = tenant_key(&node, &format!("ea-{u}")).await;
    let (_, cb) = tenant_key(&node, &format!("eb-{u}")).await;
    let (a_value, b_value) = (format!("A-VALUE-{u}"), format!("B-VALUE-{u}"));
    ca.put_secret("tok", &a_value).await.unwrap();
    let template = "Bearer ${secret:tok}";
    let boxa = sandbox_with_rule(&ca, "eg", "127.0.0.6", "authorization", template).await;
    let boxb = sandbox_with_rule(&cb, "eg", "127.0.0.6", "authorization", template).await;
    let curl = format!("curl -sS -m 10 {}", up.url("/x"));

    let out = sh(&cb, &boxb, &curl).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    assert_eq!(
        v["code"], "EGRESS_DENIED",
        "B's sandbox got through with A's secret: {out}"
    );
    assert_eq!(
        up.count(),
        0,
        "B's request reached the upstream: {}",
        up.last()
    );

    cb.put_secret("tok", &b_value).await.unwrap();
    assert_eq!(sh(&cb, &boxb, &curl).await, "ok");
    let seen = up.last();
    assert!(seen.contains(&b_value.to_ascii_lowercase()), "{seen}");
    assert!(!seen.contains(&a_value.to_ascii_lowercase()), "{seen}");
    assert_eq!(sh(&ca, &boxa, &curl).await, "ok");
    assert!(
        up.last().contains(&a_value.to_ascii_lowercase()),
        "{}",
        up.last()
    );
    for (c, id) in [(&ca, &boxa), (&cb, &boxb)] {
        c.delete_sandbox(id).await.unwrap();
    }
}

#[tokio::test]
async fn a_tenant_past_its_quota_gets_no_new_sandbox_until_it_frees_one() {
    let node = Node::start().await;
    let u = unique();
    let tenant = format!("q-{u}");
    let (_, ck) = tenant_key(&node, &tenant).await;
    let quota = serde_json::json!({"max_sandboxes": 2, "max_cpus": 1.5});
    let r = ck
        .request(reqwest::Method::PUT, &format!("/v1/tenants/{tenant}"))
        .json(&quota)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "a tenant key set its own quota");
    let r = node
        .client
        .request(reqwest::Method::PUT, &format!("/v1/tenants/{tenant}"))
        .json(&quota)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (s1, s2, s3) = (format!("q1-{u}"), format!("q2-{u}"), format!("q3-{u}"));
    // The default size (standard-1) is half a CPU; a whole one more makes 1.5 of 1.5.
    ck.put_sandbox(&s1, &create(serde_json::json!({})))
        .await
        .unwrap();
    ck.put_sandbox(
        &s2,
        &create(serde_json::json!({"resources": {"cpus": 1.0}})),
    )
    .await
    .unwrap();
    for attempt in [
        ck.put_sandbox(&s3, &create(serde_json::json!({"instance_type": "lite"})))
            .await
            .map(|_| ()),
        // Get-or-create through any call counts the same.
        ck.sh(&s3, "true").await.map(|_| ()),
    ] {
        let (status, code, details) = api_err(attempt.unwrap_err());
        assert_eq!((status, code), (403, ErrorCode::Forbidden));
        assert_eq!(details.unwrap()["tenant"], tenant.as_str());
    }
    assert!(
        super::harness::all_containers(&s3).is_empty(),
        "a refused sandbox left a container"
    );
    assert_eq!(
        api_err(ck.get_sandbox(&s3).await.unwrap_err()).1,
        ErrorCode::SandboxNotFound
    );
    let view: serde_json::Value = ck
        .request(reqwest::Method::GET, &format!("/v1/tenants/{tenant}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(view["in_use"]["sandboxes"], 2, "{view}");
    assert_eq!(view["in_use"]["cpus"], 1.5, "{view}");
    assert_eq!(view["quota"]["max_sandboxes"], 2, "{view}");
    // Another tenant's quota is not this key's to read.
    let r = ck
        .request(reqwest::Method::GET, "/v1/tenants/default")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // Freed: the next one fits.
    ck.delete_sandbox(&s1).await.unwrap();
    ck.put_sandbox(&s3, &create(serde_json::json!({"instance_type": "lite"})))
        .await
        .unwrap();
    for id in [&s2, &s3] {
        ck.delete_sandbox(id).await.unwrap();
    }
}

/// A tenant's snapshots are held to its `max_snapshot_bytes`: one that would pass it is
/// refused and not kept (also when it only shows its size once taken), a fork at the limit is
/// refused before it starts anything, the sandbox still sleeps and wakes (its own sleep
/// snapshot is not counted), and deleting a snapshot makes room.
#[tokio::test]
async fn a_tenant_keeps_no_more_snapshot_bytes_than_its_quota() {
    let node = Node::start().await;
    let u = unique();
    let tenant = format!("sq-{u}");
    let (_, ck) = tenant_key(&node, &tenant).await;
    let id = format!("sq-{u}");
    let set_quota = |bytes: u64| {
        let admin = node.client.clone();
        let path = format!("/v1/tenants/{tenant}");
        async move {
            let r = admin
                .request(reqwest::Method::PUT, &path)
                .json(&serde_json::json!({"max_snapshot_bytes": bytes}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
    };
    // 2 MiB of data: each snapshot of /workspace is a little over that.
    sh(&ck, &id, "head -c 2097152 /dev/urandom > /workspace/blob").await;
    let req = CreateSnapshotRequest {
        name: None,
        dirs: Some(vec!["/workspace".into()]),
    };
    set_quota(3 << 20).await;
    let first = ck.create_snapshot(&id, &req).await.unwrap();
    assert!(first.size_bytes > 2 << 20, "{first:?}");

    // The second would keep twice 2 MiB of 3: refused once its size is known, and not kept.
    let (status, code, details) = api_err(ck.create_snapshot(&id, &req).await.unwrap_err());
    assert_eq!((status, code), (403, ErrorCode::Forbidden));
    assert_eq!(details.unwrap()["tenant"], tenant.as_str());
    let kept = ck.list_snapshots(Some(&id)).await.unwrap().snapshots;
    let ids: Vec<&str> = kept.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, [first.id.as_str()], "the refused snapshot was kept");

    // At the limit: refused before anything is taken, a fork too.
    set_quota(first.size_bytes).await;
    let e = ck.create_snapshot(&id, &req).await.unwrap_err();
    assert_eq!(api_err(e).1, ErrorCode::Forbidden);
    let fork = warren_api::snapshot::ForkRequest {
        count: 1,
        ids: Some(vec![format!("sqf-{u}")]),
    };
    assert_eq!(
        api_err(ck.fork(&id, &fork).await.unwrap_err()).1,
        ErrorCode::Forbidden
    );
    assert_eq!(
        api_err(ck.get_sandbox(&format!("sqf-{u}")).await.unwrap_err()).1,
        ErrorCode::SandboxNotFound,
        "a refused fork made a sandbox"
    );

    // What the tenant keeps is shown with its quota.
    let view: serde_json::Value = ck
        .request(reqwest::Method::GET, &format!("/v1/tenants/{tenant}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(view["in_use"]["snapshot_bytes"], first.size_bytes, "{view}");
    assert_eq!(
        view["quota"]["max_snapshot_bytes"], first.size_bytes,
        "{view}"
    );

    // Its own sleep is not the quota's business: it sleeps and wakes with its files.
    ck.sleep(&id).await.unwrap();
    assert_eq!(
        sh(&ck, &id, "wc -c < /workspace/blob").await.trim(),
        "2097152"
    );

    // Room made by a delete is room to snapshot again.
    ck.delete_snapshot(&first.id).await.unwrap();
    let again = ck.create_snapshot(&id, &req).await.unwrap();
    ck.delete_snapshot(&again.id).await.unwrap();
    ck.delete_sandbox(&id).await.unwrap();
}

/// A node told to join a cluster but given no API key refuses to start, instead of making up
/// a bootstrap key the cluster's clients do not have.
#[tokio::test]
async fn a_joining_node_without_the_clusters_key_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let err = super::harness::refused_start(
        &[
            "--node-id",
            "joiner",
            "--listen",
            "127.0.0.1:0",
            "--join",
            "http://127.0.0.1:9",
            "--join-token",
            "wj_nothing",
        ],
        dir.path(),
    )
    .await;
    assert!(err.contains("no API key"), "{err}");
    assert!(
        !warren_client::api_key_path(dir.path()).exists(),
        "a key was made up"
    );
}

/// Keys are not guessed online: an address that keeps presenting wrong keys (of the key form,
/// each of which costs the node a catch-up with the cluster) is held off with 429, its own
/// valid key included, until its rate allows another try.
#[tokio::test]
async fn an_address_presenting_wrong_keys_is_held_off() {
    let node = Node::start_with("127.0.0.1:0", &["--auth-failures-per-min", "5"]).await;
    let http = reqwest::Client::new();
    let url = format!("{}/v1/sandboxes", node.url);
    let mut statuses = Vec::new();
    for i in 0..10 {
        let guess = format!("wk_{:016x}_{}", i, "0".repeat(64));
        let r = http.get(&url).bearer_auth(guess).send().await.unwrap();
        statuses.push(r.status().as_u16());
    }
    super::harness::first_held_off(&statuses, 401, 5);
    let r = http.get(&url).bearer_auth(&node.key).send().await.unwrap();
    assert_eq!(r.status(), 429, "held off, whatever key it shows now");
    assert!(r.headers().contains_key("retry-after"));
}
