//! The embedded backend: one SQLite file (WAL), calls serialised behind a mutex.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::config::DbConfig;
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags, params_from_iter};

use super::StoreError;
use super::sql::{Outcome, Row, Shape, Stmt, Value, applied_migrations};

/// Schema migrations, applied in order; `PRAGMA user_version` = how many are applied.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_init.sql"),
    include_str!("migrations/0002_leases.sql"),
    include_str!("migrations/0003_planned_count.sql"),
    include_str!("migrations/0004_identity.sql"),
    include_str!("migrations/0005_pool_samples.sql"),
    include_str!("migrations/0006_costs.sql"),
    include_str!("migrations/0007_workers.sql"),
    include_str!("migrations/0008_probe.sql"),
    include_str!("migrations/0009_event_fields.sql"),
    include_str!("migrations/0010_tokens_audit.sql"),
    include_str!("migrations/0011_lease_epoch.sql"),
    include_str!("migrations/0012_worker_ended.sql"),
    include_str!("migrations/0013_worker_address.sql"),
    include_str!("migrations/0014_settings.sql"),
];

/// The schema this tern knows: how many migrations it has.
pub(super) const SCHEMA: usize = MIGRATIONS.len();

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(v) => ValueRef::Integer(*v),
            Value::Real(v) => ValueRef::Real(*v),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
        }))
    }
}

#[derive(Debug)]
pub struct SqliteDb {
    conn: Mutex<Connection>,
}

impl SqliteDb {
    pub fn open(path: &Path) -> Result<SqliteDb, StoreError> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        Self::migrate(conn)
    }

    /// Open an existing file to read only: no create, no migration, no journal-mode change,
    /// `query_only` on, and no checkpoint when it closes. In WAL mode (every store tern
    /// creates) it reads beside a writer's open transaction without waiting for its lock.
    pub fn open_read_only(path: &Path) -> Result<SqliteDb, StoreError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
        conn.pragma_update(None, "query_only", true)?;
        Ok(SqliteDb {
            conn: Mutex::new(conn),
        })
    }

    pub fn in_memory() -> Result<SqliteDb, StoreError> {
        Self::migrate(Connection::open_in_memory()?)
    }

    fn migrate(mut conn: Connection) -> Result<SqliteDb, StoreError> {
        let applied: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let applied = applied_migrations(applied, MIGRATIONS.len())?;
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
        Ok(SqliteDb {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn()
            .pragma_query_value(None, "user_version", |r| r.get(0))?)
    }

    /// Run the statements in order; more than one run in one transaction.
    pub fn run(&self, batch: Vec<Stmt>) -> Result<Vec<Outcome>, StoreError> {
        let mut conn = self.conn();
        if batch.len() == 1 {
            return batch.iter().map(|s| one(&conn, s)).collect();
        }
        let tx = conn.transaction()?;
        let out = batch
            .iter()
            .map(|s| one(&tx, s))
            .collect::<Result<Vec<_>, _>>()?;
        tx.commit()?;
        Ok(out)
    }
}

fn one(conn: &Connection, s: &Stmt) -> Result<Outcome, StoreError> {
    let mut stmt = conn.prepare_cached(&s.sql)?;
    let params = params_from_iter(s.params.iter());
    match s.shape {
        Shape::Count => Ok(Outcome::Count(stmt.execute(params)? as u64)),
        Shape::Rows | Shape::Guard => {
            let width = stmt.column_count();
            let mut rows = stmt.query(params)?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                let mut row = Vec::with_capacity(width);
                for i in 0..width {
                    row.push(match r.get_ref(i)? {
                        ValueRef::Null => Value::Null,
                        ValueRef::Integer(v) => Value::Int(v),
                        ValueRef::Real(v) => Value::Real(v),
                        ValueRef::Text(t) | ValueRef::Blob(t) => {
                            Value::Text(String::from_utf8_lossy(t).into_owned())
                        }
                    });
                }
                out.push(Row(row));
            }
            if s.shape == Shape::Guard {
                return Outcome::guarded(out);
            }
            Ok(Outcome::Rows(out))
        }
    }
}
