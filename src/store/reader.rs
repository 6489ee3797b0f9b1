//! Readers: a store opened to read only, by every command that only reads one (`tern
//! cost-report --state`, `tern sim report --state`, and any later one): [`Store::read_only`].
//!
//! A reader never writes. It creates no store where there is none, applies no migration,
//! takes no write lock and writes none of the rows a new store gets (its identity, its agent
//! key); it reads them if they are there. SQLite: the file is opened `SQLITE_OPEN_READONLY`
//! with `PRAGMA query_only`, and since tern's stores are in WAL mode a reader reads beside a
//! controller's open write transaction instead of waiting for it. PostgreSQL: every
//! transaction of the session is `READ ONLY` (a connection option, so reconnects are too) and
//! the migration lock is never asked for. And a reader reads only the schema this tern knows:
//! an older store is not migrated under the controller that may be running on it, a newer one
//! is not misread; either way the message says what to do.

use std::path::Path;

use super::{Backend, Result, Store, StoreError, StoreUrl, postgres, sqlite, tokens};

const _: () = assert!(sqlite::SCHEMA == postgres::SCHEMA);

/// What a reader says of a store at schema `found` when this tern knows `known`.
pub(super) fn schema_message(found: i64, known: i64) -> String {
    if found <= 0 {
        format!(
            "the state store has no tern schema (an empty or foreign database) and this tern \
             reads schema {known}: point --state at a controller's store"
        )
    } else if found < known {
        format!(
            "the state store is at schema {found} and this tern reads schema {known}: run this \
             tern's `tern controller` on it once to migrate it, or use the tern that wrote it"
        )
    } else {
        format!(
            "the state store is at schema {found} and this tern reads schema {known}: it was \
             written by a newer tern; use a newer tern"
        )
    }
}

impl Store {
    /// The schema this tern reads and writes (how many migrations it knows).
    pub fn known_schema() -> i64 {
        i64::try_from(sqlite::SCHEMA).unwrap_or(i64::MAX)
    }

    /// Open whichever store `url` names to read only: the constructor for every command that
    /// only reads a store. Refuses, having written nothing, a missing SQLite file
    /// ([`StoreError::Missing`]) and a store at another schema than this tern's
    /// ([`StoreError::Schema`]). Any write through the store fails in the database itself.
    pub fn read_only(url: &StoreUrl) -> Result<Store> {
        let mut store = match url {
            StoreUrl::Sqlite(path) => Store::read_only_file(path)?,
            StoreUrl::Postgres(url) => Store::bare(
                Backend::Postgres(postgres::PgDb::connect_read_only(url)?),
                None,
            ),
        };
        let found = store.schema_version()?;
        if found != Store::known_schema() {
            return Err(StoreError::Schema {
                found,
                known: Store::known_schema(),
            });
        }
        // A controller writes these right after creating the store; one that has not yet is
        // read as a store without them (no cluster id; an agent key no token matches).
        let identity = store.query("SELECT cluster FROM identity WHERE singleton = 1", vec![])?;
        if let Some(row) = identity.first() {
            store.cluster = row.text(0)?;
        }
        let key = store.query("SELECT value FROM secrets WHERE name = 'agent_key'", vec![])?;
        store.agent_key = tokens::AgentKey(match key.first() {
            Some(row) => row.text(0)?,
            None => format!("{}{}", uuid::Uuid::new_v4(), uuid::Uuid::new_v4()),
        });
        Ok(store)
    }

    fn read_only_file(path: &Path) -> Result<Store> {
        let real = match std::fs::canonicalize(path) {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::Missing(path.display().to_string()));
            }
            Err(source) => {
                return Err(StoreError::File {
                    path: path.display().to_string(),
                    source,
                });
            }
        };
        if !real.is_file() {
            return Err(StoreError::Invalid(format!(
                "{} is not a file",
                path.display()
            )));
        }
        // The first read is where SQLite opens the WAL and its index.
        let db = sqlite::SqliteDb::open_read_only(&real)
            .and_then(|db| db.schema_version().map(|_| db))
            .map_err(|e| wal_beside(&real, e))?;
        let file = super::identity::FileIdentity::of(&real).map_err(|source| StoreError::File {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Store::bare(Backend::Sqlite(db), Some(file)))
    }
}

/// SQLite reads a WAL-mode file only with its `-wal` and `-shm` files beside it, which it
/// creates if they are not there; in a folder this user cannot write it answers "attempt to
/// write a readonly database". Say that.
fn wal_beside(path: &Path, e: StoreError) -> StoreError {
    let StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _)) = &e else {
        return e;
    };
    let cannot = matches!(
        f.code,
        rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen
    );
    let beside = |ext: &str| {
        let mut p = path.as_os_str().to_owned();
        p.push(ext);
        std::path::PathBuf::from(p).exists()
    };
    if cannot && is_wal(path) && !(beside("-wal") && beside("-shm")) {
        let folder = path.parent().unwrap_or(Path::new("."));
        return StoreError::Invalid(format!(
            "{} is a WAL-mode SQLite store, and SQLite could not create its -wal and -shm files \
             beside it ({e}): even a reader needs them. Is {} writable by this user? Let it \
             write there, or read through the controller (`--server URL`)",
            path.display(),
            folder.display()
        ));
    }
    e
}

/// Whether a SQLite file's header says WAL (file format versions, bytes 18 and 19, are 2).
fn is_wal(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 20];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| head[18] == 2 && head[19] == 2)
}

#[cfg(test)]
mod tests;
