//! Server-Sent Events framing and output chunks (`data` as UTF-8, `data_base64` otherwise).

use base64::Engine;
use serde::{Deserialize, Serialize};

/// The comment sent on quiet streams.
pub const KEEPALIVE: &str = ": keepalive\n\n";
/// Quiet streams send [`KEEPALIVE`] at least this often.
pub const KEEPALIVE_SECS: u64 = 15;
/// Content type of event streams.
pub const CONTENT_TYPE: &str = "text/event-stream";

/// Frames one event: `data: <json>` and a blank line.
pub fn frame<T: Serialize>(event: &T) -> String {
    let json = serde_json::to_string(event).expect("events always serialize");
    format!("data: {json}\n\n")
}

/// A chunk of output: text when it is valid UTF-8, base64 otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OutputData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_base64: Option<String>,
}

impl OutputData {
    pub fn from_bytes(bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(s) => OutputData {
                data: Some(s.to_string()),
                data_base64: None,
            },
            Err(_) => OutputData {
                data: None,
                data_base64: Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
            },
        }
    }

    /// The raw bytes back.
    pub fn bytes(&self) -> Vec<u8> {
        if let Some(d) = &self.data {
            d.as_bytes().to_vec()
        } else if let Some(b) = &self.data_base64 {
            base64::engine::general_purpose::STANDARD
                .decode(b)
                .unwrap_or_default()
        } else {
            Vec::new()
        }
    }
}

/// Splits a byte stream into chunks that never cut a UTF-8 character in two, so that text
/// output stays `data` even when a read ends mid-character.
#[derive(Debug, Default)]
pub struct Utf8Chunker {
    pending: Vec<u8>,
}

impl Utf8Chunker {
    /// Feeds bytes; returns the bytes ready to emit (possibly empty).
    pub fn push(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(bytes);
        let keep = incomplete_utf8_suffix(&self.pending);
        let ready_len = self.pending.len() - keep;
        let rest = self.pending.split_off(ready_len);
        std::mem::replace(&mut self.pending, rest)
    }

    /// Returns whatever is left at the end of the stream.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }
}

/// Length of a trailing, possibly incomplete UTF-8 sequence (0..=3 bytes).
fn incomplete_utf8_suffix(b: &[u8]) -> usize {
    let n = b.len();
    for back in 1..=3.min(n) {
        let byte = b[n - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue; // continuation byte: look further back for the lead byte
        }
        let needed = if byte & 0b1110_0000 == 0b1100_0000 {
            2
        } else if byte & 0b1111_0000 == 0b1110_0000 {
            3
        } else if byte & 0b1111_1000 == 0b1111_0000 {
            4
        } else {
            return 0;
        };
        return if needed > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_data_lines() {
        assert_eq!(
            frame(&serde_json::json!({"type": "x"})),
            "data: {\"type\":\"x\"}\n\n"
        );
    }

    #[test]
    fn chunker_keeps_split_characters_together() {
        let text = "héllo wörld €".as_bytes();
        for split in 0..text.len() {
            let mut c = Utf8Chunker::default();
            let mut out = c.push(&text[..split]);
            assert!(std::str::from_utf8(&out).is_ok(), "split {split}");
            out.extend(c.push(&text[split..]));
            out.extend(c.finish());
            assert_eq!(out, text);
        }
    }

    #[test]
    fn binary_output_becomes_base64() {
        let d = OutputData::from_bytes(&[0xff, 0x00, 0x80]);
        assert!(d.data.is_none());
        assert_eq!(d.bytes(), vec![0xff, 0x00, 0x80]);
    }
}
