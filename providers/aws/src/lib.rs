//! tern's AWS provider: the [`tern_cloud::Provider`] trait on the AWS SDK for Rust.
//!
//! - Offers: DescribeInstanceTypes, DescribeInstanceTypeOfferings (by AZ, mapped to AZ ids),
//!   DescribeSpotPriceHistory; on-demand prices from the bundled catalog, refreshed by the
//!   AWS Pricing API ([`pricing_api`]) when it answers. Cached with TTLs; the last good data is
//!   kept when a refresh fails.
//! - Launch: CreateFleet `type=instant` with the intent's ClientToken, one override per
//!   offer, tags on instances and volumes; a job's `disk_gb` resizes the root volume of the
//!   template's image ([`disk`]: DescribeLaunchTemplateVersions, DescribeImages).
//! - Quotas: the EC2 accelerator vCPU quotas from Service Quotas (`GetServiceQuota`, else
//!   `ListAWSDefaultServiceQuotas`), in `quotas`.
//! - Interruptions: EventBridge events delivered to an SQS queue, of the shapes in
//!   [`events::EVENT_SHAPES`].
//! - IAM: [`permissions::ACTIONS`], the exact actions those calls need (tests keep it equal to
//!   the SDK calls in this crate, the README and the Terraform module).
//!
//! Error codes are classified in one place, [`errors`].

mod config;
mod disk;
pub mod errors;
pub mod events;
mod fleet;
mod offers;
pub mod permissions;
pub mod pricing_api;
mod provider;
mod quotas;

pub use config::AwsConfig;
pub use fleet::LAUNCH_TAG;
pub use provider::AwsProvider;
