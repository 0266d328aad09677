//! `warren cp`: stream a file to or from a sandbox, with a progress bar on a terminal.

use super::client;
use super::fs::remote;
use crate::args::Conn;
use anyhow::{bail, Context};
use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use tokio::io::AsyncWriteExt;

fn progress(len: Option<u64>) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    match len {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .expect("valid template"),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {bytes} {bytes_per_sec}")
                .expect("valid template"),
        ),
    }
}

pub async fn cp(conn: &Conn, src: &str, dst: &str, recursive: bool) -> anyhow::Result<i32> {
    let c = client(conn)?;
    match (remote(src), remote(dst)) {
        (Some(_), Some(_)) => bail!("copy between two sandboxes: download, then upload"),
        (None, None) => bail!("one side must name a sandbox, as SANDBOX:/absolute/path"),
        (None, Some(_)) | (Some(_), None) if recursive && (src == "-" || dst == "-") => {
            bail!("-r copies directories, not stdio")
        }
        (None, Some((id, path))) if recursive => {
            return super::dir_copy::upload(conn, src, id, path).await
        }
        (Some((id, path)), None) if recursive => {
            return super::dir_copy::download(conn, id, path, dst).await
        }
        (None, Some((id, path))) => {
            let (body, len): (reqwest::Body, Option<u64>) = if src == "-" {
                let stream = tokio_util::io::ReaderStream::new(tokio::io::stdin());
                (reqwest::Body::wrap_stream(stream), None)
            } else {
                let f = tokio::fs::File::open(src)
                    .await
                    .with_context(|| format!("cannot open {src}"))?;
                let len = f.metadata().await?.len();
                let bar = progress(Some(len));
                let stream = tokio_util::io::ReaderStream::with_capacity(f, 256 * 1024).inspect(
                    move |chunk| {
                        if let Ok(c) = chunk {
                            bar.inc(c.len() as u64);
                        }
                    },
                );
                (reqwest::Body::wrap_stream(stream), Some(len))
            };
            let _ = len;
            let r = c.write_file(id, path, body, None).await?;
            if conn.json {
                crate::output::json(&r);
            } else {
                eprintln!("{} bytes → {id}:{} (sha256 {})", r.size, r.path, r.sha256);
            }
        }
        (Some((id, path)), None) => {
            let resp = c.read_file(id, path).await?;
            let bar = progress(resp.content_length());
            let mut stream = resp.bytes_stream();
            if dst == "-" {
                let mut out = tokio::io::stdout();
                while let Some(chunk) = stream.next().await {
                    out.write_all(&chunk?).await?;
                }
                out.flush().await?;
            } else {
                // Into a temporary file first: an interrupted download leaves nothing behind.
                let tmp = format!("{dst}.warren-partial");
                let mut f = tokio::fs::File::create(&tmp)
                    .await
                    .with_context(|| format!("cannot create {tmp}"))?;
                let copied = async {
                    while let Some(chunk) = stream.next().await {
                        let chunk = chunk?;
                        bar.inc(chunk.len() as u64);
                        f.write_all(&chunk).await?;
                    }
                    f.flush().await?;
                    anyhow::Ok(())
                }
                .await;
                if let Err(e) = copied {
                    let _ = tokio::fs::remove_file(&tmp).await;
                    return Err(e);
                }
                tokio::fs::rename(&tmp, dst).await?;
            }
            bar.finish_and_clear();
        }
    }
    Ok(0)
}
