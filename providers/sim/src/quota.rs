//! Accelerator quotas in the simulated cloud: configured with [`SimCloud::with_quota`], read
//! back by `quotas`, and enforced on launch with the error a real cloud sends, so the
//! controller's quota handling runs against the simulator unchanged.

use tern_cloud::{Capacity, Cloud, CloudQuota, InstanceState, Offer, ProviderError, QuotaScope};

use super::{SimCloud, World};

/// At most `limit` accelerators (GPUs, TPU chips) of `family` at once in `region`, on
/// `capacity` (`None`: spot and on-demand together). Families as tern groups them: `A100`
/// counts `A100-80GB` too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimQuota {
    pub region: String,
    pub family: String,
    pub capacity: Option<Capacity>,
    pub limit: u32,
}

impl SimQuota {
    pub fn new(region: &str, family: &str, capacity: Option<Capacity>, limit: u32) -> Self {
        SimQuota {
            region: region.to_owned(),
            family: family.to_owned(),
            capacity,
            limit,
        }
    }

    /// The name the cloud gives it, `sim:FAMILY:CAPACITY`; [`tern_cloud::quota_named`] reads
    /// family and capacity back from it.
    pub fn name(&self) -> String {
        let capacity = self.capacity.map_or("any", Capacity::as_str);
        format!("sim:{}:{capacity}", self.family)
    }

    /// As the tern vocabulary says it, with `used` accelerators in use.
    pub fn cloud_quota(&self, used: Option<u32>) -> CloudQuota {
        CloudQuota {
            cloud: Cloud::Sim,
            region: self.region.as_str().into(),
            scope: QuotaScope::Accelerators {
                family: self.family.clone(),
            },
            capacity: self.capacity,
            limit: self.limit,
            used,
            name: self.name(),
        }
    }

    /// The refusal of a launch past the limit, in GCE's `QUOTA_EXCEEDED` wording.
    fn refusal(&self) -> ProviderError {
        ProviderError::Quota {
            code: "QUOTA_EXCEEDED".into(),
            message: format!(
                "Quota '{}' exceeded.  Limit: {} in region {}.",
                self.name(),
                self.limit,
                self.region
            ),
        }
    }
}

/// `REGION:FAMILY[:CAPACITY]=LIMIT`, as `tern sim serve --quota` takes it: `us-east-1:V100=8`
/// (spot and on-demand together), `us-east-1:A100:spot=16`.
impl std::str::FromStr for SimQuota {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let shape = || format!("expected REGION:FAMILY[:CAPACITY]=LIMIT, found {text:?}");
        let (scope, limit) = text.split_once('=').ok_or_else(shape)?;
        let limit: u32 = limit.trim().parse().map_err(|_| shape())?;
        let mut parts = scope.split(':').map(str::trim);
        let (Some(region), Some(family)) = (parts.next(), parts.next()) else {
            return Err(shape());
        };
        let capacity = match parts.next() {
            None | Some("any") => None,
            Some(c) => Some(c.parse::<Capacity>()?),
        };
        if region.is_empty() || family.is_empty() || parts.next().is_some() {
            return Err(shape());
        }
        Ok(SimQuota::new(region, family, capacity, limit))
    }
}

impl SimCloud {
    /// Enforce `quota` from now on (several may apply to one offer; the tightest wins).
    #[must_use]
    pub fn with_quota(mut self, quota: SimQuota) -> Self {
        self.quotas.push(quota);
        self
    }

    /// The configured quotas of `region`, with what live instances use of each.
    pub(super) fn quotas_in(&self, w: &World, region: &str) -> Vec<CloudQuota> {
        self.quotas
            .iter()
            .filter(|q| q.region == region)
            .map(|q| {
                let quota = q.cloud_quota(None);
                q.cloud_quota(Some(Self::quota_used(w, &quota)))
            })
            .collect()
    }

    /// How many VMs of `offer` the quotas still allow, and the refusal of the tightest when
    /// it allows fewer than `asked` (`None`: no quota counts the offer, or all allow `asked`).
    pub(super) fn quota_room(
        &self,
        w: &World,
        offer: &Offer,
        asked: u32,
    ) -> (u32, Option<ProviderError>) {
        let mut room = u32::MAX;
        let mut refusal = None;
        for q in &self.quotas {
            let quota = q.cloud_quota(None);
            let per_vm = quota.units(offer);
            if per_vm == 0 {
                continue;
            }
            let left = q.limit.saturating_sub(Self::quota_used(w, &quota));
            let fits = left / per_vm;
            if fits < room {
                room = fits;
                refusal = (fits < asked).then(|| q.refusal());
            }
        }
        (room, refusal)
    }

    /// Units of `quota` that live instances use. A scan over the instances: only clouds with
    /// quotas configured pay for it, once per launch.
    fn quota_used(w: &World, quota: &CloudQuota) -> u32 {
        w.instances
            .values()
            .filter(|i| i.instance.state != InstanceState::Terminated)
            .map(|i| quota.units(&i.instance.offer))
            .sum()
    }
}
