//! The project's GPU quotas in a region, from `regions.get`, as [`CloudQuota`]s.
//!
//! GCE keeps one regional metric per GPU model (`NVIDIA_T4_GPUS`) and a preemptible twin
//! (`PREEMPTIBLE_NVIDIA_T4_GPUS`). Spot VMs count against the preemptible metric when the
//! project has one with a limit, and against the standard one otherwise; so the standard metric
//! limits on-demand alone only where a preemptible twin with a positive limit is listed.
//!
//! TPU quotas are not here: Cloud TPU VMs count against the Cloud TPU API's own quotas (per
//! zone, in Service Usage), not against the Compute metrics `regions.get` lists.

use std::collections::HashSet;

use google_cloud_compute_v1::model::Quota;
use tern_cloud::{Capacity, Cloud, CloudQuota, ProviderError, QuotaScope, Region, gcp_gpu_metric};

use crate::GcpConfig;
use crate::compute::Compute;
use crate::errors::from_call;

/// The GPU quotas of `region`; none outside the provider's region, where it sells nothing (as
/// `offers`).
pub(crate) async fn read(
    compute: &Compute,
    config: &GcpConfig,
    region: &Region,
) -> Result<Vec<CloudQuota>, ProviderError> {
    if region.as_str() != config.region {
        return Ok(Vec::new());
    }
    let listed = compute
        .region_quotas(region.as_str())
        .await
        .map_err(|e| from_call(&e, None))?;
    Ok(from_region(region, &listed))
}

/// The GPU metrics of one region's quota list; every other metric (CPUs, disks, addresses,
/// committed use) is left out.
pub(crate) fn from_region(region: &Region, listed: &[Quota]) -> Vec<CloudQuota> {
    let gpus: Vec<(&str, String, bool, &Quota)> = listed
        .iter()
        .filter_map(|q| {
            let metric = q.metric.as_ref()?.name()?;
            let (model, preemptible) = gcp_gpu_metric(metric)?;
            Some((metric, model, preemptible, q))
        })
        .collect();
    let preemptible_quota: HashSet<&str> = gpus
        .iter()
        .filter(|(_, _, preemptible, q)| *preemptible && q.limit.unwrap_or(0.0) >= 1.0)
        .map(|(_, model, _, _)| model.as_str())
        .collect();
    gpus.iter()
        .map(|(metric, model, preemptible, q)| {
            let capacity = if *preemptible {
                Some(Capacity::Spot)
            } else if preemptible_quota.contains(model.as_str()) {
                Some(Capacity::OnDemand)
            } else {
                None
            };
            CloudQuota {
                cloud: Cloud::Gcp,
                region: region.clone(),
                scope: QuotaScope::Model {
                    name: model.clone(),
                },
                capacity,
                limit: whole(q.limit.unwrap_or(0.0)),
                used: q.usage.map(whole),
                name: (*metric).to_owned(),
            }
        })
        .collect()
}

/// GCE sends counts as floats (`4.0`); a count is whole, and never negative.
fn whole(v: f64) -> u32 {
    if v.is_finite() && v > 0.0 {
        v.min(f64::from(u32::MAX)).floor() as u32
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(metric: &str, limit: f64, usage: f64) -> Quota {
        // As the client reads it off the wire: the metric by its name.
        serde_json::from_value(
            serde_json::json!({"metric": metric, "limit": limit, "usage": usage}),
        )
        .unwrap_or_default()
    }

    #[test]
    fn standard_metrics_limit_on_demand_only_beside_a_preemptible_quota() {
        let region = Region::new("us-central1");
        let listed = [
            quota("CPUS", 24.0, 0.0),
            quota("NVIDIA_T4_GPUS", 4.0, 1.0),
            quota("PREEMPTIBLE_NVIDIA_T4_GPUS", 16.0, 2.0),
            quota("NVIDIA_A100_80GB_GPUS", 8.0, 0.0),
            quota("PREEMPTIBLE_NVIDIA_A100_80GB_GPUS", 0.0, 0.0),
            quota("NVIDIA_H100_GPUS", 0.0, 0.0),
            quota("NVIDIA_T4_VWS_GPUS", 4.0, 0.0),
            quota("COMMITTED_NVIDIA_T4_GPUS", 4.0, 0.0),
        ];
        let got = from_region(&region, &listed);
        let find = |name: &str| got.iter().find(|q| q.name == name).cloned();
        assert_eq!(got.len(), 5, "{got:?}");
        let t4 = find("NVIDIA_T4_GPUS").unwrap();
        assert_eq!(t4.scope, QuotaScope::Model { name: "T4".into() });
        assert_eq!(
            (t4.capacity, t4.limit, t4.used),
            (Some(Capacity::OnDemand), 4, Some(1))
        );
        let spot = find("PREEMPTIBLE_NVIDIA_T4_GPUS").unwrap();
        assert_eq!((spot.capacity, spot.limit), (Some(Capacity::Spot), 16));
        // A preemptible quota of zero: spot VMs use the standard one.
        let a100 = find("NVIDIA_A100_80GB_GPUS").unwrap();
        assert_eq!(a100.capacity, None);
        assert_eq!(
            a100.scope,
            QuotaScope::Model {
                name: "A100-80GB".into()
            }
        );
        // A metric this client version has no enum value for still arrives by name.
        assert_eq!(find("NVIDIA_H100_GPUS").unwrap().limit, 0);
    }
}
