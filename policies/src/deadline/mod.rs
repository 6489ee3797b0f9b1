//! Deadline policies: each tick, a job with `C` hours of work due in `D` hours picks spot (in one
//! of several zones), on-demand, or waiting (DESIGN.md §4.4).
//!
//! Time is the trace tick. Work, deadline and restart overhead are whole ticks ([`Job`]). Starting
//! any instance (first start, spot↔on-demand, a zone move, a restart after preemption) costs
//! `restart` ticks of billed time without progress. A spot instance whose zone loses capacity is
//! gone at that tick; its progress is kept (checkpointed), the restart overhead is the loss.
//!
//! **Multi-node jobs.** A job wants `K` = [`Job::nodes`] instances. A *gang* (`min_nodes = K`)
//! can use spot only while a zone has `K` available. An *elastic* job (`min_nodes = M < K`)
//! runs on spot whenever a zone has at least `M`, holding `min(available, K)` nodes; on-demand
//! always gives it all `K`. Its model:
//! - **Cost**: every node held is billed for every tick it is held (booting, re-rendezvous and
//!   working ticks alike), at the zone's spot price; on-demand bills `K` nodes.
//! - **Progress** is counted in units of `1/unit` of a full-speed (K-node) tick: with `n` working
//!   nodes a tick gives `speed[n]` units ([`Job::speed`], a table computed outside the
//!   policies: linear `n/K`, or the forecaster's throughput(n)/throughput(K), quantised *down*
//!   to the grid). Below `M` nodes the job cannot run at all.
//! - **Starting** the job (from nothing, a spot↔on-demand switch, a zone move) costs the full
//!   `restart` overhead, as for a gang: new instances are provisioned and restore the checkpoint.
//! - **Joining nodes** boot too: a node acquired while the job runs is billed at once but works
//!   only after `restart` ticks. When capacity shrinks the youngest nodes go first (they have the
//!   least sunk boot). So the working count at tick `t` is the least held count over
//!   `[t − restart, t]` ([`Job::working`]).
//! - **Resizing** (the working count changes while running) costs one tick without progress: the
//!   survivors re-rendezvous (torchrun elastic restarts the worker processes with the new world
//!   size and reload the checkpoint taken on the interruption notice), which needs no new VM, so
//!   it is far shorter than a cold start; one tick (195–300 s in the AWS traces) rounds it up, in
//!   keeping with the rule that the tick model never flatters a policy. The job's first working
//!   tick after a start is not a resize (the start's own rendezvous is part of `restart`).
//!
//! A gang is the special case `unit = 1`, `speed[K] = 1`: every rule above reduces to the gang
//! rules, and a gang's figures are exactly those of the gang-only model.
//!
//! Online policies implement [`DeadlinePolicy`]: a deterministic function of (job, state, tick,
//! observations of the past and present). [`safe`] wraps every decision so that no policy can
//! miss a deadline that was feasible at the start. [`optimal`] is the omniscient yardstick.
//!
//! This module holds what every policy shares: the job and tick model ([`Job`], [`JobProgress`]),
//! what a policy observes ([`TickView`]), the [`DeadlinePolicy`] trait and the [`safe`]
//! filter. The policies live in submodules by kind (the baselines, the omniscient optimum,
//! tern's own) and are re-exported here, so every path is `deadline::X`.

use std::sync::Arc;

use crate::forecast::{ForecastError, Forecaster, Shape};

mod baseline;
mod optimal;
mod tern;
#[cfg(test)]
mod tests;

pub use baseline::{Greedy, OnDemandOnly, UniformProgress};
pub use optimal::{Optimum, Outcome, ZoneFuture, optimal, optimal_priced};
pub use tern::Tern;

/// Costs in the policies are dollars; `INF` marks states from which the deadline cannot be met.
const INF: f64 = f64::INFINITY;

/// Grid of a non-linear speed table: progress is counted in `1/max(4K, 32)` of a full-speed tick,
/// so quantising a tick's progress down loses less than 1/32 of a full-speed tick (≤ 3 %).
/// Finer grids make `optimal`'s table (deadline × slack·unit) proportionally larger.
pub const SPEED_GRID_MIN: u32 = 32;
/// Grid units per node of a non-linear speed table (see [`SPEED_GRID_MIN`]).
pub const SPEED_GRID_PER_NODE: u32 = 4;

/// A job on the tick grid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Job {
    /// Ticks of full-speed work.
    pub work: u32,
    /// Ticks from the start until the deadline.
    pub deadline: u32,
    /// Ticks of overhead to bring up a new instance (at least 1).
    pub restart: u32,
    /// Instances the job wants (`K`); on-demand always gives it this many.
    pub nodes: u32,
    /// Fewest instances it can run on (`M`, 1 ≤ M ≤ K). `M = K` is a gang: spot is usable only
    /// when `K` are available.
    pub min_nodes: u32,
    /// Progress units per full-speed tick. [`JobProgress::done`] counts these units.
    pub unit: u32,
    /// Progress units per tick with `n` working nodes, `n = 0..=nodes`: 0 below `min_nodes`,
    /// `unit` at `nodes`.
    pub speed: Arc<[u32]>,
}

impl Job {
    /// A gang of `nodes` instances on the tick grid (see [`Job::from_hours`]).
    pub fn gang(work: u32, deadline: u32, restart: u32, nodes: u32) -> Job {
        let nodes = nodes.max(1);
        let mut speed = vec![0; nodes as usize + 1];
        speed[nodes as usize] = 1;
        Job {
            work,
            deadline,
            restart,
            nodes,
            min_nodes: nodes,
            unit: 1,
            speed: speed.into(),
        }
    }

    /// Round work and overhead up, the deadline down, so the tick model never flatters a policy.
    /// The result is a gang; [`Job::elastic`] relaxes it.
    pub fn from_hours(work: f64, deadline: f64, restart: f64, gap_seconds: u32, nodes: u32) -> Job {
        let g = f64::from(gap_seconds.max(1)) / 3600.0;
        let up = |h: f64| ((h / g) - 1e-9).ceil().max(0.0) as u32;
        Job::gang(
            up(work).max(1),
            ((deadline / g) + 1e-9).floor().max(0.0) as u32,
            up(restart).max(1),
            nodes,
        )
    }

    /// This job made elastic: it runs on `min_nodes..=nodes` instances. `fractions[n]` is the
    /// throughput with `n` nodes relative to `nodes` (`n = 0..=nodes`; entries below
    /// `min_nodes` are ignored, values above 1 are capped at 1); `None` means linear, `n/K`.
    ///
    /// A linear table is exact on a grid of `K` units per tick. Any other table is quantised
    /// *down* to `1/max(4K, 32)` of a tick, so the simulated job never runs faster than the
    /// curve says; the replay, the online policies and [`optimal`] all use the quantised table,
    /// which keeps the optimum exact for the job that is replayed. `min_nodes = nodes` is the
    /// gang itself, whatever the table.
    pub fn elastic(self, min_nodes: u32, fractions: Option<&[f64]>) -> Result<Job, String> {
        let k = self.nodes;
        check_elastic(k, min_nodes, fractions)?;
        if min_nodes == k {
            return Ok(Job::gang(self.work, self.deadline, self.restart, k));
        }
        let (unit, speed) = speed_table(k, min_nodes, fractions);
        let fits = |ticks: u32| ticks.checked_mul(unit).is_some_and(|u| u < u32::MAX / 2);
        if !fits(self.work) || !fits(self.deadline) {
            return Err("job too long for the progress grid".into());
        }
        Ok(Job {
            min_nodes,
            unit,
            speed: speed.into(),
            ..self
        })
    }

    /// Whether on-demand alone (one start, then uninterrupted work) meets the deadline.
    pub fn feasible(&self) -> bool {
        self.deadline >= self.work + self.restart
    }

    /// Initial slack in ticks: time that may be spent on anything but progress.
    pub fn slack(&self) -> u32 {
        self.deadline.saturating_sub(self.work)
    }

    pub fn is_elastic(&self) -> bool {
        self.min_nodes < self.nodes
    }

    /// All the work, in progress units.
    pub fn total(&self) -> u32 {
        self.work * self.unit
    }

    /// Full-speed ticks still needed after `done` units (rounded up).
    pub fn ticks_left(&self, done: u32) -> u32 {
        self.total().saturating_sub(done).div_ceil(self.unit)
    }

    /// Spot instances the job holds in a zone with `available` of them: `min(available, K)`,
    /// or none below `min_nodes`.
    pub fn held(&self, available: u32) -> u32 {
        if available >= self.min_nodes {
            available.min(self.nodes)
        } else {
            0
        }
    }

    /// Nodes working at the last tick of `history` (a zone's availability) for a spot run that
    /// started at least `restart` ticks before it: the least held count over the last
    /// `restart + 1` ticks (joining nodes boot for `restart` ticks; the youngest go first).
    pub fn working(&self, history: &[u32]) -> u32 {
        let from = history.len().saturating_sub(self.restart as usize + 1);
        history[from..]
            .iter()
            .map(|&a| self.held(a))
            .min()
            .unwrap_or(0)
    }

    /// Progress units of one working spot tick with `working` nodes, when `before` worked at
    /// the previous tick of the same run (0: this is the run's first working tick). A change of
    /// the working count is a re-rendezvous: no progress this tick.
    pub fn spot_gain(&self, working: u32, before: u32) -> u32 {
        if before != 0 && before != working {
            0
        } else {
            self.speed.get(working as usize).copied().unwrap_or(0)
        }
    }

    /// One tick of a run on `act` (not idle): a booting run boots on; spot gains by the nodes
    /// working in its zone (`zones[z]`'s history up to this tick); on-demand a full unit.
    pub fn advance(&self, s: &mut JobProgress, act: Placement, zones: &[ZoneView<'_>]) {
        if s.booting > 0 {
            s.booting -= 1;
        } else if let Placement::Spot(z) = act {
            let working = self.working(zones[z].history);
            s.done += self.spot_gain(working, s.working);
            s.working = working;
        } else {
            s.done += self.unit;
        }
    }
}

/// Rejects an elastic shape [`Job::elastic`] cannot model: `min_nodes` outside `1..=k`, or a
/// speed table of the wrong length or with entries that are not numbers ≥ 0 (where used).
fn check_elastic(k: u32, min_nodes: u32, fractions: Option<&[f64]>) -> Result<(), String> {
    if min_nodes == 0 || min_nodes > k {
        return Err(format!(
            "min nodes must be between 1 and the job's {k} node(s), got {min_nodes}"
        ));
    }
    let Some(f) = fractions else { return Ok(()) };
    if f.len() != k as usize + 1 {
        return Err(format!(
            "the speed table needs {} entries (0..={k} nodes), got {}",
            k + 1,
            f.len()
        ));
    }
    if let Some((n, v)) = f
        .iter()
        .enumerate()
        .skip(min_nodes as usize)
        .find(|(_, v)| !(v.is_finite() && **v >= 0.0))
    {
        return Err(format!(
            "relative throughput with {n} node(s) must be a number ≥ 0, got {v}"
        ));
    }
    Ok(())
}

/// The progress grid and speed table of an elastic job with `min_nodes < k`: `(unit,
/// speed[n])`. A linear table is exact on `k` units per tick; any other is quantised down to
/// `1/max(4K, 32)` of a tick, so the job never runs faster than its curve.
fn speed_table(k: u32, min_nodes: u32, fractions: Option<&[f64]>) -> (u32, Vec<u32>) {
    let linear = fractions.is_none_or(|f| {
        f.iter()
            .enumerate()
            .skip(min_nodes as usize)
            .all(|(n, v)| (v * f64::from(k) - n as f64).abs() < 1e-9)
    });
    let unit = if linear {
        k
    } else {
        (SPEED_GRID_PER_NODE * k).max(SPEED_GRID_MIN)
    };
    let speed = (0..=k)
        .map(|n| match fractions {
            _ if n < min_nodes => 0,
            _ if n == k => unit,
            _ if linear => n,
            Some(f) => (f[n as usize].min(1.0) * f64::from(unit)).floor() as u32,
            None => n,
        })
        .collect();
    (unit, speed)
}

/// Relative throughput `throughput(n) / throughput(nodes)` for `n = 0..=nodes` from a fitted
/// forecaster: each node has `gpus_per_node` accelerators at `local_batch` samples each, and
/// throughput is samples per second at that shape. Pure; the caller loads the profile.
///
/// This is samples/s, not goodput: a smaller global batch usually has a higher statistical
/// efficiency per sample, so this undercounts the progress of a shrunken job (conservative).
pub fn relative_throughput(
    forecaster: &Forecaster,
    job: &str,
    accelerator: &str,
    gpus_per_node: u32,
    local_batch: f64,
    nodes: u32,
) -> Result<Vec<f64>, ForecastError> {
    let g = gpus_per_node.max(1);
    let tput = |n: u32| -> Result<f64, ForecastError> {
        let shape = Shape::new(g * n, n, local_batch);
        let p = forecaster.predict(job, accelerator, &shape)?;
        Ok(shape.global_batch() / p.step_s)
    };
    let full = tput(nodes.max(1))?;
    let mut out = vec![0.0];
    for n in 1..=nodes.max(1) {
        let r = tput(n)? / full;
        out.push(if r.is_finite() { r } else { 0.0 });
    }
    Ok(out)
}

/// Where the job runs (or wants to run) this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    Idle,
    /// Spot in the zone with this index in [`TickView::zones`].
    Spot(usize),
    OnDemand,
}

/// The job's progress as the replay engine (or a controller) tracks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobProgress {
    /// Work done, in progress units ([`Job::unit`] per full-speed tick).
    pub done: u32,
    pub placement: Placement,
    /// Ticks of restart overhead the current instance still has to spend before it makes progress.
    pub booting: u32,
    /// Tick (window-relative) at which the current instance was started.
    pub started_at: u32,
    /// Region index where the last checkpoint lives (egress is charged when it changes).
    pub checkpoint_region: Option<usize>,
    /// Tick of the last zone move, for the migration cool-down.
    pub last_move: Option<u32>,
    /// Nodes that worked at the previous tick of the current spot run (0: none yet).
    pub working: u32,
}

impl JobProgress {
    pub fn new() -> JobProgress {
        JobProgress {
            done: 0,
            placement: Placement::Idle,
            booting: 0,
            started_at: 0,
            checkpoint_region: None,
            last_move: None,
            working: 0,
        }
    }
}

impl Default for JobProgress {
    fn default() -> Self {
        JobProgress::new()
    }
}

/// What a policy may see about one zone: its availability up to and including now, and its
/// current spot price. Never the future.
#[derive(Debug, Clone, Copy)]
pub struct ZoneView<'a> {
    /// Available spot instances per tick from the start of the recorded history up to now.
    pub history: &'a [u32],
    /// Spot $/h per instance now.
    pub spot_price: f64,
    /// Region index (zones of one region share an index; moving across regions costs egress).
    pub region: usize,
}

impl ZoneView<'_> {
    pub fn up(&self, nodes: u32) -> bool {
        self.history.last().is_some_and(|&n| n >= nodes)
    }
}

/// Everything a policy observes at one tick.
#[derive(Debug, Clone, Copy)]
pub struct TickView<'a> {
    /// Window-relative tick.
    pub tick: u32,
    pub zones: &'a [ZoneView<'a>],
    /// On-demand $/h per instance.
    pub on_demand_price: f64,
    /// Tick length in hours.
    pub tick_hours: f64,
    /// Dollars to move the checkpoint to another region.
    pub egress_cost: f64,
}

impl TickView<'_> {
    pub fn any_up(&self, nodes: u32) -> bool {
        self.zones.iter().any(|z| z.up(nodes))
    }

    /// The current spot zone if it is still up, else the cheapest available one.
    fn cheapest_up(&self, nodes: u32, current: Placement) -> Option<usize> {
        if let Placement::Spot(z) = current
            && self.zones.get(z).is_some_and(|v| v.up(nodes))
        {
            return Some(z);
        }
        self.zones
            .iter()
            .enumerate()
            .filter(|(_, v)| v.up(nodes))
            .min_by(|a, b| a.1.spot_price.total_cmp(&b.1.spot_price))
            .map(|(i, _)| i)
    }
}

/// Why a policy chose what it chose, as its events show it: the expected dollars to finish from
/// here for each action (∞ where the action could miss the deadline, or for `keep`, where
/// there is nothing running to keep), and the move rule's
/// verdict when a running spot job looked at another zone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Why {
    pub keep: f64,
    pub spot: f64,
    pub on_demand: f64,
    pub wait: f64,
    /// Egress to bring the checkpoint to the spot start's zone (0 within its region): the
    /// zone was ranked with it; `spot`, and so the choice against on-demand and waiting,
    /// leaves it out.
    pub egress: f64,
    pub moved: Option<crate::migrate::Decision>,
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = |v: f64| {
            if v.is_finite() {
                format!("${v:.2}")
            } else {
                "could miss".to_string()
            }
        };
        f.write_str("expected cost to finish: ")?;
        if self.keep.is_finite() {
            write!(f, "keep {}, ", d(self.keep))?;
        }
        write!(
            f,
            "spot {}, on-demand {}, wait {}",
            d(self.spot),
            d(self.on_demand),
            d(self.wait)
        )?;
        if self.egress >= 0.005 && self.spot.is_finite() {
            write!(
                f,
                "; spot's zone needs the checkpoint moved: ${:.2} egress",
                self.egress
            )?;
        }
        match self.moved {
            Some(crate::migrate::Decision::Move { net_saving }) => {
                write!(f, "; a move saves ${net_saving:.2}")
            }
            Some(crate::migrate::Decision::NotWorth {
                net_saving,
                threshold,
            }) => write!(
                f,
                "; a move would save ${net_saving:.2}, under the ${threshold:.2} threshold"
            ),
            Some(crate::migrate::Decision::DeadlineAtRisk) => {
                write!(f, "; a move would put the deadline at risk")
            }
            Some(crate::migrate::Decision::CoolingDown) => {
                write!(f, "; moved too recently to move again")
            }
            None => Ok(()),
        }
    }
}

/// One decision as both the replay and the controller take it: what the policy wanted, what
/// the deadline guard ([`safe`]) let it do, and the policy's reasons.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub placement: Placement,
    pub wanted: Placement,
    pub why: Option<Why>,
}

impl Step {
    /// The deadline guard overrode the policy's wish.
    pub fn guarded(&self) -> bool {
        self.placement != self.wanted
    }
}

/// The one way an online policy is asked: [`DeadlinePolicy::decide`], then [`safe`]. The
/// replay of `tern simulate` and the controller both call this, so a figure of the replay
/// describes what the controller does on the same state.
pub fn step(
    policy: &mut dyn DeadlinePolicy,
    job: &Job,
    state: &JobProgress,
    obs: &TickView<'_>,
) -> Step {
    let wanted = policy.decide(job, state, obs);
    Step {
        placement: safe(job, state, obs, wanted),
        wanted,
        why: policy.why(),
    }
}

/// A deadline policy. `decide` must be deterministic in its inputs; `&mut self` only lets a
/// policy keep caches (running estimates, value tables) between ticks of one window.
pub trait DeadlinePolicy {
    fn name(&self) -> &'static str;
    fn decide(&mut self, job: &Job, state: &JobProgress, obs: &TickView<'_>) -> Placement;

    /// Why the last [`DeadlinePolicy::decide`] chose what it did, when the policy can say.
    fn why(&self) -> Option<Why> {
        None
    }

    /// Forget everything learned about a window before replaying another one. Caches that are
    /// pure functions of their key (tern's value tables) may survive.
    fn reset(&mut self) {}
}

/// Whether `want` keeps the job able to finish on on-demand from the next tick on, whatever
/// spot does. If not, the job must go (or stay) on on-demand now. Applied to every online
/// policy; the invariant it keeps is: off on-demand, remaining time ≥ remaining work + restart.
///
/// Work is in progress units; a spot tick is credited with exactly what the replay will give it
/// (the working count and re-rendezvous rule of [`Job`]), so for a gang this is the tick rule.
pub fn safe(job: &Job, state: &JobProgress, obs: &TickView<'_>, want: Placement) -> Placement {
    let remaining = i64::from(job.deadline) - i64::from(obs.tick);
    let work_left = i64::from(job.total()) - i64::from(state.done);
    let spot_ok = |z: usize| obs.zones.get(z).is_some_and(|v| v.up(job.min_nodes));
    let after_work = match want {
        Placement::OnDemand => return Placement::OnDemand,
        Placement::Spot(z) if !spot_ok(z) => return safe(job, state, obs, Placement::Idle),
        Placement::Spot(z) if state.placement == Placement::Spot(z) && state.booting == 0 => {
            let working = job.working(obs.zones[z].history);
            work_left - i64::from(job.spot_gain(working, state.working))
        }
        _ => work_left,
    };
    let after_ticks = (after_work.max(0) as u64).div_ceil(u64::from(job.unit)) as i64;
    if remaining > after_ticks + i64::from(job.restart) {
        want
    } else {
        Placement::OnDemand
    }
}
