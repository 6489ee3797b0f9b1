//! Against a real AWS account; ignored by default. See providers/aws/README.md.
//!
//! ```sh
//! TERN_AWS_LIVE_REGION=us-east-1 TERN_AWS_LIVE_TEMPLATE=tern-live \
//!   cargo test -p tern-aws --test live -- --ignored --nocapture
//! ```

#![allow(clippy::unwrap_used)]

use tern_aws::{AwsConfig, AwsProvider};
use tern_cloud::{Capacity, IdempotencyKey, IntentId, LaunchRequest, Provider, Region, tag};

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

async fn provider() -> (AwsProvider, AwsConfig) {
    let region = var("TERN_AWS_LIVE_REGION").expect("set TERN_AWS_LIVE_REGION");
    let config = AwsConfig {
        instance_types: vec![var("TERN_AWS_LIVE_INSTANCE_TYPE").unwrap_or("t3.micro".into())],
        launch_template: var("TERN_AWS_LIVE_TEMPLATE"),
        queue_url: var("TERN_AWS_LIVE_QUEUE_URL"),
        owner: Some("tern-live-test".into()),
        ..AwsConfig::new(region)
    };
    (AwsProvider::connect(config.clone()).await.unwrap(), config)
}

#[tokio::test]
#[ignore = "needs AWS credentials and TERN_AWS_LIVE_REGION"]
async fn live_offers_have_zone_ids_and_spot_prices() {
    let (aws, config) = provider().await;
    let offers = aws.offers(&Region::new(&config.region)).await.unwrap();
    assert!(!offers.is_empty());
    assert!(
        offers
            .iter()
            .any(|o| o.capacity == Capacity::Spot && o.observed_at.is_some())
    );
    for o in offers.iter().take(5) {
        println!("{} {:.4} $/h", o.key(), o.price_per_hour);
    }
    println!("interruptions: {:?}", aws.interruptions().await.unwrap());
}

/// Launches one on-demand instance of TERN_AWS_LIVE_INSTANCE_TYPE (t3.micro by default) from
/// TERN_AWS_LIVE_TEMPLATE, repeats the launch with the same key, and terminates it.
#[tokio::test]
#[ignore = "launches a real instance; needs TERN_AWS_LIVE_REGION and TERN_AWS_LIVE_TEMPLATE"]
async fn live_launch_is_idempotent_and_terminates() {
    let (aws, config) = provider().await;
    assert!(
        config.launch_template.is_some(),
        "set TERN_AWS_LIVE_TEMPLATE"
    );
    let offers = aws.offers(&Region::new(&config.region)).await.unwrap();
    let chosen: Vec<_> = offers
        .into_iter()
        .filter(|o| o.capacity == Capacity::OnDemand)
        .take(3)
        .collect();
    assert!(
        !chosen.is_empty(),
        "no on-demand offer priced in the catalog"
    );
    // A fresh intent per run, so the launch is new.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let intent = IntentId::from_uuid(uuid::Uuid::from_u128(nanos));
    let request = LaunchRequest {
        key: IdempotencyKey::derive(intent, 0),
        intent,
        job: "live-test".into(),
        offers: chosen,
        count: 1,
        min_count: 1,
        single_zone: false,
        tags: [
            (tag::OWNER.to_owned(), "tern-live-test".to_owned()),
            (tag::INTENT.to_owned(), intent.to_string()),
            (tag::JOB.to_owned(), "live-test".to_owned()),
        ]
        .into(),
        template: None,
        disk_gb: None,
    };
    let first = aws.launch(&request).await.unwrap();
    println!("launched: {first:?}");
    let again = aws.launch(&request).await.unwrap();
    let ids = |o: &tern_cloud::LaunchOutcome| {
        let mut ids: Vec<_> = o.instances.iter().map(|i| i.id.clone()).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&first), ids(&again));
    for i in &first.instances {
        aws.terminate(&i.id).await.unwrap();
    }
}
