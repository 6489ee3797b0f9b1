//! The real google-cloud-rust Compute clients inside `GcpProvider`, against the crate's fake
//! of the Compute REST API (anonymous credentials).

mod support;

use tern_cloud::{
    Availability, Capacity, LaunchRequest, Offer, Provider, QuotaScope, Region, quota_named, tag,
};
use tern_gcp::fake::{FakeCompute, FakeZone};
use tern_gcp::{GcpConfig, GcpProvider, labels};

const PROJECT: &str = "tern-test";
const REGION: &str = "us-central1";
const OWNER: &str = "tern-fake";

fn zones() -> Vec<FakeZone> {
    let mt = |n: &str, c: i32, m: i32| (n.to_owned(), c, m);
    vec![
        FakeZone {
            name: "us-central1-a".into(),
            region: REGION.into(),
            machine_types: vec![
                mt("n1-highmem-8", 8, 53248),
                mt("n1-highmem-16", 16, 106_496),
                mt("a2-highgpu-1g", 12, 87040),
                mt("e2-small", 2, 2048),
            ],
            accelerators: vec!["nvidia-tesla-v100".into(), "nvidia-tesla-t4".into()],
            tpu_types: Vec::new(),
        },
        FakeZone {
            name: "us-central1-b".into(),
            region: REGION.into(),
            machine_types: vec![mt("n1-highmem-8", 8, 53248)],
            accelerators: vec!["nvidia-tesla-t4".into()],
            tpu_types: Vec::new(),
        },
        FakeZone {
            name: "europe-west4-a".into(),
            region: "europe-west4".into(),
            machine_types: vec![mt("n1-highmem-8", 8, 53248)],
            accelerators: vec!["nvidia-tesla-v100".into()],
            tpu_types: Vec::new(),
        },
    ]
}

fn config(fake: &FakeCompute) -> GcpConfig {
    support::config(fake, PROJECT, REGION, OWNER)
}

async fn setup() -> (FakeCompute, GcpProvider) {
    let fake = FakeCompute::start(PROJECT, zones()).await.expect("fake");
    let provider = GcpProvider::connect(config(&fake)).await.expect("provider");
    (fake, provider)
}

fn find<'a>(
    offers: &'a [Offer],
    zone: &str,
    gpu: &str,
    count: u32,
    capacity: Capacity,
) -> &'a Offer {
    offers
        .iter()
        .find(|o| {
            o.zone.0 == zone
                && o.capacity == capacity
                && o.accelerator()
                    .is_some_and(|a| a.name == gpu && a.count == count)
        })
        .unwrap_or_else(|| panic!("no {count}x{gpu} {capacity} offer in {zone}"))
}

fn request(offers: Vec<Offer>, count: u32, min_count: u32) -> LaunchRequest {
    support::request(offers, count, min_count, OWNER, "BERT.large")
}

#[tokio::test]
async fn offers_are_the_catalogs_where_the_zone_sells_the_shape_at_catalog_prices() {
    let (_fake, provider) = setup().await;
    let offers = provider.offers(&Region::new(REGION)).await.expect("offers");
    let catalog = tern_pricing::bundled().expect("catalog");
    // Only zones of the region the API lists, only shapes each zone sells.
    assert!(offers.iter().all(|o| o.zone.0.starts_with("us-central1-")));
    assert!(offers.iter().all(|o| o.zone.0 != "us-central1-c"));
    let v100 = find(&offers, "us-central1-a", "V100", 1, Capacity::Spot);
    assert_eq!(v100.instance_type.name, "n1-highmem-8");
    // us-central1-b has N1 hosts but no V100s: no V100 offer there, T4 offers yes.
    assert!(
        !offers
            .iter()
            .any(|o| o.zone.0 == "us-central1-b"
                && o.accelerator().is_some_and(|a| a.name == "V100"))
    );
    find(&offers, "us-central1-b", "T4", 1, Capacity::OnDemand);
    // a2-highgpu-1g is listed in -a: its A100 offer is there; not n1-highmem-32 (not listed).
    find(&offers, "us-central1-a", "A100", 1, Capacity::OnDemand);
    assert!(
        !offers
            .iter()
            .any(|o| o.instance_type.name == "n1-highmem-32")
    );
    // CPU-only shapes are not offered.
    assert!(offers.iter().all(|o| o.accelerator().is_some()));
    // Every offer is the catalog's own, price included.
    for o in &offers {
        let same = catalog
            .offers
            .iter()
            .find(|c| c.key() == o.key() && c.accelerator() == o.accelerator())
            .unwrap_or_else(|| panic!("{} not in the catalog", o.key()));
        assert!(
            (same.price_per_hour - o.price_per_hour).abs() < 1e-12,
            "{}",
            o.key()
        );
    }
}

#[tokio::test]
async fn a_launch_makes_a_labelled_spot_vm_with_its_gpus_and_a_repeat_makes_none() {
    let (fake, provider) = setup().await;
    let offers = provider.offers(&Region::new(REGION)).await.expect("offers");
    let req = request(
        vec![find(&offers, "us-central1-a", "V100", 1, Capacity::Spot).clone()],
        1,
        1,
    );
    let out = provider.launch(&req).await.expect("launch");
    assert_eq!(out.instances.len(), 1, "{:?}", out.errors);
    // The insert's operation was polled through PENDING → RUNNING → DONE.
    assert!(fake.polls() >= 2, "{} polls", fake.polls());
    let inst = &out.instances[0];
    assert!(inst.id.0.starts_with("us-central1-a/tern-"), "{}", inst.id);
    assert_eq!(inst.job(), Some("BERT.large"), "exact tags read back");
    assert_eq!(inst.intent_id(), Some(req.intent));
    let (zone, name) = inst.id.0.split_once('/').expect("zone/name");
    let vm = fake.instance(zone, name).expect("in the fake");
    assert_eq!(vm["labels"]["tern-owner"], OWNER);
    assert_eq!(vm["labels"]["tern-intent"], req.intent.to_string());
    assert_eq!(vm["labels"]["tern-job"], "bert-large");
    assert_eq!(vm["scheduling"]["provisioningModel"], "SPOT");
    assert_eq!(vm["scheduling"]["instanceTerminationAction"], "DELETE");
    assert_eq!(vm["scheduling"]["onHostMaintenance"], "TERMINATE");
    assert_eq!(vm["guestAccelerators"][0]["acceleratorCount"], 1);
    assert!(
        vm["guestAccelerators"][0]["acceleratorType"]
            .as_str()
            .is_some_and(|t| t.ends_with("acceleratorTypes/nvidia-tesla-v100"))
    );
    // The same intent again (a retry after a crash): the instance it made, no new call.
    let posts = fake.calls().len();
    let again = provider.launch(&req).await.expect("relaunch");
    assert_eq!(
        again.instances.iter().map(|i| &i.id).collect::<Vec<_>>(),
        vec![&inst.id]
    );
    assert_eq!(fake.calls().len(), posts);
    assert_eq!(fake.instances().len(), 1);
}

#[tokio::test]
async fn two_racing_launches_of_one_intent_send_one_request_id_and_make_one_vm() {
    let (fake, provider) = setup().await;
    let offers = provider.offers(&Region::new(REGION)).await.expect("offers");
    let req = request(
        vec![find(&offers, "us-central1-a", "T4", 1, Capacity::OnDemand).clone()],
        1,
        1,
    );
    let (a, b) = tokio::join!(provider.launch(&req), provider.launch(&req));
    let (a, b) = (a.expect("a"), b.expect("b"));
    assert_eq!(fake.instances().len(), 1);
    assert_eq!(a.instances[0].id, b.instances[0].id);
    let posts: Vec<_> = fake.calls().into_iter().filter(|c| c.0 == "POST").collect();
    assert!(!posts.is_empty());
    assert!(
        posts.iter().all(|c| c.2 == posts[0].2 && c.2.is_some()),
        "{posts:?}"
    );
    let vm = &fake.instances()[0];
    assert!(!vm.3, "on-demand");
}

#[tokio::test]
async fn a_gang_goes_through_bulk_insert_all_or_nothing() {
    let (fake, provider) = setup().await;
    let offers = provider.offers(&Region::new(REGION)).await.expect("offers");
    let a = find(&offers, "us-central1-a", "T4", 1, Capacity::Spot).clone();
    let b = find(&offers, "us-central1-b", "T4", 1, Capacity::Spot).clone();
    // Zone a has 3 VMs left, the gang needs 4: nothing there; zone b fills it.
    fake.set_capacity("us-central1-a", "n1-highmem-8", 3);
    let req = request(vec![a.clone(), b], 4, 4);
    let out = provider.launch(&req).await.expect("launch");
    assert_eq!(out.instances.len(), 4);
    assert!(
        out.instances
            .iter()
            .all(|i| i.offer.zone.0 == "us-central1-b")
    );
    assert_eq!(out.errors.len(), 1);
    assert!(out.errors[0].1.is_capacity(), "{:?}", out.errors);
    assert_eq!(out.errors[0].0, a.key());
    let bulk: Vec<_> = fake
        .calls()
        .into_iter()
        .filter(|c| c.1.ends_with("/instances/bulkInsert"))
        .collect();
    assert_eq!(bulk.len(), 2);
    assert_ne!(
        bulk[0].2, bulk[1].2,
        "each offer tried has its own requestId"
    );
    assert!(fake.instances().iter().all(|i| i.0 == "us-central1-b"));
    // The stockout is remembered: the zone's offer reads unavailable for a while.
    let again = provider.offers(&Region::new(REGION)).await.expect("offers");
    let flagged = again
        .iter()
        .find(|o| o.key() == a.key())
        .expect("still listed");
    assert_eq!(flagged.availability, Availability::Unavailable);
}

#[tokio::test]
async fn a_stockout_inside_a_done_operation_is_a_capacity_error() {
    let (fake, provider) = setup().await;
    let offers = provider.offers(&Region::new(REGION)).await.expect("offers");
    fake.set_capacity("us-central1-a", "a2-highgpu-1g", 0);
    let a100 = find(&offers, "us-central1-a", "A100", 1, Capacity::Spot).clone();
    let out = provider
        .launch(&request(vec![a100], 1, 1))
        .await
        .expect("the call succeeds");
    assert!(out.instances.is_empty());
    let (_, e) = &out.errors[0];
    assert!(e.is_capacity() && !e.is_retryable(), "{e:?}");
    assert!(
        e.to_string().contains("ZONE_RESOURCE_POOL_EXHAUSTED"),
        "{e}"
    );
}

#[tokio::test]
async fn quota_inside_the_operation_names_its_metric() {
    let (fake, provider) = setup().await;
    let offers = provider.offers(&Region::new(REGION)).await.expect("offers");
    fake.set_quota_exceeded("nvidia-tesla-v100", "NVIDIA_V100_GPUS");
    let v100 = find(&offers, "us-central1-a", "V100", 1, Capacity::OnDemand).clone();
    let out = provider
        .launch(&request(vec![v100], 1, 1))
        .await
        .expect("call");
    let (_, e) = &out.errors[0];
    assert!(e.is_quota(), "{e:?}");
    assert!(e.to_string().contains("NVIDIA_V100_GPUS"), "{e}");
    assert!(fake.instances().is_empty());
}

/// The T4 quotas of the test region, as the provider reads them, by metric.
async fn t4_quotas(provider: &GcpProvider) -> Vec<(String, Option<Capacity>, u32, Option<u32>)> {
    let mut read: Vec<_> = provider
        .quotas(&Region::new(REGION))
        .await
        .expect("quotas")
        .into_iter()
        .filter(|q| q.name.contains("T4"))
        .map(|q| (q.name, q.capacity, q.limit, q.used))
        .collect();
    read.sort();
    read
}

#[tokio::test]
async fn regions_get_lists_gpu_quotas_and_an_insert_past_one_is_refused_with_its_limit() {
    let (fake, provider) = setup().await;
    fake.set_region_quota(REGION, "NVIDIA_T4_GPUS", 2.0);
    fake.set_region_quota("europe-west4", "NVIDIA_V100_GPUS", 8.0);
    let offers = provider.offers(&Region::new(REGION)).await.expect("offers");
    let quotas = provider.quotas(&Region::new(REGION)).await.expect("quotas");
    assert_eq!(
        quotas.len(),
        1,
        "only GPU metrics, only this region: {quotas:?}"
    );
    assert_eq!(quotas[0].scope, QuotaScope::Model { name: "T4".into() });
    // No preemptible T4 quota: spot VMs count on the standard one, which limits both.
    assert_eq!(
        t4_quotas(&provider).await,
        [("NVIDIA_T4_GPUS".into(), None, 2, Some(0))]
    );
    let on_demand = find(&offers, "us-central1-a", "T4", 1, Capacity::OnDemand).clone();
    let spot = find(&offers, "us-central1-b", "T4", 1, Capacity::Spot).clone();
    for (offer, n) in [(&on_demand, 1), (&spot, 2)] {
        let out = provider
            .launch(&request(vec![offer.clone()], 1, 1))
            .await
            .expect("launch");
        assert_eq!(out.instances.len(), 1, "{:?}", out.errors);
        assert_eq!(t4_quotas(&provider).await[0].3, Some(n));
    }
    let out = provider
        .launch(&request(vec![on_demand.clone()], 1, 1))
        .await
        .expect("call");
    let (key, e) = &out.errors[0];
    assert!(out.instances.is_empty() && e.is_quota(), "{e:?}");
    assert_eq!(key, &on_demand.key());
    let named = quota_named(e, &on_demand).expect("the limit is in the message");
    assert_eq!((named.name.as_str(), named.limit), ("NVIDIA_T4_GPUS", 2));
    assert_eq!(named.units(&on_demand), 1);
    // Another region's quotas are not this provider's to read.
    let elsewhere = provider.quotas(&Region::new("europe-west4")).await;
    assert_eq!(elsewhere.expect("quotas"), []);
}

#[tokio::test]
async fn spot_vms_count_on_the_preemptible_quota_and_a_gang_past_it_gets_nothing() {
    let (fake, provider) = setup().await;
    fake.set_region_quota(REGION, "NVIDIA_T4_GPUS", 1.0);
    fake.set_region_quota(REGION, "PREEMPTIBLE_NVIDIA_T4_GPUS", 3.0);
    let offers = provider.offers(&Region::new(REGION)).await.expect("offers");
    let spot = find(&offers, "us-central1-a", "T4", 1, Capacity::Spot).clone();
    let on_demand = find(&offers, "us-central1-a", "T4", 1, Capacity::OnDemand).clone();
    let gang = provider
        .launch(&request(vec![spot.clone()], 2, 2))
        .await
        .expect("launch");
    assert_eq!(gang.instances.len(), 2, "{:?}", gang.errors);
    let single = provider
        .launch(&request(vec![on_demand], 1, 1))
        .await
        .expect("launch");
    assert_eq!(single.instances.len(), 1, "{:?}", single.errors);
    assert_eq!(
        t4_quotas(&provider).await,
        [
            (
                "NVIDIA_T4_GPUS".into(),
                Some(Capacity::OnDemand),
                1,
                Some(1)
            ),
            (
                "PREEMPTIBLE_NVIDIA_T4_GPUS".into(),
                Some(Capacity::Spot),
                3,
                Some(2)
            ),
        ]
    );
    // A gang of two more spot VMs: one GPU left, all or nothing.
    let out = provider
        .launch(&request(vec![spot.clone()], 2, 2))
        .await
        .expect("call");
    assert!(out.instances.is_empty());
    let e = &out.errors[0].1;
    let named = quota_named(e, &spot).expect("the limit is in the message");
    assert_eq!(named.capacity, Some(Capacity::Spot));
    assert_eq!(
        (named.name.as_str(), named.limit),
        ("PREEMPTIBLE_NVIDIA_T4_GPUS", 3)
    );
    assert_eq!(fake.instances().len(), 3);
}

#[tokio::test]
async fn a_rate_limited_insert_is_resent_with_the_same_request_id() {
    let (fake, provider) = setup().await;
    let offers = provider.offers(&Region::new(REGION)).await.expect("offers");
    fake.rate_limit(2);
    let t4 = find(&offers, "us-central1-a", "T4", 1, Capacity::Spot).clone();
    let out = provider
        .launch(&request(vec![t4], 1, 1))
        .await
        .expect("launch");
    assert_eq!(out.instances.len(), 1);
    let posts: Vec<_> = fake.calls().into_iter().filter(|c| c.0 == "POST").collect();
    assert_eq!(posts.len(), 3);
    assert!(posts.iter().all(|c| c.2 == posts[0].2));
    // More rate limiting than the retries allow: the launch says throttled.
    fake.rate_limit(10);
    let t4 = find(&offers, "us-central1-a", "T4", 1, Capacity::OnDemand).clone();
    let e = provider
        .launch(&request(vec![t4], 1, 1))
        .await
        .expect_err("throttled");
    assert!(e.is_throttled() && e.is_retryable(), "{e:?}");
}

#[tokio::test]
async fn a_preemption_in_zone_operations_becomes_one_interruption() {
    let (fake, provider) = setup().await;
    let offers = provider.offers(&Region::new(REGION)).await.expect("offers");
    let t4 = find(&offers, "us-central1-b", "T4", 1, Capacity::Spot).clone();
    let out = provider
        .launch(&request(vec![t4], 1, 1))
        .await
        .expect("launch");
    let id = out.instances[0].id.clone();
    assert!(provider.interruptions().await.expect("poll").is_empty());
    let (zone, name) = id.0.split_once('/').expect("id");
    assert!(fake.preempt(zone, name));
    let notices = provider.interruptions().await.expect("poll");
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].instance, id);
    assert_eq!(notices[0].kind, tern_cloud::InterruptionKind::SpotNotice);
    let lead = notices[0].deadline.expect("deadline") - notices[0].received_at;
    assert!(lead <= chrono::Duration::seconds(30), "{lead}");
    // Reported once.
    assert!(provider.interruptions().await.expect("poll").is_empty());
    // Stopping through its 30 s, then deleted (termination action DELETE): no longer listed.
    let listed = provider.list(OWNER).await.expect("list");
    assert_eq!(listed[0].state, tern_cloud::InstanceState::Stopping);
    assert!(fake.reclaim(zone, name));
    assert!(provider.list(OWNER).await.expect("list").is_empty());
}

#[tokio::test]
async fn list_and_terminate_touch_only_instances_with_our_owner_label() {
    let (fake, provider) = setup().await;
    fake.set_page_size(1);
    let offers = provider.offers(&Region::new(REGION)).await.expect("offers");
    let t4 = find(&offers, "us-central1-a", "T4", 1, Capacity::Spot).clone();
    let ours = provider
        .launch(&request(vec![t4], 2, 2))
        .await
        .expect("launch");
    assert_eq!(ours.instances.len(), 2);
    fake.put_instance("us-central1-a", "someone-elses", &[("team", "ml")]);
    fake.put_instance(
        "us-central1-a",
        "other-owner",
        &[("tern-owner", "another-tern")],
    );
    // Leak collection lists by owner label (every page).
    let listed = provider.list(OWNER).await.expect("list");
    // Read back as the T4 offer, not another GPU on the same N1 host type.
    assert!(
        listed
            .iter()
            .all(|i| i.offer.accelerator().is_some_and(|a| a.name == "T4"))
    );
    let mut ids: Vec<_> = listed.iter().map(|i| i.id.clone()).collect();
    ids.sort();
    let mut want: Vec<_> = ours.instances.iter().map(|i| i.id.clone()).collect();
    want.sort();
    assert_eq!(ids, want);
    assert!(listed.iter().all(|i| i.owner() == Some(OWNER)));
    // Not ours: refused, and still there.
    for name in ["someone-elses", "other-owner"] {
        let e = provider
            .terminate(&format!("us-central1-a/{name}").as_str().into())
            .await
            .expect_err("not ours");
        assert!(e.to_string().contains("tern-owner"), "{e}");
        assert!(fake.instance("us-central1-a", name).is_some());
    }
    // Ours: deleted; a second delete of a gone VM is fine.
    provider
        .terminate(&ours.instances[0].id)
        .await
        .expect("terminate");
    provider
        .terminate(&ours.instances[0].id)
        .await
        .expect("already gone");
    assert_eq!(provider.list(OWNER).await.expect("list").len(), 1);
}

#[tokio::test]
async fn dry_run_makes_no_mutating_call() {
    let fake = FakeCompute::start(PROJECT, zones()).await.expect("fake");
    let provider = GcpProvider::connect(GcpConfig {
        dry_run: true,
        ..config(&fake)
    })
    .await
    .expect("provider");
    let offers = provider.offers(&Region::new(REGION)).await.expect("offers");
    let t4 = find(&offers, "us-central1-a", "T4", 1, Capacity::Spot).clone();
    let out = provider
        .launch(&request(vec![t4.clone()], 1, 1))
        .await
        .expect("launch");
    assert!(out.instances.is_empty() && out.errors.is_empty());
    let out = provider
        .launch(&request(vec![t4], 3, 3))
        .await
        .expect("gang");
    assert!(out.instances.is_empty());
    fake.put_instance("us-central1-a", "tern-x", &[("tern-owner", OWNER)]);
    provider
        .terminate(&"us-central1-a/tern-x".into())
        .await
        .expect("terminate");
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
    assert!(fake.instance("us-central1-a", "tern-x").is_some());
}

#[test]
fn label_filters_name_the_gcp_label_keys() {
    assert_eq!(
        labels::filter(tag::OWNER, "Team-A"),
        "labels.tern-owner = \"team-a\""
    );
}

/// The fake's SKUs for the bundled catalog's us-central1-a prices, plus decoys $7 dearer in
/// another region, which tern must not pick up.
fn catalog_skus() -> Vec<serde_json::Value> {
    let catalog = tern_pricing::bundled().expect("catalog");
    let mut skus = tern_gcp::fake::skus_from_catalog(&catalog.offers, "us-central1-a");
    let decoys = tern_gcp::fake::skus_from_catalog(&catalog.offers, "us-central1-a")
        .into_iter()
        .map(|mut s| {
            s["serviceRegions"] = serde_json::json!(["europe-west4"]);
            s["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"]["units"] =
                serde_json::json!("7");
            s
        });
    skus.extend(decoys);
    skus
}

#[tokio::test]
async fn billing_catalog_prices_agree_with_the_bundled_catalog_and_fall_back_to_it() {
    let (fake, provider) = setup().await;
    fake.set_page_size(3);
    fake.set_skus(catalog_skus());
    let catalog = tern_pricing::bundled().expect("catalog");
    let offers = provider.offers(&Region::new(REGION)).await.expect("offers");
    let mut live = 0;
    for o in &offers {
        let same = catalog
            .offers
            .iter()
            .find(|c| c.key() == o.key() && c.accelerator() == o.accelerator())
            .expect("in catalog");
        assert!(
            (same.price_per_hour - o.price_per_hour).abs() < 1e-4,
            "{}: catalog {} vs live {}",
            o.key(),
            same.price_per_hour,
            o.price_per_hour
        );
        if o.observed_at.is_some() {
            live += 1;
            assert_eq!(o.breakdown.len(), 2, "{:?}", o.breakdown);
        }
    }
    // N1 + GPU offers are live-priced; A2 (no A2 core or RAM SKUs served) keeps the catalog's.
    let n1 = offers
        .iter()
        .filter(|o| o.instance_type.name.starts_with("n1-"))
        .count();
    assert!(n1 > 0 && live == n1, "{live} live of {n1} N1 offers");
    let a2 = find(&offers, "us-central1-a", "A100", 1, Capacity::Spot);
    assert!(a2.observed_at.is_none());
}

#[tokio::test]
async fn an_unreachable_billing_catalog_leaves_the_bundled_prices() {
    let (fake, provider) = setup().await;
    fake.set_skus(catalog_skus());
    fake.set_billing_down(true);
    let offers = provider
        .offers(&Region::new(REGION))
        .await
        .expect("offers still");
    assert!(!offers.is_empty());
    assert!(offers.iter().all(|o| o.observed_at.is_none()));
}

#[tokio::test]
async fn a_project_without_the_tpu_api_still_lists_and_launches_vms() {
    let (fake, provider) = setup().await;
    fake.set_tpu_disabled(true);
    let offers = provider.offers(&Region::new(REGION)).await.expect("offers");
    let t4 = find(&offers, "us-central1-a", "T4", 1, Capacity::Spot).clone();
    let out = provider
        .launch(&request(vec![t4], 1, 1))
        .await
        .expect("launch");
    assert_eq!(out.instances.len(), 1);
    assert_eq!(provider.list(OWNER).await.expect("list").len(), 1);
    assert!(provider.interruptions().await.expect("poll").is_empty());
}

/// A worker template as Terraform's module makes one: a boot disk from an image, a scratch
/// disk, the network and a startup script.
fn worker_template() -> serde_json::Value {
    serde_json::json!({
        "machineType": "n1-highmem-8",
        "disks": [
            {"boot": true, "autoDelete": true,
             "initializeParams": {"sourceImage": "projects/deeplearning/global/images/cu128", "diskSizeGb": "100"}},
            {"boot": false, "autoDelete": true, "initializeParams": {"diskSizeGb": "50"}}
        ],
        "networkInterfaces": [{"network": "global/networks/workers"}],
        "metadata": {"items": [{"key": "startup-script", "value": "tern agent"}]}
    })
}

/// (boot?, image, size GB) of each disk of a VM, as the fake made it.
fn disks_of(fake: &FakeCompute, id: &tern_cloud::InstanceId) -> Vec<(bool, String, String)> {
    let (zone, name) = id.0.split_once('/').expect("zone/name");
    let vm = fake.instance(zone, name).expect("in the fake");
    vm["disks"]
        .as_array()
        .expect("disks")
        .iter()
        .map(|d| {
            let init = &d["initializeParams"];
            (
                d["boot"].as_bool().unwrap_or(false),
                init["sourceImage"].as_str().unwrap_or("").to_owned(),
                init["diskSizeGb"].to_string().trim_matches('"').to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_jobs_disk_size_resizes_the_templates_boot_disk_and_keeps_the_rest() {
    let fake = FakeCompute::start(PROJECT, zones()).await.expect("fake");
    fake.put_template(None, "tern-workers", worker_template());
    let provider = GcpProvider::connect(GcpConfig {
        instance_template: Some("global/instanceTemplates/tern-workers".into()),
        ..config(&fake)
    })
    .await
    .expect("provider");
    let offers = provider.offers(&Region::new(REGION)).await.expect("offers");
    let t4 = find(&offers, "us-central1-b", "T4", 1, Capacity::Spot).clone();
    let image = "projects/deeplearning/global/images/cu128".to_owned();

    // One VM (insert) and a gang of two (bulkInsert), each with a 300 GB boot disk.
    for count in [1, 2] {
        let mut req = request(vec![t4.clone()], count, count);
        req.disk_gb = Some(300);
        let out = provider.launch(&req).await.expect("launch");
        assert_eq!(out.instances.len(), count as usize, "{:?}", out.errors);
        for i in &out.instances {
            assert_eq!(
                disks_of(&fake, &i.id),
                [
                    (true, image.clone(), "300".to_owned()),
                    (false, String::new(), "50".to_owned())
                ],
                "{count} VMs"
            );
            let (zone, name) = i.id.0.split_once('/').expect("zone/name");
            let vm = fake.instance(zone, name).expect("vm");
            assert_eq!(
                vm["networkInterfaces"][0]["network"],
                "global/networks/workers"
            );
        }
    }
    // Without disk_gb the template's disks are left alone.
    let out = provider
        .launch(&request(vec![t4.clone()], 1, 1))
        .await
        .expect("launch");
    assert_eq!(disks_of(&fake, &out.instances[0].id)[0].2, "100");

    // No template: the provider's own boot disk takes the size.
    let plain = GcpProvider::connect(config(&fake)).await.expect("provider");
    let mut req = request(vec![t4.clone()], 1, 1);
    req.disk_gb = Some(400);
    let out = plain.launch(&req).await.expect("launch");
    let disks = disks_of(&fake, &out.instances[0].id);
    assert_eq!(disks.len(), 1);
    assert_eq!(disks[0].2, "400");

    // A template that does not exist fails the launch before any insert.
    let missing = GcpProvider::connect(GcpConfig {
        instance_template: Some("global/instanceTemplates/gone".into()),
        ..config(&fake)
    })
    .await
    .expect("provider");
    let posts = fake.calls().len();
    let mut req = request(vec![t4], 1, 1);
    req.disk_gb = Some(300);
    let e = missing.launch(&req).await.expect_err("no template");
    assert!(e.to_string().contains("instanceTemplates/gone"), "{e}");
    assert_eq!(fake.calls().len(), posts, "nothing sent");
}
