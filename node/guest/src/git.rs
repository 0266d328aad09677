//! `POST /git/checkout`: clone a repository (branch, depth, timeout) into the sandbox.

use crate::cmd::{run_capture, RunError};
use crate::server::Guest;
use std::path::Path;
use std::time::Duration;
use warren_api::git::{GitCheckoutRequest, GitCheckoutResponse, DEFAULT_GIT_TIMEOUT_MS};
use warren_api::{ApiError, ErrorCode};

fn git_failed(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::GitFailed, message)
}

pub async fn checkout(
    g: &Guest,
    req: &GitCheckoutRequest,
) -> Result<GitCheckoutResponse, ApiError> {
    req.validate()?;
    let target = crate::fsops::normalize(&req.target());
    crate::fsops::check_path(&target, true)?;
    let existed = Path::new(&target).exists();
    let timeout = Duration::from_millis(
        req.timeout_ms
            .map(|t| t as u64)
            .unwrap_or(DEFAULT_GIT_TIMEOUT_MS),
    );

    let mut env = g.sessions.base_env();
    env.insert("GIT_TERMINAL_PROMPT".into(), "0".into());
    env.insert("GIT_ASKPASS".into(), "true".into());
    let mut argv: Vec<String> = vec![
        "git".into(),
        "-c".into(),
        "advice.detachedHead=false".into(),
        "clone".into(),
    ];
    if let Some(d) = req.depth {
        argv.push(format!("--depth={d}"));
    }
    if let Some(b) = &req.branch {
        argv.push(format!("--branch={b}"));
    }
    argv.extend(["--".to_string(), req.url.trim().to_string(), target.clone()]);
    if let Some(parent) = Path::new(&target).parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let reaper = g.sessions.reaper();
    let cleanup = || {
        if !existed {
            let _ = std::fs::remove_dir_all(&target);
        }
    };
    let out = match run_capture(reaper, &argv, &env, "/", timeout).await {
        Ok(o) => o,
        Err(RunError::Spawn(e)) => {
            return Err(git_failed(format!(
                "cannot run git (is it installed in the image?): {e}"
            )))
        }
        Err(RunError::TimedOut { stderr }) => {
            cleanup();
            return Err(git_failed(format!(
                "git clone timed out after {} ms: {}",
                timeout.as_millis(),
                String::from_utf8_lossy(&stderr).trim()
            )));
        }
    };
    if out.status.code != 0 {
        cleanup();
        let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(git_failed(if msg.is_empty() {
            format!("git clone exited with code {}", out.status.code)
        } else {
            msg
        }));
    }
    let rev = |args: &[&str]| {
        let mut v: Vec<String> = vec!["git".into(), "-C".into(), target.clone()];
        v.extend(args.iter().map(|s| s.to_string()));
        v
    };
    let commit = run_capture(
        reaper,
        &rev(&["rev-parse", "HEAD"]),
        &env,
        "/",
        Duration::from_secs(30),
    )
    .await
    .ok()
    .filter(|o| o.status.code == 0)
    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    .ok_or_else(|| git_failed("cloned, but cannot read HEAD (empty repository?)"))?;
    let branch = match &req.branch {
        Some(b) => b.clone(),
        None => run_capture(
            reaper,
            &rev(&["rev-parse", "--abbrev-ref", "HEAD"]),
            &env,
            "/",
            Duration::from_secs(30),
        )
        .await
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default(),
    };
    Ok(GitCheckoutResponse {
        url: req.url.clone(),
        branch,
        target_dir: target,
        commit,
    })
}
