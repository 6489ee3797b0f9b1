//! Phase 5: jobs that run and need a change. Lost nodes are replaced (spot of the same shape
//! first; on-demand only when the deadline needs it; a gang only in its zone, else it is
//! released and placed anew), elastic jobs shrink to their survivors and grow back, and nodes
//! move to cheaper spot when the saving beats the cost of moving. For a job with a deadline the
//! decisions are the deadline policy's (`super::policy`: spot in which zone, on-demand, or
//! wait); without one they are `tern_policies::fleet`'s (never on-demand). This module gathers
//! their inputs and acts on the answer.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use tern_cloud::{Availability, Capacity, InstanceId, InstanceState, IntentKind, Offer};
use tern_policies::fleet::{self, Deadline, MoveInput, Node, SpotWait, Target};

use super::decide::{self, CapacityCall, SpotNow};
use super::events::{Event, ResizeWhy, WaitReason};
use super::{Controller, Result, fallbacks, hours};
use crate::store::{InstanceRecord, JobRecord};
use tern_policies::deadline::Placement as Policy;

/// Offers of `shape` and `capacity` that are not known to be unavailable, cheapest first;
/// `zone` pins a gang to where its nodes run.
pub(super) fn pool<'a>(
    offers: &'a [Offer],
    shape: &str,
    capacity: Capacity,
    zone: Option<&tern_cloud::Zone>,
) -> Vec<&'a Offer> {
    let mut v: Vec<&Offer> = offers
        .iter()
        .filter(|o| {
            o.instance_type.name == shape
                && o.capacity == capacity
                && !matches!(o.availability, Availability::Unavailable)
                && zone.is_none_or(|z| &o.zone == z)
        })
        .collect();
    v.sort_by(|a, b| a.price_per_hour.total_cmp(&b.price_per_hour));
    v
}

/// Whether any spot offer of `shape` is among `offers` (the ones a job's constraints allow),
/// with capacity now or not: waiting for spot makes sense only then. An on-demand-only job,
/// or one whose allowed zones sell no spot, runs on on-demand at once.
pub(super) fn spot_allowed(offers: &[Offer], shape: &str) -> bool {
    offers
        .iter()
        .any(|o| o.capacity == Capacity::Spot && o.instance_type.name == shape)
}

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

    /// Replace lost nodes of a running job: same shape, spot first; on-demand only when the
    /// deadline needs it. A gang stays in its zone.
    pub(super) async fn replace(
        &mut self,
        name: &str,
        offers: &[Offer],
        now: DateTime<Utc>,
    ) -> Result<()> {
        let offers = &self.allowed_offers(name, offers)[..];
        let live = self.live_of(name);
        let n_live = live.len() as u32;
        let Some(first) = live.first().map(|i| i.offer.clone()) else {
            return Ok(());
        };
        let Some(e) = self.fleet.jobs.get_mut(name) else {
            return Ok(());
        };
        e.last_plan = Some(now);
        e.dirty = false;
        let gang = e.record.spec.gang;
        let target = e.record.target_count;
        let missing = target.saturating_sub(n_live);
        if missing == 0 {
            return Ok(());
        }
        let zone = gang.then_some(&first.zone);
        let shape = first.instance_type.name.as_str();
        let planned = e.record.planned_count.max(target);
        let call = self.ask_policy(name, &first, planned, now);
        let spot_list = pool(offers, shape, Capacity::Spot, zone);
        let spot = SpotNow {
            offered: !spot_list.is_empty(),
            allowed: spot_allowed(offers, shape),
        };
        let decided = decide::capacity(call.as_ref(), spot, || {
            let pessimistic = self.throughput(name, &first, target).map_or(0.0, |t| t.1);
            self.spot_wait(name, self.work_hours(name, pessimistic), now)
        });
        let (list, on_demand) = match decided {
            CapacityCall::Wait(wait) => {
                return self
                    .without_spot(name, &first, n_live, missing, wait, now)
                    .await;
            }
            CapacityCall::OnDemand { .. } if gang && call.is_some() => {
                return self.gang_on_demand(name, offers, target, now).await;
            }
            CapacityCall::OnDemand { .. } => (self.on_demand_pool(name, offers, shape, zone), true),
            CapacityCall::Spot { .. } if call.is_none() => (spot_list, false),
            CapacityCall::Spot { zone: want, why } => {
                let wait = WaitReason::Policy {
                    why: why.unwrap_or_default(),
                };
                // A gang's zone is gone: it gives its survivors back to start whole elsewhere.
                if gang && want.as_ref() != Some(&first.zone) {
                    return self
                        .without_spot(name, &first, n_live, missing, wait, now)
                        .await;
                }
                let mut list = spot_list;
                list.sort_by_key(|o| Some(&o.zone) != want.as_ref());
                if list.is_empty() {
                    // Spot holds the survivors but has no room for more: run on them.
                    return self
                        .without_spot(name, &first, n_live, missing, wait, now)
                        .await;
                }
                (list, false)
            }
        };
        let list = list.into_iter().cloned().collect();
        self.launch_missing(name, list, missing, on_demand, now)
            .await
    }

    /// The deadline needs a gang on on-demand: all of it, as the policy's job is all on one
    /// capacity. Spot survivors are released too (the gang restarts on the new nodes anyway),
    /// or each of their reclaims would restart it again with no slack left to pay for it.
    async fn gang_on_demand(
        &mut self,
        name: &str,
        offers: &[Offer],
        target: u32,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let live = self.live_of(name);
        let Some(first) = live.first().map(|i| i.offer.clone()) else {
            return Ok(());
        };
        let spot: Vec<InstanceId> = live
            .iter()
            .filter(|i| i.offer.capacity == Capacity::Spot)
            .map(|i| i.id.clone())
            .collect();
        let kept = (live.len() - spot.len()) as u32;
        // On-demand survivors pin the gang's zone; with none, any zone will do.
        let zone = (kept > 0).then_some(&first.zone);
        let shape = first.instance_type.name.as_str();
        let list: Vec<Offer> = self
            .on_demand_pool(name, offers, shape, zone)
            .into_iter()
            .cloned()
            .collect();
        if !spot.is_empty() && !list.is_empty() {
            self.emit(
                now,
                Event::Regrouped {
                    job: name.to_string(),
                    zone: first.zone.clone(),
                    released: spot.len(),
                },
            )?;
            self.act(name, IntentKind::Terminate { instances: spot }, now)
                .await?;
        }
        let missing = target.saturating_sub(kept);
        self.launch_missing(name, list, missing, true, now).await
    }

    /// Launch `missing` nodes of a running job on the first offers of `list` that take them.
    async fn launch_missing(
        &mut self,
        name: &str,
        list: Vec<Offer>,
        missing: u32,
        on_demand: bool,
        now: DateTime<Utc>,
    ) -> Result<()> {
        if list.is_empty() {
            return self.wait(name, WaitReason::NoCapacity, now);
        }
        if let Some(e) = self.fleet.jobs.get_mut(name) {
            e.waiting = None;
        }
        self.emit(
            now,
            Event::Replacing {
                job: name.to_string(),
                missing,
                on_demand,
            },
        )?;
        let kind = IntentKind::Launch {
            offers: list,
            count: missing,
        };
        self.act(name, kind, now).await
    }

    /// No spot of the shape and the deadline allows waiting. A gang cannot run short: it gives
    /// its zone back to be placed anew. An elastic job goes on with its survivors when they are
    /// at least its minimum (the agents' torchrun re-rendezvous at the smaller size) and grows
    /// back when spot returns ([`Self::grow`]).
    async fn without_spot(
        &mut self,
        name: &str,
        first: &Offer,
        n_live: u32,
        missing: u32,
        wait: WaitReason,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let Some(e) = self.fleet.jobs.get_mut(name) else {
            return Ok(());
        };
        if e.record.spec.gang {
            e.record.target_offer = None;
            e.record.target_count = 0;
            self.store.update_job(&e.record, now)?;
            let ids = self.held_by(name);
            self.emit(
                now,
                Event::Regrouped {
                    job: name.to_string(),
                    zone: first.zone.clone(),
                    released: ids.len(),
                },
            )?;
            return self
                .act(name, IntentKind::Terminate { instances: ids }, now)
                .await;
        }
        let min_nodes = e
            .record
            .spec
            .workers
            .min
            .div_ceil(first.accelerator_units().max(1));
        if n_live >= min_nodes.max(1) {
            self.emit(
                now,
                Event::Resized {
                    job: name.to_string(),
                    from: n_live + missing,
                    to: n_live,
                    why: ResizeWhy::SpotOut(wait.clone()),
                },
            )?;
            self.act(name, IntentKind::Resize { count: n_live }, now)
                .await?;
        }
        let surviving = WaitReason::OnSurvivors {
            why: Box::new(wait),
            survivors: n_live,
        };
        self.wait(name, surviving, now)
    }

    /// An elastic job resized below its planned size grows back once spot capacity of its
    /// shape is offered again: a `Resize` to the planned size, then `replace` launches the rest.
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
        let (from, to) = (e.record.target_count, e.record.planned_count);
        let back = !pool(offers, &first.instance_type.name, Capacity::Spot, None).is_empty();
        if !back || to <= from {
            return Ok(());
        }
        self.emit(
            now,
            Event::Resized {
                job: name.to_string(),
                from,
                to,
                why: ResizeWhy::SpotBack,
            },
        )?;
        self.act(name, IntentKind::Resize { count: to }, now)
            .await?;
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
