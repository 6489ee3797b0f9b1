//! A reader never writes: not beside a writer's lock, not to an older or newer store, not a
//! missing file, not through PostgreSQL.

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};

use super::super::pg_cluster::PgCluster;
use super::super::{JobRecord, Store, StoreError, StoreUrl};

fn job(name: &str) -> JobRecord {
    let t0 = Utc.timestamp_opt(1_800_000_000, 0).single().expect("time");
    JobRecord::new(
        tern_cloud::testkit::spec(name)
            .workers("1")
            .samples(1000)
            .build(),
        t0,
    )
}

/// A writer's store at `path` with one job, closed.
fn written(path: &Path) {
    let store = Store::open(path).expect("store");
    let j = job("j1");
    store.insert_job(&j, j.submitted_at).expect("job");
}

fn reader(path: &Path) -> Result<Store, StoreError> {
    Store::read_only(&StoreUrl::Sqlite(path.to_path_buf()))
}

/// Every file in `dir`: its name, size and SHA-256 (hex).
fn files(dir: &Path) -> Vec<(String, usize, String)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| {
            let e = e.expect("entry");
            let bytes = std::fs::read(e.path()).expect("read");
            let hash = ring::digest::digest(&ring::digest::SHA256, &bytes);
            let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
            (
                e.file_name().to_string_lossy().into_owned(),
                bytes.len(),
                hex,
            )
        })
        .collect();
    out.sort();
    out
}

/// `dir` as it was (`before`), except what SQLite keeps beside a WAL-mode file to read it:
/// the `-shm` index, and a `-wal` that may appear but gains no frame.
fn assert_untouched(dir: &Path, before: &[(String, usize, String)]) {
    let after = files(dir);
    let data = |fs: &[(String, usize, String)]| -> Vec<(String, usize, String)> {
        fs.iter()
            .filter(|(n, ..)| !n.ends_with("-wal") && !n.ends_with("-shm"))
            .cloned()
            .collect()
    };
    assert_eq!(data(&after), data(before), "the store's file changed");
    let wal = |fs: &[(String, usize, String)]| -> Option<(usize, String)> {
        fs.iter()
            .find(|(n, ..)| n.ends_with("-wal"))
            .map(|(_, len, hash)| (*len, hash.clone()))
    };
    match (wal(before), wal(&after)) {
        (None, None) | (None, Some((0, _))) => {}
        (was, now) => assert_eq!(was, now, "a reader wrote to the log"),
    }
}

fn user_version(path: &Path) -> i64 {
    rusqlite::Connection::open(path)
        .expect("sqlite")
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .expect("user_version")
}

#[test]
fn a_sqlite_reader_reads_beside_a_held_write_lock_and_cannot_write() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("s.db");
    written(&path);
    // Another connection holds the write lock with a write in flight, as a controller's
    // transaction does.
    let writer = rusqlite::Connection::open(&path).expect("sqlite");
    writer.execute_batch("BEGIN IMMEDIATE").expect("lock");
    writer
        .execute("DELETE FROM jobs", [])
        .expect("uncommitted delete");
    let t0 = Instant::now();
    let store = reader(&path).expect("a reader opens beside the lock");
    let jobs = store.load().expect("a reader reads beside the lock").jobs;
    let took = t0.elapsed();
    assert_eq!(jobs.len(), 1, "the committed state, not the open write");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(
        store.schema_version().expect("version"),
        Store::known_schema()
    );
    assert!(
        !store.cluster_id().is_empty(),
        "the writer's identity is read"
    );
    writer.execute_batch("ROLLBACK").expect("rollback");

    // Nothing writes through a reader, whichever way it is asked.
    let before = files(dir.path());
    let j = job("j2");
    let err = store
        .insert_job(&j, j.submitted_at)
        .expect_err("a reader cannot write");
    assert!(
        matches!(
            &err,
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _))
                if f.code == rusqlite::ErrorCode::ReadOnly
        ),
        "{err:?}"
    );
    drop(store);
    assert_untouched(dir.path(), &before);
}

#[test]
fn a_reader_refuses_an_older_or_newer_schema_and_leaves_the_file_as_it_was() {
    let known = Store::known_schema();
    for (at, says) in [
        (known - 1, "run this tern's `tern controller` on it once"),
        (known + 1, "use a newer tern"),
        (0, "no tern schema"),
    ] {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.db");
        written(&path);
        let db = rusqlite::Connection::open(&path).expect("sqlite");
        db.pragma_update(None, "user_version", at).expect("version");
        drop(db);
        let before = files(dir.path());
        let err = reader(&path).expect_err("another schema is refused");
        assert!(
            matches!(err, StoreError::Schema { found, known: k } if found == at && k == known),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains(says), "{msg}");
        if at > 0 {
            assert!(
                msg.contains(&format!(
                    "at schema {at} and this tern reads schema {known}"
                )),
                "{msg}"
            );
        }
        assert_untouched(dir.path(), &before);
        assert_eq!(user_version(&path), at);
    }
}

#[test]
fn a_reader_creates_no_store_and_writes_no_identity() {
    let dir = tempfile::tempdir().expect("dir");
    let missing = dir.path().join("none.db");
    let err = reader(&missing).expect_err("nothing there");
    assert!(matches!(err, StoreError::Missing(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("no state store at {}", missing.display())
    );
    assert!(files(dir.path()).is_empty(), "a reader created a file");

    // A store a controller has migrated but not yet given its identity and agent key: read
    // as it is, nothing added.
    let path = dir.path().join("s.db");
    written(&path);
    let db = rusqlite::Connection::open(&path).expect("sqlite");
    db.execute_batch("DELETE FROM identity; DELETE FROM secrets")
        .expect("bare");
    drop(db);
    let before = files(dir.path());
    let store = reader(&path).expect("a store without identity is readable");
    assert_eq!(store.cluster_id(), "");
    assert_eq!(store.load().expect("load").jobs.len(), 1);
    // Its agent key is its own, in memory: no token another process derived passes.
    let writer_key = Store::in_memory().expect("store");
    assert!(store.agent_job(&writer_key.agent_token("j1")).is_none());
    drop(store);
    assert_untouched(dir.path(), &before);
    let rows: i64 = rusqlite::Connection::open(&path)
        .expect("sqlite")
        .query_row(
            "SELECT (SELECT COUNT(*) FROM identity) + (SELECT COUNT(*) FROM secrets)",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(rows, 0);
}

fn pg_version(url: &str) -> Option<i64> {
    let mut c = ::postgres::Client::connect(url, ::postgres::NoTls).expect("connect");
    let exists: bool = c
        .query_one("SELECT to_regclass('tern_schema') IS NOT NULL", &[])
        .expect("regclass")
        .get(0);
    exists.then(|| {
        c.query_one("SELECT version FROM tern_schema", &[])
            .expect("version")
            .get(0)
    })
}

/// On PostgreSQL a reader's every transaction is read-only (the server refuses a write with
/// 25006), it migrates nothing (an empty database stays empty, an older one older), and it
/// does not wait for the migration lock a starting controller holds.
#[test]
fn a_postgres_reader_cannot_write_and_does_not_migrate() {
    let cluster = PgCluster::start().expect("PostgreSQL");
    let url = cluster.create_db("reader").expect("db");
    let pg = |url: &str| Store::read_only(&StoreUrl::Postgres(url.to_string()));

    // An empty database: refused, and left without a schema table.
    let err = pg(&url).expect_err("no schema");
    assert!(
        matches!(err, StoreError::Schema { found: 0, .. }),
        "{err:?}"
    );
    assert_eq!(pg_version(&url), None, "a reader created tern_schema");

    let writer = Store::connect(&url).expect("writer");
    let j = job("j1");
    writer.insert_job(&j, j.submitted_at).expect("job");
    // A controller starting on this database holds the migration lock: a reader does not
    // wait for it.
    let mut blocker = ::postgres::Client::connect(&url, ::postgres::NoTls).expect("connect");
    blocker
        .execute(
            "SELECT pg_advisory_lock($1)",
            &[&super::super::postgres::MIGRATION_LOCK],
        )
        .expect("lock");
    let (tx, rx) = std::sync::mpsc::channel();
    let u = url.clone();
    std::thread::spawn(move || {
        let _ = tx.send(Store::read_only(&StoreUrl::Postgres(u)));
    });
    let store = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the reader waited for the migration lock")
        .expect("reader");
    assert_eq!(store.load().expect("load").jobs.len(), 1);
    assert_eq!(store.cluster_id(), writer.cluster_id());

    let j = job("j2");
    let err = store
        .insert_job(&j, j.submitted_at)
        .expect_err("a reader cannot write");
    let StoreError::Postgres(e) = &err else {
        panic!("{err:?}");
    };
    assert_eq!(
        e.code(),
        Some(&::postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION),
        "{err}"
    );
    assert!(err.to_string().contains("25006"), "{err}");

    // An older store is refused and stays older.
    let known = Store::known_schema();
    blocker
        .execute("UPDATE tern_schema SET version = $1", &[&(known - 1)])
        .expect("older");
    let err = pg(&url).expect_err("older is refused");
    assert!(
        matches!(err, StoreError::Schema { found, .. } if found == known - 1),
        "{err:?}"
    );
    assert_eq!(pg_version(&url), Some(known - 1));
    blocker
        .execute("UPDATE tern_schema SET version = $1", &[&(known + 1)])
        .expect("newer");
    let err = pg(&url).expect_err("newer is refused");
    assert!(err.to_string().contains("use a newer tern"), "{err}");
    assert_eq!(pg_version(&url), Some(known + 1));
}
