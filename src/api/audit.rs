//! The `/v1` guard: it identifies the caller, checks the route's need ([`super::access`]),
//! and writes the audit row of every mutating call and of every refusal (401, 403) before the
//! answer leaves, so the log holds each call its caller saw answered. Being one layer over all
//! of `/v1`, it covers routes added later without their handlers doing anything.
//!
//! Progress reports come every few seconds from every worker: only refused ones are recorded.

use axum::extract::{OriginalUri, Query, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::access::{self, Principal, forbidden};
use super::wire::access::{AuditQuery, AuditView};
use super::{ApiState, error, internal};
use crate::store::{AuditEntry, Store};

/// What a handler knows of a call that the path does not say (a submit's job and team): it
/// puts this in its answer's extensions for the audit row.
#[derive(Debug, Clone, Default)]
pub struct AuditNote {
    pub job: Option<String>,
    pub team: Option<String>,
}

/// The team of `job`: as the last pass published it, else as the store holds it.
async fn team_of(state: &ApiState, job: &str) -> Option<String> {
    if let Some(v) = state.shared.view().jobs.get(job) {
        return Some(v.status.team.clone());
    }
    let (store, job) = (state.store.clone(), job.to_string());
    let found = tokio::task::spawn_blocking(move || store.job(&job)).await;
    match found {
        Ok(Ok(Some(record))) => Some(record.spec.team.clone()),
        _ => None,
    }
}

fn is_mutating(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether a call is written to the audit log.
fn audited(method: &Method, path: &str, status: StatusCode) -> bool {
    let refused = matches!(status.as_u16(), 401 | 403);
    let progress = path.ends_with("/progress");
    refused || (is_mutating(method) && (!progress || !status.is_success()))
}

/// Longest path an audit row keeps: a refused caller chooses the path, not its size in the log.
const MAX_PATH: usize = 512;

/// What one call leaves in the audit log.
struct Call {
    method: Method,
    path: String,
    job: Option<String>,
    team: Option<String>,
}

/// Middleware over `/v1`: 401 for an unknown token, 403 outside the token's scope, else the
/// route with the caller in the request's extensions; then the audit row.
pub async fn guard(State(state): State<ApiState>, mut request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let full = request.extensions().get::<OriginalUri>().map_or_else(
        || request.uri().path().to_string(),
        |u| u.path().to_string(),
    );
    let inner = full.strip_prefix("/v1").unwrap_or(&full).to_string();
    let (need, job) = access::need(&method, &inner);
    let job = job.map(str::to_string);
    let who = access::identify(&state, request.headers()).await;
    // The job's team only for a caller the server knows: an unknown one costs no store read.
    let team = match (&who, &job) {
        (Some(_), Some(j)) => team_of(&state, j).await,
        _ => None,
    };
    let response = match &who {
        None => error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token (Authorization: Bearer <token>)",
        ),
        Some(p) => match access::permit(p, need, job.as_deref(), team.as_deref()) {
            Err(why) => forbidden(why),
            Ok(()) => {
                request.extensions_mut().insert(p.clone());
                next.run(request).await
            }
        },
    };
    if audited(&method, &full, response.status()) {
        let call = Call {
            method,
            path: full,
            job,
            team,
        };
        record(&state.store, entry(call, who.as_ref(), &response)).await;
    }
    response
}

/// The audit row of a call: what the handler noted (a submit's job and team) over what the
/// path said, the caller's team when neither names one.
fn entry(call: Call, who: Option<&Principal>, response: &Response) -> AuditEntry {
    let note = response
        .extensions()
        .get::<AuditNote>()
        .cloned()
        .unwrap_or_default();
    let mut path = call.path;
    if path.len() > MAX_PATH {
        let mut cut = MAX_PATH;
        while !path.is_char_boundary(cut) {
            cut -= 1;
        }
        path.truncate(cut);
        path.push('…');
    }
    AuditEntry {
        id: 0,
        at: chrono::Utc::now(),
        token: who.map_or("unknown".into(), |p| p.id.clone()),
        role: who.map_or("none", |p| p.role.as_str()).into(),
        method: call.method.to_string(),
        path,
        job: note.job.or(call.job),
        team: note
            .team
            .or(call.team)
            .or_else(|| who.and_then(|p| p.team.clone())),
        status: response.status().as_u16(),
    }
}

async fn record(store: &std::sync::Arc<Store>, entry: AuditEntry) {
    let store = store.clone();
    let written = tokio::task::spawn_blocking(move || store.add_audit(&entry)).await;
    if let Ok(Err(e)) = written {
        tracing::warn!("audit row not written: {e}");
    }
}

/// `GET /v1/audit?since=RFC3339&team=T`: the log, oldest first; a team token sees its own
/// team's rows only.
pub(super) async fn read(
    State(state): State<ApiState>,
    axum::Extension(who): axum::Extension<Principal>,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(mut q) = match query {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    if let Some(own) = who.team_scope() {
        if let Some(t) = q.team.as_deref().filter(|t| *t != own) {
            return forbidden(access::other_team(&who, t));
        }
        q.team = Some(own.to_string());
    }
    let store = state.store.clone();
    let query = crate::store::AuditQuery {
        since: q.since,
        team: q.team,
    };
    match tokio::task::spawn_blocking(move || store.audit(&query)).await {
        Ok(Ok(rows)) => axum::Json(rows.into_iter().map(view).collect::<Vec<_>>()).into_response(),
        Ok(Err(e)) => internal(e),
        Err(e) => internal(e),
    }
}

fn view(e: AuditEntry) -> AuditView {
    AuditView {
        id: e.id,
        at: e.at,
        token: e.token,
        role: e.role,
        method: e.method,
        path: e.path,
        job: e.job,
        team: e.team,
        status: e.status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_and_refusals_are_audited_accepted_progress_is_not() {
        let ok = StatusCode::OK;
        assert!(audited(&Method::POST, "/v1/jobs", StatusCode::CREATED));
        assert!(audited(&Method::DELETE, "/v1/jobs/a", ok));
        assert!(audited(&Method::PUT, "/v1/quotas", ok));
        assert!(audited(&Method::POST, "/v1/jobs/a/start", ok));
        assert!(!audited(&Method::POST, "/v1/jobs/a/progress", ok));
        assert!(audited(
            &Method::POST,
            "/v1/jobs/a/progress",
            StatusCode::CONFLICT
        ));
        assert!(!audited(&Method::GET, "/v1/jobs/a", ok));
        assert!(!audited(&Method::GET, "/v1/jobs/a", StatusCode::NOT_FOUND));
        assert!(audited(&Method::GET, "/v1/jobs/a", StatusCode::FORBIDDEN));
        assert!(audited(&Method::GET, "/v1/jobs", StatusCode::UNAUTHORIZED));
    }

    #[test]
    fn a_row_keeps_a_bounded_path_and_the_handlers_note() {
        let mut response = forbidden("no");
        response.extensions_mut().insert(AuditNote {
            job: Some("j".into()),
            team: Some("nlp".into()),
        });
        let call = Call {
            method: Method::POST,
            path: format!("/v1/{}", "é".repeat(600)),
            job: None,
            team: None,
        };
        let row = entry(call, None, &response);
        assert!(
            row.path.len() <= MAX_PATH + '…'.len_utf8(),
            "{}",
            row.path.len()
        );
        assert_eq!((row.token.as_str(), row.role.as_str()), ("unknown", "none"));
        assert_eq!(
            (row.job.as_deref(), row.team.as_deref()),
            (Some("j"), Some("nlp"))
        );
        assert_eq!(row.status, 403);
    }
}
