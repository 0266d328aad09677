//! Terminals: the WebSocket's query and JSON control messages (api.md "Terminals"), and the
//! framing that carries a terminal between the node and the guest agent.
//!
//! The node speaks WebSocket to clients and a plain framed stream to the guest over an
//! upgraded HTTP/1.1 connection: each frame is a kind byte, a big-endian `u32` length and the
//! payload. Binary WebSocket frames map to [`FrameKind::Data`], text frames to
//! [`FrameKind::Control`], both ways, so the node only translates and never interprets.

use crate::ApiError;
use serde::{Deserialize, Serialize};

/// The `Upgrade` protocol name of the guest's terminal endpoint.
pub const GUEST_UPGRADE: &str = "warren-terminal";
/// Output kept per terminal for replay (api.md promises at least 256 KiB).
pub const REPLAY_BYTES: usize = 1024 * 1024;
/// Largest frame either side accepts.
pub const MAX_FRAME: usize = 1024 * 1024;
/// Largest terminal size accepted, in either dimension.
pub const MAX_DIMENSION: u16 = 1000;

/// `GET /v1/sandboxes/{id}/terminals/{name}?cols=&rows=&shell=&since=`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TerminalQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cols: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
}

impl TerminalQuery {
    pub fn validate(&self) -> Result<(), ApiError> {
        for (name, v) in [("cols", self.cols), ("rows", self.rows)] {
            if let Some(v) = v {
                check_dimension(name, v)?;
            }
        }
        if let Some(shell) = &self.shell {
            let ok = !shell.is_empty()
                && shell.len() <= 256
                && shell
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-'));
            if !ok {
                return Err(ApiError::invalid(format!(
                    "invalid shell {shell:?}: give a program name or an absolute path"
                )));
            }
        }
        Ok(())
    }
}

fn check_dimension(name: &str, v: u16) -> Result<(), ApiError> {
    if v == 0 || v > MAX_DIMENSION {
        return Err(ApiError::invalid(format!(
            "{name} must be between 1 and {MAX_DIMENSION}, not {v}"
        )));
    }
    Ok(())
}

/// A text frame from the client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientControl {
    Resize { cols: u16, rows: u16 },
}

impl ClientControl {
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let c: ClientControl = serde_json::from_str(text).map_err(|e| {
            ApiError::invalid(format!(
                "invalid control message (expected {{\"type\": \"resize\", \"cols\": N, \"rows\": M}}): {e}"
            ))
        })?;
        match &c {
            ClientControl::Resize { cols, rows } => {
                check_dimension("cols", *cols)?;
                check_dimension("rows", *rows)?;
            }
        }
        Ok(c)
    }
}

/// A text frame from the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerControl {
    /// Replay is done; live output follows. `cursor` counts every byte the terminal has
    /// produced: pass it as `since` when reconnecting to get only what was missed.
    Ready {
        cursor: u64,
    },
    Exit {
        code: i32,
    },
    Error {
        message: String,
    },
}

impl ServerControl {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("control messages serialize")
    }
}

/// What a frame between node and guest carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// Keystrokes (to the guest) or terminal output (from it).
    Data = 0,
    /// A JSON control message.
    Control = 1,
}

/// Length of a frame's header.
pub const FRAME_HEADER: usize = 5;

/// The header of a frame of `kind` with `len` payload bytes.
pub fn frame_header(kind: FrameKind, len: usize) -> [u8; FRAME_HEADER] {
    let mut h = [0u8; FRAME_HEADER];
    h[0] = kind as u8;
    h[1..].copy_from_slice(&(len as u32).to_be_bytes());
    h
}

/// Parses a frame header: its kind and payload length.
pub fn parse_frame_header(h: &[u8; FRAME_HEADER]) -> Result<(FrameKind, usize), String> {
    let kind = match h[0] {
        0 => FrameKind::Data,
        1 => FrameKind::Control,
        k => return Err(format!("unknown frame kind {k}")),
    };
    let len = u32::from_be_bytes([h[1], h[2], h[3], h[4]]) as usize;
    if len > MAX_FRAME {
        return Err(format!("frame of {len} bytes exceeds {MAX_FRAME}"));
    }
    Ok((kind, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_bad_ones_are_refused() {
        let h = frame_header(FrameKind::Control, 300);
        assert_eq!(parse_frame_header(&h), Ok((FrameKind::Control, 300)));
        assert!(parse_frame_header(&[7, 0, 0, 0, 1]).is_err());
        assert!(parse_frame_header(&frame_header(FrameKind::Data, MAX_FRAME + 1)).is_err());
    }

    #[test]
    fn control_messages_use_the_documented_json() {
        assert_eq!(
            ClientControl::parse(r#"{"type":"resize","cols":100,"rows":30}"#).unwrap(),
            ClientControl::Resize {
                cols: 100,
                rows: 30
            }
        );
        assert!(ClientControl::parse(r#"{"type":"resize","cols":0,"rows":30}"#).is_err());
        assert!(ClientControl::parse(r#"{"type":"paste"}"#).is_err());
        assert_eq!(
            ServerControl::Ready { cursor: 5 }.to_json(),
            r#"{"type":"ready","cursor":5}"#
        );
        assert_eq!(
            ServerControl::Exit { code: 0 }.to_json(),
            r#"{"type":"exit","code":0}"#
        );
    }

    #[test]
    fn queries_are_checked() {
        let ok = TerminalQuery {
            cols: Some(80),
            rows: Some(24),
            shell: Some("/bin/bash".into()),
            since: Some(0),
        };
        assert!(ok.validate().is_ok());
        for bad in [
            TerminalQuery {
                cols: Some(0),
                ..Default::default()
            },
            TerminalQuery {
                rows: Some(5000),
                ..Default::default()
            },
            TerminalQuery {
                shell: Some("bash; rm -rf /".into()),
                ..Default::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
