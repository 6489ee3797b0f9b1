//! The controller's durable state: jobs, intents, instances, observations, events, usage
//! intervals and the leader lease.
//!
//! Two backends share one set of statements ([`sql`]): SQLite (embedded, one file; the
//! default) and PostgreSQL (by URL; several controllers share it and elect a leader through
//! [`Store::acquire_lease`]). The controller keeps a working copy in memory and writes every
//! change here first, so a restarted controller rebuilds exactly what it knew
//! ([`Store::load`]). Intents are inserted *before* the cloud is called; an instance and its
//! usage interval are recorded in the same transaction that marks its launch intent done.

mod fleet;
mod history;
mod identity;
mod jobs;
mod lease;
#[cfg(any(test, feature = "test-util"))]
pub mod pg_cluster;
mod pg_tls;
mod postgres;
mod progress;
mod reader;
mod records;
pub mod sql;
mod workers;
pub use workers::{Ended, Incarnation, Worker};
mod audit;
mod settings;
mod sqlite;
mod tokens;
pub use audit::{AuditEntry, AuditQuery};
pub use settings::QUOTAS;
pub use tokens::{
    AGENT_PREFIX, AGENT_TOKEN_TAG, NewToken, Role, TOKEN_PREFIX, TokenRecord, base64url,
    check_scope, hash_secret,
};

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

use fleet::intent_from_row;
pub use identity::real_path;
use jobs::{JOB_SELECT, job_from_row};
pub use progress::{Checked, DONE_TOLERANCE, Progress};
pub use records::*;

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
    /// A write refused because this process no longer holds the leader lease: another
    /// controller took it (named when the store could tell). Nothing of the write was kept.
    #[error("{}", lease::fenced_message(.0.as_ref()))]
    Fenced(Option<LeaseHolder>),
    /// A reader was pointed at a SQLite file that does not exist; none was created.
    #[error("no state store at {0}")]
    Missing(String),
    /// A reader refuses a store at another schema than the one this tern knows.
    #[error("{}", reader::schema_message(*.found, *.known))]
    Schema { found: i64, known: i64 },
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
    /// The reign: grows with every take of the lease.
    pub epoch: i64,
    /// Where the holder serves its API, as it advertised it.
    pub address: Option<String>,
}

pub use lease::Fence;

/// The state store. Cheap to share behind an `Arc`; calls are short and serialised per
/// backend connection.
#[derive(Debug)]
pub struct Store {
    backend: Backend,
    /// The cluster id written when the store was created.
    cluster: String,
    /// A SQLite store's file, checked by [`Store::verify`].
    file: Option<identity::FileIdentity>,
    /// The key of derived agent tokens ([`Store::agent_token`]), written once per store.
    agent_key: tokens::AgentKey,
    /// The leader's fence, once it leads: every write checks it in its own transaction.
    fencing: lease::Fencing,
    /// PostgreSQL: the lease's own connection, so a slow batch of the pass never delays a
    /// renewal (SQLite's lease and reads share the file's one connection).
    lease_db: Option<postgres::PgDb>,
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
        let mut store =
            Store::with_identity(Backend::Postgres(postgres::PgDb::connect(url)?), None)?;
        store.lease_db = Some(postgres::PgDb::connect_lease(url)?);
        Ok(store)
    }

    fn with_identity(backend: Backend, file: Option<identity::FileIdentity>) -> Result<Store> {
        let mut store = Store::bare(backend, file);
        store.cluster = store.ensure_identity()?;
        store.agent_key = tokens::AgentKey(store.ensure_agent_key()?);
        Ok(store)
    }

    /// A store on `backend` with no identity or agent key read yet.
    fn bare(backend: Backend, file: Option<identity::FileIdentity>) -> Store {
        Store {
            backend,
            cluster: String::new(),
            file,
            agent_key: tokens::AgentKey(String::new()),
            fencing: lease::Fencing::default(),
            lease_db: None,
        }
    }

    /// Open whichever store `url` names, to write: creates and migrates it as needed (the
    /// controller). A command that only reads opens it with [`Store::read_only`].
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

    /// Every statement goes through here: a batch that writes carries the leader's fence.
    fn run(&self, batch: Vec<Stmt>) -> Result<Vec<Outcome>> {
        self.run_fenced(batch)
    }

    fn run_unfenced(&self, batch: Vec<Stmt>) -> Result<Vec<Outcome>> {
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
                        id: InstanceId::new(r.text(0)?),
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

#[cfg(test)]
mod lease_tests;
#[cfg(test)]
mod tests;
