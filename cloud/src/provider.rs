use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{
    Cloud, CloudQuota, IdempotencyKey, Instance, InstanceId, IntentId, Interruption, Offer,
    ProviderError, Region, Tags,
};

/// One launch: "give me `count` VMs from the first of these offers that has capacity".
///
/// The shape fits all three launch APIs without change:
/// - AWS CreateFleet `type=instant`: one override per offer (priority = position), `ClientToken`
///   = [`IdempotencyKey::aws_client_token`], `SingleAvailabilityZone` when `single_zone`.
/// - GCE `instances.insert` / `bulkInsert`: the first offer's zone and machine type, `requestId`
///   = [`IdempotencyKey::gce_request_id`]; on `ZONE_RESOURCE_POOL_EXHAUSTED` the next offer.
/// - TPU VMs (`nodes.create`, queued resources): the offer's instance type is the slice name and
///   `count` is the number of slices; the request id is the node id suffix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchRequest {
    /// Derived from the persisted intent; the same on every retry of that intent.
    pub key: IdempotencyKey,
    pub intent: IntentId,
    pub job: String,
    /// Acceptable offers, best first. All must share one cloud.
    pub offers: Vec<Offer>,
    pub count: u32,
    /// Accept a partial launch of at least this many; the rest is re-planned.
    pub min_count: u32,
    /// All instances in one zone (gang jobs).
    pub single_zone: bool,
    /// Owner, intent and job tags (see [`crate::tag`]), applied at creation, not afterwards.
    pub tags: Tags,
    /// AWS launch template name, GCE instance template, or image: the VM's boot configuration.
    pub template: Option<String>,
    /// Boot disk size in GB (the job's `disk_gb`), overriding the template's; `None` keeps it.
    pub disk_gb: Option<u32>,
}

/// What a launch produced. Partial success is normal: some offers fail, others fill.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LaunchOutcome {
    pub instances: Vec<Instance>,
    /// Per-offer failures, by [`Offer::key`], e.g. one `Capacity` error per exhausted zone.
    pub errors: Vec<(String, ProviderError)>,
}

/// The seam between tern and a cloud. Small on purpose (after Karpenter's CloudProvider):
/// everything else (planning, retries, leak collection) is written once, above it.
#[async_trait]
pub trait Provider: Send + Sync {
    fn cloud(&self) -> Cloud;

    /// Every purchasable shape in `region` with its current price; offers known to be
    /// unavailable are returned flagged ([`crate::Availability::Unavailable`]), not dropped.
    async fn offers(&self, region: &Region) -> Result<Vec<Offer>, ProviderError>;

    /// Launch idempotently: a repeated request with the same key returns the first result.
    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError>;

    /// Terminate one instance. An instance that no longer exists counts as terminated (`Ok`).
    async fn terminate(&self, id: &InstanceId) -> Result<(), ProviderError>;

    /// Instances tagged with `owner` (any state but terminated).
    async fn list(&self, owner: &str) -> Result<Vec<Instance>, ProviderError>;

    /// Interruption notices received since the last call. Pull-based because every source is
    /// (SQS receive, instance metadata polls, the simulator's clock).
    async fn interruptions(&self) -> Result<Vec<Interruption>, ProviderError>;

    /// The account's accelerator quotas in `region` as the cloud enforces them (AWS Service
    /// Quotas, GCE `regions.get`, the simulated cloud's configuration), so the planner places
    /// no more than a launch could get. Empty when the provider cannot read them: a provider
    /// that does not know its quotas learns them from refused launches
    /// ([`crate::quota_named`]).
    async fn quotas(&self, region: &Region) -> Result<Vec<CloudQuota>, ProviderError> {
        let _ = region;
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The controller holds providers as trait objects; this fails to compile if the trait
    // stops being object safe.
    #[allow(dead_code)]
    fn provider_is_object_safe(p: Box<dyn Provider>) -> Box<dyn Provider> {
        p
    }
}
