//! The fake's regional GPU quotas: `regions.get` lists them (metric, limit, usage) as GCE
//! does, and inserts past them are refused inside the operation with GCE's `QUOTA_EXCEEDED`.
//!
//! Usage is counted from the fake's live instances, as GCE counts it: each VM's GPUs on its
//! model's metric (`NVIDIA_T4_GPUS`), a spot VM's on the preemptible twin when the project has
//! a positive preemptible quota for the model and on the standard metric otherwise. GPUs are
//! read from `guestAccelerators` (N1 hosts) and from A2/A3 machine type names (`a2-highgpu-2g`:
//! two A100s); G2's built-in L4s are not counted.

use super::*;
use crate::offers::gce_accelerator;

/// Catalog GPU names, to turn a Compute accelerator type back into its metric.
const MODELS: [&str; 12] = [
    "T4",
    "V100",
    "P100",
    "P4",
    "K80",
    "A100",
    "A100-80GB",
    "H100",
    "H100-MEGA",
    "H200",
    "B200",
    "L4",
];

impl FakeCompute {
    /// The project's quota `metric` in `region` is `limit` (`NVIDIA_T4_GPUS`, 4.0): listed by
    /// `regions.get` and enforced on inserts.
    pub fn set_region_quota(&self, region: &str, metric: &str, limit: f64) {
        lock(&self.world)
            .region_quotas
            .insert((region.to_owned(), metric.to_owned()), limit);
    }
}

impl World {
    fn region_of(&self, zone: &str) -> String {
        self.zone(zone)
            .map(|z| z.region.clone())
            .unwrap_or_default()
    }

    /// The metric a VM with these properties counts against in `region`, and how many GPUs.
    fn gpu_metric(&self, region: &str, props: &Value) -> Option<(String, u32)> {
        let (model, count) = gpus_of(props)?;
        let base = format!("NVIDIA_{}_GPUS", model.replace('-', "_"));
        let preemptible = format!("PREEMPTIBLE_{base}");
        let spot = props["scheduling"]["provisioningModel"] == "SPOT"
            || props["scheduling"]["preemptible"] == true;
        let has_preemptible = self
            .region_quotas
            .get(&(region.to_owned(), preemptible.clone()))
            .is_some_and(|l| *l >= 1.0);
        Some((
            if spot && has_preemptible {
                preemptible
            } else {
                base
            },
            count,
        ))
    }

    /// GPUs of `metric` that live instances of `region` use.
    fn usage(&self, region: &str, metric: &str) -> u32 {
        self.instances
            .iter()
            .filter(|((zone, _), i)| i["status"] != "TERMINATED" && self.region_of(zone) == region)
            .filter_map(|(_, i)| self.gpu_metric(region, i))
            .filter(|(m, _)| m == metric)
            .map(|(_, n)| n)
            .sum()
    }

    /// How many VMs with `props` the region's quota still allows in `zone` (`u32::MAX`: no
    /// quota for their GPUs), with the refusal when fewer than `min` fit.
    pub(super) fn quota_room(
        &self,
        zone: &str,
        props: &Value,
        min: u32,
    ) -> (u32, Option<(Value, u16)>) {
        let region = self.region_of(zone);
        let Some((metric, per_vm)) = self.gpu_metric(&region, props) else {
            return (u32::MAX, None);
        };
        let Some(limit) = self.region_quotas.get(&(region.clone(), metric.clone())) else {
            return (u32::MAX, None);
        };
        let used = f64::from(self.usage(&region, &metric));
        let fits = ((limit - used).max(0.0) / f64::from(per_vm.max(1))).floor() as u32;
        if fits >= min.max(1) {
            return (fits, None);
        }
        let error = json!({"errors": [{
            "code": "QUOTA_EXCEEDED",
            "message": format!("Quota '{metric}' exceeded.  Limit: {limit:.1} in region {region}."),
            "errorDetails": [{"quotaInfo": {
                "metricName": format!("compute.googleapis.com/{}", metric.to_lowercase()),
                "limitName": format!("{}-per-project-region", metric.replace('_', "-").to_uppercase()),
                "dimensions": {"region": region},
                "limit": limit
            }}]
        }]});
        (0, Some((error, 403)))
    }
}

/// The GPU model (catalog name) and count of a VM's properties.
fn gpus_of(props: &Value) -> Option<(&'static str, u32)> {
    let machine = last(props["machineType"].as_str().unwrap_or_default());
    if let Some(gce) = accelerator_of(props) {
        let model = MODELS
            .into_iter()
            .find(|m| gce_accelerator(m) == Some(&gce))?;
        let count = props["guestAccelerators"][0]["acceleratorCount"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(1);
        return Some((model, count));
    }
    let model = match machine.split('-').take(2).collect::<Vec<_>>()[..] {
        ["a2", "highgpu" | "megagpu"] => "A100",
        ["a2", "ultragpu"] => "A100-80GB",
        ["a3", "highgpu"] => "H100",
        ["a3", "megagpu"] => "H100-MEGA",
        _ => return None,
    };
    let count = machine
        .rsplit('-')
        .next()?
        .strip_suffix('g')?
        .parse()
        .ok()?;
    Some((model, count))
}

/// `GET …/regions/{region}`: the region with its quotas, as Compute Engine serves it.
pub(super) fn get_region(w: &World, region: &str) -> Reply {
    let zones: Vec<Value> = w
        .zones
        .iter()
        .filter(|z| z.region == region)
        .map(|z| json!(format!("{BASE}/projects/{}/zones/{}", w.project, z.name)))
        .collect();
    if zones.is_empty() {
        let message = format!(
            "The resource 'projects/{}/regions/{region}' was not found",
            w.project
        );
        return Err(error(StatusCode::NOT_FOUND, "notFound", &message));
    }
    let mut quotas = vec![json!({"metric": "CPUS", "limit": 24.0, "usage": 0.0})];
    for ((r, metric), limit) in &w.region_quotas {
        if r == region {
            let usage = f64::from(w.usage(region, metric));
            quotas.push(json!({"metric": metric, "limit": limit, "usage": usage}));
        }
    }
    Ok(ok(json!({
        "kind": "compute#region",
        "id": "1000",
        "name": region,
        "description": region,
        "status": "UP",
        "zones": zones,
        "quotas": quotas,
        "selfLink": format!("{BASE}/projects/{}/regions/{region}", w.project),
    })))
}
