//! The object store as the node uses it, counted: every request by operation and outcome
//! with its latency, and the bytes sent and received (`warren_object_store_*` on
//! `/metrics`). Wraps whatever store `open_object_store` opened.

use async_trait::async_trait;
use futures_util::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result, UploadPart,
};
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};
use std::sync::Arc;
use std::time::Instant;

/// The series of the object store. Made unregistered; `register` adds them to a registry.
#[derive(Clone)]
pub struct ObjectStoreMetrics {
    requests: HistogramVec,
    bytes: IntCounterVec,
}

impl Default for ObjectStoreMetrics {
    fn default() -> Self {
        let requests = HistogramVec::new(
            HistogramOpts::new(
                "warren_object_store_request_seconds",
                "Object store requests by operation (put, put_multipart, get, delete, list, copy) and outcome (ok, not_found, error), with their latency",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0,
            ]),
            &["op", "outcome"],
        )
        .expect("valid histogram");
        let bytes = IntCounterVec::new(
            Opts::new(
                "warren_object_store_bytes_total",
                "Bytes sent to (put) and received from (get) the object store",
            ),
            &["direction"],
        )
        .expect("valid counter");
        ObjectStoreMetrics { requests, bytes }
    }
}

impl ObjectStoreMetrics {
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.requests.clone()))?;
        registry.register(Box::new(self.bytes.clone()))
    }

    fn observe<T>(&self, op: &str, started: Instant, r: &Result<T>) {
        self.requests
            .with_label_values(&[op, outcome(r)])
            .observe(started.elapsed().as_secs_f64());
    }

    fn count_bytes(&self, direction: &str, n: u64) {
        self.bytes.with_label_values(&[direction]).inc_by(n);
    }
}

fn outcome<T>(r: &Result<T>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(object_store::Error::NotFound { .. }) => "not_found",
        Err(_) => "error",
    }
}

/// `inner`, with every request counted in `metrics`.
#[derive(Debug)]
pub struct MeteredStore {
    inner: Arc<dyn ObjectStore>,
    metrics: Metrics,
}

/// `ObjectStoreMetrics` with a `Debug` the trait asks for.
#[derive(Clone)]
struct Metrics(ObjectStoreMetrics);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ObjectStoreMetrics")
    }
}

impl MeteredStore {
    pub fn wrap(inner: Arc<dyn ObjectStore>, metrics: ObjectStoreMetrics) -> Arc<dyn ObjectStore> {
        Arc::new(MeteredStore {
            inner,
            metrics: Metrics(metrics),
        })
    }
}

impl std::fmt::Display for MeteredStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Metered({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for MeteredStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let m = &self.metrics.0;
        let len = payload.content_length() as u64;
        let t = Instant::now();
        let r = self.inner.put_opts(location, payload, opts).await;
        m.observe("put", t, &r);
        if r.is_ok() {
            m.count_bytes("put", len);
        }
        r
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let t = Instant::now();
        let r = self.inner.put_multipart_opts(location, opts).await;
        self.metrics.0.observe("put_multipart", t, &r);
        r.map(|inner| {
            Box::new(MeteredUpload {
                inner,
                metrics: self.metrics.clone(),
            }) as Box<dyn MultipartUpload>
        })
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let m = &self.metrics.0;
        let t = Instant::now();
        let r = self.inner.get_opts(location, options).await;
        m.observe("get", t, &r);
        if let Ok(got) = &r {
            m.count_bytes("get", got.range.end.saturating_sub(got.range.start));
        }
        r
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let m = self.metrics.clone();
        let t = Instant::now();
        self.inner
            .delete_stream(locations)
            .inspect(move |r| m.0.observe("delete", t, r))
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let m = self.metrics.clone();
        let t = Instant::now();
        let mut first = true;
        self.inner
            .list(prefix)
            .inspect(move |r| {
                // One request per listing (its first item), and every error it meets.
                if std::mem::take(&mut first) || r.is_err() {
                    m.0.observe("list", t, r);
                }
            })
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let t = Instant::now();
        let r = self.inner.list_with_delimiter(prefix).await;
        self.metrics.0.observe("list", t, &r);
        r
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let t = Instant::now();
        let r = self.inner.copy_opts(from, to, options).await;
        self.metrics.0.observe("copy", t, &r);
        r
    }
}

/// A multipart upload whose parts' bytes are counted once the upload completes.
#[derive(Debug)]
struct MeteredUpload {
    inner: Box<dyn MultipartUpload>,
    metrics: Metrics,
}

#[async_trait]
impl MultipartUpload for MeteredUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let len = data.content_length() as u64;
        let metrics = self.metrics.clone();
        let part = self.inner.put_part(data);
        Box::pin(async move {
            let t = Instant::now();
            let r = part.await;
            metrics.0.observe("put_part", t, &r);
            if r.is_ok() {
                metrics.0.count_bytes("put", len);
            }
            r
        })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        self.inner.complete().await
    }

    async fn abort(&mut self) -> Result<()> {
        self.inner.abort().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::ObjectStoreExt;

    fn sample(m: &ObjectStoreMetrics, op: &str, outcome: &str) -> u64 {
        m.requests
            .with_label_values(&[op, outcome])
            .get_sample_count()
    }

    #[tokio::test]
    async fn requests_bytes_and_misses_are_counted() {
        let m = ObjectStoreMetrics::default();
        let s = MeteredStore::wrap(Arc::new(InMemory::new()), m.clone());
        let p = Path::from("a/b");
        s.put(&p, PutPayload::from_static(b"hello")).await.unwrap();
        let got = s.get(&p).await.unwrap().bytes().await.unwrap();
        assert_eq!(&got[..], b"hello");
        assert!(s.get(&Path::from("nope")).await.is_err());
        let listed: Vec<_> = s.list(Some(&Path::from("a"))).collect().await;
        assert_eq!(listed.len(), 1);
        assert_eq!(sample(&m, "put", "ok"), 1);
        assert_eq!(sample(&m, "get", "ok"), 1);
        assert_eq!(sample(&m, "get", "not_found"), 1);
        assert_eq!(sample(&m, "list", "ok"), 1);
        assert_eq!(m.bytes.with_label_values(&["put"]).get(), 5);
        assert_eq!(m.bytes.with_label_values(&["get"]).get(), 5);
    }
}
