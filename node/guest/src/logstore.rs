//! Process logs: stdout and stderr frames appended to one file, addressed by byte cursors.
//!
//! A frame is a 7-byte header (magic, stream, length, check byte) and the payload. A cursor
//! is the file offset of a frame boundary, so replay from any cursor and then following new
//! frames loses and repeats nothing. Memory holds only the length; the bytes live on disk.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;

pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
const MAGIC: u8 = 0xA7;
const HEADER: usize = 7;
/// A process's log stops growing at this size (later output is counted, not kept).
pub const MAX_LOG_BYTES: u64 = 256 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogState {
    pub len: u64,
    /// The process has exited and its output has been collected.
    pub ended: bool,
    pub dropped_bytes: u64,
}

pub struct LogStore {
    path: PathBuf,
    state: watch::Sender<LogState>,
}

pub struct LogWriter {
    file: File,
    store: Arc<LogStore>,
}

#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    pub stream: u8,
    pub data: Vec<u8>,
    /// Cursor just after this frame.
    pub cursor: u64,
}

#[derive(Debug)]
pub enum ReadError {
    BadCursor(u64),
    Io(io::Error),
}

impl From<ReadError> for warren_api::ApiError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::BadCursor(c) => {
                warren_api::ApiError::invalid(format!("invalid log cursor {c}"))
            }
            ReadError::Io(e) => warren_api::ApiError::internal(format!("cannot read the log: {e}")),
        }
    }
}

fn check(stream: u8, len: u32) -> u8 {
    let b = len.to_le_bytes();
    MAGIC ^ stream ^ b[0] ^ b[1] ^ b[2] ^ b[3]
}

impl LogStore {
    pub fn create(path: &Path) -> io::Result<(Arc<LogStore>, LogWriter)> {
        let file = File::options()
            .create(true)
            .truncate(true)
            .write(true)
            .open(path)?;
        let (state, _) = watch::channel(LogState::default());
        let store = Arc::new(LogStore {
            path: path.to_path_buf(),
            state,
        });
        Ok((store.clone(), LogWriter { file, store }))
    }

    pub fn state(&self) -> LogState {
        *self.state.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<LogState> {
        self.state.subscribe()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads whole frames from `from` up to the current end, stopping once `max_payload`
    /// bytes are collected (at least one frame is returned when any is available).
    pub fn read(&self, from: u64, max_payload: usize) -> Result<Vec<Frame>, ReadError> {
        let end = self.state().len;
        if from > end {
            return Err(ReadError::BadCursor(from));
        }
        let mut frames = Vec::new();
        if from == end {
            return Ok(frames);
        }
        let mut f = File::open(&self.path).map_err(ReadError::Io)?;
        f.seek(SeekFrom::Start(from)).map_err(ReadError::Io)?;
        let mut pos = from;
        let mut total = 0usize;
        while pos < end && (frames.is_empty() || total < max_payload) {
            let mut h = [0u8; HEADER];
            f.read_exact(&mut h)
                .map_err(|_| ReadError::BadCursor(from))?;
            let len = u32::from_le_bytes([h[2], h[3], h[4], h[5]]);
            if h[0] != MAGIC || !(h[1] == STDOUT || h[1] == STDERR) || h[6] != check(h[1], len) {
                return Err(ReadError::BadCursor(from));
            }
            let mut data = vec![0u8; len as usize];
            f.read_exact(&mut data).map_err(ReadError::Io)?;
            pos += HEADER as u64 + len as u64;
            total += len as usize;
            frames.push(Frame {
                stream: h[1],
                data,
                cursor: pos,
            });
        }
        Ok(frames)
    }
}

impl LogWriter {
    /// Appends one frame (or counts it as dropped once the log is full).
    pub fn append(&mut self, stream: u8, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let st = self.store.state();
        if st.len + (HEADER + data.len()) as u64 > MAX_LOG_BYTES {
            self.store
                .state
                .send_modify(|s| s.dropped_bytes += data.len() as u64);
            return;
        }
        let len = data.len() as u32;
        let b = len.to_le_bytes();
        let header = [MAGIC, stream, b[0], b[1], b[2], b[3], check(stream, len)];
        let ok = self
            .file
            .write_all(&header)
            .and_then(|_| self.file.write_all(data));
        match ok {
            Ok(()) => self
                .store
                .state
                .send_modify(|s| s.len += (HEADER + data.len()) as u64),
            Err(_) => {
                // Keep the file consistent: cut back to the last whole frame.
                let _ = self.file.set_len(st.len);
                let _ = self.file.seek(SeekFrom::Start(st.len));
                self.store
                    .state
                    .send_modify(|s| s.dropped_bytes += data.len() as u64);
            }
        }
    }

    /// Marks the log complete: the process exited and its output is collected.
    pub fn finish(&self) {
        self.store.state.send_modify(|s| s.ended = true);
    }

    pub fn store(&self) -> &Arc<LogStore> {
        &self.store
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_from_any_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let (store, mut w) = LogStore::create(&dir.path().join("p.log")).unwrap();
        w.append(STDOUT, b"hello\n");
        w.append(STDERR, b"oops\n");
        w.append(STDOUT, b"bye\n");
        let all = store.read(0, usize::MAX).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[1].stream, STDERR);
        assert_eq!(all[1].data, b"oops\n");
        let rest = store.read(all[0].cursor, usize::MAX).unwrap();
        assert_eq!(rest, all[1..]);
        assert!(store.read(all[2].cursor, 10).unwrap().is_empty());
        assert!(matches!(store.read(3, 10), Err(ReadError::BadCursor(3))));
        assert!(matches!(
            store.read(10_000, 10),
            Err(ReadError::BadCursor(_))
        ));
        // A small budget still returns one frame, then stops.
        assert_eq!(store.read(0, 1).unwrap().len(), 1);
    }
}
