//! The leak collector: an unowned tagged instance is collected after the grace; another
//! store's instances are reported and left alone unless adopted.

use super::*;

#[tokio::test]
async fn an_unowned_tagged_instance_is_collected_after_the_grace() {
    let sim = sim(vec![trace("us-west-2a", vec![8; 200])]);
    let scenario = Scenario::on(&sim, "test-owner");
    let (provider, terminations) = intent_checked(sim.clone(), scenario.the_store());
    let (store, mut ctl) = scenario.provider(provider).controller();
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
    let (first, mut a) = Scenario::on(&sim, "test-owner")
        .jobs([job("mine", "4", true)])
        .controller();
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
    let (second, mut b) = Scenario::on(&sim, "test-owner").controller();
    assert_ne!(first.cluster_id(), second.cluster_id());
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
    let (_, mut adopting) = Scenario::on(&sim, "test-owner")
        .store(second)
        .config(|c| c.adopt_foreign = true)
        .controller();
    run(&mut adopting, &sim, 2).await;
    assert!(sim.list("test-owner").await.expect("list").is_empty());
    assert_eq!(adopting.stats().leaks_collected, 4);
}
