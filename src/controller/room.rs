//! What the limits leave: the account's quotas less what the fleet holds and has asked for,
//! and each team's budget less what it spent and what its running jobs are expected to cost
//! still. Built once per pass from the fleet ([`Room::new`]), debited by every launch the
//! pass writes ([`Room::take`]); pure, so the planner's options and every launch's check read
//! the same numbers.

use std::collections::BTreeMap;

use tern_cloud::Offer;
use tern_plan::{PlanOptions, Quota};

use crate::limits::TeamLimit;

/// What one team has spent and holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct TeamUse {
    /// Billed so far, every job of the team.
    pub spent: f64,
    /// What its running jobs are still expected to cost (plan estimate less spend).
    pub committed: f64,
    /// $/h of its live instances.
    pub hourly: f64,
}

/// One job as the room counts it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct JobUse {
    pub team: String,
    pub spent: f64,
    /// The job's own `budget.total_usd`.
    pub total_usd: Option<f64>,
    pub committed: f64,
}

/// The limits and what is left of them.
#[derive(Debug, Clone, Default)]
pub(super) struct Room {
    /// Every quota in force (the file's, those the cloud reported or refused with) and the
    /// units the fleet uses of it.
    quotas: Vec<(Quota, u32)>,
    teams: BTreeMap<String, (TeamLimit, TeamUse)>,
    /// Teams whose budget ran out: nothing new until it is raised.
    exhausted: std::collections::BTreeSet<String>,
}

/// What holds a launch back: the limit, in words (the `wait` event's reason).
pub(super) type Held = String;

impl Room {
    /// `held`: the live instances, as (offer, VMs on it), and `pending`: launches asked for and
    /// not yet seen as instances (offers they may land on, VMs), both counted against the quotas.
    pub(super) fn new<'a>(
        quotas: Vec<Quota>,
        held: impl Iterator<Item = (&'a Offer, u32)>,
        pending: impl Iterator<Item = (&'a [Offer], u32)>,
        teams: &BTreeMap<String, TeamLimit>,
        mut use_of: BTreeMap<String, TeamUse>,
    ) -> Room {
        let mut quotas: Vec<(Quota, u32)> = quotas.into_iter().map(|q| (q, 0)).collect();
        for (offer, vms) in held {
            for (q, used) in &mut quotas {
                *used += q.per_node(offer).unwrap_or(0) * vms;
            }
        }
        for (offers, count) in pending {
            for (q, used) in &mut quotas {
                *used += most_per_node(q, offers) * count;
            }
        }
        let teams = teams
            .iter()
            .map(|(name, limit)| {
                let used = use_of.remove(name.as_str()).unwrap_or_default();
                (name.clone(), (limit.clone(), used))
            })
            .collect();
        Room {
            quotas,
            teams,
            exhausted: Default::default(),
        }
    }

    /// The planner's options for placing `planned` jobs: quotas less what the fleet uses,
    /// each team's total less its spend and what its other jobs have committed, its $/h less
    /// what it runs now.
    pub(super) fn plan_options(&self, mut options: PlanOptions, planned: &[JobUse]) -> PlanOptions {
        options.quotas = self.quotas.iter().map(|(q, used)| q.less(*used)).collect();
        for (name, (limit, used)) in &self.teams {
            let Some(budget) = options.team_budgets.get_mut(name) else {
                continue;
            };
            let mine: f64 = planned
                .iter()
                .filter(|j| &j.team == name)
                .map(|j| j.committed)
                .sum();
            budget.total_usd = limit
                .total_usd
                .map(|t| (t - used.spent - (used.committed - mine)).max(0.0));
            budget.per_hour_usd = limit.per_hour_usd.map(|h| (h - used.hourly).max(0.0));
            if self.exhausted.contains(name) {
                budget.total_usd = Some(0.0);
            }
        }
        options
    }

    /// The offers of `offers` that `count` more VMs of job `j` may launch on, in order; the
    /// limit that holds them back when none may.
    pub(super) fn admit(
        &self,
        j: &JobUse,
        offers: &[Offer],
        count: u32,
    ) -> Result<Vec<Offer>, Held> {
        if let Some(total) = j.total_usd
            && j.spent >= total
        {
            return Err(format!(
                "its own budget is spent (${:.2} of ${total:.2})",
                j.spent
            ));
        }
        if let Some(held) = self.team_held(&j.team) {
            return Err(held);
        }
        let team = self.teams.get(&j.team);
        let mut first_refusal = None;
        let fits: Vec<Offer> = offers
            .iter()
            .filter(|o| match self.offer_held(o, count, team) {
                None => true,
                Some(why) => {
                    first_refusal.get_or_insert(why);
                    false
                }
            })
            .cloned()
            .collect();
        match first_refusal {
            Some(why) if fits.is_empty() => Err(why),
            _ => Ok(fits),
        }
    }

    fn team_held(&self, team: &str) -> Option<Held> {
        let (limit, used) = self.teams.get(team)?;
        if self.exhausted.contains(team) {
            return Some(format!(
                "team {team}'s budget ran out (${:.2} spent of ${:.2}); it waits until the budget is raised",
                used.spent,
                limit.total_usd.unwrap_or(0.0)
            ));
        }
        let total = limit.total_usd?;
        (used.spent + used.committed >= total).then(|| {
            format!(
                "team {team}'s budget is spent or committed (${:.2} spent, ${:.2} committed, of ${total:.2})",
                used.spent, used.committed
            )
        })
    }

    fn offer_held(
        &self,
        offer: &Offer,
        count: u32,
        team: Option<&(TeamLimit, TeamUse)>,
    ) -> Option<Held> {
        for (q, used) in &self.quotas {
            let Some(per) = q.per_node(offer) else {
                continue;
            };
            if used + per * count > q.limit {
                return Some(format!(
                    "quota {}/{}/{}/{}: {} in use, {} more would pass its {}",
                    q.cloud,
                    q.region.as_deref().unwrap_or("*"),
                    q.family,
                    q.capacity.map_or("any", |c| c.as_str()),
                    used,
                    per * count,
                    q.limit
                ));
            }
        }
        let (limit, used) = team?;
        let per_hour = limit.per_hour_usd?;
        let more = offer.price_per_hour * f64::from(count);
        (used.hourly + more > per_hour + 1e-9).then(|| {
            format!(
                "team budget ${per_hour:.2}/h: ${:.2}/h running, ${more:.2}/h more would pass it",
                used.hourly
            )
        })
    }

    /// Count a launch of `count` VMs on one of `offers` (the most it could use of each quota)
    /// for a job of `team`.
    pub(super) fn take(&mut self, team: &str, offers: &[Offer], count: u32) {
        for (q, used) in &mut self.quotas {
            *used += most_per_node(q, offers) * count;
        }
        let most = offers.iter().map(|o| o.price_per_hour).fold(0.0, f64::max);
        if let Some((_, used)) = self.teams.get_mut(team) {
            used.hourly += most * f64::from(count);
        }
    }

    /// Hold back every team of `exhausted` (team → the budget it ran out of) whose budget is
    /// still no more than that.
    pub(super) fn exhaust(&mut self, exhausted: &BTreeMap<String, f64>) {
        for (team, was) in exhausted {
            if let Some((limit, _)) = self.teams.get(team)
                && limit.total_usd.is_some_and(|t| t <= *was)
            {
                self.exhausted.insert(team.clone());
            }
        }
    }

    /// Whether any limit is set (the planner's check of why a job waits costs a second solve).
    pub(super) fn limits_anything(&self) -> bool {
        !self.quotas.is_empty() || !self.teams.is_empty()
    }
}

/// The most one VM on any of `offers` uses of quota `q`.
fn most_per_node(q: &Quota, offers: &[Offer]) -> u32 {
    offers
        .iter()
        .filter_map(|o| q.per_node(o))
        .max()
        .unwrap_or(0)
}
