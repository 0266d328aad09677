//! The proxy as a sandbox's only way out, tried by programs that ignore the proxy
//! variables: TCP to ports 80 and 443 arrives at the proxy anyway (named by `Host` or the
//! TLS server name) and gets the sandbox's rules; DNS sent to any server is answered by the
//! node per policy; `git clone` and `pip install` over HTTPS through the proxy get a
//! private token they never see. Every destination the sandbox names is in a documentation range (192.0.2.0/24,
//! never routed) and every upstream is on this host's loopback, opened to the proxy with
//! `--egress-allow-net 127.0.0.0/8`.

use super::egress::{
    ca_and_cert, node_trusting, policy, sandbox_with_rule, upstream_tls, Upstream,
};
use super::harness::{sh, unique, Node};

/// An address no network routes: what a sandbox "connects to" when it bypasses the proxy.
const NOWHERE: &str = "192.0.2.1";

/// A Python program run in a sandbox: one DNS query for `name` of type `qtype` (1: A,
/// 28: AAAA) sent straight to a server of its choosing (not the one in resolv.conf);
/// prints the response code, the number of answers and the answers' IPv4 addresses.
fn dns_query(name: &str, qtype: u16) -> String {
    const SCRIPT: &str = r#"
import socket, struct
q = struct.pack('>HHHHHH', 0x4242, 0x0100, 1, 0, 0, 0)
q += b''.join(bytes([len(p)]) + p.encode() for p in 'NAME'.split('.')) + b'\0'
q += struct.pack('>HH', QTYPE, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
s.sendto(q, ('192.0.2.53', 53))
r = s.recv(4096)
assert r[:2] == b'\x42\x42', 'another id'
count = struct.unpack('>H', r[6:8])[0]
addrs = []
i = len(q)
for _ in range(count):
    i += 2 if r[i] & 0xc0 == 0xc0 else r.index(b'\0', i) - i + 1
    kind, _, _, size = struct.unpack('>HHIH', r[i:i + 10]); i += 10
    if kind == 1: addrs.append(socket.inet_ntoa(r[i:i + size]))
    i += size
print(r[3] & 15, count, ' '.join(addrs))
"#;
    format!(
        "python3 - <<'EOF'\n{}\nEOF",
        SCRIPT
            .replace("NAME", name)
            .replace("QTYPE", &qtype.to_string())
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_traffic_that_ignores_the_proxy_reaches_it_anyway_and_dns_is_answered_per_policy() {
    let node = Node::start_with("127.0.0.1:0", &["--egress-allow-net", "127.0.0.0/8"]).await;
    let c = &node.client;
    let up = Upstream::start("127.0.0.9");
    c.put_secret("api", "TRANSPARENT-TOKEN").await.unwrap();
    let id = sandbox_with_rule(
        c,
        "eg-tp",
        "127.0.0.9",
        "authorization",
        "Bearer ${secret:api}",
    )
    .await;

    // Plain HTTP to port 80 of an address that leads nowhere, proxy variables ignored: the
    // firewall hands it to the proxy, which sends it where `Host` says, with the rule.
    let bypass = format!(
        "curl -sS -m 10 --noproxy '*' -H 'Host: {}' http://{NOWHERE}/bypass",
        up.addr
    );
    assert_eq!(sh(c, &id, &bypass).await, "ok");
    assert!(up.last().starts_with("get /bypass"), "{}", up.last());
    assert!(
        up.last()
            .contains("authorization: bearer transparent-token"),
        "{}",
        up.last()
    );
    // Any other port leads nowhere at all.
    let raw = c
        .sh(
            &id,
            &format!(
                "curl -sS -m 3 --noproxy '*' http://{NOWHERE}:{}/",
                up.addr.port()
            ),
        )
        .await
        .unwrap();
    assert_ne!(raw.exit_code, 0, "{raw:?}");

    // DNS to a server of the sandbox's choosing is answered by the node: `localhost`
    // resolves (on the node) to loopback, which this node's operator opened.
    assert_eq!(
        sh(c, &id, &dns_query("localhost", 1)).await.trim(),
        "0 1 127.0.0.1"
    );
    assert_eq!(sh(c, &id, &dns_query("localhost", 28)).await.trim(), "0 0");
    assert_eq!(
        sh(c, &id, &dns_query("no-such-name.invalid", 1))
            .await
            .trim(),
        "2 0",
        "SERVFAIL for a name the node cannot resolve"
    );
    // A policy that denies the name, or every address it has: REFUSED (5), at once.
    c.put_egress(
        &id,
        &policy(serde_json::json!({"deny_hosts": ["localhost"]})),
    )
    .await
    .unwrap();
    assert_eq!(sh(c, &id, &dns_query("localhost", 1)).await.trim(), "5 0");
    c.put_egress(
        &id,
        &policy(serde_json::json!({"deny_hosts": ["127.0.0.0/8"]})),
    )
    .await
    .unwrap();
    assert_eq!(sh(c, &id, &dns_query("localhost", 1)).await.trim(), "5 0");

    // Default deny: the bypassing request gets the proxy's refusal, naming the host.
    c.put_egress(&id, &policy(serde_json::json!({"default": "deny"})))
        .await
        .unwrap();
    let seen = up.count();
    let denied = sh(
        c,
        &id,
        &format!(
            "curl -sS -m 10 --noproxy '*' -w ' %{{http_code}}' -H 'Host: {}' http://{NOWHERE}/denied",
            up.addr
        ),
    )
    .await;
    assert!(denied.contains("EGRESS_DENIED"), "{denied}");
    assert!(denied.ends_with(" 403"), "{denied}");
    assert_eq!(up.count(), seen, "a denied request reached the upstream");
}

/// An HTTPS server of static files on `127.0.0.9`, run by Python, that answers 401 to any
/// request without `authorization: token <token>` (and notes its path in `denied.log`).
struct PrivateServer {
    child: std::process::Child,
    port: u16,
    dir: std::path::PathBuf,
}

/// A bare git repository `repo.git` in `dir`, servable over "dumb" HTTP.
fn git_repo(dir: &std::path::Path) {
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let git = |args: &[&str], cwd: &std::path::Path| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(cwd)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "-b", "main"], &work);
    std::fs::write(work.join("README"), "private repository\n").unwrap();
    git(&["add", "README"], &work);
    git(&["commit", "-q", "-m", "first"], &work);
    git(&["clone", "-q", "--bare", "work", "repo.git"], dir);
    git(&["update-server-info"], &dir.join("repo.git"));
}

/// A package index (PEP 503 "simple") in `dir` with one wheel, `warren-probe` 1.0.
fn pip_index(dir: &std::path::Path) {
    const SCRIPT: &str = r#"
import base64, hashlib, os, sys, zipfile
d = sys.argv[1]
os.makedirs(d + '/files'); os.makedirs(d + '/simple/warren-probe')
files = {
    'warren_probe/__init__.py': "VALUE = 'installed through the proxy'\n",
    'warren_probe-1.0.dist-info/METADATA': 'Metadata-Version: 2.1\nName: warren-probe\nVersion: 1.0\n',
    'warren_probe-1.0.dist-info/WHEEL': 'Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
}
record = ''
with zipfile.ZipFile(d + '/files/warren_probe-1.0-py3-none-any.whl', 'w') as z:
    for name, text in files.items():
        data = text.encode()
        z.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()
        record += name + ',sha256=' + digest + ',' + str(len(data)) + '\n'
    record += 'warren_probe-1.0.dist-info/RECORD,,\n'
    z.writestr('warren_probe-1.0.dist-info/RECORD', record)
with open(d + '/simple/warren-probe/index.html', 'w') as f:
    f.write('<html><body><a href="../../files/warren_probe-1.0-py3-none-any.whl">warren_probe-1.0-py3-none-any.whl</a></body></html>')
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(SCRIPT)
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

impl PrivateServer {
    fn start(token: &str, cert: &str, key: &str, fill: fn(&std::path::Path)) -> PrivateServer {
        let dir = std::env::temp_dir().join(format!("wt-private-{}", unique()));
        std::fs::create_dir_all(&dir).unwrap();
        fill(&dir);
        std::fs::write(dir.join("cert.pem"), cert).unwrap();
        std::fs::write(dir.join("key.pem"), key).unwrap();
        const SCRIPT: &str = r#"
import http.server, ssl, functools, sys
class H(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.headers.get('authorization') != 'token TOKEN':
            open('DIR/denied.log', 'a').write(self.path + '\n')
            self.send_response(401); self.send_header('content-length', '0'); self.end_headers(); return
        super().do_GET()
s = http.server.ThreadingHTTPServer(('127.0.0.9', 0), functools.partial(H, directory='DIR'))
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain('DIR/cert.pem', 'DIR/key.pem')
s.socket = ctx.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;
        let script = SCRIPT
            .replace("TOKEN", token)
            .replace("DIR", &dir.display().to_string());
        let mut child = std::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let port = line.trim().parse().expect("the server's port");
        PrivateServer { child, port, dir }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_clones_a_private_repository_over_https_with_a_token_it_never_holds() {
    let (ca, cert, key) = ca_and_cert("warren test VCS CA", "127.0.0.9");
    let server = PrivateServer::start("VCS-SECRET-7", &cert, &key, git_repo);
    let (node, _ca_file) = node_trusting(&ca).await;
    let c = &node.client;
    c.put_secret("vcs", "VCS-SECRET-7").await.unwrap();
    let id = sandbox_with_rule(
        c,
        "eg-git",
        "127.0.0.9",
        "authorization",
        "token ${secret:vcs}",
    )
    .await;
    let url = format!("https://127.0.0.9:{}/repo.git", server.port);
    // Through HTTPS_PROXY: git trusts the sandbox's CA (GIT_SSL_CAINFO), the proxy adds the
    // token, the server (which answers 401 without it) serves the repository.
    let out = sh(
        c,
        &id,
        &format!("git clone -q {url} /workspace/repo && cat /workspace/repo/README"),
    )
    .await;
    assert_eq!(out, "private repository\n");
    let config = sh(c, &id, "cat /workspace/repo/.git/config; env").await;
    assert!(!config.contains("VCS-SECRET-7"), "{config}");
    // Without the rule, the server refuses the sandbox: the token came from the proxy.
    c.put_egress(&id, &policy(serde_json::json!({})))
        .await
        .unwrap();
    let refused = c
        .sh(
            &id,
            &format!(
                "GIT_SSL_NO_VERIFY=1 GIT_TERMINAL_PROMPT=0 git clone -q {url} /workspace/again 2>&1; echo rc=$?"
            ),
        )
        .await
        .unwrap();
    assert!(!refused.stdout.contains("rc=0"), "{}", refused.stdout);
    // Git asks for credentials only when the server answered 401.
    assert!(refused.stdout.contains("Username"), "{}", refused.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_port_443_that_ignores_the_proxy_is_intercepted_by_rule_or_tunnelled_by_name() {
    // The upstream must listen on 443 (the port a bypassing client keeps) of the address
    // its name resolves to on the node: `localhost`.
    let (up_ca, tls) = upstream_tls("localhost");
    let up = Upstream::serve(("127.0.0.1", 443), Some(tls));
    let (node, _ca_file) = node_trusting(&up_ca).await;
    let c = &node.client;
    c.put_secret("tok", "SNI-TOKEN").await.unwrap();
    let id = sandbox_with_rule(c, "eg-sni", "localhost", "x-token", "${secret:tok}").await;
    // `--resolve` makes curl connect to an address that leads nowhere while it names
    // `localhost` in its TLS server name and Host header.
    let bypass = |path: &str, extra: &str| {
        format!(
            "curl -sS -m 10 -v --noproxy '*' --resolve localhost:443:{NOWHERE} {extra} https://localhost{path} 2>&1"
        )
    };
    let out = sh(c, &id, &bypass("/intercepted", "")).await;
    assert!(out.contains(&format!("sandbox {id}")), "{out}");
    assert!(up.last().starts_with("get /intercepted"), "{}", up.last());
    assert!(up.last().contains("x-token: sni-token"), "{}", up.last());

    // No rule: tunnelled untouched, the sandbox sees the upstream's own certificate.
    c.put_egress(&id, &policy(serde_json::json!({})))
        .await
        .unwrap();
    sh(
        c,
        &id,
        &format!("cat > /workspace/up-ca.pem <<'EOF'\n{up_ca}EOF"),
    )
    .await;
    let out = sh(
        c,
        &id,
        &bypass("/tunnelled", "--cacert /workspace/up-ca.pem"),
    )
    .await;
    assert!(out.contains("warren test upstream CA"), "{out}");
    assert!(up.last().starts_with("get /tunnelled"), "{}", up.last());
    assert!(!up.last().contains("x-token"), "{}", up.last());
    // A denied name gets nowhere (the connection is closed, nothing reaches the upstream).
    c.put_egress(
        &id,
        &policy(serde_json::json!({"deny_hosts": ["localhost"]})),
    )
    .await
    .unwrap();
    let seen = up.count();
    let refused = c
        .sh(&id, &bypass("/denied", "--cacert /workspace/up-ca.pem"))
        .await
        .unwrap();
    assert_ne!(refused.exit_code, 0, "{refused:?}");
    assert_eq!(up.count(), seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_installs_from_a_private_index_over_https_with_a_token_it_never_holds() {
    // pip itself, run from its wheel (the sandbox image has Python, not pip): what Debian's
    // python3-pip-whl puts on this machine (`make test` installs python3-venv, which needs it).
    let wheel = std::fs::read_dir("/usr/share/python-wheels")
        .expect("python3-pip-whl is installed")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("pip-"))
        })
        .expect("a pip wheel");
    let (ca, cert, key) = ca_and_cert("warren test VCS CA", "127.0.0.9");
    let server = PrivateServer::start("PYPI-SECRET-3", &cert, &key, pip_index);
    let (node, _ca_file) = node_trusting(&ca).await;
    let c = &node.client;
    c.put_secret("pypi", "PYPI-SECRET-3").await.unwrap();
    let id = sandbox_with_rule(
        c,
        "eg-pip",
        "127.0.0.9",
        "authorization",
        "token ${secret:pypi}",
    )
    .await;
    c.write_file(&id, "/tmp/pip.whl", std::fs::read(&wheel).unwrap(), None)
        .await
        .unwrap();
    // Through HTTPS_PROXY; pip trusts the sandbox's CA (PIP_CERT), the proxy adds the token.
    let install = format!(
        "python3 /tmp/pip.whl/pip install -q --no-cache-dir --disable-pip-version-check \
         --index-url https://127.0.0.9:{}/simple --target /workspace/lib warren-probe && \
         PYTHONPATH=/workspace/lib python3 -c 'import warren_probe; print(warren_probe.VALUE)'",
        server.port
    );
    assert_eq!(
        sh(c, &id, &install).await.trim(),
        "installed through the proxy"
    );
    // Without the rule (tunnelled, the index's own CA trusted) the index refuses the
    // sandbox: the token came from the proxy.
    c.put_egress(&id, &policy(serde_json::json!({})))
        .await
        .unwrap();
    c.write_file(
        &id,
        "/workspace/index-ca.pem",
        ca.clone().into_bytes(),
        None,
    )
    .await
    .unwrap();
    let refused = c
        .sh(
            &id,
            &format!(
                "CA=/workspace/index-ca.pem; PIP_CERT=$CA REQUESTS_CA_BUNDLE=$CA SSL_CERT_FILE=$CA \
                 timeout 60 python3 /tmp/pip.whl/pip install --no-input --no-cache-dir \
                 --disable-pip-version-check --retries 0 \
                 --index-url https://127.0.0.9:{}/simple --target /workspace/again warren-probe \
                 2>&1; echo rc=$?",
                server.port
            ),
        )
        .await
        .unwrap();
    assert!(!refused.stdout.contains("rc=0"), "{}", refused.stdout);
    let denied = std::fs::read_to_string(server.dir.join("denied.log")).unwrap_or_default();
    assert!(
        denied.contains("/simple/warren-probe/"),
        "{denied:?} {}",
        refused.stdout
    );
}
