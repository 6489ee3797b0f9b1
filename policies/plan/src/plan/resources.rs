//! The resources the MILP shares between jobs: quotas, offers' availability caps and team
//! budgets. Each gets an id (its constraint row) the first time a configuration needs it, and a
//! label, so explanations can name the limit a configuration would break.

use std::collections::HashMap;

use tern_cloud::Offer;

use crate::input::{PlanJob, PlanOptions, Quota};

/// A resource the MILP shares between jobs, with a label for explanations.
pub(super) struct Resource {
    pub(super) label: String,
    pub(super) limit: f64,
}

/// The (total, hourly) budget resources of one team, when it has those budgets.
pub(super) type TeamIds = (Option<usize>, Option<usize>);

/// Every shared resource of one plan, by id. Quotas come first, in the order given; caps and
/// team budgets follow in the order configurations first need them.
pub(super) struct Resources<'a> {
    pub(super) list: Vec<Resource>,
    /// Id of each quota, by its index in [`PlanOptions::quotas`].
    quota: Vec<usize>,
    /// Id of each offer's availability cap, by offer index.
    cap: HashMap<usize, usize>,
    /// One pair of budget resources per team, shared by all its jobs.
    team: HashMap<&'a str, TeamIds>,
}

impl<'a> Resources<'a> {
    pub(super) fn new(quotas: &[Quota]) -> Resources<'a> {
        let mut resources = Resources {
            list: Vec::new(),
            quota: Vec::new(),
            cap: HashMap::new(),
            team: HashMap::new(),
        };
        let ids = quotas
            .iter()
            .map(|q| resources.add(quota_label(q), f64::from(q.limit)))
            .collect();
        resources.quota = ids;
        resources
    }

    fn add(&mut self, label: String, limit: f64) -> usize {
        self.list.push(Resource { label, limit });
        self.list.len() - 1
    }

    /// The id of the quota at index `q` of [`PlanOptions::quotas`].
    pub(super) fn quota(&self, q: usize) -> usize {
        self.quota[q]
    }

    /// The id of offer `i`'s availability cap of `cap` VMs.
    pub(super) fn cap(&mut self, i: usize, offer: &Offer, cap: u32) -> usize {
        if let Some(&id) = self.cap.get(&i) {
            return id;
        }
        let label = format!("availability of {} ({cap} VMs)", offer.key());
        let id = self.add(label, f64::from(cap));
        self.cap.insert(i, id);
        id
    }

    /// The budget resources of `job`'s team; `None` when the team has no budget.
    pub(super) fn team(&mut self, job: &'a PlanJob, options: &PlanOptions) -> Option<TeamIds> {
        let b = options.team_budgets.get(&job.team)?;
        if let Some(&ids) = self.team.get(job.team.as_str()) {
            return Some(ids);
        }
        let total = b
            .total_usd
            .map(|t| self.add(format!("team {} budget (${t:.2})", job.team), t));
        let hourly = b
            .per_hour_usd
            .map(|h| self.add(format!("team {} budget (${h:.2}/h)", job.team), h));
        self.team.insert(job.team.as_str(), (total, hourly));
        Some((total, hourly))
    }
}

fn quota_label(q: &Quota) -> String {
    format!(
        "quota {}/{}/{}/{} ({} {})",
        q.cloud,
        q.region.as_deref().unwrap_or("*"),
        q.family,
        q.capacity.map_or("any", |c| c.as_str()),
        q.limit,
        match q.unit {
            crate::input::QuotaUnit::Accelerators => "accelerators",
            crate::input::QuotaUnit::Vcpus => "vCPUs",
            crate::input::QuotaUnit::Model => "accelerators of that model",
        }
    )
}
