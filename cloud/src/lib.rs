//! The vocabulary every tern crate speaks.
//!
//! This crate has no cloud SDK dependency on purpose: policies, pricing and the controller are
//! written against these types, and each provider crate (`tern-sim`, `tern-aws`, `tern-gcp`) maps
//! its cloud's API onto them. See DESIGN.md §3 and ARCHITECTURE.md.

mod accelerator;
mod billing;
mod constraints;
mod error;
pub mod input;
mod instance;
mod intent;
mod job;
mod location;
pub mod name;
mod offer;
mod provider;
mod quota;
pub mod run;
pub mod skypilot;
mod spec;
#[cfg(any(test, feature = "test-util"))]
pub mod testkit;

pub use accelerator::{Accelerator, AcceleratorKind};
pub use billing::{BillingRule, EGRESS_DOLLARS_PER_GB, Piece, PriceSteps, egress_dollars};
pub use constraints::{Amount, CapacityRule, Constraints, DataLocation, Pool, glob};
pub use error::ProviderError;
pub use instance::{Instance, InstanceId, InstanceState, Interruption, InterruptionKind, Tags};
pub use intent::{IdempotencyKey, Intent, IntentId, IntentKind, IntentState};
pub use job::{
    Allocation, Budget, CheckpointSpec, Deadline, Forecast, JobSpec, ModelHint, Observation,
    ObservedStep, Plan, ProbeSpec, ProfileRef, Work, WorkerRange,
};
pub use location::{Cloud, Region, Zone};
pub use offer::{Availability, Capacity, InstanceType, Offer, OfferKey, PriceComponent};
pub use provider::{LaunchOutcome, LaunchRequest, Provider};
pub use quota::{
    AWS_ACCELERATOR_BUCKETS, AwsBucket, CloudQuota, QuotaScope, aws_bucket, aws_instance_class,
    gcp_gpu_metric, quota_named,
};
pub use spec::{Location, MAX_DEADLINE_S, SpecError, parse_duration, parse_job_spec};

/// Tag keys tern puts on every instance it launches. The leak collector relies on them.
pub mod tag {
    /// Identifies the tern deployment (controller) that owns the instance.
    pub const OWNER: &str = "tern:owner";
    /// The persisted intent that caused the launch.
    pub const INTENT: &str = "tern:intent";
    /// The job the instance works for.
    pub const JOB: &str = "tern:job";
    /// The id of the state store (cluster) whose controller launched the instance; a
    /// controller's leak collector touches only instances with its own store's id.
    pub const CLUSTER: &str = "tern:cluster";
}
