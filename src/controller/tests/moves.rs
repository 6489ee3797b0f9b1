//! Moves to cheaper capacity, moves called off, and elastic jobs resized to their survivors.

use super::*;

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
    let (store, ctl) = Scenario::on(&sim, "test-owner")
        .jobs([job("mover", "{ min = 1, max = 2 }", false)])
        .controller();
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
    let (store, mut ctl) = Scenario::on(&sim, "test-owner")
        .jobs([job("elastic", "{ min = 2, max = 4 }", false)])
        .controller();
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
