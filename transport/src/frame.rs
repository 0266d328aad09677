//! Length-prefixed JSON messages on a stream.

use crate::TransportError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest message accepted (Raft snapshots travel in chunks below this).
pub const MAX_FRAME: usize = 64 * 1024 * 1024;

pub async fn write<T: Serialize>(
    w: &mut (impl AsyncWrite + Unpin),
    msg: &T,
) -> Result<(), TransportError> {
    let bytes = serde_json::to_vec(msg).map_err(|e| TransportError::Frame(e.to_string()))?;
    if bytes.len() > MAX_FRAME {
        return Err(TransportError::Frame(format!(
            "message of {} bytes is too large",
            bytes.len()
        )));
    }
    w.write_all(&(bytes.len() as u32).to_be_bytes()).await?;
    w.write_all(&bytes).await?;
    Ok(())
}

pub async fn read<T: DeserializeOwned>(
    r: &mut (impl AsyncRead + Unpin),
) -> Result<T, TransportError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(TransportError::Frame(format!(
            "message of {len} bytes is too large"
        )));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).await?;
    serde_json::from_slice(&buf).map_err(|e| TransportError::Frame(e.to_string()))
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn round_trip() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        super::write(&mut a, &serde_json::json!({"x": 1}))
            .await
            .unwrap();
        let v: serde_json::Value = super::read(&mut b).await.unwrap();
        assert_eq!(v["x"], 1);
    }
}
