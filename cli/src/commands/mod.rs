//! One module per group of subcommands.

mod cluster;
mod code;
pub(crate) mod dev;
mod dir_copy;
mod egress;
mod exec;
mod files;
mod fs;
mod keys;
mod members;
mod ports;
mod procs;
mod sandbox;
mod snapshots;
mod terminal;
mod usage;
mod watch;

use crate::args::{Cli, Command, Conn};
use anyhow::Context;
use std::collections::BTreeMap;

/// Runs the command; returns the process exit code.
pub async fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    let conn = cli.conn;
    match cli.command {
        Command::Dev(a) => dev::dev(a).await,
        Command::Openapi => {
            print!("{}", warren_api::openapi::document_json());
            Ok(0)
        }
        Command::Serve(a) => dev::serve(a).await,
        Command::LocalCluster(a) => cluster::local_cluster(a).await,
        Command::Create(a) => sandbox::create(&conn, a).await,
        Command::List(a) => sandbox::list(&conn, a).await,
        Command::Get { id } => sandbox::get(&conn, &id).await,
        Command::Rm { targets, recursive } => {
            let (files, ids): (Vec<&str>, Vec<&str>) = targets
                .iter()
                .map(String::as_str)
                .partition(|t| fs::remote(t).is_some());
            if !files.is_empty() {
                fs::rm_files(&conn, &files, recursive).await?;
            }
            sandbox::rm(&conn, &ids).await
        }
        Command::Mv { src, dst, force } => fs::mv(&conn, &src, &dst, force).await,
        Command::Terminal(a) => terminal::terminal(&conn, a).await,
        Command::Watch(a) => watch::watch(&conn, a).await,
        Command::Git(crate::args::GitCommand::Clone(a)) => code::git_clone(&conn, a).await,
        Command::Run(a) => code::run(&conn, a).await,
        Command::Cluster(c) => members::cluster(&conn, c).await,
        Command::Completions { shell } => members::completions(shell),
        Command::Exec(a) => exec::exec(&conn, a).await,
        Command::Cp {
            src,
            dst,
            recursive,
        } => files::cp(&conn, &src, &dst, recursive).await,
        Command::Start(a) => procs::start(&conn, a).await,
        Command::Ps { id } => procs::ps(&conn, &id).await,
        Command::Kill(a) => procs::kill(&conn, a).await,
        Command::Logs(a) => procs::logs(&conn, a).await,
        Command::Snapshot(c) => snapshots::snapshot(&conn, c).await,
        Command::Restore { id, snapshot } => snapshots::restore(&conn, &id, &snapshot).await,
        Command::Fork(a) => snapshots::fork(&conn, a).await,
        Command::Sleep { id } => snapshots::sleep(&conn, &id).await,
        Command::Expose(a) => ports::expose(&conn, a).await,
        Command::Unexpose { id, port } => ports::unexpose(&conn, &id, port).await,
        Command::Ports { id } => ports::ports(&conn, &id).await,
        Command::Secret(c) => egress::secret(&conn, c).await,
        Command::Egress(c) => egress::egress(&conn, c).await,
        Command::Key(c) => keys::key(&conn, c).await,
        Command::Usage(a) => usage::usage(&conn, a).await,
    }
}

/// A client from `--url`/`--api-key`, the environment, or the dev node's key file.
pub fn client(conn: &Conn) -> anyhow::Result<warren_client::Client> {
    let c = match (&conn.url, &conn.api_key) {
        (url, Some(key)) => {
            warren_client::Client::new(url.as_deref().unwrap_or(warren_client::DEFAULT_URL), key)?
        }
        (Some(url), None) => {
            let path = warren_client::api_key_path(&warren_client::dev_data_dir());
            let key = std::fs::read_to_string(&path).with_context(|| {
                format!(
                    "no API key: pass --api-key or set WARREN_API_KEY ({} not found)",
                    path.display()
                )
            })?;
            warren_client::Client::new(url, key.trim())?
        }
        (None, None) => warren_client::Client::from_env()?,
    };
    Ok(c)
}

/// Parses repeated `KEY=VALUE` arguments.
pub fn pairs(items: &[String], what: &str) -> anyhow::Result<BTreeMap<String, String>> {
    items
        .iter()
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| anyhow::anyhow!("{what} {s:?} must look like KEY=VALUE"))
        })
        .collect()
}
