//! Progress reports against a controller whose simulated cloud really ends instances: a
//! report counts only from a running worker of the job's current incarnation on an instance
//! the controller has not ended. Whoever else reports (an instance reclaimed, one drained and
//! gone, one the job's end or a cancel terminated, an id the controller never launched for the
//! job, another job's instance, a report naming no instance) is refused with a 4xx and moves
//! nothing: not the samples done, not the checkpoint, not the observations, not the events,
//! not the job's state.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_cloud::Cloud;
use tern_sim::cloud::SimConfig;
use tern_sim::{SimCloud, Trace};

use super::client::Client;
use super::tests::{SimTime, observation, report, serve_on, start, started};
use super::wire;
use crate::store::Store;

/// Zone a is cheap and loses all its spot capacity at 15 minutes, for good; zone b costs more
/// and never runs out.
fn reclaiming_sim() -> Arc<SimCloud> {
    let zone = |zone: &str, available: Vec<u32>, spot: f64| Trace {
        source: PathBuf::from(format!("{zone}.json")),
        cloud: Cloud::Aws,
        region: "us-west-2".into(),
        zone: zone.into(),
        gap_seconds: 300,
        available,
        prices: None,
        spot_price: Some(spot),
        on_demand_price: Some(3.06),
    };
    Arc::new(SimCloud::new(
        vec![
            zone("us-west-2a", [vec![8; 3], vec![0; 200]].concat(), 0.5),
            zone("us-west-2b", vec![8; 203], 1.5),
        ],
        SimConfig {
            start: start(),
            ..SimConfig::default()
        },
    ))
}

fn spec(name: &str, zone_b_only: bool) -> String {
    let s = tern_cloud::testkit::spec(name).deadline(Some("400h"));
    match zone_b_only {
        true => s.top("exclude = [\"us-west-2a\"]").text(),
        false => s.text(),
    }
}

/// What a refused report must leave as it was.
#[derive(Debug, Clone, PartialEq)]
struct Moved {
    state: crate::store::JobState,
    done: f64,
    checkpoint: f64,
    observations: usize,
}

fn moved(store: &Store, job: &str) -> Moved {
    let j = store.job(job).expect("read").expect("job");
    Moved {
        state: j.state,
        done: j.done_samples,
        checkpoint: j.checkpoint_samples,
        observations: store.observations(job).expect("observations").len(),
    }
}

/// Wait (advancing the cloud by `step` each time) until `until` holds of the job's status.
async fn wait_for(
    c: &Client,
    sim: &SimCloud,
    job: &str,
    step: Duration,
    what: &str,
    until: impl Fn(&wire::JobStatus) -> bool,
) -> wire::JobStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = c.job(job).await.expect("status");
        if until(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{job}: never {what}: {s:?}\n{:?}",
            c.events(0, Some(job)).await
        );
        sim.advance(step);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

/// One report that must be refused.
struct Case {
    what: &'static str,
    job: &'static str,
    instance: Option<String>,
    incarnation: Option<u64>,
    /// What it claims: (done, checkpoint).
    claims: (f64, f64),
    /// A failure with `stopped`: would fail the job if it counted.
    failure: bool,
}

/// Send `case`'s report (with a measured step, checkpointed) and check it is refused with a
/// 4xx and its job did not move.
async fn refused(c: &Client, store: &Store, case: &Case) {
    let before = moved(store, case.job);
    let mut p = report(
        case.claims.0,
        case.claims.1,
        Some(observation(case.job, 1)),
        ("", 0),
    );
    p.instance = case.instance.clone();
    p.incarnation = case.incarnation;
    p.checkpointed = true;
    if case.failure {
        p.stopped = true;
        p.failure = Some("exit status 1: CUDA error".into());
    }
    let err = c
        .progress(case.job, &p)
        .await
        .expect_err(&format!("{}: accepted", case.what));
    let code = err.status().unwrap_or(0);
    assert!((400..500).contains(&code), "{}: {err}", case.what);
    assert_eq!(
        moved(store, case.job),
        before,
        "{}: moved the job",
        case.what
    );
    let shown = c.job(case.job).await.expect("status");
    assert_eq!(
        (shown.done_samples, shown.checkpoint_samples),
        (before.done, before.checkpoint),
        "{}: moved the job's status",
        case.what
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_from_ended_foreign_or_unnamed_instances_are_refused_and_move_nothing() {
    let sim = reclaiming_sim();
    let (c, store, running) = serve_on(sim.clone(), Arc::new(SimTime(sim.clone()))).await;
    let minute = Duration::from_secs(60);
    c.submit(&spec("a", false)).await.expect("submit a");
    for job in ["b", "c", "d"] {
        c.submit(&spec(job, true)).await.expect("submit");
    }
    let (a1, ka) = started(&c, "a").await;
    let (b1, kb) = started(&c, "b").await;
    let (c1, kc) = started(&c, "c").await;
    let (d1, kd) = started(&c, "d").await;
    let total = store.job("c").expect("read").expect("c").total_samples;

    // c finishes (its last report says so: the training saved and exited at the job's work)
    // and its instance is terminated; d is cancelled.
    let mut last = report(total, total, None, (c1.as_str(), kc));
    last.checkpointed = true;
    last.stopped = true;
    c.progress("c", &last).await.expect("c's last report");
    c.cancel("d").await.expect("cancel d");
    // d's workers never answer the cancel (no agent runs here): its instance is kept for
    // them to save for the grace, then released.
    for (job, step) in [("c", Duration::ZERO), ("d", minute)] {
        wait_for(&c, &sim, job, step, "ended", |s| s.instance_ids.is_empty()).await;
    }

    // a reports from its first instance, then zone a's capacity goes: a notice, the reclaim.
    c.progress("a", &report(800.0, 500.0, None, (a1.as_str(), ka)))
        .await
        .expect("a report from a live instance");
    wait_for(&c, &sim, "a", minute, "reclaimed", |s| {
        !s.instance_ids.contains(&a1)
    })
    .await;
    for id in [&a1, &c1, &d1] {
        let gone = sim.get(&id.as_str().into()).await.expect("get");
        assert!(
            gone.is_none_or(|i| i.state == tern_cloud::InstanceState::Terminated),
            "{id} still runs in the cloud"
        );
    }
    // The ended instance's workers never said they stopped and no one has started since: the
    // incarnation is still theirs, yet their instance is gone.
    let late = |k: Option<u64>, claims: (f64, f64), failure: bool, what| Case {
        what,
        job: "a",
        instance: Some(a1.clone()),
        incarnation: k,
        claims,
        failure,
    };
    for case in [
        late(
            Some(ka),
            (6_000.0, 5_000.0),
            false,
            "reclaimed, before any replacement",
        ),
        late(
            Some(ka),
            (total, total),
            false,
            "reclaimed, claims the job is done",
        ),
        late(
            Some(ka),
            (6_000.0, 5_000.0),
            true,
            "reclaimed, claims a failure",
        ),
    ] {
        refused(&c, &store, &case).await;
    }

    // The replacement starts as a new incarnation and reports, as in the issue: 1,500 done,
    // 1,000 checkpointed.
    let s = wait_for(&c, &sim, "a", minute, "replaced", |s| {
        s.instance_ids.iter().any(|i| *i != a1)
    })
    .await;
    let a2 = s
        .instance_ids
        .iter()
        .find(|i| **i != a1)
        .expect("a2")
        .clone();
    let k2 = c.start("a", &a2, None).await.expect("start a2").incarnation;
    assert!(k2 > ka, "a new incarnation: {ka} → {k2}");
    c.progress("a", &report(1_500.0, 1_000.0, None, (a2.as_str(), k2)))
        .await
        .expect("the replacement's report");
    let marker = store
        .events(0, None)
        .expect("events")
        .last()
        .map_or(0, |e| e.id);

    let case = |what, job, instance: Option<&str>, incarnation| Case {
        what,
        job,
        instance: instance.map(str::to_string),
        incarnation,
        claims: (6_000.0, 5_000.0),
        failure: false,
    };
    let cases = [
        case(
            "reclaimed, its stale incarnation",
            "a",
            Some(a1.as_str()),
            Some(ka),
        ),
        case(
            "reclaimed, the current incarnation",
            "a",
            Some(a1.as_str()),
            Some(k2),
        ),
        case(
            "reclaimed, a future incarnation",
            "a",
            Some(a1.as_str()),
            Some(k2 + 1),
        ),
        late(Some(k2), (6_000.0, 5_000.0), true, "reclaimed, a failure"),
        case("never launched for a", "a", Some("i-0forged"), Some(k2)),
        case(
            "b's instance, a's incarnation",
            "a",
            Some(b1.as_str()),
            Some(k2),
        ),
        case(
            "b's instance, b's incarnation",
            "a",
            Some(b1.as_str()),
            Some(kb),
        ),
        case(
            "c's instance, after c ended",
            "a",
            Some(c1.as_str()),
            Some(kc),
        ),
        case("no instance, no incarnation", "a", None, None),
        case("no instance", "a", None, Some(k2)),
        case(
            "a live instance, no incarnation",
            "a",
            Some(a2.as_str()),
            None,
        ),
        case("after the job's end", "c", Some(c1.as_str()), Some(kc)),
        case("after the job's end, no instance", "c", None, None),
        case("after a cancel", "d", Some(d1.as_str()), Some(kd)),
    ];
    for case in &cases {
        refused(&c, &store, case).await;
    }
    assert_eq!(
        (moved(&store, "a").done, moved(&store, "a").checkpoint),
        (1_500.0, 1_000.0)
    );
    assert_eq!(moved(&store, "c").state, crate::store::JobState::Finished);
    assert_eq!(moved(&store, "d").state, crate::store::JobState::Cancelled);

    // The controller's end of an instance fences its workers in the same write, before any
    // view shows it gone: b's instance, ended in the store while the published view still
    // lists it, is refused too.
    store
        .end_instance(&b1.as_str().into(), sim.now())
        .expect("end");
    assert!(c.job("b").await.expect("b").instance_ids.contains(&b1));
    refused(
        &c,
        &store,
        &case("b's, ended in the store", "b", Some(b1.as_str()), Some(kb)),
    )
    .await;

    // Passes go on: nothing a refused report said reached the log.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after: Vec<_> = store
        .events(marker, None)
        .expect("events")
        .into_iter()
        .filter(|e| ["failed", "finished", "basis"].contains(&e.kind.as_str()))
        .collect();
    assert!(after.is_empty(), "{after:?}");
    assert_eq!(
        (moved(&store, "a").done, moved(&store, "a").checkpoint),
        (1_500.0, 1_000.0)
    );
    tokio::task::spawn_blocking(move || running.stop())
        .await
        .expect("join")
        .expect("stop");
}
