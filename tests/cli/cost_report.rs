//! `tern cost-report` end to end: a controller runs jobs on `tern sim serve`; the report read
//! from its store, and from its API, bills what the simulated cloud billed; bad input gets a
//! clear error; SQLite and PostgreSQL stores holding the same history give the same report.

use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use tern::report::{self, CostQuery, GroupBy, Ledger};
use tern::store::{JobRecord, Store, pg_cluster};
use tern_cloud::{
    Capacity, Cloud, Instance, InstanceId, InstanceState, Intent, IntentId, IntentKind,
    IntentState, Offer, Tags,
};

use crate::common;
use common::{
    Reaper, free_port, sim_controller, sim_report, start_sim, submit, tern_json, wait_for,
};

const TOKEN: &str = "cost-token";

fn spec(name: &str, team: &str, workers: &str, samples: u64) -> String {
    tern_cloud::testkit::spec(name)
        .team(team)
        .workers(workers)
        .deadline(Some("24h"))
        .samples(samples)
        .section("[checkpoint]\ninterval = \"10m\"\nsize_gb = 1\nsave_seconds = 10\nrestore_seconds = 20")
        .text()
}

#[test]
fn the_report_bills_what_the_simulated_cloud_billed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state.db").display().to_string();
    let (mut reaper, sim_url) = start_sim(5);
    let ctl_addr = format!("127.0.0.1:{}", free_port());
    let server = format!("http://{ctl_addr}");
    let mut controller = Reaper(vec![sim_controller(
        &sim_url, &state, &ctl_addr, "cost", TOKEN,
    )]);
    wait_for(&ctl_addr);
    for (name, team, workers, samples) in [
        ("gang", "nlp", "2", 3_000_000u64),
        ("single", "vision", "1", 1_000_000),
    ] {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, spec(name, team, workers, samples)).expect("write spec");
        submit(&path, &server, TOKEN);
    }
    let t0 = Instant::now();
    loop {
        let v = tern_json(&["status", "--json", "--server", &server], TOKEN);
        let jobs = v["jobs"].as_array().expect("jobs").clone();
        if jobs.iter().all(|j| j["state"] == "finished") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "jobs did not finish: {v}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // Through the API (GET /v1/costs, bearer auth) while the controller runs.
    let (ok, api, err) =
        common::tern_as(TOKEN, None, &["cost-report", "--server", &server, "--json"]);
    assert!(ok, "{err}");
    let api: serde_json::Value = serde_json::from_str(api.trim()).expect("json");
    let (ok, bad, _) = common::tern_as(
        TOKEN,
        None,
        &["cost-report", "--server", &server, "--job", "nope"],
    );
    assert!(!ok && bad.is_empty());

    let sim = sim_report(&sim_url, Some(&state), TOKEN);
    drop(std::mem::replace(&mut controller, Reaper(Vec::new())));
    drop(std::mem::replace(&mut reaper, Reaper(Vec::new())));
    let (ok, out, err) = common::tern_as(
        TOKEN,
        None,
        &["cost-report", "--state", &state, "--json", "--split"],
    );
    assert!(ok, "{err}");
    let report: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    let total = &report["total"];
    let cost = total["cost"].as_f64().expect("cost");
    let hours = total["instance_hours"].as_f64().expect("hours");
    let billed = sim["billed_dollars"].as_f64().expect("billed");
    eprintln!(
        "report ${cost:.4} over {hours:.2} instance-hours; the simulated cloud billed ${billed:.4}"
    );
    assert!(cost > 0.0 && hours > 0.0, "{report}");
    assert!(
        (cost - billed).abs() <= 0.01 * hours.max(1.0),
        "report ${cost} vs billed ${billed} over {hours} instance-hours"
    );
    assert_eq!(
        total["instances"], sim["launched_instances"],
        "{report}\n{sim}"
    );
    assert_eq!(report["rows"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        report["segments"].as_array().map(Vec::len),
        total["instances"].as_u64().map(|n| n as usize)
    );
    // The API's answer is the same report.
    assert!(
        (api["total"]["cost"].as_f64().expect("api cost") - cost).abs() < 1e-6,
        "{api}"
    );
    assert_eq!(api["rows"], report["rows"]);
    // Each row's attribution (through the API too) adds up to its difference from plan.
    for row in api["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .chain([&api["total"]])
    {
        let a = row["attribution"].as_object().expect("attribution");
        let sum: f64 = a.values().map(|v| v.as_f64().expect("part")).sum();
        let diff = row["plan_error"].as_f64().expect("planned");
        assert!((sum - diff).abs() < 0.01, "{row}");
    }

    // Other groupings add up to the same total; CSV and HTML carry it too.
    for by in ["team", "day", "cloud", "capacity", "instance-type"] {
        let (ok, out, err) = common::tern_as(
            TOKEN,
            None,
            &["cost-report", "--state", &state, "--json", "--by", by],
        );
        assert!(ok, "{by}: {err}");
        let r: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
        let sum: f64 = r["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|x| x["cost"].as_f64().expect("cost"))
            .sum();
        assert!((sum - cost).abs() < 1e-6, "{by}: {sum} vs {cost}");
    }
    let (ok, csv, err) = common::tern_as(
        TOKEN,
        None,
        &["cost-report", "--state", &state, "--format", "csv"],
    );
    assert!(ok, "{err}");
    let total_line = csv
        .lines()
        .find(|l| l.starts_with("total,"))
        .expect("total row");
    assert!(
        total_line.contains(&format!("{cost:.6}")),
        "{total_line} vs {cost}"
    );
    let html = dir.path().join("report.html");
    let html_s = html.display().to_string();
    let (ok, _, err) = common::tern_as(
        TOKEN,
        None,
        &[
            "cost-report",
            "--state",
            &state,
            "--format",
            "html",
            "-o",
            &html_s,
        ],
    );
    assert!(ok, "{err}");
    let page = std::fs::read_to_string(&html).expect("html");
    assert!(page.contains(&format!("id=\"total-cost\">${cost:.2}<")));
    // The three charts, and the waterfalls of the total and of the two jobs.
    assert_eq!(page.matches("<svg").count(), 6);
    assert_eq!(page.matches("class=\"waterfall\"").count(), 3);
    assert!(page.contains("id=\"decisions\""), "no decisions section");

    // Bad input: a clear error, nothing else.
    let cases: [(&[&str], &str); 4] = [
        (
            &["--since", "2026-11-02", "--until", "2026-11-01"],
            "is after --until",
        ),
        (
            &["--job", "nope"],
            "no job named 'nope' in this store (known: gang, single)",
        ),
        (
            &["--team", "infra"],
            "no team named 'infra' in this store (known: nlp, vision)",
        ),
        (&["--since", "yesterday"], "is not a time"),
    ];
    for (extra, expected) in cases {
        let mut args = vec!["cost-report", "--state", &state];
        args.extend_from_slice(extra);
        let (ok, out, err) = common::tern_as(TOKEN, None, &args);
        assert!(!ok && out.is_empty(), "{extra:?}: {out}");
        assert!(err.contains(expected), "{extra:?}: {err}");
    }
}

#[test]
fn unreachable_servers_missing_and_newer_stores_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let (ok, _, err) = common::tern_as(
        TOKEN,
        None,
        &[
            "cost-report",
            "--server",
            &format!("http://127.0.0.1:{port}"),
        ],
    );
    assert!(
        !ok && err.contains(&format!("127.0.0.1:{port}")) && err.contains("running there"),
        "{err}"
    );

    let missing = dir.path().join("none.db").display().to_string();
    let (ok, _, err) = common::tern_as(TOKEN, None, &["cost-report", "--state", &missing]);
    assert!(!ok && err.contains("no state store at"), "{err}");
    assert!(
        !dir.path().join("none.db").exists(),
        "a report created a store"
    );

    let newer = dir.path().join("newer.db");
    drop(Store::open(&newer).expect("store"));
    let db = rusqlite::Connection::open(&newer).expect("sqlite");
    db.pragma_update(None, "user_version", 99).expect("version");
    drop(db);
    let (ok, _, err) = common::tern_as(
        TOKEN,
        None,
        &["cost-report", "--state", &newer.display().to_string()],
    );
    assert!(!ok && err.contains("use a newer tern"), "{err}");
}

fn t(h: f64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_790_000_000, 0).expect("time")
        + TimeDelta::seconds((h * 3600.0) as i64)
}

/// A V100 offer on AWS in us-east-1 (the testkit's, priced).
fn v100(zone: &str, capacity: Capacity, price: f64) -> Offer {
    tern_cloud::testkit::offer("p3.2xlarge", zone, capacity)
        .cloud(Cloud::Aws)
        .region("us-east-1")
        .price(price)
        .build()
}

/// One history written through the store's own calls: a job with three recoveries and a
/// spot price change in the middle of an interval.
fn write_history(store: &Store) {
    let spec = tern_cloud::parse_job_spec(
        "name = \"j\"\nteam = \"t\"\naccelerators = [\"V100\"]\nworkers = 1\ndeadline = \"48h\"\n\
         [work]\nsteps = 100\nbatch = 10\n",
        "j.toml",
    )
    .expect("spec");
    let mut job = JobRecord::new(spec, t(0.0));
    store.insert_job(&job, t(0.0)).expect("job");
    job.planned_cost = Some(5.0);
    store.update_job(&job, t(0.0)).expect("update");
    let spot = v100("use1-az1", Capacity::Spot, 1.0);
    store
        .record_prices(t(0.0), &[(spot.key(), 1.0)])
        .expect("price");
    store
        .record_prices(t(0.5), &[(spot.key(), 2.0)])
        .expect("price");
    for (n, (from, to, capacity)) in [
        (0.0, 1.0, Capacity::Spot),
        (1.2, 2.0, Capacity::Spot),
        (2.5, 3.0, Capacity::Spot),
        (3.0, 3.0 + 30.0 / 3600.0, Capacity::OnDemand),
    ]
    .into_iter()
    .enumerate()
    {
        let o = v100(
            "use1-az1",
            capacity,
            if capacity == Capacity::Spot { 1.0 } else { 3.0 },
        );
        let intent = Intent {
            id: IntentId::from_uuid(uuid::Uuid::from_u128(n as u128 + 1)),
            job: "j".into(),
            kind: IntentKind::Launch {
                offers: vec![o.clone()],
                count: 1,
            },
            state: IntentState::Pending,
            attempt: 0,
            created_at: t(from),
        };
        store.insert_intent(&intent).expect("intent");
        let i = Instance {
            id: InstanceId::from(format!("i-{n}").as_str()),
            offer: o.into(),
            state: InstanceState::Running,
            tags: Tags::new().into(),
            launched_at: t(from),
        };
        store
            .record_instances(
                intent.id,
                "j",
                std::slice::from_ref(&i),
                Some(3.0),
                true,
                t(from),
            )
            .expect("record");
        store.end_instance(&i.id, t(to)).expect("end");
    }
}

#[test]
fn sqlite_and_postgres_give_the_same_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = Store::open(&dir.path().join("s.db")).expect("sqlite");
    let pg = pg_cluster::PgCluster::start().expect("PostgreSQL");
    let postgres = Store::connect(&pg.create_db("costs").expect("db")).expect("postgres");
    let query = CostQuery {
        split: true,
        by: GroupBy::Job,
        ..CostQuery::default()
    };
    let mut reports = Vec::new();
    for store in [&sqlite, &postgres] {
        write_history(store);
        let ledger = Ledger::load(store, Default::default()).expect("ledger");
        reports.push(report::build(&ledger, &query, t(10.0)).expect("report"));
    }
    assert_eq!(reports[0], reports[1]);
    let r = &reports[0];
    // By hand: i-0 0–0.5 h at its launch price $1, 0.5–1 h at $2 = 1.5; i-1 0.8 h at its
    // launch price $1 (no change recorded after its launch) = 0.8; i-2 0.5 h at $1 = 0.5;
    // i-3 30 s on demand, billed as 60 s at $3 = 0.05.
    let expected = 1.5 + 0.8 + 0.5 + 0.05;
    assert_eq!(r.rows.len(), 1);
    assert_eq!(r.rows[0].instances, 4, "three recoveries, one row");
    assert!(
        (r.total.cost - expected).abs() < 1e-9,
        "{} vs {expected}",
        r.total.cost
    );
    let plan_error = r.rows[0].plan_error.expect("planned");
    assert!((plan_error - (expected - 5.0)).abs() < 1e-9, "{plan_error}");
}
