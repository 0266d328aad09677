//! The snapshot store: writes snapshots as deduplicated chunks plus a manifest, reads them
//! back through the local cache, lists, deletes and collects unreferenced chunks.

use super::cache::{ChunkCache, Pins};
use super::chunk::{self, AVG_SIZE, MAX_SIZE, MIN_SIZE};
use super::error::SnapshotError;
use super::manifest::{validate_snapshot_id, ChunkRef, Manifest, NewSnapshot, MANIFEST_FORMAT};
use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::AsyncRead;

/// Chunks sealed (hashed, compressed) and moved to or from the store at once.
const SEAL_AHEAD: usize = 2;
const TRANSFERS: usize = 4;
/// A snapshot write that started longer ago than this died with its writer.
const ABANDONED_AFTER: Duration = Duration::from_secs(3600);

#[derive(Clone)]
pub struct SnapshotStore {
    objects: Arc<dyn ObjectStore>,
    cache: Arc<ChunkCache>,
    /// Which sandbox each snapshot seen here is of (`Owners`).
    owners: Arc<Owners>,
}

/// How many snapshots' sandboxes are remembered (~100 bytes each); past it, they are all
/// forgotten and learnt again.
const OWNERS_KEPT: usize = 200_000;

/// Which sandbox each snapshot is of, as its manifest says. A manifest is written once
/// (create-only) and never changes, so this never goes stale: a listing of one sandbox's
/// snapshots reads only the manifests of that sandbox and of snapshots not seen yet, not
/// every manifest in the store (it read them all, on every listing: ~0.7 s a listing with
/// 1,000 snapshots on a local store, and one request to the store per snapshot on S3).
#[derive(Default)]
struct Owners(Mutex<HashMap<String, String>>);

impl Owners {
    fn learn(&self, m: &Manifest) {
        let mut known = self.0.lock().expect("owners lock");
        if known.len() >= OWNERS_KEPT {
            known.clear();
        }
        known.insert(m.id.clone(), m.sandbox.clone());
    }

    fn forget(&self, id: &str) {
        self.0.lock().expect("owners lock").remove(id);
    }

    /// Whether snapshot `id` may be of `sandbox` (it is, or it was not seen yet).
    fn may_be_of(&self, id: &str, sandbox: &str) -> bool {
        self.0
            .lock()
            .expect("owners lock")
            .get(id)
            .is_none_or(|s| s == sandbox)
    }
}

/// The outcome of a garbage collection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    pub deleted_chunks: usize,
    pub deleted_bytes: u64,
    pub kept_chunks: usize,
    /// A snapshot was being written somewhere: nothing was deleted this time.
    pub deferred: bool,
}

/// A snapshot whose chunks are all verified and in the local cache (pinned there).
pub struct Prepared {
    manifest: Manifest,
    objects: Arc<dyn ObjectStore>,
    cache: Arc<ChunkCache>,
    pins: Arc<Pins>,
}

fn store_err(e: object_store::Error) -> SnapshotError {
    SnapshotError::Store(e)
}

fn join_err(e: tokio::task::JoinError) -> SnapshotError {
    SnapshotError::Source(std::io::Error::other(e))
}

impl SnapshotStore {
    pub fn new(objects: Arc<dyn ObjectStore>, cache: Arc<ChunkCache>) -> Self {
        SnapshotStore {
            objects,
            cache,
            owners: Arc::default(),
        }
    }

    /// The object store itself (the usage export shares it).
    pub fn objects(&self) -> &Arc<dyn ObjectStore> {
        &self.objects
    }

    pub fn cache(&self) -> &Arc<ChunkCache> {
        &self.cache
    }

    /// Writes a snapshot from an archive stream. The manifest is written last and only
    /// once (create-only): a failure at any point leaves no snapshot and every earlier
    /// snapshot intact; chunks it uploaded are collected as garbage later.
    pub async fn write<R: AsyncRead + Unpin + Send>(
        &self,
        new: NewSnapshot,
        source: R,
    ) -> Result<Manifest, SnapshotError> {
        validate_snapshot_id(&new.id).map_err(SnapshotError::Invalid)?;
        // Garbage collection leaves chunks alone while a snapshot is being written.
        let pending = Path::from(format!("pending/{}", new.id));
        self.objects
            .put(&pending, PutPayload::from_static(b""))
            .await
            .map_err(store_err)?;
        let result = self.write_chunks(source).await;
        let result = match result {
            Ok((chunks, new_bytes)) => {
                let m = Manifest {
                    format: MANIFEST_FORMAT,
                    size_bytes: chunks.iter().map(|c| c.size as u64).sum(),
                    stored_bytes: chunks.iter().map(|c| c.stored as u64).sum(),
                    new_bytes,
                    chunks,
                    id: new.id,
                    sandbox: new.sandbox,
                    name: new.name,
                    origin: new.origin,
                    created_at: new.created_at,
                    image: new.image,
                    dirs: new.dirs,
                    deleted: new.deleted,
                    tenant: Some(new.tenant),
                };
                let body = serde_json::to_vec_pretty(&m).expect("manifests serialize");
                let opts = PutOptions {
                    mode: PutMode::Create,
                    ..Default::default()
                };
                let written = self
                    .objects
                    .put_opts(&Manifest::key(&m.id), body.into(), opts)
                    .await
                    .map(|_| m)
                    .map_err(store_err);
                if let Ok(m) = &written {
                    self.owners.learn(m);
                }
                written
            }
            Err(e) => Err(e),
        };
        let _ = self.objects.delete(&pending).await;
        result
    }

    /// Cuts, names and stores the archive's chunks in order: (chunks, bytes newly stored).
    async fn write_chunks<R: AsyncRead + Unpin + Send>(
        &self,
        source: R,
    ) -> Result<(Vec<ChunkRef>, u64), SnapshotError> {
        let mut cdc = fastcdc::v2020::AsyncStreamCDC::new(source, MIN_SIZE, AVG_SIZE, MAX_SIZE);
        let stored = cdc
            .as_stream()
            .map(|r| async move {
                let c = r.map_err(|e| SnapshotError::Source(std::io::Error::other(e)))?;
                let raw = Bytes::from(c.data);
                let hashed = raw.clone();
                let name = self
                    .cache
                    .blocking()
                    .run(move || chunk::hash(&hashed))
                    .await
                    .map_err(join_err)?;
                Ok::<_, SnapshotError>((name, raw))
            })
            .buffered(SEAL_AHEAD)
            .map(|r| async move {
                let (name, raw) = r?;
                let size = raw.len() as u32;
                let (stored, fresh) = self.store_chunk(&name, raw).await?;
                let c = ChunkRef {
                    hash: name,
                    size,
                    stored,
                };
                Ok::<_, SnapshotError>((c, fresh))
            })
            .buffered(TRANSFERS);
        let all: Vec<(ChunkRef, bool)> = stored.try_collect().await?;
        let new_bytes = all
            .iter()
            .filter(|(_, fresh)| *fresh)
            .map(|(c, _)| c.stored as u64)
            .sum();
        Ok((all.into_iter().map(|(c, _)| c).collect(), new_bytes))
    }

    /// Stores a chunk, named by the hash of `raw`, unless the store has it; keeps it in the
    /// cache. A chunk already stored is not compressed again (most chunks of a repeated
    /// snapshot or checkpoint). Returns (stored size, whether it was uploaded now).
    async fn store_chunk(&self, name: &str, raw: Bytes) -> Result<(u32, bool), SnapshotError> {
        let key = chunk::key(name);
        let (len, fresh, to_cache) = match self.objects.head(&key).await {
            Ok(meta) if self.cache.contains(name) => (meta.size as u32, false, None),
            Ok(meta) => (meta.size as u32, false, Some(self.seal(raw).await?)),
            Err(object_store::Error::NotFound { .. }) => {
                let stored = self.seal(raw).await?;
                self.objects
                    .put(&key, PutPayload::from_bytes(stored.clone()))
                    .await
                    .map_err(store_err)?;
                (stored.len() as u32, true, Some(stored))
            }
            Err(e) => return Err(store_err(e)),
        };
        if let Some(stored) = to_cache {
            self.cache
                .put(name, stored)
                .await
                .map_err(SnapshotError::Cache)?;
        }
        Ok((len, fresh))
    }

    /// Compresses a raw chunk off the async threads.
    async fn seal(&self, raw: Bytes) -> Result<Bytes, SnapshotError> {
        let stored = self
            .cache
            .blocking()
            .run(move || chunk::compress(&raw))
            .await
            .map_err(join_err)?
            .map_err(SnapshotError::Source)?;
        Ok(Bytes::from(stored))
    }

    /// Reads a manifest.
    pub async fn manifest(&self, id: &str) -> Result<Manifest, SnapshotError> {
        validate_snapshot_id(id).map_err(SnapshotError::Invalid)?;
        let bytes = match self.objects.get(&Manifest::key(id)).await {
            Ok(r) => r.bytes().await.map_err(store_err)?,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(SnapshotError::NotFound(id.to_string()))
            }
            Err(e) => return Err(store_err(e)),
        };
        let m = parse_manifest(id, &bytes)?;
        self.owners.learn(&m);
        Ok(m)
    }

    /// Every snapshot (of one sandbox when given), oldest first.
    pub async fn list(&self, sandbox: Option<&str>) -> Result<Vec<Manifest>, SnapshotError> {
        let ids: Vec<String> = self
            .objects
            .list(Some(&Path::from("snapshots")))
            .map_err(store_err)
            .try_filter_map(|meta| async move {
                Ok(meta
                    .location
                    .filename()
                    .and_then(|f| f.strip_suffix(".json"))
                    .filter(|id| sandbox.is_none_or(|s| self.owners.may_be_of(id, s)))
                    .map(str::to_string))
            })
            .try_collect()
            .await?;
        let mut all: Vec<Manifest> = futures_util::stream::iter(ids)
            .map(|id| async move {
                match self.manifest(&id).await {
                    // Deleted while listing.
                    Err(SnapshotError::NotFound(_)) => Ok(None),
                    other => other.map(Some),
                }
            })
            .buffered(TRANSFERS * 2)
            .try_filter_map(|m| async move { Ok(m) })
            .try_filter(|m| futures_util::future::ready(sandbox.is_none_or(|s| m.sandbox == s)))
            .try_collect()
            .await?;
        all.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(all)
    }

    /// Deletes a snapshot's manifest (its chunks go at the next garbage collection).
    pub async fn delete(&self, id: &str) -> Result<(), SnapshotError> {
        self.manifest(id).await?;
        self.objects
            .delete(&Manifest::key(id))
            .await
            .map_err(store_err)?;
        self.owners.forget(id);
        Ok(())
    }

    /// Fetches every chunk the snapshot needs into the local cache and verifies it, before
    /// anything is restored: a missing or damaged chunk fails here, with nothing changed.
    pub async fn prepare(&self, m: &Manifest) -> Result<Prepared, SnapshotError> {
        let pins = self.cache.pin(m.chunks.iter().map(|c| c.hash.clone()));
        let mut seen = HashSet::new();
        let missing: Vec<ChunkRef> = m
            .chunks
            .iter()
            .filter(|c| seen.insert(c.hash.clone()) && !self.cache.has(&c.hash))
            .cloned()
            .collect();
        self.cache
            .metrics()
            .looked_up(seen.len() - missing.len(), missing.len());
        futures_util::stream::iter(missing)
            .map(|c| fetch(&self.objects, &self.cache, &m.id, c))
            .buffer_unordered(TRANSFERS)
            .try_for_each(|_| async { Ok(()) })
            .await?;
        Ok(Prepared {
            manifest: m.clone(),
            objects: self.objects.clone(),
            cache: self.cache.clone(),
            pins: Arc::new(pins),
        })
    }

    /// Deletes chunks that no manifest refers to and that are older than `grace`. Does
    /// nothing while a snapshot is being written anywhere, since such a snapshot may reuse
    /// any chunk.
    pub async fn collect_garbage(&self, grace: Duration) -> Result<GcReport, SnapshotError> {
        let ago = |d: Duration| unix_secs(SystemTime::now().checked_sub(d).unwrap_or(UNIX_EPOCH));
        let (cutoff, abandoned) = (ago(grace), ago(ABANDONED_AFTER));
        if self.writes_in_progress(abandoned).await? {
            return Ok(GcReport {
                deferred: true,
                ..Default::default()
            });
        }
        let mut referenced = HashSet::new();
        for m in self.list(None).await? {
            referenced.extend(m.chunks.into_iter().map(|c| c.hash));
        }
        let chunks: Vec<object_store::ObjectMeta> = self
            .objects
            .list(Some(&Path::from("chunks")))
            .try_collect()
            .await
            .map_err(store_err)?;
        let mut report = GcReport::default();
        let mut doomed = Vec::new();
        for meta in chunks {
            let name = meta.location.filename().unwrap_or_default().to_string();
            if referenced.contains(&name)
                || (!grace.is_zero() && meta.last_modified.timestamp() > cutoff)
            {
                report.kept_chunks += 1;
            } else {
                doomed.push((meta.location, name, meta.size));
            }
        }
        // A write may have begun while we listed: look again right before deleting.
        if self.writes_in_progress(abandoned).await? {
            return Ok(GcReport {
                deferred: true,
                ..Default::default()
            });
        }
        for (location, name, size) in doomed {
            match self.objects.delete(&location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(store_err(e)),
            }
            self.cache.forget(&name);
            report.deleted_chunks += 1;
            report.deleted_bytes += size;
        }
        Ok(report)
    }

    /// Whether a snapshot write started after `abandoned`; older markers are of writers
    /// that died, and are removed.
    async fn writes_in_progress(&self, abandoned: i64) -> Result<bool, SnapshotError> {
        let markers: Vec<object_store::ObjectMeta> = self
            .objects
            .list(Some(&Path::from("pending")))
            .try_collect()
            .await
            .map_err(store_err)?;
        let mut live = false;
        for m in markers {
            if m.last_modified.timestamp() > abandoned {
                live = true;
            } else {
                let _ = self.objects.delete(&m.location).await;
            }
        }
        Ok(live)
    }
}

fn unix_secs(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as i64
}

fn parse_manifest(id: &str, bytes: &[u8]) -> Result<Manifest, SnapshotError> {
    let damaged = |why: String| SnapshotError::Damaged {
        id: id.to_string(),
        why,
    };
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| damaged(format!("manifest: {e}")))?;
    let format = v.get("format").and_then(|f| f.as_u64()).unwrap_or(0) as u32;
    if format != MANIFEST_FORMAT {
        return Err(SnapshotError::Format {
            id: id.to_string(),
            format,
            supported: MANIFEST_FORMAT,
        });
    }
    serde_json::from_value(v).map_err(|e| damaged(format!("manifest: {e}")))
}

/// Fetches one chunk from the object store, checks it against its name and puts it in the
/// cache. Returns its decompressed bytes.
async fn fetch(
    objects: &Arc<dyn ObjectStore>,
    cache: &Arc<ChunkCache>,
    snapshot: &str,
    c: ChunkRef,
) -> Result<Vec<u8>, SnapshotError> {
    let stored = match objects.get(&chunk::key(&c.hash)).await {
        Ok(r) => r.bytes().await.map_err(store_err)?,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(SnapshotError::Damaged {
                id: snapshot.to_string(),
                why: format!("chunk {} is missing from the object store", c.hash),
            })
        }
        Err(e) => return Err(store_err(e)),
    };
    let (id, name, check) = (snapshot.to_string(), c.hash.clone(), stored.clone());
    let raw = cache
        .blocking()
        .run(move || chunk::open(&id, &name, c.size, &check))
        .await
        .map_err(join_err)??;
    cache
        .put(&c.hash, stored)
        .await
        .map_err(SnapshotError::Cache)?;
    Ok(raw)
}

impl Prepared {
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The archive's bytes, in order, decompressed from the cache and checked again
    /// (`chunk::open_cached`). A cached chunk found damaged or gone (the node's own disk)
    /// is fetched from the store again, checked against its name, and cached anew.
    pub fn into_stream(self) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
        let Prepared {
            manifest,
            objects,
            cache,
            pins,
        } = self;
        let id = manifest.id.clone();
        futures_util::stream::iter(manifest.chunks)
            .map(move |c| {
                let (objects, cache, id, pins) =
                    (objects.clone(), cache.clone(), id.clone(), pins.clone());
                async move {
                    let _pins = pins;
                    let cached = match cache.get(&c.hash).await {
                        Some(stored) => {
                            let (snapshot, name) = (id.clone(), c.hash.clone());
                            cache
                                .blocking()
                                .run(move || chunk::open_cached(&snapshot, &name, c.size, &stored))
                                .await
                                .map_err(std::io::Error::other)?
                                .map_err(|e| {
                                    tracing::warn!(snapshot = %id, chunk = %c.hash, error = %e,
                                    "a cached chunk is damaged; fetching it from the store again");
                                    cache.forget(&c.hash);
                                })
                                .ok()
                        }
                        None => None,
                    };
                    let raw = match cached {
                        Some(raw) => raw,
                        // Gone from the node's disk, or damaged there.
                        None => fetch(&objects, &cache, &id, c)
                            .await
                            .map_err(std::io::Error::other)?,
                    };
                    Ok(Bytes::from(raw))
                }
            })
            .buffered(SEAL_AHEAD)
    }
}
