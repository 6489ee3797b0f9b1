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

use std::sync::Arc;

use crate::forecast::{ForecastError, Forecaster, Shape};
use crate::migrate::{self, MoveCandidate, MoveRule};

/// Costs in the policies are dollars; `INF` marks states from which the deadline cannot be met.
const INF: f64 = f64::INFINITY;

/// Grid of a non-linear speed table: progress is counted in `1/max(4K, 32)` of a full-speed tick,
/// so quantising a tick's progress down loses less than 1/32 of a full-speed tick (≤ 3 %).
/// Finer grids make `optimal`'s table (deadline × slack·unit) proportionally larger.
pub const SPEED_GRID_MIN: u32 = 32;
/// Grid units per node of a non-linear speed table (see [`SPEED_GRID_MIN`]).
pub const SPEED_GRID_PER_NODE: u32 = 4;

/// A job on the tick grid.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Progress units per full-speed tick. [`JobState::done`] counts these units.
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
        if min_nodes == 0 || min_nodes > k {
            return Err(format!(
                "min nodes must be between 1 and the job's {k} node(s), got {min_nodes}"
            ));
        }
        if let Some(f) = fractions {
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
        }
        if min_nodes == k {
            return Ok(Job::gang(self.work, self.deadline, self.restart, k));
        }
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
        let speed: Vec<u32> = (0..=k)
            .map(|n| match fractions {
                _ if n < min_nodes => 0,
                _ if n == k => unit,
                _ if linear => n,
                Some(f) => (f[n as usize].min(1.0) * f64::from(unit)).floor() as u32,
                None => n,
            })
            .collect();
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
    /// Spot in the zone with this index in [`Observation::zones`].
    Spot(usize),
    OnDemand,
}

/// The job's progress as the replay engine (or a controller) tracks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobState {
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

impl JobState {
    pub fn new() -> JobState {
        JobState {
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

impl Default for JobState {
    fn default() -> Self {
        JobState::new()
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
pub struct Observation<'a> {
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

impl Observation<'_> {
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

/// A deadline policy. `decide` must be deterministic in its inputs; `&mut self` only lets a
/// policy keep caches (running estimates, value tables) between ticks of one window.
pub trait DeadlinePolicy {
    fn name(&self) -> &'static str;
    fn decide(&mut self, job: &Job, state: &JobState, obs: &Observation<'_>) -> Placement;

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
pub fn safe(job: &Job, state: &JobState, obs: &Observation<'_>, want: Placement) -> Placement {
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

/// On-demand only: the reference every cost ratio divides by (up to the restart overhead).
#[derive(Debug, Default)]
pub struct OnDemandOnly;

impl DeadlinePolicy for OnDemandOnly {
    fn name(&self) -> &'static str {
        "od"
    }
    fn decide(&mut self, _: &Job, _: &JobState, _: &Observation<'_>) -> Placement {
        Placement::OnDemand
    }
}

/// Spot whenever any zone has it, wait otherwise; once the safety rule forces on-demand, stay.
#[derive(Debug, Default)]
pub struct Greedy;

impl DeadlinePolicy for Greedy {
    fn name(&self) -> &'static str {
        "greedy"
    }
    fn decide(&mut self, job: &Job, state: &JobState, obs: &Observation<'_>) -> Placement {
        if state.placement == Placement::OnDemand {
            return Placement::OnDemand;
        }
        obs.cheapest_up(job.min_nodes, state.placement)
            .map_or(Placement::Idle, Placement::Spot)
    }
}

/// Uniform Progress (DESIGN.md §4.4): spot while available; behind the straight line
/// `t·C/D`, on-demand when spot is not; leave on-demand only when 2 restarts ahead of the line.
#[derive(Debug, Default)]
pub struct UniformProgress;

impl DeadlinePolicy for UniformProgress {
    fn name(&self) -> &'static str {
        "up"
    }
    fn decide(&mut self, job: &Job, state: &JobState, obs: &Observation<'_>) -> Placement {
        let t = u64::from(obs.tick);
        let remaining = u64::from(job.deadline.saturating_sub(obs.tick));
        let work_left = u64::from(job.ticks_left(state.done));
        let r = u64::from(job.restart);
        // Progress expected on the line, in units, scaled to avoid rounding: done·D vs t·C.
        let unit = u64::from(job.unit);
        let done_scaled = u64::from(state.done) * u64::from(job.deadline);
        let line_scaled = t * u64::from(job.work) * unit;
        let behind = done_scaled < line_scaled;
        let ahead_2d = done_scaled >= line_scaled + 2 * r * u64::from(job.deadline) * unit;
        let spot = obs.cheapest_up(job.min_nodes, state.placement);
        let running_spot = matches!(state.placement, Placement::Spot(z) if Some(z) == spot);
        if work_left + 2 * r >= remaining {
            // Safety net: keep a running spot VM until it is preempted, else on-demand.
            return match (running_spot, spot) {
                (true, Some(z)) => Placement::Spot(z),
                _ => Placement::OnDemand,
            };
        }
        if state.placement == Placement::OnDemand {
            return match spot {
                Some(z) if ahead_2d => Placement::Spot(z),
                _ => Placement::OnDemand,
            };
        }
        match spot {
            Some(z) => Placement::Spot(z),
            None if behind => Placement::OnDemand,
            None => Placement::Idle,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The omniscient optimum.

/// One zone as the omniscient optimum sees it: the whole window in advance.
#[derive(Debug, Clone, Copy)]
pub struct ZoneFuture<'a> {
    /// Available instances per tick of the window (at least `job.deadline` entries).
    pub available: &'a [u32],
    /// Spot $/h per instance per tick of the window (same length as `available`).
    pub spot_price: &'a [f64],
    pub region: usize,
}

/// The cheapest way through a window, and how it was spent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    pub cost: f64,
    /// Instance-ticks billed on spot (instances held × ticks).
    pub spot_ticks: u32,
    /// Instance-ticks billed on on-demand.
    pub on_demand_ticks: u32,
    /// Instance starts after the first one.
    pub restarts: u32,
    /// Starts in a spot zone other than the previous spot zone.
    pub moves: u32,
    pub finished: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    /// No instance; the checkpoint is in this region.
    None(usize),
    /// On-demand running (booted) in this region.
    Od(usize),
    /// Spot running (booted) in this zone.
    Spot(usize),
    /// Elastic jobs only: spot in this zone just booted; its next tick is the run's first
    /// working tick, which is never a re-rendezvous.
    Fresh(usize),
}

#[derive(Debug, Clone, Copy)]
enum Edge {
    Idle,
    Boot { spot: Option<usize> },
    Run { spot: bool },
    Stop,
}

/// Omniscient dynamic programme over (tick, slack, placement). Slack σ = remaining ticks ×
/// [`Job::unit`] − remaining work units, which never grows (a tick gives at most `unit`), so the
/// table is `deadline × (initial slack·unit + 1)` per placement, not `deadline × work`. Booting
/// is folded into one edge (start at `t`, running at `t + restart`): an omniscient policy never
/// starts an instance that dies while booting, since waiting instead reaches the same state for
/// free.
///
/// Elastic jobs stay exact: progress is an integer number of units per tick (the speed table is
/// quantised when the [`Job`] is built, and the replay uses the same table), and what a spot
/// tick in zone `z` at tick `t` gives depends only on `(z, t)` and on whether it is the run's
/// first working tick: the working count is the least held count over `[t − restart, t]`, all
/// of it inside the run. So that tick gets its own placement (`Node::Fresh`).
///
/// The optimum may stop and start again in the same tick (a restart in place, paying `restart`
/// again). Online policies never ask for that; for a gang it never pays, for an elastic job it
/// can beat a run of re-rendezvous. It only widens the yardstick's choices, so `optimal` stays a
/// lower bound on every online policy (property tests).
#[derive(Debug)]
pub struct Optimum<'a> {
    job: Job,
    zones: &'a [ZoneFuture<'a>],
    od_tick: f64,
    egress: f64,
    regions: usize,
    width: usize,
    /// Consecutive usable spot ticks (at least `min_nodes` available) from each tick, per zone.
    run: Vec<Vec<u32>>,
    /// Prefix sums of spot $ per tick (held nodes × price), per zone.
    cum: Vec<Vec<f64>>,
    /// Prefix sums of spot instances held per tick, per zone (instance-ticks billed).
    held: Vec<Vec<u64>>,
    /// Progress units of a working spot tick: `[first working tick of a run, later tick]`.
    gain: Vec<Vec<[u32; 2]>>,
    table: Vec<f64>,
}

impl<'a> Optimum<'a> {
    pub fn new(
        job: &Job,
        zones: &'a [ZoneFuture<'a>],
        on_demand_price: f64,
        tick_hours: f64,
        egress_cost: f64,
    ) -> Optimum<'a> {
        let job = job.clone();
        let t_len = job.deadline as usize;
        let k = f64::from(job.nodes);
        let up =
            |z: &ZoneFuture<'_>, t: usize| z.available.get(t).is_some_and(|&n| n >= job.min_nodes);
        // Instances billed at a usable tick; a gang always holds K (its figures stay exactly
        // those of the gang model, whose prefix sums add K on every tick).
        let billed = |z: &ZoneFuture<'_>, t: usize| -> u32 {
            match z.available.get(t) {
                Some(&n) if n >= job.min_nodes => n.min(job.nodes),
                _ => job.nodes,
            }
        };
        let run = zones
            .iter()
            .map(|z| {
                let mut run = vec![0u32; t_len + 1];
                for t in (0..t_len).rev() {
                    if up(z, t) {
                        run[t] = run[t + 1] + 1;
                    }
                }
                run
            })
            .collect();
        let cum = zones
            .iter()
            .map(|z| {
                let mut c = vec![0.0; t_len + 1];
                for t in 0..t_len {
                    let p = z.spot_price.get(t).copied().unwrap_or(on_demand_price);
                    let n = if job.is_elastic() {
                        f64::from(billed(z, t))
                    } else {
                        k
                    };
                    c[t + 1] = c[t] + p * n * tick_hours;
                }
                c
            })
            .collect();
        let held = zones
            .iter()
            .map(|z| {
                let mut c = vec![0u64; t_len + 1];
                for t in 0..t_len {
                    c[t + 1] = c[t] + u64::from(billed(z, t));
                }
                c
            })
            .collect();
        let r = job.restart as usize;
        let gain = zones
            .iter()
            .map(|z| {
                let working: Vec<u32> = (0..t_len)
                    .map(|t| {
                        let a = &z.available[..=t.min(z.available.len().saturating_sub(1))];
                        if t < r { 0 } else { job.working(a) }
                    })
                    .collect();
                (0..t_len)
                    .map(|t| {
                        if !job.is_elastic() {
                            return [job.unit; 2];
                        }
                        let before = if t > r { working[t - 1] } else { 0 };
                        [
                            job.spot_gain(working[t], 0),
                            if t > r {
                                job.spot_gain(working[t], before.max(1))
                            } else {
                                0
                            },
                        ]
                    })
                    .collect()
            })
            .collect();
        let regions = zones.iter().map(|z| z.region + 1).max().unwrap_or(1);
        Optimum {
            od_tick: on_demand_price * k * tick_hours,
            egress: egress_cost,
            regions,
            width: (job.slack() as usize) * job.unit as usize + 1,
            job,
            zones,
            run,
            cum,
            held,
            gain,
            table: Vec::new(),
        }
    }

    fn nodes(&self) -> usize {
        2 * self.regions + self.zones.len() * if self.job.is_elastic() { 2 } else { 1 }
    }

    fn node_index(&self, n: Node) -> usize {
        match n {
            Node::None(g) => g,
            Node::Od(g) => self.regions + g,
            Node::Spot(z) => 2 * self.regions + z,
            Node::Fresh(z) => 2 * self.regions + self.zones.len() + z,
        }
    }

    fn slot(&self, n: Node, t: usize, sigma: usize) -> usize {
        (t * self.width + sigma) * self.nodes() + self.node_index(n)
    }

    /// Value of `n` at tick `t` with slack `sigma` (may be negative or past the end).
    fn value(&self, n: Node, t: usize, sigma: i64) -> f64 {
        let remaining = (i64::from(self.job.deadline) - t as i64) * i64::from(self.job.unit);
        if sigma < 0 {
            return INF;
        }
        if remaining - sigma <= 0 {
            return 0.0;
        }
        self.table[self.slot(n, t, sigma as usize)]
    }

    fn up(&self, z: usize, t: usize) -> bool {
        self.run[z].get(t).is_some_and(|&r| r > 0)
    }

    /// The placement a spot boot in zone `z` lands in.
    fn booted(&self, z: usize) -> Node {
        if self.job.is_elastic() {
            Node::Fresh(z)
        } else {
            Node::Spot(z)
        }
    }

    /// Calls `f(cost, next node, next tick, next slack, edge)` for every choice at a state.
    fn options(
        &self,
        n: Node,
        t: usize,
        sigma: i64,
        f: &mut impl FnMut(f64, Node, usize, i64, Edge),
    ) {
        let r = self.job.restart as usize;
        let u = i64::from(self.job.unit);
        match n {
            Node::None(g) => {
                f(0.0, n, t + 1, sigma - u, Edge::Idle);
                f(
                    self.od_tick * r as f64,
                    Node::Od(g),
                    t + r,
                    sigma - r as i64 * u,
                    Edge::Boot { spot: None },
                );
                for (z, zone) in self.zones.iter().enumerate() {
                    if self.run[z][t] as usize >= r {
                        let egress = if zone.region != g { self.egress } else { 0.0 };
                        let cost = self.cum[z][t + r] - self.cum[z][t] + egress;
                        f(
                            cost,
                            self.booted(z),
                            t + r,
                            sigma - r as i64 * u,
                            Edge::Boot { spot: Some(z) },
                        );
                    }
                }
            }
            Node::Od(g) => {
                f(self.od_tick, n, t + 1, sigma, Edge::Run { spot: false });
                f(0.0, Node::None(g), t, sigma, Edge::Stop);
            }
            Node::Spot(z) | Node::Fresh(z) => {
                let g = self.zones[z].region;
                if self.up(z, t) {
                    let gain = self.gain[z][t][usize::from(matches!(n, Node::Spot(_)))];
                    f(
                        self.cum[z][t + 1] - self.cum[z][t],
                        Node::Spot(z),
                        t + 1,
                        sigma - (u - i64::from(gain)),
                        Edge::Run { spot: true },
                    );
                }
                f(0.0, Node::None(g), t, sigma, Edge::Stop);
            }
        }
    }

    /// Fill the value table backwards in time. This is the hot loop of `tern simulate`, so it is
    /// written out per placement instead of going through [`Optimum::options`] (which the
    /// forward pass uses, and which the brute-force test checks against).
    fn solve(&mut self) {
        let t_len = self.job.deadline as usize;
        let (w, nn, gs) = (self.width, self.nodes(), self.regions);
        let zs = self.zones.len();
        let elastic = self.job.is_elastic();
        let r = self.job.restart as usize;
        let u = i64::from(self.job.unit);
        let ru = r as i64 * u;
        let boot_od = self.od_tick * r as f64;
        self.table.clear();
        self.table.resize(t_len * w * nn, INF);
        let table = &mut self.table;
        let get = |table: &[f64], i: usize, t2: usize, s2: i64| -> f64 {
            if s2 < 0 {
                INF
            } else if (t_len as i64 - t2 as i64) * u - s2 <= 0 {
                0.0
            } else {
                table[(t2 * w + s2 as usize) * nn + i]
            }
        };
        // Spot boots land in `Fresh` for elastic jobs.
        let landing = if elastic { 2 * gs + zs } else { 2 * gs };
        for t in (0..t_len).rev() {
            let rem = t_len - t;
            for sigma in 0..w.min(rem * u as usize) {
                let s = sigma as i64;
                let base = (t * w + sigma) * nn;
                for g in 0..gs {
                    let mut best = get(table, g, t + 1, s - u);
                    best = best.min(boot_od + get(table, gs + g, t + r, s - ru));
                    for (z, zone) in self.zones.iter().enumerate() {
                        if self.run[z][t] as usize >= r {
                            let egress = if zone.region != g { self.egress } else { 0.0 };
                            let c = self.cum[z][t + r] - self.cum[z][t] + egress;
                            best = best.min(c + get(table, landing + z, t + r, s - ru));
                        }
                    }
                    table[base + g] = best;
                }
                for g in 0..gs {
                    let run = self.od_tick + get(table, gs + g, t + 1, s);
                    table[base + gs + g] = run.min(table[base + g]);
                }
                for (z, zone) in self.zones.iter().enumerate() {
                    let stop = table[base + zone.region];
                    let up = self.run[z][t] > 0;
                    let c = self.cum[z][t + 1] - self.cum[z][t];
                    let [first, later] = self.gain[z][t];
                    table[base + 2 * gs + z] = if up {
                        (c + get(table, 2 * gs + z, t + 1, s - (u - i64::from(later)))).min(stop)
                    } else {
                        stop
                    };
                    if elastic {
                        table[base + 2 * gs + zs + z] = if up {
                            (c + get(table, 2 * gs + z, t + 1, s - (u - i64::from(first))))
                                .min(stop)
                        } else {
                            stop
                        };
                    }
                }
            }
        }
    }

    /// Solve and replay the optimum forwards to count how it spent its time.
    pub fn run(mut self) -> Outcome {
        let mut out = Outcome {
            cost: INF,
            spot_ticks: 0,
            on_demand_ticks: 0,
            restarts: 0,
            moves: 0,
            finished: false,
        };
        if !self.job.feasible() && self.job.deadline < self.job.work {
            return out;
        }
        self.solve();
        let sigma0 = i64::from(self.job.slack()) * i64::from(self.job.unit);
        let Some((start, cost)) = (0..self.regions)
            .map(|g| (Node::None(g), self.value(Node::None(g), 0, sigma0)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
        else {
            return out;
        };
        if !cost.is_finite() {
            return out;
        }
        out.cost = cost;
        let (mut n, mut t, mut sigma) = (start, 0usize, sigma0);
        let (mut starts, mut last_spot) = (0u32, None);
        let r = self.job.restart;
        let (u, k) = (i64::from(self.job.unit), self.job.nodes);
        while (i64::from(self.job.deadline) - t as i64) * u - sigma > 0 {
            let here = self.value(n, t, sigma);
            let mut pick = None;
            self.options(n, t, sigma, &mut |c, m, t2, s2, e| {
                if pick.is_none()
                    && (c + self.value(m, t2, s2) - here).abs() <= 1e-9 * (1.0 + here.abs())
                {
                    pick = Some((m, t2, s2, e));
                }
            });
            let Some((m, t2, s2, e)) = pick else { break };
            match e {
                Edge::Boot { spot } => {
                    starts += 1;
                    match spot {
                        Some(z) => {
                            let held = self.held[z][t + r as usize] - self.held[z][t];
                            out.spot_ticks += held as u32;
                            if last_spot.is_some_and(|l| l != z) {
                                out.moves += 1;
                            }
                            last_spot = Some(z);
                        }
                        None => out.on_demand_ticks += r * k,
                    }
                }
                Edge::Run { spot: true } => {
                    if let Node::Spot(z) | Node::Fresh(z) = n {
                        out.spot_ticks += (self.held[z][t + 1] - self.held[z][t]) as u32;
                    }
                }
                Edge::Run { spot: false } => out.on_demand_ticks += k,
                Edge::Idle | Edge::Stop => {}
            }
            (n, t, sigma) = (m, t2, s2);
        }
        out.restarts = starts.saturating_sub(1);
        out.finished = true;
        out
    }
}

/// The omniscient optimum of one window (it knows the future; a yardstick, not a policy).
pub fn optimal(
    job: &Job,
    zones: &[ZoneFuture<'_>],
    on_demand_price: f64,
    tick_hours: f64,
    egress_cost: f64,
) -> Outcome {
    Optimum::new(job, zones, on_demand_price, tick_hours, egress_cost).run()
}

// ---------------------------------------------------------------------------------------------
// tern's policy.

/// Availability statistics of one zone, learned from the past with exponential forgetting.
#[derive(Debug, Clone, Copy)]
struct Counts {
    /// Up at t−1, and up / down at t.
    stay_up: f64,
    went_down: f64,
    /// Down at t−1, and up / down at t.
    came_up: f64,
    stay_down: f64,
    /// Of `went_down`, how often another zone was up at that tick.
    down_other_up: f64,
    /// The part of `stay_up` / `went_down` seen while the run of capacity was young (at most
    /// one restart overhead old): fresh capacity often vanishes again quickly, and a new
    /// instance lives through exactly that period while it boots.
    young_up: f64,
    young_down: f64,
    /// Consecutive up ticks ending at the last tick seen (not forgotten).
    age: u32,
    /// Weight of the prior, in ticks: one hour of pretend history with half a transition each
    /// way (capacity that lasts and outages that last about two hours), so a zone without history
    /// is neither trusted nor written off, and a few hours of real data outweigh the guess.
    prior: f64,
}

impl Default for Counts {
    fn default() -> Self {
        Counts {
            stay_up: 0.0,
            went_down: 0.0,
            came_up: 0.0,
            stay_down: 0.0,
            down_other_up: 0.0,
            young_up: 0.0,
            young_down: 0.0,
            age: 0,
            prior: 1.0,
        }
    }
}

impl Counts {
    fn decay(&mut self, f: f64) {
        self.stay_up *= f;
        self.went_down *= f;
        self.came_up *= f;
        self.stay_down *= f;
        self.down_other_up *= f;
        self.young_up *= f;
        self.young_down *= f;
    }

    /// Hazard while a run of capacity is young (boot-time risk of a fresh start).
    fn hazard_young(&self) -> f64 {
        (self.young_down + 0.5) / (self.young_up + self.young_down + self.prior)
    }

    /// Hazard once a run has outlived one restart overhead.
    fn hazard_established(&self) -> f64 {
        let down = (self.went_down - self.young_down).max(0.0);
        let up = (self.stay_up - self.young_up).max(0.0);
        (down + 0.5) / (up + down + self.prior)
    }

    /// Per-tick hazard of losing capacity.
    fn hazard(&self) -> f64 {
        (self.went_down + 0.5) / (self.stay_up + self.went_down + self.prior)
    }

    /// Per-tick chance that capacity comes back.
    fn recovery(&self) -> f64 {
        (self.came_up + 0.5) / (self.came_up + self.stay_down + self.prior)
    }

    fn other_up_after_loss(&self) -> f64 {
        (self.down_other_up + 0.5) / (self.went_down + 1.0)
    }
}

/// Parameters of the availability model the value table was solved for.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Model {
    /// Hazard of a running (booted) spot instance.
    h: f64,
    /// Hazard while a new spot instance boots on capacity that just appeared.
    hb: f64,
    /// Chance some spot is up right after our instance was preempted.
    rho: f64,
    /// Hazard and recovery of "some zone is up" while we are not on spot.
    hu: f64,
    qu: f64,
    spot_tick: f64,
    od_tick: f64,
}

impl Model {
    /// Whether `raw` estimates moved more than one grid step (and a half) away from this
    /// snapped model: the hysteresis that keeps wobbling estimates from re-solving the table.
    fn far_from(&self, raw: &Model) -> bool {
        let far = |a: f64, b: f64| (a.max(1e-6).ln() - b.max(1e-6).ln()).abs() > 0.3;
        far(self.h, raw.h)
            || far(self.hb, raw.hb)
            || far(self.rho.max(1e-3), raw.rho.max(1e-3))
            || far(self.hu, raw.hu)
            || far(self.qu, raw.qu)
            || far(self.spot_tick, raw.spot_tick)
    }

    /// Snap every rate to a grid 20 % apart (in log space). The table is solved for the snapped
    /// model, so decisions are a pure function of it, and a table can be reused across windows
    /// (and while estimates wobble) without the result depending on what was solved before.
    fn snapped(self) -> Model {
        let snap = |p: f64| (((p.ln() / 0.2).round()) * 0.2).exp();
        let prob = |p: f64| snap(p.clamp(1e-6, 1.0 - 1e-6)).min(1.0 - 1e-6);
        Model {
            h: prob(self.h),
            hb: prob(self.hb),
            rho: if self.rho < 1e-3 { 0.0 } else { prob(self.rho) },
            hu: prob(self.hu),
            qu: prob(self.qu),
            spot_tick: snap(self.spot_tick.max(1e-12)),
            od_tick: self.od_tick,
        }
    }
}

/// Expected-cost table over (remaining ticks R, slack σ) for a Markov availability model.
#[derive(Debug, Default)]
struct ValueTable {
    model: Option<Model>,
    restart: usize,
    max_r: usize,
    width: usize,
    /// Chance some spot is up one restart after spot was down / up (precomputed per solve).
    up_after_restart: [f64; 2],
    /// Five values per (R, σ): idle with spot down / up, on spot, on-demand with spot down / up.
    v: Vec<[f64; 5]>,
}

const N0: usize = 0;
const N1: usize = 1;
const SP: usize = 2;
const O0: usize = 3;
const O1: usize = 4;

impl ValueTable {
    fn get(&self, k: usize, rem: i64, sigma: i64) -> f64 {
        if sigma < 0 {
            return INF;
        }
        if rem - sigma <= 0 {
            return 0.0;
        }
        if rem as usize > self.max_r || sigma as usize >= self.width {
            return INF;
        }
        self.v[rem as usize * self.width + sigma as usize][k]
    }

    fn after_loss(&self, m: &Model, rem: i64, sigma: i64) -> f64 {
        mix(m.rho, self.get(N1, rem, sigma), self.get(N0, rem, sigma))
    }

    fn spot_running(&self, m: &Model, rem: i64, sigma: i64) -> f64 {
        mix(
            1.0 - m.h,
            self.get(SP, rem, sigma),
            self.after_loss(m, rem, sigma),
        )
    }

    /// Idle for a tick from availability state `a`.
    fn idle(&self, m: &Model, a: usize, rem: i64, sigma: i64) -> f64 {
        let p_up = if a == 1 { 1.0 - m.hu } else { m.qu };
        mix(
            p_up,
            self.get(N1, rem - 1, sigma - 1),
            self.get(N0, rem - 1, sigma - 1),
        )
    }

    fn start_od(&self, m: &Model, a: usize, rem: i64, sigma: i64) -> f64 {
        let r = self.restart as i64;
        let p_up = self.up_after_restart[a];
        m.od_tick * r as f64
            + mix(
                p_up,
                self.get(O1, rem - r, sigma - r),
                self.get(O0, rem - r, sigma - r),
            )
    }

    /// Start spot now; `hb` is the hazard while it boots.
    fn start_spot(&self, m: &Model, hb: f64, rem: i64, sigma: i64) -> f64 {
        let r = self.restart as i64;
        let mut total = m.spot_tick;
        let mut alive = 1.0;
        for k in 1..r {
            total += alive * hb * self.after_loss(m, rem - k, sigma - k);
            alive *= 1.0 - hb;
            total += alive * m.spot_tick;
        }
        total + alive * self.spot_running(m, rem - r, sigma - r)
    }

    fn od_continue(&self, m: &Model, a: usize, rem: i64, sigma: i64) -> f64 {
        let p_up = if a == 1 { 1.0 - m.hu } else { m.qu };
        m.od_tick
            + mix(
                p_up,
                self.get(O1, rem - 1, sigma),
                self.get(O0, rem - 1, sigma),
            )
    }

    fn spot_continue(&self, m: &Model, rem: i64, sigma: i64) -> f64 {
        m.spot_tick + self.spot_running(m, rem - 1, sigma)
    }

    fn solve(&mut self, m: Model, restart: u32, max_r: u32, max_sigma: u32) {
        self.model = Some(m);
        self.up_after_restart = [
            step_up(&m, 0, restart.max(1) as usize),
            step_up(&m, 1, restart.max(1) as usize),
        ];
        self.restart = restart.max(1) as usize;
        self.max_r = max_r as usize;
        self.width = max_sigma as usize + 1;
        self.v.clear();
        self.v.resize((self.max_r + 1) * self.width, [INF; 5]);
        let r = self.restart as i64;
        for rem in 1..=self.max_r as i64 {
            for sigma in 0..self.width as i64 {
                if rem - sigma <= 0 {
                    break;
                }
                let mut cell = [INF; 5];
                if sigma >= r {
                    let idle0 = self.idle(&m, 0, rem, sigma);
                    let idle1 = self.idle(&m, 1, rem, sigma);
                    cell[N0] = idle0.min(self.start_od(&m, 0, rem, sigma));
                    cell[N1] = idle1
                        .min(self.start_od(&m, 1, rem, sigma))
                        .min(self.start_spot(&m, m.hb, rem, sigma));
                    cell[SP] = self.spot_continue(&m, rem, sigma).min(cell[N1]);
                }
                cell[O0] = self.od_continue(&m, 0, rem, sigma).min(cell[N0]);
                cell[O1] = self.od_continue(&m, 1, rem, sigma).min(cell[N1]);
                self.v[rem as usize * self.width + sigma as usize] = cell;
            }
        }
    }
}

/// `p·a + (1−p)·b` that treats `0·∞` as 0, so impossible branches do not poison the mix.
fn mix(p: f64, a: f64, b: f64) -> f64 {
    let x = if p > 0.0 { p * a } else { 0.0 };
    let y = if p < 1.0 { (1.0 - p) * b } else { 0.0 };
    x + y
}

/// Chance that some spot is up `k` ticks after state `a`, off spot (two-state chain).
fn step_up(m: &Model, a: usize, k: usize) -> f64 {
    let mut p = if a == 1 { 1.0 } else { 0.0 };
    for _ in 0..k {
        p = p * (1.0 - m.hu) + (1.0 - p) * m.qu;
    }
    p
}

/// tern's deadline policy.
///
/// Rule: learn, from the past only, a two-state (up/down) Markov model of each zone's spot
/// capacity: per-tick hazard and recovery, forgotten exponentially with a half-life of one
/// deadline, with a weak prior (about one hour of pretend history) so an unseen zone is neither
/// trusted nor written off. Solve the expected cost-to-go of the job over (remaining time, slack)
/// for that model, with every state that could miss the deadline after one more preemption
/// marked impossible, and take the action (wait, spot, on-demand; keep or switch) with the least
/// expected cost. Switching costs the restart overhead in money *and* slack, so the table decides
/// by itself when a spot run is expected to last long enough to pay back a switch, and when
/// waiting for spot is worth the slack it burns.
///
/// Real spot capacity is not memoryless: many runs of capacity end within minutes, the rest last
/// hours. So the hazard is learned twice, for runs younger than one restart overhead and for
/// older ones; a new instance boots under the young hazard when the capacity just appeared, and
/// a job already progressing on on-demand does not leave it for capacity younger than one boot
/// (hysteresis against blips). With several zones, spot means the zone with the least expected
/// cost per tick (price plus hazard × restart), and a running job moves only when
/// [`migrate::decide`] says the saving beats the move (restart, egress) by the threshold, with a
/// deadline margin and a cool-down. The table is re-solved only when the learned model drifts.
/// No constant here is fitted to a particular trace: the only scales are the job's own
/// (deadline, restart overhead), the prices, and the one-hour prior.
#[derive(Debug, Default)]
pub struct Tern {
    counts: Vec<Counts>,
    /// Length of history already folded into `counts`.
    seen: usize,
    table: ValueTable,
    /// Tick of the last solve in this window; re-solving waits at least an eighth of the
    /// deadline. `None` at the start of a window.
    solved_at: Option<u32>,
    rule: Option<MoveRule>,
}

impl Tern {
    pub fn new() -> Tern {
        Tern::default()
    }

    /// Fold history ticks not yet seen into the per-zone counts.
    fn learn(&mut self, job: &Job, obs: &Observation<'_>) {
        let len = obs.zones.iter().map(|z| z.history.len()).min().unwrap_or(0);
        if self.counts.len() != obs.zones.len() {
            let prior = (1.0 / obs.tick_hours).max(1.0);
            self.counts = vec![
                Counts {
                    prior,
                    ..Counts::default()
                };
                obs.zones.len()
            ];
            self.seen = 0;
        }
        let half_life = f64::from(job.deadline.max(1));
        let forget = 0.5f64.powf(1.0 / half_life);
        let k = job.min_nodes;
        let young = job.restart;
        if self.seen == 0 && len > 0 {
            for (z, c) in self.counts.iter_mut().enumerate() {
                c.age = u32::from(obs.zones[z].history[0] >= k);
            }
        }
        for i in self.seen.max(1)..len {
            let ups = |i: usize, z: usize| obs.zones[z].history[i] >= k;
            let n_up = (0..obs.zones.len()).filter(|&z| ups(i, z)).count();
            for (z, c) in self.counts.iter_mut().enumerate() {
                c.decay(forget);
                let is_young = c.age <= young;
                match (ups(i - 1, z), ups(i, z)) {
                    (true, true) => {
                        c.stay_up += 1.0;
                        if is_young {
                            c.young_up += 1.0;
                        }
                        c.age = c.age.saturating_add(1);
                    }
                    (true, false) => {
                        c.went_down += 1.0;
                        if is_young {
                            c.young_down += 1.0;
                        }
                        if n_up > 0 {
                            c.down_other_up += 1.0;
                        }
                        c.age = 0;
                    }
                    (false, true) => {
                        c.came_up += 1.0;
                        c.age = 1;
                    }
                    (false, false) => c.stay_down += 1.0,
                }
            }
        }
        self.seen = self.seen.max(len);
    }

    /// Expected $ per progress tick of spot in zone `z`: price plus the restarts it will cost.
    fn zone_score(&self, job: &Job, obs: &Observation<'_>, z: usize) -> f64 {
        let v = &obs.zones[z];
        let h = self.counts.get(z).map_or(0.5, Counts::hazard);
        let k = f64::from(job.nodes) * obs.tick_hours;
        v.spot_price * k + h * f64::from(job.restart) * obs.on_demand_price * k
    }

    fn pooled_model(&self, job: &Job, obs: &Observation<'_>, best: usize) -> Model {
        let k = f64::from(job.nodes) * obs.tick_hours;
        let c = self.counts.get(best).copied().unwrap_or_default();
        let clamp = |p: f64| p.clamp(1e-6, 1.0 - 1e-6);
        let (hu, qu, rho) = if self.counts.len() == 1 {
            (c.hazard(), c.recovery(), 0.0)
        } else {
            // "Some zone is up": it goes down only when every zone does, comes back when any does.
            let mut down_all = 1.0;
            let mut none_back = 1.0;
            for c in &self.counts {
                down_all *= c.hazard();
                none_back *= 1.0 - c.recovery();
            }
            (down_all, 1.0 - none_back, c.other_up_after_loss())
        };
        Model {
            h: clamp(c.hazard_established()),
            hb: clamp(c.hazard_young()),
            rho: rho.clamp(0.0, 1.0),
            hu: clamp(hu),
            qu: clamp(qu),
            spot_tick: obs.zones[best].spot_price * k,
            od_tick: obs.on_demand_price * k,
        }
    }
}

impl DeadlinePolicy for Tern {
    fn name(&self) -> &'static str {
        "tern"
    }

    fn reset(&mut self) {
        self.counts.clear();
        self.seen = 0;
        self.solved_at = None;
        self.rule = None;
    }

    fn decide(&mut self, job: &Job, state: &JobState, obs: &Observation<'_>) -> Placement {
        self.learn(job, obs);
        let rule = *self.rule.get_or_insert_with(|| {
            MoveRule::for_job(
                f64::from(job.restart) * obs.tick_hours,
                obs.on_demand_price * f64::from(job.nodes),
            )
        });
        // A booting instance is committed: abandoning it only wastes what was paid.
        if state.booting > 0 {
            return state.placement;
        }
        let up: Vec<usize> = (0..obs.zones.len())
            .filter(|&z| obs.zones[z].up(job.min_nodes))
            .collect();
        let best_up = up.iter().copied().min_by(|&a, &b| {
            self.zone_score(job, obs, a)
                .total_cmp(&self.zone_score(job, obs, b))
        });
        let best_any = (0..obs.zones.len())
            .min_by(|&a, &b| {
                self.zone_score(job, obs, a)
                    .total_cmp(&self.zone_score(job, obs, b))
            })
            .unwrap_or(0);
        let here = match state.placement {
            Placement::Spot(z) if up.contains(&z) => Some(z),
            _ => None,
        };
        let model_zone = here.or(best_up).unwrap_or(best_any);
        let model = self.pooled_model(job, obs, model_zone);
        let rem = i64::from(job.deadline) - i64::from(obs.tick);
        let sigma = rem - i64::from(job.ticks_left(state.done));
        let raw = model;
        let model = model.snapped();
        let spacing = (job.deadline / 8).max(1);
        let covers = rem.max(0) as usize <= self.table.max_r
            && (sigma.max(0) as usize) < self.table.width
            && self.table.restart == job.restart.max(1) as usize;
        let stale = match (self.table.model, self.solved_at) {
            (None, _) => true,
            _ if !covers => true,
            (Some(old), None) => old != model,
            (Some(old), Some(at)) => old.far_from(&raw) && obs.tick >= at + spacing,
        };
        if self.solved_at.is_none() {
            self.solved_at = Some(obs.tick);
        }
        if stale {
            self.solved_at = Some(obs.tick);
            self.table
                .solve(model, job.restart, rem.max(0) as u32, sigma.max(0) as u32);
        }
        let m = self.table.model.unwrap_or(model);
        let t = &self.table;
        let a = usize::from(!up.is_empty());
        let idle = t.idle(&m, a, rem, sigma);
        let start_od = t.start_od(&m, a, rem, sigma);
        // Capacity that has lasted longer than a boot is as safe as a running instance; fresh
        // capacity carries the young-run hazard.
        let start_spot = match best_up {
            Some(z) => {
                let c = self.counts.get(z).copied().unwrap_or_default();
                let fresh = c.age <= job.restart;
                if fresh && state.placement == Placement::OnDemand {
                    INF
                } else {
                    t.start_spot(&m, if fresh { m.hb } else { m.h }, rem, sigma)
                }
            }
            None => INF,
        };
        let keep = match state.placement {
            Placement::Spot(_) if here.is_some() => t.spot_continue(&m, rem, sigma),
            Placement::OnDemand => t.od_continue(&m, a, rem, sigma),
            _ => INF,
        };
        let choice = if keep.is_finite() && keep <= idle.min(start_od).min(start_spot) {
            state.placement
        } else if start_spot.is_finite() && start_spot <= idle.min(start_od) {
            best_up.map_or(Placement::Idle, Placement::Spot)
        } else if start_od <= idle {
            Placement::OnDemand
        } else {
            Placement::Idle
        };
        // A running spot job may still move to a better zone; the migrate rule decides.
        if let (Placement::Spot(cur), Some(best)) = (choice, best_up)
            && state.placement == Placement::Spot(cur)
            && best != cur
        {
            let k = f64::from(job.nodes) * obs.tick_hours;
            let egress = match state.checkpoint_region {
                Some(g) if g != obs.zones[best].region => obs.egress_cost,
                _ => 0.0,
            };
            let candidate = MoveCandidate {
                remaining_work_hours: f64::from(job.ticks_left(state.done)) * obs.tick_hours,
                current_rate: self.zone_score(job, obs, cur) / obs.tick_hours,
                candidate_rate: self.zone_score(job, obs, best) / obs.tick_hours,
                restart_hours: f64::from(job.restart) * obs.tick_hours,
                held_rate: obs.zones[best].spot_price * k / obs.tick_hours,
                lost_progress_cost: 0.0,
                egress,
                slack_hours: sigma as f64 * obs.tick_hours,
                hours_since_last_move: state
                    .last_move
                    .map(|l| f64::from(obs.tick.saturating_sub(l)) * obs.tick_hours),
            };
            if migrate::decide(&rule, &candidate).is_move() {
                return Placement::Spot(best);
            }
        }
        choice
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn job(work: u32, deadline: u32, restart: u32) -> Job {
        Job::gang(work, deadline, restart, 1)
    }

    /// Exhaustive search over every sequence of choices, straight from the model's rules (not
    /// from [`Job::working`]): spot nodes are a stack of start ticks (joiners pushed, the
    /// youngest popped when capacity shrinks), a node works once it has been held `restart`
    /// ticks, a change of the working count is a tick without progress, and every node held is
    /// billed. Besides idle / spot / on-demand, a spot job may restart in place (a new start,
    /// which pays `restart` again but makes the next working tick a run's first): the optimum
    /// may stop and start again in the same tick, and for an elastic job that can beat two
    /// re-rendezvous in a row.
    fn brute(job: &Job, avail: &[u32], spot: f64, od: f64) -> f64 {
        #[derive(Clone, Copy, PartialEq)]
        enum P {
            Idle,
            Spot,
            Od,
        }
        #[derive(Clone)]
        struct S {
            t: u32,
            done: u32,
            p: P,
            boot: u32,
            /// Start tick of every spot node held, oldest first.
            stack: Vec<u32>,
            /// Nodes that worked at the previous tick of this spot run.
            working: u32,
        }
        fn go(job: &Job, avail: &[u32], spot: f64, od: f64, s: &S) -> f64 {
            if s.done >= job.total() {
                return 0.0;
            }
            if s.t >= job.deadline {
                return INF;
            }
            let a = avail[s.t as usize];
            let up = a >= job.min_nodes;
            // Preemption at the start of the tick.
            let p = if s.p == P::Spot && !up { P::Idle } else { s.p };
            let mut best = INF;
            for (want, restart) in [
                (P::Idle, false),
                (P::Spot, false),
                (P::Od, false),
                (P::Spot, true),
            ] {
                if want == P::Spot && !up || restart && p != P::Spot {
                    continue;
                }
                let mut n = S {
                    t: s.t + 1,
                    done: s.done,
                    p: want,
                    boot: 0,
                    stack: Vec::new(),
                    working: 0,
                };
                let fresh = want != p || restart;
                let boot = if fresh { job.restart } else { s.boot };
                let cost = match want {
                    P::Idle => 0.0,
                    P::Od => {
                        if boot > 0 {
                            n.boot = boot - 1;
                        } else {
                            n.done += job.unit;
                        }
                        od * f64::from(job.nodes)
                    }
                    P::Spot => {
                        n.stack = if fresh { Vec::new() } else { s.stack.clone() };
                        let held = a.min(job.nodes) as usize;
                        n.stack.truncate(held);
                        while n.stack.len() < held {
                            n.stack.push(s.t);
                        }
                        if boot > 0 {
                            n.boot = boot - 1;
                        } else {
                            let w = n
                                .stack
                                .iter()
                                .filter(|&&st| st + job.restart <= s.t)
                                .count() as u32;
                            if s.working == 0 || s.working == w {
                                n.done += job.speed[w as usize];
                            }
                            n.working = w;
                        }
                        spot * held as f64
                    }
                };
                best = best.min(cost + go(job, avail, spot, od, &n));
            }
            best
        }
        let start = S {
            t: 0,
            done: 0,
            p: P::Idle,
            boot: 0,
            stack: Vec::new(),
            working: 0,
        };
        go(job, avail, spot, od, &start)
    }

    fn zone<'a>(a: &'a [u32], p: &'a [f64]) -> [ZoneFuture<'a>; 1] {
        [ZoneFuture {
            available: a,
            spot_price: p,
            region: 0,
        }]
    }

    /// Runs an online policy on one zone the way the replay engine does (on-demand $1/h per
    /// node, one-hour ticks); returns units done and dollars spent.
    fn replay_online(p: &mut dyn DeadlinePolicy, j: &Job, avail: &[u32], spot: f64) -> (u32, f64) {
        let mut s = JobState::new();
        let mut cost = 0.0;
        for t in 0..j.deadline {
            if s.done >= j.total() {
                break;
            }
            let views = [ZoneView {
                history: &avail[..=t as usize],
                spot_price: spot,
                region: 0,
            }];
            let obs = Observation {
                tick: t,
                zones: &views,
                on_demand_price: 1.0,
                tick_hours: 1.0,
                egress_cost: 0.0,
            };
            if matches!(s.placement, Placement::Spot(_)) && !views[0].up(j.min_nodes) {
                s.placement = Placement::Idle;
                s.booting = 0;
            }
            let want = p.decide(j, &s, &obs);
            let act = safe(j, &s, &obs, want);
            if act == Placement::Idle {
                s.placement = Placement::Idle;
                s.booting = 0;
                continue;
            }
            if act != s.placement {
                s.placement = act;
                s.booting = j.restart;
                s.working = 0;
            }
            cost += match act {
                Placement::OnDemand => f64::from(j.nodes),
                _ => spot * f64::from(j.held(avail[t as usize])),
            };
            if s.booting > 0 {
                s.booting -= 1;
            } else if act == Placement::OnDemand {
                s.done += j.unit;
            } else {
                let w = j.working(views[0].history);
                s.done += j.spot_gain(w, s.working);
                s.working = w;
            }
        }
        (s.done, cost)
    }

    /// An elastic job from proptest inputs: `k` nodes, `m` = 1 + `m_off` mod k, speeds from
    /// `fr` (or linear).
    fn elastic_job(base: Job, m_off: u32, fr: &[f64], linear: bool) -> Job {
        let k = base.nodes;
        let mut table = vec![0.0];
        table.extend(fr.iter().take(k as usize - 1));
        table.push(1.0);
        let m = 1 + m_off % k;
        base.elastic(m, (!linear).then_some(&table[..]))
            .expect("valid elastic job")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn optimum_matches_brute_force(
            avail in proptest::collection::vec(0u32..2, 9..10),
            work in 1u32..6,
            extra in 0u32..4,
            restart in 1u32..3,
            spot in 0.1f64..0.9,
        ) {
            let j = job(work, (work + restart + extra).min(9), restart);
            prop_assume!(j.feasible());
            let prices = vec![spot; avail.len()];
            let z = zone(&avail, &prices);
            let dp = optimal(&j, &z, 1.0, 1.0, 0.0);
            let bf = brute(&j, &avail, spot, 1.0);
            prop_assert!((dp.cost - bf).abs() < 1e-9, "dp {} vs brute {}", dp.cost, bf);
            prop_assert!(dp.finished);
            let billed = f64::from(dp.spot_ticks) * spot + f64::from(dp.on_demand_ticks);
            prop_assert!((billed - dp.cost).abs() < 1e-9);
        }

        /// Elastic jobs (K ≤ 3, any M ≤ K, random or linear speed tables, availability 0..=K):
        /// the DP on the quantised grid equals brute force on the same grid.
        #[test]
        fn elastic_optimum_matches_brute_force(
            k in 1u32..4,
            m_off in 0u32..3,
            raw in proptest::collection::vec(0u32..4, 8..9),
            work in 1u32..5,
            extra in 0u32..4,
            restart in 1u32..3,
            spot in 0.1f64..0.9,
            fr in proptest::collection::vec(0.0f64..1.0, 2),
            linear in any::<bool>(),
        ) {
            let avail: Vec<u32> = raw.iter().map(|&a| a.min(k)).collect();
            let base = Job::gang(work, (work + restart + extra).min(8), restart, k);
            prop_assume!(base.feasible());
            let j = elastic_job(base, m_off, &fr, linear);
            let prices = vec![spot; avail.len()];
            let z = zone(&avail, &prices);
            let dp = optimal(&j, &z, 1.0, 1.0, 0.0);
            let bf = brute(&j, &avail, spot, 1.0);
            prop_assert!((dp.cost - bf).abs() < 1e-9, "dp {} vs brute {} for {:?}", dp.cost, bf, j);
            prop_assert!(dp.finished);
            let billed = f64::from(dp.spot_ticks) * spot + f64::from(dp.on_demand_ticks);
            prop_assert!((billed - dp.cost).abs() < 1e-9, "{dp:?}");
            // Never worse than on-demand alone.
            prop_assert!(dp.cost <= f64::from(k * (j.work + j.restart)) + 1e-9);
        }

        #[test]
        fn online_policies_never_miss_a_feasible_deadline(
            avail in proptest::collection::vec(0u32..2, 40..80),
            work in 5u32..30,
            extra in 0u32..20,
            restart in 1u32..4,
        ) {
            let j = job(work, work + restart + extra, restart);
            prop_assume!((j.deadline as usize) <= avail.len());
            let mut policies: Vec<Box<dyn DeadlinePolicy>> = vec![
                Box::new(OnDemandOnly), Box::new(Greedy), Box::new(UniformProgress), Box::new(Tern::new()),
            ];
            for p in &mut policies {
                let (done, _) = replay_online(p.as_mut(), &j, &avail, 0.3);
                prop_assert!(done >= j.total(), "{} missed", p.name());
            }
        }

        /// The same for elastic jobs on multi-level availability, and every online policy costs
        /// at least the optimum.
        #[test]
        fn elastic_online_policies_never_miss_and_never_beat_the_optimum(
            raw in proptest::collection::vec(0u32..4, 40..80),
            m_off in 0u32..3,
            work in 5u32..30,
            extra in 0u32..20,
            restart in 1u32..4,
            fr in proptest::collection::vec(0.0f64..1.0, 2),
            linear in any::<bool>(),
        ) {
            let avail: Vec<u32> = raw.iter().map(|&a| a.min(3)).collect();
            let base = Job::gang(work, work + restart + extra, restart, 3);
            prop_assume!((base.deadline as usize) <= avail.len());
            let j = elastic_job(base, m_off, &fr, linear);
            let mut policies: Vec<Box<dyn DeadlinePolicy>> = vec![
                Box::new(OnDemandOnly), Box::new(Greedy), Box::new(UniformProgress), Box::new(Tern::new()),
            ];
            let prices = vec![0.3; avail.len()];
            let best = optimal(&j, &zone(&avail, &prices), 1.0, 1.0, 0.0);
            prop_assert!(best.finished);
            for p in &mut policies {
                let (done, cost) = replay_online(p.as_mut(), &j, &avail, 0.3);
                prop_assert!(done >= j.total(), "{} missed", p.name());
                prop_assert!(best.cost <= cost + 1e-9, "{} {cost} beats the optimum {}", p.name(), best.cost);
            }
        }
    }

    #[test]
    fn elastic_jobs_validate_and_build_their_speed_table() {
        let gang = Job::gang(10, 14, 2, 4);
        for bad in [0, 5] {
            let err = gang.clone().elastic(bad, None).unwrap_err();
            assert!(
                err.contains("between 1 and") && err.contains(&bad.to_string()),
                "{err}"
            );
        }
        // M = K is the gang, whatever the table.
        assert_eq!(
            gang.clone().elastic(4, Some(&[0.0, 0.1, 0.2, 0.3, 1.0])),
            Ok(gang.clone())
        );
        // Linear by default: node-ticks, exact.
        let lin = gang.clone().elastic(2, None).unwrap();
        assert_eq!((lin.unit, &lin.speed[..]), (4, &[0, 0, 2, 3, 4][..]));
        assert_eq!(lin.total(), 40);
        assert_eq!(lin.ticks_left(37), 1);
        // A linear table given explicitly is recognised.
        let same = gang
            .clone()
            .elastic(2, Some(&[0.0, 0.25, 0.5, 0.75, 1.0]))
            .unwrap();
        assert_eq!(same, lin);
        // Sub-linear: quantised down to 1/32 of a tick; above 1 is capped.
        let sub = gang
            .clone()
            .elastic(1, Some(&[0.0, 0.3, 0.55, 1.2, 1.0]))
            .unwrap();
        assert_eq!(sub.unit, 32);
        assert_eq!(&sub.speed[..], &[0, 9, 17, 32, 32][..]); // 9.6 → 9, 17.6 → 17
        // Tables of the wrong length or with junk are rejected.
        assert!(gang.clone().elastic(2, Some(&[0.0, 1.0])).is_err());
        let err = gang
            .elastic(2, Some(&[0.0, 0.0, f64::NAN, 0.5, 1.0]))
            .unwrap_err();
        assert!(err.contains("2 node(s)"), "{err}");
    }

    #[test]
    fn joining_nodes_boot_and_resizes_pause_one_tick() {
        let j = Job::gang(10, 30, 2, 4).elastic(2, None).unwrap();
        assert_eq!((j.held(1), j.held(2), j.held(7)), (0, 2, 4));
        // Capacity rose from 2 to 4 two ticks ago: the new nodes still boot (restart 2).
        assert_eq!(j.working(&[2, 2, 4, 4]), 2);
        assert_eq!(j.working(&[2, 4, 4, 4]), 4);
        // A loss counts at once.
        assert_eq!(j.working(&[4, 4, 4, 3]), 3);
        assert_eq!(j.spot_gain(3, 0), 3); // first working tick of a run
        assert_eq!(j.spot_gain(3, 3), 3);
        assert_eq!(j.spot_gain(3, 4), 0); // re-rendezvous
    }

    #[test]
    fn elastic_job_uses_partial_capacity_a_gang_cannot() {
        // Two of four nodes all the time: the gang must pay on-demand, the elastic job runs on
        // spot at half speed and finishes within the deadline for less.
        let avail = [2u32; 30];
        let prices = [0.3; 30];
        let z = zone(&avail, &prices);
        let gang = Job::gang(10, 30, 2, 4);
        let g = optimal(&gang, &z, 1.0, 1.0, 0.0);
        assert!((g.cost - 4.0 * 12.0).abs() < 1e-9, "{g:?}");
        let el = gang.elastic(2, None).unwrap();
        let e = optimal(&el, &z, 1.0, 1.0, 0.0);
        // 2 boot ticks + 20 half-speed ticks on 2 nodes at 0.3.
        assert!((e.cost - 0.3 * 2.0 * 22.0).abs() < 1e-9, "{e:?}");
        assert_eq!((e.spot_ticks, e.on_demand_ticks), (44, 0));
        let (done, cost) = replay_online(&mut Greedy, &el, &avail, 0.3);
        assert_eq!(done, el.total(), "greedy finishes too");
        assert!(cost >= e.cost - 1e-9);
    }

    #[test]
    fn relative_throughput_follows_the_forecasters_scaling_curve() {
        let now = chrono::Utc::now();
        let mut f = Forecaster::new();
        for (gpus, nodes, step) in [
            (1, 1, 0.40),
            (4, 1, 0.42),
            (8, 2, 0.55),
            (16, 4, 0.60),
            (32, 8, 0.70),
        ] {
            f.observe(&tern_cloud::Observation {
                job: "j".into(),
                accelerator: "T4".into(),
                gpus,
                nodes,
                local_batch: 64,
                step_seconds: step,
                sync_seconds: None,
                at: now,
            })
            .unwrap();
        }
        f.refit().unwrap();
        let r = relative_throughput(&f, "j", "T4", 4, 64.0, 4).unwrap();
        assert_eq!(r.len(), 5);
        assert_eq!(r[0], 0.0);
        assert!((r[4] - 1.0).abs() < 1e-12);
        for pair in r[1..].windows(2) {
            assert!(pair[0] > 0.0 && pair[0] < pair[1], "{r:?}");
        }
        // Sub-linear: one node of four does more than a quarter of the work (sync is cheaper).
        assert!(r[1] > 0.25, "{r:?}");
        let j = Job::gang(10, 20, 1, 4).elastic(1, Some(&r)).unwrap();
        for (units, rel) in j.speed.iter().zip(&r).skip(1) {
            assert!(f64::from(*units) <= rel * f64::from(j.unit) + 1e-9);
        }
        assert!(relative_throughput(&f, "other", "T4", 4, 64.0, 4).is_err());
    }

    #[test]
    fn optimum_waits_for_cheap_spot_when_slack_allows() {
        // Spot comes up at tick 3 and stays; 4 ticks of work, deadline 10, restart 1.
        let avail = [0, 0, 0, 1, 1, 1, 1, 1, 1, 1];
        let prices = [0.3; 10];
        let z = zone(&avail, &prices);
        let out = optimal(&job(4, 10, 1), &z, 1.0, 1.0, 0.0);
        assert!((out.cost - 5.0 * 0.3).abs() < 1e-9);
        assert_eq!((out.spot_ticks, out.on_demand_ticks), (5, 0));
    }

    #[test]
    fn optimum_moves_zones_and_pays_egress_only_across_regions() {
        let a = [1, 1, 0, 0, 0, 0, 0, 0];
        let b = [0, 1, 1, 1, 1, 1, 1, 1];
        let prices = [0.2; 8];
        let same = [
            ZoneFuture {
                available: &a,
                spot_price: &prices,
                region: 0,
            },
            ZoneFuture {
                available: &b,
                spot_price: &prices,
                region: 0,
            },
        ];
        let out = optimal(&job(5, 8, 1), &same, 1.0, 1.0, 10.0);
        assert!(out.cost < 1.5, "{out:?}");
        let far = [
            ZoneFuture {
                available: &a,
                spot_price: &prices,
                region: 0,
            },
            ZoneFuture {
                available: &b,
                spot_price: &prices,
                region: 1,
            },
        ];
        let out_far = optimal(&job(5, 8, 1), &far, 1.0, 1.0, 10.0);
        // Starting in the far region from the beginning avoids the egress: same cost.
        assert!((out_far.cost - out.cost).abs() < 1e-9, "{out_far:?}");
    }

    #[test]
    fn safety_forces_on_demand_at_the_last_safe_moment() {
        let j = job(10, 14, 2);
        let avail = [1u32; 14];
        let views = [ZoneView {
            history: &avail,
            spot_price: 0.3,
            region: 0,
        }];
        let obs = |tick| Observation {
            tick,
            zones: &views,
            on_demand_price: 1.0,
            tick_hours: 1.0,
            egress_cost: 0.0,
        };
        let idle = JobState::new();
        // 14 ticks left, 10 work, restart 2: idling one tick leaves 13 ≥ 10 + 2.
        assert_eq!(safe(&j, &idle, &obs(0), Placement::Idle), Placement::Idle);
        // 12 ticks left: idling leaves 11 < 12.
        assert_eq!(
            safe(&j, &idle, &obs(2), Placement::Idle),
            Placement::OnDemand
        );
        let running = JobState {
            done: 3,
            placement: Placement::Spot(0),
            ..JobState::new()
        };
        // 9 left, 7 work: continuing spot leaves 8 ≥ 6 + 2.
        assert_eq!(
            safe(&j, &running, &obs(5), Placement::Spot(0)),
            Placement::Spot(0)
        );
        assert_eq!(
            safe(&j, &running, &obs(6), Placement::Spot(0)),
            Placement::OnDemand
        );
    }

    #[test]
    fn job_rounding_is_conservative() {
        let j = Job::from_hours(48.0, 52.0, 0.2, 195, 1);
        assert_eq!(j.work, 887); // 48 h / 195 s = 886.15 → 887
        assert_eq!(j.deadline, 960); // 52 h / 195 s = 960.0
        assert_eq!(j.restart, 4); // 0.2 h / 195 s = 3.69 → 4
        assert!(j.feasible());
    }
}
