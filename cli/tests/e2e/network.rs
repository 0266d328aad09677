//! The sandbox firewall, tried from inside a sandbox against targets this test puts on this
//! machine: the node's own ports on every host address, another sandbox, cloud metadata
//! addresses, a private-range "other node" and a public address served from a network
//! namespace the test creates, and IPv6. A route of the test's own sends the probes'
//! destinations into that namespace, so that no probe can leave the machine even while a
//! rule is missing. Nothing is reached directly, not even the public address: the node's
//! egress proxy is the only way out, and a tunnel through it to that public address proves
//! that the probes would arrive if anything let them.

use super::harness::{sh, unique, Node};
use std::process::Command;

fn run(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Addresses served from the test's namespace, by what they stand for.
const TARGETS: &[(&str, &str)] = &[
    ("aws-gcp-azure-metadata", "169.254.169.254"),
    ("alibaba-metadata", "100.100.100.200"),
    ("azure-wireserver", "168.63.129.16"),
    ("private-node", "10.251.7.9"),
    ("cgnat-node", "100.64.7.9"),
];
/// A public address, served from the same namespace: reached through the proxy only (the
/// probes' control).
const PUBLIC: &str = "11.22.33.44";
/// Another public address there, which the node advertises as its own API address: a
/// cluster node on a public address is no target either.
const PUBLIC_NODE: &str = "11.22.33.45";
/// The port the namespace's listener answers on.
const PORT: u16 = 8089;

/// A network namespace with a TCP listener on every target address, reachable from
/// sandboxes only (a policy route for traffic from the sandbox pool), removed on drop.
struct FakeNetwork {
    ns: String,
    host_if: String,
    /// The routing table (and rule priority) that sends sandbox traffic for the targets
    /// into the namespace.
    table: String,
    listener: std::process::Child,
    /// Whether the host's own traffic to the public address goes there too (one test at a
    /// time may have that route of the main table).
    host_route: bool,
}

impl FakeNetwork {
    /// With the host's route to the public address (for the proxy's control).
    fn start() -> FakeNetwork {
        FakeNetwork::start_as(true)
    }

    /// For sandboxes' traffic only: beside another test's `start()` (a /30 out of another
    /// range, and no route of the main table).
    fn start_for_sandboxes_only() -> FakeNetwork {
        FakeNetwork::start_as(false)
    }

    fn start_as(host_route: bool) -> FakeNetwork {
        let u = unique();
        let ns = format!("wt-{u}");
        let (host_if, ns_if) = (format!("wth{u}"), format!("wtn{u}"));
        // A /30 of its own between the host and the namespace.
        let octet = u8::from_str_radix(&u[..2], 16).unwrap() % 64 + if host_route { 0 } else { 64 };
        let table = (5000 + u16::from_str_radix(&u[..3], 16).unwrap()).to_string();
        let host_ip = format!("10.252.{octet}.1");
        let ns_ip = format!("10.252.{octet}.2");
        run(&["ip", "netns", "add", &ns]);
        run(&[
            "ip", "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
        ]);
        run(&["ip", "link", "set", &ns_if, "netns", &ns]);
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{host_ip}/30"),
            "dev",
            &host_if,
        ]);
        run(&["ip", "link", "set", &host_if, "up"]);
        let in_ns = |args: &[&str]| {
            let mut all = vec!["ip", "netns", "exec", &ns];
            all.extend_from_slice(args);
            run(&all);
        };
        in_ns(&["ip", "link", "set", "lo", "up"]);
        in_ns(&["ip", "addr", "add", &format!("{ns_ip}/30"), "dev", &ns_if]);
        for (_, addr) in TARGETS
            .iter()
            .chain([&("public", PUBLIC), &("public-node", PUBLIC_NODE)])
        {
            in_ns(&["ip", "addr", "add", &format!("{addr}/32"), "dev", &ns_if]);
            // Only sandboxes' traffic is sent there, never the host's own.
            run(&[
                "ip",
                "route",
                "replace",
                &format!("{addr}/32"),
                "via",
                &ns_ip,
                "dev",
                &host_if,
                "table",
                &table,
            ]);
        }
        in_ns(&["ip", "link", "set", &ns_if, "up"]);
        in_ns(&["ip", "route", "add", "default", "via", &host_ip]);
        // The host's own traffic (its egress proxy) reaches the public address there too.
        if host_route {
            run(&[
                "ip",
                "route",
                "replace",
                &format!("{PUBLIC}/32"),
                "via",
                &ns_ip,
                "dev",
                &host_if,
            ]);
        }
        run(&[
            "ip",
            "rule",
            "add",
            "from",
            "10.200.0.0/16",
            "lookup",
            &table,
            "priority",
            &table,
        ]);
        let listener = Command::new("ip")
            .args(["netns", "exec", &ns, "python3", "-c"])
            .arg(format!(
                "import socket\n\
                 s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
                 s.bind(('0.0.0.0', {PORT})); s.listen(64)\n\
                 while True:\n    c, _ = s.accept(); c.sendall(b'hit'); c.close()\n"
            ))
            .spawn()
            .unwrap();
        let fake = FakeNetwork {
            ns,
            host_if,
            table,
            listener,
            host_route,
        };
        // The host itself reaches every target (the listener is up, the addresses exist).
        for (_, addr) in TARGETS
            .iter()
            .chain([&("public", PUBLIC), &("public-node", PUBLIC_NODE)])
        {
            fake.wait_reachable_from_namespace(addr);
        }
        fake
    }

    fn wait_reachable_from_namespace(&self, addr: &str) {
        for _ in 0..100 {
            let out = Command::new("ip")
                .args(["netns", "exec", &self.ns, "python3", "-c"])
                .arg(format!(
                    "import socket; s = socket.create_connection(('{addr}', {PORT}), 1); print(s.recv(3).decode())"
                ))
                .output()
                .unwrap();
            if String::from_utf8_lossy(&out.stdout).trim() == "hit" {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("the test's listener does not answer on {addr}");
    }
}

impl Drop for FakeNetwork {
    fn drop(&mut self) {
        let _ = self.listener.kill();
        let _ = self.listener.wait();
        let _ = Command::new("ip")
            .args(["rule", "del", "priority", &self.table])
            .output();
        let _ = Command::new("ip")
            .args(["route", "flush", "table", &self.table])
            .output();
        if self.host_route {
            let _ = Command::new("ip")
                .args(["route", "del", &format!("{PUBLIC}/32")])
                .output();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}

/// From inside `id`: whether a TCP connection to each `(name, addr, port)` gets through.
async fn probe(node: &Node, id: &str, targets: &[(String, String, u16)]) -> Vec<(String, bool)> {
    let list: Vec<String> = targets
        .iter()
        .map(|(n, a, p)| format!("('{n}', '{a}', {p})"))
        .collect();
    let script = format!(
        "import socket\n\
         for name, addr, port in [{}]:\n\
         \x20   try:\n\
         \x20       s = socket.create_connection((addr, port), 2); s.close(); print(name, 'open')\n\
         \x20   except Exception as e:\n\
         \x20       print(name, 'blocked')\n",
        list.join(", ")
    );
    node.client
        .write_file(id, "/tmp/probe.py", script.into_bytes(), None)
        .await
        .unwrap();
    let out = sh(&node.client, id, "python3 /tmp/probe.py").await;
    out.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, s)| (n.to_string(), s == "open"))
        .collect()
}

/// Every IPv4 address of this host.
fn host_addresses() -> Vec<String> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3))
        .filter_map(|a| a.split('/').next())
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn a_sandbox_reaches_no_host_port_no_neighbour_no_metadata_and_no_private_node() {
    let fake = FakeNetwork::start();
    let node = Node::start_with(
        "0.0.0.0:0",
        &["--advertise-api", &format!("{PUBLIC_NODE}:{PORT}")],
    )
    .await;
    let c = &node.client;
    let api_port: u16 = node.url.rsplit(':').next().unwrap().parse().unwrap();
    let (a, b) = (format!("net-a-{}", unique()), format!("net-b-{}", unique()));
    // A neighbour that serves, and can reach its own service.
    c.start_process(
        &b,
        &serde_json::from_value(
            serde_json::json!({"command": "exec python3 -m http.server 8080", "id": "web"}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let wait =
        serde_json::from_value(serde_json::json!({"port": 8080, "timeout_ms": 20000})).unwrap();
    c.wait_port(&b, "web", &wait).await.unwrap();
    let b_ip = sh(c, &b, "hostname -I | cut -d' ' -f1")
        .await
        .trim()
        .to_string();
    let gateway = sh(c, &a, "ip route | awk '/default/ {print $3}'")
        .await
        .trim()
        .to_string();
    // A listener of the test's own on every host address, UDP: the QUIC peer port's kind.
    let udp = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let udp_port = udp.local_addr().unwrap().port();

    let mut targets: Vec<(String, String, u16)> = vec![
        ("neighbour".into(), b_ip.clone(), 8080),
        ("gateway-api".into(), gateway.clone(), api_port),
    ];
    for addr in host_addresses() {
        targets.push((format!("host-{addr}-api"), addr, api_port));
    }
    for (name, addr) in TARGETS {
        targets.push((name.to_string(), addr.to_string(), PORT));
    }
    targets.push(("public-node".into(), PUBLIC_NODE.into(), PORT));
    targets.push(("public-control".into(), PUBLIC.into(), PORT));
    let seen = probe(&node, &a, &targets).await;
    assert_eq!(seen.len(), targets.len(), "{seen:?}");
    for (name, open) in &seen {
        assert!(!open, "{name} is reachable without the proxy ({seen:?})");
    }
    // The control: a tunnel through the node's proxy (HTTPS_PROXY, set in every sandbox)
    // reaches the public address's listener; not the public address the node advertises.
    let tunnel = |to: &str| {
        format!(
            "python3 - <<'EOF'\n\
import os, socket, urllib.parse\n\
p = urllib.parse.urlsplit(os.environ['HTTPS_PROXY'])\n\
s = socket.create_connection((p.hostname, p.port), 5)\n\
s.sendall(b'CONNECT {to}:{PORT} HTTP/1.1\\r\\nHost: {to}:{PORT}\\r\\n\\r\\n')\n\
head = b''\n\
while not head.endswith(b'\\r\\n\\r\\n'): head += s.recv(1)\n\
print(head.split(b' ')[1].decode(), s.recv(3).decode() if b' 200 ' in head else '-')\n\
EOF"
        )
    };
    assert_eq!(sh(c, &a, &tunnel(PUBLIC)).await.trim(), "200 hit");
    assert_eq!(sh(c, &a, &tunnel(PUBLIC_NODE)).await.trim(), "403 -");

    // UDP to the node's addresses (the QUIC peer port is UDP): nothing arrives.
    let sent = sh(
        c,
        &a,
        &format!(
            "python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
             [s.sendto(b'x', (h, {udp_port})) for h in ['{gateway}'] + '{}'.split()]\"; echo sent",
            host_addresses().join(" ")
        ),
    )
    .await;
    assert_eq!(sent.trim(), "sent");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let mut buf = [0u8; 16];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "a datagram from the sandbox reached the host"
    );

    // IPv6 is off inside, and the host's IPv6 listener is out of reach.
    let v6 = sh(
        c,
        &a,
        "cat /proc/sys/net/ipv6/conf/all/disable_ipv6; ip -6 addr show | grep -c inet6 || true",
    )
    .await;
    assert_eq!(v6.lines().collect::<Vec<_>>(), vec!["1", "0"], "{v6}");
    let six = std::net::TcpListener::bind("[::]:0").unwrap();
    let six_port = six.local_addr().unwrap().port();
    six.set_nonblocking(true).unwrap();
    let tried = sh(
        c,
        &a,
        &format!(
            "python3 -c \"import socket\ntry:\n    socket.create_connection(('fe80::1%eth0', {six_port}), 2); print('open')\nexcept Exception: print('blocked')\""
        ),
    )
    .await;
    assert_eq!(tried.trim(), "blocked");
    assert!(six.accept().is_err(), "a sandbox connected over IPv6");
    // And should one get an IPv6 address anyway, the host drops and rejects all of it.
    let rules = Command::new("ip6tables")
        .args(["-S", "WARREN-FORWARD"])
        .output()
        .unwrap();
    let rules = String::from_utf8_lossy(&rules.stdout);
    assert!(rules.contains("-A WARREN-FORWARD -j DROP"), "{rules}");
    drop(node);
    drop(fake);
}

#[tokio::test]
async fn a_node_whose_firewall_cannot_be_installed_starts_no_sandbox() {
    let node = Node::start_with(
        "127.0.0.1:0",
        &[
            "--iptables",
            "/nonexistent/iptables",
            "--ip6tables",
            "/nonexistent/ip6tables",
        ],
    )
    .await;
    let r = reqwest::get(format!("{}/healthz", node.url)).await.unwrap();
    assert_eq!(r.status(), 503);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["problems"]["firewall"]
            .as_str()
            .is_some_and(|p| p.contains("/nonexistent/iptables")),
        "{body}"
    );
    let id = format!("nofw-{}", unique());
    let e = node
        .client
        .sh(&id, "echo should-not-run")
        .await
        .unwrap_err();
    super::harness::assert_unavailable(&e);
    assert!(e.to_string().contains("firewall"), "{e}");
    assert!(
        node.containers().is_empty(),
        "a container was made: {:?}",
        node.containers()
    );
}

#[tokio::test]
async fn a_rule_taken_away_while_the_node_runs_is_put_back() {
    let node = Node::start().await;
    sh(&node.client, &format!("fw-{}", unique()), "true").await;
    // As another program (a host firewall's reload) would: one rule of the node's goes.
    // (One of the node's own chain: tests run side by side on this machine's one firewall.)
    let chain = warren_node::runtime::firewall::egress_chain(&node.node_id);
    let listed = Command::new("iptables")
        .args(["-t", "nat", "-S", &chain])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    let rule: Vec<String> = listed
        .lines()
        .find(|l| l.starts_with("-A ") && l.contains("--dport 80 "))
        .unwrap_or_else(|| panic!("the node installed its redirect: {listed}"))
        .split_whitespace()
        .skip(1)
        .map(str::to_string)
        .collect();
    let has = || {
        Command::new("iptables")
            .args(["-t", "nat", "-C"])
            .args(&rule)
            .status()
            .unwrap()
            .success()
    };
    assert!(has());
    let mut del = vec!["iptables", "-t", "nat", "-D"];
    del.extend(rule.iter().map(String::as_str));
    run(&del);
    assert!(!has());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(25);
    while !has() {
        assert!(
            std::time::Instant::now() < deadline,
            "the rule was not put back within 25 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let h = reqwest::get(format!("{}/healthz", node.url)).await.unwrap();
    assert_eq!(h.status(), 200);
}

/// Whether Docker has the container of sandbox `id` on `node` frozen.
fn paused(node: &Node, id: &str) -> bool {
    node.inspect(id, "{{.State.Paused}}") == "true"
}

/// A node whose iptables (and the tools beside it) fail while the file it returns exists.
async fn node_with_breakable_iptables(dir: &std::path::Path) -> (std::path::PathBuf, Node) {
    let flag = dir.join("broken");
    let wrappers =
        super::harness::breakable_firewall_tools(dir, &format!("[ -e {} ]", flag.display()));
    let node = Node::start_with(
        "127.0.0.1:0",
        &["--iptables", &wrappers[0], "--ip6tables", &wrappers[1]],
    )
    .await;
    (flag, node)
}

/// The firewall breaks while a sandbox runs, and cannot be put back (the node's iptables
/// fails from then on, as a broken or replaced binary would): the running sandbox is frozen
/// at once, calls to it answer 503 naming the firewall, and once the rules can be installed
/// again it runs on where it stopped, its processes and memory intact. Before, the node
/// refused new starts and left the running sandbox running, unprotected.
#[tokio::test]
async fn running_sandboxes_freeze_while_the_firewall_cannot_be_put_back() {
    let dir = tempfile::tempdir().unwrap();
    let (flag, node) = node_with_breakable_iptables(dir.path()).await;
    let c = &node.client;
    let id = format!("freeze-{}", unique());
    // A counter that runs on in the background: frozen, it stops; thawed, it goes on from
    // where it was (same process, same memory).
    sh(
        c,
        &id,
        "nohup sh -c 'n=0; while true; do n=$((n+1)); echo $n > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done' >/dev/null 2>&1 & echo started",
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    std::fs::write(&flag, b"").unwrap();
    // The next check (every 10 s) finds it cannot verify or install the rules.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let refused = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the sandbox still answers 30 s after the firewall broke"
        );
        match c.sh(&id, "cat /tmp/count").await {
            Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(300)).await,
            Err(e) => break e,
        }
    };
    super::harness::assert_unavailable(&refused);
    assert!(refused.to_string().contains("firewall"), "{refused}");
    let frozen_deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !paused(&node, &id) {
        assert!(
            std::time::Instant::now() < frozen_deadline,
            "the sandbox's container is not frozen"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let h = reqwest::get(format!("{}/healthz", node.url)).await.unwrap();
    assert_eq!(h.status(), 503);
    // Frozen: its counter does not move (read from the host, through the container's root).
    let pid = node.inspect(&id, "{{.State.Pid}}");
    let read = || {
        std::fs::read_to_string(format!("/proc/{pid}/root/tmp/count"))
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    let at_freeze = read();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(read(), at_freeze, "the frozen sandbox's counter moved");

    // The rules can be installed again: the next check puts them back and thaws it.
    std::fs::remove_file(&flag).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let after = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the sandbox does not answer 30 s after the firewall holds again"
        );
        match c.sh(&id, "sleep 0.5; cat /tmp/count").await {
            Ok(r) => break r.stdout,
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(300)).await,
        }
    };
    let n: u64 = after.trim().parse().unwrap();
    assert!(
        n > at_freeze,
        "the counter did not go on: {n} after {at_freeze}"
    );
    assert!(!paused(&node, &id));
}

/// A sandbox's container paused behind its node's back (an operator's `docker pause`, or a
/// pause an earlier life of the node asked for that landed after the next start adopted the
/// sandbox) is frozen with the others when the firewall breaks, and thawed with them once it
/// holds again. Before, the engine refused the freezer's pause ("already paused"), the
/// freezer held nothing for it and thawed only what it held: the sandbox stayed paused for
/// good and every call to it failed.
#[tokio::test]
async fn a_container_paused_behind_the_nodes_back_thaws_with_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let (flag, node) = node_with_breakable_iptables(dir.path()).await;
    let c = &node.client;
    let id = format!("paused-{}", unique());
    sh(c, &id, "true").await;
    let container = format!("wrn-{}-{id}", node.node_id);
    run(&["docker", "pause", &container]);
    std::fs::write(&flag, b"").unwrap();
    // The next check (every 10 s) finds the rules cannot be verified: the node is unhealthy.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let h = reqwest::get(format!("{}/healthz", node.url)).await.unwrap();
        if h.status() == 503 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the node did not notice the firewall broke within 30 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    // The freezer has looked at the sandbox (it looks on every change).
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    std::fs::remove_file(&flag).unwrap();
    answers_unpaused_within_30_s(&node, &id, "after the firewall holds again").await;
}

/// Waits until sandbox `id` answers a command (each try 5 s at most) and then checks its
/// container is not paused; fails after 30 s, saying `when` and whether it is paused.
async fn answers_unpaused_within_30_s(node: &Node, id: &str, when: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            node.client.sh(id, "echo up"),
        )
        .await;
        if let Ok(Ok(r)) = r {
            assert_eq!(r.stdout.trim(), "up");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the sandbox does not answer 30 s {when}: {r:?}, paused: {}",
            paused(node, id)
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    assert!(!paused(node, id));
}

/// A container paused behind the node's back while nothing else is wrong (no freeze, no
/// fork, no snapshot: nothing of the node's holds it paused) is thawed by the node within a
/// round of its freezer (5 s). Before, nothing ever thawed it: every call to the sandbox hung
/// until the caller gave up.
#[tokio::test]
async fn a_container_paused_by_someone_else_is_thawed_by_the_node() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("stray-{}", unique());
    sh(c, &id, "true").await;
    run(&["docker", "pause", &format!("wrn-{}-{id}", node.node_id)]);
    assert!(paused(&node, &id));
    let started = std::time::Instant::now();
    answers_unpaused_within_30_s(&node, &id, "after it was paused behind the node's back").await;
    eprintln!("answered {:?} after the pause", started.elapsed());
}

/// Docker rearranges `FORWARD` whenever anyone on the machine makes a network (another
/// node, another program): it deletes its jump into `DOCKER-USER` and inserts it again at
/// the top, and puts the new network's `ACCEPT` rules above everything of ours. A sandbox
/// that keeps trying the public address directly while networks come and go must never get
/// a connection through. Before, the drop lived only in `filter`'s `FORWARD` (through
/// `DOCKER-USER` and a jump kept first), and a sandbox on a network made since the last
/// check got through in the moment between Docker's delete and insert.
#[tokio::test]
async fn networks_made_by_docker_meanwhile_never_open_a_way_out() {
    let fake = FakeNetwork::start_for_sandboxes_only();
    let node = Node::start().await;
    let id = format!("race-{}", unique());
    // Everything a node does at start is done (its warm containers are started).
    sh(&node.client, &id, "true").await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let stop = stop.clone();
        let u = unique();
        std::thread::spawn(move || {
            let mut made = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && made < 60 {
                let name = format!("warren-test-churn-{u}-{made}");
                run(&["docker", "network", "create", &name]);
                run(&["docker", "network", "rm", &name]);
                made += 1;
            }
            made
        })
    };
    // Many direct attempts at once, for a while: any SYN that passes is a connection.
    let hammer = r#"python3 - <<'EOF'
import selectors, socket, time
sel, hits, tries, end = selectors.DefaultSelector(), 0, 0, time.time() + 15
while time.time() < end:
    while len(sel.get_map()) < 64:
        s = socket.socket(); s.setblocking(False); s.connect_ex(('ADDR', PORT)); tries += 1
        sel.register(s, selectors.EVENT_WRITE, time.time())
    for key, _ in sel.select(0.02):
        if key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0: hits += 1
        sel.unregister(key.fileobj); key.fileobj.close()
    for key in list(sel.get_map().values()):
        if time.time() - key.data > 0.2: sel.unregister(key.fileobj); key.fileobj.close()
print(hits, tries)
EOF"#
        .replace("ADDR", PUBLIC)
        .replace("PORT", &PORT.to_string());
    let out = sh(&node.client, &id, &hammer).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let made = churn.join().unwrap();
    let (hits, tries) = out.trim().split_once(' ').unwrap();
    assert!(made >= 5, "only {made} networks were made meanwhile");
    assert!(tries.parse::<u64>().unwrap() > 1000, "{out}");
    assert_eq!(
        hits, "0",
        "direct connections got through ({out}, {made} networks made)"
    );
    drop(node);
    drop(fake);
}

/// The address a sandbox's packets leave with (its `eth0`, where the default route goes).
async fn sandbox_addr(c: &warren_client::Client, id: &str) -> std::net::Ipv4Addr {
    let out = sh(
        c,
        id,
        "python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('203.0.113.1', 9)); print(s.getsockname()[0])\"",
    )
    .await;
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not an address: {out:?}"))
}

/// The host ends of node `node_id`'s links: interface name and network.
fn node_links(node_id: &str) -> Vec<(String, warren_node::runtime::subnets::Cidr)> {
    let out = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .unwrap();
    let prefix = warren_node::runtime::firewall::bridge_prefix(node_id);
    // `N: NAME    inet A.B.C.D/P ...`, one address a line.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let name = words.get(1)?.split('@').next()?.to_string();
            let at = words.iter().position(|w| *w == "inet")?;
            let cidr = warren_node::runtime::subnets::Cidr::parse(words.get(at + 1)?)?;
            Some((name, cidr))
        })
        .filter(|(name, _)| name.starts_with(&prefix))
        .collect()
}

/// The host end (name) of the link whose sandbox end is `addr`, if there is one.
fn link_of(node_id: &str, addr: std::net::Ipv4Addr) -> Option<String> {
    let host_end = u32::from(addr) - 1;
    node_links(node_id)
        .into_iter()
        .find(|(_, c)| c.prefix == 30 && c.base + 1 == host_end)
        .map(|(name, _)| name)
}

async fn wait_link_gone(node_id: &str, name: &str, when: &str) {
    for _ in 0..100 {
        if !node_links(node_id).iter().any(|(n, _)| n == name) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the link {name} is still there 10 s {when}");
}

/// A sandbox runs on a link of its own that the node makes (a veth pair: the host end named
/// for the node's firewall, a /30 of the subnet pool), not on a Docker network: the node
/// makes none. The link goes with its container's network namespace (sleep, delete), and a
/// woken sandbox gets a new one. Before, every sandbox got a Docker bridge network (and
/// the node kept spare ones), whose attachment and rules were most of a start's cost.
#[tokio::test]
async fn a_sandbox_gets_a_link_of_its_own_and_loses_it_with_its_container() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("ln-{}", unique());
    let first = sandbox_addr(c, &id).await;
    let label = format!("label=warren.node={}", node.node_id);
    let nets = Command::new("docker")
        .args(["network", "ls", "-q", "--filter", &label])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&nets.stdout).trim(),
        "",
        "the node made Docker networks"
    );
    let link = link_of(&node.node_id, first).unwrap_or_else(|| {
        panic!(
            "no link of the node ends at {first}: {:?}",
            node_links(&node.node_id)
        )
    });
    // Its gateway is the host's end (the egress proxy's address).
    let gateway = sh(
        c,
        &id,
        "awk '$2 == \"00000000\" { print $3 }' /proc/net/route",
    )
    .await;
    let gw = u32::from_str_radix(gateway.trim(), 16).unwrap();
    assert_eq!(
        std::net::Ipv4Addr::from(gw.to_le_bytes()),
        std::net::Ipv4Addr::from(u32::from(first) - 1)
    );
    // Its name server is that host end (the firewall sends DNS to the node's proxy), its
    // host name resolves, and it may edit its hosts file, as on any machine.
    let names = sh(
        c,
        &id,
        "grep '^nameserver' /etc/resolv.conf; getent hosts \"$(hostname)\"; \
         echo '10.9.9.9 extra' >> /etc/hosts && getent hosts extra",
    )
    .await;
    assert_eq!(
        names.split_whitespace().collect::<Vec<_>>(),
        [
            "nameserver",
            &std::net::Ipv4Addr::from(u32::from(first) - 1).to_string(),
            "127.0.1.1",
            &id,
            "10.9.9.9",
            "extra"
        ],
        "{names}"
    );

    c.sleep(&id).await.unwrap();
    wait_link_gone(&node.node_id, &link, "after the sandbox slept").await;
    let again = sandbox_addr(c, &id).await;
    let relinked = link_of(&node.node_id, again).expect("the woken sandbox has no link");
    assert_ne!(relinked, link, "the woken sandbox kept a dead link's name");

    c.delete_sandbox(&id).await.unwrap();
    wait_link_gone(&node.node_id, &relinked, "after the sandbox was deleted").await;
}
