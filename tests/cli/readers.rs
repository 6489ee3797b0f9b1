//! The commands that only read a state store (`tern cost-report --state`, `tern sim report
//! --state`) open it read-only: they read beside a controller's write lock, refuse a store at
//! another schema without migrating it, and create no store where there is none.

use std::path::Path;
use std::time::{Duration, Instant};

use tern::store::Store;

use crate::common::{start_sim, tern_json};

const TOKEN: &str = "readers-token";

fn sha256(path: &Path) -> String {
    let bytes = std::fs::read(path).expect("read");
    let hash = ring::digest::digest(&ring::digest::SHA256, &bytes);
    hash.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn user_version(path: &Path) -> i64 {
    rusqlite::Connection::open(path)
        .expect("sqlite")
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .expect("user_version")
}

/// A store with one job, written by a controller's `Store::open` and closed.
fn store_with_a_job(path: &Path) {
    let store = Store::open(path).expect("store");
    let spec = tern_cloud::testkit::spec("j1")
        .workers("1")
        .samples(1000)
        .build();
    let job = tern::store::JobRecord::new(spec, chrono::Utc::now());
    store.insert_job(&job, job.submitted_at).expect("job");
}

#[test]
fn a_cost_report_reads_while_a_controller_holds_the_write_lock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    store_with_a_job(&path);
    // A controller's transaction in flight: the write lock held, a write not yet committed.
    let writer = rusqlite::Connection::open(&path).expect("sqlite");
    writer.execute_batch("BEGIN IMMEDIATE").expect("lock");
    writer.execute("DELETE FROM jobs", []).expect("delete");
    let t0 = Instant::now();
    let (ok, out, err) = crate::common::tern_as(
        TOKEN,
        None,
        &[
            "cost-report",
            "--state",
            &path.display().to_string(),
            "--json",
        ],
    );
    let took = t0.elapsed();
    assert!(ok, "{err}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        report["rows"][0]["key"], "j1",
        "the committed state: {report}"
    );
    writer.execute_batch("ROLLBACK").expect("rollback");
}

/// A genuinely older store: the migrations of this tree but the last, applied as the tern
/// before it did.
fn older_store(path: &Path) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/migrations");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("migrations")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    assert_eq!(files.len() as i64, Store::known_schema(), "{files:?}");
    files.pop();
    let db = rusqlite::Connection::open(path).expect("sqlite");
    db.pragma_update(None, "journal_mode", "WAL").expect("wal");
    for f in &files {
        db.execute_batch(&std::fs::read_to_string(f).expect("sql"))
            .expect("migration");
    }
    db.pragma_update(None, "user_version", files.len() as i64)
        .expect("version");
}

#[test]
fn a_cost_report_refuses_an_older_or_newer_store_and_leaves_it_as_it_was() {
    let dir = tempfile::tempdir().expect("tempdir");
    let known = Store::known_schema();

    let older = dir.path().join("older.db");
    older_store(&older);
    let before = sha256(&older);
    let (ok, _, err) = crate::common::tern_as(
        TOKEN,
        None,
        &["cost-report", "--state", &older.display().to_string()],
    );
    assert!(!ok, "an older store was read");
    assert!(
        err.contains(&format!(
            "the state store is at schema {} and this tern reads schema {known}",
            known - 1
        )) && err.contains("run this tern's `tern controller` on it once to migrate it"),
        "{err}"
    );
    assert_eq!(sha256(&older), before, "the report changed the store");
    assert_eq!(
        user_version(&older),
        known - 1,
        "the report migrated the store"
    );
    // What the message says to do works: the controller's open migrates it, then it reads.
    drop(Store::open(&older).expect("migrate"));
    let (ok, _, err) = crate::common::tern_as(
        TOKEN,
        None,
        &["cost-report", "--state", &older.display().to_string()],
    );
    assert!(ok, "{err}");

    let newer = dir.path().join("newer.db");
    store_with_a_job(&newer);
    let db = rusqlite::Connection::open(&newer).expect("sqlite");
    db.pragma_update(None, "user_version", known + 1)
        .expect("version");
    drop(db);
    let before = sha256(&newer);
    let (ok, _, err) = crate::common::tern_as(
        TOKEN,
        None,
        &["cost-report", "--state", &newer.display().to_string()],
    );
    assert!(
        !ok && err.contains(&format!(
            "the state store is at schema {} and this tern reads schema {known}",
            known + 1
        )) && err.contains("use a newer tern"),
        "{err}"
    );
    assert_eq!(sha256(&newer), before);
    assert_eq!(user_version(&newer), known + 1);
}

#[test]
fn a_sim_report_creates_no_store_where_there_is_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_sim, sim_url) = start_sim(3);
    let missing = dir.path().join("none.db");
    let (ok, _, err) = crate::common::tern_as(
        TOKEN,
        None,
        &[
            "sim",
            "report",
            "--endpoint",
            &sim_url,
            "--json",
            "--state",
            &missing.display().to_string(),
        ],
    );
    assert!(
        !ok && err.contains(&format!("no state store at {}", missing.display())),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("dir").count(),
        0,
        "a report created a file"
    );
    // And it reads a store that is there, without a lock of its own.
    let state = dir.path().join("state.db");
    store_with_a_job(&state);
    let writer = rusqlite::Connection::open(&state).expect("sqlite");
    writer.execute_batch("BEGIN IMMEDIATE").expect("lock");
    let t0 = Instant::now();
    let report = tern_json(
        &[
            "sim",
            "report",
            "--endpoint",
            &sim_url,
            "--json",
            "--state",
            &state.display().to_string(),
        ],
        TOKEN,
    );
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    assert_eq!(report["orphaned_instances"], 0, "{report}");
}
