//! Whether a probe's end moves the job at all: a move that saves nothing after its restart
//! and egress is not made while the probe's capacity still meets the deadline.

use chrono::{DateTime, Utc};

use super::super::Controller;
use crate::store::InstanceRecord;

impl Controller {
    /// The net saving of moving from the probe's `fleet` to the plan's choice `c`, when it is
    /// not positive and the probe's capacity still meets the deadline at the pessimistic
    /// speed: then the job stays. What staying costs (its $/h over the work left at its own
    /// speed) against the plan's expected cost there, one restart on the new nodes, and the
    /// egress of the checkpoint and the data when the move leaves their region.
    pub(super) fn staying_pays(
        &self,
        name: &str,
        fleet: &[InstanceRecord],
        c: &tern_plan::Config,
        now: DateTime<Utc>,
    ) -> Option<f64> {
        let here = &fleet.first()?.offer;
        let (expected, pessimistic) = self.throughput(name, here, fleet.len() as u32)?;
        let rate: f64 = fleet.iter().map(|i| i.offer.price_per_hour).sum();
        let e = self.fleet.jobs.get(name)?;
        let per_gb = self.config.plan.egress_per_gb;
        let size_gb = e.record.spec.checkpoint.size_gb;
        let checkpoint =
            tern_cloud::egress_dollars(size_gb, per_gb, here.region.as_str(), &c.region);
        let egress = checkpoint + e.record.spec.constraints.data_egress(&c.region, per_gb);
        let net = rate * self.work_hours(name, expected)
            - c.expected_cost
            - self.restart_hours(name) * c.hourly
            - egress;
        let meets = e.record.deadline_at.is_none_or(|d| {
            self.work_hours(name, pessimistic) <= (d - now).num_seconds() as f64 / 3600.0
        });
        (net <= 0.0 && meets).then_some(net)
    }
}
