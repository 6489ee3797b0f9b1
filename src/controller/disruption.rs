//! The running jobs that need a change (the second half of `reconcile_jobs`). Lost nodes are
//! replaced (spot of the same shape first; on-demand only when the deadline needs it; a gang only
//! in its zone, else it is released and placed anew), elastic jobs shrink to their survivors and
//! grow back, and nodes move to cheaper spot when the saving beats the cost of moving. For a job
//! with a deadline the decisions are the deadline policy's (`super::policy`: spot in which zone,
//! on-demand, or wait); without one they are `tern_policies::fleet`'s (never on-demand). This
//! module gathers their inputs and acts on the answer.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use tern_cloud::{Capacity, InstanceState, Offer};
use tern_policies::fleet::{self, Deadline, SpotWait};

use super::decide::{self, Decision, pool};
use super::events::WaitReason;
use super::view::{self, Outlook};
use super::{Controller, Result, hours};
use crate::store::InstanceRecord;
use tern_policies::deadline::Placement as Policy;

impl Controller {
    /// On-demand offers of `shape` for job `name` (in `zone` where given): the one that costs
    /// least for the work left, egress of the checkpoint to its region counted exactly as the
    /// replay counts it ([`fleet::cheapest_on_demand`]), then the rest cheapest first as
    /// fallbacks. Every on-demand pick of the controller goes through here.
    pub(super) fn on_demand_pool<'a>(
        &self,
        name: &str,
        offers: &'a [Offer],
        shape: &str,
        zone: Option<&tern_cloud::Zone>,
    ) -> Vec<&'a Offer> {
        let mut list = pool(offers, shape, Capacity::OnDemand, zone);
        let (Some(first), Some(e)) = (list.first(), self.fleet.jobs.get(name)) else {
            return list;
        };
        let nodes = view::nodes_of(&e.record);
        let speed = self.throughput(name, first, nodes).map_or(0.0, |t| t.0);
        let node_hours = self.work_hours(name, speed) * f64::from(nodes);
        let egress = e.record.spec.checkpoint.size_gb * self.config.plan.egress_per_gb;
        let home = self.checkpoint_home(name).cloned();
        let options = list.iter().map(|o| {
            let away = home.as_ref().is_some_and(|h| *h != o.region);
            (o.price_per_hour, away)
        });
        if let Some(k) = fleet::cheapest_on_demand(options, node_hours, egress) {
            let best = list.remove(k);
            list.insert(0, best);
        }
        list
    }

    /// Where job `name`'s last checkpoint lives, as far as this controller knows: the region
    /// of the nodes it runs on, else of the newest node it ran on. Every placement that prices
    /// the checkpoint's egress (an on-demand pick, the deadline policy's zone choice for a
    /// start, a restart or a move) reads it here. Unknown for a job that has not run since
    /// this controller opened its store.
    pub(super) fn checkpoint_home(&self, name: &str) -> Option<&tern_cloud::Region> {
        let instances = &self.fleet.instances;
        let live = instances.of_job(name).find(|i| !i.draining);
        live.map(|i| &i.offer.region)
            .or_else(|| instances.last_region(name))
    }

    /// Hours one restart takes the job: checkpoint save, then the planner's price of an
    /// interruption on this cloud (provisioning, restore, and the progress since the last
    /// checkpoint where the cloud's notice is too short to save in).
    pub(super) fn restart_hours(&self, name: &str) -> f64 {
        self.fleet.jobs.get(name).map_or(0.0, |e| {
            let c = &e.record.spec.checkpoint;
            let cloud = self.provider.cloud();
            (c.save_s + tern_plan::interruption_seconds(c, cloud, self.config.plan.provision_s))
                / 3600.0
        })
    }

    /// Samples per second of the job on `nodes` nodes of `offer`'s shape, if it can be
    /// forecast: (expected, pessimistic).
    pub(super) fn throughput(&self, name: &str, offer: &Offer, nodes: u32) -> Option<(f64, f64)> {
        let acc = offer.accelerator()?.name.clone();
        let t = self
            .model(name)?
            .throughput(&acc, offer.accelerator_units().max(1), nodes)?;
        Some((t.expected, t.pessimistic))
    }

    /// Hours of work left after the last checkpoint at `samples_per_s`.
    pub(super) fn work_hours(&self, name: &str, samples_per_s: f64) -> f64 {
        self.fleet.jobs.get(name).map_or(0.0, |e| {
            fleet::work_hours(
                e.record.total_samples - e.record.checkpoint_samples,
                samples_per_s,
            )
        })
    }

    /// Why the job should wait for spot instead of paying for on-demand, or `None` when its
    /// deadline needs on-demand now ([`fleet::spot_wait`]).
    pub(super) fn spot_wait(
        &self,
        name: &str,
        work_h: f64,
        now: DateTime<Utc>,
    ) -> Option<WaitReason> {
        let r = &self.fleet.jobs.get(name)?.record;
        let deadline = r.deadline_at.map(|d| Deadline {
            left_h: hours(d - now),
            window_h: hours(d - r.submitted_at),
        });
        match fleet::spot_wait(deadline, work_h, self.restart_hours(name)) {
            SpotWait::NoDeadline => Some(WaitReason::NoDeadline),
            SpotWait::Wait {
                slack_h,
                left_h,
                work_h,
                reserve_h,
            } => Some(WaitReason::Slack {
                slack_h,
                left_h,
                work_h,
                reserve_h,
            }),
            SpotWait::OnDemandNow => None,
        }
    }

    /// Replace lost nodes of a running job ([`decide::replace`]).
    pub(super) async fn replace(
        &mut self,
        name: &str,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<()> {
        let offers = &self.allowed_offers(name, offers)[..];
        let Some(e) = self.fleet.jobs.get_mut(name) else {
            return Ok(());
        };
        e.last_plan = Some(now);
        e.dirty = false;
        let Some(view) = self.running(name, offers, now) else {
            return Ok(());
        };
        let decision = decide::replace(&view);
        self.carry_out(name, decision, now).await
    }

    /// What [`decide::replace`] reads about job `name`: `None` when it runs no node.
    fn running<'a>(
        &mut self,
        name: &str,
        offers: &'a [Offer],
        now: DateTime<Utc>,
    ) -> Option<decide::Running<'a>> {
        let live: Vec<InstanceRecord> = self.live_of(name).into_iter().cloned().collect();
        let first = live.first()?.offer.clone();
        let r = &self.fleet.jobs.get(name)?.record;
        let (gang, target) = (r.spec.gang, r.target_count);
        let min_nodes = r
            .spec
            .workers
            .min
            .div_ceil(first.accelerator_units().max(1));
        let outlook = self.outlook(name, &first, now);
        let shape = first.instance_type.name.as_str();
        let owned = |v: Vec<&Offer>| v.into_iter().cloned().collect::<Vec<_>>();
        // Only a gang is pinned to its zone; an elastic job's pick is anywhere.
        let here = match gang {
            true => owned(self.on_demand_pool(name, offers, shape, Some(&first.zone))),
            false => Vec::new(),
        };
        Some(decide::Running {
            gang,
            live,
            held: self.held_by(name),
            target,
            min_nodes,
            offers,
            policy: outlook.policy,
            spot_wait: outlook.spot_wait,
            on_demand_here: here,
            on_demand_anywhere: owned(self.on_demand_pool(name, offers, shape, None)),
        })
    }

    /// An elastic job resized below its planned size grows back once spot capacity of its
    /// shape is offered again ([`decide::grow`]); `replace` then launches the rest.
    pub(super) async fn grow(
        &mut self,
        name: &str,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<()> {
        let offers = &self.allowed_offers(name, offers)[..];
        let Some(first) = self.live_of(name).first().map(|i| i.offer.clone()) else {
            return Ok(());
        };
        let Some(e) = self.fleet.jobs.get_mut(name) else {
            return Ok(());
        };
        e.last_plan = Some(now);
        e.dirty = false;
        let (target, planned) = (e.record.target_count, e.record.planned_count);
        let decision = decide::grow(&first.instance_type.name, offers, target, planned);
        if decision == Decision::Nothing {
            return Ok(());
        }
        self.carry_out(name, decision, now).await?;
        self.replace(name, offers, now).await
    }

    /// Check running jobs for a cheaper place, with one walk over the fleet for all of them
    /// (the pass stays linear).
    pub(super) async fn check_moves(
        &mut self,
        names: &[String],
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        let price_now: HashMap<String, f64> =
            offers.iter().map(|o| (o.key(), o.price_per_hour)).collect();
        for name in names {
            // In id order, from the job index.
            let fleet: Vec<InstanceRecord> = self
                .fleet
                .instances
                .of_job(name)
                .filter(|i| !i.draining)
                .cloned()
                .collect();
            let r = self
                .consider_move(name, fleet, offers, &price_now, now)
                .await;
            self.contain(name, r)?;
        }
        Ok(())
    }

    /// Gather what the move decision reads for job `name` and carry out its answer
    /// ([`decide::movement`]).
    async fn consider_move(
        &mut self,
        name: &str,
        fleet: Vec<InstanceRecord>,
        offers: &[Offer],
        price_now: &HashMap<String, f64>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let offers = &self.allowed_offers(name, offers)[..];
        let n = fleet.len() as u32;
        let running: Vec<(InstanceRecord, f64)> = fleet
            .into_iter()
            .filter(|i| i.state == InstanceState::Running)
            .map(|i| {
                let p = price_now
                    .get(&i.offer.key())
                    .copied()
                    .unwrap_or(i.offer.price_per_hour);
                (i, p)
            })
            .collect();
        let running = decide::dearest_first(running);
        let Some(e) = self.fleet.jobs.get_mut(name) else {
            return Ok(());
        };
        e.last_migrate_check = Some(now);
        let Some(first) = running.first().map(|(i, _)| i.offer.clone()) else {
            return Ok(());
        };
        let outlook = self.outlook(name, &first, now);
        let decision = match self.moving(name, running, n, offers, outlook, now) {
            Some(view) => decide::movement(&view),
            None => Decision::Nothing,
        };
        self.carry_out(name, decision, now).await
    }

    /// What [`decide::movement`] reads about job `name` (its nodes dearest first).
    fn moving<'a>(
        &'a self,
        name: &str,
        running: Vec<(InstanceRecord, f64)>,
        fleet_nodes: u32,
        offers: &'a [Offer],
        outlook: Outlook,
        now: DateTime<Utc>,
    ) -> Option<decide::Moving<'a>> {
        let policy = outlook.policy;
        let first = running.first().map(|(i, _)| i.offer.clone())?;
        let r = &self.fleet.jobs.get(name)?.record;
        let shape = first.instance_type.name.as_str();
        // The on-demand pick only where the policy asks for on-demand.
        let on_demand = match policy.as_ref().map(|c| c.step.placement) {
            Some(Policy::OnDemand) => self.on_demand_pool(name, offers, shape, None),
            _ => Vec::new(),
        };
        Some(decide::Moving {
            gang: r.spec.gang,
            deadline: r.deadline_at.is_some(),
            fleet_nodes,
            offers,
            policy,
            speed: outlook.speed.map(|t| t.0),
            remaining_samples: r.total_samples - r.checkpoint_samples,
            hours_left: r.deadline_at.map(|d| hours(d - now)),
            budget_fraction: self.config.disruption_budget,
            restart_h: outlook.restart_h,
            hours_since_last_move: r.last_move_at.map(|t| hours(now - t)),
            checkpoint_gb: r.spec.checkpoint.size_gb,
            egress_per_gb: self.config.plan.egress_per_gb,
            constraints: &r.spec.constraints,
            on_demand_rate: self.on_demand_price(&first).unwrap_or(first.price_per_hour),
            on_demand: on_demand.into_iter().cloned().collect(),
            running,
        })
    }
}
