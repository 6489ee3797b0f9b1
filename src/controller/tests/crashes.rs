//! Crashes at the two dangerous points (after the intent is written, after the cloud acted),
//! at seeded points, and seeded cloud faults: nothing lost, nothing launched twice.

use super::*;
use tern_sim::cloud::SimConfig;

#[tokio::test]
async fn a_lost_launch_answer_is_recovered_after_restart_without_a_duplicate() {
    let sim = sim(vec![trace("us-west-2a", vec![8; 200])]);
    let (provider, keys) = forgetful(sim.clone());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let store = Arc::new(Store::open(&path).expect("store"));
    let mut ctl = Scenario::on(&sim, "test-owner")
        .store(store)
        .provider(provider.clone())
        .controller()
        .1;
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
    let mut ctl = Scenario::on(&sim, "test-owner")
        .store(store.clone())
        .provider(provider.clone())
        .controller()
        .1;
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
    let mut ctl = Scenario::on(&sim, "test-owner")
        .store(store.clone())
        .controller()
        .1;
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

    let mut ctl = Scenario::on(&sim, "test-owner")
        .store(store.clone())
        .controller()
        .1;
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
        Scenario::on(&sim, "test-owner")
            .store(store)
            .provider(killer.clone())
            .controller()
            .1
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
    let (store, mut ctl) = Scenario::on(&sim, "test-owner")
        .jobs([job("gang", "4", true)])
        .controller();
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
