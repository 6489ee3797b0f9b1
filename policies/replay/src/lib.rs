//! The fast replay engine behind `tern simulate`: run deadline policies over windows of real
//! spot traces (read by `tern_sim::trace`) and compare their cost with on-demand only. It
//! lives apart from the simulated cloud, which is only a `Provider`: this crate asks the
//! policies of `tern_policies::deadline` the way the controller does ([`deadline::step`]).
//!
//! A window starts at every stride offset. Online policies see each zone's history up to the
//! current tick only; `optimal` sees the whole window. Everything here is deterministic.
use tern_policies::deadline::{
    self, DeadlinePolicy, Greedy, Job, JobProgress, OnDemandOnly, Placement, Tern, TickView,
    UniformProgress, ZoneFuture, ZoneView,
};

use tern_policies::fleet;
use tern_sim::Trace;

/// A replay that cannot run as asked (the user can fix it by changing arguments).
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("invalid simulation: {reason}")]
    Invalid { reason: String },
}

impl ReplayError {
    /// Always the user's to fix; kept beside the other crates' error classifiers.
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, ReplayError::Invalid { .. })
    }
}

/// The policies replayed here. (`tern simulate` also runs the controller itself in a closed
/// loop, which the `tern` crate owns; its windows are summarised by [`Prepared::summarise`]
/// like these.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyKind {
    OnDemand,
    Greedy,
    UniformProgress,
    Optimal,
    Tern,
    /// A yardstick: `tern` told, before each window, the availability statistics of that
    /// window itself (the history it learns from is the window's own future), then run
    /// online as usual. How close it gets to `optimal` says how much of `tern`'s gap a
    /// perfect model of the rates could close; the rest is knowing when each outage comes.
    Informed,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 5] = [
        PolicyKind::OnDemand,
        PolicyKind::Greedy,
        PolicyKind::UniformProgress,
        PolicyKind::Optimal,
        PolicyKind::Tern,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::OnDemand => "od",
            PolicyKind::Greedy => "greedy",
            PolicyKind::UniformProgress => "up",
            PolicyKind::Optimal => "optimal",
            PolicyKind::Tern => "tern",
            PolicyKind::Informed => "informed",
        }
    }

    fn online(self) -> Option<Box<dyn DeadlinePolicy>> {
        match self {
            PolicyKind::OnDemand => Some(Box::new(OnDemandOnly)),
            PolicyKind::Greedy => Some(Box::new(Greedy)),
            PolicyKind::UniformProgress => Some(Box::new(UniformProgress)),
            PolicyKind::Tern | PolicyKind::Informed => Some(Box::new(Tern::new())),
            PolicyKind::Optimal => None,
        }
    }
}

impl std::str::FromStr for PolicyKind {
    type Err = ReplayError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicyKind::ALL
            .into_iter()
            .chain([PolicyKind::Informed])
            .find(|p| p.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| ReplayError::Invalid {
                reason: format!(
                    "unknown policy '{s}' (expected od, greedy, up, optimal, tern or informed)"
                ),
            })
    }
}

/// A job replayed over one or more zones' traces.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// One trace per zone the job may run in. All must share the tick length.
    pub traces: Vec<Trace>,
    pub work_hours: f64,
    pub deadline_hours: f64,
    pub restart_hours: f64,
    /// $/h per instance. `None`: the first trace's `price_info`, else [`DEFAULT_ON_DEMAND`].
    pub on_demand_price: Option<f64>,
    /// Flat spot $/h used when a trace has no price series. `None`: the trace's `price_info`,
    /// else [`DEFAULT_SPOT_FRACTION`] of on-demand.
    pub spot_price: Option<f64>,
    pub stride_hours: f64,
    /// Dollars to move the checkpoint across regions (size in GB × $/GB).
    pub egress_cost: f64,
    pub nodes: u32,
}

/// How an elastic job runs on fewer than its `nodes` (see [`tern_policies::deadline`]'s model
/// of elastic progress, cost and restarts).
#[derive(Debug, Clone, PartialEq)]
pub struct Elasticity {
    /// Fewest nodes the job runs on (1 ≤ M ≤ nodes; M = nodes is a gang).
    pub min_nodes: u32,
    /// Throughput with `n` nodes relative to all of them, `n = 0..=nodes` (e.g. from the
    /// forecaster); `None` is linear.
    pub relative_throughput: Option<Vec<f64>>,
}

pub use tern_sim::trace::{DEFAULT_ON_DEMAND, DEFAULT_SPOT_FRACTION};

/// Most memory the value tables of one replay may take, over all threads: 4 GiB. A 52-hour
/// deadline on a 1-second-tick trace would ask for tens of GB and abort; it is refused instead.
pub const MAX_TABLE_BYTES: u64 = 4 << 30;

/// One policy on one window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WindowResult {
    pub cost: f64,
    pub finished: bool,
    /// Instance-ticks billed on spot.
    pub spot_ticks: u32,
    /// Instance-ticks billed on on-demand.
    pub on_demand_ticks: u32,
    pub restarts: u32,
    pub moves: u32,
}

/// What one window held at one tick, as billed (for reports).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TickUse {
    /// Tick within the window.
    pub tick: u32,
    /// The spot zone, or for on-demand the zone whose price was billed.
    pub zone: usize,
    pub spot: bool,
    /// Instances held (and billed) at this tick.
    pub held: u32,
    pub price_per_hour: f64,
}

/// One policy over all windows.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The policy's name (`tern`, `controller`…).
    pub policy: &'static str,
    pub windows: usize,
    pub mean_cost_ratio: f64,
    pub p90_cost_ratio: f64,
    pub deadline_misses: usize,
    /// Share of billed instance-ticks that were spot.
    pub spot_share: f64,
    /// Zone moves per window, on average.
    pub mean_moves: f64,
    pub mean_restarts: f64,
    /// Cost ratio of every window, in window order.
    pub ratios: Vec<f64>,
}

/// The scenario resolved onto the tick grid.
#[derive(Debug)]
pub struct Prepared {
    pub job: Job,
    pub tick_hours: f64,
    pub on_demand_price: f64,
    pub egress_cost: f64,
    pub starts: Vec<usize>,
    avail: Vec<Vec<u32>>,
    prices: Vec<Vec<f64>>,
    regions: Vec<usize>,
    /// On-demand $/h per instance of each region: its cheapest zone.
    od_by_region: Vec<f64>,
    /// On-demand $/h per instance of each zone.
    od_by_zone: Vec<f64>,
    /// Cost of on-demand only at exactly C hours: the denominator of every ratio.
    reference: f64,
}

impl Scenario {
    /// A gang job: it needs all `nodes` at once.
    pub fn prepare(&self) -> Result<Prepared, ReplayError> {
        self.prepare_elastic(&Elasticity {
            min_nodes: self.nodes.max(1),
            relative_throughput: None,
        })
    }

    /// A job that may run on `elastic.min_nodes..=nodes` instances.
    pub fn prepare_elastic(&self, elastic: &Elasticity) -> Result<Prepared, ReplayError> {
        let gap = self.checked_gap()?;
        let job = self.job(elastic, gap)?;
        let od_by_zone = self.on_demand_by_zone()?;
        let od = od_by_zone.iter().copied().fold(f64::INFINITY, f64::min);
        let len = self.traces.iter().map(Trace::ticks).min().unwrap_or(0);
        let t_len = job.deadline as usize;
        if len < t_len {
            return Err(invalid(format!(
                "traces hold {:.1} h but the deadline is {} h",
                len as f64 * f64::from(gap) / 3600.0,
                self.deadline_hours
            )));
        }
        let tick_hours = f64::from(gap) / 3600.0;
        let stride = ((self.stride_hours / tick_hours).round() as usize).max(1);
        let starts: Vec<usize> = (0..=len - t_len).step_by(stride).collect();
        let (regions, count) = region_indices(&self.traces);
        let mut od_by_region = vec![f64::INFINITY; count.max(1)];
        for (&g, &p) in regions.iter().zip(&od_by_zone) {
            od_by_region[g] = od_by_region[g].min(p);
        }
        Ok(Prepared {
            reference: self.work_hours * od * f64::from(job.nodes),
            od_by_region,
            od_by_zone,
            job,
            tick_hours,
            on_demand_price: od,
            egress_cost: self.egress_cost.max(0.0),
            starts,
            avail: self
                .traces
                .iter()
                .map(|t| t.available[..len].to_vec())
                .collect(),
            prices: self.spot_prices(len),
            regions,
        })
    }

    /// The traces' one tick length, and the scenario's hours checked.
    fn checked_gap(&self) -> Result<u32, ReplayError> {
        let first = self
            .traces
            .first()
            .ok_or_else(|| invalid("no trace given".into()))?;
        let gap = first.gap_seconds;
        if let Some(t) = self.traces.iter().find(|t| t.gap_seconds != gap) {
            return Err(invalid(format!(
                "{} has {} s ticks but {} has {} s; replay needs one tick length",
                t.source.display(),
                t.gap_seconds,
                first.source.display(),
                gap
            )));
        }
        for (name, v) in [
            ("work", self.work_hours),
            ("deadline", self.deadline_hours),
            ("stride", self.stride_hours),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(invalid(format!("{name} hours must be positive, got {v}")));
            }
        }
        if !(self.restart_hours.is_finite() && self.restart_hours >= 0.0) {
            return Err(invalid(format!(
                "restart hours must be ≥ 0, got {}",
                self.restart_hours
            )));
        }
        if let Some(s) = self.spot_price.filter(|s| !(s.is_finite() && *s >= 0.0)) {
            return Err(invalid(format!(
                "spot price must be a finite $/h ≥ 0, got {s}"
            )));
        }
        Ok(gap)
    }

    /// The job on the tick model; one that cannot meet its deadline even on on-demand is
    /// refused.
    fn job(&self, elastic: &Elasticity, gap: u32) -> Result<Job, ReplayError> {
        let job = Job::from_hours(
            self.work_hours,
            self.deadline_hours,
            self.restart_hours,
            gap,
            self.nodes,
        )
        .elastic(elastic.min_nodes, elastic.relative_throughput.as_deref())
        .map_err(invalid)?;
        if !job.feasible() {
            return Err(invalid(format!(
                "deadline {} h cannot fit {} h of work plus a {} h restart even on on-demand \
                 ({} + {} > {} ticks of {gap} s)",
                self.deadline_hours,
                self.work_hours,
                self.restart_hours,
                job.work,
                job.restart,
                job.deadline
            )));
        }
        Ok(job)
    }

    /// Each zone's own on-demand price (its trace's price_info), unless the flag sets one for
    /// all; the cheapest is the job's on-demand price and the ratios' denominator.
    fn on_demand_by_zone(&self) -> Result<Vec<f64>, ReplayError> {
        let od_by_zone: Vec<f64> = self
            .traces
            .iter()
            .map(|t| {
                self.on_demand_price
                    .or(t.on_demand_price)
                    .unwrap_or(DEFAULT_ON_DEMAND)
            })
            .collect();
        if let Some(bad) = od_by_zone.iter().find(|p| !(p.is_finite() && **p > 0.0)) {
            return Err(invalid(format!(
                "on-demand price must be positive, got {bad}"
            )));
        }
        Ok(od_by_zone)
    }

    /// Spot $/h per tick of each trace: its series, else a flat price (the flag's, the
    /// trace's, else the default fraction of on-demand).
    fn spot_prices(&self, len: usize) -> Vec<Vec<f64>> {
        self.traces
            .iter()
            .map(|t| match &t.prices {
                Some(p) => p[..len].to_vec(),
                None => {
                    let flat = self.spot_price.or(t.spot_price).unwrap_or(
                        self.on_demand_price
                            .or(t.on_demand_price)
                            .unwrap_or(DEFAULT_ON_DEMAND)
                            * DEFAULT_SPOT_FRACTION,
                    );
                    vec![flat; len]
                }
            })
            .collect()
    }
}

fn invalid(reason: String) -> ReplayError {
    ReplayError::Invalid { reason }
}

/// Each trace's region as an index (zones of one region share one), and how many regions.
fn region_indices(traces: &[Trace]) -> (Vec<usize>, usize) {
    let mut names: Vec<&str> = Vec::new();
    let mut regions = Vec::new();
    for t in traces {
        let key = t.region.as_str();
        let idx = match names.iter().position(|r| *r == key) {
            Some(i) => i,
            None => {
                names.push(key);
                names.len() - 1
            }
        };
        regions.push(idx);
    }
    (regions, names.len())
}

impl Prepared {
    /// Spot $/h per trace tick of zone `z`, as the replay bills it.
    pub fn spot_prices(&self, z: usize) -> &[f64] {
        &self.prices[z]
    }

    pub fn windows(&self) -> usize {
        self.starts.len()
    }

    /// Threads [`Prepared::replay`] runs on.
    pub fn threads(&self) -> usize {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, self.windows().max(1))
    }

    /// Bytes of value tables one thread holds for `policies` (an upper bound): `optimal` keeps
    /// deadline × slack × placements f64s, `tern` (deadline + 1) × slack cells of five f64s.
    pub fn table_bytes(&self, policies: &[PolicyKind]) -> u64 {
        let job = &self.job;
        let deadline = u64::from(job.deadline);
        let slack = u64::from(job.slack()) * u64::from(job.unit) + 1;
        let regions = self.regions.iter().max().map_or(1, |r| r + 1) as u64;
        let per_zone = if job.is_elastic() { 2 } else { 1 };
        let placements = 2 * regions + self.avail.len() as u64 * per_zone;
        let mut bytes = 0u64;
        if policies.contains(&PolicyKind::Optimal) {
            bytes = bytes.saturating_add(
                deadline
                    .saturating_mul(slack)
                    .saturating_mul(placements * 8),
            );
        }
        for tern in [PolicyKind::Tern, PolicyKind::Informed] {
            if policies.contains(&tern) {
                bytes =
                    bytes.saturating_add((deadline + 1).saturating_mul(slack).saturating_mul(40));
            }
        }
        bytes
    }

    /// Refuses a replay whose tables would exceed [`MAX_TABLE_BYTES`] on all threads, saying
    /// what to change, instead of letting the allocation abort the process.
    pub fn check_memory(&self, policies: &[PolicyKind]) -> Result<(), ReplayError> {
        let one = self.table_bytes(policies);
        let threads = self.threads() as u64;
        let total = one.saturating_mul(threads);
        if total <= MAX_TABLE_BYTES {
            return Ok(());
        }
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        Err(ReplayError::Invalid {
            reason: format!(
                "the optimal/tern value tables could need up to {:.1} GiB ({threads} thread(s) × \
                 {:.1} GiB: a deadline of {} ticks × {} ticks of slack at {:.0} s a tick), over \
                 the {:.0} GiB limit; use a trace with coarser ticks, a shorter deadline, or \
                 leave optimal and tern out of --policy",
                gib(total),
                gib(one),
                self.job.deadline,
                self.job.slack(),
                self.tick_hours * 3600.0,
                gib(MAX_TABLE_BYTES)
            ),
        })
    }

    /// Replay one online policy over the window starting at trace tick `start`.
    pub fn run_online(&self, policy: &mut dyn DeadlinePolicy, start: usize) -> WindowResult {
        self.run_online_traced(policy, start, None)
    }

    /// [`Prepared::run_online`], recording what was held and billed at each tick into `trace`
    /// (for `tern simulate --report`).
    pub fn run_online_traced(
        &self,
        policy: &mut dyn DeadlinePolicy,
        start: usize,
        trace: Option<&mut Vec<TickUse>>,
    ) -> WindowResult {
        self.run_seeing(policy, start, &self.past(), trace)
    }

    /// One window of `kind` (an online policy object of that kind), informed or not.
    fn run_kind(
        &self,
        kind: PolicyKind,
        policy: &mut dyn DeadlinePolicy,
        start: usize,
        trace: Option<&mut Vec<TickUse>>,
    ) -> WindowResult {
        let seen = if kind == PolicyKind::Informed {
            self.told(start)
        } else {
            self.past()
        };
        self.run_seeing(policy, start, &seen, trace)
    }

    /// What online policies see as history: the trace itself, up to the current tick.
    fn past(&self) -> Seen<'_> {
        Seen {
            avail: self.avail.iter().map(|a| a.as_slice().into()).collect(),
            offset: None,
        }
    }

    /// What [`PolicyKind::Informed`] sees in the window starting at `start`: the window's
    /// ticks twice over, its current tick at `deadline + t`. Everything before the current
    /// tick is the window's own availability, so its counts are the window's statistics;
    /// the current tick is the real one.
    fn told(&self, start: usize) -> Seen<'static> {
        let d = self.job.deadline as usize;
        let avail = self
            .avail
            .iter()
            .map(|a| {
                let w = &a[start..start + d];
                let twice: Vec<u32> = w.iter().chain(w).copied().collect();
                std::borrow::Cow::Owned(twice)
            })
            .collect();
        Seen {
            avail,
            offset: Some(d),
        }
    }

    /// A window of an online policy with `seen` as the history it observes. Capacity, prices
    /// and billing are always the trace's own at `start + t`.
    fn run_seeing(
        &self,
        policy: &mut dyn DeadlinePolicy,
        start: usize,
        seen: &Seen<'_>,
        mut trace: Option<&mut Vec<TickUse>>,
    ) -> WindowResult {
        let job = &self.job;
        let mut s = JobProgress::new();
        let mut out = WindowResult::default();
        let (mut starts, mut last_spot) = (0u32, None);
        // Region of the current on-demand run (the cheapest net of moving the checkpoint).
        let mut od_region = 0usize;
        let mut views = Vec::with_capacity(self.avail.len());
        for t in 0..job.deadline {
            if s.done >= job.total() {
                break;
            }
            let abs = start + t as usize;
            let at = seen.offset.map_or(abs, |o| o + t as usize);
            views.clear();
            views.extend(seen.avail.iter().zip(&self.prices).zip(&self.regions).map(
                |((a, p), &region)| ZoneView {
                    history: &a[..=at],
                    spot_price: p[abs],
                    region,
                },
            ));
            let obs = TickView {
                tick: t,
                zones: &views,
                on_demand_price: self.on_demand_price,
                tick_hours: self.tick_hours,
                egress_cost: self.egress_cost,
            };
            if let Placement::Spot(z) = s.placement
                && !views[z].up(job.min_nodes)
            {
                s.placement = Placement::Idle;
                s.booting = 0;
            }
            let act = deadline::step(policy, job, &s, &obs).placement;
            if act == Placement::Idle {
                s.placement = Placement::Idle;
                s.booting = 0;
                continue;
            }
            if act != s.placement {
                starts += 1;
                if act == Placement::OnDemand {
                    od_region = self.on_demand_region(&s);
                }
                self.start_run(act, od_region, t, &mut s, &mut out, &mut last_spot);
            }
            let (spot_zone, held, price) = self.bill_tick(act, od_region, abs, &mut out);
            if let Some(trace) = trace.as_deref_mut() {
                trace.push(TickUse {
                    tick: t,
                    zone: spot_zone.unwrap_or_else(|| self.on_demand_zone(od_region)),
                    spot: spot_zone.is_some(),
                    held,
                    price_per_hour: price,
                });
            }
            job.advance(&mut s, act, &views);
        }
        out.finished = s.done >= job.total();
        out.restarts = starts.saturating_sub(1);
        out
    }

    /// A new run at tick `t` on `act` (spot in a zone, or on-demand in region `od_region`):
    /// egress when the checkpoint changes region, a move when spot changes zone, and the boot.
    fn start_run(
        &self,
        act: Placement,
        od_region: usize,
        t: u32,
        s: &mut JobProgress,
        out: &mut WindowResult,
        last_spot: &mut Option<usize>,
    ) {
        let region = match act {
            Placement::Spot(z) => self.regions[z],
            _ => od_region,
        };
        if s.checkpoint_region.is_some_and(|from| from != region) {
            out.cost += self.egress_cost;
        }
        if let Placement::Spot(z) = act {
            if last_spot.is_some_and(|l| l != z) {
                out.moves += 1;
                s.last_move = Some(t);
            }
            *last_spot = Some(z);
        }
        // The checkpoint lives where the job last ran.
        s.checkpoint_region = Some(region);
        s.placement = act;
        s.booting = self.job.restart;
        s.started_at = t;
        s.working = 0;
    }

    /// Bill trace tick `abs` on `act`: every node held, min(available, K) on spot, K on
    /// on-demand. The spot zone (if any), the nodes held and the $/h each.
    fn bill_tick(
        &self,
        act: Placement,
        od_region: usize,
        abs: usize,
        out: &mut WindowResult,
    ) -> (Option<usize>, u32, f64) {
        let held = match act {
            Placement::Spot(z) => self.job.held(self.avail[z][abs]),
            _ => self.job.nodes,
        };
        let (spot_zone, price) = match act {
            Placement::Spot(z) => {
                out.spot_ticks += held;
                (Some(z), self.prices[z][abs])
            }
            _ => {
                out.on_demand_ticks += held;
                (None, self.od_by_region[od_region])
            }
        };
        let k = f64::from(held) * self.tick_hours;
        out.cost += price * k;
        (spot_zone, held, price)
    }

    /// Every window of an online `policy`, with what it held at each tick (`None` for
    /// `optimal`, which is not an online policy). One policy
    /// object for all windows, reset between them, as in [`Prepared::replay`].
    pub fn trace_windows(
        &self,
        policy: PolicyKind,
    ) -> Option<Vec<(usize, WindowResult, Vec<TickUse>)>> {
        let mut p = policy.online()?;
        Some(
            self.starts
                .iter()
                .map(|&start| {
                    p.reset();
                    let mut ticks = Vec::new();
                    let r = self.run_kind(policy, p.as_mut(), start, Some(&mut ticks));
                    (start, r, ticks)
                })
                .collect(),
        )
    }

    /// The zone of `region` whose on-demand price is the region's (its cheapest).
    pub fn on_demand_zone(&self, region: usize) -> usize {
        (0..self.regions.len())
            .filter(|&z| self.regions[z] == region)
            .min_by(|&a, &b| self.od_by_zone[a].total_cmp(&self.od_by_zone[b]))
            .unwrap_or(0)
    }

    /// On-demand $/h per instance of zone `z`.
    pub fn on_demand_price_of(&self, z: usize) -> f64 {
        self.od_by_zone[z]
    }

    /// The region an on-demand start at window tick `t` runs in: the one whose cheapest zone
    /// costs least for the work left, net of moving the checkpoint there (egress).
    fn on_demand_region(&self, s: &JobProgress) -> usize {
        let left = f64::from(self.job.ticks_left(s.done).max(1))
            * f64::from(self.job.nodes)
            * self.tick_hours;
        let options = self.od_by_region.iter().enumerate().map(|(g, &price)| {
            let away = s.checkpoint_region.is_some_and(|c| c != g);
            (price, away)
        });
        fleet::cheapest_on_demand(options, left, self.egress_cost).unwrap_or(0)
    }

    /// On-demand $/h per instance of each zone.
    pub fn on_demand_prices(&self) -> &[f64] {
        &self.od_by_zone
    }

    /// The omniscient optimum of the window starting at trace tick `start`.
    pub fn run_optimal(&self, start: usize) -> WindowResult {
        let end = start + self.job.deadline as usize;
        let zones: Vec<ZoneFuture<'_>> = self
            .avail
            .iter()
            .zip(&self.prices)
            .zip(&self.regions)
            .map(|((a, p), &region)| ZoneFuture {
                available: &a[start..end],
                spot_price: &p[start..end],
                region,
            })
            .collect();
        let o = deadline::optimal_priced(
            &self.job,
            &zones,
            &self.od_by_region,
            self.tick_hours,
            self.egress_cost,
        );
        WindowResult {
            cost: o.cost,
            finished: o.finished,
            spot_ticks: o.spot_ticks,
            on_demand_ticks: o.on_demand_ticks,
            restarts: o.restarts,
            moves: o.moves,
        }
    }

    /// One window of one policy.
    pub fn run_window(&self, policy: PolicyKind, start: usize) -> WindowResult {
        match policy.online() {
            Some(mut p) => self.run_kind(policy, p.as_mut(), start, None),
            None => self.run_optimal(start),
        }
    }
}

/// The availability an online policy observes as history, per zone, and where the current
/// tick sits in it (`None`: at the trace tick itself).
struct Seen<'a> {
    avail: Vec<std::borrow::Cow<'a, [u32]>>,
    offset: Option<usize>,
}

mod parallel;
pub use parallel::percentile;

#[cfg(test)]
mod tests;
