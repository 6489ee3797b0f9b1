//! Prices and costs as instances run, launches that hang or queue, and placement constraints
//! that hold through every launch, replacement and move.

use super::*;

#[tokio::test]
async fn prices_are_recorded_as_they_change_and_the_plan_estimate_is_kept() {
    let sim = sim(vec![trace("us-west-2a", vec![8; 200])]);
    let (store, mut ctl) = Scenario::on(&sim, "test-owner")
        .jobs([job("p", "4", false)])
        .controller();
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
    let mut ctl = Scenario::on(&sim, "test-owner")
        .store(store.clone())
        .controller()
        .1;
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
    let (store, mut ctl) = Scenario::on(&sim, "test-owner")
        .jobs([job("c", "4", false)])
        .controller();
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
    let (store, mut ctl) = Scenario::on(&sim, "test-owner").controller();
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
    let (store2, mut free) = Scenario::on(&sim2, "test-owner")
        .jobs([fenced.build()])
        .controller();
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
        let scenario = Scenario::on(&sim, "test-owner").jobs([job("stuck", "1", false)]);
        let (provider, checked) = intent_checked(provider, scenario.the_store());
        let (_, mut ctl) = scenario.provider(provider).controller();
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
    let scenario = Scenario::on(&sim, "test-owner");
    let (provider, checked) = intent_checked(provider, scenario.the_store());
    let (store, mut ctl) = scenario.provider(provider).controller();
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
                let (store, mut ctl) = Scenario::on(&sim, "test-owner").jobs([spec]).controller();
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
