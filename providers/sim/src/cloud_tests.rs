use super::*;
use std::path::PathBuf;
use tern_cloud::{IntentId, InterruptionKind, Tags, tag};

fn trace(zone: &str, cloud: Cloud, gap: u32, data: Vec<u32>) -> Trace {
    Trace {
        source: PathBuf::from(format!("{zone}.json")),
        cloud,
        region: crate::trace::region_of(zone),
        zone: zone.into(),
        gap_seconds: gap,
        available: data,
        prices: None,
        spot_price: None,
        on_demand_price: None,
    }
}

fn request(
    cloud: &SimCloud,
    zone: &str,
    capacity: Capacity,
    count: u32,
    attempt: u32,
) -> LaunchRequest {
    let z = cloud.zones.iter().position(|t| t.zone == zone).unwrap();
    let offer = cloud.offer(z, capacity, cloud.now(), 0);
    let intent = IntentId::from_uuid(uuid_from(7));
    let mut tags = Tags::new();
    tags.insert(tag::OWNER.into(), "test".into());
    LaunchRequest {
        key: IdempotencyKey::derive(intent, attempt),
        intent,
        job: "job".into(),
        offers: vec![offer],
        count,
        min_count: 1,
        single_zone: false,
        tags,
        template: None,
        disk_gb: None,
    }
}

fn uuid_from(n: u128) -> uuid::Uuid {
    uuid::Uuid::from_u128(n)
}

#[tokio::test]
async fn launch_is_idempotent_by_key() {
    let sim = SimCloud::new(
        vec![trace("us-east-1a", Cloud::Aws, 60, vec![4; 100])],
        SimConfig::default(),
    );
    let req = request(&sim, "us-east-1a", Capacity::Spot, 2, 0);
    let first = sim.launch(&req).await.unwrap();
    let again = sim.launch(&req).await.unwrap();
    assert_eq!(first.instances.len(), 2);
    let ids = |o: &LaunchOutcome| o.instances.iter().map(|i| i.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&first), ids(&again));
    assert_eq!(sim.list("test").await.unwrap().len(), 2);
    // A new attempt is a new key: two more instances, which is all the zone has left.
    let next = sim
        .launch(&request(&sim, "us-east-1a", Capacity::Spot, 3, 1))
        .await
        .unwrap();
    assert_eq!(next.instances.len(), 2);
    let calls = sim.calls();
    assert_eq!(calls.iter().filter(|c| c.op == "launch").count(), 3);
}

#[tokio::test]
async fn pools_of_two_types_in_one_zone_are_offered_and_filled_apart() {
    let t4 = InstanceType {
        name: "g4dn.xlarge".into(),
        vcpus: 4.0,
        memory_gib: 16.0,
        accelerator: Some(Accelerator::new("T4", 1)),
    };
    let sim = SimCloud::with_types(
        vec![
            trace("us-east-1a", Cloud::Aws, 60, vec![1; 100]),
            trace("us-east-1a", Cloud::Aws, 60, vec![3; 100]),
        ],
        vec![SimConfig::default().instance_type, t4.clone()],
        SimConfig::default(),
    );
    let offers = sim.offers(&Region::new("us-east-1")).await.unwrap();
    let spot_of = |name: &str| {
        offers
            .iter()
            .find(|o| o.instance_type.name == name && o.capacity == Capacity::Spot)
            .cloned()
            .unwrap()
    };
    assert_eq!(offers.len(), 4);
    let mut req = request(&sim, "us-east-1a", Capacity::Spot, 3, 0);
    req.offers = vec![spot_of("g4dn.xlarge")];
    let got = sim.launch(&req).await.unwrap();
    assert_eq!(got.instances.len(), 3, "the T4 pool has 3");
    assert!(got.instances.iter().all(|i| i.offer.instance_type == t4));
    // The V100 pool beside it still has its one.
    let mut req = request(&sim, "us-east-1a", Capacity::Spot, 2, 1);
    req.offers = vec![spot_of("p3.2xlarge")];
    assert_eq!(sim.launch(&req).await.unwrap().instances.len(), 1);
}

#[tokio::test]
async fn capacity_follows_the_trace_and_on_demand_does_not() {
    let sim = SimCloud::new(
        vec![trace("us-east-1a", Cloud::Aws, 60, vec![0, 0, 1])],
        SimConfig::default(),
    );
    let out = sim
        .launch(&request(&sim, "us-east-1a", Capacity::Spot, 1, 0))
        .await
        .unwrap();
    assert!(out.instances.is_empty());
    assert!(out.errors[0].1.is_capacity());
    assert!(
        out.errors[0]
            .1
            .to_string()
            .contains("InsufficientInstanceCapacity")
    );
    let od = sim
        .launch(&request(&sim, "us-east-1a", Capacity::OnDemand, 1, 1))
        .await
        .unwrap();
    assert_eq!(od.instances.len(), 1);
    sim.advance(Duration::from_secs(120));
    let spot = sim
        .launch(&request(&sim, "us-east-1a", Capacity::Spot, 1, 2))
        .await
        .unwrap();
    assert_eq!(spot.instances.len(), 1);
    let offers = sim.offers(&Region::new("us-east-1")).await.unwrap();
    assert_eq!(offers.len(), 2);
    assert_eq!(offers[0].availability, Availability::Unavailable);
}

#[tokio::test]
async fn notices_come_with_the_clouds_lead_time() {
    for (cloud, lead) in [(Cloud::Aws, 120u64), (Cloud::Gcp, 30)] {
        // Up for 10 minutes, then gone.
        let mut data = vec![1; 10];
        data.extend([0; 10]);
        let sim = SimCloud::new(
            vec![trace("us-central1-a", cloud, 60, data)],
            SimConfig::default(),
        );
        let out = sim
            .launch(&request(&sim, "us-central1-a", Capacity::Spot, 1, 0))
            .await
            .unwrap();
        let id = out.instances[0].id.clone();
        sim.advance(Duration::from_secs(600 - lead - 10));
        assert!(
            sim.interruptions().await.unwrap().is_empty(),
            "{cloud}: too early"
        );
        sim.advance(Duration::from_secs(10));
        let notices = sim.interruptions().await.unwrap();
        assert_eq!(notices.len(), 1, "{cloud}");
        let n = &notices[0];
        assert_eq!(n.kind, InterruptionKind::SpotNotice);
        let gone = sim.config.start + TimeDelta::seconds(600);
        assert_eq!(n.deadline, Some(gone));
        assert_eq!(n.received_at, gone - TimeDelta::seconds(lead as i64));
        assert_eq!(
            sim.get(&id).await.unwrap().unwrap().state,
            InstanceState::Running
        );
        sim.advance(Duration::from_secs(lead));
        let after = sim.interruptions().await.unwrap();
        assert_eq!(after[0].kind, InterruptionKind::Preempted);
        assert_eq!(
            sim.get(&id).await.unwrap().unwrap().state,
            InstanceState::Terminated
        );
    }
}

#[tokio::test]
async fn faults_follow_the_seed_and_are_recorded() {
    let faults = FaultSchedule {
        seed: 42,
        throttle: 0.3,
        transient: 0.2,
        ..FaultSchedule::default()
    };
    let run = || async {
        let sim = SimCloud::new(
            vec![trace("us-east-1a", Cloud::Aws, 60, vec![1; 10])],
            SimConfig {
                faults: faults.clone(),
                ..SimConfig::default()
            },
        );
        let mut kinds = Vec::new();
        for _ in 0..40 {
            kinds.push(match sim.list("x").await {
                Ok(_) => "ok",
                Err(e) => {
                    assert!(e.is_retryable());
                    e.kind()
                }
            });
        }
        assert_eq!(
            sim.calls().iter().map(|c| c.result).collect::<Vec<_>>(),
            kinds
        );
        kinds
    };
    let a = run().await;
    assert_eq!(a, run().await);
    assert!(a.contains(&"throttled") && a.contains(&"transient") && a.contains(&"ok"));
}

#[tokio::test]
async fn scripted_quota_and_terminate_semantics() {
    let mut scripted = BTreeMap::new();
    scripted.insert(
        0,
        ProviderError::Quota {
            code: "QUOTA_EXCEEDED".into(),
            message: "gpus".into(),
        },
    );
    let sim = SimCloud::new(
        vec![trace("us-east-1a", Cloud::Aws, 60, vec![1; 10])],
        SimConfig {
            quota: Some(1),
            faults: FaultSchedule {
                scripted,
                ..FaultSchedule::default()
            },
            ..SimConfig::default()
        },
    );
    let req = request(&sim, "us-east-1a", Capacity::OnDemand, 1, 0);
    assert!(sim.launch(&req).await.unwrap_err().is_quota());
    let ok = sim.launch(&req).await.unwrap();
    assert_eq!(ok.instances.len(), 1);
    let over = sim
        .launch(&request(&sim, "us-east-1a", Capacity::OnDemand, 1, 1))
        .await
        .unwrap();
    assert!(over.errors[0].1.is_quota());
    sim.terminate(&ok.instances[0].id).await.unwrap();
    sim.terminate(&InstanceId::from("sim-missing"))
        .await
        .unwrap();
    assert!(sim.list("test").await.unwrap().is_empty());
}

/// Reclaims under a schedule that loses or delays notices: a lost one sends nothing (the
/// instance just ends), a late one arrives a quarter of the lead before the reclaim.
#[tokio::test]
async fn notices_can_be_lost_or_late() {
    let mut data = vec![8; 3];
    data.extend(vec![0; 20]);
    let run = |lost: f64, late: f64| {
        let data = data.clone();
        async move {
            let sim = SimCloud::new(
                vec![trace("us-east-1a", Cloud::Aws, 600, data)],
                SimConfig {
                    faults: FaultSchedule {
                        seed: 9,
                        lost_notices: lost,
                        late_notices: late,
                        ..FaultSchedule::default()
                    },
                    ..SimConfig::default()
                },
            );
            sim.launch(&request(&sim, "us-east-1a", Capacity::Spot, 8, 0))
                .await
                .unwrap();
            let mut notices = Vec::new();
            for _ in 0..40 {
                sim.advance(Duration::from_secs(60));
                for n in sim.interruptions().await.unwrap() {
                    notices.push((n.kind, sim.now(), n.deadline));
                }
            }
            let left = sim.list("test").await.unwrap().len();
            (notices, left)
        }
    };
    type Seen = (InterruptionKind, DateTime<Utc>, Option<DateTime<Utc>>);
    let count = |v: &[Seen], k| v.iter().filter(|n| n.0 == k).count();
    let (all, left) = run(0.0, 0.0).await;
    assert_eq!(left, 0);
    assert_eq!(count(&all, InterruptionKind::SpotNotice), 8);
    assert_eq!(count(&all, InterruptionKind::Preempted), 8);
    let (none, left) = run(1.0, 0.0).await;
    assert_eq!(left, 0, "lost notices still reclaim");
    assert!(none.is_empty(), "{none:?}");
    let (late, _) = run(0.0, 1.0).await;
    assert_eq!(count(&late, InterruptionKind::SpotNotice), 8);
    for (kind, got, deadline) in &late {
        if *kind == InterruptionKind::SpotNotice {
            let lead = (deadline.unwrap() - *got).num_seconds();
            assert!(
                (0..=30).contains(&lead),
                "late notice {lead} s before reclaim"
            );
        }
    }
}

#[tokio::test]
async fn a_quota_cuts_a_launch_short_with_an_error_that_names_its_limit() {
    let sim = SimCloud::new(
        vec![trace("us-east-1a", Cloud::Aws, 60, vec![10; 100])],
        SimConfig::default(),
    )
    .with_quota(SimQuota::new("us-east-1", "V100", Some(Capacity::Spot), 3));
    let out = sim
        .launch(&request(&sim, "us-east-1a", Capacity::Spot, 5, 0))
        .await
        .unwrap();
    assert_eq!(out.instances.len(), 3, "the quota's 3 of the 5 asked");
    let (key, error) = &out.errors[0];
    assert!(error.is_quota(), "{error}");
    let offer = &out.instances[0].offer;
    assert_eq!(key, &offer.key());
    let named = tern_cloud::quota_named(error, offer).unwrap();
    assert_eq!((named.limit, named.capacity), (3, Some(Capacity::Spot)));
    assert_eq!(named.units(offer), 1);

    let read = sim.quotas(&Region::new("us-east-1")).await.unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(
        read[0],
        SimQuota::new("us-east-1", "V100", Some(Capacity::Spot), 3).cloud_quota(Some(3))
    );
    assert!(
        sim.quotas(&Region::new("us-west-2"))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(sim.calls().iter().any(|c| c.op == "quotas"));

    // Full: a spot launch gets nothing; on-demand is not limited by a spot quota.
    let none = sim
        .launch(&request(&sim, "us-east-1a", Capacity::Spot, 1, 1))
        .await
        .unwrap();
    assert!(none.instances.is_empty() && none.errors[0].1.is_quota());
    let od = sim
        .launch(&request(&sim, "us-east-1a", Capacity::OnDemand, 2, 2))
        .await
        .unwrap();
    assert_eq!((od.instances.len(), od.errors.len()), (2, 0));
    // An instance ended gives its accelerators back.
    sim.terminate(&out.instances[0].id).await.unwrap();
    let read = sim.quotas(&Region::new("us-east-1")).await.unwrap();
    assert_eq!(read[0].used, Some(2));
    let one = sim
        .launch(&request(&sim, "us-east-1a", Capacity::Spot, 1, 3))
        .await
        .unwrap();
    assert_eq!(one.instances.len(), 1);
}

#[tokio::test]
async fn a_quota_on_both_capacities_counts_accelerators_and_honours_min_count() {
    let a100 = InstanceType {
        name: "p4de.24xlarge".into(),
        vcpus: 96.0,
        memory_gib: 1152.0,
        accelerator: Some(Accelerator::new("A100-80GB", 8)),
    };
    let sim = SimCloud::new(
        vec![trace("us-east-1a", Cloud::Aws, 60, vec![10; 100])],
        SimConfig {
            instance_type: a100,
            ..SimConfig::default()
        },
    )
    .with_quota(SimQuota::new("us-east-1", "A100", None, 20));
    let mut gang = request(&sim, "us-east-1a", Capacity::Spot, 3, 0);
    gang.min_count = 3;
    let out = sim.launch(&gang).await.unwrap();
    assert!(
        out.instances.is_empty(),
        "24 GPUs asked, 20 allowed, all or none"
    );
    assert!(out.errors.iter().any(|(_, e)| e.is_quota()));
    let spot = sim
        .launch(&request(&sim, "us-east-1a", Capacity::Spot, 1, 1))
        .await
        .unwrap();
    let od = sim
        .launch(&request(&sim, "us-east-1a", Capacity::OnDemand, 2, 2))
        .await
        .unwrap();
    assert_eq!((spot.instances.len(), od.instances.len()), (1, 1));
    assert!(
        od.errors[0].1.is_quota(),
        "16 of 20 used: one more VM of 8 does not fit"
    );
    let read = sim.quotas(&Region::new("us-east-1")).await.unwrap();
    assert_eq!((read[0].used, read[0].limit), (Some(16), 20));
}

#[test]
fn quotas_parse_as_the_command_line_writes_them() {
    let q: SimQuota = "us-east-1:A100:spot=16".parse().unwrap();
    assert_eq!(
        q,
        SimQuota::new("us-east-1", "A100", Some(Capacity::Spot), 16)
    );
    let both: SimQuota = "us-east-1:V100=8".parse().unwrap();
    assert_eq!(both.capacity, None);
    assert_eq!(both.name(), "sim:V100:any");
    for bad in [
        "us-east-1=8",
        "us-east-1:V100",
        "us-east-1:V100:spot=-1",
        ":V100=1",
        "r:f:bogus=1",
        "r:f:spot:x=1",
    ] {
        assert!(bad.parse::<SimQuota>().is_err(), "{bad}");
    }
}
