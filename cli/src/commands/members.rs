//! `warren cluster status|drain|remove|token`: the cluster's members, as `GET /v1/cluster`
//! has them, and the join tokens new ones come in with.

use super::client;
use crate::args::{ClusterCommand, Conn, JoinTokenCommand};
use crate::output;
use warren_api::join_tokens::{CreateJoinTokenRequest, JoinPolicy};

pub async fn cluster(conn: &Conn, cmd: ClusterCommand) -> anyhow::Result<i32> {
    // Offline: needs no node to answer, nor a key.
    let c = match &cmd {
        ClusterCommand::Recover {
            data_dir,
            config,
            yes,
        } => return recover(data_dir.as_deref(), config.as_deref(), *yes),
        ClusterCommand::Restore {
            from,
            data_dir,
            config,
        } => return restore(from, data_dir.as_deref(), config.as_deref()),
        _ => client(conn)?,
    };
    match cmd {
        ClusterCommand::Status => {
            let v = c.cluster().await?;
            if conn.json {
                output::json(&v);
                return Ok(0);
            }
            println!(
                "leader {}  term {}  loss window {} s{}",
                output::field(&v, "leader"),
                output::field(&v, "term"),
                output::field(&v, "loss_window_s"),
                // A cluster rebuilt from a survivor of a lost majority says how often.
                match v["generation"].as_u64() {
                    Some(g) if g > 0 => format!("  generation {g}"),
                    _ => String::new(),
                }
            );
            let rows = v["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|n| {
                    ["id", "region", "state", "sandboxes", "capacity", "api_addr"]
                        .iter()
                        .map(|k| output::field(n, k))
                        .collect()
                })
                .collect();
            output::table(
                &["NODE", "REGION", "STATE", "SANDBOXES", "CAPACITY", "API"],
                rows,
            );
        }
        ClusterCommand::Drain { node } => {
            let v = c.drain_node(&node).await?;
            if conn.json {
                output::json(&v);
            } else {
                println!("{node}: {}", output::field(&v, "state"));
            }
        }
        ClusterCommand::Remove { node, force } => {
            c.remove_node(&node, force).await?;
            if !conn.json {
                println!("removed {node}");
            }
        }
        ClusterCommand::Token(cmd) => return join_token(conn, &c, cmd).await,
        ClusterCommand::Recover { .. } | ClusterCommand::Restore { .. } => {
            unreachable!("offline commands are answered before a client is made")
        }
        ClusterCommand::Backup { output } => return backup(&c, &output).await,
        ClusterCommand::JoinPolicy { cluster_token } => {
            let policy = match cluster_token {
                Some(v) => {
                    let policy = JoinPolicy {
                        cluster_token: v == "on",
                    };
                    c.set_join_policy(&policy).await?
                }
                None => c.join_policy().await?,
            };
            if conn.json {
                output::json(&policy);
            } else {
                println!(
                    "cluster token: {}",
                    if policy.cluster_token {
                        "on (admits new nodes)"
                    } else {
                        "off (only issued join tokens admit new nodes)"
                    }
                );
            }
        }
    }
    Ok(0)
}

async fn join_token(
    conn: &Conn,
    c: &warren_client::Client,
    cmd: JoinTokenCommand,
) -> anyhow::Result<i32> {
    match cmd {
        JoinTokenCommand::Create {
            ttl,
            multi_use,
            name,
        } => {
            let req = CreateJoinTokenRequest {
                ttl_s: ttl,
                single_use: Some(!multi_use),
                name,
            };
            let t = c.create_join_token(&req).await?;
            if conn.json {
                output::json(&t);
            } else {
                eprintln!(
                    "join token {} ({}, expires {}): shown only now",
                    t.id,
                    if t.single_use {
                        "single-use"
                    } else {
                        "multi-use"
                    },
                    t.expires_at
                );
                println!("{}", t.token);
            }
        }
        JoinTokenCommand::List => {
            let list = c.join_tokens().await?;
            if conn.json {
                output::json(&list);
                return Ok(0);
            }
            output::table(
                &["ID", "STATE", "USES", "NAME", "EXPIRES", "USED BY"],
                list.tokens
                    .iter()
                    .map(|t| {
                        vec![
                            t.id.clone(),
                            serde_json::to_value(t.state)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_string))
                                .unwrap_or_default(),
                            if t.single_use { "one" } else { "many" }.to_string(),
                            t.name.clone().unwrap_or_default(),
                            t.expires_at.clone(),
                            t.used_by.join(","),
                        ]
                    })
                    .collect(),
            );
        }
        JoinTokenCommand::Revoke { ids } => {
            for id in ids {
                c.revoke_join_token(&id).await?;
            }
        }
    }
    Ok(0)
}

/// `warren completions bash|zsh|fish|…`: the shell's completion script on stdout.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<i32> {
    let mut cmd = <crate::args::Cli as clap::CommandFactory>::command();
    clap_complete::generate(shell, &mut cmd, "warren", &mut std::io::stdout());
    Ok(0)
}

/// A stopped node's data dir and its `secrets_key_file` and `ca_file` settings: given, or
/// from its config file.
struct OfflineNode {
    data_dir: std::path::PathBuf,
    secrets_key_file: Option<std::path::PathBuf>,
    ca_file: Option<std::path::PathBuf>,
}

fn offline_node(
    data_dir: Option<&std::path::Path>,
    config: Option<&std::path::Path>,
) -> anyhow::Result<OfflineNode> {
    match (data_dir, config) {
        (Some(dir), _) => Ok(OfflineNode {
            data_dir: dir.to_path_buf(),
            secrets_key_file: None,
            ca_file: None,
        }),
        (None, Some(config)) => {
            let s = warren_daemon::settings::Settings::load(config)?;
            Ok(OfflineNode {
                data_dir: warren_daemon::data_dir_of(&s),
                secrets_key_file: s.secrets_key_file,
                ca_file: s.ca_file,
            })
        }
        (None, None) => anyhow::bail!("name the node: --data-dir or --config"),
    }
}

/// `warren cluster recover`: offline, on a stopped node's data dir (given, or its config's).
fn recover(
    data_dir: Option<&std::path::Path>,
    config: Option<&std::path::Path>,
    yes: bool,
) -> anyhow::Result<i32> {
    let node = offline_node(data_dir, config)?;
    let report = warren_daemon::recover::recover_cluster(&node.data_dir, node.ca_file, yes)?;
    println!("{}", report.describe(yes));
    if yes {
        println!("start the node again; remove the lost nodes (warren cluster remove NAME --force) and join new ones");
        println!(
            "never start a lost node with its old data dir: wipe it and join it as a new node"
        );
        Ok(0)
    } else {
        eprintln!("nothing was changed: run again with --yes to recover");
        Ok(1)
    }
}

/// `warren cluster restore`: offline, into a stopped node's empty data dir.
fn restore(
    from: &std::path::Path,
    data_dir: Option<&std::path::Path>,
    config: Option<&std::path::Path>,
) -> anyhow::Result<i32> {
    let node = offline_node(data_dir, config)?;
    match warren_daemon::recover::restore_backup(
        from,
        &node.data_dir,
        node.secrets_key_file,
        node.ca_file,
    )? {
        warren_daemon::recover::Restored::Recovered(report) => {
            println!("{}", report.describe(true));
        }
        warren_daemon::recover::Restored::Alone => {
            println!("restored a cluster of one node: it needs no recovery");
        }
    }
    println!("start the node (same name and addresses as the backed-up one); remove the lost nodes (warren cluster remove NAME --force) and join new ones");
    Ok(0)
}

/// `warren cluster backup -o FILE`: the tar, written whole or not at all.
async fn backup(c: &warren_client::Client, output: &std::path::Path) -> anyhow::Result<i32> {
    use futures_util::StreamExt;
    use tokio::io::AsyncWriteExt;
    let resp = warren_client::Client::check(
        c.request(reqwest::Method::GET, "/v1/cluster/backup")
            .send()
            .await?,
    )
    .await?;
    let partial = output.with_extension("part");
    let written = async {
        // It holds the cluster's secrets key (and perhaps its CA key): for the owner only.
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)
            .await?;
        let mut body = resp.bytes_stream();
        let mut bytes = 0u64;
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            bytes += chunk.len() as u64;
            file.write_all(&chunk).await?;
        }
        file.sync_all().await?;
        tokio::fs::rename(&partial, output).await?;
        anyhow::Ok(bytes)
    }
    .await;
    match written {
        Ok(bytes) => {
            println!("{} ({bytes} bytes)", output.display());
            Ok(0)
        }
        Err(e) => {
            let _ = tokio::fs::remove_file(&partial).await;
            Err(e.context("the backup was cut off; nothing was written"))
        }
    }
}
