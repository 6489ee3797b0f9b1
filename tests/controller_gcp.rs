//! `tern controller --provider gcp` end to end against the fake Compute API (the real
//! google-cloud-rust clients inside tern, the fake REST server in this test): a job is
//! submitted, planned on the zones' offers, launched with `instances.insert`, preempted (a
//! `compute.instances.preempted` zone operation), relaunched, trained by a test agent, and its
//! instance deleted when it finishes.

#![cfg(all(feature = "gcp", feature = "test-util"))]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{
    Reaper, free_port, submit_t4_small, tern_json, train_with_agent, wait_finished_and_released,
    wait_for,
};
use tern_gcp::fake::{FakeCompute, FakeZone};

const TOKEN: &str = "gcp-scenario-token";
const OWNER: &str = "tern-scenario";
const PROJECT: &str = "tern-scenario";

fn zones() -> Vec<FakeZone> {
    ["us-central1-a", "us-central1-b"]
        .into_iter()
        .map(|z| FakeZone {
            name: z.into(),
            region: "us-central1".into(),
            machine_types: vec![("n1-highmem-8".into(), 8, 53248)],
            accelerators: vec!["nvidia-tesla-t4".into()],
            tpu_types: Vec::new(),
        })
        .collect()
}

/// Names of the live VMs tern launched for the job (our owner label and an intent).
fn ours(fake: &FakeCompute) -> Vec<String> {
    fake.instances()
        .into_iter()
        .filter(|i| i.2.get("tern-owner").map(String::as_str) == Some(OWNER))
        .filter(|i| i.2.contains_key("tern-intent"))
        .map(|i| format!("{}/{}", i.0, i.1))
        .collect()
}

/// Wait up to 60 s for `ok`; on a timeout, show the controller's last log lines.
fn wait_until(what: &str, log: &std::path::Path, mut ok: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        if t0.elapsed() > Duration::from_secs(60) {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            panic!(
                "timed out: {what}; the controller's last lines:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_job_survives_a_preemption_and_runs_to_the_end_on_gcp_via_the_fake_api() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let fake = runtime
        .block_on(FakeCompute::start(PROJECT, zones()))
        .expect("fake Compute API");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut reaper = Reaper(Vec::new());
    let addr = format!("127.0.0.1:{}", free_port());
    let server = format!("http://{addr}");
    let log = dir.path().join("controller.log");
    reaper.0.push(
        Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["controller", "--provider", "gcp", "--project", PROJECT])
            .args(["--region", "us-central1", "--gcp-endpoint", &fake.endpoint])
            .args(["--gcp-anonymous", "--owner", OWNER, "--listen", &addr])
            .args(["--period", "0.2"])
            .arg("--state")
            .arg(dir.path().join("state.db"))
            .env("TERN_DB", dir.path().join("prices.db"))
            .env("TERN_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("controller"),
    );
    wait_for(&addr);

    submit_t4_small(dir.path(), &server, TOKEN);

    // Planned on the fake's zones and launched through instances.insert, labelled.
    wait_until("a first instance, known to the controller", &log, || {
        let v = tern_json(&["status", "--json", "--server", &server], TOKEN);
        ours(&fake).len() == 1 && v["jobs"][0]["instances"].as_u64() == Some(1)
    });
    let first = ours(&fake).remove(0);
    let (zone, name) = first.split_once('/').expect("zone/name");
    let vm = fake.instance(zone, name).expect("vm");
    for key in ["tern-owner", "tern-intent", "tern-job", "tern-cluster"] {
        assert!(vm["labels"][key].is_string(), "{key} missing: {vm}");
    }
    assert_eq!(vm["scheduling"]["onHostMaintenance"], "TERMINATE");
    // A VM of this store that no intent accounts for (a leak), and one with our owner label
    // from another store (foreign): the leak collector deletes the first only.
    let cluster = vm["labels"]["tern-cluster"]
        .as_str()
        .expect("cluster")
        .to_owned();
    fake.put_instance(
        "us-central1-b",
        "tern-leaked",
        &[("tern-owner", OWNER), ("tern-cluster", &cluster)],
    );
    fake.put_instance(
        "us-central1-b",
        "tern-foreign",
        &[("tern-owner", OWNER), ("tern-cluster", "another-store")],
    );
    assert!(
        fake.calls()
            .iter()
            .filter(|c| c.0 == "POST")
            .all(|c| c.2.is_some()),
        "every launch carries a requestId: {:?}",
        fake.calls()
    );

    // GCE preempts it: the controller reads the zone operation during the VM's 30 s of
    // soft-off, asks for a checkpoint and launches a replacement; then the VM goes.
    assert!(fake.preempt(zone, name));
    let client = tern::api::client::Client::new(
        &server,
        Some(TOKEN.into()),
        tern::http::client().expect("http"),
    )
    .expect("client");
    wait_until("the preemption in the events", &log, || {
        let events = runtime.block_on(client.events(0, None)).expect("events");
        events
            .iter()
            .any(|e| e.kind == "notice" && e.message.contains(&first))
    });
    wait_until("a replacement", &log, || {
        ours(&fake).iter().any(|id| *id != first)
    });
    assert!(fake.reclaim(zone, name));
    wait_until("only the replacement left", &log, || {
        let now = ours(&fake);
        now.len() == 1 && now[0] != first
    });

    // The notice asked the job to checkpoint: an agent run that still sees the drain (the
    // preempted VM's, had it lived its 30 s) checkpoints and stops; the next one (the
    // replacement's) trains to the end.
    for _ in 0..3 {
        train_with_agent(dir.path(), "t4-small", 100_000, &server, TOKEN);
        let v = tern_json(&["status", "--json", "--server", &server], TOKEN);
        if v["jobs"][0]["done_samples"].as_f64() == Some(100_000.0) {
            break;
        }
    }

    // Finished: the controller deletes its VM (the two planted VMs aside).
    let job = wait_finished_and_released(&server, TOKEN, || ours(&fake).len());
    assert_eq!(job["progress"], 1.0, "{job}");
    let deletes = fake.calls().iter().filter(|c| c.0 == "DELETE").count();
    assert!(deletes >= 1, "{:?}", fake.calls());
    // The leak goes after its 30 s grace; the foreign VM stays.
    wait_until("the leak collected", &log, || {
        fake.instance("us-central1-b", "tern-leaked").is_none()
    });
    assert!(fake.instance("us-central1-b", "tern-foreign").is_some());
}

/// `tern offers … --json --limit 0` rows, keyed by zone, type, accelerators.
fn offer_rows(extra: &[&str]) -> std::collections::BTreeMap<String, serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["offers", "--cloud", "gcp", "--region", "us-central1"])
        .args(["--json", "--limit", "0"])
        .args(extra)
        .output()
        .expect("tern offers");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    v["offers"]
        .as_array()
        .expect("offers")
        .iter()
        .map(|r| {
            let key = format!("{}/{}/{}", r["zone"], r["instance_type"], r["accelerator"]);
            (key, r.clone())
        })
        .collect()
}

#[test]
fn live_offers_agree_with_the_bundled_catalog_where_the_billing_catalog_does() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let fake = runtime
        .block_on(FakeCompute::start(PROJECT, zones()))
        .expect("fake");
    let catalog = tern_pricing::bundled().expect("catalog");
    fake.set_skus(tern_gcp::fake::skus_from_catalog(
        &catalog.offers,
        "us-central1-a",
    ));
    let live = offer_rows(&[
        "--live",
        "--project",
        PROJECT,
        "--gcp-endpoint",
        &fake.endpoint,
        "--gcp-anonymous",
    ]);
    let bundled = offer_rows(&[]);
    // The fake sells n1-highmem-8 + T4 in two zones: those rows, at the catalog's prices.
    assert_eq!(live.len(), 2, "{live:?}");
    for (key, row) in &live {
        let same = bundled
            .get(key)
            .unwrap_or_else(|| panic!("{key} not in the catalog"));
        for field in ["on_demand_per_hour", "spot_per_hour"] {
            let (a, b) = (row[field].as_f64(), same[field].as_f64());
            assert!(
                matches!((a, b), (Some(a), Some(b)) if (a - b).abs() < 1e-4),
                "{key} {field}: live {a:?} vs catalog {b:?}"
            );
        }
    }
    // Without the fake's credentials flag the CLI says what it needs.
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["offers", "--cloud", "gcp", "--live"])
        .output()
        .expect("tern offers");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--region"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bad_gcp_flags_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["controller", "--provider", "gcp", "--listen", "127.0.0.1:0"])
            .args(args)
            .arg("--state")
            .arg(dir.path().join("state.db"))
            .env("TERN_TOKEN", TOKEN)
            .env_remove("GOOGLE_CLOUD_PROJECT")
            .output()
            .expect("tern controller");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let e = run(&["--region", "us-central1"]);
    assert!(e.contains("--project"), "{e}");
    let e = run(&["--project", "p"]);
    assert!(e.contains("--region"), "{e}");
    let e = run(&[
        "--project",
        "p",
        "--region",
        "us-central1",
        "--zone",
        "europe-west4-a",
    ]);
    assert!(
        e.contains("europe-west4-a") && e.contains("us-central1"),
        "{e}"
    );
}
