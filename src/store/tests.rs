use super::*;
use chrono::TimeDelta;
use tern_cloud::{Accelerator, Cloud, InstanceType, Region, Tags, Zone, parse_job_spec};

fn spec() -> JobSpec {
    let text = concat!(
        "name = \"j1\"\nteam = \"t\"\naccelerators = [\"V100\"]\nworkers = 2\n",
        "deadline = \"10h\"\nlocal_batch = 32\n[work]\nsamples = 1000\n"
    );
    parse_job_spec(text, "j1.toml").expect("valid spec")
}

fn offer() -> Offer {
    Offer {
        cloud: Cloud::Sim,
        region: Region::new("us-west-2"),
        zone: Zone::new("us-west-2a"),
        instance_type: InstanceType {
            name: "p3.2xlarge".into(),
            vcpus: 8.0,
            memory_gib: 61.0,
            accelerator: Some(Accelerator::new("V100", 1)),
        },
        capacity: Capacity::Spot,
        price_per_hour: 0.9,
        observed_at: None,
        breakdown: Vec::new(),
        availability: Default::default(),
    }
}

#[test]
fn state_survives_reopening_and_usage_is_closed_atomically() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tern.db");
    let t0 = Utc.timestamp_opt(1_800_000_000, 0).single().expect("time");
    let intent = Intent {
        id: IntentId::from_uuid(uuid::Uuid::from_u128(42)),
        job: "j1".into(),
        kind: IntentKind::Launch {
            offers: vec![offer()],
            count: 2,
        },
        state: IntentState::Pending,
        attempt: 0,
        created_at: t0,
    };
    {
        let store = Store::open(&path).expect("open");
        assert_eq!(store.schema_version().expect("version"), 1);
        let job = JobRecord::new(spec(), t0);
        assert_eq!(job.deadline_at, Some(t0 + TimeDelta::hours(10)));
        store.insert_job(&job, t0).expect("insert");
        assert!(matches!(
            store.insert_job(&job, t0),
            Err(StoreError::Duplicate(_))
        ));
        store.insert_intent(&intent).expect("intent");
    }
    // A "crash" here: the intent is pending, nothing launched yet.
    let store = Store::open(&path).expect("reopen applies no migration twice");
    let snap = store.load().expect("load");
    assert_eq!(snap.jobs.len(), 1);
    assert_eq!(snap.intents, vec![intent.clone()]);
    assert!(snap.instances.is_empty());

    let instance = Instance {
        id: InstanceId::from("sim-1"),
        offer: offer(),
        state: InstanceState::Pending,
        tags: Tags::new(),
        launched_at: t0,
    };
    store
        .record_instances(
            intent.id,
            "j1",
            std::slice::from_ref(&instance),
            Some(3.06),
            true,
            t0,
        )
        .expect("record");
    // Recording the same launch twice (a retried intent) adds nothing.
    store
        .record_instances(intent.id, "j1", &[instance], Some(3.06), true, t0)
        .expect("record again");
    let snap = store.load().expect("load");
    assert!(
        snap.intents.is_empty(),
        "launch intent closed with its instances"
    );
    assert_eq!(snap.instances.len(), 1);
    assert_eq!(
        store.intent_state(intent.id).expect("state"),
        Some(IntentState::Done)
    );

    let t1 = t0 + TimeDelta::minutes(90);
    store
        .end_instance(&InstanceId::from("sim-1"), t1)
        .expect("end");
    assert!(store.load().expect("load").instances.is_empty());
    let usage = store.usage().expect("usage");
    assert_eq!(usage.len(), 1);
    assert_eq!(usage[0].ended_at, Some(t1));
    assert!((usage[0].hours(t1) - 1.5).abs() < 1e-9);
    assert_eq!(usage[0].capacity, Capacity::Spot);

    let mut job = store.job("j1").expect("job").expect("exists");
    job.state = JobState::Running;
    job.done_samples = 500.0;
    job.checkpoint_samples = 400.0;
    store.update_job(&job, t1).expect("update");
    assert_eq!(store.job("j1").expect("job"), Some(job));
    assert!(store.job("nope").expect("query").is_none());

    let first = store
        .add_event(t1, Some("j1"), "launch", "two V100")
        .expect("event");
    store
        .add_event(t1, None, "leak", "collected sim-9")
        .expect("event");
    assert_eq!(store.events(0, None).expect("events").len(), 2);
    assert_eq!(store.events(first, None).expect("events")[0].kind, "leak");
    assert_eq!(store.events(0, Some("j1")).expect("events").len(), 1);
}
