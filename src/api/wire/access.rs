//! The JSON of scoped tokens (`/v1/tokens`) and of the audit log (`/v1/audit`). Field names
//! are a public interface (README "Tokens and audit").

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// `POST /v1/tokens`: the token to create. `role` is `admin`, `team` (with `team`) or `agent`
/// (with `job`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRequest {
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

/// A token as the API shows it; `token` (the secret) only in the answer that created it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenView {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    pub created_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
}

/// `GET /v1/audit` query parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
}

/// One audited call (`GET /v1/audit`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditView {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// A created token's id, `admin` (the controller's `--token`), `agent:<job>` (a derived
    /// agent token) or `unknown` (refused with 401).
    pub token: String,
    /// `admin`, `team`, `agent`, or `none` when the token was not accepted.
    pub role: String,
    pub method: String,
    pub path: String,
    pub job: Option<String>,
    pub team: Option<String>,
    /// The HTTP status the call was answered with (refusals: 401, 403, other 4xx).
    pub status: u16,
}
