//! What root inside a sandbox cannot do, and limits that hold while a sandbox misbehaves:
//! every case is run as the hostile code would run it, with the node and a neighbour asked
//! to answer meanwhile.

use super::harness::{create, sh, unique, Node};
use std::time::{Duration, Instant};
use warren_api::exec::ExecRequest;

/// The container's main process on the host.
fn container_pid(node: &Node, id: &str) -> u32 {
    let out = std::process::Command::new("docker")
        .args([
            "inspect",
            "-f",
            "{{.State.Pid}}",
            &format!("wrn-{}-{id}", node.node_id),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// A neighbour and the node answer within a few seconds.
async fn assert_neighbour_answers(node: &Node, neighbour: &str) {
    let t = Instant::now();
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        sh(&node.client, neighbour, "echo alive"),
    )
    .await
    .expect("the neighbour did not answer in 20 s");
    assert_eq!(out.trim(), "alive");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "the neighbour took {:?}",
        t.elapsed()
    );
    let h = reqwest::get(format!("{}/healthz", node.url)).await.unwrap();
    assert_eq!(h.status(), 200);
}

#[tokio::test]
async fn root_in_a_sandbox_is_not_root_on_the_host() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("root-{}", unique());
    let out = sh(
        c,
        &id,
        "id -u; cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //'; \
         grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t' ' '",
    )
    .await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "0", "root inside: {out}");
    let map: Vec<&str> = lines[1].split(' ').collect();
    assert_eq!(map[0], "0");
    let host_uid: u64 = map[1].parse().unwrap();
    assert!(
        host_uid >= 65536,
        "uid 0 maps to host uid {host_uid}: {out}"
    );
    // The capabilities a dev box needs, and nothing else (SANDBOX_CAPABILITIES).
    let want = [0u32, 1, 3, 4, 5, 6, 7, 10, 18] // CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID NET_BIND_SERVICE SYS_CHROOT
        .iter()
        .fold(0u64, |m, b| m | 1 << b);
    let want = format!("{want:016x}");
    assert!(lines.contains(&format!("CapEff: {want}").as_str()), "{out}");
    assert!(lines.contains(&format!("CapBnd: {want}").as_str()), "{out}");
    assert!(lines.contains(&"NoNewPrivs: 1"), "{out}");
    assert!(lines.contains(&"Seccomp: 2"), "{out}");

    // On the host, the sandbox's processes and files belong to that unprivileged uid.
    let pid = container_pid(&node, &id);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uid_line
            .split_whitespace()
            .skip(1)
            .all(|u| u == host_uid.to_string()),
        "{uid_line}"
    );
    sh(c, &id, "echo x > /workspace/owned-by-root").await;
    let upper = std::process::Command::new("docker")
        .args([
            "inspect",
            "-f",
            "{{.GraphDriver.Data.UpperDir}}",
            &format!("wrn-{}-{id}", node.node_id),
        ])
        .output()
        .unwrap();
    let upper = String::from_utf8_lossy(&upper.stdout).trim().to_string();
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(format!("{upper}/workspace/owned-by-root")).unwrap();
    assert_eq!(meta.uid() as u64, host_uid);

    // What root inside cannot do.
    let tries = sh(
        c,
        &id,
        "mknod /tmp/sda b 8 0 2>/dev/null && echo mknod-block || echo no-mknod; \
         mknod /tmp/null c 1 3 2>/dev/null && echo mknod-char || echo no-mknod-char; \
         python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)' 2>/dev/null && echo raw || echo no-raw; \
         python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)' 2>/dev/null && echo packet || echo no-packet; \
         unshare -U true 2>/dev/null && echo userns || echo no-userns; \
         mount -t tmpfs x /mnt 2>/dev/null && echo mount || echo no-mount; \
         (echo 1 > /proc/sys/kernel/panic) 2>/dev/null && echo sysctl || echo no-sysctl; \
         (head -c1 /proc/kcore) >/dev/null 2>&1 && echo kcore || echo no-kcore; \
         ls /sys/firmware 2>/dev/null | grep -c . || true; \
         cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n' | grep -c WARREN_GUEST_SECRET || true; \
         chown 1000:1000 /workspace/owned-by-root && echo chown-ok",
    )
    .await;
    assert_eq!(
        tries.lines().collect::<Vec<_>>(),
        vec![
            "no-mknod",
            "no-mknod-char",
            "no-raw",
            "no-packet",
            "no-userns",
            "no-mount",
            "no-sysctl",
            "no-kcore",
            "0",
            "0",
            "chown-ok",
        ],
        "{tries}"
    );
}

#[tokio::test]
async fn a_fork_bomb_and_a_memory_hog_stay_inside_their_sandbox() {
    let node = Node::start().await;
    let c = &node.client;
    let (bad, neighbour) = (format!("bad-{}", unique()), format!("good-{}", unique()));
    c.put_sandbox(&bad, &create(serde_json::json!({"instance_type": "lite"})))
        .await
        .unwrap();
    sh(c, &neighbour, "true").await;

    // A fork bomb until its call times out: the pids limit holds it, the timeout ends it.
    let bomb_req = ExecRequest {
        command: Some("bomb() { bomb | bomb & }; bomb; sleep 60".into()),
        timeout_ms: Some(8000),
        session: Some("bomb".into()),
        ..Default::default()
    };
    let bomb = c.exec(&bad, &bomb_req);
    let (bomb, ()) = tokio::join!(bomb, async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_neighbour_answers(&node, &neighbour).await;
    });
    let bomb = bomb.unwrap();
    assert!(bomb.timed_out, "{bomb:?}");

    // A memory hog: killed inside, the sandbox answers afterwards, the neighbour all along.
    let hog = c
        .exec(
            &bad,
            &ExecRequest {
                command: Some(
                    "python3 -c 'x = []\nwhile True: x.append(bytearray(16 << 20))'; echo exit=$?"
                        .into(),
                ),
                timeout_ms: Some(60000),
                session: Some("hog".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(hog.stdout.contains("exit=137"), "{hog:?}");
    assert_neighbour_answers(&node, &neighbour).await;
    let after = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Ok(r) = c.sh(&bad, "echo back").await {
                return r.stdout;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await
    .expect("the hog's sandbox answers again");
    assert_eq!(after.trim(), "back");
}

#[tokio::test]
async fn the_run_directory_cannot_fill_the_hosts_disk() {
    let node = Node::start_with("127.0.0.1:0", &["--run-dir-mb", "64"]).await;
    let c = &node.client;
    let id = format!("fill-{}", unique());
    let neighbour = format!("fill-n-{}", unique());
    sh(c, &neighbour, "true").await;
    // Root in the sandbox writes into the guest's run directory directly (and frees it
    // again in the same call: a full run directory leaves no room for the next call).
    let out = sh(
        c,
        &id,
        "dd if=/dev/zero of=/.warren/run/filler bs=1M count=200 2>&1 | grep -o 'No space left' ; \
         du -sm /.warren/run | cut -f1; df -m /.warren/run | tail -1 | tr -s ' ' | cut -d' ' -f2; \
         rm /.warren/run/filler",
    )
    .await;
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].contains("No space left"),
        "the run directory took 200 MiB: {out}"
    );
    let used: u64 = lines[1].parse().unwrap();
    assert!(used <= 64, "{out}");
    assert_eq!(lines[2], "64", "{out}");
    assert_eq!(sh(c, &id, "echo ok").await.trim(), "ok");
    assert_neighbour_answers(&node, &neighbour).await;
}
