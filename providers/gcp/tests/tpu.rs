//! TPU slices through the real google-cloud-tpu-v2 client against the crate's fake: small spot
//! slices as nodes, large ones as queued resources, preempted nodes deleted.

mod support;

use tern_cloud::{
    Capacity, InstanceState, InterruptionKind, LaunchRequest, Offer, Provider, Region, tag,
};
use tern_gcp::GcpProvider;
use tern_gcp::fake::{FakeCompute, FakeZone};

const PROJECT: &str = "tern-tpu";
const OWNER: &str = "tern-fake";
const ZONE: &str = "us-central1-a";

async fn setup() -> (FakeCompute, GcpProvider) {
    let zones = vec![
        FakeZone {
            name: ZONE.into(),
            region: "us-central1".into(),
            machine_types: Vec::new(),
            accelerators: Vec::new(),
            tpu_types: vec!["v3-8".into(), "v2-32".into(), "v5p-8".into()],
        },
        FakeZone {
            name: "us-central1-b".into(),
            region: "us-central1".into(),
            machine_types: Vec::new(),
            accelerators: Vec::new(),
            tpu_types: Vec::new(),
        },
    ];
    let fake = FakeCompute::start(PROJECT, zones).await.expect("fake");
    let config = support::config(&fake, PROJECT, "us-central1", OWNER);
    let provider = GcpProvider::connect(config).await.expect("provider");
    (fake, provider)
}

fn slice(offers: &[Offer], name: &str, capacity: Capacity) -> Offer {
    offers
        .iter()
        .find(|o| o.instance_type.name == name && o.capacity == capacity && o.zone.0 == ZONE)
        .unwrap_or_else(|| panic!("no {name} {capacity} offer"))
        .clone()
}

fn request(offer: Offer, count: u32) -> LaunchRequest {
    support::request(vec![offer], count, count, OWNER, "llm")
}

#[tokio::test]
async fn slices_the_zone_sells_are_offered_at_catalog_prices() {
    let (_fake, provider) = setup().await;
    let offers = provider
        .offers(&Region::new("us-central1"))
        .await
        .expect("offers");
    let names: std::collections::BTreeSet<&str> = offers
        .iter()
        .map(|o| o.instance_type.name.as_str())
        .collect();
    assert!(
        names.contains("tpu-v3-8") && names.contains("tpu-v2-32"),
        "{names:?}"
    );
    // v2-8 is in the catalog for us-central1-b, but the fake's -b sells no TPUs.
    assert!(!offers.iter().any(|o| o.zone.0 == "us-central1-b"));
    let v3 = slice(&offers, "tpu-v3-8", Capacity::Spot);
    assert!(
        (v3.price_per_hour - 2.04).abs() < 1e-9,
        "{}",
        v3.price_per_hour
    );
}

#[tokio::test]
async fn a_small_spot_slice_is_a_node_and_a_preempted_one_is_deleted() {
    let (fake, provider) = setup().await;
    let offers = provider
        .offers(&Region::new("us-central1"))
        .await
        .expect("offers");
    let req = request(slice(&offers, "tpu-v3-8", Capacity::Spot), 1);
    let out = provider.launch(&req).await.expect("launch");
    assert_eq!(out.instances.len(), 1, "{:?}", out.errors);
    let id = out.instances[0].id.clone();
    assert!(id.0.starts_with(&format!("{ZONE}/tpu/tern-")), "{id}");
    assert!(
        fake.queued_resources().is_empty(),
        "no queued resource for a small spot slice"
    );
    // Listed as ours, running, with its exact tags.
    let listed = provider.list(OWNER).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, id);
    assert_eq!(listed[0].state, InstanceState::Running);
    assert_eq!(listed[0].intent_id(), Some(req.intent));
    assert_eq!(listed[0].offer.instance_type.name, "tpu-v3-8");
    // The same intent again: that node, nothing new.
    let again = provider.launch(&req).await.expect("relaunch");
    assert_eq!(again.instances[0].id, id);
    assert_eq!(fake.tpu_nodes().len(), 1);

    // Preempted: it stays PREEMPTED (holding quota) until tern deletes it.
    let name = id.0.rsplit('/').next().expect("name");
    assert!(fake.preempt_node(ZONE, name));
    let notices = provider.interruptions().await.expect("poll");
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].instance, id);
    assert_eq!(notices[0].kind, InterruptionKind::Preempted);
    assert!(
        fake.tpu_nodes().is_empty(),
        "deleted: {:?}",
        fake.tpu_nodes()
    );
    assert!(provider.list(OWNER).await.expect("list").is_empty());
    assert!(provider.interruptions().await.expect("poll").is_empty());
}

#[tokio::test]
async fn a_large_slice_waits_in_a_queued_resource_until_active_and_a_cancel_deletes_it() {
    let (fake, provider) = setup().await;
    let offers = provider
        .offers(&Region::new("us-central1"))
        .await
        .expect("offers");
    let req = request(slice(&offers, "tpu-v2-32", Capacity::Spot), 1);
    let out = provider.launch(&req).await.expect("launch");
    assert_eq!(out.instances.len(), 1, "{:?}", out.errors);
    let id = out.instances[0].id.clone();
    assert!(id.0.starts_with(&format!("{ZONE}/qr/tern-")), "{id}");
    assert_eq!(out.instances[0].state, InstanceState::Queued);
    let qrs = fake.queued_resources();
    assert_eq!(qrs.len(), 1);
    let qr = &qrs[0].3;
    assert!(qr["spot"].is_object(), "spot tier: {qr}");
    assert_eq!(qr["queueingPolicy"]["validUntilDuration"], "3600s");
    assert_eq!(
        qr["tpu"]["nodeSpec"][0]["node"]["labels"]["tern-owner"],
        OWNER
    );
    assert!(fake.tpu_nodes().is_empty(), "no node before capacity");

    // Waiting for resources: still queued (tern's launch timeout does not apply), same id.
    assert!(fake.wait_queued(ZONE, &qrs[0].1));
    let listed = provider.list(OWNER).await.expect("list");
    assert_eq!(
        (listed[0].id.clone(), listed[0].state),
        (id.clone(), InstanceState::Queued)
    );
    // Capacity: ACTIVE, its node READY, and the instance Running under the same id.
    assert!(fake.provision_queued(ZONE, &qrs[0].1));
    let listed = provider.list(OWNER).await.expect("list");
    assert_eq!(
        listed.len(),
        1,
        "the node stands behind its queued resource: {listed:?}"
    );
    assert_eq!(
        (listed[0].id.clone(), listed[0].state),
        (id.clone(), InstanceState::Running)
    );

    // The plan changed: terminate deletes the queued resource and its node.
    provider.terminate(&id).await.expect("cancel");
    assert!(fake.queued_resources().is_empty());
    assert!(fake.tpu_nodes().is_empty());
    provider.terminate(&id).await.expect("gone already");
}

#[tokio::test]
async fn an_on_demand_slice_is_queued_as_guaranteed_and_a_stockout_is_a_capacity_error() {
    let (fake, provider) = setup().await;
    let offers = provider
        .offers(&Region::new("us-central1"))
        .await
        .expect("offers");
    let out = provider
        .launch(&request(slice(&offers, "tpu-v3-8", Capacity::OnDemand), 1))
        .await
        .expect("launch");
    assert!(out.instances[0].id.0.contains("/qr/"));
    assert!(fake.queued_resources()[0].3["guaranteed"].is_object());
    // A spot node create in a zone without capacity: RESOURCE_EXHAUSTED in the operation.
    fake.set_tpu_capacity(ZONE, "v3-8", 0);
    let out = provider
        .launch(&request(slice(&offers, "tpu-v3-8", Capacity::Spot), 1))
        .await
        .expect("launch");
    assert!(out.instances.is_empty());
    assert!(out.errors[0].1.is_capacity(), "{:?}", out.errors);
}

#[tokio::test]
async fn someone_elses_preempted_node_is_left_alone() {
    let (fake, provider) = setup().await;
    let offers = provider
        .offers(&Region::new("us-central1"))
        .await
        .expect("offers");
    let mut req = request(slice(&offers, "tpu-v3-8", Capacity::Spot), 1);
    req.tags.insert(tag::OWNER.into(), "another-team".into());
    let out = provider.launch(&req).await.expect("launch");
    let name = out.instances[0]
        .id
        .0
        .rsplit('/')
        .next()
        .expect("name")
        .to_owned();
    assert!(fake.preempt_node(ZONE, &name));
    assert!(provider.interruptions().await.expect("poll").is_empty());
    assert_eq!(fake.tpu_nodes().len(), 1, "not ours: not deleted");
    let e = provider
        .terminate(&out.instances[0].id)
        .await
        .expect_err("not ours, in any state");
    assert!(e.to_string().contains("tern-owner"), "{e}");
    assert_eq!(fake.tpu_nodes().len(), 1);
}

#[tokio::test]
async fn per_chip_billing_prices_agree_with_the_catalog_for_v5p_and_v2_v3_keep_it() {
    let (fake, provider) = setup().await;
    let catalog = tern_pricing::bundled().expect("catalog");
    fake.set_skus(tern_gcp::fake::skus_from_catalog(&catalog.offers, ZONE));
    let offers = provider
        .offers(&Region::new("us-central1"))
        .await
        .expect("offers");
    for capacity in [Capacity::OnDemand, Capacity::Spot] {
        let v5p = slice(&offers, "tpu-v5p-8", capacity);
        let listed = catalog
            .offers
            .iter()
            .find(|o| o.key() == v5p.key())
            .expect("in the catalog");
        assert!(
            v5p.observed_at.is_some(),
            "v5p is priced per chip by the Catalog API"
        );
        assert!(
            (v5p.price_per_hour - listed.price_per_hour).abs() < 1e-6,
            "{capacity}: {} vs {}",
            v5p.price_per_hour,
            listed.price_per_hour
        );
        assert_eq!(v5p.breakdown[0].label, "4 x v5p chip");
        // v3 devices are not priced per chip: the catalog's price stays.
        assert!(slice(&offers, "tpu-v3-8", capacity).observed_at.is_none());
    }
}
