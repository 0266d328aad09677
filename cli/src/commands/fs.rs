//! `warren ls|rm|mv SANDBOX:/path`: a sandbox's files, as the shell's commands treat local ones.

use super::client;
use crate::args::Conn;
use crate::output;
use anyhow::bail;

/// `SANDBOX:/path` → (sandbox, path); anything else is local (`warren cp` reads it too).
pub fn remote(spec: &str) -> Option<(&str, &str)> {
    let (id, path) = spec.split_once(':')?;
    (warren_api::ids::validate_sandbox_id(id).is_ok() && path.starts_with('/'))
        .then_some((id, path))
}

pub async fn ls(conn: &Conn, target: &str, recursive: bool, all: bool) -> anyhow::Result<i32> {
    let Some((id, path)) = remote(target) else {
        bail!("name the directory as SANDBOX:/absolute/path");
    };
    let list = client(conn)?.list_dir(id, path, recursive, all).await?;
    if conn.json {
        output::json(&list);
        return Ok(0);
    }
    let rows = list
        .entries
        .iter()
        .map(|e| {
            let kind = serde_json::to_value(e.file_type)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            vec![
                e.mode.clone(),
                kind,
                e.size.to_string(),
                e.modified_at.clone(),
                e.relative_path.clone(),
            ]
        })
        .collect();
    output::table(&["MODE", "TYPE", "SIZE", "MODIFIED", "PATH"], rows);
    Ok(0)
}

/// Removes files (`SANDBOX:/path`, directories with `-r`).
pub async fn rm_files(conn: &Conn, targets: &[&str], recursive: bool) -> anyhow::Result<i32> {
    let c = client(conn)?;
    for t in targets {
        let (id, path) = remote(t).expect("only remote targets come here");
        c.delete_file(id, path, recursive).await?;
        if !conn.json {
            println!("removed {id}:{path}");
        }
    }
    Ok(0)
}

pub async fn mv(conn: &Conn, src: &str, dst: &str, force: bool) -> anyhow::Result<i32> {
    let Some((id, from)) = remote(src) else {
        bail!("name the source as SANDBOX:/absolute/path");
    };
    let to = match remote(dst) {
        Some((other, _)) if other != id => bail!("a move stays in one sandbox ({id})"),
        Some((_, to)) => to,
        None if dst.starts_with('/') => dst,
        None => bail!("name the destination as /absolute/path or {id}:/absolute/path"),
    };
    let r = client(conn)?.move_path(id, from, to, force).await?;
    if conn.json {
        output::json(&r);
    } else {
        println!("{id}:{from} → {id}:{}", r.path);
    }
    Ok(0)
}
