//! Deadline policies: each tick, a job with `C` hours of work due in `D` hours picks spot (in one
//! of several zones), on-demand, or waiting (DESIGN.md §4.4).
//!
//! Time is the trace tick. Work, deadline and restart overhead are whole ticks ([`Job`]). Starting
//! any instance (first start, spot↔on-demand, a zone move, a restart after preemption) costs
//! `restart` ticks of billed time without progress. A spot instance whose zone loses capacity is
//! gone at that tick; its progress is kept (checkpointed), the restart overhead is the loss.
//!
//! Online policies implement [`DeadlinePolicy`]: a deterministic function of (job, state, tick,
//! observations of the past and present). [`safe`] wraps every decision so that no policy can
//! miss a deadline that was feasible at the start. [`optimal`] is the omniscient yardstick.

use crate::migrate::{self, MoveCandidate, MoveRule};

/// Costs in the policies are dollars; `INF` marks states from which the deadline cannot be met.
const INF: f64 = f64::INFINITY;

/// A job on the tick grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    /// Ticks of full-speed work.
    pub work: u32,
    /// Ticks from the start until the deadline.
    pub deadline: u32,
    /// Ticks of overhead to bring up a new instance (at least 1).
    pub restart: u32,
    /// Instances needed at once (a gang); spot is usable only when this many are available.
    pub nodes: u32,
}

impl Job {
    /// Round work and overhead up, the deadline down, so the tick model never flatters a policy.
    pub fn from_hours(work: f64, deadline: f64, restart: f64, gap_seconds: u32, nodes: u32) -> Job {
        let g = f64::from(gap_seconds.max(1)) / 3600.0;
        let up = |h: f64| ((h / g) - 1e-9).ceil().max(0.0) as u32;
        Job {
            work: up(work).max(1),
            deadline: ((deadline / g) + 1e-9).floor().max(0.0) as u32,
            restart: up(restart).max(1),
            nodes: nodes.max(1),
        }
    }

    /// Whether on-demand alone (one start, then uninterrupted work) meets the deadline.
    pub fn feasible(&self) -> bool {
        self.deadline >= self.work + self.restart
    }

    /// Initial slack in ticks: time that may be spent on anything but progress.
    pub fn slack(&self) -> u32 {
        self.deadline.saturating_sub(self.work)
    }
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
    /// Ticks of work done.
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
pub fn safe(job: &Job, state: &JobState, obs: &Observation<'_>, want: Placement) -> Placement {
    let remaining = i64::from(job.deadline) - i64::from(obs.tick);
    let work_left = i64::from(job.work) - i64::from(state.done);
    let spot_ok = |z: usize| obs.zones.get(z).is_some_and(|v| v.up(job.nodes));
    let after_work = match want {
        Placement::OnDemand => return Placement::OnDemand,
        Placement::Spot(z) if !spot_ok(z) => return safe(job, state, obs, Placement::Idle),
        Placement::Spot(z) if state.placement == Placement::Spot(z) && state.booting == 0 => {
            work_left - 1
        }
        _ => work_left,
    };
    if remaining > after_work + i64::from(job.restart) {
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
        obs.cheapest_up(job.nodes, state.placement)
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
        let work_left = u64::from(job.work.saturating_sub(state.done));
        let r = u64::from(job.restart);
        // Progress expected on the line, in ticks, scaled to avoid rounding: done·D vs t·C.
        let done_scaled = u64::from(state.done) * u64::from(job.deadline);
        let line_scaled = t * u64::from(job.work);
        let behind = done_scaled < line_scaled;
        let ahead_2d = done_scaled >= line_scaled + 2 * r * u64::from(job.deadline);
        let spot = obs.cheapest_up(job.nodes, state.placement);
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
    pub spot_ticks: u32,
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
}

#[derive(Debug, Clone, Copy)]
enum Edge {
    Idle,
    Boot { spot: Option<usize> },
    Run { spot: bool },
    Stop,
}

/// Omniscient dynamic programme over (tick, slack, placement). Slack σ = remaining ticks −
/// remaining work, which never grows, so the table is `deadline × (initial slack + 1)` per
/// placement, not `deadline × work`. Booting is folded into one edge (start at `t`, running at
/// `t + restart`): an omniscient policy never starts an instance that dies while booting, since
/// waiting instead reaches the same state for free.
#[derive(Debug)]
pub struct Optimum<'a> {
    job: Job,
    zones: &'a [ZoneFuture<'a>],
    od_tick: f64,
    egress: f64,
    regions: usize,
    width: usize,
    /// Consecutive usable spot ticks starting at each tick, per zone.
    run: Vec<Vec<u32>>,
    /// Prefix sums of spot $ per tick, per zone.
    cum: Vec<Vec<f64>>,
    table: Vec<f64>,
}

impl<'a> Optimum<'a> {
    pub fn new(
        job: Job,
        zones: &'a [ZoneFuture<'a>],
        on_demand_price: f64,
        tick_hours: f64,
        egress_cost: f64,
    ) -> Optimum<'a> {
        let t_len = job.deadline as usize;
        let k = f64::from(job.nodes);
        let run = zones
            .iter()
            .map(|z| {
                let mut run = vec![0u32; t_len + 1];
                for t in (0..t_len).rev() {
                    if z.available.get(t).is_some_and(|&n| n >= job.nodes) {
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
                    c[t + 1] = c[t] + p * k * tick_hours;
                }
                c
            })
            .collect();
        let regions = zones.iter().map(|z| z.region + 1).max().unwrap_or(1);
        Optimum {
            job,
            zones,
            od_tick: on_demand_price * k * tick_hours,
            egress: egress_cost,
            regions,
            width: job.slack() as usize + 1,
            run,
            cum,
            table: Vec::new(),
        }
    }

    fn nodes(&self) -> usize {
        2 * self.regions + self.zones.len()
    }

    fn node_index(&self, n: Node) -> usize {
        match n {
            Node::None(g) => g,
            Node::Od(g) => self.regions + g,
            Node::Spot(z) => 2 * self.regions + z,
        }
    }

    fn slot(&self, n: Node, t: usize, sigma: usize) -> usize {
        (t * self.width + sigma) * self.nodes() + self.node_index(n)
    }

    /// Value of `n` at tick `t` with slack `sigma` (may be negative or past the end).
    fn value(&self, n: Node, t: usize, sigma: i64) -> f64 {
        let remaining = i64::from(self.job.deadline) - t as i64;
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

    /// Calls `f(cost, next node, next tick, next slack, edge)` for every choice at a state.
    fn options(
        &self,
        n: Node,
        t: usize,
        sigma: i64,
        f: &mut impl FnMut(f64, Node, usize, i64, Edge),
    ) {
        let r = self.job.restart as usize;
        match n {
            Node::None(g) => {
                f(0.0, n, t + 1, sigma - 1, Edge::Idle);
                f(
                    self.od_tick * r as f64,
                    Node::Od(g),
                    t + r,
                    sigma - r as i64,
                    Edge::Boot { spot: None },
                );
                for (z, zone) in self.zones.iter().enumerate() {
                    if self.run[z][t] as usize >= r {
                        let egress = if zone.region != g { self.egress } else { 0.0 };
                        let cost = self.cum[z][t + r] - self.cum[z][t] + egress;
                        f(
                            cost,
                            Node::Spot(z),
                            t + r,
                            sigma - r as i64,
                            Edge::Boot { spot: Some(z) },
                        );
                    }
                }
            }
            Node::Od(g) => {
                f(self.od_tick, n, t + 1, sigma, Edge::Run { spot: false });
                f(0.0, Node::None(g), t, sigma, Edge::Stop);
            }
            Node::Spot(z) => {
                let g = self.zones[z].region;
                if self.up(z, t) {
                    f(
                        self.cum[z][t + 1] - self.cum[z][t],
                        n,
                        t + 1,
                        sigma,
                        Edge::Run { spot: true },
                    );
                }
                f(0.0, Node::None(g), t, sigma, Edge::Stop);
            }
        }
    }

    /// Fill the value table backwards in time.
    /// Fill the value table backwards in time. This is the hot loop of `tern simulate`, so it is
    /// written out per placement instead of going through [`Optimum::options`] (which the
    /// forward pass uses, and which the brute-force test checks against).
    fn solve(&mut self) {
        let t_len = self.job.deadline as usize;
        let (w, nn, gs) = (self.width, self.nodes(), self.regions);
        let r = self.job.restart as usize;
        let ri = r as i64;
        let boot_od = self.od_tick * r as f64;
        self.table.clear();
        self.table.resize(t_len * w * nn, INF);
        let table = &mut self.table;
        let get = |table: &[f64], i: usize, t2: usize, s2: i64| -> f64 {
            if s2 < 0 {
                INF
            } else if t_len as i64 - t2 as i64 - s2 <= 0 {
                0.0
            } else {
                table[(t2 * w + s2 as usize) * nn + i]
            }
        };
        for t in (0..t_len).rev() {
            let rem = t_len - t;
            for sigma in 0..w.min(rem) {
                let s = sigma as i64;
                let base = (t * w + sigma) * nn;
                for g in 0..gs {
                    let mut best = get(table, g, t + 1, s - 1);
                    best = best.min(boot_od + get(table, gs + g, t + r, s - ri));
                    for (z, zone) in self.zones.iter().enumerate() {
                        if self.run[z][t] as usize >= r {
                            let egress = if zone.region != g { self.egress } else { 0.0 };
                            let c = self.cum[z][t + r] - self.cum[z][t] + egress;
                            best = best.min(c + get(table, 2 * gs + z, t + r, s - ri));
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
                    table[base + 2 * gs + z] = if self.run[z][t] > 0 {
                        let c = self.cum[z][t + 1] - self.cum[z][t];
                        (c + get(table, 2 * gs + z, t + 1, s)).min(stop)
                    } else {
                        stop
                    };
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
        let sigma0 = i64::from(self.job.slack());
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
        while i64::from(self.job.deadline) - t as i64 - sigma > 0 {
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
                            out.spot_ticks += r;
                            if last_spot.is_some_and(|l| l != z) {
                                out.moves += 1;
                            }
                            last_spot = Some(z);
                        }
                        None => out.on_demand_ticks += r,
                    }
                }
                Edge::Run { spot: true } => out.spot_ticks += 1,
                Edge::Run { spot: false } => out.on_demand_ticks += 1,
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
    job: Job,
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
        let k = job.nodes;
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
            .filter(|&z| obs.zones[z].up(job.nodes))
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
        let sigma = rem - (i64::from(job.work) - i64::from(state.done));
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
                remaining_work_hours: f64::from(job.work - state.done) * obs.tick_hours,
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
        Job {
            work,
            deadline,
            restart,
            nodes: 1,
        }
    }

    /// Exhaustive search over every sequence of choices, straight from the model's rules.
    fn brute(job: &Job, avail: &[u32], spot: f64, od: f64) -> f64 {
        #[derive(Clone, Copy, PartialEq)]
        enum P {
            Idle,
            Spot,
            Od,
        }
        #[allow(clippy::too_many_arguments)] // a plain recursion over the model's state
        fn go(
            job: &Job,
            avail: &[u32],
            spot: f64,
            od: f64,
            t: u32,
            done: u32,
            p: P,
            boot: u32,
        ) -> f64 {
            if done >= job.work {
                return 0.0;
            }
            if t >= job.deadline {
                return INF;
            }
            let up = avail[t as usize] >= 1;
            // Preemption at the start of the tick.
            let p = if p == P::Spot && !up { P::Idle } else { p };
            let mut best = INF;
            for want in [P::Idle, P::Spot, P::Od] {
                if want == P::Spot && !up {
                    continue;
                }
                let (cost, nd, nb) = match want {
                    P::Idle => (0.0, done, 0),
                    _ => {
                        let price = if want == P::Spot { spot } else { od };
                        let b = if want == p { boot } else { job.restart };
                        if b > 0 {
                            (price, done, b - 1)
                        } else {
                            (price, done + 1, 0)
                        }
                    }
                };
                let v = cost + go(job, avail, spot, od, t + 1, nd, want, nb);
                best = best.min(v);
            }
            best
        }
        go(job, avail, spot, od, 0, 0, P::Idle, 0)
    }

    fn zone<'a>(a: &'a [u32], p: &'a [f64]) -> [ZoneFuture<'a>; 1] {
        [ZoneFuture {
            available: a,
            spot_price: p,
            region: 0,
        }]
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
            let dp = optimal(j, &z, 1.0, 1.0, 0.0);
            let bf = brute(&j, &avail, spot, 1.0);
            prop_assert!((dp.cost - bf).abs() < 1e-9, "dp {} vs brute {}", dp.cost, bf);
            prop_assert!(dp.finished);
            let billed = f64::from(dp.spot_ticks) * spot + f64::from(dp.on_demand_ticks);
            prop_assert!((billed - dp.cost).abs() < 1e-9);
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
                let mut s = JobState::new();
                for t in 0..j.deadline {
                    if s.done >= j.work { break; }
                    let views = [ZoneView { history: &avail[..=t as usize], spot_price: 0.3, region: 0 }];
                    let obs = Observation { tick: t, zones: &views, on_demand_price: 1.0, tick_hours: 1.0, egress_cost: 0.0 };
                    if matches!(s.placement, Placement::Spot(_)) && !views[0].up(1) {
                        s.placement = Placement::Idle;
                        s.booting = 0;
                    }
                    let want = p.decide(&j, &s, &obs);
                    let act = safe(&j, &s, &obs, want);
                    if act == Placement::Idle {
                        s.placement = Placement::Idle;
                        s.booting = 0;
                        continue;
                    }
                    if act != s.placement {
                        s.placement = act;
                        s.booting = j.restart;
                    }
                    if s.booting > 0 { s.booting -= 1; } else { s.done += 1; }
                }
                prop_assert!(s.done >= j.work, "{} missed", p.name());
            }
        }
    }

    #[test]
    fn optimum_waits_for_cheap_spot_when_slack_allows() {
        // Spot comes up at tick 3 and stays; 4 ticks of work, deadline 10, restart 1.
        let avail = [0, 0, 0, 1, 1, 1, 1, 1, 1, 1];
        let prices = [0.3; 10];
        let z = zone(&avail, &prices);
        let out = optimal(job(4, 10, 1), &z, 1.0, 1.0, 0.0);
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
        let out = optimal(job(5, 8, 1), &same, 1.0, 1.0, 10.0);
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
        let out_far = optimal(job(5, 8, 1), &far, 1.0, 1.0, 10.0);
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
