//! The controller's durable state on SQLite (one file, embedded): jobs, intents, instances,
//! observations, events and usage intervals.
//!
//! The controller keeps a working copy in memory and writes every change here first, so a
//! restarted controller rebuilds exactly what it knew ([`Store::load`]). Intents are inserted
//! *before* the cloud is called; an instance and its usage interval are recorded in the same
//! transaction that marks its launch intent done.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, TimeZone, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use tern_cloud::{
    Capacity, Instance, InstanceId, InstanceState, Intent, IntentId, IntentKind, IntentState,
    JobSpec, Observation, Offer,
};

/// Schema migrations, applied in order; `PRAGMA user_version` = how many are applied.
const MIGRATIONS: &[&str] = &[include_str!("migrations/0001_init.sql")];

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state store: {0}")]
    Sqlite(#[from] rusqlite::Error),
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
}

impl StoreError {
    /// A locked or busy database may free up; anything else will fail again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _))
                if matches!(e.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        )
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
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Finished => "finished",
            JobState::Unplaceable => "unplaceable",
            JobState::Cancelled => "cancelled",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "pending" => JobState::Pending,
            "running" => JobState::Running,
            "finished" => JobState::Finished,
            "unplaceable" => JobState::Unplaceable,
            "cancelled" => JobState::Cancelled,
            other => return Err(StoreError::Invalid(format!("unknown job state {other}"))),
        })
    }

    /// Finished or cancelled: nothing more will run for it.
    pub fn is_final(self) -> bool {
        matches!(self, JobState::Finished | JobState::Cancelled)
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
    pub last_move_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
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
            last_move_at: None,
            finished_at: None,
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
}

/// Everything a controller needs to resume: live jobs, open intents, live instances.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub jobs: Vec<JobRecord>,
    pub intents: Vec<Intent>,
    pub instances: Vec<InstanceRecord>,
}

/// The SQLite state store. Cheap to share behind an `Arc`; calls are short and serialised.
#[derive(Debug)]
pub struct Store {
    conn: Mutex<Connection>,
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
        InstanceState::Pending => "pending",
        InstanceState::Running => "running",
        InstanceState::Stopping => "stopping",
        InstanceState::Terminated => "terminated",
    }
}

impl Store {
    /// Open (or create) the database file and apply pending migrations.
    pub fn open(path: &Path) -> Result<Store> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        Self::with_connection(conn)
    }

    /// A private in-memory database (tests, benchmarks).
    pub fn in_memory() -> Result<Store> {
        Self::with_connection(Connection::open_in_memory()?)
    }

    fn with_connection(mut conn: Connection) -> Result<Store> {
        let applied: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let applied = usize::try_from(applied).unwrap_or(0);
        if applied > MIGRATIONS.len() {
            return Err(StoreError::Invalid(format!(
                "database schema version {applied} is newer than this tern ({})",
                MIGRATIONS.len()
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(applied) {
            let tx = conn.transaction()?;
            tx.execute_batch(sql)?;
            tx.pragma_update(
                None,
                "user_version",
                i64::try_from(i + 1).unwrap_or(i64::MAX),
            )?;
            tx.commit()?;
        }
        Ok(Store {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg_attr(
        not(test),
        allow(
            dead_code,
            reason = "store API; the tests and the coming cost report read it"
        )
    )]
    pub fn schema_version(&self) -> Result<i64> {
        Ok(self
            .conn()
            .pragma_query_value(None, "user_version", |r| r.get(0))?)
    }

    /// Insert a new job. Fails with [`StoreError::Duplicate`] if the name is taken.
    pub fn insert_job(&self, job: &JobRecord, now: DateTime<Utc>) -> Result<()> {
        let spec = json("job spec", &job.spec)?;
        let conn = self.conn();
        let exists: Option<String> = conn
            .query_row("SELECT name FROM jobs WHERE name = ?1", [job.name()], |r| {
                r.get(0)
            })
            .optional()?;
        if exists.is_some() {
            return Err(StoreError::Duplicate(job.name().to_string()));
        }
        conn.execute(
            "INSERT INTO jobs (name, team, spec, state, reason, submitted_at, deadline_at,
                total_samples, done_samples, checkpoint_samples, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                job.name(),
                job.spec.team,
                spec,
                job.state.as_str(),
                job.reason,
                ms(job.submitted_at),
                job.deadline_at.map(ms),
                job.total_samples,
                job.done_samples,
                job.checkpoint_samples,
                ms(now),
            ],
        )?;
        Ok(())
    }

    /// Write the mutable fields of a job (state, progress, target, drain flag).
    pub fn update_job(&self, job: &JobRecord, now: DateTime<Utc>) -> Result<()> {
        let n = self.conn().execute(
            "UPDATE jobs SET state = ?2, reason = ?3, done_samples = ?4, checkpoint_samples = ?5,
                checkpoint_at = ?6, drain_requested = ?7, target_offer = ?8, target_count = ?9,
                last_move_at = ?10, finished_at = ?11, updated_at = ?12
             WHERE name = ?1",
            params![
                job.name(),
                job.state.as_str(),
                job.reason,
                job.done_samples,
                job.checkpoint_samples,
                job.checkpoint_at.map(ms),
                job.drain_requested,
                job.target_offer,
                job.target_count,
                job.last_move_at.map(ms),
                job.finished_at.map(ms),
                ms(now),
            ],
        )?;
        if n == 0 {
            return Err(StoreError::Invalid(format!("no job {}", job.name())));
        }
        Ok(())
    }

    #[cfg_attr(
        not(test),
        allow(
            dead_code,
            reason = "store API; the tests and the coming cost report read it"
        )
    )]
    pub fn job(&self, name: &str) -> Result<Option<JobRecord>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!("{JOB_SELECT} WHERE name = ?1"))?;
        let mut rows = stmt.query([name])?;
        match rows.next()? {
            Some(row) => Ok(Some(job_from_row(row)?)),
            None => Ok(None),
        }
    }

    pub fn jobs(&self) -> Result<Vec<JobRecord>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!("{JOB_SELECT} ORDER BY submitted_at, name"))?;
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(job_from_row(row)?);
        }
        Ok(out)
    }

    /// Persist an intent. Called before the cloud is asked to do anything for it.
    pub fn insert_intent(&self, intent: &Intent) -> Result<()> {
        let body = json("intent", &intent.kind)?;
        self.conn().execute(
            "INSERT INTO intents (id, job, kind, body, state, attempt, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
            params![
                intent.id.to_string(),
                intent.job,
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
        self.conn().execute(
            "UPDATE intents SET state = ?2, reason = ?3, updated_at = ?4 WHERE id = ?1",
            params![id.to_string(), intent_state_str(state), reason, ms(now)],
        )?;
        Ok(())
    }

    #[cfg_attr(
        not(test),
        allow(
            dead_code,
            reason = "store API; the tests and the coming cost report read it"
        )
    )]
    /// State of any intent, open or closed (the leak collector asks about instance tags).
    pub fn intent_state(&self, id: IntentId) -> Result<Option<IntentState>> {
        let s: Option<String> = self
            .conn()
            .query_row(
                "SELECT state FROM intents WHERE id = ?1",
                [id.to_string()],
                |r| r.get(0),
            )
            .optional()?;
        s.as_deref().map(intent_state).transpose()
    }

    #[cfg_attr(
        not(test),
        allow(
            dead_code,
            reason = "store API; the tests and the coming cost report read it"
        )
    )]
    /// One intent, open or closed.
    pub fn intent(&self, id: IntentId) -> Result<Option<Intent>> {
        let conn = self.conn();
        let row: Option<(String, String, String, u32, i64)> = conn
            .query_row(
                "SELECT job, body, state, attempt, created_at FROM intents WHERE id = ?1",
                [id.to_string()],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .optional()?;
        row.map(|(job, body, state, attempt, created)| {
            Ok(Intent {
                id,
                job,
                kind: parse("intent", &body)?,
                state: intent_state(&state)?,
                attempt,
                created_at: time(created),
            })
        })
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
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for i in instances {
            let offer = json("offer", &i.offer)?;
            tx.execute(
                "INSERT OR IGNORE INTO instances (id, job, intent, offer, offer_key, capacity,
                    state, draining, launched_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8)",
                params![
                    i.id.0,
                    job,
                    intent.to_string(),
                    offer,
                    i.offer.key(),
                    i.offer.capacity.as_str(),
                    instance_state_str(i.state),
                    ms(i.launched_at),
                ],
            )?;
            tx.execute(
                "INSERT OR IGNORE INTO usage (instance, job, offer_key, capacity, price_per_hour,
                    on_demand_per_hour, started_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    i.id.0,
                    job,
                    i.offer.key(),
                    i.offer.capacity.as_str(),
                    i.offer.price_per_hour,
                    on_demand_per_hour,
                    ms(i.launched_at),
                ],
            )?;
        }
        if done {
            tx.execute(
                "UPDATE intents SET state = 'done', updated_at = ?2 WHERE id = ?1",
                params![intent.to_string(), ms(now)],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    pub fn set_instance_state(
        &self,
        id: &InstanceId,
        state: InstanceState,
        draining: bool,
    ) -> Result<()> {
        self.conn().execute(
            "UPDATE instances SET state = ?2, draining = ?3 WHERE id = ?1",
            params![id.0, instance_state_str(state), draining],
        )?;
        Ok(())
    }

    /// The instance is gone: mark it terminated and close its usage interval, atomically.
    pub fn end_instance(&self, id: &InstanceId, at: DateTime<Utc>) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "UPDATE instances SET state = 'terminated', ended_at = ?2 WHERE id = ?1 AND ended_at IS NULL",
            params![id.0, ms(at)],
        )?;
        tx.execute(
            "UPDATE usage SET ended_at = ?2 WHERE instance = ?1 AND ended_at IS NULL",
            params![id.0, ms(at)],
        )?;
        tx.commit()?;
        Ok(())
    }

    pub fn add_observation(&self, o: &Observation) -> Result<()> {
        let body = json("observation", o)?;
        self.conn().execute(
            "INSERT INTO observations (job, at, body) VALUES (?1, ?2, ?3)",
            params![o.job, ms(o.at), body],
        )?;
        Ok(())
    }

    pub fn observations(&self, job: &str) -> Result<Vec<Observation>> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare_cached("SELECT body FROM observations WHERE job = ?1 ORDER BY id")?;
        let rows = stmt.query_map([job], |r| r.get::<_, String>(0))?;
        let mut out = Vec::new();
        for r in rows {
            out.push(parse("observation", &r?)?);
        }
        Ok(out)
    }

    pub fn add_event(
        &self,
        at: DateTime<Utc>,
        job: Option<&str>,
        kind: &str,
        message: &str,
    ) -> Result<i64> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO events (at, job, kind, message) VALUES (?1, ?2, ?3, ?4)",
            params![ms(at), job, kind, message],
        )?;
        Ok(conn.last_insert_rowid())
    }

    /// Events with id > `after`, oldest first; `job` filters to one job.
    pub fn events(&self, after: i64, job: Option<&str>) -> Result<Vec<Event>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT id, at, job, kind, message FROM events
             WHERE id > ?1 AND (?2 IS NULL OR job = ?2) ORDER BY id",
        )?;
        let rows = stmt.query_map(params![after, job], |r| {
            Ok(Event {
                id: r.get(0)?,
                at: time(r.get(1)?),
                job: r.get(2)?,
                kind: r.get(3)?,
                message: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    pub fn usage(&self) -> Result<Vec<Usage>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT instance, job, offer_key, capacity, price_per_hour, on_demand_per_hour,
                started_at, ended_at FROM usage ORDER BY id",
        )?;
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let capacity: String = r.get(3)?;
            out.push(Usage {
                instance: r.get(0)?,
                job: r.get(1)?,
                offer_key: r.get(2)?,
                capacity: capacity.parse().map_err(StoreError::Invalid)?,
                price_per_hour: r.get(4)?,
                on_demand_per_hour: r.get(5)?,
                started_at: time(r.get(6)?),
                ended_at: r.get::<_, Option<i64>>(7)?.map(time),
            });
        }
        Ok(out)
    }

    /// What a restarted controller needs: every job, open intents, instances not yet ended.
    pub fn load(&self) -> Result<Snapshot> {
        let jobs = self.jobs()?;
        let conn = self.conn();
        let mut intents = Vec::new();
        {
            let mut stmt = conn.prepare(
                "SELECT id, job, body, state, attempt, created_at FROM intents
                 WHERE state = 'pending' ORDER BY created_at, id",
            )?;
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                let id: String = r.get(0)?;
                let body: String = r.get(2)?;
                let state: String = r.get(3)?;
                intents.push(Intent {
                    id: id
                        .parse()
                        .map_err(|e| StoreError::Invalid(format!("intent id {id}: {e}")))?,
                    job: r.get(1)?,
                    kind: parse::<IntentKind>("intent", &body)?,
                    state: intent_state(&state)?,
                    attempt: r.get(4)?,
                    created_at: time(r.get(5)?),
                });
            }
        }
        let mut instances = Vec::new();
        {
            let mut stmt = conn.prepare(
                "SELECT id, job, intent, offer, state, draining, launched_at, ended_at
                 FROM instances WHERE ended_at IS NULL ORDER BY launched_at, id",
            )?;
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                let intent: String = r.get(2)?;
                let offer: String = r.get(3)?;
                let state: String = r.get(4)?;
                instances.push(InstanceRecord {
                    id: InstanceId(r.get(0)?),
                    job: r.get(1)?,
                    intent: intent
                        .parse()
                        .map_err(|e| StoreError::Invalid(format!("intent id {intent}: {e}")))?,
                    offer: parse("offer", &offer)?,
                    state: instance_state(&state)?,
                    draining: r.get(5)?,
                    launched_at: time(r.get(6)?),
                    ended_at: r.get::<_, Option<i64>>(7)?.map(time),
                });
            }
        }
        Ok(Snapshot {
            jobs,
            intents,
            instances,
        })
    }
}

const JOB_SELECT: &str = "SELECT spec, state, reason, submitted_at, deadline_at, total_samples,
    done_samples, checkpoint_samples, checkpoint_at, drain_requested, target_offer, target_count,
    last_move_at, finished_at FROM jobs";

fn job_from_row(r: &rusqlite::Row<'_>) -> Result<JobRecord> {
    let spec: String = r.get(0)?;
    let state: String = r.get(1)?;
    Ok(JobRecord {
        spec: parse("job spec", &spec)?,
        state: JobState::parse(&state)?,
        reason: r.get(2)?,
        submitted_at: time(r.get(3)?),
        deadline_at: r.get::<_, Option<i64>>(4)?.map(time),
        total_samples: r.get(5)?,
        done_samples: r.get(6)?,
        checkpoint_samples: r.get(7)?,
        checkpoint_at: r.get::<_, Option<i64>>(8)?.map(time),
        drain_requested: r.get(9)?,
        target_offer: r.get(10)?,
        target_count: r.get(11)?,
        last_move_at: r.get::<_, Option<i64>>(12)?.map(time),
        finished_at: r.get::<_, Option<i64>>(13)?.map(time),
    })
}

#[cfg(test)]
mod tests;
