//! Errors of the node's operations, and how each becomes an API error.

use warren_api::{ApiError, ErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("container runtime: {0}")]
    Runtime(#[from] crate::runtime::RuntimeError),
    #[error("guest agent of sandbox {sandbox}: {message}")]
    Guest { sandbox: String, message: String },
    #[error("sandbox {0} not found")]
    NotFound(String),
    #[error("this node runs its maximum of {0} sandboxes")]
    Capacity(usize),
    #[error("storage: {0}")]
    Storage(String),
}

impl From<NodeError> for ApiError {
    fn from(e: NodeError) -> Self {
        match e {
            NodeError::Api(a) => a,
            NodeError::Runtime(r) => r.into(),
            NodeError::Guest { .. } => ApiError::new(ErrorCode::Unavailable, e.to_string()),
            NodeError::NotFound(id) => ApiError::new(
                ErrorCode::SandboxNotFound,
                format!("sandbox {id} not found"),
            ),
            NodeError::Capacity(_) => ApiError::new(ErrorCode::CapacityExhausted, e.to_string()),
            NodeError::Storage(_) => ApiError::internal(e.to_string()),
        }
    }
}
