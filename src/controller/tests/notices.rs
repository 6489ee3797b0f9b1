//! Reclaim notices: who drains, who saves, what a restart costs.

use super::*;

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
    let (store, mut ctl) = Scenario::on(&sim, "test-owner")
        .jobs([job("elastic", "{ min = 2, max = 4 }", false)])
        .controller();
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
            let (_, mut ctl) = Scenario::on(&sim, "test-owner")
                .jobs([job("single", "1", false)])
                .controller();
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
    let (store, mut ctl) = Scenario::on(&sim, "test-owner")
        .config(|c| c.exact_forecast = true)
        .controller();
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
        let provider = Arc::new(Intercepted::new(sim.clone()).posing_as(cloud));
        let (_, ctl) = Scenario::on(&sim, "test-owner")
            .provider(provider)
            .jobs([job("j", "1", false)])
            .controller();
        let c = ctl.job("j").expect("job").spec.checkpoint;
        assert!(c.save_s > 30.0 && c.save_s <= 120.0, "{c:?}");
        hours.push((ctl.restart_hours("j"), c));
    }
    let (aws, c) = hours[0];
    let provision = config().plan.provision_s;
    assert!((aws * 3600.0 - (c.save_s + provision + c.restore_s)).abs() < 1e-6);
    assert!((hours[1].0 - aws - c.interval_s / 2.0 / 3600.0).abs() < 1e-9);
}
