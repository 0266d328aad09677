//! `start`, `ps`, `kill`, `logs`.

use super::{client, pairs};
use crate::args::{Conn, KillArgs, LogsArgs, StartArgs};
use crate::output;
use futures_util::StreamExt;
use std::io::Write;
use warren_api::process::{LogEvent, StartProcessRequest};

pub async fn start(conn: &Conn, a: StartArgs) -> anyhow::Result<i32> {
    let (command, argv) = if a.command.len() == 1 {
        (Some(a.command[0].clone()), None)
    } else {
        (None, Some(a.command))
    };
    let req = StartProcessRequest {
        command,
        argv,
        cwd: a.cwd,
        env: (!a.env.is_empty())
            .then(|| pairs(&a.env, "--env"))
            .transpose()?,
        session: a.session,
        id: a.name,
    };
    let p = client(conn)?.start_process(&a.id, &req).await?;
    if conn.json {
        output::json(&p);
    } else {
        println!("{}", p.id);
    }
    Ok(0)
}

pub async fn ps(conn: &Conn, id: &str) -> anyhow::Result<i32> {
    let list = client(conn)?.list_processes(id).await?;
    if conn.json {
        output::json(&list);
        return Ok(0);
    }
    let rows = list
        .processes
        .iter()
        .map(|p| {
            let v = serde_json::to_value(p).unwrap_or_default();
            vec![
                p.id.clone(),
                p.pid.to_string(),
                output::field(&v, "status"),
                output::field(&v, "exit_code"),
                p.started_at.clone(),
                p.command.clone(),
            ]
        })
        .collect();
    output::table(&["ID", "PID", "STATUS", "EXIT", "STARTED", "COMMAND"], rows);
    Ok(0)
}

pub async fn kill(conn: &Conn, a: KillArgs) -> anyhow::Result<i32> {
    let p = client(conn)?
        .kill_process(&a.id, &a.process, &a.signal, a.grace_ms)
        .await?;
    if conn.json {
        output::json(&p);
    } else {
        println!(
            "{} {:?} exit {}",
            p.id,
            p.status,
            p.exit_code.map(|c| c.to_string()).unwrap_or("-".into())
        );
    }
    Ok(0)
}

pub async fn logs(conn: &Conn, a: LogsArgs) -> anyhow::Result<i32> {
    let c = client(conn)?;
    if !a.follow {
        let l = c.logs(&a.id, &a.process, a.since).await?;
        print!("{}", l.stdout);
        eprint!("{}", l.stderr);
        return Ok(0);
    }
    let mut events = c.follow_logs(&a.id, &a.process, a.since).await?;
    while let Some(ev) = events.next().await {
        match ev? {
            LogEvent::Stdout(ch) => {
                std::io::stdout().write_all(&ch.data.bytes())?;
                std::io::stdout().flush()?;
            }
            LogEvent::Stderr(ch) => {
                std::io::stderr().write_all(&ch.data.bytes())?;
            }
            LogEvent::Exit { exit_code } => return Ok(exit_code),
            LogEvent::Error { code, message } => anyhow::bail!("{code}: {message}"),
        }
    }
    Ok(0)
}
