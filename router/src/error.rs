//! The one place where errors become HTTP responses.

use axum::response::{IntoResponse, Response};
use warren_api::ApiError;

/// An [`ApiError`] as a response: its status, and the JSON body of `api.md`.
pub struct ApiErrorResponse(pub ApiError);

impl From<ApiError> for ApiErrorResponse {
    fn from(e: ApiError) -> Self {
        ApiErrorResponse(e)
    }
}

impl IntoResponse for ApiErrorResponse {
    fn into_response(self) -> Response {
        let status = http::StatusCode::from_u16(self.0.http_status())
            .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        // Logged once, here, where every error becomes HTTP (inside the request's span).
        if status.is_server_error() {
            tracing::error!(code = ?self.0.code, message = %self.0.message, "request failed");
        }
        let mut r = (status, self.0.to_json()).into_response();
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        // When to come back, for a client that reads headers only (429, some 503s).
        if let Some(s) = self
            .0
            .details
            .as_ref()
            .and_then(|d| d.get("retry_after_s"))
            .and_then(|v| v.as_u64())
        {
            r.headers_mut()
                .insert(http::header::RETRY_AFTER, http::HeaderValue::from(s));
        }
        r
    }
}

pub type ApiResult<T> = Result<T, ApiErrorResponse>;
