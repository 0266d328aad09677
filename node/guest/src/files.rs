//! Streaming file reads and atomic streaming writes (`/files/{path}`).

use crate::content_type::{detect, SNIFF_LEN};
use crate::fsops::{check_path, io_error};
use crate::http::{self, Body, Request, Response};
use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use sha2::{Digest, Sha256};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use warren_api::files::{parse_mode, WriteFileQuery, WriteFileResponse};
use warren_api::{ApiError, ErrorCode};

/// Streams a file: `content-type` sniffed from its first bytes, `content-length` from its size.
pub async fn read(path: &str) -> Result<Response, ApiError> {
    check_path(path, false)?;
    let mut file = tokio::fs::File::open(path)
        .await
        .map_err(|e| io_error(path, e))?;
    let meta = file.metadata().await.map_err(|e| io_error(path, e))?;
    if meta.is_dir() {
        return Err(ApiError::new(
            ErrorCode::IsADirectory,
            format!("{path}: is a directory"),
        ));
    }
    if !meta.is_file() {
        return Err(ApiError::invalid(format!("{path}: not a regular file")));
    }
    let mut head = vec![0u8; SNIFF_LEN];
    let mut n = 0;
    while n < head.len() {
        let r = file
            .read(&mut head[n..])
            .await
            .map_err(|e| io_error(path, e))?;
        if r == 0 {
            break;
        }
        n += r;
    }
    head.truncate(n);
    let content_type = detect(&head, path);
    let rest = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024);
    let stream =
        futures_util::stream::once(async move { Ok::<Bytes, std::io::Error>(Bytes::from(head)) })
            .chain(rest)
            .map_ok(Frame::data);
    let body: Body = BodyExt::boxed(StreamBody::new(stream));
    let mut builder = hyper::Response::builder()
        .status(200)
        .header("content-type", content_type);
    // Files of /proc and friends report size 0 but have content: send those chunked.
    if meta.len() > 0 || n == 0 {
        builder = builder.header("content-length", meta.len());
    }
    Ok(builder.body(body).expect("valid response"))
}

/// Writes the request body to `path` through a temporary file in the same directory, renamed
/// into place only when the whole body has arrived: readers never see a half-written file.
/// A refusal is sent once the body was read (`http::discard_body`).
pub async fn write(path: &str, req: Request) -> Result<Response, ApiError> {
    let (parts, mut body) = req.into_parts();
    let head = hyper::Request::from_parts(parts, ());
    let answer = write_body(path, &head, &mut body).await;
    if answer.is_err() {
        http::discard_body(&mut body).await;
    }
    answer
}

async fn write_body(
    path: &str,
    req: &hyper::Request<()>,
    body: &mut Incoming,
) -> Result<Response, ApiError> {
    check_path(path, true)?;
    if path.ends_with('/') {
        return Err(ApiError::invalid(format!(
            "{path}: a file path cannot end with /"
        )));
    }
    let q: WriteFileQuery = http::query(req)?;
    let mode = q.mode.as_deref().map(parse_mode).transpose()?;
    let target = Path::new(path);
    let existing = tokio::fs::metadata(target).await.ok();
    if existing.as_ref().is_some_and(|m| m.is_dir()) {
        return Err(ApiError::new(
            ErrorCode::IsADirectory,
            format!("{path}: is a directory"),
        ));
    }
    let parent = target.parent().unwrap_or(Path::new("/"));
    tokio::fs::create_dir_all(parent).await.map_err(|e| {
        // EEXIST here means a component of the parent path is a file.
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            ApiError::new(
                ErrorCode::NotADirectory,
                format!("{path}: a path component is not a directory"),
            )
        } else {
            io_error(path, e)
        }
    })?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent.join(format!(
        ".{name}.warren-{:08x}.tmp",
        crate::sessions::rand_u32()
    ));
    let result = write_tmp(&tmp, body).await;
    let (size, sha) = match result {
        Ok(v) => v,
        Err(e) => {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(e.into_api(path));
        }
    };
    let mode = mode.unwrap_or_else(|| existing.map(|m| m.mode() & 0o7777).unwrap_or(0o644));
    let finish = async {
        tokio::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).await?;
        tokio::fs::rename(&tmp, target).await
    };
    if let Err(e) = finish.await {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(io_error(path, e));
    }
    Ok(http::json(
        200,
        &WriteFileResponse {
            path: path.to_string(),
            size,
            sha256: sha,
        },
    ))
}

enum WriteError {
    Io(std::io::Error),
    Body(String),
}

impl WriteError {
    fn into_api(self, path: &str) -> ApiError {
        match self {
            WriteError::Io(e) => io_error(path, e),
            WriteError::Body(m) => ApiError::invalid(format!("upload of {path} interrupted: {m}")),
        }
    }
}

async fn write_tmp(tmp: &Path, body: &mut Incoming) -> Result<(u64, String), WriteError> {
    let file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(tmp)
        .await
        .map_err(WriteError::Io)?;
    let mut out = BufWriter::with_capacity(1024 * 1024, file);
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| WriteError::Body(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            hasher.update(&data);
            size += data.len() as u64;
            out.write_all(&data).await.map_err(WriteError::Io)?;
        }
    }
    out.flush().await.map_err(WriteError::Io)?;
    let file = out.into_inner();
    file.sync_data().await.map_err(WriteError::Io)?;
    Ok((size, hex::encode(hasher.finalize())))
}
