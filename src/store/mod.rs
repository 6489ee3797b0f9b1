//! The controller's durable state: jobs, intents, instances, observations, events, usage
//! intervals and the leader lease.
//!
//! Two backends share one set of statements ([`sql`]): SQLite (embedded, one file; the
//! default) and PostgreSQL (by URL; several controllers share it and elect a leader through
//! [`Store::acquire_lease`]). The controller keeps a working copy in memory and writes every
//! change here first, so a restarted controller rebuilds exactly what it knew
//! ([`Store::load`]). Intents are inserted *before* the cloud is called; an instance and its
//! usage interval are recorded in the same transaction that marks its launch intent done.

mod identity;
#[cfg(any(test, feature = "test-util"))]
pub mod pg_cluster;
mod pg_tls;
mod postgres;
mod progress;
pub mod sql;
mod workers;
pub use workers::{Incarnation, Worker};
mod sqlite;

use std::collections::BTreeMap;
use std::error::Error as _;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use tern_cloud::{
    Capacity, Instance, InstanceId, InstanceState, Intent, IntentId, IntentKind, IntentState,
    JobSpec, Observation, Offer,
};

use sql::{Outcome, Row, Stmt, params};

pub use identity::real_path;
pub use progress::{Checked, DONE_TOLERANCE, Progress};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("state store (PostgreSQL): {}", pg_message(.0))]
    Postgres(#[from] ::postgres::Error),
    #[error("state store: corrupt JSON in {what}: {source}")]
    Json {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("state store: {0}")]
    Invalid(String),
    #[error("state store: job {0} already exists")]
    Duplicate(String),
    /// The store is no longer the one the controller opened: acting on would act without
    /// the state that accounts for the fleet. The controller stops.
    #[error("state store replaced: {0}")]
    Replaced(String),
    #[error("state store {path}: {source}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl StoreError {
    /// A locked database, a dropped connection or a serialisation conflict may clear up;
    /// anything else will fail again.
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => matches!(
                e.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ),
            StoreError::Postgres(e) => {
                e.is_closed()
                    || e.source()
                        .is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some())
                    || e.code().is_some_and(|c| {
                        let c = c.code();
                        // 08: connection exception; 40: transaction rollback (serialisation,
                        // deadlock); 57P: operator intervention (server shutting down).
                        c.starts_with("08") || c.starts_with("40") || c.starts_with("57P")
                    })
            }
            _ => false,
        }
    }
}

/// `postgres::Error` displays only "db error"; say what the server said.
fn pg_message(e: &::postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => match e.source() {
            Some(s) => format!("{e}: {s}"),
            None => e.to_string(),
        },
    }
}

type Result<T> = std::result::Result<T, StoreError>;

/// Lifecycle of a job under the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    Pending,
    Running,
    Finished,
    /// No capacity can run it (no offer for its accelerators, or its deadline cannot be met).
    Unplaceable,
    Cancelled,
    /// Its training failed for good on a worker (the agent's restarts ran out); the reason
    /// names the exit status and the last lines of stderr.
    Failed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Finished => "finished",
            JobState::Unplaceable => "unplaceable",
            JobState::Cancelled => "cancelled",
            JobState::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "pending" => JobState::Pending,
            "running" => JobState::Running,
            "finished" => JobState::Finished,
            "unplaceable" => JobState::Unplaceable,
            "cancelled" => JobState::Cancelled,
            "failed" => JobState::Failed,
            other => return Err(StoreError::Invalid(format!("unknown job state {other}"))),
        })
    }

    /// Finished, cancelled or failed: nothing more will run for it.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Finished | JobState::Cancelled | JobState::Failed
        )
    }
}

/// A job as the controller tracks it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub spec: JobSpec,
    pub state: JobState,
    pub reason: Option<String>,
    pub submitted_at: DateTime<Utc>,
    pub deadline_at: Option<DateTime<Utc>>,
    pub total_samples: f64,
    /// Progress as last reported by the workers (agent).
    pub done_samples: f64,
    /// Progress safe in the last checkpoint: what a restart resumes from.
    pub checkpoint_samples: f64,
    pub checkpoint_at: Option<DateTime<Utc>>,
    /// Set on an interruption notice; the agent checkpoints and clears it.
    pub drain_requested: bool,
    pub target_offer: Option<String>,
    pub target_count: u32,
    /// The size the planner chose; an elastic job resized below it grows back to it.
    pub planned_count: u32,
    pub last_move_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// What the planner expected the job to cost when it first placed it.
    pub planned_cost: Option<f64>,
    /// The job's latest probe (measuring run), if it had one.
    pub probe: Option<ProbeRecord>,
}

/// A probe: the short, bounded run that measures a job nobody had measured. Its window
/// (`probing_since` or `running_at`, to `ended_at` or now while open) is billed as probe spend
/// in cost reports.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProbeRecord {
    pub accelerator: String,
    pub instance_type: String,
    /// Offer key of what it launched on.
    pub offer: String,
    pub nodes: u32,
    pub price_per_hour: f64,
    pub max_seconds: f64,
    pub max_usd: f64,
    /// When it was launched.
    pub started_at: DateTime<Utc>,
    /// When a pass first saw its capacity running: its bounds count from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_at: Option<DateTime<Utc>>,
    /// For a second probe (another accelerator, when it pays): when the first began, so
    /// the job's whole probing is one window of probe spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probing_since: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    /// What the plan did when it ended (kept the probe's shape, moved, measured nothing…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

impl ProbeRecord {
    /// Whether the probe still runs.
    pub fn is_open(&self) -> bool {
        self.ended_at.is_none()
    }

    /// Seconds its capacity ran as a probe (to `now` while open; 0 before it ran).
    pub fn seconds(&self, now: DateTime<Utc>) -> f64 {
        let Some(from) = self.running_at else {
            return 0.0;
        };
        let end = self.ended_at.unwrap_or(now);
        ((end - from).num_milliseconds() as f64 / 1e3).max(0.0)
    }
}

impl JobRecord {
    pub fn new(spec: JobSpec, submitted_at: DateTime<Utc>) -> JobRecord {
        JobRecord {
            deadline_at: spec.deadline.map(|d| d.resolve(submitted_at)),
            total_samples: spec.work.samples() as f64,
            spec,
            state: JobState::Pending,
            reason: None,
            submitted_at,
            done_samples: 0.0,
            checkpoint_samples: 0.0,
            checkpoint_at: None,
            drain_requested: false,
            target_offer: None,
            target_count: 0,
            planned_count: 0,
            last_move_at: None,
            finished_at: None,
            planned_cost: None,
            probe: None,
        }
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }
}

/// An instance the controller launched (or adopted), with its place in the job.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceRecord {
    pub id: InstanceId,
    pub job: String,
    pub intent: IntentId,
    pub offer: Offer,
    pub state: InstanceState,
    /// A notice said it will be reclaimed: it no longer counts toward the job's fleet.
    pub draining: bool,
    pub launched_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

/// Pool samples kept in the store, in policy ticks (8 days of 5-minute ticks; with other tick
/// lengths the policy's own lookback is what matters, and it is shorter).
pub const POOL_SAMPLE_TICKS: i64 = 8 * 24 * 12;

/// One spot pool's availability at one policy tick (see `controller::policy`).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSample {
    /// `instance_type@zone`.
    pub pool: String,
    pub instance_type: String,
    pub zone: String,
    pub region: String,
    pub tick: i64,
    pub available: u32,
    pub spot_price: f64,
}

/// Most instances `job` started in any 60 minutes of `usage` (what the launch budget bounds).
pub fn most_started_in_an_hour(usage: &[Usage], job: &str) -> u32 {
    let mut starts: Vec<DateTime<Utc>> = usage
        .iter()
        .filter(|u| u.job == job)
        .map(|u| u.started_at)
        .collect();
    starts.sort();
    let hour = chrono::TimeDelta::hours(1);
    (0..starts.len())
        .map(|i| {
            let n = starts[i..]
                .iter()
                .take_while(|t| **t - starts[i] < hour)
                .count();
            u32::try_from(n).unwrap_or(u32::MAX)
        })
        .max()
        .unwrap_or(0)
}

/// Offer key → recorded price changes (time, $/h), oldest first.
pub type PriceLog = BTreeMap<String, Vec<(DateTime<Utc>, f64)>>;

/// One row of the usage table.
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    pub instance: String,
    pub job: String,
    pub offer_key: String,
    pub capacity: Capacity,
    pub price_per_hour: f64,
    pub on_demand_per_hour: Option<f64>,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

impl Usage {
    /// Hours billed up to `now` (or the end of the interval).
    pub fn hours(&self, now: DateTime<Utc>) -> f64 {
        let end = self.ended_at.unwrap_or(now);
        ((end - self.started_at).num_milliseconds().max(0) as f64) / 3_600_000.0
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub job: Option<String>,
    pub kind: String,
    pub message: String,
    /// The typed event as JSON (`controller::Event`); `None` for events stored before it was.
    pub fields: Option<serde_json::Value>,
}

/// Everything a controller needs to resume: live jobs, open intents, live instances.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub jobs: Vec<JobRecord>,
    pub intents: Vec<Intent>,
    pub instances: Vec<InstanceRecord>,
}

/// Where a store lives, parsed from `--state`: a SQLite path (`sqlite:PATH` or a bare path)
/// or a PostgreSQL URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

impl StoreUrl {
    pub fn parse(s: &str) -> StoreUrl {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            StoreUrl::Postgres(s.to_string())
        } else {
            StoreUrl::Sqlite(s.strip_prefix("sqlite:").unwrap_or(s).into())
        }
    }
}

#[derive(Debug)]
enum Backend {
    Sqlite(sqlite::SqliteDb),
    Postgres(postgres::PgDb),
}

/// Who leads, as the lease row says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    pub holder: String,
    /// Milliseconds until the lease expires (negative: expired), by the database's clock.
    pub expires_in_ms: i64,
}

/// The state store. Cheap to share behind an `Arc`; calls are short and serialised per
/// backend connection.
#[derive(Debug)]
pub struct Store {
    backend: Backend,
    /// The cluster id written when the store was created.
    cluster: String,
    /// A SQLite store's file, checked by [`Store::verify`].
    file: Option<identity::FileIdentity>,
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn time(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

fn json<T: serde::Serialize>(what: &'static str, v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|source| StoreError::Json { what, source })
}

fn parse<T: serde::de::DeserializeOwned>(what: &'static str, s: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|source| StoreError::Json { what, source })
}

fn intent_state(s: &str) -> Result<IntentState> {
    Ok(match s {
        "pending" => IntentState::Pending,
        "done" => IntentState::Done,
        "failed" => IntentState::Failed,
        "cancelled" => IntentState::Cancelled,
        other => return Err(StoreError::Invalid(format!("unknown intent state {other}"))),
    })
}

fn intent_state_str(s: IntentState) -> &'static str {
    match s {
        IntentState::Pending => "pending",
        IntentState::Done => "done",
        IntentState::Failed => "failed",
        IntentState::Cancelled => "cancelled",
    }
}

fn instance_state(s: &str) -> Result<InstanceState> {
    parse("instance state", &format!("\"{s}\""))
}

fn instance_state_str(s: InstanceState) -> &'static str {
    match s {
        InstanceState::Queued => "queued",
        InstanceState::Pending => "pending",
        InstanceState::Running => "running",
        InstanceState::Stopping => "stopping",
        InstanceState::Terminated => "terminated",
    }
}

fn intent_id(s: &str) -> Result<IntentId> {
    s.parse()
        .map_err(|e| StoreError::Invalid(format!("intent id {s}: {e}")))
}

impl Store {
    /// Open (or create) a SQLite file, by its real path (symlinks resolved), and apply
    /// pending migrations.
    pub fn open(path: &Path) -> Result<Store> {
        let file_error = |source| StoreError::File {
            path: path.display().to_string(),
            source,
        };
        let real = real_path(path).map_err(file_error)?;
        let db = sqlite::SqliteDb::open(&real)?;
        let file = identity::FileIdentity::of(&real).map_err(file_error)?;
        Store::with_identity(Backend::Sqlite(db), Some(file))
    }

    /// A private in-memory database (tests, benchmarks).
    pub fn in_memory() -> Result<Store> {
        Store::with_identity(Backend::Sqlite(sqlite::SqliteDb::in_memory()?), None)
    }

    /// Connect to PostgreSQL and apply pending migrations (serialised across controllers).
    pub fn connect(url: &str) -> Result<Store> {
        Store::with_identity(Backend::Postgres(postgres::PgDb::connect(url)?), None)
    }

    fn with_identity(backend: Backend, file: Option<identity::FileIdentity>) -> Result<Store> {
        let mut store = Store {
            backend,
            cluster: String::new(),
            file,
        };
        store.cluster = store.ensure_identity()?;
        Ok(store)
    }

    /// Open whichever store `url` names.
    pub fn at(url: &StoreUrl) -> Result<Store> {
        match url {
            StoreUrl::Sqlite(path) => Store::open(path),
            StoreUrl::Postgres(url) => Store::connect(url),
        }
    }

    /// For messages: the file, or the URL without its password.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Sqlite(_) => "SQLite".to_string(),
            Backend::Postgres(db) => db.shown.clone(),
        }
    }

    fn run(&self, batch: Vec<Stmt>) -> Result<Vec<Outcome>> {
        match &self.backend {
            Backend::Sqlite(db) => db.run(batch),
            Backend::Postgres(db) => db.run(batch),
        }
    }

    fn exec(&self, sql: &str, params: Vec<sql::Value>) -> Result<u64> {
        Ok(self.run(vec![Stmt::exec(sql, params)])?.remove(0).count())
    }

    fn query(&self, sql: &str, params: Vec<sql::Value>) -> Result<Vec<Row>> {
        Ok(self.run(vec![Stmt::query(sql, params)])?.remove(0).rows())
    }

    pub fn schema_version(&self) -> Result<i64> {
        match &self.backend {
            Backend::Sqlite(db) => db.schema_version(),
            Backend::Postgres(db) => db.schema_version(),
        }
    }

    /// Take or renew the lease `name` for `holder` for `ttl`, by the database's clock.
    /// True while `holder` leads: the row was free, expired, or already `holder`'s.
    pub fn acquire_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let now = self.db_now_ms()?;
        let until = now + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2);
        let n = self.exec(
            "INSERT INTO leases (name, holder, expires_at, renewed_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (name) DO UPDATE
                SET holder = excluded.holder, expires_at = excluded.expires_at,
                    renewed_at = excluded.renewed_at
                WHERE leases.holder = excluded.holder OR leases.expires_at < ?4",
            params![name, holder, until, now],
        )?;
        Ok(n == 1)
    }

    /// Give the lease up at once (a clean shutdown), so a standby need not wait for expiry.
    pub fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        self.exec(
            "DELETE FROM leases WHERE name = ?1 AND holder = ?2",
            params![name, holder],
        )?;
        Ok(())
    }

    /// Who holds the lease `name`, if anyone ever took it.
    pub fn lease_holder(&self, name: &str) -> Result<Option<LeaseHolder>> {
        let now = self.db_now_ms()?;
        let rows = self.query(
            "SELECT holder, expires_at FROM leases WHERE name = ?1",
            params![name],
        )?;
        rows.first()
            .map(|r| {
                Ok(LeaseHolder {
                    holder: r.text(0)?,
                    expires_in_ms: r.int(1)? - now,
                })
            })
            .transpose()
    }

    /// The database's clock: leases of controllers on different hosts must not depend on
    /// their clocks agreeing.
    fn db_now_ms(&self) -> Result<i64> {
        let sql = match &self.backend {
            Backend::Sqlite(_) => {
                "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
            }
            Backend::Postgres(_) => {
                "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
            }
        };
        self.query(sql, vec![])?
            .first()
            .ok_or_else(|| StoreError::Invalid("the database did not tell its time".into()))?
            .int(0)
    }

    /// Insert a new job. Fails with [`StoreError::Duplicate`] if the name is taken.
    pub fn insert_job(&self, job: &JobRecord, now: DateTime<Utc>) -> Result<()> {
        let spec = json("job spec", &job.spec)?;
        let n = self.exec(
            "INSERT INTO jobs (name, team, spec, state, reason, submitted_at, deadline_at,
                total_samples, done_samples, checkpoint_samples, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
             ON CONFLICT (name) DO NOTHING",
            params![
                job.name(),
                &job.spec.team,
                spec,
                job.state.as_str(),
                job.reason.clone(),
                ms(job.submitted_at),
                job.deadline_at.map(ms),
                job.total_samples,
                job.done_samples,
                job.checkpoint_samples,
                ms(now),
            ],
        )?;
        if n == 0 {
            return Err(StoreError::Duplicate(job.name().to_string()));
        }
        Ok(())
    }

    /// Write what the reconcile pass decides about a job: state, reason, target, moves. Progress
    /// and the drain flag have statements of their own ([`Store::set_progress`],
    /// [`Store::set_drain`]), since agents write them through the API while a pass runs. A
    /// cancelled job stays cancelled: the cancel is written by the API and no pass that has not
    /// seen it yet may overwrite it.
    pub fn update_job(&self, job: &JobRecord, now: DateTime<Utc>) -> Result<()> {
        let probe = job
            .probe
            .as_ref()
            .map(|p| json("job probe", p))
            .transpose()?;
        let n = self.exec(
            "UPDATE jobs SET state = ?2, reason = ?3, target_offer = ?4, target_count = ?5,
                last_move_at = ?6, finished_at = ?7, updated_at = ?8, planned_count = ?9,
                planned_cost = ?10, probe = ?11
             WHERE name = ?1 AND (state <> 'cancelled' OR ?2 = 'cancelled')",
            params![
                job.name(),
                job.state.as_str(),
                job.reason.clone(),
                job.target_offer.clone(),
                job.target_count,
                job.last_move_at.map(ms),
                job.finished_at.map(ms),
                ms(now),
                job.planned_count,
                job.planned_cost,
                probe,
            ],
        )?;
        self.changed_job(n, job.name())
    }

    /// A statement that changed no row of an existing job is fine (it was cancelled meanwhile);
    /// one for a job that does not exist is a bug or a swapped store.
    fn changed_job(&self, rows: u64, name: &str) -> Result<()> {
        if rows == 0 && !self.job_exists(name)? {
            return Err(StoreError::Invalid(format!("no job {name}")));
        }
        Ok(())
    }

    fn job_exists(&self, name: &str) -> Result<bool> {
        Ok(!self
            .query("SELECT 1 FROM jobs WHERE name = ?1", params![name])?
            .is_empty())
    }

    /// Progress as the workers report it; `clear_drain` when the report follows the
    /// checkpoint a drain asked for.
    pub fn set_progress(&self, name: &str, p: &Progress, now: DateTime<Utc>) -> Result<()> {
        let n = self.exec(
            "UPDATE jobs SET done_samples = ?2, checkpoint_samples = ?3, checkpoint_at = ?4,
                drain_requested = CASE WHEN ?5 <> 0 THEN 0 ELSE drain_requested END, updated_at = ?6
             WHERE name = ?1",
            params![
                name,
                p.done_samples,
                p.checkpoint_samples,
                p.checkpoint_at.map(ms),
                p.clear_drain,
                ms(now),
            ],
        )?;
        self.changed_job(n, name)
    }

    /// Ask the job's workers to checkpoint now (a notice or a migration).
    pub fn set_drain(&self, name: &str, drain: bool, now: DateTime<Utc>) -> Result<()> {
        let n = self.exec(
            "UPDATE jobs SET drain_requested = ?2, updated_at = ?3 WHERE name = ?1",
            params![name, drain, ms(now)],
        )?;
        self.changed_job(n, name)
    }

    /// Cancel a job that has not ended. Returns false when it had already ended.
    pub fn cancel_job(&self, name: &str, reason: &str, now: DateTime<Utc>) -> Result<bool> {
        self.end_job(name, JobState::Cancelled, reason, now)
    }

    /// End a job that has not ended, as `state` (cancelled or failed) with `reason`. Returns
    /// false when it had already ended.
    pub fn end_job(
        &self,
        name: &str,
        state: JobState,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let n = self.exec(
            "UPDATE jobs SET state = ?4, reason = ?2, finished_at = ?3, updated_at = ?3
             WHERE name = ?1 AND state NOT IN ('finished', 'cancelled', 'failed')",
            params![name, reason, ms(now), state.as_str()],
        )?;
        self.changed_job(n, name)?;
        Ok(n > 0)
    }

    pub fn job(&self, name: &str) -> Result<Option<JobRecord>> {
        self.query(&format!("{JOB_SELECT} WHERE name = ?1"), params![name])?
            .first()
            .map(job_from_row)
            .transpose()
    }

    /// Persist an intent. Called before the cloud is asked to do anything for it.
    pub fn insert_intent(&self, intent: &Intent) -> Result<()> {
        let body = json("intent", &intent.kind)?;
        self.exec(
            "INSERT INTO intents (id, job, kind, body, state, attempt, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
            params![
                intent.id.to_string(),
                &intent.job,
                intent.kind.name(),
                body,
                intent_state_str(intent.state),
                intent.attempt,
                ms(intent.created_at),
            ],
        )?;
        Ok(())
    }

    pub fn set_intent_state(
        &self,
        id: IntentId,
        state: IntentState,
        reason: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        self.exec(
            "UPDATE intents SET state = ?2, reason = ?3, updated_at = ?4 WHERE id = ?1",
            params![id.to_string(), intent_state_str(state), reason, ms(now)],
        )?;
        Ok(())
    }

    /// State of any intent, open or closed (the leak collector asks about instance tags).
    pub fn intent_state(&self, id: IntentId) -> Result<Option<IntentState>> {
        self.query(
            "SELECT state FROM intents WHERE id = ?1",
            params![id.to_string()],
        )?
        .first()
        .map(|r| intent_state(&r.text(0)?))
        .transpose()
    }

    /// One intent, open or closed.
    pub fn intent(&self, id: IntentId) -> Result<Option<Intent>> {
        self.query(
            "SELECT id, job, body, state, attempt, created_at FROM intents WHERE id = ?1",
            params![id.to_string()],
        )?
        .first()
        .map(intent_from_row)
        .transpose()
    }

    /// Record launched instances and open their usage intervals, atomically. `done` also closes
    /// the intent in the same transaction (a launch intent is done once its instances are known).
    pub fn record_instances(
        &self,
        intent: IntentId,
        job: &str,
        instances: &[Instance],
        on_demand_per_hour: Option<f64>,
        done: bool,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let mut batch = Vec::with_capacity(2 * instances.len() + 1);
        for i in instances {
            let offer = json("offer", &i.offer)?;
            batch.push(Stmt::exec(
                "INSERT INTO instances (id, job, intent, offer, offer_key, capacity,
                    state, draining, launched_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8)
                 ON CONFLICT (id) DO NOTHING",
                params![
                    &i.id.0,
                    job,
                    intent.to_string(),
                    offer,
                    i.offer.key(),
                    i.offer.capacity.as_str(),
                    instance_state_str(i.state),
                    ms(i.launched_at),
                ],
            ));
            batch.push(Stmt::exec(
                "INSERT INTO usage (instance, job, offer_key, capacity, price_per_hour,
                    on_demand_per_hour, started_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (instance) DO NOTHING",
                params![
                    &i.id.0,
                    job,
                    i.offer.key(),
                    i.offer.capacity.as_str(),
                    i.offer.price_per_hour,
                    on_demand_per_hour,
                    ms(i.launched_at),
                ],
            ));
        }
        if done {
            batch.push(Stmt::exec(
                "UPDATE intents SET state = 'done', updated_at = ?2 WHERE id = ?1",
                params![intent.to_string(), ms(now)],
            ));
        }
        if !batch.is_empty() {
            self.run(batch)?;
        }
        Ok(())
    }

    pub fn set_instance_state(
        &self,
        id: &InstanceId,
        state: InstanceState,
        draining: bool,
    ) -> Result<()> {
        self.exec(
            "UPDATE instances SET state = ?2, draining = ?3 WHERE id = ?1",
            params![&id.0, instance_state_str(state), draining],
        )?;
        Ok(())
    }

    /// The instance is gone: mark it terminated and close its usage interval, atomically.
    pub fn end_instance(&self, id: &InstanceId, at: DateTime<Utc>) -> Result<()> {
        self.run(vec![
            Stmt::exec(
                "UPDATE instances SET state = 'terminated', ended_at = ?2
                 WHERE id = ?1 AND ended_at IS NULL",
                params![&id.0, ms(at)],
            ),
            Stmt::exec(
                "UPDATE usage SET ended_at = ?2 WHERE instance = ?1 AND ended_at IS NULL",
                params![&id.0, ms(at)],
            ),
        ])?;
        Ok(())
    }

    pub fn add_observation(&self, o: &Observation) -> Result<()> {
        let body = json("observation", o)?;
        self.exec(
            "INSERT INTO observations (job, at, body) VALUES (?1, ?2, ?3)",
            params![&o.job, ms(o.at), body],
        )?;
        Ok(())
    }

    pub fn observations(&self, job: &str) -> Result<Vec<Observation>> {
        self.query(
            "SELECT body FROM observations WHERE job = ?1 ORDER BY id",
            params![job],
        )?
        .iter()
        .map(|r| parse("observation", &r.text(0)?))
        .collect()
    }

    pub fn add_event(
        &self,
        at: DateTime<Utc>,
        job: Option<&str>,
        kind: &str,
        message: &str,
        fields: Option<&str>,
    ) -> Result<i64> {
        self.query(
            "INSERT INTO events (at, job, kind, message, fields) VALUES (?1, ?2, ?3, ?4, ?5)
             RETURNING id",
            params![ms(at), job, kind, message, fields],
        )?
        .first()
        .ok_or_else(|| StoreError::Invalid("the event insert returned no id".into()))?
        .int(0)
    }

    /// Events with id > `after`, oldest first; `job` filters to one job.
    pub fn events(&self, after: i64, job: Option<&str>) -> Result<Vec<Event>> {
        self.query(
            "SELECT id, at, job, kind, message, fields FROM events
             WHERE id > ?1 AND (CAST(?2 AS TEXT) IS NULL OR job = ?2) ORDER BY id",
            params![after, job],
        )?
        .iter()
        .map(|r| {
            Ok(Event {
                id: r.int(0)?,
                at: time(r.int(1)?),
                job: r.opt_text(2)?,
                kind: r.text(3)?,
                message: r.text(4)?,
                fields: r.opt_text(5)?.and_then(|f| serde_json::from_str(&f).ok()),
            })
        })
        .collect()
    }

    /// Instances ever recorded for `intent`, ended ones included.
    pub fn instances_of_intent(&self, intent: IntentId) -> Result<u32> {
        self.count(
            "SELECT COUNT(*) FROM instances WHERE intent = ?1",
            params![intent.to_string()],
        )
    }

    /// The single number a `SELECT COUNT(*)` returns.
    fn count(&self, sql: &str, params: Vec<sql::Value>) -> Result<u32> {
        let rows = self.query(sql, params)?;
        let n = rows.first().map(|r| r.int(0)).transpose()?.unwrap_or(0);
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// Instances the job started at or after `since` (the launch budget's count).
    pub fn launched_since(&self, job: &str, since: DateTime<Utc>) -> Result<u32> {
        self.count(
            "SELECT COUNT(*) FROM usage WHERE job = ?1 AND started_at >= ?2",
            params![job, ms(since)],
        )
    }

    /// Record spot pool samples (one per pool and policy tick; a later view of a tick wins),
    /// and drop those older than a lookback of 8 days before the newest.
    pub fn record_pool_samples(&self, samples: &[PoolSample]) -> Result<()> {
        let mut batch = Vec::with_capacity(samples.len() + 1);
        for s in samples {
            batch.push(Stmt::exec(
                "INSERT INTO pool_samples (pool, instance_type, zone, region, tick, available,
                    spot_price)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (pool, tick) DO UPDATE SET available = excluded.available,
                    spot_price = excluded.spot_price",
                params![
                    &s.pool,
                    &s.instance_type,
                    &s.zone,
                    &s.region,
                    s.tick,
                    i64::from(s.available),
                    s.spot_price,
                ],
            ));
        }
        if let Some(newest) = samples.iter().map(|s| s.tick).max()
            && newest % 64 == 0
        {
            batch.push(Stmt::exec(
                "DELETE FROM pool_samples WHERE tick < ?1",
                params![newest - POOL_SAMPLE_TICKS],
            ));
        }
        if !batch.is_empty() {
            self.run(batch)?;
        }
        Ok(())
    }

    /// Pool samples at or after `tick`, oldest first.
    pub fn pool_samples_since(&self, tick: i64) -> Result<Vec<PoolSample>> {
        self.query(
            "SELECT pool, instance_type, zone, region, tick, available, spot_price
             FROM pool_samples WHERE tick >= ?1 ORDER BY tick, pool",
            params![tick],
        )?
        .iter()
        .map(|r| {
            Ok(PoolSample {
                pool: r.text(0)?,
                instance_type: r.text(1)?,
                zone: r.text(2)?,
                region: r.text(3)?,
                tick: r.int(4)?,
                available: u32::try_from(r.int(5)?.max(0)).unwrap_or(u32::MAX),
                spot_price: r.real(6)?,
            })
        })
        .collect()
    }

    pub fn usage(&self) -> Result<Vec<Usage>> {
        self.query(
            "SELECT instance, job, offer_key, capacity, price_per_hour, on_demand_per_hour,
                started_at, ended_at FROM usage ORDER BY id",
            vec![],
        )?
        .iter()
        .map(usage_from_row)
        .collect()
    }

    /// Usage intervals still open, or ended at or after `since` (all of them without it).
    pub fn usage_open_or_ended_since(&self, since: Option<DateTime<Utc>>) -> Result<Vec<Usage>> {
        self.query(
            "SELECT instance, job, offer_key, capacity, price_per_hour, on_demand_per_hour,
                started_at, ended_at FROM usage
             WHERE ended_at IS NULL OR ended_at >= ?1 ORDER BY id",
            params![since.map_or(i64::MIN, ms)],
        )?
        .iter()
        .map(usage_from_row)
        .collect()
    }

    /// Every usage interval with the offer its instance ran on (for cost reports).
    pub fn usage_with_offers(&self) -> Result<Vec<(Usage, Option<Offer>)>> {
        self.query(
            "SELECT u.instance, u.job, u.offer_key, u.capacity, u.price_per_hour,
                u.on_demand_per_hour, u.started_at, u.ended_at, i.offer
             FROM usage u LEFT JOIN instances i ON i.id = u.instance ORDER BY u.id",
            vec![],
        )?
        .iter()
        .map(|r| {
            let usage = usage_from_row(r)?;
            let offer = r.opt_text(8)?.map(|o| parse("offer", &o)).transpose()?;
            Ok((usage, offer))
        })
        .collect()
    }

    /// Record prices seen at `at` (offer key, $/h). Callers pass changes only; a second write
    /// of one key at one time keeps the first.
    pub fn record_prices(&self, at: DateTime<Utc>, prices: &[(String, f64)]) -> Result<()> {
        let batch: Vec<Stmt> = prices
            .iter()
            .map(|(key, price)| {
                Stmt::exec(
                    "INSERT INTO prices (offer_key, at, price_per_hour) VALUES (?1, ?2, ?3)
                     ON CONFLICT (offer_key, at) DO NOTHING",
                    params![key, ms(at), *price],
                )
            })
            .collect();
        if !batch.is_empty() {
            self.run(batch)?;
        }
        Ok(())
    }

    /// Every recorded price, per offer key, oldest first.
    pub fn prices(&self) -> Result<PriceLog> {
        let mut out = PriceLog::new();
        for r in self.query(
            "SELECT offer_key, at, price_per_hour FROM prices ORDER BY offer_key, at",
            vec![],
        )? {
            out.entry(r.text(0)?)
                .or_default()
                .push((time(r.int(1)?), r.real(2)?));
        }
        Ok(out)
    }

    /// The newest recorded price of each offer key (what a restarted controller compares
    /// fresh offers with).
    pub fn latest_prices(&self) -> Result<BTreeMap<String, f64>> {
        Ok(self
            .prices()?
            .into_iter()
            .filter_map(|(k, v)| v.last().map(|p| (k, p.1)))
            .collect())
    }

    /// What a restarted controller needs: every job, open intents, instances not yet ended.
    pub fn load(&self) -> Result<Snapshot> {
        let mut out = self
            .run(vec![
                Stmt::query(format!("{JOB_SELECT} ORDER BY submitted_at, name"), vec![]),
                Stmt::query(
                    "SELECT id, job, body, state, attempt, created_at FROM intents
                     WHERE state = 'pending' ORDER BY created_at, id",
                    vec![],
                ),
                Stmt::query(
                    "SELECT id, job, intent, offer, state, draining, launched_at, ended_at
                     FROM instances WHERE ended_at IS NULL ORDER BY launched_at, id",
                    vec![],
                ),
            ])?
            .into_iter()
            .map(Outcome::rows);
        let (jobs, intents, instances) = (
            out.next().unwrap_or_default(),
            out.next().unwrap_or_default(),
            out.next().unwrap_or_default(),
        );
        Ok(Snapshot {
            jobs: jobs.iter().map(job_from_row).collect::<Result<_>>()?,
            intents: intents.iter().map(intent_from_row).collect::<Result<_>>()?,
            instances: instances
                .iter()
                .map(|r| {
                    Ok(InstanceRecord {
                        id: InstanceId(r.text(0)?),
                        job: r.text(1)?,
                        intent: intent_id(&r.text(2)?)?,
                        offer: parse("offer", &r.text(3)?)?,
                        state: instance_state(&r.text(4)?)?,
                        draining: r.flag(5)?,
                        launched_at: time(r.int(6)?),
                        ended_at: r.opt_int(7)?.map(time),
                    })
                })
                .collect::<Result<_>>()?,
        })
    }
}

const JOB_SELECT: &str = "SELECT spec, state, reason, submitted_at, deadline_at, total_samples,
    done_samples, checkpoint_samples, checkpoint_at, drain_requested, target_offer, target_count,
    last_move_at, finished_at, planned_count, planned_cost, probe FROM jobs";

fn job_from_row(r: &Row) -> Result<JobRecord> {
    Ok(JobRecord {
        spec: parse("job spec", &r.text(0)?)?,
        state: JobState::parse(&r.text(1)?)?,
        reason: r.opt_text(2)?,
        submitted_at: time(r.int(3)?),
        deadline_at: r.opt_int(4)?.map(time),
        total_samples: r.real(5)?,
        done_samples: r.real(6)?,
        checkpoint_samples: r.real(7)?,
        checkpoint_at: r.opt_int(8)?.map(time),
        drain_requested: r.flag(9)?,
        target_offer: r.opt_text(10)?,
        target_count: r.u32(11)?,
        last_move_at: r.opt_int(12)?.map(time),
        finished_at: r.opt_int(13)?.map(time),
        planned_count: r.u32(14)?,
        planned_cost: r.opt_real(15)?,
        probe: r
            .opt_text(16)?
            .map(|t| parse("job probe", &t))
            .transpose()?,
    })
}

/// Columns: instance, job, offer_key, capacity, price_per_hour, on_demand_per_hour,
/// started_at, ended_at.
fn usage_from_row(r: &Row) -> Result<Usage> {
    Ok(Usage {
        instance: r.text(0)?,
        job: r.text(1)?,
        offer_key: r.text(2)?,
        capacity: r.text(3)?.parse().map_err(StoreError::Invalid)?,
        price_per_hour: r.real(4)?,
        on_demand_per_hour: r.opt_real(5)?,
        started_at: time(r.int(6)?),
        ended_at: r.opt_int(7)?.map(time),
    })
}

/// Columns: id, job, body, state, attempt, created_at.
fn intent_from_row(r: &Row) -> Result<Intent> {
    Ok(Intent {
        id: intent_id(&r.text(0)?)?,
        job: r.text(1)?,
        kind: parse::<IntentKind>("intent", &r.text(2)?)?,
        state: intent_state(&r.text(3)?)?,
        attempt: r.u32(4)?,
        created_at: time(r.int(5)?),
    })
}

#[cfg(test)]
mod tests;
