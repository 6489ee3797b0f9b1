//! Against a real GCP project; ignored by default. See providers/gcp/README.md.
//!
//! ```sh
//! TERN_GCP_LIVE_PROJECT=my-project TERN_GCP_LIVE_REGION=us-central1 \
//!   cargo test -p tern-gcp --test live -- --ignored --nocapture
//! ```
//!
//! The launch test starts and deletes one small spot VM (`TERN_GCP_LIVE_MACHINE_TYPE`,
//! default an N1 with one T4) and costs a few cents.

#![allow(clippy::unwrap_used)]

use tern_cloud::{Capacity, IdempotencyKey, IntentId, LaunchRequest, Provider, Region, tag};
use tern_gcp::{GcpConfig, GcpProvider};

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

async fn provider() -> (GcpProvider, GcpConfig) {
    let config = GcpConfig {
        owner: Some("tern-live-test".into()),
        ..GcpConfig::new(
            var("TERN_GCP_LIVE_PROJECT").expect("set TERN_GCP_LIVE_PROJECT"),
            var("TERN_GCP_LIVE_REGION").expect("set TERN_GCP_LIVE_REGION"),
        )
    };
    (GcpProvider::connect(config.clone()).await.unwrap(), config)
}

#[tokio::test]
#[ignore = "needs GCP credentials and TERN_GCP_LIVE_PROJECT/REGION"]
async fn live_offers_are_priced_by_the_billing_catalog() {
    let (gcp, config) = provider().await;
    let offers = gcp.offers(&Region::new(&config.region)).await.unwrap();
    assert!(!offers.is_empty());
    let live = offers.iter().filter(|o| o.observed_at.is_some()).count();
    println!(
        "{} offers, {live} priced by the Billing Catalog",
        offers.len()
    );
    for o in offers.iter().take(10) {
        println!("{} {:.4} {:?}", o.key(), o.price_per_hour, o.breakdown);
    }
    assert!(live > 0);
}

#[tokio::test]
#[ignore = "needs GCP credentials; starts and deletes one spot VM"]
async fn live_launch_is_idempotent_labelled_and_deleted() {
    let (gcp, config) = provider().await;
    let machine = var("TERN_GCP_LIVE_MACHINE_TYPE").unwrap_or("n1-highmem-8".into());
    let offers = gcp.offers(&Region::new(&config.region)).await.unwrap();
    let offer = offers
        .iter()
        .find(|o| o.instance_type.name == machine && o.capacity == Capacity::Spot)
        .expect("a spot offer of TERN_GCP_LIVE_MACHINE_TYPE")
        .clone();
    let intent = IntentId::from_uuid(uuid::Uuid::new_v4());
    let mut tags = tern_cloud::Tags::new();
    tags.insert(tag::OWNER.into(), "tern-live-test".into());
    tags.insert(tag::INTENT.into(), intent.to_string());
    tags.insert(tag::JOB.into(), "live".into());
    let request = LaunchRequest {
        key: IdempotencyKey::derive(intent, 0),
        intent,
        job: "live".into(),
        offers: vec![offer],
        count: 1,
        min_count: 1,
        single_zone: true,
        tags,
        template: None,
        disk_gb: None,
    };
    let first = gcp.launch(&request).await.unwrap();
    let again = gcp.launch(&request).await.unwrap();
    println!("{first:?}");
    for i in &first.instances {
        assert!(again.instances.iter().any(|j| j.id == i.id));
        gcp.terminate(&i.id).await.unwrap();
    }
}
