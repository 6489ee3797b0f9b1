//! tern-aws against a real moto server (EC2 + SQS) with the real SDK clients.
//!
//! moto's data is fake: every spot price is 0.00001 with a 2006 timestamp, and CreateFleet
//! puts all capacity on the first override. These tests check tern's handling of the API, not
//! those values.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_ec2::types::{InstanceType as Ec2Type, ResourceType, Tag, TagSpecification};
use support::*;
use tern_aws::{AwsConfig, LAUNCH_TAG};
use tern_cloud::{
    AcceleratorKind, Availability, Capacity, InstanceId, InstanceState, InterruptionKind, Provider,
    ProviderError, Region, tag,
};
use tern_pricing::PriceHistory;

fn region() -> Region {
    Region::new(REGION)
}

#[tokio::test]
async fn offers_carry_zone_ids_gpu_shapes_and_spot_prices() {
    let moto = Moto::start();
    let history = Arc::new(Mutex::new(PriceHistory::open_in_memory().unwrap()));
    let aws = provider(&moto, config()).with_price_history(history.clone());
    let offers = aws.offers(&region()).await.unwrap();
    assert!(!offers.is_empty());

    // Zones are AZ ids (use1-az…), never the account-specific names (us-east-1a).
    assert!(
        offers
            .iter()
            .all(|o| o.zone.as_str().starts_with("use1-az")),
        "{:?}",
        offers.iter().map(|o| o.zone.as_str()).collect::<Vec<_>>()
    );
    let p4: Vec<_> = offers
        .iter()
        .filter(|o| o.instance_type.name == "p4d.24xlarge")
        .collect();
    let gpu = p4[0].accelerator().unwrap();
    assert_eq!((gpu.name.as_str(), gpu.count), ("A100", 8));
    assert_eq!(gpu.kind(), AcceleratorKind::Gpu);
    assert_eq!(gpu.memory_gib, Some(40.0));
    assert_eq!(p4[0].instance_type.vcpus, 96.0);
    let t4 = offers
        .iter()
        .find(|o| o.instance_type.name == "g4dn.xlarge")
        .unwrap();
    let gpu = t4.accelerator().unwrap();
    assert_eq!(
        (gpu.name.as_str(), gpu.count, gpu.memory_gib),
        ("T4", 1, Some(16.0))
    );

    // On-demand: the bundled catalog's price for the region; spot: a live reading with the
    // time AWS set it.
    let od: Vec<_> = p4
        .iter()
        .filter(|o| o.capacity == Capacity::OnDemand)
        .collect();
    let spot: Vec<_> = p4.iter().filter(|o| o.capacity == Capacity::Spot).collect();
    assert!(!od.is_empty() && !spot.is_empty());
    assert!(
        od.iter()
            .all(|o| o.price_per_hour > 1.0 && o.observed_at.is_none())
    );
    assert!(
        spot.iter()
            .all(|o| o.observed_at.is_some() && o.price_per_hour > 0.0)
    );
    let offered: Vec<_> = offers
        .iter()
        .filter(|o| o.availability == Availability::Available(None))
        .collect();
    assert!(
        offered.len() >= 4,
        "p4d and g4dn, spot and on-demand, in several zones"
    );

    // The spot readings went into the price history, with their own timestamps.
    let points = history
        .lock()
        .unwrap()
        .history("p4d.24xlarge", None, Some(Capacity::Spot))
        .unwrap();
    assert_eq!(points.len(), spot.len());
    assert_eq!(
        Some(points[0].observed_at),
        spot.iter().find_map(|o| o.observed_at)
    );
}

#[tokio::test]
async fn offers_keep_the_last_good_data_when_a_refresh_fails() {
    let mut moto = Moto::start();
    let mut config = config();
    config.shapes_ttl = Duration::ZERO;
    config.prices_ttl = Duration::ZERO;
    let aws = provider(&moto, config);
    let first = aws.offers(&region()).await.unwrap();
    moto.stop();
    let second = aws.offers(&region()).await.unwrap();
    assert_eq!(first, second);
}

#[tokio::test]
async fn a_repeated_launch_token_makes_no_second_fleet() {
    let moto = Moto::start();
    let ec2 = ec2_client(&moto.url);
    create_template(&ec2).await;
    let aws = provider(&moto, config());
    let offers = aws.offers(&region()).await.unwrap();
    let mut wanted = pick(&offers, "p4d.24xlarge", Capacity::Spot);
    wanted.truncate(2);
    let request = request(wanted.clone(), 2, 1);

    let first = aws.launch(&request).await.unwrap();
    assert_eq!(first.instances.len(), 2, "{:?}", first.errors);
    assert!(first.errors.is_empty());
    assert!(
        first
            .instances
            .iter()
            .all(|i| i.offer.instance_type.name == "p4d.24xlarge")
    );
    assert!(
        first
            .instances
            .iter()
            .all(|i| i.offer.capacity == Capacity::Spot)
    );

    // The controller crashed after the call and retries the same intent: same key.
    let again = aws.launch(&request).await.unwrap();
    let mut ids: Vec<_> = first.instances.iter().map(|i| i.id.clone()).collect();
    let mut ids_again: Vec<_> = again.instances.iter().map(|i| i.id.clone()).collect();
    ids.sort();
    ids_again.sort();
    assert_eq!(ids, ids_again);
    let fleets = ec2.describe_fleets().send().await.unwrap();
    assert_eq!(
        fleets.fleets().len(),
        1,
        "exactly one CreateFleet reached EC2"
    );
    assert_eq!(aws.list(OWNER).await.unwrap().len(), 2);

    // A new attempt of the intent has a new key and does launch.
    let mut next = request.clone();
    next.key = tern_cloud::IdempotencyKey::derive(request.intent, 1);
    assert_eq!(aws.launch(&next).await.unwrap().instances.len(), 2);
    assert_eq!(aws.list(OWNER).await.unwrap().len(), 4);
}

#[tokio::test]
async fn a_jobs_disk_size_resizes_the_root_device_of_the_templates_image() {
    let moto = Moto::start();
    let ec2 = ec2_client(&moto.url);
    create_template(&ec2).await;
    let aws = provider(&moto, config());
    let offers = aws.offers(&region()).await.unwrap();
    let mut request = request(pick(&offers, "p4d.24xlarge", Capacity::Spot), 1, 7);
    request.disk_gb = Some(750);
    let out = aws.launch(&request).await.unwrap();
    assert_eq!(out.instances.len(), 1, "{:?}", out.errors);

    // The device is the one the template's image boots from, as EC2 describes that image.
    let template = ec2
        .describe_launch_template_versions()
        .launch_template_name(TEMPLATE)
        .versions("$Default")
        .send()
        .await
        .unwrap();
    let image = template.launch_template_versions()[0]
        .launch_template_data()
        .and_then(|d| d.image_id())
        .unwrap()
        .to_owned();
    let images = ec2
        .describe_images()
        .image_ids(&image)
        .send()
        .await
        .unwrap();
    let root = images.images()[0].root_device_name().unwrap().to_owned();
    let fleets = ec2.describe_fleets().send().await.unwrap();
    let config = &fleets.fleets()[0].launch_template_configs()[0];
    assert!(!config.overrides().is_empty(), "{config:?}");
    for o in config.overrides() {
        let mappings: Vec<_> = o
            .block_device_mappings()
            .iter()
            .map(|m| (m.device_name(), m.ebs().and_then(|e| e.volume_size())))
            .collect();
        assert_eq!(mappings, [(Some(root.as_str()), Some(750))]);
    }

    // Without disk_gb the template's disk holds: no mapping is sent.
    let mut plain = request.clone();
    plain.key = tern_cloud::IdempotencyKey::derive(request.intent, 1);
    plain.disk_gb = None;
    aws.launch(&plain).await.unwrap();
    let fleets = ec2.describe_fleets().send().await.unwrap();
    let unmapped = fleets
        .fleets()
        .iter()
        .flat_map(|f| f.launch_template_configs())
        .flat_map(|c| c.overrides())
        .filter(|o| o.block_device_mappings().is_empty())
        .count();
    assert!(unmapped > 0, "{fleets:?}");
}

#[tokio::test]
async fn launched_instances_carry_owner_intent_and_job_tags() {
    let moto = Moto::start();
    let ec2 = ec2_client(&moto.url);
    create_template(&ec2).await;
    let aws = provider(&moto, config());
    let offers = aws.offers(&region()).await.unwrap();
    let request = request(pick(&offers, "g4dn.xlarge", Capacity::OnDemand), 1, 2);
    let out = aws.launch(&request).await.unwrap();
    assert_eq!(out.instances.len(), 1);
    let id = &out.instances[0].id;

    let described = ec2
        .describe_instances()
        .instance_ids(id.as_str())
        .send()
        .await
        .unwrap();
    let instance = &described.reservations()[0].instances()[0];
    assert_eq!(instance.instance_type(), Some(&Ec2Type::G4dnXlarge));
    let tags: std::collections::BTreeMap<_, _> = instance
        .tags()
        .iter()
        .map(|t| (t.key().unwrap(), t.value().unwrap()))
        .collect();
    assert_eq!(tags.get(tag::OWNER), Some(&OWNER));
    assert_eq!(
        tags.get(tag::INTENT),
        Some(&request.intent.to_string().as_str())
    );
    assert_eq!(tags.get(tag::JOB), Some(&"job-1"));
    assert_eq!(
        tags.get(LAUNCH_TAG),
        Some(&request.key.aws_client_token().as_str())
    );

    // get() reads the same instance back as a tern instance.
    let got = aws.get(id).await.unwrap().unwrap();
    assert_eq!(got.owner(), Some(OWNER));
    assert_eq!(got.intent_id(), Some(request.intent));
    assert_eq!(got.offer.instance_type.name, "g4dn.xlarge");
    assert_eq!(got.offer.capacity, Capacity::OnDemand);
    assert!(got.offer.zone.as_str().starts_with("use1-az"));
}

#[tokio::test]
async fn terminate_is_done_when_gone_and_refuses_foreign_instances() {
    let moto = Moto::start();
    let ec2 = ec2_client(&moto.url);
    create_template(&ec2).await;
    let aws = provider(&moto, config());
    let offers = aws.offers(&region()).await.unwrap();
    let out = aws
        .launch(&request(
            pick(&offers, "p4d.24xlarge", Capacity::OnDemand),
            1,
            3,
        ))
        .await
        .unwrap();
    let id = out.instances[0].id.clone();

    aws.terminate(&id).await.unwrap();
    let state = aws.get(&id).await.unwrap().map(|i| i.state);
    assert!(
        matches!(
            state,
            Some(InstanceState::Terminated | InstanceState::Stopping) | None
        ),
        "{state:?}"
    );
    assert!(aws.list(OWNER).await.unwrap().iter().all(|i| i.id != id));
    // Terminating again, and terminating an id EC2 never had, both count as done.
    aws.terminate(&id).await.unwrap();
    assert_eq!(
        aws.get(&InstanceId::from("i-0123456789abcdef0"))
            .await
            .unwrap(),
        None
    );
    aws.terminate(&InstanceId::from("i-0123456789abcdef0"))
        .await
        .unwrap();

    // An instance without tern's owner tag is not tern's to terminate.
    let images = ec2.describe_images().send().await.unwrap();
    let foreign = ec2
        .run_instances()
        .image_id(images.images()[0].image_id().unwrap())
        .min_count(1)
        .max_count(1)
        .send()
        .await
        .unwrap();
    let foreign = InstanceId::new(foreign.instances()[0].instance_id().unwrap().to_owned());
    let err = aws.terminate(&foreign).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
    assert_eq!(
        aws.get(&foreign).await.unwrap().map(|i| i.state),
        Some(InstanceState::Running)
    );
}

#[tokio::test]
async fn list_by_owner_finds_an_untracked_instance_for_the_leak_collector() {
    let moto = Moto::start();
    let ec2 = ec2_client(&moto.url);
    let images = ec2.describe_images().send().await.unwrap();
    let image = images.images()[0].image_id().unwrap().to_owned();
    let run = |owner: &'static str| {
        let ec2 = ec2.clone();
        let image = image.clone();
        async move {
            let out = ec2
                .run_instances()
                .image_id(image)
                .instance_type(Ec2Type::G4dnXlarge)
                .min_count(1)
                .max_count(1)
                .tag_specifications(
                    TagSpecification::builder()
                        .resource_type(ResourceType::Instance)
                        .tags(Tag::builder().key(tag::OWNER).value(owner).build())
                        .build(),
                )
                .send()
                .await
                .unwrap();
            InstanceId::new(out.instances()[0].instance_id().unwrap().to_owned())
        }
    };
    // A tern instance no intent remembers (the controller lost its record), and another
    // deployment's instance.
    let leaked = run(OWNER).await;
    let other = run("someone-else").await;
    let aws = provider(&moto, config());

    let mine = aws.list(OWNER).await.unwrap();
    assert_eq!(mine.iter().map(|i| &i.id).collect::<Vec<_>>(), [&leaked]);
    assert_eq!(mine[0].offer.instance_type.name, "g4dn.xlarge");
    assert_eq!(mine[0].intent_id(), None, "untracked: no intent tag");

    for i in &mine {
        aws.terminate(&i.id).await.unwrap();
    }
    assert!(aws.list(OWNER).await.unwrap().is_empty());
    assert_eq!(aws.list("someone-else").await.unwrap()[0].id, other);
}

#[tokio::test]
async fn dry_run_makes_no_mutating_call() {
    let moto = Moto::start();
    let ec2 = ec2_client(&moto.url);
    create_template(&ec2).await;
    let live = provider(&moto, config());
    let offers = live.offers(&region()).await.unwrap();
    let launched = live
        .launch(&request(
            pick(&offers, "p4d.24xlarge", Capacity::Spot),
            1,
            4,
        ))
        .await
        .unwrap();
    let id = launched.instances[0].id.clone();

    let dry = provider(
        &moto,
        AwsConfig {
            dry_run: true,
            ..config()
        },
    );
    let (logs, guard) = capture_logs();
    let dry_request = request(pick(&offers, "p4d.24xlarge", Capacity::Spot), 3, 5);
    let out = dry.launch(&dry_request).await.unwrap();
    assert!(out.instances.is_empty() && out.errors.is_empty());
    dry.terminate(&id).await.unwrap();
    drop(guard);
    let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    // The exact calls and their parameters are in the log.
    assert!(logs.contains("call=\"CreateFleet\""), "{logs}");
    assert!(logs.contains(&dry_request.key.aws_client_token()), "{logs}");
    assert!(logs.contains("PriceCapacityOptimized"), "{logs}");
    assert!(logs.contains("call=\"TerminateInstances\""), "{logs}");
    assert!(logs.contains(id.as_str()), "{logs}");
    assert_eq!(
        ec2.describe_fleets().send().await.unwrap().fleets().len(),
        1,
        "only the live launch"
    );
    let listed = dry.list(OWNER).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_ne!(listed[0].state, InstanceState::Terminated);
}

#[tokio::test]
async fn interruption_events_round_trip_through_sqs_and_are_deleted() {
    let moto = Moto::start();
    let sqs = sqs_client(&moto.url);
    let queue = sqs
        .create_queue()
        .queue_name("tern-interruptions")
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_owned();
    let fixtures = [
        (
            include_str!("fixtures/spot-interruption-warning.json"),
            "i-0aaaaaaaaaaaaaaa1",
        ),
        (
            include_str!("fixtures/rebalance-recommendation.json"),
            "i-0aaaaaaaaaaaaaaa2",
        ),
        (
            include_str!("fixtures/state-change-terminated.json"),
            "i-0aaaaaaaaaaaaaaa3",
        ),
        (
            include_str!("fixtures/health-scheduled-retirement.json"),
            "i-0aaaaaaaaaaaaaaa4",
        ),
    ];
    for (body, id) in fixtures {
        sqs.send_message()
            .queue_url(&queue)
            .message_body(body.replace("INSTANCE_ID", id))
            .send()
            .await
            .unwrap();
    }
    sqs.send_message()
        .queue_url(&queue)
        .message_body("{\"this is\": \"not an event\"}")
        .send()
        .await
        .unwrap();

    let aws = provider(
        &moto,
        AwsConfig {
            queue_url: Some(queue.clone()),
            ..config()
        },
    );
    let mut got = aws.interruptions().await.unwrap();
    got.sort_by(|a, b| a.instance.cmp(&b.instance));
    let kinds: Vec<_> = got.iter().map(|i| (i.instance.as_str(), i.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("i-0aaaaaaaaaaaaaaa1", InterruptionKind::SpotNotice),
            ("i-0aaaaaaaaaaaaaaa2", InterruptionKind::Rebalance),
            ("i-0aaaaaaaaaaaaaaa3", InterruptionKind::Preempted),
            ("i-0aaaaaaaaaaaaaaa4", InterruptionKind::Maintenance),
        ]
    );
    assert_eq!(
        got[0].deadline.unwrap().to_rfc3339(),
        "2026-11-22T10:02:00+00:00",
        "two minutes after the warning"
    );
    assert_eq!(
        got[3].deadline.unwrap().to_rfc3339(),
        "2026-11-24T02:00:00+00:00"
    );

    // Everything, the unparseable message included, was deleted.
    assert!(aws.interruptions().await.unwrap().is_empty());
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&queue)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let count = |name| {
        attrs
            .attributes()
            .and_then(|a| a.get(&name).cloned())
            .unwrap_or_default()
    };
    assert_eq!(
        count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages),
        "0"
    );
    assert_eq!(
        count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        "0"
    );
}

/// moto 5's Service Quotas knows only the `vpc` service: for EC2's codes it answers
/// `GetServiceQuota` and `ListAWSDefaultServiceQuotas` with `NoSuchResourceException` (the
/// first as real AWS does for a quota the account never changed), and does not implement
/// `GetAWSDefaultServiceQuota` at all (HTTP 500), which is why tern lists the defaults. What
/// this checks: both calls reach moto through a client built from a shared `SdkConfig`, as
/// `connect` builds it, and an answer without values is no quota, not an error. The values
/// are checked against mocks (`mocks.rs`).
#[tokio::test]
async fn quotas_go_to_the_endpoint_override_and_unknown_ones_are_left_out() {
    let moto = Moto::start();
    let aws = provider(&moto, config()).with_quotas_client(quotas_client(&moto.url));
    assert_eq!(aws.quotas(&region()).await.unwrap(), []);
    // Nowhere to go: the same read fails, so the empty answer above came from moto.
    let closed = Moto::start();
    let url = closed.url.clone();
    drop(closed);
    let aws = provider(&moto, config()).with_quotas_client(quotas_client(&url));
    let err = aws.quotas(&region()).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
}
