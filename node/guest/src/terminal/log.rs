//! A terminal's recent output, addressed by cursor: the count of bytes the terminal has
//! produced since it started. Keeps the last [`REPLAY_BYTES`](warren_api::terminal::REPLAY_BYTES).

use std::collections::VecDeque;

pub struct OutputLog {
    data: VecDeque<u8>,
    capacity: usize,
    /// Cursor of the first byte still held.
    start: u64,
}

impl OutputLog {
    pub fn new(capacity: usize) -> Self {
        OutputLog {
            data: VecDeque::with_capacity(capacity.min(64 * 1024)),
            capacity,
            start: 0,
        }
    }

    /// Cursor just past the last byte produced.
    pub fn end(&self) -> u64 {
        self.start + self.data.len() as u64
    }

    pub fn push(&mut self, bytes: &[u8]) {
        if bytes.len() >= self.capacity {
            let drop_all = self.data.len() as u64;
            self.data.clear();
            let skip = bytes.len() - self.capacity;
            self.start += drop_all + skip as u64;
            self.data.extend(&bytes[skip..]);
            return;
        }
        let overflow = (self.data.len() + bytes.len()).saturating_sub(self.capacity);
        self.data.drain(..overflow);
        self.start += overflow as u64;
        self.data.extend(bytes);
    }

    /// The bytes from `cursor` to the end, and the cursor they really start at (later than
    /// `cursor` when it has been dropped; the end when `cursor` lies beyond it).
    pub fn since(&self, cursor: u64) -> (u64, Vec<u8>) {
        let from = cursor.clamp(self.start, self.end());
        let offset = (from - self.start) as usize;
        let (a, b) = self.data.as_slices();
        let mut out = Vec::with_capacity(self.data.len() - offset);
        if offset < a.len() {
            out.extend_from_slice(&a[offset..]);
            out.extend_from_slice(b);
        } else {
            out.extend_from_slice(&b[offset - a.len()..]);
        }
        (from, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_bytes_and_counts_every_byte() {
        let mut log = OutputLog::new(8);
        log.push(b"hello ");
        assert_eq!(log.since(0), (0, b"hello ".to_vec()));
        log.push(b"world");
        assert_eq!(log.end(), 11);
        assert_eq!(log.since(0), (3, b"lo world".to_vec()));
        assert_eq!(log.since(6), (6, b"world".to_vec()));
        assert_eq!(log.since(99), (11, Vec::new()));
        log.push(b"0123456789abc");
        assert_eq!(log.end(), 24);
        assert_eq!(log.since(0), (16, b"56789abc".to_vec()));
    }

    #[test]
    fn a_push_larger_than_the_capacity_keeps_its_tail() {
        let mut log = OutputLog::new(4);
        log.push(b"ab");
        log.push(b"0123456");
        assert_eq!(log.end(), 9);
        assert_eq!(log.since(0), (5, b"3456".to_vec()));
    }
}
