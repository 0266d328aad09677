//! `GET /watch`: inotify on a path (recursively: new directories are watched as they appear,
//! and what was created in them before their watch was added is reported), filtered by
//! globs, coalesced in short batches, streamed as SSE. Dropping the stream drops the inotify
//! instance and every watch with it.

mod coalesce;
mod filter;

use crate::http::{self, Request, Response, SseSender};
use coalesce::{coalesce, FsEvent};
use filter::Filter;
use futures_util::StreamExt;
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warren_api::watch::{FsEventKind, WatchEvent, WatchQuery};
use warren_api::{ApiError, ErrorCode};

/// Events are gathered this long after the first of a burst, then sent (well within the
/// 100 ms promised).
const BATCH: Duration = Duration::from_millis(15);
/// A batch is sent early once it holds this many events.
const MAX_BATCH: usize = 4096;
/// Most directories one watch follows.
const MAX_DIRS: usize = 50_000;

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::MODIFY
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::ATTRIB
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::EXCL_UNLINK
}

struct Tree {
    watches: Watches,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    filter: Filter,
    recursive: bool,
}

impl Tree {
    /// Watches `dir` and, when recursive, every directory below it that is not excluded.
    /// Returns what it found below `dir` (for reporting what a new directory already holds).
    fn add(&mut self, dir: &Path) -> Result<Vec<(PathBuf, bool)>, ApiError> {
        let mut found = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            if self.dirs.len() >= MAX_DIRS {
                return Err(ApiError::new(
                    ErrorCode::Conflict,
                    format!("more than {MAX_DIRS} directories to watch: narrow the path or exclude some"),
                ));
            }
            match self.watches.add(&d, mask()) {
                Ok(wd) => {
                    self.dirs.insert(wd, d.clone());
                }
                // Gone already, or not a directory any more: nothing to watch there.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => continue,
                Err(e) => {
                    return Err(ApiError::internal(format!(
                        "cannot watch {}: {e}",
                        d.display()
                    )))
                }
            }
            if !self.recursive {
                break;
            }
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                if self.filter.excluded(&path) {
                    continue;
                }
                found.push((path.clone(), is_dir));
                if is_dir {
                    stack.push(path);
                }
            }
        }
        Ok(found)
    }

    /// Stops watching `dir` and everything below it (it moved away).
    fn remove_below(&mut self, dir: &Path) {
        let gone: Vec<WatchDescriptor> = self
            .dirs
            .iter()
            .filter(|(_, p)| p.starts_with(dir))
            .map(|(wd, _)| wd.clone())
            .collect();
        for wd in gone {
            self.dirs.remove(&wd);
            let _ = self.watches.remove(wd);
        }
    }
}

fn not_found(path: &str) -> ApiError {
    ApiError::new(ErrorCode::FileNotFound, format!("{path} does not exist"))
}

pub async fn handle(req: Request) -> Result<Response, ApiError> {
    let q = WatchQuery::parse(req.uri().query())?;
    let root = PathBuf::from(&q.path);
    let filter = Filter::new(&root, &q.include, &q.exclude)?;
    let meta = tokio::fs::metadata(&root)
        .await
        .map_err(|_| not_found(&q.path))?;
    let inotify =
        Inotify::init().map_err(|e| ApiError::internal(format!("cannot start a watch: {e}")))?;
    let mut tree = Tree {
        watches: inotify.watches(),
        dirs: HashMap::new(),
        filter,
        recursive: q.recursive && meta.is_dir(),
    };
    tree.add(&root)?;
    if tree.dirs.is_empty() {
        return Err(not_found(&q.path));
    }
    let events = inotify
        .into_event_stream(vec![0u8; 64 * 1024])
        .map_err(|e| ApiError::internal(format!("cannot start a watch: {e}")))?;
    let (tx, response) = http::sse_stream();
    // Every watch is in place: changes from here on are seen.
    tx.send(&WatchEvent::Watching {
        path: q.path.clone(),
    })
    .await;
    tokio::spawn(follow(tree, root, events, tx));
    Ok(response)
}

type Events = inotify::EventStream<Vec<u8>>;

async fn follow(mut tree: Tree, root: PathBuf, mut events: Events, tx: SseSender) {
    let mut batch: Vec<FsEvent> = Vec::new();
    let mut flush_at: Option<tokio::time::Instant> = None;
    let mut end: Option<String> = None;
    while end.is_none() {
        let deadline =
            flush_at.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            next = events.next() => {
                let e = match next {
                    Some(Ok(e)) => e,
                    Some(Err(e)) => {
                        end = Some(format!("the watch failed: {e}"));
                        continue;
                    }
                    None => break,
                };
                end = on_event(&mut tree, &root, e.wd, e.mask, e.name, &mut batch);
                if flush_at.is_none() && !batch.is_empty() {
                    flush_at = Some(tokio::time::Instant::now() + BATCH);
                }
                if batch.len() >= MAX_BATCH && !send(&tx, &mut batch).await {
                    return;
                }
            }
            _ = tokio::time::sleep_until(deadline), if flush_at.is_some() => {
                flush_at = None;
                if !send(&tx, &mut batch).await {
                    return;
                }
            }
            _ = tx.closed() => return,
        }
    }
    if send(&tx, &mut batch).await {
        if let Some(message) = end {
            tx.send(&WatchEvent::Error { message }).await;
        }
    }
}

async fn send(tx: &SseSender, batch: &mut Vec<FsEvent>) -> bool {
    for e in coalesce(std::mem::take(batch)) {
        let ev = WatchEvent::Event {
            event: e.kind,
            path: e.path.to_string_lossy().into_owned(),
            is_dir: e.is_dir,
            timestamp: e.timestamp,
        };
        if !tx.send(&ev).await {
            return false;
        }
    }
    true
}

/// Turns one inotify event into reported events; returns why the watch ends, if it does.
fn on_event(
    tree: &mut Tree,
    root: &Path,
    wd: WatchDescriptor,
    mask: EventMask,
    name: Option<OsString>,
    batch: &mut Vec<FsEvent>,
) -> Option<String> {
    if mask.contains(EventMask::Q_OVERFLOW) {
        return Some("too many changes at once: the kernel dropped events; watch again".into());
    }
    if mask.contains(EventMask::IGNORED) {
        tree.dirs.remove(&wd);
        return None;
    }
    let dir = tree.dirs.get(&wd)?.clone();
    let path = match &name {
        Some(n) => dir.join(n),
        None => dir.clone(),
    };
    let is_dir = mask.contains(EventMask::ISDIR);
    let timestamp = warren_api::time::now_rfc3339();
    if path == root
        && (mask.contains(EventMask::DELETE_SELF) || mask.contains(EventMask::MOVE_SELF))
    {
        return Some(format!("{} was deleted or moved away", root.display()));
    }
    // DELETE_SELF / MOVE_SELF of a directory below carry no name: its parent reports it.
    name.as_ref()?;
    let kind = if mask.contains(EventMask::CREATE) {
        FsEventKind::Create
    } else if mask.contains(EventMask::MODIFY) {
        FsEventKind::Modify
    } else if mask.contains(EventMask::DELETE) {
        FsEventKind::Delete
    } else if mask.contains(EventMask::MOVED_FROM) {
        FsEventKind::MoveFrom
    } else if mask.contains(EventMask::MOVED_TO) {
        FsEventKind::MoveTo
    } else if mask.contains(EventMask::ATTRIB) {
        FsEventKind::Attrib
    } else {
        return None;
    };
    let mut found = Vec::new();
    if is_dir && tree.recursive && !tree.filter.excluded(&path) {
        match kind {
            FsEventKind::Create => match tree.add(&path) {
                Ok(f) => found = f,
                Err(e) => return Some(e.message),
            },
            FsEventKind::MoveTo => {
                if let Err(e) = tree.add(&path) {
                    return Some(e.message);
                }
            }
            FsEventKind::MoveFrom => tree.remove_below(&path),
            _ => {}
        }
    }
    if tree.filter.reports(&path) {
        batch.push(FsEvent {
            kind,
            path,
            is_dir,
            timestamp: timestamp.clone(),
        });
    }
    // What appeared in a new directory before its watch existed.
    for (p, d) in found {
        if tree.filter.reports(&p) {
            batch.push(FsEvent {
                kind: FsEventKind::Create,
                path: p,
                is_dir: d,
                timestamp: timestamp.clone(),
            });
        }
    }
    None
}
