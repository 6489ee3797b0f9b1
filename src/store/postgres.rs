//! The highly available backend: PostgreSQL, shared by every controller of a deployment.
//!
//! The `postgres` client is synchronous but drives its own Tokio runtime, which must not run
//! inside the controller's. So one worker thread owns the connection and the store sends it
//! owned batches over a channel; each batch is one transaction. A broken connection is
//! reopened on the next batch (the failed one reports a retryable error).

use std::collections::HashMap;
use std::error::Error as StdError;
use std::sync::mpsc;
use std::time::Duration;

use bytes::BytesMut;
use postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use postgres::{Client, NoTls, Statement};

use super::StoreError;
use super::pg_tls::{RustlsConnect, split_url};
use super::sql::{Outcome, Row, Shape, Stmt, Value, applied_migrations, numbered_placeholders};

/// Schema migrations in the PostgreSQL dialect; `tern_schema.version` = how many are applied.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/postgres/0001_init.sql"),
    include_str!("migrations/0002_leases.sql"),
    include_str!("migrations/0003_planned_count.sql"),
    include_str!("migrations/0004_identity.sql"),
    include_str!("migrations/0005_pool_samples.sql"),
    include_str!("migrations/0006_costs.sql"),
    include_str!("migrations/0007_workers.sql"),
    include_str!("migrations/0008_probe.sql"),
    include_str!("migrations/0009_event_fields.sql"),
    include_str!("migrations/postgres/0010_tokens_audit.sql"),
    include_str!("migrations/0011_lease_epoch.sql"),
    include_str!("migrations/0012_worker_ended.sql"),
    include_str!("migrations/0013_worker_address.sql"),
    include_str!("migrations/0014_settings.sql"),
];

/// The schema this tern knows: how many migrations it has.
pub(super) const SCHEMA: usize = MIGRATIONS.len();

/// Key of the advisory lock that serialises migrations when several controllers start at once.
pub(super) const MIGRATION_LOCK: i64 = 0x7465_726e_0001;

impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(v) if *ty == Type::INT4 => i32::try_from(*v)?.to_sql(ty, out),
            Value::Int(v) if *ty == Type::INT2 => i16::try_from(*v)?.to_sql(ty, out),
            Value::Int(v) if *ty == Type::FLOAT8 => (*v as f64).to_sql(ty, out),
            Value::Int(v) if *ty == Type::BOOL => (*v != 0).to_sql(ty, out),
            Value::Int(v) => v.to_sql(ty, out),
            Value::Real(v) => v.to_sql(ty, out),
            Value::Text(s) => s.as_str().to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

fn value_at(row: &postgres::Row, i: usize) -> Result<Value, StoreError> {
    let ty = row.columns()[i].type_().clone();
    let v = if ty == Type::INT8 {
        row.try_get::<_, Option<i64>>(i)?.map(Value::Int)
    } else if ty == Type::INT4 {
        row.try_get::<_, Option<i32>>(i)?
            .map(|v| Value::Int(i64::from(v)))
    } else if ty == Type::INT2 {
        row.try_get::<_, Option<i16>>(i)?
            .map(|v| Value::Int(i64::from(v)))
    } else if ty == Type::BOOL {
        row.try_get::<_, Option<bool>>(i)?
            .map(|v| Value::Int(i64::from(v)))
    } else if ty == Type::FLOAT8 {
        row.try_get::<_, Option<f64>>(i)?.map(Value::Real)
    } else if ty == Type::FLOAT4 {
        row.try_get::<_, Option<f32>>(i)?
            .map(|v| Value::Real(f64::from(v)))
    } else if ty == Type::TEXT || ty == Type::VARCHAR || ty == Type::NAME {
        row.try_get::<_, Option<String>>(i)?.map(Value::Text)
    } else {
        return Err(StoreError::Invalid(format!(
            "column {} has type {ty}, which the store does not read",
            row.columns()[i].name()
        )));
    };
    Ok(v.unwrap_or(Value::Null))
}

type Reply = mpsc::SyncSender<Result<Vec<Outcome>, StoreError>>;

/// What a connection is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The pass's batches; runs the migrations.
    Controller,
    /// The leader lease alone.
    Lease,
    /// Reads only, refused any write by the server.
    Reader,
}

/// A handle on the worker thread that owns the connection.
#[derive(Debug)]
pub struct PgDb {
    requests: mpsc::Sender<(Vec<Stmt>, Reply)>,
    /// The URL without its password, for messages.
    pub shown: String,
}

impl PgDb {
    /// Connect (failing fast with the server's reason), migrate, and start the worker.
    pub fn connect(url: &str) -> Result<PgDb, StoreError> {
        PgDb::connect_as(url, Role::Controller)
    }

    /// Connect to read only: every transaction of the session is `READ ONLY` (the server
    /// refuses a write with SQLSTATE 25006), no migration and no migration lock.
    pub fn connect_read_only(url: &str) -> Result<PgDb, StoreError> {
        PgDb::connect_as(url, Role::Reader)
    }

    /// The leader lease's own connection (and thread): its renewals never queue behind the
    /// pass's batches. No migration: the controller's connection ran them.
    pub fn connect_lease(url: &str) -> Result<PgDb, StoreError> {
        PgDb::connect_as(url, Role::Lease)
    }

    fn connect_as(url: &str, role: Role) -> Result<PgDb, StoreError> {
        let read_only = role == Role::Reader;
        let (rest, tls) = split_url(url)?;
        let connector = tls.connector()?;
        let mut config: postgres::Config = rest
            .parse()
            .map_err(|e| StoreError::Invalid(format!("bad PostgreSQL URL: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        if read_only {
            // A connection option, so a reconnect is read-only too.
            let options = match config.get_options() {
                Some(o) => format!("{o} -c default_transaction_read_only=on"),
                None => "-c default_transaction_read_only=on".to_string(),
            };
            config.options(&options);
        }
        config.application_name(match role {
            Role::Controller => "tern-controller",
            Role::Lease => "tern-lease",
            Role::Reader => "tern-reader",
        });
        config.ssl_mode(tls.ssl_mode());
        let shown = shown_url(url);
        // Connect on the worker thread too: the client's runtime must never start on one of
        // the controller's runtime threads.
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let (requests, inbox) = mpsc::channel::<(Vec<Stmt>, Reply)>();
        std::thread::Builder::new()
            .name("tern-store-pg".into())
            .spawn(move || {
                let mut worker = match Worker::start(config, connector, role == Role::Controller) {
                    Ok(w) => {
                        let _ = ready_tx.send(Ok(()));
                        w
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                while let Ok((batch, reply)) = inbox.recv() {
                    let _ = reply.send(worker.run(batch));
                }
            })
            .map_err(|e| StoreError::Invalid(format!("starting the store thread: {e}")))?;
        ready_rx
            .recv()
            .map_err(|_| StoreError::Invalid("the store thread stopped".into()))??;
        Ok(PgDb { requests, shown })
    }

    pub fn run(&self, batch: Vec<Stmt>) -> Result<Vec<Outcome>, StoreError> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.requests
            .send((batch, reply))
            .map_err(|_| StoreError::Invalid("the store thread stopped".into()))?;
        answer
            .recv()
            .map_err(|_| StoreError::Invalid("the store thread stopped".into()))?
    }

    /// How many migrations the database has; 0 when it has no `tern_schema` table at all.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        let exists = self
            .run(vec![Stmt::query(
                "SELECT to_regclass('tern_schema') IS NOT NULL",
                vec![],
            )])?
            .remove(0)
            .rows();
        if !exists.first().map_or(Ok(false), |r| r.flag(0))? {
            return Ok(0);
        }
        let rows = self
            .run(vec![Stmt::query("SELECT version FROM tern_schema", vec![])])?
            .remove(0)
            .rows();
        rows.first().map_or(Ok(0), |r| r.int(0))
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
fn shown_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((auth, host)) => match auth.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

struct Worker {
    config: postgres::Config,
    tls: Option<RustlsConnect>,
    client: Client,
    prepared: HashMap<String, Statement>,
}

impl Worker {
    fn start(
        config: postgres::Config,
        tls: Option<RustlsConnect>,
        migrates: bool,
    ) -> Result<Worker, StoreError> {
        let mut client = open(&config, tls.as_ref())?;
        if migrates {
            migrate(&mut client)?;
        }
        Ok(Worker {
            config,
            tls,
            client,
            prepared: HashMap::new(),
        })
    }

    fn run(&mut self, batch: Vec<Stmt>) -> Result<Vec<Outcome>, StoreError> {
        if self.client.is_closed() {
            self.client = open(&self.config, self.tls.as_ref())?;
            self.prepared.clear();
        }
        let result = self.transaction(&batch);
        if result.is_err() && self.client.is_closed() {
            self.prepared.clear();
        }
        result
    }

    fn transaction(&mut self, batch: &[Stmt]) -> Result<Vec<Outcome>, StoreError> {
        for s in batch {
            if !self.prepared.contains_key(&s.sql) {
                let stmt = self.client.prepare(&numbered_placeholders(&s.sql))?;
                self.prepared.insert(s.sql.clone(), stmt);
            }
        }
        let mut tx = self.client.transaction()?;
        let mut out = Vec::with_capacity(batch.len());
        for s in batch {
            let stmt = &self.prepared[&s.sql];
            let params: Vec<&(dyn ToSql + Sync)> =
                s.params.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
            out.push(match s.shape {
                Shape::Count => Outcome::Count(tx.execute(stmt, &params)?),
                Shape::Rows | Shape::Guard => {
                    let rows = tx.query(stmt, &params)?;
                    let mut got = Vec::with_capacity(rows.len());
                    for r in &rows {
                        got.push(Row((0..r.len())
                            .map(|i| value_at(r, i))
                            .collect::<Result<_, _>>()?));
                    }
                    if s.shape == Shape::Guard {
                        // Dropping `tx` rolls the transaction back.
                        Outcome::guarded(got)?
                    } else {
                        Outcome::Rows(got)
                    }
                }
            });
        }
        tx.commit()?;
        Ok(out)
    }
}

/// A connection, in TLS when the URL's `sslmode` asks for it (see [`super::pg_tls`]).
fn open(config: &postgres::Config, tls: Option<&RustlsConnect>) -> Result<Client, StoreError> {
    Ok(match tls {
        Some(t) => config.connect(t.clone())?,
        None => config.connect(NoTls)?,
    })
}

fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS tern_schema (version BIGINT NOT NULL)")?;
    let applied: i64 = match tx.query_opt("SELECT version FROM tern_schema", &[])? {
        Some(r) => r.try_get(0)?,
        None => {
            tx.execute("INSERT INTO tern_schema (version) VALUES (0)", &[])?;
            0
        }
    };
    let applied = applied_migrations(applied, MIGRATIONS.len())?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(applied) {
        tx.batch_execute(sql)?;
        let v = i64::try_from(i + 1).unwrap_or(i64::MAX);
        tx.execute("UPDATE tern_schema SET version = $1", &[&v])?;
    }
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden_in_messages() {
        assert_eq!(
            shown_url("postgres://tern:s3cret@db:5432/tern"),
            "postgres://tern:***@db:5432/tern"
        );
        assert_eq!(
            shown_url("postgres://tern@db/tern"),
            "postgres://tern@db/tern"
        );
    }
}
