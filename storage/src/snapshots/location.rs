//! Where snapshots live: a local directory (`file:///dir` or `/dir`), an S3-compatible bucket
//! (`s3://bucket[/prefix]`), or memory (`memory://`, tests).
//!
//! S3 settings come from the query string and the usual environment variables
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
//! `AWS_ENDPOINT`): `s3://snapshots/prod?endpoint=http://127.0.0.1:9000&region=us-east-1`.
//! An `http://` endpoint allows plain HTTP (local servers); requests go through the same
//! rustls/ring HTTP client the rest of warren uses.

use super::SnapshotError;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpResponseBody, HttpService,
};
use object_store::prefix::PrefixStore;
use object_store::ObjectStore;
use std::sync::Arc;
use std::time::Duration;

/// Opens the object store at `location`.
pub fn open_object_store(location: &str) -> Result<Arc<dyn ObjectStore>, SnapshotError> {
    if location == "memory://" {
        return Ok(Arc::new(object_store::memory::InMemory::new()));
    }
    if let Some(rest) = location.strip_prefix("s3://") {
        return open_s3(location, rest);
    }
    let dir = location.strip_prefix("file://").unwrap_or(location);
    if !dir.starts_with('/') {
        return Err(SnapshotError::Invalid(format!(
            "unsupported object store {location:?}: use file:///absolute/dir, an absolute path, or s3://bucket[/prefix]"
        )));
    }
    std::fs::create_dir_all(dir).map_err(SnapshotError::Source)?;
    let fs = object_store::local::LocalFileSystem::new_with_prefix(dir)
        .map_err(SnapshotError::Store)?
        .with_automatic_cleanup(true);
    Ok(Arc::new(fs))
}

fn open_s3(location: &str, rest: &str) -> Result<Arc<dyn ObjectStore>, SnapshotError> {
    let invalid = |m: String| SnapshotError::Invalid(format!("object store {location:?}: {m}"));
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
    if bucket.is_empty() {
        return Err(invalid("no bucket named".into()));
    }
    let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let v = v.as_ref();
        b = match k.as_ref() {
            "endpoint" => {
                let allow_http = v.starts_with("http://");
                b.with_endpoint(v).with_allow_http(allow_http)
            }
            "region" => b.with_region(v),
            "virtual_hosted" => b.with_virtual_hosted_style_request(v == "true"),
            other => {
                return Err(invalid(format!(
                    "unknown setting {other:?} (endpoint, region, virtual_hosted)"
                )))
            }
        };
    }
    // A few quick retries: a store that stays down fails the snapshot in seconds (the
    // previous snapshot is untouched) instead of holding the sandbox for minutes.
    let retry = object_store::RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: 4,
        retry_timeout: Duration::from_secs(20),
    };
    let store = b
        .with_retry(retry)
        .with_http_connector(ReqwestConnector)
        .build()
        .map_err(SnapshotError::Store)?;
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        Ok(Arc::new(store))
    } else {
        Ok(Arc::new(PrefixStore::new(store, prefix)))
    }
}

/// object_store's HTTP through reqwest 0.12 (rustls on ring), so that no second TLS stack
/// (and crypto provider) enters the build.
#[derive(Debug)]
struct ReqwestConnector;

impl HttpConnector for ReqwestConnector {
    fn connect(&self, options: &object_store::ClientOptions) -> object_store::Result<HttpClient> {
        let _ = options;
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(300))
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            })?;
        Ok(HttpClient::new(ReqwestService(client)))
    }
}

#[derive(Debug)]
struct ReqwestService(reqwest::Client);

fn http_error(e: reqwest::Error) -> HttpError {
    let kind = if e.is_timeout() {
        HttpErrorKind::Timeout
    } else if e.is_connect() {
        HttpErrorKind::Connect
    } else if e.is_decode() {
        HttpErrorKind::Decode
    } else if e.is_request() || e.is_body() {
        HttpErrorKind::Request
    } else {
        HttpErrorKind::Unknown
    };
    HttpError::new(kind, e.without_url())
}

#[async_trait::async_trait]
impl HttpService for ReqwestService {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let (parts, body) = req.into_parts();
        let url = reqwest::Url::parse(&parts.uri.to_string())
            .map_err(|e| HttpError::new(HttpErrorKind::Request, e))?;
        let mut r = reqwest::Request::new(parts.method, url);
        *r.headers_mut() = parts.headers;
        *r.body_mut() = Some(reqwest::Body::wrap(body));
        let resp = self.0.execute(r).await.map_err(http_error)?;
        let resp: http::Response<reqwest::Body> = resp.into();
        let (parts, body) = resp.into_parts();
        let body = HttpResponseBody::new(http_body_util::BodyExt::map_err(body, http_error));
        Ok(HttpResponse::from_parts(parts, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(location: &str) -> String {
        match open_object_store(location) {
            Err(SnapshotError::Invalid(m)) => m,
            Err(e) => panic!("{location}: not refused as invalid: {e}"),
            Ok(_) => panic!("{location}: opened"),
        }
    }

    #[test]
    fn s3_settings_are_read_from_a_percent_encoded_query() {
        assert!(open_object_store(
            "s3://snaps/prod?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=us-east-1"
        )
        .is_ok());
        assert!(open_object_store("s3://snaps?endpoint=http://127.0.0.1:9000&&region=r1").is_ok());
        // A setting's name is decoded too, and an unknown one is named.
        let m = refusal("s3://snaps?endpo%69nt=http://h&colour=blue");
        assert!(m.contains("unknown setting \"colour\""), "{m}");
        assert!(refusal("s3://?region=r1").contains("no bucket"));
        assert!(refusal("relative/dir").contains("unsupported object store"));
    }
}
