//! `warren watch SANDBOX:/path`: file events as they happen, one per line (or JSON lines).

use super::{client, fs::remote};
use crate::args::{Conn, WatchArgs};
use anyhow::bail;
use futures_util::StreamExt;
use warren_api::watch::{WatchEvent, WatchQuery};

pub async fn watch(conn: &Conn, a: WatchArgs) -> anyhow::Result<i32> {
    let Some((id, path)) = remote(&a.target) else {
        bail!("name the directory as SANDBOX:/absolute/path");
    };
    let q = WatchQuery {
        path: path.to_string(),
        recursive: !a.no_recursive,
        include: a.include,
        exclude: a.exclude,
    };
    let mut events = client(conn)?.watch(id, &q).await?;
    while let Some(ev) = events.next().await {
        let ev = ev?;
        if conn.json {
            println!("{}", serde_json::to_string(&ev)?);
            continue;
        }
        match ev {
            WatchEvent::Watching { path } => eprintln!("watching {id}:{path}"),
            WatchEvent::Event {
                event,
                path,
                is_dir,
                timestamp,
            } => {
                let kind = serde_json::to_value(event)?;
                let slash = if is_dir { "/" } else { "" };
                println!("{timestamp} {} {path}{slash}", kind.as_str().unwrap_or("?"));
            }
            WatchEvent::Error { message } => bail!("the watch ended: {message}"),
        }
    }
    Ok(0)
}
