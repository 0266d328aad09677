//! `POST /internal/v1/join`: admits a new node (authenticated by a join-token proof, not the
//! API key): the cluster's token when this node has it, or any issued token.

use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use bytes::Bytes;
use warren_api::{ApiError, ErrorCode};
use warren_consensus::certs::SignRefusal;
use warren_consensus::join::{admit, JoinError, JoinRequest, JoinResponse};

pub async fn join(State(st): State<AppState>, body: Bytes) -> ApiResult<Json<JoinResponse>> {
    let req: JoinRequest = warren_api::error::parse_json(&body)?;
    warren_api::ids::validate_sandbox_id(&req.name)
        .map_err(|_| ApiError::invalid("node names are DNS labels"))?;
    match admit(
        &st.cluster.cluster,
        &st.cluster.join_token,
        &st.cluster.secrets_key,
        &req,
    )
    .await
    {
        Ok(r) => {
            tracing::info!(node = %req.name, id = r.node_id, "node admitted");
            Ok(Json(r))
        }
        Err(e @ JoinError::BadProof) => {
            tracing::warn!(node = %req.name, "join refused: bad proof");
            Err(ApiError::new(ErrorCode::Forbidden, e.to_string()).into())
        }
        Err(e @ JoinError::NoClusterToken) => {
            Err(ApiError::new(ErrorCode::Forbidden, e.to_string()).into())
        }
        Err(JoinError::TokenRefused(m)) => {
            tracing::warn!(node = %req.name, reason = %m, "join refused");
            Err(ApiError::new(ErrorCode::Forbidden, m).into())
        }
        Err(e @ JoinError::BadCsr(_)) => Err(ApiError::invalid(e.to_string()).into()),
        Err(JoinError::NameTaken(m)) => {
            tracing::warn!(node = %req.name, "join refused: the name is a member's");
            Err(ApiError::new(ErrorCode::AlreadyExists, m).into())
        }
        Err(JoinError::Sign(e)) if e.retryable() => {
            tracing::warn!(node = %req.name, error = %e, "join: no certificate yet");
            Err(ApiError::new(ErrorCode::Unavailable, e.to_string()).into())
        }
        Err(e @ JoinError::Sign(SignRefusal::NoCaHolder)) => {
            tracing::warn!(node = %req.name, "join refused: no member holds the CA key");
            Err(ApiError::new(ErrorCode::Conflict, e.to_string()).into())
        }
        Err(e @ JoinError::Sign(_)) => Err(ApiError::invalid(e.to_string()).into()),
        Err(JoinError::Cluster(e)) => Err(ApiError::from(e).into()),
    }
}
