//! `warren local-cluster`: N nodes in M regions on loopback addresses, for demos, tests and
//! load tests. Node i listens on 127.0.0.<10+i>; the first bootstraps, the others join it.
//! With `--wan`, every node's peer traffic passes through a relay in this process that delays
//! it by the round trip between the two nodes' regions (`crate::wan`).

use crate::args::LocalClusterArgs;
use anyhow::{bail, Context};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use warren_daemon::load_or_create_secret;

pub async fn local_cluster(a: LocalClusterArgs) -> anyhow::Result<i32> {
    if !(1..=50).contains(&a.nodes) || !(1..=a.nodes).contains(&a.regions) {
        bail!("use 1-50 nodes and 1..=nodes regions");
    }
    std::fs::create_dir_all(&a.dir)?;
    let key_file = a.dir.join("api-key");
    let api_key = load_or_create_secret(&key_file, "wk_")?;
    let token = load_or_create_secret(&a.dir.join("join-token"), "wj_")?;
    let exe = std::env::current_exe()?;
    let seed = format!("http://127.0.0.10:{}", a.api_port);
    if !(0.0..=1.0).contains(&a.loss) {
        bail!("--loss is a probability: 0 to 1");
    }
    let wan = match a.wan.as_deref() {
        Some(spec) => Some(crate::wan::WanRelay::new(
            crate::wan::DelayMatrix::parse(spec).map_err(anyhow::Error::msg)?,
            a.loss,
        )),
        None if a.loss > 0.0 => bail!("--loss goes with --wan"),
        None => None,
    };
    let mut children: Vec<(String, Child)> = Vec::new();
    let mut rows = Vec::new();
    for i in 0..a.nodes {
        let name = format!("n{}", i + 1);
        let ip = format!("127.0.0.{}", 10 + i);
        let region = format!("region-{}", i % a.regions + 1);
        let join = if i == 0 {
            String::new()
        } else {
            format!("join = \"{seed}\"\n")
        };
        let advertise = match &wan {
            Some(relay) => {
                let real: std::net::SocketAddr = format!("{ip}:{}", a.peer_port).parse()?;
                let front = relay.add_node(real.ip(), real, &region)?;
                format!("advertise_peer = \"{front}\"\n")
            }
            None => String::new(),
        };
        let config = format!(
            "{advertise}name = \"{name}\"\nregion = \"{region}\"\ndata_dir = \"{}\"\nlisten = \"{ip}:{}\"\npeer_listen = \"{ip}:{}\"\n\
             {join}join_token = \"{token}\"\napi_key_file = \"{}\"\nobject_store = \"{}\"\n",
            a.dir.join(&name).display(),
            a.api_port,
            a.peer_port,
            key_file.display(),
            // One store for all nodes, as a shared bucket would be.
            a.dir.join("objects").display(),
        );
        let path = a.dir.join(format!("{name}.toml"));
        std::fs::write(&path, config)?;
        let log = std::fs::File::create(a.dir.join(format!("{name}.log")))?;
        let mut child = Command::new(&exe)
            .args(["serve", "--config"])
            .arg(&path)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .context("cannot start a node")?;
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        let started = Instant::now();
        // Read off the runtime: the WAN relay runs on it, and a joining node's ready line
        // waits for commits through the relay.
        let (out, line) = tokio::task::spawn_blocking(move || {
            let (mut out, mut line) = (out, String::new());
            out.read_line(&mut line).map(|_| (out, line))
        })
        .await??;
        if line.is_empty() {
            let _ = child.kill();
            for (_, c) in children.iter_mut() {
                let _ = c.kill();
            }
            bail!(
                "node {name} did not start; see {}",
                a.dir.join(format!("{name}.log")).display()
            );
        }
        std::thread::spawn(move || for _ in out.lines() {});
        rows.push(vec![
            name.clone(),
            region,
            format!("http://{ip}:{}", a.api_port),
            format!("{ip}:{}", a.peer_port),
            format!("{:.1}s", started.elapsed().as_secs_f64()),
        ]);
        children.push((name, child));
    }
    crate::output::table(&["NODE", "REGION", "API", "PEER", "STARTED IN"], rows);
    println!("\nexport WARREN_URL={seed} WARREN_API_KEY={api_key}");
    println!(
        "logs and data under {}; Ctrl-C stops every node (sandboxes keep running)",
        a.dir.display()
    );
    crate::commands::dev::init_tracing("pretty");
    tokio::signal::ctrl_c().await?;
    for (_, c) in children.iter() {
        // SAFETY: kill(2) on a child we started and have not reaped.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for (name, c) in children.iter_mut() {
        while Instant::now() < deadline {
            if c.try_wait()?.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if c.try_wait()?.is_none() {
            eprintln!("node {name} did not stop; killing it");
            let _ = c.kill();
        }
    }
    Ok(0)
}
