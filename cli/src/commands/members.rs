//! `warren cluster status|drain|remove`: the cluster's members, as `GET /v1/cluster` has them.

use super::client;
use crate::args::{ClusterCommand, Conn};
use crate::output;

pub async fn cluster(conn: &Conn, cmd: ClusterCommand) -> anyhow::Result<i32> {
    let c = client(conn)?;
    match cmd {
        ClusterCommand::Status => {
            let v = c.cluster().await?;
            if conn.json {
                output::json(&v);
                return Ok(0);
            }
            println!(
                "leader {}  term {}  loss window {} s",
                output::field(&v, "leader"),
                output::field(&v, "term"),
                output::field(&v, "loss_window_s")
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
    }
    Ok(0)
}

/// `warren completions bash|zsh|fish|…`: the shell's completion script on stdout.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<i32> {
    let mut cmd = <crate::args::Cli as clap::CommandFactory>::command();
    clap_complete::generate(shell, &mut cmd, "warren", &mut std::io::stdout());
    Ok(0)
}
