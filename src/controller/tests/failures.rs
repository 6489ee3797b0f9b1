//! A job step that fails is that job's failure: the pass goes on for the others, unless the
//! failure says nothing more may be written (a deposed leader, a replaced store).

use super::*;
use crate::store::StoreError;

/// A SQLite store in `dir` whose writes of job `refused`'s record fail, as a full disk or a
/// corrupt row would for that job alone; the trigger comes off with [`allow`].
fn refusing(dir: &tempfile::TempDir, refused: &str) -> (Arc<Store>, rusqlite::Connection) {
    let path = dir.path().join("tern.db");
    let store = Arc::new(Store::open(&path).expect("store"));
    let side = rusqlite::Connection::open(&path).expect("second connection");
    side.execute_batch(&format!(
        "CREATE TRIGGER refuse BEFORE UPDATE ON jobs WHEN NEW.name = '{refused}'
         BEGIN SELECT RAISE(ABORT, 'disk refuses this row'); END;"
    ))
    .expect("trigger");
    (store, side)
}

fn allow(side: &rusqlite::Connection) {
    side.execute_batch("DROP TRIGGER refuse;")
        .expect("drop trigger");
}

fn running(ctl: &Controller, job: &str) -> usize {
    ctl.instances()
        .filter(|i| i.job == job && i.state == InstanceState::Running)
        .count()
}

#[tokio::test]
async fn a_job_whose_writes_fail_holds_up_no_other_job_and_recovers_once_they_succeed() {
    let dir = tempfile::tempdir().expect("dir");
    let (store, side) = refusing(&dir, "a");
    let sim = sim(vec![trace("us-west-2a", vec![8; 200])]);
    let (store, mut ctl) = Scenario::on(&sim, "test-owner")
        .store(store)
        .jobs([job("a", "1", false), job("b", "1", false)])
        .controller();
    for _ in 0..5 {
        sim.advance(Duration::from_secs(60));
        // Job a's failures stay job a's: every pass completes.
        ctl.pass(sim.now()).await.expect("a pass despite job a");
    }
    assert_eq!(running(&ctl, "b"), 1, "job b is placed and runs");
    assert_eq!(
        store.job("b").expect("read").expect("b").state,
        JobState::Running
    );
    let failed: u64 = ctl.stats().job_errors.values().sum();
    assert!(failed >= 1, "{:?}", ctl.stats().job_errors);
    assert_eq!(
        ctl.stats().job_errors.keys().copied().collect::<Vec<_>>(),
        ["store"]
    );
    let metrics = super::metrics::Metrics::new();
    metrics
        .update(&ctl, Duration::ZERO, sim.now())
        .expect("metrics");
    let counted = format!("tern_job_step_errors_total{{kind=\"store\"}} {failed}");
    assert!(metrics.render().contains(&counted), "{}", metrics.render());
    // What was written for a is what memory holds: its record is read back after each
    // failure. Its plan is written before its launch's intent, so a job whose record cannot
    // be written launches nothing.
    let a = store.job("a").expect("read").expect("a");
    assert_eq!(a.target_offer, None, "{a:?}");
    let held = ctl.jobs().find(|j| j.name() == "a").expect("a");
    assert_eq!(
        held.target_offer, None,
        "memory matches the store: {held:?}"
    );
    assert_eq!(ctl.open_intents(), 0);
    let tagged = sim.list("test-owner").await.expect("list");
    assert!(
        tagged.iter().all(|i| i.job() != Some("a")),
        "nothing launched for a: {tagged:?}"
    );

    allow(&side);
    run(&mut ctl, &sim, 3).await;
    let a = store.job("a").expect("read").expect("a");
    assert_eq!(a.state, JobState::Running, "{a:?}");
    assert!(a.target_offer.is_some(), "{a:?}");
    assert_eq!(running(&ctl, "a"), 1);
    assert_eq!(ctl.open_intents(), 0);
    let tagged = sim.list("test-owner").await.expect("list");
    assert_eq!(tagged.len(), 2, "{tagged:?}");
}

/// The leader loses its lease between two passes; the next pass's first write is a job's
/// step (job b's placement), and that refusal ends the pass rather than stay b's.
#[tokio::test]
async fn a_deposed_leaders_pass_stops_at_its_first_refused_write() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("tern.db");
    let store = Arc::new(Store::open(&path).expect("store"));
    let ttl = Duration::from_millis(200);
    let fence = store
        .take_lease("controller", "old", ttl, None)
        .expect("take")
        .expect("free");
    store.fence_writes(fence);
    let sim = sim(vec![trace("us-west-2a", vec![8; 200])]);
    let (store, mut ctl) = Scenario::on(&sim, "test-owner")
        .store(store)
        .jobs([job("a", "1", false)])
        .controller();
    run(&mut ctl, &sim, 3).await;
    assert_eq!(running(&ctl, "a"), 1);
    ctl.submit(job("b", "1", false), sim.now())
        .expect("submit while leading");
    std::thread::sleep(Duration::from_millis(300));
    let new = Store::open(&path).expect("second store");
    let taken = new
        .take_lease("controller", "new", ttl, None)
        .expect("take")
        .expect("expired");
    new.fence_writes(taken);

    sim.advance(Duration::from_secs(60));
    let refused = ctl
        .pass(sim.now())
        .await
        .expect_err("a deposed leader's pass ends");
    assert!(
        matches!(refused, ControllerError::Store(StoreError::Fenced(_))),
        "{refused}"
    );
    assert!(refused.ends_pass());
    assert!(
        ctl.stats().job_errors.is_empty(),
        "not left to one job: {:?}",
        ctl.stats().job_errors
    );
    let tagged = sim.list("test-owner").await.expect("list");
    assert!(
        tagged.iter().all(|i| i.job() == Some("a")),
        "nothing launched for b: {tagged:?}"
    );
    assert!(
        store.load().expect("load").intents.is_empty(),
        "no intent written"
    );
}
