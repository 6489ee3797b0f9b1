//! `tern explain` end to end: a controller runs a job on `tern sim serve`; the timeline read
//! from its store (`--state`) is the one its API serves (`--server`), the text names every
//! decision, and an unknown job is an error naming the known ones.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common;
use common::{Reaper, free_port, sim_controller, start_sim, submit, tern_json, wait_for};

const TOKEN: &str = "explain-token";

fn json(args: &[&str]) -> serde_json::Value {
    let (ok, out, err) = common::tern_as(TOKEN, None, args);
    assert!(ok, "tern {args:?}: {err}");
    serde_json::from_str(out.trim()).expect("json")
}

#[test]
fn explain_reads_the_same_timeline_from_the_store_as_from_the_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state.db").display().to_string();
    let (mut sim, sim_url) = start_sim(7);
    let ctl_addr = format!("127.0.0.1:{}", free_port());
    let server = format!("http://{ctl_addr}");
    let mut controller = Reaper(vec![sim_controller(
        &sim_url, &state, &ctl_addr, "explain", TOKEN,
    )]);
    wait_for(&ctl_addr);
    let spec = tern_cloud::testkit::spec("bert")
        .workers("1")
        .deadline(Some("24h"))
        .samples(1_000_000)
        .text();
    let path = dir.path().join("bert.toml");
    std::fs::write(&path, spec).expect("write spec");
    submit(&path, &server, TOKEN);
    let t0 = Instant::now();
    loop {
        let v = tern_json(&["status", "--json", "--server", &server], TOKEN);
        if v["jobs"][0]["state"] == "finished" {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(90), "not finished: {v}");
        std::thread::sleep(Duration::from_millis(300));
    }
    let api = json(&["explain", "bert", "--server", &server, "--json"]);
    // TERN_SERVER names the controller as --server does (tern status reads it too).
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["explain", "bert", "--json"])
        .env("TERN_TOKEN", TOKEN)
        .env("TERN_SERVER", &server)
        .env_remove("TERN_STATE")
        .output()
        .expect("tern");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let by_env: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).expect("json");
    assert_eq!(by_env, api, "TERN_SERVER reaches the same controller");
    let (ok, _, err) = common::tern_as(TOKEN, None, &["explain", "nope", "--server", &server]);
    assert!(!ok, "an unknown job fails");
    assert!(
        err.contains("no job named 'nope'") && err.contains("bert"),
        "{err}"
    );
    drop(std::mem::replace(&mut controller, Reaper(Vec::new())));
    drop(std::mem::replace(&mut sim, Reaper(Vec::new())));

    let stored = json(&["explain", "bert", "--state", &state, "--json"]);
    assert_eq!(stored, api, "the store's timeline is the API's");
    assert_eq!(stored["job"], "bert");
    let decisions = stored["decisions"].as_array().expect("decisions");
    let kinds: Vec<&str> = decisions
        .iter()
        .map(|d| d["kind"].as_str().expect("kind"))
        .collect();
    for k in ["plan", "launch", "finish"] {
        assert!(kinds.contains(&k), "{k} in {kinds:?}");
    }
    let plan = &decisions[kinds.iter().position(|k| *k == "plan").expect("plan")];
    assert!(
        plan["numbers"]["expected_cost"].as_f64() > Some(0.0),
        "{plan}"
    );
    assert!(plan["expected_saving"].is_null() && plan["realised_saving"].is_null());

    let (ok, text, err) = common::tern_as(TOKEN, None, &["explain", "bert", "--state", &state]);
    assert!(ok, "{err}");
    assert!(
        text.starts_with(&format!("bert: {} decision(s)\n", decisions.len())),
        "{text}"
    );
    for d in decisions {
        let (kind, reason) = (d["kind"].as_str(), d["reason"].as_str());
        let (kind, reason) = (kind.expect("kind"), reason.expect("reason"));
        assert!(
            text.contains(&format!(" {kind:<9} {reason}\n")),
            "{kind}: {text}"
        );
    }

    let (ok, out, err) = common::tern_as(TOKEN, None, &["explain", "nope", "--state", &state]);
    assert!(!ok && out.is_empty(), "{out}");
    assert!(
        err.contains("no job named 'nope' in this store (known: bert)"),
        "{err}"
    );
}

/// The demo's migration, explained: the move's expected saving is the one the demo prints, and
/// the saving realised from the event log agrees with the demo's, billed from the store's usage.
#[test]
fn explain_shows_the_demos_move_with_the_saving_the_demo_billed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("demo.db").display().to_string();
    let html = dir.path().join("demo.html").display().to_string();
    let (ok, out, err) = common::tern_as(
        TOKEN,
        None,
        &["demo", "--state", &state, "--json", "--report", &html],
    );
    assert!(ok, "{err}");
    let summary: serde_json::Value =
        serde_json::from_str(out.lines().last().expect("a summary line")).expect("json");
    let moves = summary["migrations"].as_array().expect("migrations");
    assert!(!moves.is_empty(), "the demo moves a job: {summary}");
    for m in moves {
        let job = m["job"].as_str().expect("job");
        let t = json(&["explain", job, "--state", &state, "--json"]);
        let shown = t["decisions"]
            .as_array()
            .expect("decisions")
            .iter()
            .find(|d| d["kind"] == "move" && d["at"] == m["at"])
            .unwrap_or_else(|| panic!("no move at {} in {t}", m["at"]));
        assert_eq!(shown["expected_saving"], m["expected_saving"], "{shown}");
        let (got, billed) = (
            shown["realised_saving"]
                .as_f64()
                .expect("known once the job ended"),
            m["realised_saving"].as_f64().expect("billed"),
        );
        assert!(
            (got - billed).abs() <= 0.05 + 0.02 * billed.abs(),
            "explain ${got} vs the demo's bill ${billed}"
        );
        let (ok, text, err) = common::tern_as(TOKEN, None, &["explain", job, "--state", &state]);
        assert!(ok, "{err}");
        assert!(text.contains(" move      "), "{text}");
        assert!(text.contains("saving: expected $"), "{text}");
    }
}

/// `tern explain --state` only reads: beside a controller's held write lock it reads the
/// committed state, leaves the file as it was, and creates no store where there is none.
#[test]
fn explain_reads_beside_a_write_lock_and_creates_no_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    {
        let store = tern::store::Store::open(&path).expect("store");
        let spec = tern_cloud::testkit::spec("j1")
            .workers("1")
            .samples(1000)
            .build();
        let job = tern::store::JobRecord::new(spec, chrono::Utc::now());
        store.insert_job(&job, job.submitted_at).expect("job");
    }
    let before = std::fs::read(&path).expect("read");
    let writer = rusqlite::Connection::open(&path).expect("sqlite");
    writer.execute_batch("BEGIN IMMEDIATE").expect("lock");
    writer.execute("DELETE FROM jobs", []).expect("delete");
    let state = path.display().to_string();
    let t = json(&["explain", "j1", "--state", &state, "--json"]);
    assert_eq!(t, serde_json::json!({"job": "j1", "decisions": []}));
    let (ok, text, err) = common::tern_as(TOKEN, None, &["explain", "j1", "--state", &state]);
    assert!(ok && text == "j1: no decisions yet\n", "{text}{err}");
    writer.execute_batch("ROLLBACK").expect("rollback");
    drop(writer);
    assert_eq!(
        std::fs::read(&path).expect("read"),
        before,
        "the file changed"
    );

    let missing = dir.path().join("none.db");
    let (ok, _, err) = common::tern_as(
        TOKEN,
        None,
        &["explain", "j1", "--state", &missing.display().to_string()],
    );
    assert!(!ok && err.contains("--state PATH"), "{err}");
    assert!(!missing.exists(), "a store was created");
}
