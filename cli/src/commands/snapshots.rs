//! `snapshot create|list|get|rm`, `restore`, `fork`, `sleep`. The server does the transfer
//! and streams its progress; on a terminal a bar shows the bytes moved (against the total
//! when known) and the rate.

use super::client;
use crate::args::{Conn, ForkArgs, SnapshotCommand};
use crate::output;
use indicatif::{HumanBytes, ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;
use warren_api::sandbox::Sandbox;
use warren_api::snapshot::{CreateSnapshotRequest, ForkRequest, ForkResponse, Snapshot};
use warren_client::TransferProgress;

/// Runs a transfer with a progress bar on stderr (on a terminal only): bytes moved in the
/// current phase, against the total when the server knows it.
async fn with_progress<T: serde::de::DeserializeOwned>(
    c: &warren_client::Client,
    what: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<&serde_json::Value>,
) -> anyhow::Result<T> {
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
    let (known, unknown) = (
        ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {elapsed}",
        )
        .expect("valid template")
        .progress_chars("=> "),
        ProgressStyle::with_template("{spinner} {msg} {bytes} {bytes_per_sec} {elapsed}")
            .expect("valid template"),
    );
    let what = what.to_string();
    let out = c
        .transfer(method, path, body, |p: TransferProgress| {
            match p.total {
                Some(t) => {
                    bar.set_style(known.clone());
                    bar.set_length(t);
                }
                None => bar.set_style(unknown.clone()),
            }
            bar.set_message(format!("{what}: {}", p.phase));
            bar.set_position(p.bytes);
        })
        .await;
    bar.finish_and_clear();
    Ok(out?)
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
            let body = serde_json::to_value(&req)?;
            let path = format!("/v1/sandboxes/{id}/snapshots");
            let s: Snapshot =
                with_progress(&c, "saving", reqwest::Method::POST, &path, Some(&body)).await?;
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
    let body = serde_json::json!({ "snapshot": snapshot });
    let path = format!("/v1/sandboxes/{id}/restore");
    let sb: Sandbox =
        with_progress(&c, "restoring", reqwest::Method::POST, &path, Some(&body)).await?;
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
    let body = serde_json::to_value(&req)?;
    let path = format!("/v1/sandboxes/{}/fork", a.id);
    let out: ForkResponse =
        with_progress(&c, "forking", reqwest::Method::POST, &path, Some(&body)).await?;
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
    let path = format!("/v1/sandboxes/{id}/sleep");
    let sb: Sandbox = with_progress(
        &c,
        "saving and stopping",
        reqwest::Method::POST,
        &path,
        None,
    )
    .await?;
    if conn.json {
        output::json(&sb);
    } else {
        println!("{} {}", sb.id, sb.state.as_str());
    }
    Ok(0)
}
