//! Quotas the cloud enforces, as the controller learns them: those the cloud lists (read at
//! start and every hour, where the provider can), and those a refused launch names (kept for
//! [`super::ControllerConfig::quota_memory`]). Both join the quota file's in every plan and
//! every launch's check ([`super::room`]).

use chrono::{DateTime, Utc};
use tern_cloud::{Offer, ProviderError, QuotaScope};

use super::events::WaitReason;
use tern_plan::{Quota, QuotaUnit};

use super::{Controller, delta};

/// How often the cloud's own quota listing is read again.
const QUOTA_READ_EVERY: chrono::TimeDelta = chrono::TimeDelta::hours(1);

impl Controller {
    /// Every quota in force now: the file's, the cloud's listing, and unexpired refusals.
    pub(super) fn quotas_in_force(&self) -> Vec<Quota> {
        let mut all = self.config.limits.quota.clone();
        all.extend(self.cloud.listed_quotas.values().flatten().cloned());
        all.extend(self.cloud.refused_quotas.iter().map(|(q, _)| q.clone()));
        all
    }

    /// A launch on `offer` was refused for quota: keep the limit the error names or, when it
    /// names none, what the fleet uses of that family, region and capacity now (the cloud
    /// took no more than that).
    pub(super) fn note_refused_quota(
        &mut self,
        offer: &Offer,
        err: &ProviderError,
        now: DateTime<Utc>,
    ) {
        let quota = match tern_cloud::quota_named(err, offer) {
            Some(named) => planner_quota(&named),
            None => {
                let Some(family) = offer.accelerator().map(|a| a.family()) else {
                    return;
                };
                let scope = Quota {
                    cloud: offer.cloud,
                    region: Some(offer.region.as_str().to_string()),
                    family,
                    capacity: Some(offer.capacity),
                    limit: 0,
                    unit: QuotaUnit::Accelerators,
                };
                let limit = self
                    .fleet
                    .instances
                    .units_held(|o| scope.per_node(o).unwrap_or(0));
                Quota { limit, ..scope }
            }
        };
        let until = now + delta(self.config.quota_memory);
        self.cloud
            .refused_quotas
            .retain(|(q, _)| !q.same_scope(&quota));
        tracing::warn!(
            cloud = %quota.cloud,
            region = quota.region.as_deref().unwrap_or("*"),
            family = %quota.family,
            limit = quota.limit,
            "the cloud refused a launch for quota; planning within it until {until}"
        );
        self.cloud.refused_quotas.push((quota, until));
    }

    /// Drop refusals past their time; read the cloud's listing when it is due (at the first
    /// pass, then hourly). A region whose read fails keeps what was read before.
    pub(super) async fn read_quotas(&mut self, now: DateTime<Utc>) {
        self.cloud.refused_quotas.retain(|(_, until)| *until > now);
        if self
            .cloud
            .quotas_read_at
            .is_some_and(|t| now - t < QUOTA_READ_EVERY)
        {
            return;
        }
        self.cloud.quotas_read_at = Some(now);
        for region in self.config.regions.clone() {
            match self.provider.quotas(&region).await {
                Ok(listed) => {
                    let ours = |q: &tern_cloud::CloudQuota| {
                        self.fleet.instances.units_held(|o| q.units(o))
                    };
                    let quotas = listed
                        .iter()
                        .map(|q| {
                            // What others use of it leaves this controller less.
                            let mut mine = planner_quota(q);
                            if let Some(used) = q.used {
                                mine.limit = (q.limit + ours(q)).saturating_sub(used);
                            }
                            mine
                        })
                        .collect();
                    self.cloud
                        .listed_quotas
                        .insert(region.as_str().to_string(), quotas);
                }
                Err(e) => self.cloud_error(&e),
            }
        }
    }

    /// Whether `count` starts on `offers` fit the limits: the offers that fit, their room
    /// taken; or `None` once the job's wait for the limit is reported.
    pub(super) fn admit(
        &mut self,
        job: &str,
        offers: Vec<Offer>,
        count: u32,
        now: DateTime<Utc>,
    ) -> super::Result<Option<Vec<Offer>>> {
        let Some(usage) = self.job_use(job) else {
            return Ok(Some(offers));
        };
        match self.room.admit(&usage, &offers, count) {
            Ok(fits) => {
                self.room.take(&usage.team, &fits, count);
                Ok(Some(fits))
            }
            Err(limit) => {
                self.wait(job, WaitReason::Limit { limit }, now)?;
                Ok(None)
            }
        }
    }
}

/// A quota the cloud states, as the planner counts it.
pub(super) fn planner_quota(q: &tern_cloud::CloudQuota) -> Quota {
    let (family, unit) = match &q.scope {
        QuotaScope::Accelerators { family } => (family.clone(), QuotaUnit::Accelerators),
        QuotaScope::Model { name } => (name.clone(), QuotaUnit::Model),
        QuotaScope::Vcpus { classes } => (classes.join(","), QuotaUnit::Vcpus),
    };
    Quota {
        cloud: q.cloud,
        region: Some(q.region.as_str().to_string()),
        family,
        capacity: q.capacity,
        limit: q.limit,
        unit,
    }
}
