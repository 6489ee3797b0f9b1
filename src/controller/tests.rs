//! Scenario tests of the reconcile loop on the simulated cloud, including crashes at the two
//! dangerous points (after the intent is written, after the cloud acted) and a leak.

use std::sync::Mutex;

use chrono::TimeZone;
use tern_cloud::{Cloud, IdempotencyKey, Instance, InstanceState};
use tern_sim::cloud::SimConfig;
use tern_sim::{Asked, Intercepted, SimCloud, Trace, Verdict};

use super::world::SimWorld;
use super::*;
use crate::store::JobState;
use tern_cloud::{Capacity, IntentKind, IntentState, LaunchRequest, Tags, tag};

fn trace(zone: &str, data: Vec<u32>) -> Trace {
    Trace {
        spot_price: Some(0.9),
        ..tern_sim::testkit::trace(zone, data)
    }
}

pub(super) fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0)
        .single()
        .expect("time")
}

pub(super) fn sim(zones: Vec<Trace>) -> Arc<SimCloud> {
    Arc::new(SimCloud::new(
        zones,
        SimConfig {
            start: start(),
            boot: Duration::from_secs(60),
            ..SimConfig::default()
        },
    ))
}

fn job(name: &str, workers: &str, gang: bool) -> JobSpec {
    tern_cloud::testkit::spec(name)
        .workers(workers)
        .gang(gang)
        .build()
}

fn config() -> ControllerConfig {
    ControllerConfig::new("test-owner", vec![Region::new("us-west-2")])
}

/// The sim behind a hook that records every launch's key and loses the answer of the first
/// launch, as if the controller died right after the cloud acted and before it wrote the
/// outcome down.
fn forgetful(inner: Arc<SimCloud>) -> (Arc<Intercepted>, Arc<Mutex<Vec<IdempotencyKey>>>) {
    let keys = Arc::new(Mutex::new(Vec::new()));
    let lose = Mutex::new(true);
    let seen = keys.clone();
    let provider = Intercepted::new(inner).on_call(move |asked| match asked {
        Asked::Launch(request) => {
            seen.lock().expect("lock").push(request.key);
            if std::mem::take(&mut *lose.lock().expect("lock")) {
                Verdict::Lose(ProviderError::Transient {
                    message: "connection reset after the request was sent".into(),
                })
            } else {
                Verdict::Forward
            }
        }
        _ => Verdict::Forward,
    });
    (Arc::new(provider), keys)
}

/// Terminate calls seen by [`intent_checked`]: how many an open intent asked for, and the ids
/// of those none did.
#[derive(Debug, Default)]
struct Terminations {
    by_intent: usize,
    without: Vec<InstanceId>,
}

/// `inner` with every terminate call checked against `store` as the cloud is called: an open
/// `terminate` or `migrate` intent must already list the instance (ARCHITECTURE.md, invariant
/// 1: every termination is an intent written before the provider is called).
fn intent_checked(
    inner: Arc<dyn Provider>,
    store: Arc<Store>,
) -> (Arc<Intercepted>, Arc<Mutex<Terminations>>) {
    let seen = Arc::new(Mutex::new(Terminations::default()));
    let record = seen.clone();
    let provider = Intercepted::new(inner).on_call(move |asked| {
        let Asked::Terminate(id) = asked else {
            return Verdict::Forward;
        };
        let open = store.load().expect("load").intents;
        let asked_for = open.iter().any(|i| {
            i.state == IntentState::Pending
                && match &i.kind {
                    IntentKind::Terminate { instances } => instances.contains(id),
                    IntentKind::Migrate { from, .. } => from.contains(id),
                    _ => false,
                }
        });
        let mut seen = record.lock().expect("lock");
        if asked_for {
            seen.by_intent += 1;
        } else {
            seen.without.push(id.clone());
        }
        Verdict::Forward
    });
    (Arc::new(provider), seen)
}

/// `passes` minutes of virtual time with no workers, one pass at the end of each.
async fn run(ctl: &mut Controller, sim: &SimCloud, passes: usize) {
    for _ in 0..passes {
        sim.advance(Duration::from_secs(60));
        ctl.pass(sim.now()).await.expect("pass");
    }
}

#[tokio::test]
async fn a_lost_launch_answer_is_recovered_after_restart_without_a_duplicate() {
    let sim = sim(vec![trace("us-west-2a", vec![8; 200])]);
    let (provider, keys) = forgetful(sim.clone());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let store = Arc::new(Store::open(&path).expect("store"));
    let mut ctl = Controller::open(store, provider.clone(), config()).expect("open");
    ctl.submit(job("elastic", "{ min = 2, max = 4 }", false), sim.now())
        .expect("submit");
    ctl.pass(sim.now()).await.expect("pass");
    // The cloud launched, the controller never heard: the intent is open, nothing recorded.
    assert_eq!(ctl.open_intents(), 1);
    assert_eq!(ctl.instances().count(), 0);
    let launched = sim.list("test-owner").await.expect("list").len();
    assert!(launched >= 2, "the sim did launch: {launched}");
    drop(ctl);

    // Restart from the same file: the open intent is replayed with the same key.
    let store = Arc::new(Store::open(&path).expect("reopen"));
    let mut ctl = Controller::open(store.clone(), provider.clone(), config()).expect("open");
    assert_eq!(ctl.open_intents(), 1);
    run(&mut ctl, &sim, 3).await;
    assert_eq!(ctl.open_intents(), 0);
    assert_eq!(ctl.instances().count(), launched);
    assert_eq!(
        sim.list("test-owner").await.expect("list").len(),
        launched,
        "no second launch for the same intent"
    );
    let keys = keys.lock().expect("lock").clone();
    assert_eq!(keys.len(), 2, "one call before the crash, one replay after");
    assert_eq!(
        keys[0], keys[1],
        "the replay sends the same idempotency key"
    );
    assert_eq!(ctl.stats().leaks_collected, 0);
    assert!(store.usage().expect("usage").len() == launched);
}

#[tokio::test]
async fn an_intent_written_before_a_crash_is_carried_out_once_after_restart() {
    let sim = sim(vec![trace("us-west-2a", vec![8; 200])]);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let store = Arc::new(Store::open(&path).expect("store"));
    let mut ctl = Controller::open(store.clone(), sim.clone(), config()).expect("open");
    ctl.submit(job("g", "4", true), sim.now()).expect("submit");
    // Write an intent and "crash" before calling the cloud.
    let offers = sim.offers(&Region::new("us-west-2")).await.expect("offers");
    let spot: Vec<Offer> = offers
        .into_iter()
        .filter(|o| o.capacity == Capacity::Spot)
        .collect();
    let intent = ctl
        .new_intent(
            "g",
            IntentKind::Launch {
                offers: spot,
                count: 4,
            },
            sim.now(),
        )
        .expect("intent");
    drop(ctl);
    assert!(sim.list("test-owner").await.expect("list").is_empty());

    let mut ctl = Controller::open(store.clone(), sim.clone(), config()).expect("open");
    run(&mut ctl, &sim, 2).await;
    let fleet = sim.list("test-owner").await.expect("list");
    assert_eq!(fleet.len(), 4, "exactly the intent's four, no plan on top");
    assert!(fleet.iter().all(|i| i.intent_id() == Some(intent.id)));
    assert_eq!(
        store.intent_state(intent.id).expect("state"),
        Some(IntentState::Done)
    );
    assert_eq!(ctl.job("g").map(|j| j.state), Some(JobState::Running));
}

#[tokio::test]
async fn an_unowned_tagged_instance_is_collected_after_the_grace() {
    let sim = sim(vec![trace("us-west-2a", vec![8; 200])]);
    let store = Arc::new(Store::in_memory().expect("store"));
    let (provider, terminations) = intent_checked(sim.clone(), store.clone());
    let mut ctl = Controller::open(store.clone(), provider, config()).expect("open");
    let offers = sim.offers(&Region::new("us-west-2")).await.expect("offers");
    let stray = IntentId::from_uuid(uuid::Uuid::from_u128(99));
    let mut tags = Tags::new();
    tags.insert(tag::OWNER.into(), "test-owner".into());
    tags.insert(tag::INTENT.into(), stray.to_string());
    tags.insert(tag::CLUSTER.into(), store.cluster_id().into());
    sim.launch(&LaunchRequest {
        key: IdempotencyKey::derive(stray, 0),
        intent: stray,
        job: "ghost".into(),
        offers: vec![offers[1].clone()],
        count: 1,
        min_count: 1,
        single_zone: false,
        tags,
        template: None,
        disk_gb: None,
    })
    .await
    .expect("launch");
    ctl.pass(sim.now()).await.expect("pass");
    assert_eq!(
        sim.list("test-owner").await.expect("list").len(),
        1,
        "grace first"
    );
    sim.advance(Duration::from_secs(31));
    ctl.pass(sim.now()).await.expect("pass");
    assert!(sim.list("test-owner").await.expect("list").is_empty());
    assert_eq!(ctl.stats().leaks_collected, 1);
    assert_eq!(ctl.stats().terminations, 1);
    let t = terminations.lock().expect("lock");
    assert_eq!((t.by_intent, t.without.len()), (1, 0), "{t:?}");
    let events = ctl.typed_events(None).expect("events");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::LeakCollected { .. })),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Terminated { ids, .. } if ids.len() == 1)),
        "{events:?}"
    );
}

#[tokio::test]
async fn another_stores_instances_are_reported_never_collected_unless_adopted() {
    let sim = sim(vec![trace("us-west-2a", vec![8; 400])]);
    let first = Arc::new(Store::in_memory().expect("store"));
    let mut a = Controller::open(first.clone(), sim.clone(), config()).expect("open");
    a.submit(job("mine", "4", true), sim.now()).expect("submit");
    run(&mut a, &sim, 5).await;
    let fleet = sim.list("test-owner").await.expect("list");
    assert_eq!(
        fleet.len(),
        4,
        "the first controller runs its job: {:?}",
        first.events(0, None).expect("events")
    );
    assert!(
        fleet
            .iter()
            .all(|i| i.cluster() == Some(first.cluster_id()))
    );

    // A second controller with the same owner but another store (a lost or swapped state
    // file, or a second deployment): it must not touch the first one's fleet.
    let second = Arc::new(Store::in_memory().expect("store"));
    assert_ne!(first.cluster_id(), second.cluster_id());
    let mut b = Controller::open(second.clone(), sim.clone(), config()).expect("open");
    run(&mut b, &sim, 10).await;
    assert_eq!(sim.list("test-owner").await.expect("list").len(), 4);
    assert_eq!(b.stats().leaks_collected, 0);
    assert_eq!(b.foreign_instances(), 4);
    let reported = second.events(0, None).expect("events");
    let foreign: Vec<_> = reported.iter().filter(|e| e.kind == "foreign").collect();
    assert_eq!(foreign.len(), 4, "each reported once: {foreign:?}");
    // Typed: the other store's id; and the message tells the operator what to do.
    let typed = b.typed_events(None).expect("events");
    assert!(typed.iter().any(|e| matches!(
        e,
        Event::ForeignInstance { cluster: Some(c), .. } if c == first.cluster_id()
    )));
    assert!(foreign[0].message.contains("--adopt"));

    // Told to adopt, it collects them as its own leaks (after the grace).
    let mut adopting = Controller::open(
        second,
        sim.clone(),
        ControllerConfig {
            adopt_foreign: true,
            ..config()
        },
    )
    .expect("open");
    run(&mut adopting, &sim, 2).await;
    assert!(sim.list("test-owner").await.expect("list").is_empty());
    assert_eq!(adopting.stats().leaks_collected, 4);
}

#[tokio::test]
async fn a_notice_drains_at_once_and_the_elastic_job_keeps_its_survivors() {
    // Zone a: 4 spot nodes, then only 2 from tick 6 (30 min); zone b: plenty.
    let mut a = vec![4; 6];
    a.extend(vec![2; 200]);
    let sim = sim(vec![
        trace("us-west-2a", a),
        trace(
            "us-west-2b",
            vec![0; 3].into_iter().chain(vec![8; 200]).collect(),
        ),
    ]);
    let store = Arc::new(Store::in_memory().expect("store"));
    let mut ctl = Controller::open(store.clone(), sim.clone(), config()).expect("open");
    ctl.submit(job("elastic", "{ min = 2, max = 4 }", false), sim.now())
        .expect("submit");
    let mut workload = workload::Workload::new();
    let mut drained_at = None;
    for _ in 0..60 {
        sim.advance(Duration::from_secs(60));
        let now = sim.now();
        ctl.pass(now).await.expect("pass");
        if drained_at.is_none() && ctl.job("elastic").is_some_and(|j| j.drain_requested) {
            drained_at = Some(now);
            // Same pass: the noticed nodes are out of the fleet and replacements requested.
            let live = ctl.instances().filter(|i| !i.draining).count();
            let events = store.events(0, Some("elastic")).expect("events");
            assert!(events.iter().any(|e| e.kind == "notice"));
            assert!(events.iter().any(|e| e.kind == "replace"), "{events:?}");
            assert!(live >= 2, "survivors keep running: {live}");
        }
        workload
            .step(&mut ctl, Duration::from_secs(60), now)
            .expect("step");
    }
    assert!(drained_at.is_some(), "the trace drops zone a to 2 nodes");
    let j = ctl.job("elastic").expect("job");
    assert!(j.done_samples > 0.0);
    assert_eq!(
        workload.lost_samples.get("elastic").copied().unwrap_or(0.0),
        0.0,
        "the drain checkpointed before the nodes went"
    );
    assert_eq!(
        sim.list("test-owner").await.expect("list").len(),
        ctl.instances().count()
    );
}

/// The controller passes every 10 minutes, so it sees a reclaim notice (2 minutes' lead) only
/// with the reclaim. The agents watch their own metadata, as `tern agent` does, and save in
/// time; workers that only follow the controller's drain lose the progress since their last
/// periodic checkpoint. The workers work the tick that follows a pass, as in `SimWorld`: their
/// save on the notice reaches the controller before the pass that sees the reclaim (a report
/// from an instance the controller saw end is refused, whatever it carries).
#[tokio::test]
async fn the_agents_own_notice_saves_progress_when_the_controller_is_too_late() {
    for pass_first in [true] {
        for watch in [true, false] {
            // Room for one node for 100 minutes, then none.
            let sim = sim(vec![trace(
                "us-west-2a",
                vec![1; 20].into_iter().chain(vec![0; 40]).collect(),
            )]);
            let store = Arc::new(Store::in_memory().expect("store"));
            let mut ctl = Controller::open(store, sim.clone(), config()).expect("open");
            ctl.submit(job("single", "1", false), sim.now())
                .expect("submit");
            let mut workload = if watch {
                workload::Workload::watching(sim.clone())
            } else {
                workload::Workload::new()
            };
            let tick = Duration::from_secs(600);
            for _ in 0..15 {
                if pass_first {
                    ctl.pass(sim.now()).await.expect("pass");
                    sim.advance(tick);
                } else {
                    sim.advance(tick);
                    ctl.pass(sim.now()).await.expect("pass");
                }
                workload.step(&mut ctl, tick, sim.now()).expect("step");
            }
            let case = format!("pass first {pass_first}, agents watch {watch}");
            let notices = store_events(&ctl, "notice");
            assert!(notices > 0, "{case}: the trace reclaims the node");
            let lost = workload.lost_samples.get("single").copied().unwrap_or(0.0);
            let done = ctl.job("single").expect("job").done_samples;
            assert!(done > 0.0, "{case}: the job made progress");
            if watch {
                assert_eq!(lost, 0.0, "{case}: saved on the notice");
            } else {
                assert!(lost > 0.0, "{case}: the drain came after the reclaim");
            }
        }
    }
}

/// A gang of two on spot loses a node when its slack can no longer pay for another reclaim:
/// the policy says on-demand, and the whole gang goes there. Keeping the spot survivor would
/// restart the gang again at its reclaim, with no slack left for it.
#[tokio::test]
async fn a_gang_the_deadline_sends_to_on_demand_goes_whole() {
    // Zone a holds two nodes for half an hour, then one; zone b never has any.
    let a: Vec<u32> = vec![2; 6].into_iter().chain(vec![1; 60]).collect();
    let sim = sim(vec![
        trace("us-west-2a", a),
        trace("us-west-2b", vec![0; 66]),
    ]);
    let store = Arc::new(Store::in_memory().expect("store"));
    let mut cfg = config();
    cfg.exact_forecast = true;
    let mut ctl = Controller::open(store.clone(), sim.clone(), cfg).expect("open");
    // One hour of work on two nodes (320 samples/s each), due 40 minutes after that: room to
    // start on spot, not for a restart on spot after the reclaim.
    let spec = tern_cloud::testkit::spec("gang")
        .workers("2")
        .gang(true)
        .deadline(Some("6000s"))
        .samples(2_304_000)
        .build();
    ctl.submit(spec, sim.now()).expect("submit");
    let workload = workload::Workload::watching(sim.clone());
    let tick = Duration::from_secs(300);
    let mut on_spot_first = false;
    let mut world = SimWorld::new(sim.clone(), ctl, tick).with_workers(Some(workload));
    world
        .run(8, |ctl, _| {
            on_spot_first |= ctl.instances().any(|i| i.offer.capacity == Capacity::Spot);
            false
        })
        .await
        .expect("pass");
    let mut ctl = world.ctl;
    ctl.pass(sim.now()).await.expect("pass");
    let events = store.events(0, Some("gang")).expect("events");
    let log: Vec<String> = events
        .iter()
        .map(|e| format!("{} {}", e.kind, e.message))
        .collect();
    assert!(on_spot_first, "the gang starts on spot: {log:#?}");
    assert!(events.iter().any(|e| e.kind == "preempted"), "{log:#?}");
    let live: Vec<_> = ctl.instances().filter(|i| !i.draining).collect();
    assert_eq!(live.len(), 2, "{log:#?}");
    assert!(
        live.iter().all(|i| i.offer.capacity == Capacity::OnDemand),
        "the whole gang on on-demand: {live:?}\n{log:#?}"
    );
}

/// A restart costs the deadline policy what it costs the planner: on GCP a 60 s save does not
/// fit in the 30 s notice, so a preemption also loses half a checkpoint interval of progress;
/// on AWS (2 minutes) it does not.
#[tokio::test]
async fn a_restart_includes_lost_progress_where_the_notice_is_too_short_to_save() {
    let mut hours = Vec::new();
    for cloud in [Cloud::Aws, Cloud::Gcp] {
        let sim = sim(vec![trace("us-west-2a", vec![1; 10])]);
        let provider = Arc::new(Intercepted::new(sim).posing_as(cloud));
        let store = Arc::new(Store::in_memory().expect("store"));
        let mut ctl = Controller::open(store, provider, config()).expect("open");
        ctl.submit(job("j", "1", false), start()).expect("submit");
        let c = ctl.job("j").expect("job").spec.checkpoint;
        assert!(c.save_s > 30.0 && c.save_s <= 120.0, "{c:?}");
        hours.push((ctl.restart_hours("j"), c));
    }
    let (aws, c) = hours[0];
    let provision = config().plan.provision_s;
    assert!((aws * 3600.0 - (c.save_s + provision + c.restore_s)).abs() < 1e-6);
    assert!((hours[1].0 - aws - c.interval_s / 2.0 / 3600.0).abs() < 1e-9);
}

fn store_events(ctl: &Controller, kind: &str) -> usize {
    ctl.store()
        .events(0, None)
        .expect("events")
        .iter()
        .filter(|e| e.kind == kind)
        .count()
}

/// The sim behind a hook that, once `calls_left` runs down to 0, lets each call go through and
/// then "dies": the answer is lost and the test drops the controller (memory gone), keeping
/// only the store, as SIGKILL would. Notices stay queued in the sim until a live controller
/// takes them.
fn killer(inner: Arc<dyn Provider>, calls_left: Arc<Mutex<Option<u64>>>) -> Arc<Intercepted> {
    let dead = || ProviderError::Transient {
        message: "killed".into(),
    };
    Arc::new(Intercepted::new(inner).on_call(move |asked| {
        let mut left = calls_left.lock().expect("lock");
        match left.as_mut() {
            Some(0) if matches!(asked, Asked::Interruptions) => Verdict::Refuse(dead()),
            Some(0) => Verdict::Lose(dead()),
            Some(n) => {
                *n -= 1;
                Verdict::Forward
            }
            None => Verdict::Forward,
        }
    }))
}

#[tokio::test]
async fn crashes_at_seeded_points_lose_nothing_and_launch_nothing_twice() {
    let mut a = vec![16; 30];
    a.extend(vec![5; 12]);
    a.extend(vec![16; 400]);
    let sim = sim(vec![
        trace("us-west-2a", a),
        trace("us-west-2b", vec![12; 500]),
    ]);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let calls_left = Arc::new(Mutex::new(None));
    let watcher = Arc::new(Store::open(&path).expect("store"));
    let (checked, terminations) = intent_checked(sim.clone(), watcher);
    let killer = killer(checked, calls_left.clone());
    let open = || {
        let store = Arc::new(Store::open(&path).expect("store"));
        Controller::open(store, killer.clone(), config()).expect("open")
    };
    let mut ctl = open();
    ctl.submit(job("gang", "4", true), sim.now())
        .expect("submit");
    ctl.submit(job("elastic", "{ min = 2, max = 6 }", false), sim.now())
        .expect("submit");
    ctl.submit(job("single", "1", false), sim.now())
        .expect("submit");
    let mut workload = workload::Workload::new();
    let mut rng: u64 = 0x5eed;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut kills = 0;
    let mut seen: HashMap<InstanceId, Instance> = HashMap::new();
    let mut checkpoints: HashMap<String, f64> = HashMap::new();
    for step in 0..3000 {
        if kills < 12 && step % 40 == 5 {
            *calls_left.lock().expect("lock") = Some(next() % 12);
        }
        sim.advance(Duration::from_secs(60));
        let now = sim.now();
        let crashed = match ctl.pass(now).await {
            Ok(_) => false,
            Err(e) => panic!("pass failed: {e}"),
        } || calls_left.lock().expect("lock").is_some_and(|n| n == 0);
        for i in sim.list("test-owner").await.expect("list") {
            seen.insert(i.id.clone(), i);
        }
        if crashed {
            kills += 1;
            *calls_left.lock().expect("lock") = None;
            drop(ctl);
            ctl = open();
            // The simulated workers carry on; the new controller learns progress from them.
        }
        workload
            .step(&mut ctl, Duration::from_secs(60), now)
            .expect("step");
        for j in ctl.jobs() {
            let floor = checkpoints.entry(j.name().to_string()).or_insert(0.0);
            assert!(
                j.done_samples + 1e-6 >= *floor,
                "{} fell below its last checkpoint: {} < {floor}",
                j.name(),
                j.done_samples
            );
            *floor = floor.max(j.checkpoint_samples);
        }
        if ctl.jobs().all(|j| j.state.is_final())
            && sim.list("test-owner").await.expect("list").is_empty()
        {
            break;
        }
    }
    assert!(kills >= 10, "only {kills} kills");
    for j in ctl.jobs() {
        assert_eq!(j.state, JobState::Finished, "{} {:?}", j.name(), j.reason);
    }
    assert!(
        sim.list("test-owner").await.expect("list").is_empty(),
        "orphans left"
    );
    // No intent produced more instances than it asked for: a retry after a crash reused
    // its key instead of launching again.
    let store = Store::open(&path).expect("store");
    assert!(
        store.load().expect("load").intents.is_empty(),
        "open intents left"
    );
    let t = terminations.lock().expect("lock");
    assert!(t.without.is_empty() && t.by_intent > 0, "{t:?}");
    let mut per_intent: HashMap<IntentId, u32> = HashMap::new();
    for i in seen.values() {
        *per_intent
            .entry(i.intent_id().expect("tagged"))
            .or_default() += 1;
    }
    assert!(!per_intent.is_empty());
    for (id, n) in per_intent {
        let intent = store
            .intent(id)
            .expect("query")
            .expect("every instance has its intent");
        let asked = match intent.kind {
            IntentKind::Launch { count, .. } | IntentKind::Migrate { count, .. } => count,
            other => panic!("instances from a {} intent", other.name()),
        };
        assert!(n <= asked, "intent {id} asked {asked} and got {n}");
    }
}

/// Seeded throttling, transient and capacity faults on a fifth of the calls: the jobs finish
/// later, nothing leaks and no intent launches more than it asked for.
#[tokio::test]
async fn seeded_cloud_faults_slow_the_controller_down_but_lose_nothing() {
    let sim = Arc::new(SimCloud::new(
        vec![
            trace("us-west-2a", vec![10; 500]),
            trace("us-west-2b", vec![10; 500]),
        ],
        SimConfig {
            start: start(),
            boot: Duration::from_secs(60),
            faults: tern_sim::FaultSchedule {
                seed: 11,
                throttle: 0.1,
                transient: 0.05,
                capacity: 0.1,
                ..tern_sim::FaultSchedule::default()
            },
            ..SimConfig::default()
        },
    ));
    let store = Arc::new(Store::in_memory().expect("store"));
    let mut ctl = Controller::open(store.clone(), sim.clone(), config()).expect("open");
    ctl.submit(job("gang", "4", true), sim.now())
        .expect("submit");
    ctl.submit(job("elastic", "{ min = 2, max = 6 }", false), sim.now())
        .expect("submit");
    let mut seen: HashMap<InstanceId, IntentId> = HashMap::new();
    let minute = Duration::from_secs(60);
    let workers = Some(workload::Workload::new());
    let mut world = SimWorld::new(sim.clone(), ctl, minute).with_workers(workers);
    world
        .run(3000, |ctl, now| {
            for i in ctl.instances() {
                seen.insert(i.id.clone(), i.intent);
            }
            SimWorld::settled(ctl, now)
        })
        .await
        .expect("pass");
    let ctl = world.ctl;
    let errors: u64 = ctl.stats().cloud_errors.values().sum();
    assert!(
        errors > 10,
        "faults were injected: {:?}",
        ctl.stats().cloud_errors
    );
    for j in ctl.jobs() {
        assert_eq!(j.state, JobState::Finished, "{}", j.name());
    }
    // The sim's own view: nothing of ours is left (checked through a fault-free path).
    let calls_before = sim.calls().len();
    let mut left = None;
    for _ in 0..20 {
        if let Ok(l) = sim.list("test-owner").await {
            left = Some(l.len());
            break;
        }
    }
    assert_eq!(left, Some(0), "orphans left ({} calls)", calls_before);
    let mut per_intent: HashMap<IntentId, u32> = HashMap::new();
    for intent in seen.values() {
        *per_intent.entry(*intent).or_default() += 1;
    }
    for (id, n) in per_intent {
        let intent = store.intent(id).expect("query").expect("known intent");
        let asked = match intent.kind {
            IntentKind::Launch { count, .. } | IntentKind::Migrate { count, .. } => count,
            other => panic!("instances from a {} intent", other.name()),
        };
        assert!(n <= asked, "intent {id} asked {asked} and got {n}");
    }
}

/// Zone a's spot starts cheapest, then its price nearly triples at tick 12 (1 h); zone b
/// (capacity `b`) stays at 1.2. An elastic job "mover" is submitted.
fn price_rise(b: Vec<u32>) -> (Arc<SimCloud>, Arc<Store>, Controller) {
    let mut a = trace("us-west-2a", vec![8; 300]);
    a.prices = Some(
        std::iter::repeat_n(0.9, 12)
            .chain(std::iter::repeat_n(2.6, 288))
            .collect(),
    );
    let mut b = trace("us-west-2b", b);
    b.prices = Some(vec![1.2; 300]);
    let sim = sim(vec![a, b]);
    let store = Arc::new(Store::in_memory().expect("store"));
    let mut ctl = Controller::open(store.clone(), sim.clone(), config()).expect("open");
    ctl.submit(job("mover", "{ min = 1, max = 2 }", false), sim.now())
        .expect("submit");
    (sim, store, ctl)
}

#[tokio::test]
async fn a_spot_price_rise_moves_nodes_to_cheaper_spot_elsewhere() {
    // The price change is the event that re-checks the job.
    let (sim, store, mut ctl) = price_rise(vec![8; 300]);
    let zones = |ctl: &Controller| -> Vec<String> {
        let mut z: Vec<String> = ctl
            .instances()
            .filter(|i| !i.draining)
            .map(|i| i.offer.zone.to_string())
            .collect();
        z.sort();
        z
    };
    run(&mut ctl, &sim, 10).await;
    assert!(
        zones(&ctl).iter().all(|z| z == "us-west-2a") && !zones(&ctl).is_empty(),
        "placed on the cheapest spot first: {:?}",
        zones(&ctl)
    );
    assert!(
        !store
            .events(0, Some("mover"))
            .expect("events")
            .iter()
            .any(|e| e.kind == "migrate"),
        "no move while zone a is cheapest"
    );
    run(&mut ctl, &sim, 60).await;
    let events = store.events(0, Some("mover")).expect("events");
    let moves: Vec<_> = events.iter().filter(|e| e.kind == "migrate").collect();
    assert!(!moves.is_empty(), "{events:?}");
    let typed = ctl.typed_events(Some("mover")).expect("events");
    let first_move = typed
        .iter()
        .find(|e| matches!(e, Event::Migrating { .. }))
        .expect("a typed migrate event");
    assert!(
        matches!(first_move, Event::Migrating { to_capacity: Capacity::Spot, to_zone, .. }
            if to_zone.as_str() == "us-west-2b"),
        "{first_move:?}"
    );
    assert!(
        zones(&ctl).iter().all(|z| z == "us-west-2b"),
        "every node moved, a disruption budget at a time: {:?}",
        zones(&ctl)
    );
    // Never onto on-demand for a price move.
    assert!(ctl.instances().all(|i| i.offer.capacity == Capacity::Spot));
}

/// A one-node job moved by a price rise, with simulated agents on the worker protocol: the new
/// node's agent asks while the old one still trains and is told to wait; it opens the next
/// incarnation once the old workers stopped. At no step do two of the job's workers run.
#[tokio::test]
async fn a_one_node_move_never_trains_on_two_nodes() {
    let (sim, store, mut ctl) = price_rise(vec![8; 300]);
    ctl.cancel("mover", sim.now())
        .expect("cancel the gang-less default");
    ctl.submit(job("single-mover", "1", false), sim.now())
        .expect("submit");
    let mut workers = workload::Workload::new().keeping_answers();
    let tick = Duration::from_secs(60);
    for _ in 0..90 {
        ctl.pass(sim.now()).await.expect("pass");
        sim.advance(tick);
        workers.step(&mut ctl, tick, sim.now()).expect("step");
        let current = store.incarnation("single-mover").expect("incarnation");
        let running = current.workers.iter().filter(|w| w.running).count();
        assert!(running <= 1, "two trainings: {current:?}");
    }
    let kinds: Vec<String> = store
        .events(0, Some("single-mover"))
        .expect("events")
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(kinds.iter().any(|k| k == "migrated"), "{kinds:?}");
    let told = workers.answers();
    let moved_in = told
        .values()
        .find(|a| a.first().is_some_and(|s| s == "start: wait"))
        .unwrap_or_else(|| panic!("no node waited for the one it replaces: {told:?}"));
    let opened = moved_in
        .iter()
        .find(|s| s.starts_with("start: incarnation"))
        .expect("it started once the old workers stopped");
    assert_ne!(opened, "start: incarnation 1", "{moved_in:?}");
}

#[tokio::test]
async fn a_move_whose_new_capacity_is_reclaimed_is_called_off_not_relaunched() {
    // As above, but zone b loses its spot capacity at tick 16, while the move onto it is still
    // open. Launching again would get the same (gone) instances back under the same key, pass
    // after pass: the move is cancelled instead.
    let (sim, store, mut ctl) = price_rise([vec![8; 16], vec![0; 284]].concat());
    run(&mut ctl, &sim, 110).await;
    let events = store.events(0, Some("mover")).expect("events");
    let moved_at = events
        .iter()
        .find(|e| e.kind == "migrate")
        .map(|e| e.at)
        .expect("a move toward zone b");
    assert!(
        moved_at < start() + TimeDelta::minutes(80),
        "moved at {moved_at}"
    );
    let relaunches = events
        .iter()
        .filter(|e| e.kind == "launched" && e.at > start() + TimeDelta::minutes(80))
        .count();
    assert!(
        relaunches <= 2,
        "{relaunches} launches after zone b emptied: {events:?}"
    );
    assert_eq!(ctl.open_intents(), 0, "the move is closed");
    assert!(
        ctl.instances()
            .any(|i| i.offer.zone.as_str() == "us-west-2a" && !i.draining),
        "the job still runs in zone a"
    );
}

#[tokio::test]
async fn a_move_called_off_after_its_drain_gives_the_job_back_the_nodes_it_was_leaving() {
    // As above, but zone b empties at tick 20, after the new nodes came up and the old ones
    // were marked draining (no agent answers the drain here, so the move waits on it). The
    // old nodes must count again: left draining they would be replaced beside themselves
    // and billed until the job ends.
    let (sim, store, mut ctl) = price_rise([vec![8; 20], vec![0; 280]].concat());
    let mut drained = false;
    for _ in 0..110 {
        sim.advance(Duration::from_secs(60));
        ctl.pass(sim.now()).await.expect("pass");
        drained |= ctl
            .instances()
            .any(|i| i.offer.zone.as_str() == "us-west-2a" && i.draining);
    }
    assert!(
        drained,
        "the move drained zone a's nodes before zone b emptied"
    );
    let events = store.events(0, Some("mover")).expect("events");
    assert_eq!(ctl.open_intents(), 0, "the move is closed: {events:?}");
    let a: Vec<_> = ctl
        .instances()
        .filter(|i| i.offer.zone.as_str() == "us-west-2a")
        .collect();
    assert!(!a.is_empty() && a.iter().all(|i| !i.draining), "{a:?}");
    let j = ctl.job("mover").expect("job");
    assert!(!j.drain_requested, "the drain is withdrawn");
    assert!(
        ctl.instances().count() <= j.target_count as usize,
        "nothing runs beside the nodes the job kept: {:?}",
        ctl.instances().collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn an_elastic_job_is_resized_to_its_survivors_and_grows_back() {
    // Zone a: 4 spot nodes, then 2 from tick 6 (30 min); zone b: nothing until tick 14
    // (70 min), then plenty.
    // The deadline is far, so the job waits for spot on its 2 survivors (≥ its minimum of 2)
    // instead of paying on-demand, and is resized back to 4 once zone b offers capacity.
    let mut a = vec![4; 6];
    a.extend(vec![2; 300]);
    let b: Vec<u32> = vec![0; 14].into_iter().chain(vec![8; 300]).collect();
    let sim = sim(vec![trace("us-west-2a", a), trace("us-west-2b", b)]);
    let store = Arc::new(Store::in_memory().expect("store"));
    let mut ctl = Controller::open(store.clone(), sim.clone(), config()).expect("open");
    ctl.submit(job("elastic", "{ min = 2, max = 4 }", false), sim.now())
        .expect("submit");
    let live = |ctl: &Controller| ctl.instances().filter(|i| !i.draining).count();
    let mut shrunk = None;
    for _ in 0..30 {
        sim.advance(Duration::from_secs(60));
        ctl.pass(sim.now()).await.expect("pass");
        let j = ctl.job("elastic").expect("job");
        if j.planned_count == 4 && j.target_count == 2 {
            shrunk = Some((live(&ctl), j.clone()));
            break;
        }
    }
    let (survivors, j) = shrunk.expect("resized down while spot is out");
    assert_eq!(survivors, 2, "the job keeps its survivors");
    assert!(!j.drain_requested || j.done_samples >= 0.0);
    // Persisted: a restarted controller knows both sizes.
    let stored = store.job("elastic").expect("job").expect("exists");
    assert_eq!((stored.target_count, stored.planned_count), (2, 4));
    // No on-demand while waiting is affordable.
    assert!(ctl.instances().all(|i| i.offer.capacity == Capacity::Spot));

    assert!(
        sim.now() < start() + TimeDelta::minutes(70),
        "shrunk before b opens"
    );
    run(&mut ctl, &sim, 90).await;
    let j = ctl.job("elastic").expect("job");
    assert_eq!((j.target_count, j.planned_count), (4, 4), "grown back");
    assert_eq!(live(&ctl), 4);
    let resizes: Vec<String> = store
        .events(0, Some("elastic"))
        .expect("events")
        .into_iter()
        .filter(|e| e.kind == "resize")
        .map(|e| e.message)
        .collect();
    assert_eq!(resizes.len(), 2, "{resizes:?}");
    assert!(resizes[0].starts_with("4 → 2"), "{resizes:?}");
    assert!(resizes[1].starts_with("2 → 4"), "{resizes:?}");
    assert_eq!(ctl.open_intents(), 0);
}

#[tokio::test]
async fn prices_are_recorded_as_they_change_and_the_plan_estimate_is_kept() {
    let sim = sim(vec![trace("us-west-2a", vec![8; 200])]);
    let store = Arc::new(Store::in_memory().expect("store"));
    let mut ctl = Controller::open(store.clone(), sim.clone(), config()).expect("open");
    ctl.submit(job("p", "4", false), sim.now()).expect("submit");
    run(&mut ctl, &sim, 5).await;
    let record = store.job("p").expect("job").expect("exists");
    let planned = record
        .planned_cost
        .unwrap_or_else(|| panic!("no plan estimate: {record:?}"));
    assert!(planned > 0.0);
    // One price per offer (spot and on-demand), written once: the prices did not change.
    let prices = store.prices().expect("prices");
    assert_eq!(prices.len(), 2, "{prices:?}");
    assert!(prices.values().all(|p| p.len() == 1), "{prices:?}");
    // A restarted controller does not write them again.
    drop(ctl);
    let mut ctl = Controller::open(store.clone(), sim.clone(), config()).expect("reopen");
    run(&mut ctl, &sim, 2).await;
    assert!(
        store
            .prices()
            .expect("prices")
            .values()
            .all(|p| p.len() == 1)
    );
    let again = store.job("p").expect("job").expect("exists");
    assert_eq!(
        again.planned_cost,
        Some(planned),
        "kept from the first plan"
    );
}

#[tokio::test]
async fn the_cost_counter_adds_up_to_the_cost_report_as_instances_end() {
    use crate::report::{CostQuery, Ledger, build};
    let sim = sim(vec![trace(
        "us-west-2a",
        vec![8; 30]
            .into_iter()
            .chain(vec![0; 5])
            .chain(vec![8; 300])
            .collect(),
    )]);
    let store = Arc::new(Store::in_memory().expect("store"));
    let mut ctl = Controller::open(store.clone(), sim.clone(), config()).expect("open");
    ctl.submit(job("c", "4", false), sim.now()).expect("submit");
    let metrics = super::metrics::Metrics::new();
    // The per-job counters (behind a token) and the fleet's (open) count the same dollars.
    let sum = |page: String, family: &str| -> f64 {
        page.lines()
            .filter(|l| l.starts_with(family))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let counted = |m: &super::metrics::Metrics| -> f64 {
        let per_job = sum(m.render_private(None), "tern_cost_dollars_total{");
        let fleet = sum(m.render(), "tern_fleet_cost_dollars_total{");
        assert!(
            (per_job - fleet).abs() < 1e-6,
            "per job {per_job} vs fleet {fleet}"
        );
        per_job
    };
    let mut last = 0.0;
    for _ in 0..240 {
        sim.advance(Duration::from_secs(60));
        ctl.pass(sim.now()).await.expect("pass");
        metrics
            .update(&ctl, Duration::ZERO, sim.now())
            .expect("metrics");
        let now = counted(&metrics);
        assert!(
            now >= last - 1e-9,
            "a counter never goes down: {last} → {now}"
        );
        last = now;
    }
    let usage = store.usage().expect("usage");
    assert!(
        usage.iter().any(|u| u.ended_at.is_some()),
        "some instance ended"
    );
    let ledger = Ledger::load(&store, Default::default()).expect("ledger");
    let report = build(&ledger, &CostQuery::default(), sim.now()).expect("report");
    assert!(report.total.cost > 0.0);
    assert!(
        (last - report.total.cost).abs() < 1e-6,
        "counter {last} vs report {}",
        report.total.cost
    );
}

#[tokio::test]
async fn an_excluded_zone_is_never_launched_into_even_when_cheapest() {
    // Zone a is always cheaper; zone b loses its spot capacity for a while, so the job is
    // replaced, waits or falls back: never into zone a, which its spec excludes.
    let mut a = trace("us-west-2a", vec![8; 300]);
    a.prices = Some(vec![0.5; 300]);
    let mut b = trace(
        "us-west-2b",
        [vec![8; 20], vec![0; 10], vec![8; 270]].concat(),
    );
    b.prices = Some(vec![1.2; 300]);
    let sim = sim(vec![a, b]);
    let store = Arc::new(Store::in_memory().expect("store"));
    let mut ctl = Controller::open(store.clone(), sim.clone(), config()).expect("open");
    let fenced = tern_cloud::testkit::spec("fenced").workers("{ min = 1, max = 4 }");
    ctl.submit(
        fenced.clone().top("exclude = [\"us-west-2a\"]").build(),
        sim.now(),
    )
    .expect("submit");
    run(&mut ctl, &sim, 300).await;
    let usage = store.usage().expect("usage");
    assert!(!usage.is_empty(), "the job ran");
    assert!(
        usage.iter().all(|u| !u.offer_key.contains("us-west-2a")),
        "{:?}",
        usage.iter().map(|u| &u.offer_key).collect::<Vec<_>>()
    );
    // Without the exclusion the same job goes to the cheaper zone a.
    let sim2 = self::sim(vec![
        {
            let mut a = trace("us-west-2a", vec![8; 300]);
            a.prices = Some(vec![0.5; 300]);
            a
        },
        trace("us-west-2b", vec![8; 300]),
    ]);
    let store2 = Arc::new(Store::in_memory().expect("store"));
    let mut free = Controller::open(store2.clone(), sim2.clone(), config()).expect("open");
    free.submit(fenced.build(), sim2.now()).expect("submit");
    run(&mut free, &sim2, 30).await;
    assert!(
        store2
            .usage()
            .expect("usage")
            .iter()
            .any(|u| u.offer_key.contains("us-west-2a"))
    );
}

/// A cloud whose launches never start running: every instance reads `state` (Pending: a VM
/// stuck booting; Queued: a TPU queued resource waiting for capacity). Also returns the ids
/// it was asked to terminate.
fn never_running(
    inner: Arc<SimCloud>,
    state: InstanceState,
) -> (Arc<Intercepted>, Arc<Mutex<Vec<InstanceId>>>) {
    let terminated = Arc::new(Mutex::new(Vec::new()));
    let asked = terminated.clone();
    let provider = Intercepted::new(inner)
        .rewriting(move |i| i.state = state)
        .on_call(move |call| {
            if let Asked::Terminate(id) = call {
                asked.lock().expect("lock").push(id.clone());
            }
            Verdict::Forward
        });
    (Arc::new(provider), terminated)
}

#[tokio::test]
async fn a_stuck_launch_times_out_but_a_queued_request_waits() {
    let mut terminated = Vec::new();
    for state in [InstanceState::Pending, InstanceState::Queued] {
        let sim = sim(vec![trace("us-west-2a", vec![8; 200])]);
        let (provider, asked) = never_running(sim.clone(), state);
        let store = Arc::new(Store::in_memory().expect("store"));
        let (provider, checked) = intent_checked(provider, store.clone());
        let mut ctl = Controller::open(store, provider, config()).expect("open");
        ctl.submit(job("stuck", "1", false), sim.now())
            .expect("submit");
        // Ten minutes: twice the launch timeout.
        run(&mut ctl, &sim, 10).await;
        terminated.push(asked.lock().expect("lock").len());
        let checked = checked.lock().expect("lock");
        assert!(
            checked.without.is_empty(),
            "terminated by intent: {checked:?}"
        );
        assert_eq!(checked.by_intent, terminated[terminated.len() - 1]);
        if state == InstanceState::Queued {
            assert_eq!(
                ctl.instances().count(),
                1,
                "the queued request is still the job's"
            );
        }
    }
    assert!(
        terminated[0] >= 1,
        "a VM stuck pending is terminated: {terminated:?}"
    );
    assert_eq!(
        terminated[1], 0,
        "a queued request is left to its own validity"
    );
}

#[tokio::test]
async fn a_queued_spot_request_is_cancelled_once_the_deadline_needs_on_demand() {
    let sim = sim(vec![trace("us-west-2a", vec![8; 400])]);
    let (provider, asked) = never_running(sim.clone(), InstanceState::Queued);
    let store = Arc::new(Store::in_memory().expect("store"));
    let (provider, checked) = intent_checked(provider, store.clone());
    let mut ctl = Controller::open(store.clone(), provider, config()).expect("open");
    // 17.4 h of work (23.1 h at worst) due in 26 h: a little slack, spent while the request
    // waits in the queue.
    let spec = tern_cloud::testkit::spec("tight")
        .deadline(Some("26h"))
        .build();
    ctl.submit(spec, sim.now()).expect("submit");
    run(&mut ctl, &sim, 5).await;
    let first: Vec<Instance> = sim.list("test-owner").await.expect("list");
    assert_eq!(first.len(), 1);
    assert_eq!(
        first[0].offer.capacity,
        Capacity::Spot,
        "planned on spot while slack lasts"
    );
    // Three hours of passes: the slack runs out, the queued spot request is cancelled.
    run(&mut ctl, &sim, 180).await;
    let terminated = asked.lock().expect("lock").clone();
    assert!(terminated.contains(&first[0].id), "{terminated:?}");
    {
        let checked = checked.lock().expect("lock");
        assert!(
            checked.without.is_empty(),
            "terminated by intent: {checked:?}"
        );
        assert_eq!(checked.by_intent, terminated.len());
    }
    let events = store.events(0, None).expect("events");
    let shown: Vec<String> = events
        .iter()
        .map(|e| format!("{}: {}", e.kind, e.message))
        .collect();
    let cancels = events
        .iter()
        .filter(|e| e.kind == "queue-cancelled")
        .count();
    assert_eq!(cancels, 1, "cancelled once, not over and over: {shown:#?}");
    // Planned again, on-demand this time.
    let now: Vec<Instance> = sim.list("test-owner").await.expect("list");
    assert_eq!(now.len(), 1, "{shown:#?}");
    assert_eq!(now[0].offer.capacity, Capacity::OnDemand, "{shown:#?}");
}

/// Every combination of excluded zones, capacity rule and price cap, over a fleet where
/// prices and capacity move (zone a is cheapest until its spot price jumps, zone b loses its
/// capacity for a while, zone c is dear): whatever the job launches, replaces, grows into or
/// migrates to is an offer its constraints allow, and it runs whenever some offer is allowed
/// (an on-demand-only job does not wait for spot it may not use).
#[tokio::test]
async fn no_launch_replacement_or_move_breaks_the_placement_constraints() {
    let traces = || {
        let mut a = trace("us-west-2a", vec![8; 40]);
        a.prices = Some([vec![0.5; 6], vec![2.6; 34]].concat());
        let mut b = trace(
            "us-west-2b",
            [vec![8; 15], vec![0; 4], vec![8; 21]].concat(),
        );
        b.prices = Some(vec![0.9; 40]);
        let mut c = trace("us-west-2c", vec![8; 40]);
        c.prices = Some(vec![1.5; 40]);
        vec![a, b, c]
    };
    let zones = ["us-west-2a", "us-west-2b", "us-west-2c"];
    let (mut zones_used_unconstrained, mut moves_unconstrained) = (0, 0);
    for excluded in 0..8u32 {
        for rule in ["any", "spot-only", "on-demand-only"] {
            for cap in [None, Some(1.0)] {
                let exclude: Vec<String> = (0..3)
                    .filter(|z| excluded & (1 << z) != 0)
                    .map(|z| format!("\"{}\"", zones[z]))
                    .collect();
                let mut extra = format!("capacity = \"{rule}\"\n");
                if !exclude.is_empty() {
                    extra += &format!("exclude = [{}]\n", exclude.join(", "));
                }
                if let Some(cap) = cap {
                    extra += &format!("max_price_per_hour = {cap}\n");
                }
                let spec = tern_cloud::testkit::spec("fenced")
                    .workers("{ min = 1, max = 4 }")
                    .top(&extra)
                    .build();
                let constraints = spec.constraints.clone();
                let sim = sim(traces());
                let offers = sim.offers(&Region::new("us-west-2")).await.expect("offers");
                let runnable = offers.iter().any(|o| constraints.allows(o));
                let store = Arc::new(Store::in_memory().expect("store"));
                let mut ctl = Controller::open(store.clone(), sim.clone(), config()).expect("open");
                ctl.submit(spec, sim.now()).expect("submit");
                run(&mut ctl, &sim, 180).await;
                let used = store.usage_with_offers().expect("usage");
                for (u, offer) in &used {
                    let offer = offer.as_ref().expect("the instance's offer is recorded");
                    assert!(
                        constraints.allows(offer),
                        "{extra}: ran on {} at ${}/h",
                        u.offer_key,
                        offer.price_per_hour
                    );
                }
                assert_eq!(
                    !used.is_empty(),
                    runnable,
                    "{extra}: ran iff some offer is allowed"
                );
                if excluded == 0 && rule == "any" && cap.is_none() {
                    let mut zones_seen: Vec<&str> = used
                        .iter()
                        .filter_map(|(_, o)| o.as_ref())
                        .map(|o| o.zone.as_str())
                        .collect();
                    zones_seen.sort();
                    zones_seen.dedup();
                    zones_used_unconstrained = zones_seen.len();
                    let events = store.events(0, Some("fenced")).expect("events");
                    moves_unconstrained = events.iter().filter(|e| e.kind == "migrate").count();
                }
            }
        }
    }
    // The scenario does move jobs around: unconstrained, the job migrated and ran in every
    // zone (a's price rise moves it to b, b's loss of capacity sends it to c).
    assert_eq!(
        (moves_unconstrained > 0, zones_used_unconstrained),
        (true, 3)
    );
}
