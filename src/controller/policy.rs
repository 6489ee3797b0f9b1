//! The deadline policy on live state: the controller asks [`deadline::step`] with
//! [`deadline::Tern`], the very call `tern simulate --policy tern` replays, for every job with
//! a deadline. Whether the job runs on spot (and in which zone), on on-demand, or waits, and
//! when it moves, all come from that one call.
//!
//! The policy thinks in ticks of [`ControllerConfig::policy_tick`](super::ControllerConfig).
//! This module keeps what it learns from, each spot pool's availability per tick ([`Pools`],
//! persisted so a restart does not forget it), and maps a job's records onto the tick model:
//! tick 0 is the job's submission, the work is its samples at the forecast full-size speed,
//! and progress is what its last checkpoint holds. What the controller does beyond one job's
//! policy stays its own: the MILP picks the shape and size over all jobs and quotas, and the
//! launch budget and pool backoff still bound what it launches.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use tern_cloud::{Availability, Capacity, InstanceState, Offer, Zone};
use tern_policies::deadline::{self, Job, JobProgress, Placement, Step, Tern, TickView, ZoneView};

use super::{Controller, Result, hours};
use crate::store::PoolSample;

/// Spot availability we record for a pool whose cloud does not say how many (AWS): capacity
/// is "there" until a launch fails or a notice comes (the backoff marks it unavailable).
pub const PLENTY: u32 = 1 << 16;
/// Ticks of history the policy learns from before a job's submission.
pub const LOOKBACK_TICKS: i64 = 7 * 24 * 12;
/// Most ticks a job's window may span: a longer window is counted in ticks of several policy
/// ticks (a pool is up in such a tick only if it was up in all of it). The policy's value
/// table grows with window × slack ticks, so this bounds its memory (≤ 10 MB per job).
pub const MAX_JOB_TICKS: i64 = 512;
/// Policy objects (learned counts, value table and histories, one per class of jobs the policy
/// cannot tell apart) kept between passes; the least recently asked goes first, and a class
/// not kept is rebuilt from the pool logs when asked. A value table is at most 10 MB.
pub const CACHED_POLICIES: usize = 32;
/// Passes a policy object is kept unasked (its jobs finished, moved shape, or are not checked).
const POLICY_IDLE_PASSES: u64 = 120;

/// One spot pool (an instance type in a zone): its availability per tick from `first` on.
#[derive(Debug, Clone)]
pub(super) struct PoolLog {
    pub(super) instance_type: String,
    pub(super) zone: Zone,
    /// Region index source: pools of one region share egress-free checkpoints.
    pub(super) region: String,
    pub(super) spot_price: f64,
    first: i64,
    samples: Vec<u32>,
}

impl PoolLog {
    fn last_tick(&self) -> i64 {
        self.first + self.samples.len() as i64 - 1
    }

    /// Record `available` at `tick`: a tick already past is kept as it was; a gap since the
    /// last sample (the controller was down) carries the last value forward. Returns whether a
    /// new tick was added.
    fn record(&mut self, tick: i64, available: u32) -> bool {
        if self.samples.is_empty() {
            self.first = tick;
            self.samples.push(available);
            return true;
        }
        let last = self.last_tick();
        if tick < last {
            return false;
        }
        if tick == last {
            if let Some(s) = self.samples.last_mut() {
                *s = available;
            }
            return false;
        }
        let carry = self.samples.last().copied().unwrap_or(available);
        for _ in last + 1..tick {
            self.samples.push(carry);
        }
        self.samples.push(available);
        true
    }

    /// Availability for ticks `from..=to`; ticks before the first sample repeat it, ticks
    /// after the last repeat the last.
    fn history(&self, from: i64, to: i64) -> Vec<u32> {
        (from..=to)
            .map(|t| {
                let i = (t - self.first).clamp(0, self.samples.len() as i64 - 1);
                self.samples.get(i as usize).copied().unwrap_or(0)
            })
            .collect()
    }
}

/// Every spot pool's availability log, keyed `type@zone` (sorted, so zone indices are stable).
#[derive(Debug, Default)]
pub(super) struct Pools {
    logs: BTreeMap<String, PoolLog>,
}

fn pool_key(instance_type: &str, zone: &str) -> String {
    format!("{instance_type}@{zone}")
}

/// Instances of the pool a spot offer says are there now.
fn available(offer: &Offer) -> u32 {
    match offer.availability {
        Availability::Unavailable => 0,
        Availability::Available(Some(n)) => n,
        Availability::Available(None) | Availability::Unknown => PLENTY,
    }
}

impl Pools {
    /// Rebuild from the store's samples (oldest first).
    pub(super) fn from_samples(samples: Vec<PoolSample>) -> Pools {
        let mut p = Pools::default();
        for s in samples {
            let log = p.logs.entry(s.pool.clone()).or_insert_with(|| PoolLog {
                instance_type: s.instance_type.clone(),
                zone: Zone::new(s.zone.clone()),
                region: s.region.clone(),
                spot_price: s.spot_price,
                first: s.tick,
                samples: Vec::new(),
            });
            log.spot_price = s.spot_price;
            log.record(s.tick, s.available);
        }
        p
    }

    /// Fold this pass's spot offers in at `tick`; `held` counts the instances we hold in each
    /// pool, which the cloud leaves out of what it still offers (the policy wants the pool's
    /// capacity, as a trace records it). Returns the samples to persist.
    pub(super) fn observe(
        &mut self,
        offers: &[Offer],
        held: &HashMap<String, u32>,
        tick: i64,
    ) -> Vec<PoolSample> {
        let mut fresh = Vec::new();
        for o in offers.iter().filter(|o| o.capacity == Capacity::Spot) {
            let key = pool_key(&o.instance_type.name, o.zone.as_str());
            let log = self.logs.entry(key.clone()).or_insert_with(|| PoolLog {
                instance_type: o.instance_type.name.clone(),
                zone: o.zone.clone(),
                region: o.region.to_string(),
                spot_price: o.price_per_hour,
                first: tick,
                samples: Vec::new(),
            });
            let a = available(o).saturating_add(held.get(&key).copied().unwrap_or(0));
            let same_tick = !log.samples.is_empty() && log.last_tick() == tick;
            let unchanged =
                same_tick && log.samples.last() == Some(&a) && log.spot_price == o.price_per_hour;
            log.spot_price = o.price_per_hour;
            log.record(tick, a);
            // Only what the store does not have yet: a new tick, or a new view of this one.
            if unchanged || log.last_tick() != tick {
                continue;
            }
            fresh.push(PoolSample {
                pool: key,
                instance_type: log.instance_type.clone(),
                zone: log.zone.to_string(),
                region: log.region.clone(),
                tick,
                available: a,
                spot_price: o.price_per_hour,
            });
        }
        fresh
    }

    /// The spot pools of one instance type, in key order.
    pub(super) fn of_type(&self, instance_type: &str) -> Vec<&PoolLog> {
        self.logs
            .values()
            .filter(|l| l.instance_type == instance_type)
            .collect()
    }
}

/// What the deadline policy knows of a job: jobs alike in all of it (a sweep submitted at
/// once, replicas of one spec) get the same answers from the same learned state, so they share
/// one policy object. A new shape or size is a new class, so the object starts afresh.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PolicyClass {
    shape: String,
    nodes: u32,
    job: Job,
    /// The spot pools it may use, by key.
    pools: Vec<String>,
    /// First policy tick of its histories, and policy ticks per tick of its grid.
    from: i64,
    k: i64,
}

/// A class's policy object and the histories it has learned from, kept up to date tick by
/// tick instead of rebuilt from the logs on every call (10,000 jobs × a week of lookback).
#[derive(Debug)]
struct ClassPolicy {
    tern: Tern,
    histories: Vec<Vec<u32>>,
    /// The last policy tick folded into `histories`.
    to: i64,
    /// The pass that last asked.
    asked: u64,
}

/// The policy objects of the classes asked recently (see [`CACHED_POLICIES`]).
#[derive(Debug, Default)]
pub(super) struct PolicyCache {
    classes: HashMap<PolicyClass, ClassPolicy>,
    pass: u64,
}

impl PolicyCache {
    /// The object of `class`, with its histories brought up to policy tick `to`.
    fn get(&mut self, class: PolicyClass, logs: &[&PoolLog], to: i64) -> &mut ClassPolicy {
        if !self.classes.contains_key(&class) && self.classes.len() >= CACHED_POLICIES {
            let oldest = self
                .classes
                .iter()
                .min_by_key(|(_, c)| c.asked)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.classes.remove(&k);
            }
        }
        let (from, k) = (class.from, class.k);
        let entry = self.classes.entry(class).or_insert_with(|| ClassPolicy {
            tern: Tern::new(),
            histories: vec![Vec::new(); logs.len()],
            to: from - 1,
            asked: 0,
        });
        entry.asked = self.pass;
        entry.extend(logs, from, k, to);
        entry
    }

    /// Start a new pass; forget classes nobody asked about for a while.
    fn next_pass(&mut self) {
        self.pass += 1;
        let pass = self.pass;
        self.classes
            .retain(|_, c| c.asked + POLICY_IDLE_PASSES >= pass);
    }
}

impl ClassPolicy {
    /// Fold ticks up to `to` into the histories. The grid tick holding the last one folded is
    /// redone: it may have been partial, and a pool's latest sample may have been re-read.
    fn extend(&mut self, logs: &[&PoolLog], from: i64, k: i64, to: i64) {
        if to < self.to {
            self.histories.iter_mut().for_each(Vec::clear);
            self.to = from - 1;
        }
        let keep = ((self.to - from).max(0) / k) as usize;
        let start = from + keep as i64 * k;
        for (h, log) in self.histories.iter_mut().zip(logs) {
            h.truncate(keep);
            h.extend(coarse(&log.history(start, to), k));
        }
        self.to = to;
    }
}

/// The policy's answer for one job, with the zones its `Spot(i)` indexes.
#[derive(Debug, Clone)]
pub(super) struct PolicyCall {
    pub(super) step: Step,
    pub(super) zones: Vec<Zone>,
    /// Where the job is now, in the same terms.
    pub(super) now: Placement,
}

impl PolicyCall {
    pub(super) fn zone(&self, p: Placement) -> Option<&Zone> {
        match p {
            Placement::Spot(i) => self.zones.get(i),
            _ => None,
        }
    }

    /// The policy's reasons, for the event log.
    pub(super) fn why(&self) -> String {
        let mut s = self.step.why.map_or_else(
            || "a booting instance is kept".to_string(),
            |w| w.to_string(),
        );
        if self.step.guarded() {
            s.push_str("; the deadline needs on-demand now");
        }
        s
    }
}

/// Everything [`deadline::step`] reads, owned.
#[derive(Debug)]
pub(super) struct PolicyInput {
    pub(super) job: Job,
    pub(super) state: JobProgress,
    pub(super) histories: Vec<Vec<u32>>,
    pub(super) prices: Vec<f64>,
    pub(super) regions: Vec<usize>,
    pub(super) zones: Vec<Zone>,
    pub(super) tick: u32,
    pub(super) on_demand_price: f64,
    pub(super) tick_hours: f64,
    pub(super) egress_cost: f64,
}

impl PolicyInput {
    fn views(&self) -> Vec<ZoneView<'_>> {
        self.histories
            .iter()
            .zip(&self.prices)
            .zip(&self.regions)
            .map(|((h, &p), &r)| ZoneView {
                history: h,
                spot_price: p,
                region: r,
            })
            .collect()
    }

    /// Ask `policy`, exactly as the replay does.
    pub(super) fn step(&self, policy: &mut dyn deadline::DeadlinePolicy) -> Step {
        let views = self.views();
        let obs = TickView {
            tick: self.tick,
            zones: &views,
            on_demand_price: self.on_demand_price,
            tick_hours: self.tick_hours,
            egress_cost: self.egress_cost,
        };
        deadline::step(policy, &self.job, &self.state, &obs)
    }
}

impl Controller {
    fn tick_seconds(&self) -> i64 {
        self.config.policy_tick.as_secs().max(1) as i64
    }

    /// Policy ticks per tick of the job's own grid (see [`MAX_JOB_TICKS`]).
    fn job_ticks(&self, r: &crate::store::JobRecord) -> i64 {
        let window = r
            .deadline_at
            .map_or(0, |d| (d - r.submitted_at).num_seconds());
        let up = |a: i64, b: i64| (a + b - 1) / b;
        up(up(window.max(0), self.tick_seconds()), MAX_JOB_TICKS).max(1)
    }

    /// The absolute policy tick of `at`.
    pub(super) fn policy_tick(&self, at: DateTime<Utc>) -> i64 {
        at.timestamp().div_euclid(self.tick_seconds())
    }

    /// Record this pass's spot availability and persist the new ticks.
    pub(super) fn observe_pools(&mut self, offers: &[Offer], now: DateTime<Utc>) -> Result<()> {
        let tick = self.policy_tick(now);
        // Counted under borrowed names, made into keys once per pool: this runs over every
        // instance on every pass.
        let mut by_pool: HashMap<(&str, &str), u32, foldhash::fast::RandomState> =
            HashMap::default();
        // A draining node (moving away, or noticed) still takes its room until it ends.
        for (o, n) in self.fleet.instances.live_spot() {
            let pool = (o.instance_type.name.as_str(), o.zone.as_str());
            *by_pool.entry(pool).or_default() += n;
        }
        let held: HashMap<String, u32> = by_pool
            .into_iter()
            .map(|((ty, zone), n)| (pool_key(ty, zone), n))
            .collect();
        let fresh = self.pools.observe(offers, &held, tick);
        if !fresh.is_empty() {
            self.store.record_pool_samples(&fresh)?;
        }
        Ok(())
    }

    /// The job on the tick grid at `nodes` nodes of `offer`'s shape, its work at the
    /// pessimistic forecast; `None` without a deadline or a forecast.
    fn policy_job(&self, name: &str, offer: &Offer, nodes: u32) -> Option<Job> {
        let r = &self.fleet.jobs.get(name)?.record;
        let deadline = r.deadline_at?;
        // The pessimistic forecast: the guard then keeps the planner's worst case feasible
        // (the replay knows the speed exactly; a live job does not).
        let (full, pessimistic) = self.throughput(name, offer, nodes)?;
        let work_h = tern_policies::fleet::work_hours(r.total_samples, pessimistic);
        let window_h = hours(deadline - r.submitted_at).max(0.0);
        let gap = u32::try_from(self.tick_seconds() * self.job_ticks(r)).unwrap_or(u32::MAX);
        let job = Job::from_hours(work_h, window_h, self.restart_hours(name), gap, nodes);
        let per_node = offer.accelerator_units().max(1);
        let min_nodes = r.spec.workers.min.div_ceil(per_node).clamp(1, nodes.max(1));
        if r.spec.gang || min_nodes >= nodes {
            return Some(job);
        }
        let fractions: Vec<f64> = (0..=nodes)
            .map(|n| {
                if n == 0 {
                    return 0.0;
                }
                self.throughput(name, offer, n).map_or(0.0, |t| t.0 / full)
            })
            .collect();
        job.elastic(min_nodes, Some(&fractions)).ok()
    }

    /// What the job is doing now, in the policy's terms.
    fn policy_state(
        &self,
        name: &str,
        job: &Job,
        zones: &[Zone],
        now: DateTime<Utc>,
    ) -> JobProgress {
        let Some(r) = self.fleet.jobs.get(name).map(|e| &e.record) else {
            return JobProgress::new();
        };
        let sub = self.policy_tick(r.submitted_at);
        let k = self.job_ticks(r);
        let rel = |at: DateTime<Utc>| {
            ((self.policy_tick(at) - sub) / k).clamp(0, i64::from(u32::MAX)) as u32
        };
        let live = self.live_of(name);
        let placement = if live.iter().any(|i| i.offer.capacity == Capacity::OnDemand) {
            Placement::OnDemand
        } else {
            // An elastic job may span zones; the policy's model has one: where most run.
            let mut count = vec![0u32; zones.len()];
            for i in &live {
                if let Some(z) = zones.iter().position(|z| *z == i.offer.zone) {
                    count[z] += 1;
                }
            }
            (0..zones.len())
                .filter(|&z| count[z] > 0)
                .max_by_key(|&z| (count[z], std::cmp::Reverse(z)))
                .map_or(Placement::Idle, Placement::Spot)
        };
        let running = live
            .iter()
            .filter(|i| i.state == InstanceState::Running)
            .count() as u32;
        let started_at = live.iter().map(|i| rel(i.launched_at)).min().unwrap_or(0);
        let t = rel(now);
        let booting = if placement != Placement::Idle && running == 0 {
            job.restart
                .saturating_sub(t.saturating_sub(started_at))
                .max(1)
        } else {
            0
        };
        let fraction = if r.total_samples > 0.0 {
            (r.checkpoint_samples / r.total_samples).clamp(0.0, 1.0)
        } else {
            1.0
        };
        JobProgress {
            done: (fraction * f64::from(job.total())).floor() as u32,
            placement,
            booting,
            started_at,
            checkpoint_region: None,
            last_move: r.last_move_at.map(rel),
            working: if matches!(placement, Placement::Spot(_)) {
                running
            } else {
                0
            },
        }
    }

    /// The policy's inputs for the job at `nodes` nodes of `offer`'s instance type, histories
    /// read afresh from the logs (the tests compare these with the replay's).
    #[cfg(test)]
    pub(super) fn policy_input(
        &self,
        name: &str,
        offer: &Offer,
        nodes: u32,
        now: DateTime<Utc>,
    ) -> Option<PolicyInput> {
        let (mut input, frame) = self.policy_frame(name, offer, nodes, now)?;
        input.histories = frame
            .logs
            .iter()
            .map(|p| coarse(&p.history(frame.from, frame.to), frame.k))
            .collect();
        Some(input)
    }

    /// Everything the policy reads about the job but the histories, and where those come from.
    fn policy_frame(
        &self,
        name: &str,
        offer: &Offer,
        nodes: u32,
        now: DateTime<Utc>,
    ) -> Option<(PolicyInput, Frame<'_>)> {
        let job = self.policy_job(name, offer, nodes)?;
        let r = &self.fleet.jobs.get(name)?.record;
        let pools = self.allowed_pools(&r.spec.constraints, offer);
        if pools.is_empty() {
            return None;
        }
        let sub = self.policy_tick(r.submitted_at);
        let k = self.job_ticks(r);
        let to = self.policy_tick(now).max(sub);
        // Learn from at most the lookback, and nothing from before the first sample; whole
        // job ticks back from the submission.
        let first = pools.iter().map(|p| p.first).min().unwrap_or(sub);
        let back = (sub - (sub - LOOKBACK_TICKS).max(first)).max(0);
        let from = sub - (back + k - 1) / k * k;
        let regions = region_indices(pools.iter().map(|p| p.region.as_str()));
        let zones: Vec<Zone> = pools.iter().map(|p| p.zone.clone()).collect();
        let on_demand_price = self
            .cloud
            .on_demand
            .get(offer.instance_type.name.as_str())
            .and_then(|zones| zones.values().copied().min_by(f64::total_cmp))
            .or_else(|| self.on_demand_price(offer))
            .unwrap_or(offer.price_per_hour);
        let mut state = self.policy_state(name, &job, &zones, now);
        state.checkpoint_region = self.checkpoint_home(name).and_then(|home| {
            let z = pools.iter().position(|p| p.region == home.as_str())?;
            Some(regions_at(&regions, z))
        });
        let input = PolicyInput {
            tick: ((to - sub) / k) as u32,
            histories: Vec::new(),
            prices: pools.iter().map(|p| p.spot_price).collect(),
            regions,
            zones,
            job,
            state,
            on_demand_price,
            tick_hours: (self.tick_seconds() * k) as f64 / 3600.0,
            egress_cost: r.spec.checkpoint.size_gb * self.config.plan.egress_per_gb,
        };
        Some((
            input,
            Frame {
                logs: pools,
                from,
                to,
                k,
            },
        ))
    }

    /// The spot pools of `offer`'s shape that a job's placement constraints allow.
    fn allowed_pools(&self, allowed: &tern_cloud::Constraints, offer: &Offer) -> Vec<&PoolLog> {
        self.pools
            .of_type(&offer.instance_type.name)
            .into_iter()
            .filter(|p| {
                allowed.allows_pool(&tern_cloud::Pool {
                    cloud: offer.cloud,
                    region: &p.region,
                    zone: p.zone.as_str(),
                    shape: &offer.instance_type,
                    capacity: Capacity::Spot,
                    price: p.spot_price,
                })
            })
            .collect()
    }

    /// Ask the deadline policy about the job at `nodes` nodes of `offer`'s shape. `None` when
    /// it has no deadline or no forecast: such a job never pays on-demand and keeps the rules
    /// of [`tern_policies::fleet`].
    pub(super) fn ask_policy(
        &mut self,
        name: &str,
        offer: &Offer,
        nodes: u32,
        now: DateTime<Utc>,
    ) -> Option<PolicyCall> {
        let (mut input, policy) = self.class_policy(name, offer, nodes, now)?;
        // Lent to the input for the call, then given back: no copy of a week of ticks.
        input.histories = std::mem::take(&mut policy.histories);
        let step = input.step(&mut policy.tern);
        policy.histories = std::mem::take(&mut input.histories);
        Some(PolicyCall {
            step,
            zones: input.zones,
            now: input.state.placement,
        })
    }

    /// The job's inputs (histories aside) and its class's policy object, histories brought up
    /// to `now`.
    fn class_policy(
        &mut self,
        name: &str,
        offer: &Offer,
        nodes: u32,
        now: DateTime<Utc>,
    ) -> Option<(PolicyInput, &mut ClassPolicy)> {
        let (input, frame) = self.policy_frame(name, offer, nodes, now)?;
        let class = PolicyClass {
            shape: offer.instance_type.name.clone(),
            nodes,
            job: input.job.clone(),
            pools: frame
                .logs
                .iter()
                .map(|p| pool_key(&p.instance_type, p.zone.as_str()))
                .collect(),
            from: frame.from,
            k: frame.k,
        };
        let to = frame.to;
        drop(frame);
        // The same logs, borrowed from the field alone so the cache can be borrowed beside.
        let logs: Vec<&PoolLog> = class
            .pools
            .iter()
            .filter_map(|key| self.pools.logs.get(key))
            .collect();
        Some((input, self.policies.get(class, &logs, to)))
    }

    /// The histories the policy object of the job's class holds now (tests compare them with
    /// the ones read afresh from the logs).
    #[cfg(test)]
    pub(super) fn class_histories(
        &mut self,
        name: &str,
        offer: &Offer,
        nodes: u32,
        now: DateTime<Utc>,
    ) -> Option<Vec<Vec<u32>>> {
        let (_, policy) = self.class_policy(name, offer, nodes, now)?;
        Some(policy.histories.clone())
    }

    /// How many policy objects are kept (tests).
    #[cfg(test)]
    pub(super) fn policy_objects(&self) -> usize {
        self.policies.classes.len()
    }

    /// A new pass: forget the policy objects nobody asked about for a while.
    pub(super) fn drop_policies(&mut self) {
        self.policies.next_pass();
    }
}

/// Where a job's histories come from: the pools it may use, ticks `from..=to`, `k` per tick.
struct Frame<'a> {
    logs: Vec<&'a PoolLog>,
    from: i64,
    to: i64,
    k: i64,
}

/// A history in ticks of `k` samples each: the least of each (the last may be partial).
/// Each pool's region as an index, zones of one region sharing one (moving a checkpoint
/// between them is free), in the order the pools come.
fn region_indices<'a>(regions: impl Iterator<Item = &'a str>) -> Vec<usize> {
    let mut names: Vec<&str> = Vec::new();
    regions
        .map(|r| match names.iter().position(|n| *n == r) {
            Some(i) => i,
            None => {
                names.push(r);
                names.len() - 1
            }
        })
        .collect()
}

fn coarse(fine: &[u32], k: i64) -> Vec<u32> {
    if k <= 1 {
        return fine.to_vec();
    }
    fine.chunks(k as usize)
        .map(|c| c.iter().copied().min().unwrap_or(0))
        .collect()
}

fn regions_at(regions: &[usize], z: usize) -> usize {
    regions.get(z).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_new_ticks_or_new_views_are_written() {
        let trace = |zone: &str| tern_sim::Trace {
            source: std::path::PathBuf::from("t.json"),
            cloud: tern_cloud::Cloud::Aws,
            region: "us-west-2".into(),
            zone: zone.into(),
            gap_seconds: 300,
            available: vec![3; 10],
            prices: None,
            spot_price: Some(0.9),
            on_demand_price: Some(3.06),
        };
        let sim = crate::controller::testkit::sim(vec![trace("a"), trace("b")]);
        let offers =
            tern_cloud::Provider::offers(sim.as_ref(), &tern_cloud::Region::new("us-west-2"))
                .await
                .expect("offers");
        let mut pools = Pools::default();
        let none = HashMap::new();
        assert_eq!(
            pools.observe(&offers, &none, 7).len(),
            2,
            "a new tick of both pools"
        );
        assert!(
            pools.observe(&offers, &none, 7).is_empty(),
            "the same view again"
        );
        let held = HashMap::from([("p3.2xlarge@a".to_string(), 1)]);
        let changed = pools.observe(&offers, &held, 7);
        assert_eq!(changed.len(), 1, "pool a now counts what we hold");
        assert_eq!(changed[0].available, 4);
        assert!(
            pools.observe(&offers, &none, 6).is_empty(),
            "the past is kept"
        );
        assert_eq!(pools.observe(&offers, &none, 8).len(), 2);
    }

    #[test]
    fn a_pool_log_carries_gaps_forward_and_keeps_the_past() {
        let mut log = PoolLog {
            instance_type: "p3.2xlarge".into(),
            zone: Zone::new("a"),
            region: "r".into(),
            spot_price: 1.0,
            first: 0,
            samples: Vec::new(),
        };
        assert!(log.record(10, 3));
        assert!(log.record(13, 0));
        assert!(!log.record(12, 9), "a past tick is not rewritten");
        assert!(!log.record(13, 1), "the current tick takes the latest view");
        assert_eq!(log.history(8, 14), vec![3, 3, 3, 3, 3, 1, 1]);
    }
}
