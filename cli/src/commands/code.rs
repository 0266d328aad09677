//! `warren git clone` and `warren run` (the code interpreter).

use super::client;
use crate::args::{Conn, GitCloneArgs, RunArgs};
use crate::output;
use anyhow::Context;
use std::io::Read;
use warren_api::git::GitCheckoutRequest;
use warren_api::interpreter::{CreateContextRequest, RunCodeRequest};

pub async fn git_clone(conn: &Conn, a: GitCloneArgs) -> anyhow::Result<i32> {
    let req = GitCheckoutRequest {
        url: a.repository,
        branch: a.branch,
        target_dir: a.dir,
        depth: a.depth,
        timeout_ms: None,
    };
    let r = client(conn)?.git_checkout(&a.id, &req).await?;
    if conn.json {
        output::json(&r);
    } else {
        println!(
            "{} ({}) at {} in {}",
            r.url, r.branch, r.commit, r.target_dir
        );
    }
    Ok(0)
}

/// Runs code in a context (a new one of `--language` unless `--context` names one, which
/// keeps its variables between runs); exit code 1 when the code raised.
pub async fn run(conn: &Conn, a: RunArgs) -> anyhow::Result<i32> {
    let c = client(conn)?;
    let code = match a.code.as_deref() {
        None | Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("cannot read the code from stdin")?;
            s
        }
        Some(code) => code.to_string(),
    };
    let named = a.context.is_some();
    let (context, made) = match a.context {
        Some(cid) => (cid, false),
        None => {
            let ctx = c
                .create_context(
                    &a.id,
                    &CreateContextRequest {
                        language: a.language,
                        cwd: None,
                        env: None,
                    },
                )
                .await?;
            (ctx.id, !a.keep)
        }
    };
    let result = c
        .run_code(
            &a.id,
            &context,
            &RunCodeRequest {
                code,
                timeout_ms: a.timeout_ms,
            },
        )
        .await;
    if made {
        let _ = c.delete_context(&a.id, &context).await;
    } else if !named && !conn.json {
        eprintln!("context {context} kept (--context {context} runs in it again)");
    }
    let r = result?;
    if conn.json {
        output::json(&r);
    } else {
        print!("{}", r.stdout);
        eprint!("{}", r.stderr);
        for res in &r.results {
            if let Some(t) = &res.text {
                println!("{t}");
            }
        }
        if let Some(e) = &r.error {
            eprintln!("{}: {}\n{}", e.name, e.message, e.traceback);
        }
    }
    Ok(if r.error.is_some() { 1 } else { 0 })
}
