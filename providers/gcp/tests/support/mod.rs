//! What the fake-backed tests share.

use std::time::Duration;

use tern_cloud::{IdempotencyKey, IntentId, LaunchRequest, Offer, Tags, tag};
use tern_gcp::GcpConfig;
use tern_gcp::fake::FakeCompute;

/// A provider config that sends every call (Compute, TPU, Billing Catalog) to `fake`, without
/// credentials, polling operations every 20 ms.
pub fn config(fake: &FakeCompute, project: &str, region: &str, owner: &str) -> GcpConfig {
    GcpConfig {
        endpoint: Some(fake.endpoint.clone()),
        billing_endpoint: Some(fake.endpoint.clone()),
        tpu_endpoint: Some(fake.endpoint.clone()),
        anonymous: true,
        owner: Some(owner.into()),
        poll_interval: Duration::from_millis(20),
        ..GcpConfig::new(project, region)
    }
}

/// A launch of `count` (at least `min_count`) from `offers`, for a fresh intent of `job`,
/// tagged for `owner`.
pub fn request(
    offers: Vec<Offer>,
    count: u32,
    min_count: u32,
    owner: &str,
    job: &str,
) -> LaunchRequest {
    let intent = IntentId::from_uuid(uuid::Uuid::new_v4());
    let mut tags = Tags::new();
    tags.insert(tag::OWNER.into(), owner.into());
    tags.insert(tag::INTENT.into(), intent.to_string());
    tags.insert(tag::JOB.into(), job.into());
    LaunchRequest {
        key: IdempotencyKey::derive(intent, 0),
        intent,
        job: job.into(),
        offers,
        count,
        min_count,
        single_zone: count > 1,
        tags,
        template: None,
        disk_gb: None,
    }
}
