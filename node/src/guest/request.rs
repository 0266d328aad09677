//! The request a node sends a guest on behalf of an API call.

use super::client::GuestBody;
use warren_api::ApiError;

/// Client headers that describe the call itself and pass to the guest. The framing headers
/// (`content-length`, `transfer-encoding`) never pass: the node may have replaced the
/// client's body (an operation that takes none gets an empty one), and a length the body
/// does not have shifts the pooled connection, so the guest would read the start of the
/// next call as the rest of this body. The HTTP client frames each body by itself.
const PASSED_HEADERS: [http::HeaderName; 2] = [http::header::CONTENT_TYPE, http::header::ACCEPT];

/// `method path_and_query` with `body`, carrying the client's descriptive headers.
pub fn guest_request(
    method: &http::Method,
    path_and_query: &str,
    client_headers: &http::HeaderMap,
    body: GuestBody,
) -> Result<http::Request<GuestBody>, ApiError> {
    let mut b = http::Request::builder()
        .method(method.clone())
        .uri(path_and_query);
    for name in PASSED_HEADERS {
        if let Some(v) = client_headers.get(&name) {
            b = b.header(name, v);
        }
    }
    b.body(body)
        .map_err(|e| ApiError::invalid(format!("bad request: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::client::{empty, full};
    use http::header::{CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
    use http_body::Body as _;

    fn client_headers(pairs: &[(http::HeaderName, &str)]) -> http::HeaderMap {
        pairs
            .iter()
            .map(|(n, v)| (n.clone(), http::HeaderValue::from_str(v).unwrap()))
            .collect()
    }

    #[test]
    fn a_dropped_body_takes_its_length_with_it() {
        let headers = client_headers(&[(CONTENT_TYPE, "application/json"), (CONTENT_LENGTH, "2")]);
        let req = guest_request(&http::Method::GET, "/files/a", &headers, empty()).unwrap();
        assert_eq!(req.headers().get(CONTENT_LENGTH), None);
        assert_eq!(req.headers()[CONTENT_TYPE], "application/json");
        assert_eq!(req.body().size_hint().exact(), Some(0));
    }

    #[test]
    fn framing_is_the_bodys_own_whatever_the_client_claimed() {
        let headers = client_headers(&[(CONTENT_LENGTH, "999"), (TRANSFER_ENCODING, "chunked")]);
        let req = guest_request(&http::Method::POST, "/exec", &headers, full("{}")).unwrap();
        assert_eq!(req.headers().get(CONTENT_LENGTH), None);
        assert_eq!(req.headers().get(TRANSFER_ENCODING), None);
        assert_eq!(req.body().size_hint().exact(), Some(2));
    }
}
