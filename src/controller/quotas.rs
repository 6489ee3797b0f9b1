//! Quotas the cloud enforces, as the controller learns them: those the cloud lists (read at
//! start and every hour, where the provider can), and those a refused launch names (kept for
//! [`super::ControllerConfig::quota_memory`]). Both join the quota file's in every plan and
//! every launch's check ([`super::room`]).

use chrono::{DateTime, Utc};
use tern_cloud::{IntentKind, Offer, ProviderError};

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
        let limit = named_limit(err).unwrap_or_else(|| {
            self.fleet
                .instances
                .values()
                .filter_map(|i| scope.per_node(&i.offer))
                .sum()
        });
        let quota = Quota { limit, ..scope };
        let until = now + delta(self.config.quota_memory);
        self.cloud
            .refused_quotas
            .retain(|(q, _)| !q.same_scope(&quota));
        tracing::warn!(
            cloud = %quota.cloud,
            region = quota.region.as_deref().unwrap_or("*"),
            family = %quota.family,
            limit = quota.limit,
            "the cloud refused a launch for quota; planning within {} accelerators until {until}",
            quota.limit
        );
        self.cloud.refused_quotas.push((quota, until));
    }

    /// Drop refusals past their time; read the cloud's listing when it is due.
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
        let _ = delta;
    }

    /// Check a launch or a move against the room: the offers it may use, or `None` (the job
    /// waits, saying which limit held it) when none.
    pub(super) fn admit(
        &mut self,
        job: &str,
        kind: IntentKind,
        now: DateTime<Utc>,
    ) -> super::Result<Option<IntentKind>> {
        let (offers, count) = match &kind {
            IntentKind::Launch { offers, count }
            | IntentKind::Migrate {
                to: offers, count, ..
            } => (offers, *count),
            _ => return Ok(Some(kind)),
        };
        let Some(usage) = self.job_use(job) else {
            return Ok(Some(kind));
        };
        match self.room.admit(&usage, offers, count) {
            Ok(fits) => {
                self.room.take(&usage.team, &fits, count);
                Ok(Some(match kind {
                    IntentKind::Launch { count, .. } => IntentKind::Launch {
                        offers: fits,
                        count,
                    },
                    IntentKind::Migrate { from, count, .. } => IntentKind::Migrate {
                        from,
                        to: fits,
                        count,
                    },
                    other => other,
                }))
            }
            Err(limit) => {
                self.wait(job, WaitReason::Limit { limit }, now)?;
                Ok(None)
            }
        }
    }
}

/// The limit a quota error states in accelerators, when its message gives one
/// (GCP: "Quota 'NVIDIA_T4_GPUS' exceeded.  Limit: 4.0 in region us-central1.").
pub(super) fn named_limit(err: &ProviderError) -> Option<u32> {
    let ProviderError::Quota { message, .. } = err else {
        return None;
    };
    if !message.contains("GPUS") {
        // AWS states vCPUs, not accelerators: the fleet's use stands in.
        return None;
    }
    let after = message.split("Limit:").nth(1)?.trim_start();
    let number: String = after
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let value: f64 = number.trim_end_matches('.').parse().ok()?;
    (value.is_finite() && value >= 0.0).then_some(value as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gcp_quota_error_names_its_limit() {
        let err = ProviderError::Quota {
            code: "QUOTA_EXCEEDED".into(),
            message: "Quota 'NVIDIA_T4_GPUS' exceeded.  Limit: 4.0 in region us-central1.".into(),
        };
        assert_eq!(named_limit(&err), Some(4));
        let aws = ProviderError::Quota {
            code: "VcpuLimitExceeded".into(),
            message:
                "You have requested more vCPU capacity than your current vCPU limit of 32 allows"
                    .into(),
        };
        assert_eq!(named_limit(&aws), None);
    }
}
