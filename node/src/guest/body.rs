//! Reading what a guest sends back, within bounds. A guest is code inside a sandbox: the
//! node never holds more of its answer than it asked for, however much the guest sends.
//! (Answers streamed to the client — exec output, files, SSE — pass through and are
//! bounded by the client's own reading, not buffered here.)

use super::client::GuestError;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// Most bytes of an error answer the node reads (its JSON `ApiError`).
pub const ERROR_LIMIT: usize = 64 * 1024;
/// Most bytes of a small JSON answer the node reads (health, quiesce, unpack counts).
pub const SMALL_LIMIT: usize = 1024 * 1024;

/// The whole body, or an error once it passes `limit` bytes.
pub async fn collect_limited(body: Incoming, limit: usize) -> Result<Bytes, GuestError> {
    http_body_util::Limited::new(body, limit)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| GuestError::Request(format!("the guest's answer: {e}")))
}

/// The error an answer that is not a success carries (its JSON, or `INTERNAL` naming the
/// status), reading at most `ERROR_LIMIT` bytes of it.
pub async fn error_of(resp: http::Response<Incoming>) -> warren_api::ApiError {
    let status = resp.status().as_u16();
    match collect_limited(resp.into_body(), ERROR_LIMIT).await {
        Ok(bytes) => warren_api::ApiError::from_response(status, &bytes),
        Err(e) => warren_api::ApiError::internal(format!("HTTP {status} from the guest: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::StreamBody;
    use hyper::body::Frame;

    /// An endless body: what a hostile guest would send.
    async fn endless_response() -> http::Response<Incoming> {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|_req| async {
                let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
                let frames = futures_util::stream::repeat_with(move || {
                    Ok::<_, std::convert::Infallible>(Frame::data(chunk.clone()))
                });
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(500)
                        .body(StreamBody::new(frames))
                        .unwrap(),
                )
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(server_io), service)
                .await;
        });
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(client_io))
                .await
                .unwrap();
        tokio::spawn(conn);
        send.send_request(
            http::Request::get("/")
                .body(http_body_util::Empty::<Bytes>::new())
                .unwrap(),
        )
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn an_endless_answer_is_cut_at_the_limit() {
        let resp = endless_response().await;
        let err = collect_limited(resp.into_body(), SMALL_LIMIT)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("length limit"), "{err}");
        let e = error_of(endless_response().await).await;
        assert_eq!(e.code, warren_api::ErrorCode::Internal);
        assert!(e.message.contains("HTTP 500"), "{e:?}");
    }
}
