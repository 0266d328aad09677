//! The node-local chunk cache: stored (compressed) chunks as files named by their hash,
//! bounded in bytes, evicting the least recently used first. Chunks that a restore in
//! progress needs are pinned and never evicted under it.

use lru::LruCache;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::BlockingPool;

pub struct ChunkCache {
    dir: PathBuf,
    budget: u64,
    inner: Mutex<Inner>,
    /// Where the CPU-heavy work on chunks runs (writes here, hashing and compression in
    /// the store).
    blocking: BlockingPool,
    metrics: ChunkCacheMetrics,
}

/// The cache's series: how restores found their chunks, and the bytes held. Made
/// unregistered with the cache; `register` adds them to a registry.
#[derive(Clone)]
pub struct ChunkCacheMetrics {
    lookups: prometheus::IntCounterVec,
    bytes: prometheus::IntGauge,
}

impl Default for ChunkCacheMetrics {
    fn default() -> Self {
        ChunkCacheMetrics {
            lookups: prometheus::IntCounterVec::new(
                prometheus::Opts::new(
                    "warren_chunk_cache_lookups_total",
                    "Chunks a restore needed, by whether the node's cache held them (hit) or they were fetched from the object store (miss)",
                ),
                &["result"],
            )
            .expect("valid counter"),
            bytes: prometheus::IntGauge::new(
                "warren_chunk_cache_bytes",
                "Bytes of chunks in the node's cache",
            )
            .expect("valid gauge"),
        }
    }
}

impl ChunkCacheMetrics {
    pub fn register(&self, registry: &prometheus::Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.lookups.clone()))?;
        registry.register(Box::new(self.bytes.clone()))
    }

    /// Counts `hits` chunks found in the cache and `misses` fetched.
    pub fn looked_up(&self, hits: usize, misses: usize) {
        self.lookups.with_label_values(&["hit"]).inc_by(hits as u64);
        self.lookups
            .with_label_values(&["miss"])
            .inc_by(misses as u64);
    }
}

struct Inner {
    /// Chunk name → stored size.
    lru: LruCache<String, u64>,
    bytes: u64,
    pins: HashMap<String, usize>,
}

/// Keeps chunks in the cache while it lives.
pub struct Pins {
    cache: Arc<ChunkCache>,
    names: Vec<String>,
}

impl Drop for Pins {
    fn drop(&mut self) {
        let mut g = self.cache.inner.lock().expect("cache lock");
        for n in &self.names {
            if let Some(c) = g.pins.get_mut(n) {
                *c -= 1;
                if *c == 0 {
                    g.pins.remove(n);
                }
            }
        }
        self.cache.evict(&mut g);
    }
}

impl ChunkCache {
    /// Opens the cache directory, indexing what an earlier run left (oldest use first).
    pub fn open(dir: &Path, budget: u64) -> std::io::Result<Arc<Self>> {
        Self::open_on(
            dir,
            budget,
            BlockingPool::default(),
            ChunkCacheMetrics::default(),
        )
    }

    /// `open`, with the chunk work of this cache and of the stores using it on `blocking`,
    /// counted in `metrics`.
    pub fn open_on(
        dir: &Path,
        budget: u64,
        blocking: BlockingPool,
        metrics: ChunkCacheMetrics,
    ) -> std::io::Result<Arc<Self>> {
        std::fs::create_dir_all(dir)?;
        let mut found = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().to_string();
            if !super::chunk::is_name(&name) {
                // Leftover temporary files of an interrupted write.
                let _ = std::fs::remove_file(e.path());
                continue;
            }
            let meta = e.metadata()?;
            found.push((meta.modified().ok(), name, meta.len()));
        }
        found.sort();
        let mut inner = Inner {
            lru: LruCache::unbounded(),
            bytes: 0,
            pins: HashMap::new(),
        };
        for (_, name, len) in found {
            inner.bytes += len;
            inner.lru.put(name, len);
        }
        let cache = Arc::new(ChunkCache {
            dir: dir.to_path_buf(),
            budget,
            inner: Mutex::new(inner),
            blocking,
            metrics,
        });
        cache.evict(&mut cache.inner.lock().expect("cache lock"));
        Ok(cache)
    }

    /// Where CPU-heavy chunk work runs.
    pub fn blocking(&self) -> &BlockingPool {
        &self.blocking
    }

    /// The cache's series (to register with the node's).
    pub fn metrics(&self) -> &ChunkCacheMetrics {
        &self.metrics
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.inner.lock().expect("cache lock").lru.contains(name)
    }

    /// Whether the chunk is cached and its file is still there (an entry whose file went
    /// missing is forgotten).
    pub fn has(&self, name: &str) -> bool {
        if !self.contains(name) {
            return false;
        }
        if self.path(name).is_file() {
            return true;
        }
        self.forget(name);
        false
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.inner.lock().expect("cache lock").bytes
    }

    /// Pins chunks (present or about to be) against eviction.
    pub fn pin(self: &Arc<Self>, names: impl IntoIterator<Item = String>) -> Pins {
        let names: Vec<String> = names.into_iter().collect();
        let mut g = self.inner.lock().expect("cache lock");
        for n in &names {
            *g.pins.entry(n.clone()).or_default() += 1;
        }
        Pins {
            cache: self.clone(),
            names,
        }
    }

    /// A chunk's stored bytes, if cached (and marks it recently used).
    pub async fn get(&self, name: &str) -> Option<Vec<u8>> {
        self.inner.lock().expect("cache lock").lru.get(name)?;
        match tokio::fs::read(self.path(name)).await {
            Ok(b) => Some(b),
            Err(_) => {
                self.forget(name);
                None
            }
        }
    }

    /// Drops a chunk that turned out missing or damaged.
    pub fn forget(&self, name: &str) {
        let mut g = self.inner.lock().expect("cache lock");
        if let Some(len) = g.lru.pop(name) {
            g.bytes -= len;
        }
        self.metrics.bytes.set(g.bytes as i64);
        let _ = std::fs::remove_file(self.path(name));
    }

    /// Adds a chunk (written to a temporary file, then renamed: never half a chunk).
    pub async fn put(
        self: &Arc<Self>,
        name: &str,
        stored: bytes::Bytes,
    ) -> Result<(), std::io::Error> {
        if self.contains(name) {
            return Ok(());
        }
        let me = self.clone();
        let name = name.to_string();
        self.blocking
            .run(move || {
                let tmp = me
                    .dir
                    .join(format!(".{name}.{:08x}.tmp", rand::random::<u32>()));
                let mut f = std::fs::File::create(&tmp)?;
                f.write_all(&stored)?;
                drop(f);
                std::fs::rename(&tmp, me.path(&name))?;
                let mut g = me.inner.lock().expect("cache lock");
                if g.lru.put(name, stored.len() as u64).is_none() {
                    g.bytes += stored.len() as u64;
                }
                me.evict(&mut g);
                Ok(())
            })
            .await
            .map_err(std::io::Error::other)?
    }

    /// Removes least recently used, unpinned chunks until the cache fits its budget.
    fn evict(&self, g: &mut Inner) {
        let mut pinned = Vec::new();
        while g.bytes > self.budget {
            let Some((name, len)) = g.lru.pop_lru() else {
                break;
            };
            if g.pins.contains_key(&name) {
                pinned.push((name, len));
                continue;
            }
            g.bytes -= len;
            let _ = std::fs::remove_file(self.path(&name));
        }
        // Pinned chunks go back, least recently used first, keeping their order.
        for (name, len) in pinned.into_iter().rev() {
            g.lru.put(name.clone(), len);
            g.lru.demote(&name);
        }
        self.metrics.bytes.set(g.bytes as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(i: u8) -> String {
        super::super::chunk::hash(&[i])
    }

    #[tokio::test]
    async fn evicts_least_recently_used_but_never_pinned() {
        let d = tempfile::tempdir().unwrap();
        let c = ChunkCache::open(d.path(), 250).unwrap();
        c.put(&name(1), vec![1; 100].into()).await.unwrap();
        c.put(&name(2), vec![2; 100].into()).await.unwrap();
        let pins = c.pin([name(1)]);
        assert!(c.get(&name(2)).await.is_some()); // 2 is now the most recently used
        c.put(&name(3), vec![3; 100].into()).await.unwrap();
        // Over budget: 1 is the least recently used but pinned, so 2 goes.
        assert!(c.contains(&name(1)));
        assert!(!c.contains(&name(2)));
        assert!(c.contains(&name(3)));
        drop(pins);
        c.put(&name(4), vec![4; 100].into()).await.unwrap();
        assert!(!c.contains(&name(1)));
        assert!(c.bytes() <= 250);
        // Reopening finds what is on disk.
        let again = ChunkCache::open(d.path(), 1000).unwrap();
        assert_eq!(again.bytes(), c.bytes());
        assert_eq!(again.get(&name(4)).await.unwrap(), vec![4; 100]);
    }
}
