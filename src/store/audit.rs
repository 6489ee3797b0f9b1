//! The audit log of the `/v1` API: every mutating call and every refusal of one, with who made
//! it, so an operator can answer "who cancelled this job" or "who keeps trying other teams'
//! jobs" from the store alone.

use chrono::{DateTime, Utc};

use super::sql::params;
use super::{Result, Store, ms, time};

/// Most rows one read returns, so a long log cannot make one answer unbounded.
pub const AUDIT_PAGE: i64 = 10_000;

/// One audited call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// Assigned by the store; ignored on insert.
    pub id: i64,
    pub at: DateTime<Utc>,
    /// Who: a created token's id, `admin` for the controller's `--token`, `agent:<job>` for a
    /// derived agent token, `unknown` for a token the server did not accept.
    pub token: String,
    /// `admin`, `team`, `agent`, or `none` for an unknown token.
    pub role: String,
    pub method: String,
    pub path: String,
    pub job: Option<String>,
    pub team: Option<String>,
    /// The HTTP status the call was answered with.
    pub status: u16,
}

/// Which rows to read: since a time, of one team.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    pub since: Option<DateTime<Utc>>,
    pub team: Option<String>,
}

impl Store {
    /// Record one call.
    pub fn add_audit(&self, e: &AuditEntry) -> Result<()> {
        self.exec(
            "INSERT INTO audit (at, token, role, method, path, job, team, status)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                ms(e.at),
                e.token.as_str(),
                e.role.as_str(),
                e.method.as_str(),
                e.path.as_str(),
                e.job.as_deref(),
                e.team.as_deref(),
                i64::from(e.status)
            ],
        )?;
        Ok(())
    }

    /// Audited calls at or after `since`, of `team` when given, oldest first (at most
    /// [`AUDIT_PAGE`]).
    pub fn audit(&self, q: &AuditQuery) -> Result<Vec<AuditEntry>> {
        let since = q.since.map_or(i64::MIN, ms);
        self.query(
            "SELECT id, at, token, role, method, path, job, team, status FROM audit
             WHERE at >= ?1 AND (CAST(?2 AS TEXT) IS NULL OR team = ?2)
             ORDER BY id LIMIT ?3",
            params![since, q.team.as_deref(), AUDIT_PAGE],
        )?
        .iter()
        .map(|r| {
            Ok(AuditEntry {
                id: r.int(0)?,
                at: time(r.int(1)?),
                token: r.text(2)?,
                role: r.text(3)?,
                method: r.text(4)?,
                path: r.text(5)?,
                job: r.opt_text(6)?,
                team: r.opt_text(7)?,
                status: u16::try_from(r.int(8)?).unwrap_or(0),
            })
        })
        .collect()
    }
}
