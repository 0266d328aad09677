//! `snapshot create|list|get|rm`, `restore`, `fork`, `sleep`. The server does the transfer;
//! on a terminal a spinner shows that it is under way and how long it has taken.

use super::client;
use crate::args::{Conn, ForkArgs, SnapshotCommand};
use crate::output;
use indicatif::{HumanBytes, ProgressBar, ProgressStyle};
use std::future::Future;
use std::io::IsTerminal;
use std::time::Duration;
use warren_api::snapshot::{CreateSnapshotRequest, ForkRequest, Snapshot};

/// Runs `fut` under a spinner (on a terminal only).
async fn spinning<T>(what: &str, fut: impl Future<Output = T>) -> T {
    let bar = if std::io::stderr().is_terminal() {
        let b = ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid template"),
        );
        b.set_message(what.to_string());
        b.enable_steady_tick(Duration::from_millis(100));
        b
    } else {
        ProgressBar::hidden()
    };
    let out = fut.await;
    bar.finish_and_clear();
    out
}

fn describe(s: &Snapshot) -> String {
    format!(
        "{} of {} ({} files, {} stored, {} new)",
        s.id,
        s.sandbox,
        HumanBytes(s.size_bytes),
        HumanBytes(s.stored_bytes),
        HumanBytes(s.new_bytes)
    )
}

pub async fn snapshot(conn: &Conn, cmd: SnapshotCommand) -> anyhow::Result<i32> {
    let c = client(conn)?;
    match cmd {
        SnapshotCommand::Create { id, name, dirs } => {
            let req = CreateSnapshotRequest {
                name,
                dirs: (!dirs.is_empty()).then_some(dirs),
            };
            let s = spinning("saving", c.create_snapshot(&id, &req)).await?;
            if conn.json {
                output::json(&s);
            } else {
                println!("snapshot {}", describe(&s));
            }
        }
        SnapshotCommand::List { sandbox } => {
            let list = c.list_snapshots(sandbox.as_deref()).await?;
            if conn.json {
                output::json(&list);
            } else {
                let rows = list
                    .snapshots
                    .iter()
                    .map(|s| {
                        vec![
                            s.id.clone(),
                            s.sandbox.clone(),
                            s.name.clone().unwrap_or_default(),
                            s.origin.clone(),
                            HumanBytes(s.size_bytes).to_string(),
                            s.created_at.clone(),
                        ]
                    })
                    .collect();
                output::table(
                    &["ID", "SANDBOX", "NAME", "ORIGIN", "SIZE", "CREATED"],
                    rows,
                );
            }
        }
        SnapshotCommand::Get { snapshot } => {
            let s = c.get_snapshot(&snapshot).await?;
            if conn.json {
                output::json(&s);
            } else {
                println!("{}", describe(&s));
            }
        }
        SnapshotCommand::Rm { snapshots } => {
            for s in snapshots {
                c.delete_snapshot(&s).await?;
                println!("deleted {s}");
            }
        }
    }
    Ok(0)
}

pub async fn restore(conn: &Conn, id: &str, snapshot: &str) -> anyhow::Result<i32> {
    let c = client(conn)?;
    let sb = spinning("restoring", c.restore(id, snapshot)).await?;
    if conn.json {
        output::json(&sb);
    } else {
        println!("{} restored from {snapshot} ({})", sb.id, sb.state.as_str());
    }
    Ok(0)
}

pub async fn fork(conn: &Conn, a: ForkArgs) -> anyhow::Result<i32> {
    let c = client(conn)?;
    let req = ForkRequest {
        count: a.count,
        ids: (!a.ids.is_empty()).then_some(a.ids),
    };
    let out = spinning("forking", c.fork(&a.id, &req)).await?;
    if conn.json {
        output::json(&out);
    } else {
        println!("snapshot {}", describe(&out.snapshot));
        for s in &out.sandboxes {
            println!("{} ({}, node {})", s.id, s.state.as_str(), s.node);
        }
    }
    Ok(0)
}

pub async fn sleep(conn: &Conn, id: &str) -> anyhow::Result<i32> {
    let c = client(conn)?;
    let sb = spinning("saving and stopping", c.sleep(id)).await?;
    if conn.json {
        output::json(&sb);
    } else {
        println!("{} {}", sb.id, sb.state.as_str());
    }
    Ok(0)
}
