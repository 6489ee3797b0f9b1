//! The running jobs that need a change (the second half of `reconcile_jobs`). Lost nodes are
//! replaced (spot of the same shape first; on-demand only when the deadline needs it; a gang only
//! in its zone, else it is released and placed anew), elastic jobs shrink to their survivors and
//! grow back, and nodes move to cheaper spot when the saving beats the cost of moving. For a job
//! with a deadline the decisions are the deadline policy's (`super::policy`: spot in which zone,
//! on-demand, or wait); without one they are `tern_policies::fleet`'s (never on-demand). This
//! module gathers their inputs and acts on the answer.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use tern_cloud::{Availability, Capacity, InstanceState, IntentKind, Offer};
use tern_policies::fleet::{self, Deadline, MoveInput, Node, SpotWait, Target};

use super::decide::{self, Decision, pool};
use super::events::{Event, WaitReason};
use super::{Controller, Result, fallbacks, hours};
use crate::store::{InstanceRecord, JobRecord};
use tern_policies::deadline::Placement as Policy;

/// The running nodes as the move rule sees them, against the target pool `best`.
/// The move the controller starts: which nodes leave, for which offer, and why.
#[derive(Debug)]
struct MoveStep {
    movers: Vec<InstanceRecord>,
    /// $/h of the movers now.
    from_rate: f64,
    to: Offer,
    net_saving: f64,
    work_h: f64,
    policy: Option<String>,
}

/// A pool as the move rule sees it: its price and, when the cloud says, its room.
fn target_of(offer: &Offer) -> Target {
    Target {
        price: offer.price_per_hour,
        room: match offer.availability {
            Availability::Available(Some(k)) => Some(k),
            _ => None,
        },
    }
}

fn nodes_of(running: &[(InstanceRecord, f64)], best: Option<&Offer>) -> Vec<Node> {
    running
        .iter()
        .map(|(i, price)| Node {
            price: *price,
            on_demand: i.offer.capacity == Capacity::OnDemand,
            in_target: best.is_some_and(|b| i.offer.key() == b.key()),
            other_region: best.is_some_and(|b| i.offer.region != b.region),
        })
        .collect()
}

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
        let nodes = e.record.target_count.max(e.record.planned_count).max(1);
        let speed = self.throughput(name, first, nodes).map_or(0.0, |t| t.0);
        let node_hours = self.work_hours(name, speed) * f64::from(nodes);
        let egress = e.record.spec.checkpoint.size_gb * fleet::EGRESS_DOLLARS_PER_GB;
        let home = self.live_of(name).first().map(|i| i.offer.region.clone());
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
        let first = self.live_of(name).first().map(|i| i.offer.clone())?;
        let r = &self.fleet.jobs.get(name)?.record;
        let (gang, target) = (r.spec.gang, r.target_count);
        let min_nodes = r
            .spec
            .workers
            .min
            .div_ceil(first.accelerator_units().max(1));
        let planned = r.planned_count.max(target);
        let policy = self.ask_policy(name, &first, planned, now);
        let pessimistic = self.throughput(name, &first, target).map_or(0.0, |t| t.1);
        let spot_wait = self.spot_wait(name, self.work_hours(name, pessimistic), now);
        let shape = first.instance_type.name.as_str();
        let owned = |v: Vec<&Offer>| v.into_iter().cloned().collect::<Vec<_>>();
        Some(decide::Running {
            gang,
            live: self.live_of(name).into_iter().cloned().collect(),
            held: self.held_by(name),
            target,
            min_nodes,
            offers,
            policy,
            spot_wait,
            on_demand_here: owned(self.on_demand_pool(name, offers, shape, Some(&first.zone))),
            on_demand_anywhere: owned(self.on_demand_pool(name, offers, shape, None)),
        })
    }

    /// Carry out a decision: intents (and through them the cloud), store writes, events.
    pub(super) async fn carry_out(
        &mut self,
        name: &str,
        decision: Decision,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let mut next = Some(decision);
        while let Some(d) = next.take() {
            next = self.carry_out_one(name, d, now).await?;
        }
        Ok(())
    }

    /// One step of a decision; what follows it, if anything.
    async fn carry_out_one(
        &mut self,
        name: &str,
        decision: Decision,
        now: DateTime<Utc>,
    ) -> Result<Option<Decision>> {
        match decision {
            Decision::Nothing => Ok(None),
            Decision::Wait(reason) => self.wait(name, reason, now).map(|()| None),
            Decision::Replace {
                offers,
                missing,
                on_demand,
            } => {
                if let Some(e) = self.fleet.jobs.get_mut(name) {
                    e.waiting = None;
                }
                let job = name.to_string();
                self.emit(
                    now,
                    Event::Replacing {
                        job,
                        missing,
                        on_demand,
                    },
                )?;
                let kind = IntentKind::Launch {
                    offers,
                    count: missing,
                };
                self.act(name, kind, now).await.map(|()| None)
            }
            Decision::Regroup {
                zone,
                release,
                anew,
                then,
            } => {
                if anew && let Some(e) = self.fleet.jobs.get_mut(name) {
                    e.record.target_offer = None;
                    e.record.target_count = 0;
                    self.store.update_job(&e.record, now)?;
                }
                let job = name.to_string();
                let released = release.len();
                self.emit(
                    now,
                    Event::Regrouped {
                        job,
                        zone,
                        released,
                    },
                )?;
                let kind = IntentKind::Terminate { instances: release };
                self.act(name, kind, now).await?;
                Ok(Some(*then))
            }
            Decision::Resize {
                from,
                to,
                why,
                then,
            } => {
                let job = name.to_string();
                self.emit(now, Event::Resized { job, from, to, why })?;
                self.act(name, IntentKind::Resize { count: to }, now)
                    .await?;
                Ok(Some(*then))
            }
        }
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
        let checked: HashSet<&str> = names.iter().map(String::as_str).collect();
        let mut fleets: HashMap<String, Vec<InstanceRecord>> = HashMap::new();
        for i in self.fleet.instances.values() {
            if !i.draining && checked.contains(i.job.as_str()) {
                fleets.entry(i.job.clone()).or_default().push(i.clone());
            }
        }
        let price_now: HashMap<String, f64> =
            offers.iter().map(|o| (o.key(), o.price_per_hour)).collect();
        for name in names {
            let mut fleet = fleets.remove(name).unwrap_or_default();
            fleet.sort_by(|a, b| a.id.cmp(&b.id));
            self.consider_move(name, fleet, offers, &price_now, now)
                .await?;
        }
        Ok(())
    }

    /// Move nodes to cheaper spot capacity when [`fleet::plan_move`] says the saving beats the
    /// cost of moving: on-demand nodes to spot once spot is back, and spot nodes to another
    /// zone's spot when prices there have fallen well below (a price change triggers the
    /// check). Never onto on-demand: replacing spot with dearer capacity happens only through
    /// `replace`, when the deadline needs it.
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
        let mut running: Vec<(InstanceRecord, f64)> = fleet
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
        // Dearest first (the order the move rule considers them in): the first one names the
        // shape, the gang's zone and the on-demand price to compare with.
        let order = fleet::dearest_first(&nodes_of(&running, None));
        running = order.into_iter().map(|k| running[k].clone()).collect();
        let Some(e) = self.fleet.jobs.get_mut(name) else {
            return Ok(());
        };
        e.last_migrate_check = Some(now);
        let r = e.record.clone();
        let Some(first) = running.first().map(|(i, _)| i.offer.clone()) else {
            return Ok(());
        };
        if r.deadline_at.is_some() {
            return self.follow_policy(name, &r, running, n, offers, now).await;
        }
        let zone = r.spec.gang.then_some(&first.zone);
        let Some(best) = pool(offers, &first.instance_type.name, Capacity::Spot, zone)
            .first()
            .map(|o| (*o).clone())
        else {
            return Ok(());
        };
        let Some((expected, _)) = self.throughput(name, &first, n) else {
            return Ok(());
        };
        let work_h = self.work_hours(name, expected);
        let nodes = nodes_of(&running, Some(&best));
        let input = MoveInput {
            nodes: &nodes,
            fleet_nodes: n,
            target: target_of(&best),
            gang: r.spec.gang,
            budget_fraction: self.config.disruption_budget,
            work_h,
            restart_h: self.restart_hours(name),
            slack_h: r
                .deadline_at
                .map_or(f64::INFINITY, |d| hours(d - now) - work_h),
            hours_since_last_move: r.last_move_at.map(|t| hours(now - t)),
            checkpoint_gb: r.spec.checkpoint.size_gb,
            data_egress: r
                .spec
                .constraints
                .data_egress(best.region.as_str(), fleet::EGRESS_DOLLARS_PER_GB),
            on_demand_rate: self.on_demand_price(&first).unwrap_or(first.price_per_hour),
        };
        let Ok(plan) = fleet::plan_move(&input) else {
            return Ok(());
        };
        let movers = plan.movers.iter().map(|&k| running[k].0.clone()).collect();
        let step = MoveStep {
            movers,
            from_rate: plan.current_rate,
            to: best,
            net_saving: plan.net_saving,
            work_h,
            policy: None,
        };
        self.start_move(name, r.spec.gang, n, step, offers, now)
            .await
    }

    /// Report a move and open its intent: launch on `to` (an elastic job may fall back to
    /// other offers of the shape), then release the movers once the job has checkpointed.
    async fn start_move(
        &mut self,
        name: &str,
        gang: bool,
        n: u32,
        step: MoveStep,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<()> {
        let offers = &self.allowed_offers(name, offers)[..];
        let k = step.movers.len() as u32;
        let Some(lead) = step.movers.first() else {
            return Ok(());
        };
        self.emit(
            now,
            Event::Migrating {
                job: name.to_string(),
                moved: k,
                of: n,
                from_capacity: lead.offer.capacity,
                from_price: step.from_rate / f64::from(k),
                from_zone: lead.offer.zone.clone(),
                to_capacity: step.to.capacity,
                to_price: step.to.price_per_hour,
                to_zone: step.to.zone.clone(),
                net_saving: step.net_saving,
                work_h: step.work_h,
                budget: self.config.disruption_budget,
                policy: step.policy,
            },
        )?;
        let from = step.movers.iter().map(|i| i.id.clone()).collect();
        let mut to = vec![step.to.clone()];
        if !gang {
            to.extend(fallbacks(offers, &step.to));
        }
        self.act(name, IntentKind::Migrate { from, to, count: k }, now)
            .await
    }

    /// A running job with a deadline moves when the deadline policy wants it elsewhere: to
    /// spot in another zone, from on-demand back to spot, or onto on-demand when the deadline
    /// needs it. An elastic job moves a disruption budget's worth of nodes per check, dearest
    /// first; a gang moves whole.
    async fn follow_policy(
        &mut self,
        name: &str,
        r: &JobRecord,
        running: Vec<(InstanceRecord, f64)>,
        n: u32,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<()> {
        let offers = &self.allowed_offers(name, offers)[..];
        let Some(first) = running.first().map(|(i, _)| i.offer.clone()) else {
            return Ok(());
        };
        let planned = r.planned_count.max(n);
        let Some(call) = self.ask_policy(name, &first, planned, now) else {
            return Ok(());
        };
        let want = call.step.placement;
        if want == call.now || want == Policy::Idle {
            return Ok(());
        }
        let shape = first.instance_type.name.as_str();
        let target = match want {
            Policy::OnDemand => self.on_demand_pool(name, offers, shape, None),
            p => pool(offers, shape, Capacity::Spot, call.zone(p)),
        };
        let Some(best) = target.first().map(|o| (*o).clone()) else {
            return Ok(());
        };
        let nodes = nodes_of(&running, Some(&best));
        let input = MoveInput {
            nodes: &nodes,
            fleet_nodes: n,
            target: target_of(&best),
            gang: r.spec.gang,
            budget_fraction: self.config.disruption_budget,
            work_h: 0.0,
            restart_h: self.restart_hours(name),
            slack_h: f64::INFINITY,
            hours_since_last_move: None,
            checkpoint_gb: r.spec.checkpoint.size_gb,
            data_egress: 0.0,
            on_demand_rate: best.price_per_hour,
        };
        let picked: Vec<usize> = if r.spec.gang {
            (0..nodes.len()).filter(|&i| !nodes[i].in_target).collect()
        } else {
            fleet::movers(&input, |_| true)
        };
        if picked.is_empty() {
            return Ok(());
        }
        let (expected, _) = self.throughput(name, &first, n).unwrap_or((0.0, 0.0));
        let step = MoveStep {
            movers: picked.iter().map(|&k| running[k].0.clone()).collect(),
            from_rate: picked.iter().map(|&i| nodes[i].price).sum(),
            to: best,
            net_saving: match call.step.why.and_then(|w| w.moved) {
                Some(tern_policies::migrate::Decision::Move { net_saving }) => net_saving,
                _ => 0.0,
            },
            work_h: self.work_hours(name, expected),
            policy: Some(call.why()),
        };
        self.start_move(name, r.spec.gang, n, step, offers, now)
            .await
    }
}
