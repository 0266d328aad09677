//! The largest JSON request body (`max_json_body_mb`): one limit for the API's own JSON
//! bodies (read by axum's `Bytes` extractor under `DefaultBodyLimit`) and for sandbox
//! operations' JSON bodies (read in `proxy`), answered alike with 413 `PAYLOAD_TOO_LARGE`.
//! Streamed bodies (file uploads) are not held by it.

use crate::error::ApiErrorResponse;
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use warren_api::{ApiError, ErrorCode};

/// The answer to a body over `limit` bytes.
pub fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        ErrorCode::PayloadTooLarge,
        format!(
            "the request body is larger than {} (the node's max_json_body_mb)",
            human(limit)
        ),
    )
}

fn human(bytes: usize) -> String {
    const MIB: usize = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// What a failed read of a JSON body answers: 413 when it was over the limit, 400 when the
/// body could not be read otherwise.
pub fn read_error(e: &(dyn std::error::Error + 'static), limit: usize) -> ApiError {
    if e.is::<http_body_util::LengthLimitError>() {
        too_large(limit)
    } else {
        ApiError::invalid(format!("cannot read the request body: {e}"))
    }
}

/// Pure: whether a response is axum's own plain-text refusal of a body over the limit
/// (ours are JSON).
pub fn is_extractor_refusal(status: http::StatusCode, content_type: Option<&str>) -> bool {
    status == http::StatusCode::PAYLOAD_TOO_LARGE
        && !content_type.is_some_and(|c| c.starts_with("application/json"))
}

/// Middleware: axum's refusal of a body over the limit, in the API's error format.
pub async fn in_api_format(State(state): State<AppState>, resp: Response) -> Response {
    let content_type = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if is_extractor_refusal(resp.status(), content_type) {
        return ApiErrorResponse(too_large(state.max_json_body)).into_response();
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_413_is_rewritten() {
        let s = http::StatusCode::PAYLOAD_TOO_LARGE;
        assert!(is_extractor_refusal(s, Some("text/plain; charset=utf-8")));
        assert!(is_extractor_refusal(s, None));
        assert!(!is_extractor_refusal(s, Some("application/json")));
        assert!(!is_extractor_refusal(
            http::StatusCode::BAD_REQUEST,
            Some("text/plain")
        ));
    }

    #[test]
    fn the_refusal_names_the_limit_and_the_setting() {
        let e = too_large(32 * 1024 * 1024);
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
        assert_eq!(e.http_status(), 413);
        assert!(e.message.contains("32 MiB") && e.message.contains("max_json_body_mb"));
        use http_body_util::BodyExt;
        let body = http_body_util::Full::new(bytes::Bytes::from(vec![0u8; 11]));
        let over = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(http_body_util::Limited::new(body, 10).collect())
            .unwrap_err();
        assert_eq!(read_error(&*over, 10).code, ErrorCode::PayloadTooLarge);
        let other = std::io::Error::other("reset");
        assert_eq!(read_error(&other, 10).code, ErrorCode::InvalidArgument);
    }
}
