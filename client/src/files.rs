//! Files: streamed reads and writes, and directory operations.

use crate::{Client, Result};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use reqwest::{Method, Response};
use warren_api::files::{
    ArchiveUploadResponse, ListResponse, MkdirRequest, MoveRequest, PathResponse, Stat,
    WriteFileResponse, TAR_CONTENT_TYPE,
};

/// Everything but unreserved characters and `/` is escaped in file paths.
const PATH: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'[')
    .add(b']')
    .add(b'^')
    .add(b'|')
    .add(b'\\')
    .add(b'+')
    .add(b'&')
    .add(b'=')
    .add(b';');

/// `/v1/sandboxes/{id}/files/{path}` with the path percent-encoded.
pub fn file_url_path(id: &str, path: &str) -> String {
    let p = path.trim_start_matches('/');
    format!("/v1/sandboxes/{id}/files/{}", utf8_percent_encode(p, PATH))
}

impl Client {
    /// Starts a download; the response body streams (`bytes_stream()`).
    pub async fn read_file(&self, id: &str, path: &str) -> Result<Response> {
        Self::check(
            self.request(Method::GET, &file_url_path(id, path))
                .send()
                .await?,
        )
        .await
    }

    /// Uploads `body` (bytes or a stream) to `path`, atomically.
    pub async fn write_file(
        &self,
        id: &str,
        path: &str,
        body: impl Into<reqwest::Body>,
        mode: Option<&str>,
    ) -> Result<WriteFileResponse> {
        let mut rb = self
            .request(Method::PUT, &file_url_path(id, path))
            .body(body);
        if let Some(m) = mode {
            rb = rb.query(&[("mode", m)]);
        }
        self.json(rb).await
    }

    /// Starts the download of directory `path` as a tar (its entries named relative to it);
    /// the response body streams.
    pub async fn download_dir(&self, id: &str, path: &str) -> Result<Response> {
        Self::check(
            self.request(Method::GET, &format!("/v1/sandboxes/{id}/fs/archive"))
                .query(&[("path", path)])
                .send()
                .await?,
        )
        .await
    }

    /// Unpacks `tar` (bytes or a stream) into the new directory `path`, all or nothing.
    pub async fn upload_dir(
        &self,
        id: &str,
        path: &str,
        tar: impl Into<reqwest::Body>,
    ) -> Result<ArchiveUploadResponse> {
        self.json(
            self.request(Method::PUT, &format!("/v1/sandboxes/{id}/fs/archive"))
                .query(&[("path", path)])
                .header(reqwest::header::CONTENT_TYPE, TAR_CONTENT_TYPE)
                .body(tar),
        )
        .await
    }

    pub async fn delete_file(&self, id: &str, path: &str, recursive: bool) -> Result<()> {
        let rb = self
            .request(Method::DELETE, &file_url_path(id, path))
            .query(&[("recursive", recursive)]);
        Self::check(rb.send().await?).await?;
        Ok(())
    }

    pub async fn stat(&self, id: &str, path: &str) -> Result<Stat> {
        self.json(
            self.request(Method::GET, &format!("/v1/sandboxes/{id}/fs/stat"))
                .query(&[("path", path)]),
        )
        .await
    }

    pub async fn list_dir(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
        hidden: bool,
    ) -> Result<ListResponse> {
        let q = [
            ("path", path.to_string()),
            ("recursive", recursive.to_string()),
            ("hidden", hidden.to_string()),
        ];
        self.json(
            self.request(Method::GET, &format!("/v1/sandboxes/{id}/fs/list"))
                .query(&q),
        )
        .await
    }

    pub async fn mkdir(&self, id: &str, path: &str, recursive: bool) -> Result<PathResponse> {
        let body = MkdirRequest {
            path: path.to_string(),
            recursive,
        };
        self.call(Method::POST, &format!("/v1/sandboxes/{id}/fs/mkdir"), &body)
            .await
    }

    pub async fn move_path(
        &self,
        id: &str,
        from: &str,
        to: &str,
        overwrite: bool,
    ) -> Result<PathResponse> {
        let body = MoveRequest {
            from: from.to_string(),
            to: to.to_string(),
            overwrite,
        };
        self.call(Method::POST, &format!("/v1/sandboxes/{id}/fs/move"), &body)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_encoded_but_slashes_kept() {
        assert_eq!(
            file_url_path("sb", "/tmp/a b#c.txt"),
            "/v1/sandboxes/sb/files/tmp/a%20b%23c.txt"
        );
        assert_eq!(
            file_url_path("sb", "/x/100%.txt"),
            "/v1/sandboxes/sb/files/x/100%25.txt"
        );
    }
}
