//! `POST /v1/tickets`: short-lived, single-use credentials for WebSockets and streams opened
//! by browsers, which cannot set an `Authorization` header.

use crate::ApiError;
use serde::{Deserialize, Serialize};

/// Longest life of a ticket, and the default.
pub const MAX_TTL_S: u64 = 300;

/// What a ticket may open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TicketScope {
    Terminal,
    Watch,
    Logs,
}

impl TicketScope {
    pub fn as_str(self) -> &'static str {
        match self {
            TicketScope::Terminal => "terminal",
            TicketScope::Watch => "watch",
            TicketScope::Logs => "logs",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "terminal" => Some(TicketScope::Terminal),
            "watch" => Some(TicketScope::Watch),
            "logs" => Some(TicketScope::Logs),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TicketRequest {
    pub sandbox: String,
    pub scope: TicketScope,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_s: Option<u64>,
}

impl TicketRequest {
    pub fn validate(&self) -> Result<u64, ApiError> {
        crate::ids::validate_sandbox_id(&self.sandbox)?;
        match self.ttl_s {
            None => Ok(MAX_TTL_S),
            Some(t) if (1..=MAX_TTL_S).contains(&t) => Ok(t),
            Some(t) => Err(ApiError::invalid(format!(
                "ttl_s must be between 1 and {MAX_TTL_S}, not {t}"
            ))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Ticket {
    pub ticket: String,
    pub expires_at: String,
}
