//! The node header, request metrics, and who calls (`auth`). Request ids, the request span
//! and the access log are `request_log` (tower-http), around these.

use crate::auth::principal::{Principal, HEADER_PRINCIPAL};
use crate::auth::{self, keys};
use crate::error::ApiErrorResponse;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::HeaderValue;
use std::time::Instant;
use warren_api::{ApiError, ErrorCode, HEADER_NODE};

/// Adds `x-warren-node` to every response, and records the request's latency by route.
pub async fn node_and_metrics(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let role = if req.extensions().get::<crate::cluster::FromPeer>().is_some() {
        "owner"
    } else {
        "entry"
    };
    let mut resp = next.run(req).await;
    // A forwarded response already names the node that ran the operation.
    if !resp.headers().contains_key(HEADER_NODE) {
        if let Ok(node) = HeaderValue::from_str(&state.node_id) {
            resp.headers_mut().insert(HEADER_NODE, node);
        }
    }
    state
        .metrics
        .requests
        .with_label_values(&[
            method.as_str(),
            &crate::route_label::route_of(&path),
            resp.status().as_str(),
            role,
        ])
        .observe(started.elapsed().as_secs_f64());
    resp
}

/// Who calls, on every `/v1` call: the principal of its `Authorization: Bearer <key>` (or
/// of its ticket), put in the request's extensions and in the header that carries it to the
/// owner. A peer's forwarded request brings the entry node's principal; an in-process call
/// (a fork's creates) brings its own; a client's header of that name is dropped.
pub async fn require_api_key(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let from_peer = req.extensions().get::<crate::cluster::FromPeer>().is_some();
    // A ticket is redeemed again at the sandbox's owner, whatever the entry node said: every
    // use of it reaches the owner, so a second use through another node is refused there.
    let by_ticket = !req.headers().contains_key(http::header::AUTHORIZATION)
        && ticket_of(req.uri().query()).is_some();
    let carried = req.extensions().get::<Principal>().cloned().or_else(|| {
        (from_peer && !by_ticket)
            .then(|| req.headers().get(HEADER_PRINCIPAL))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .and_then(Principal::from_header)
    });
    let principal = match carried {
        Some(p) => p,
        None => {
            // An address that keeps presenting wrong keys is held off for a while: keys are
            // not guessed online, and unknown keys (each waits for a read barrier) do not
            // become a way to load the cluster.
            let client = auth::client_ip(req.extensions());
            if let Some(ip) = client {
                if let Err(e) = state.key_guesses.check(ip) {
                    return ApiErrorResponse(e).into_response();
                }
            }
            match authenticate(&state, credential_of(&req)).await {
                Ok(p) => p,
                Err(e) => {
                    if let Some(ip) = client {
                        state.key_guesses.refused(ip);
                    }
                    return ApiErrorResponse(e).into_response();
                }
            }
        }
    };
    // Counted where the request entered (a forwarded or in-process one was counted there).
    if !from_peer && req.extensions().get::<Principal>().is_none() {
        let bucket = if principal.key_id == crate::tickets::TICKET_KEY_ID {
            format!("ticket/{}", principal.tenant)
        } else {
            principal.key_id.clone()
        };
        if let Err(e) = state.rate.check(&bucket) {
            return ApiErrorResponse(e).into_response();
        }
    }
    state.last_used.mark(&principal.key_id);
    let header = HeaderValue::from_str(&principal.to_header()).expect("tenant names are ascii");
    req.headers_mut().insert(HEADER_PRINCIPAL, header);
    req.extensions_mut().insert(principal);
    next.run(req).await
}

/// What a client presented: a bearer key, a ticket for a GET of some path, or nothing.
enum Credential {
    Bearer(String),
    Ticket {
        ticket: String,
        get_path: Option<String>,
    },
    None,
}

fn credential_of(req: &Request) -> Credential {
    match (auth::bearer_of(req.headers()), ticket_of(req.uri().query())) {
        (Some(p), _) => Credential::Bearer(p.to_string()),
        (None, Some(ticket)) => Credential::Ticket {
            ticket,
            get_path: (req.method() == http::Method::GET).then(|| req.uri().path().to_string()),
        },
        (None, None) => Credential::None,
    }
}

/// The principal of a client's bearer key or ticket.
async fn authenticate(state: &AppState, cred: Credential) -> Result<Principal, ApiError> {
    let presented = match cred {
        Credential::Bearer(p) => p,
        Credential::None => {
            return Err(ApiError::new(
                ErrorCode::Unauthorized,
                "missing bearer token",
            ))
        }
        Credential::Ticket { ticket, get_path } => {
            return match get_path.as_deref().and_then(crate::tickets::scope_of) {
                Some((sandbox, scope)) => state.tickets.redeem(&ticket, sandbox, scope),
                None => Err(ApiError::new(
                    ErrorCode::Unauthorized,
                    "tickets open only terminals, watches and process logs; send the API key",
                )),
            };
        }
    };
    let presented = presented.as_str();
    let found = match auth::key_principal(state, presented) {
        Some(p) => Some(p),
        // A key made a moment ago through another node may not be applied here yet: once
        // this node has caught up with the cluster, it knows every key created before.
        None if keys::is_key_form(presented) => {
            if state
                .cluster
                .cluster
                .read_barrier(KEY_CATCH_UP)
                .await
                .is_ok()
            {
                auth::key_principal(state, presented)
            } else {
                None
            }
        }
        None => None,
    };
    found.ok_or_else(|| ApiError::new(ErrorCode::Unauthorized, "invalid API key"))
}

/// How long an unknown key waits for this node to catch up before it is refused.
const KEY_CATCH_UP: std::time::Duration = std::time::Duration::from_secs(2);

fn ticket_of(query: Option<&str>) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == "ticket")
        .map(|(_, v)| v.into_owned())
}
