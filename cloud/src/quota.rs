//! Quotas the clouds enforce on an account, in one shape for every cloud.
//!
//! A launch that would pass an account limit is refused however much capacity the zone has, so
//! the planner must know the limits before it places jobs, and the controller must learn them
//! from a refused launch when no reading is at hand. Providers read them with
//! [`crate::Provider::quotas`]; [`quota_named`] reads the one a quota error names. Both go
//! through the tables here, so a quota read and a quota refused describe the same limit the
//! same way.

use serde::{Deserialize, Serialize};

use crate::accelerator::family_of;
use crate::{Capacity, Cloud, Offer, ProviderError, Region};

/// What a quota counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum QuotaScope {
    /// Accelerators (GPUs, TPU chips) of one family as tern groups them ([`crate::Accelerator::family`]):
    /// `A100` counts `A100` and `A100-80GB`. The simulated cloud's quotas.
    Accelerators { family: String },
    /// Accelerators of exactly one model, as tern names it: GCP counts `NVIDIA_A100_GPUS` and
    /// `NVIDIA_A100_80GB_GPUS` apart, so `A100` here does not count `A100-80GB`.
    Model { name: String },
    /// vCPUs of VMs whose instance class is one of these (AWS counts its GPU and accelerator
    /// instances this way: "Running On-Demand G and VT instances" → `["g", "vt"]`). The class
    /// is the letters before the generation digit: `p` of `p4d`, `vt` of `vt1`.
    Vcpus { classes: Vec<String> },
}

impl QuotaScope {
    /// How many of this scope's units one VM of `offer` uses; 0 when the scope does not count it.
    pub fn units(&self, offer: &Offer) -> u32 {
        match self {
            QuotaScope::Accelerators { family } => offer
                .accelerator()
                .filter(|a| a.family().eq_ignore_ascii_case(family))
                .map_or(0, |a| a.chips()),
            QuotaScope::Model { name } => offer
                .accelerator()
                .filter(|a| a.name.eq_ignore_ascii_case(name))
                .map_or(0, |a| a.chips()),
            QuotaScope::Vcpus { classes } => {
                let class = aws_instance_class(&offer.instance_type.name);
                if classes.iter().any(|c| c.eq_ignore_ascii_case(&class)) {
                    // vCPU counts are whole numbers; the catalog's float is exact for them.
                    offer.instance_type.vcpus.ceil().max(0.0) as u32
                } else {
                    0
                }
            }
        }
    }
}

impl std::fmt::Display for QuotaScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QuotaScope::Accelerators { family } => write!(f, "{family} accelerators"),
            QuotaScope::Model { name } => write!(f, "{name} accelerators"),
            QuotaScope::Vcpus { classes } => write!(f, "vCPUs of {} instances", classes.join("/")),
        }
    }
}

/// A limit the cloud enforces on the account in one region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudQuota {
    pub cloud: Cloud,
    pub region: Region,
    pub scope: QuotaScope,
    /// The capacity it limits; `None`: spot and on-demand together.
    pub capacity: Option<Capacity>,
    /// Units of `scope` (accelerators or vCPUs) allowed at once.
    pub limit: u32,
    /// Units in use now, where the cloud says (GCP's `regions.get` does; AWS Service Quotas
    /// does not, its usage lives in CloudWatch). It counts VMs tern did not launch too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<u32>,
    /// The cloud's own name for it (AWS quota code `L-417A185B`, GCP metric `NVIDIA_T4_GPUS`),
    /// for messages: it is what a user asks the cloud to raise.
    pub name: String,
}

impl CloudQuota {
    /// How many of this quota's units one VM of `offer` uses; 0 when the quota does not count
    /// it (another cloud, region, capacity or scope).
    pub fn units(&self, offer: &Offer) -> u32 {
        let capacity_matches = self.capacity.is_none_or(|c| c == offer.capacity);
        if offer.cloud != self.cloud || offer.region != self.region || !capacity_matches {
            return 0;
        }
        self.scope.units(offer)
    }
}

/// One of AWS's vCPU quota buckets for accelerated instances, with its Service Quotas codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AwsBucket {
    /// The classes in the quota's name ("Running On-Demand G and VT instances" → G and VT).
    pub classes: &'static [&'static str],
    /// "Running On-Demand … instances".
    pub on_demand: &'static str,
    /// "All … Spot Instance Requests".
    pub spot: &'static str,
}

/// The EC2 quotas that limit GPU, Inferentia, Trainium and Gaudi instances, from the Service
/// Quotas console (service code `ec2`). Standard, F, X and high-memory buckets sell no
/// accelerator tern uses, so they are left out.
pub const AWS_ACCELERATOR_BUCKETS: [AwsBucket; 5] = [
    AwsBucket {
        classes: &["p"],
        on_demand: "L-417A185B",
        spot: "L-7212CCBC",
    },
    AwsBucket {
        classes: &["g", "vt"],
        on_demand: "L-DB2E81BA",
        spot: "L-3819A6DF",
    },
    AwsBucket {
        classes: &["dl"],
        on_demand: "L-6E869C2A",
        spot: "L-85EED4F7",
    },
    AwsBucket {
        classes: &["inf"],
        on_demand: "L-1945791B",
        spot: "L-B5D1601B",
    },
    AwsBucket {
        classes: &["trn"],
        on_demand: "L-2C3B7624",
        spot: "L-6B0D517C",
    },
];

impl AwsBucket {
    /// The bucket's quota for `capacity` (spot or on-demand) at `limit` vCPUs.
    pub fn quota(&self, region: &Region, capacity: Capacity, limit: u32) -> CloudQuota {
        let spot = capacity == Capacity::Spot;
        CloudQuota {
            cloud: Cloud::Aws,
            region: region.clone(),
            scope: QuotaScope::Vcpus {
                classes: self.classes.iter().map(|c| (*c).to_owned()).collect(),
            },
            capacity: Some(if spot {
                Capacity::Spot
            } else {
                Capacity::OnDemand
            }),
            limit,
            used: None,
            name: (if spot { self.spot } else { self.on_demand }).to_owned(),
        }
    }
}

/// The class of an EC2 instance type: the letters before its generation (`p4d.24xlarge` → `p`,
/// `vt1.3xlarge` → `vt`, `dl2q.24xlarge` → `dl`, `trn1n.32xlarge` → `trn`).
pub fn aws_instance_class(instance_type: &str) -> String {
    instance_type
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect::<String>()
        .to_ascii_lowercase()
}

/// The accelerator bucket an EC2 instance type's vCPUs count in, if any.
pub fn aws_bucket(instance_type: &str) -> Option<&'static AwsBucket> {
    let class = aws_instance_class(instance_type);
    AWS_ACCELERATOR_BUCKETS
        .iter()
        .find(|b| b.classes.contains(&class.as_str()))
}

/// What a GCE GPU quota metric counts: `NVIDIA_T4_GPUS` → (`T4`, not preemptible),
/// `PREEMPTIBLE_NVIDIA_A100_80GB_GPUS` → (`A100-80GB`, preemptible). GCE names each model's
/// metric after the model as tern's catalogs spell it, `-` as `_`. Committed-use and virtual
/// workstation (`_VWS_`) metrics count nothing tern buys: `None`.
pub fn gcp_gpu_metric(metric: &str) -> Option<(String, bool)> {
    let (rest, preemptible) = match metric.strip_prefix("PREEMPTIBLE_") {
        Some(rest) => (rest, true),
        None => (metric, false),
    };
    let model = rest.strip_prefix("NVIDIA_")?.strip_suffix("_GPUS")?;
    if model.is_empty() || model.ends_with("_VWS") {
        return None;
    }
    Some((model.replace('_', "-"), preemptible))
}

/// The limit a quota error names, as a [`CloudQuota`] for the region and scope of `offer` (the
/// offer the refused launch tried), when the error's message carries the number:
///
/// - AWS `VcpuLimitExceeded`: "…than your current vCPU limit of 32 allows for the instance
///   bucket that the specified instance type belongs to…": the on-demand bucket of the offer's
///   instance type. AWS's spot refusal (`MaxSpotInstanceCountExceeded`, "Max spot instance
///   count exceeded") names no number: `None`.
/// - GCP `QUOTA_EXCEEDED`: "Quota 'NVIDIA_T4_GPUS' exceeded.  Limit: 4.0 in region
///   us-central1.": that metric. A spot VM refused on the standard metric means the project has
///   no preemptible quota, so the limit holds for both capacities.
/// - The simulated cloud: "Quota 'sim:T4:spot' exceeded.  Limit: 4 in region …" (family and
///   capacity in the name, see `tern-sim`).
///
/// `used` is unknown from an error. Anything else (another kind of error, a CPU metric, a
/// message without a limit) is `None`.
pub fn quota_named(error: &ProviderError, offer: &Offer) -> Option<CloudQuota> {
    let ProviderError::Quota { code, message } = error else {
        return None;
    };
    match offer.cloud {
        Cloud::Aws => aws_quota_named(code, message, offer),
        Cloud::Gcp => gcp_quota_named(message, offer),
        Cloud::Sim => sim_quota_named(message, offer),
    }
}

fn aws_quota_named(code: &str, message: &str, offer: &Offer) -> Option<CloudQuota> {
    if code != "VcpuLimitExceeded" {
        return None;
    }
    let rest = message.split_once("vCPU limit of ")?.1;
    let limit = leading_number(rest)?;
    let bucket = aws_bucket(&offer.instance_type.name)?;
    Some(bucket.quota(&offer.region, Capacity::OnDemand, limit))
}

fn gcp_quota_named(message: &str, offer: &Offer) -> Option<CloudQuota> {
    let metric = quoted_name(message)?;
    let (model, preemptible) = gcp_gpu_metric(metric)?;
    let capacity = match (preemptible, offer.capacity) {
        (true, _) => Some(Capacity::Spot),
        (false, Capacity::Spot) => None,
        (false, c) => Some(c),
    };
    Some(CloudQuota {
        cloud: Cloud::Gcp,
        region: named_region(message).unwrap_or_else(|| offer.region.clone()),
        scope: QuotaScope::Model { name: model },
        capacity,
        limit: named_limit(message)?,
        used: None,
        name: metric.to_owned(),
    })
}

fn sim_quota_named(message: &str, offer: &Offer) -> Option<CloudQuota> {
    let name = quoted_name(message)?;
    let mut parts = name.split(':');
    if parts.next() != Some("sim") {
        return None;
    }
    let family = parts.next()?;
    let capacity = match parts.next()? {
        "any" => None,
        c => Some(c.parse::<Capacity>().ok()?),
    };
    Some(CloudQuota {
        cloud: Cloud::Sim,
        region: named_region(message).unwrap_or_else(|| offer.region.clone()),
        scope: QuotaScope::Accelerators {
            family: family_of(family),
        },
        capacity,
        limit: named_limit(message)?,
        used: None,
        name: name.to_owned(),
    })
}

/// The text between the first pair of single quotes after "Quota ".
fn quoted_name(message: &str) -> Option<&str> {
    let rest = message.split_once("Quota '")?.1;
    Some(rest.split_once('\'')?.0)
}

/// The number after "Limit:" (GCE writes it as a float, `4.0`).
fn named_limit(message: &str) -> Option<u32> {
    let rest = message.split_once("Limit:")?.1.trim_start();
    leading_number(rest)
}

/// The region after "in region ", without the sentence's full stop.
fn named_region(message: &str) -> Option<Region> {
    let rest = message.split_once("in region ")?.1;
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    (!name.is_empty()).then(|| Region::new(name))
}

/// The whole or decimal number `text` starts with, floored to a `u32`.
fn leading_number(text: &str) -> Option<u32> {
    let digits: String = text
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let value: f64 = digits.parse().ok()?;
    (value.is_finite() && value >= 0.0).then(|| value.min(f64::from(u32::MAX)) as u32)
}

#[cfg(test)]
#[path = "quota_tests.rs"]
mod tests;
