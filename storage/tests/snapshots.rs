//! The snapshot store against a real local-directory object store.

use std::time::Duration;
use warren_storage::snapshots::{
    new_snapshot_id, open_object_store, ChunkCache, NewSnapshot, SnapshotError, SnapshotOrigin,
    SnapshotStore,
};

fn new(sandbox: &str) -> NewSnapshot {
    NewSnapshot {
        id: new_snapshot_id(),
        sandbox: sandbox.into(),
        name: None,
        origin: SnapshotOrigin::User,
        created_at: "2026-01-01T00:00:00Z".into(),
        image: "img".into(),
        dirs: vec![],
        deleted: vec!["/etc/motd".into()],
        tenant: "acme".into(),
    }
}

/// Pseudo-random bytes that do not compress (so sizes say what was stored).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

struct Fixture {
    _dir: tempfile::TempDir,
    objects_dir: std::path::PathBuf,
    store: SnapshotStore,
}

fn fixture(cache_budget: u64) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let objects_dir = dir.path().join("objects");
    let objects = open_object_store(objects_dir.to_str().unwrap()).unwrap();
    let cache = ChunkCache::open(&dir.path().join("cache"), cache_budget).unwrap();
    Fixture {
        objects_dir,
        store: SnapshotStore::new(objects, cache),
        _dir: dir,
    }
}

async fn read_back(store: &SnapshotStore, id: &str) -> Result<Vec<u8>, SnapshotError> {
    use futures_util::TryStreamExt;
    let m = store.manifest(id).await?;
    let prepared = store.prepare(&m).await?;
    let parts: Vec<bytes::Bytes> = prepared
        .into_stream()
        .try_collect()
        .await
        .map_err(SnapshotError::Source)?;
    Ok(parts.concat())
}

#[tokio::test]
async fn round_trip_and_a_small_change_stores_little() {
    let f = fixture(1 << 30);
    let data = noise(24 << 20, 1);
    let first = f.store.write(new("a"), &data[..]).await.unwrap();
    assert_eq!(first.size_bytes, data.len() as u64);
    assert!(first.chunks.len() > 5);
    assert_eq!(read_back(&f.store, &first.id).await.unwrap(), data);

    // 1 MiB inserted in the middle: content-defined chunks resynchronise after it.
    let mut changed = data.clone();
    changed.splice(12 << 20..12 << 20, noise(1 << 20, 2));
    let second = f.store.write(new("a"), &changed[..]).await.unwrap();
    assert!(
        second.new_bytes < 5 << 20,
        "a 1 MiB change stored {} new bytes",
        second.new_bytes
    );
    assert_eq!(read_back(&f.store, &second.id).await.unwrap(), changed);

    let listed = f.store.list(Some("a")).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(f.store.list(Some("b")).await.unwrap().is_empty());
    assert_eq!(listed[0].deleted, vec!["/etc/motd".to_string()]);
}

#[tokio::test]
async fn damaged_and_missing_chunks_fail_before_anything_is_read() {
    let f = fixture(1 << 30);
    let data = noise(6 << 20, 3);
    let m = f.store.write(new("a"), &data[..]).await.unwrap();
    // Empty the local cache so the object store is read.
    let cache_less = SnapshotStore::new(
        open_object_store(f.objects_dir.to_str().unwrap()).unwrap(),
        ChunkCache::open(&f._dir.path().join("cache2"), 1 << 30).unwrap(),
    );
    let victim = &m.chunks[1].hash;
    let path = f.objects_dir.join("chunks").join(&victim[..2]).join(victim);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[10] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    let err = match cache_less.prepare(&m).await {
        Err(e) => e,
        Ok(_) => panic!("a damaged chunk was accepted"),
    };
    assert!(matches!(err, SnapshotError::Damaged { .. }), "{err}");
    std::fs::remove_file(&path).unwrap();
    let err = read_back(&cache_less, &m.id).await.unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
}

#[tokio::test]
async fn deleting_frees_only_unshared_chunks() {
    let f = fixture(1 << 30);
    let shared = noise(8 << 20, 4);
    let mut other = shared.clone();
    other.extend(noise(4 << 20, 5));
    let a = f.store.write(new("a"), &shared[..]).await.unwrap();
    let b = f.store.write(new("b"), &other[..]).await.unwrap();
    assert!(b.new_bytes < b.stored_bytes);

    f.store.delete(&b.id).await.unwrap();
    assert!(matches!(
        f.store.delete(&b.id).await,
        Err(SnapshotError::NotFound(_))
    ));
    let report = f.store.collect_garbage(Duration::ZERO).await.unwrap();
    assert!(!report.deferred);
    assert!(report.deleted_bytes >= 4 << 20, "{report:?}");
    assert_eq!(read_back(&f.store, &a.id).await.unwrap(), shared);

    f.store.delete(&a.id).await.unwrap();
    let report = f.store.collect_garbage(Duration::ZERO).await.unwrap();
    assert_eq!(report.kept_chunks, 0, "{report:?}");
    assert_eq!(f.store.cache().bytes(), 0);
}

#[tokio::test]
async fn a_failing_source_leaves_no_snapshot_and_a_bounded_cache_still_restores() {
    let f = fixture(2 << 20);
    struct Broken(usize);
    impl tokio::io::AsyncRead for Broken {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if self.0 == 0 {
                return std::task::Poll::Ready(Err(std::io::Error::other("source died")));
            }
            let n = self.0.min(buf.remaining()).min(64 * 1024);
            buf.put_slice(&noise(n, self.0 as u64));
            self.0 -= n;
            std::task::Poll::Ready(Ok(()))
        }
    }
    let n = new("a");
    let id = n.id.clone();
    assert!(f.store.write(n, Broken(5 << 20)).await.is_err());
    assert!(matches!(
        f.store.manifest(&id).await,
        Err(SnapshotError::NotFound(_))
    ));
    // A snapshot larger than the cache budget: its chunks are pinned while it is read.
    let data = noise(10 << 20, 6);
    let m = f.store.write(new("a"), &data[..]).await.unwrap();
    assert!(f.store.cache().bytes() <= 2 << 20);
    assert_eq!(read_back(&f.store, &m.id).await.unwrap(), data);
}

mod moto;

#[tokio::test]
async fn the_s3_store_round_trips_deduplicates_and_collects_garbage() {
    moto::set_test_credentials();
    let server = moto::Moto::start().await;
    server.bucket("warren-snapshots").await;
    let dir = tempfile::tempdir().unwrap();
    let objects = open_object_store(&moto::location(
        server.port,
        "warren-snapshots",
        "cluster-a",
    ))
    .unwrap();
    let cache = ChunkCache::open(&dir.path().join("cache"), 64 << 20).unwrap();
    let store = SnapshotStore::new(objects, cache);

    let data = noise(9 << 20, 7);
    let first = store.write(new("box"), &data[..]).await.unwrap();
    assert_eq!(read_back(&store, &first.id).await.unwrap(), data);
    let mut changed = data.clone();
    changed[4 << 20..(4 << 20) + 1000].copy_from_slice(&noise(1000, 9));
    let second = store.write(new("box"), &changed[..]).await.unwrap();
    assert!(
        second.new_bytes < 5 << 20,
        "a small change stores little: {} new bytes",
        second.new_bytes
    );
    let listed: Vec<String> = store
        .list(Some("box"))
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert!(listed.contains(&first.id) && listed.contains(&second.id));

    // Read through a second store with an empty cache: every chunk comes from S3.
    let cold = SnapshotStore::new(
        open_object_store(&moto::location(
            server.port,
            "warren-snapshots",
            "cluster-a",
        ))
        .unwrap(),
        ChunkCache::open(&dir.path().join("cold-cache"), 64 << 20).unwrap(),
    );
    assert_eq!(read_back(&cold, &second.id).await.unwrap(), changed);

    store.delete(&first.id).await.unwrap();
    let gc = store.collect_garbage(Duration::ZERO).await.unwrap();
    assert!(gc.deleted_chunks > 0, "{gc:?}");
    assert_eq!(read_back(&cold, &second.id).await.unwrap(), changed);
    assert!(store.manifest(&first.id).await.is_err());
}

/// Manifests read from the store so far (successful GETs of `snapshots/…`), from the
/// store's metrics.
fn manifest_gets(registry: &prometheus::Registry) -> u64 {
    registry
        .gather()
        .iter()
        .filter(|f| f.name() == "warren_object_store_request_seconds")
        .flat_map(|f| f.get_metric())
        .filter(|m| {
            m.get_label()
                .iter()
                .any(|l| l.name() == "op" && l.value() == "get")
                && m.get_label()
                    .iter()
                    .any(|l| l.name() == "outcome" && l.value() == "ok")
        })
        .map(|m| m.get_histogram().get_sample_count())
        .sum()
}

/// Listing one sandbox's snapshots read every manifest in the store, on every listing (~0.7 s
/// a listing with 1,000 snapshots in the failover benchmark's store; one request per
/// snapshot on S3). Manifests never change once written, so which sandbox each is of is
/// remembered: a listing reads only that sandbox's manifests and those not seen yet.
#[tokio::test]
async fn listing_one_sandboxs_snapshots_reads_its_manifests_not_everyones() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = warren_storage::metered::ObjectStoreMetrics::default();
    let registry = prometheus::Registry::new();
    metrics.register(&registry).unwrap();
    let objects = warren_storage::metered::MeteredStore::wrap(
        open_object_store(dir.path().join("objects").to_str().unwrap()).unwrap(),
        metrics,
    );
    let cache = ChunkCache::open(&dir.path().join("cache"), 1 << 30).unwrap();
    let writer = SnapshotStore::new(objects.clone(), cache.clone());
    for i in 0..30 {
        writer
            .write(new(&format!("s{i}")), &noise(1000, i)[..])
            .await
            .unwrap();
    }
    let second = writer.write(new("s7"), &noise(1000, 99)[..]).await.unwrap();
    // Another node's store: it has seen none of them.
    let reader = SnapshotStore::new(objects, cache);
    let before = manifest_gets(&registry);
    let first_listing = reader.list(Some("s7")).await.unwrap();
    assert_eq!(first_listing.len(), 2);
    assert_eq!(
        manifest_gets(&registry) - before,
        31,
        "a first listing reads them all"
    );
    let before = manifest_gets(&registry);
    let listing = reader.list(Some("s7")).await.unwrap();
    assert_eq!(
        listing.iter().map(|m| &m.id).collect::<Vec<_>>(),
        first_listing.iter().map(|m| &m.id).collect::<Vec<_>>()
    );
    assert_eq!(
        manifest_gets(&registry) - before,
        2,
        "a later listing reads only the sandbox's own manifests"
    );
    // One written and one deleted since are listed as they are now.
    let third = writer.write(new("s7"), &noise(1000, 98)[..]).await.unwrap();
    reader.delete(&second.id).await.unwrap();
    let ids: Vec<String> = reader
        .list(Some("s7"))
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(
        ids.contains(&third.id) && !ids.contains(&second.id),
        "{ids:?}"
    );
    assert_eq!(reader.list(Some("s8")).await.unwrap().len(), 1);
    assert_eq!(reader.list(None).await.unwrap().len(), 31);
}
