//! `create`, `list`, `get`, `rm`.

use super::{client, pairs};
use crate::args::{Conn, CreateArgs, ListArgs};
use crate::output;
use warren_api::sandbox::{
    CreateSandboxRequest, Persist, PersistMode, ResourcesRequest, SandboxList, SleepAfter,
};

/// `--persist disk|none|DIR…`.
fn persist(args: &[String]) -> Option<Persist> {
    match args {
        [] => None,
        [one] if one == "disk" => Some(Persist::Mode(PersistMode::Disk)),
        [one] if one == "none" => Some(Persist::Mode(PersistMode::None)),
        dirs => Some(Persist::Dirs {
            dirs: dirs.to_vec(),
        }),
    }
}

pub async fn create(conn: &Conn, a: CreateArgs) -> anyhow::Result<i32> {
    let resources =
        (a.cpus.is_some() || a.memory_mb.is_some() || a.disk_mb.is_some() || a.pids.is_some())
            .then_some(ResourcesRequest {
                cpus: a.cpus,
                memory_mb: a.memory_mb,
                disk_mb: a.disk_mb,
                pids: a.pids,
            });
    let req = CreateSandboxRequest {
        image: a.image,
        resources,
        instance_type: a.instance_type,
        sleep_after: a.sleep_after.map(SleepAfter::Text),
        keep_alive: a.keep_alive.then_some(true),
        env: (!a.env.is_empty())
            .then(|| pairs(&a.env, "--env"))
            .transpose()?,
        labels: (!a.labels.is_empty())
            .then(|| pairs(&a.labels, "--label"))
            .transpose()?,
        region: a.region,
        from_snapshot: a.from_snapshot,
        persist: persist(&a.persist),
        ..Default::default()
    };
    let (sb, created) = client(conn)?.put_sandbox(&a.id, &req).await?;
    if conn.json {
        output::json(&sb);
    } else {
        println!(
            "{} {} ({}, {}, node {})",
            if created { "created" } else { "exists:" },
            sb.id,
            sb.state.as_str(),
            sb.image,
            sb.node
        );
    }
    Ok(0)
}

pub async fn list(conn: &Conn, a: ListArgs) -> anyhow::Result<i32> {
    if let Some(target) = &a.target {
        return super::fs::ls(conn, target, a.recursive, a.all).await;
    }
    let c = client(conn)?;
    let limit = a.limit.to_string();
    let mut list = SandboxList {
        sandboxes: Vec::new(),
        next_cursor: None,
    };
    // Every page, in order.
    let mut cursor: Option<String> = None;
    loop {
        let mut q: Vec<(&str, &str)> = vec![("limit", &limit)];
        if let Some(s) = &a.state {
            q.push(("state", s));
        }
        if let Some(r) = &a.region {
            q.push(("region", r));
        }
        for l in &a.labels {
            q.push(("label", l));
        }
        if let Some(cur) = &cursor {
            q.push(("cursor", cur));
        }
        let page = c.list_sandboxes(&q).await?;
        list.sandboxes.extend(page.sandboxes);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if conn.json {
        output::json(&list);
        return Ok(0);
    }
    let rows = list
        .sandboxes
        .iter()
        .map(|s| {
            let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            vec![
                s.id.clone(),
                s.state.as_str().into(),
                s.node.clone(),
                s.image.clone(),
                s.created_at.clone(),
                labels.join(","),
            ]
        })
        .collect();
    output::table(&["ID", "STATE", "NODE", "IMAGE", "CREATED", "LABELS"], rows);
    Ok(0)
}

pub async fn get(conn: &Conn, id: &str) -> anyhow::Result<i32> {
    output::json(&client(conn)?.get_sandbox(id).await?);
    Ok(0)
}

pub async fn rm(conn: &Conn, ids: &[&str]) -> anyhow::Result<i32> {
    let c = client(conn)?;
    for id in ids {
        c.delete_sandbox(id).await?;
        if !conn.json {
            println!("deleted {id}");
        }
    }
    Ok(0)
}
