//! The omniscient optimum: a dynamic programme that sees a whole window of availability and
//! prices in advance. It is the yardstick `tern simulate` divides by, not a policy; it lives
//! apart from the online policies because it shares none of their machinery, only the tick
//! model of [`Job`].

use super::{INF, Job};

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
    /// On-demand $ per tick of the whole job, per region (the cheapest zone of each).
    od_tick: Vec<f64>,
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
    /// `on_demand` is the on-demand $/h per instance of each region (index = region), the
    /// cheapest zone of it; a region missing from it costs the last one given.
    pub fn new(
        job: &Job,
        zones: &'a [ZoneFuture<'a>],
        on_demand: &[f64],
        tick_hours: f64,
        egress_cost: f64,
    ) -> Optimum<'a> {
        let job = job.clone();
        let cheapest = on_demand.iter().copied().fold(f64::INFINITY, f64::min);
        let on_demand_price = if cheapest.is_finite() { cheapest } else { 0.0 };
        let t_len = job.deadline as usize;
        let run = zones.iter().map(|z| usable_runs(&job, z, t_len)).collect();
        let cum = zones
            .iter()
            .map(|z| spot_dollars(&job, z, t_len, on_demand_price, tick_hours))
            .collect();
        let held = zones.iter().map(|z| held_prefix(&job, z, t_len)).collect();
        let gain = zones.iter().map(|z| spot_gains(&job, z, t_len)).collect();
        let regions = zones.iter().map(|z| z.region + 1).max().unwrap_or(1);
        let od_tick = (0..regions)
            .map(|g| {
                let p = on_demand.get(g).or(on_demand.last()).copied();
                p.unwrap_or(on_demand_price) * f64::from(job.nodes) * tick_hours
            })
            .collect();
        Optimum {
            od_tick,
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

    /// Value of `n` at tick `t` with slack `sigma` (may be negative or past the end).
    fn value(&self, n: Node, t: usize, sigma: i64) -> f64 {
        self.lookup(&self.table, self.node_index(n), t, sigma)
    }

    /// [`Optimum::value`] by node index in `table`, which [`Optimum::solve`] is still filling.
    /// Negative slack cannot finish; slack that covers all remaining time means the work is done.
    fn lookup(&self, table: &[f64], i: usize, t: usize, sigma: i64) -> f64 {
        let remaining = (i64::from(self.job.deadline) - t as i64) * i64::from(self.job.unit);
        if sigma < 0 {
            return INF;
        }
        if remaining - sigma <= 0 {
            return 0.0;
        }
        table[(t * self.width + sigma as usize) * self.nodes() + i]
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
        let u = i64::from(self.job.unit);
        match n {
            Node::None(g) => self.stopped_options(g, t, sigma, f),
            Node::Od(g) => {
                f(self.od_tick[g], n, t + 1, sigma, Edge::Run { spot: false });
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

    /// [`Optimum::options`] with no instance, checkpoint in region `g`: idle a tick, or boot
    /// on-demand or spot in a zone whose capacity outlasts the boot.
    fn stopped_options(
        &self,
        g: usize,
        t: usize,
        sigma: i64,
        f: &mut impl FnMut(f64, Node, usize, i64, Edge),
    ) {
        let r = self.job.restart as usize;
        let u = i64::from(self.job.unit);
        f(0.0, Node::None(g), t + 1, sigma - u, Edge::Idle);
        // On-demand in any region; another region than the checkpoint's pays egress.
        for h in 0..self.regions {
            let egress = if h != g { self.egress } else { 0.0 };
            f(
                self.od_tick[h] * r as f64 + egress,
                Node::Od(h),
                t + r,
                sigma - r as i64 * u,
                Edge::Boot { spot: None },
            );
        }
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

    /// Fill the value table backwards in time. This is the hot loop of `tern simulate`, so it is
    /// written out per placement instead of going through [`Optimum::options`] (which the
    /// forward pass uses, and which the brute-force test checks against).
    fn solve(&mut self) {
        let t_len = self.job.deadline as usize;
        let u = self.job.unit as usize;
        // Taken out of `self` so the fill can read the rest of `self` while writing it.
        let mut table = std::mem::take(&mut self.table);
        table.clear();
        table.resize(t_len * self.width * self.nodes(), INF);
        for t in (0..t_len).rev() {
            for sigma in 0..self.width.min((t_len - t) * u) {
                let base = (t * self.width + sigma) * self.nodes();
                let s = sigma as i64;
                // Stopped first: the running placements may stop, and read its value.
                self.fill_stopped(&mut table, base, t, s);
                self.fill_on_demand(&mut table, base, t, s);
                self.fill_spot(&mut table, base, t, s);
            }
        }
        self.table = table;
    }

    /// `Node::None` in every region: idle a tick, or start on-demand or spot (a whole boot).
    fn fill_stopped(&self, table: &mut [f64], base: usize, t: usize, s: i64) {
        let (gs, zs) = (self.regions, self.zones.len());
        let r = self.job.restart as usize;
        let u = i64::from(self.job.unit);
        let ru = r as i64 * u;
        // Spot boots land in `Fresh` for elastic jobs.
        let landing = if self.job.is_elastic() {
            2 * gs + zs
        } else {
            2 * gs
        };
        for g in 0..gs {
            let mut best = self.lookup(table, g, t + 1, s - u);
            for h in 0..gs {
                let egress = if h != g { self.egress } else { 0.0 };
                let boot = self.od_tick[h] * r as f64 + egress;
                best = best.min(boot + self.lookup(table, gs + h, t + r, s - ru));
            }
            for (z, zone) in self.zones.iter().enumerate() {
                if self.run[z][t] as usize >= r {
                    let egress = if zone.region != g { self.egress } else { 0.0 };
                    let c = self.cum[z][t + r] - self.cum[z][t] + egress;
                    best = best.min(c + self.lookup(table, landing + z, t + r, s - ru));
                }
            }
            table[base + g] = best;
        }
    }

    /// `Node::Od` in every region: run a tick, or stop.
    fn fill_on_demand(&self, table: &mut [f64], base: usize, t: usize, s: i64) {
        let gs = self.regions;
        for g in 0..gs {
            let run = self.od_tick[g] + self.lookup(table, gs + g, t + 1, s);
            table[base + gs + g] = run.min(table[base + g]);
        }
    }

    /// `Node::Spot` (and `Node::Fresh` for elastic jobs) in every zone: work a tick while the
    /// zone is up, or stop.
    fn fill_spot(&self, table: &mut [f64], base: usize, t: usize, s: i64) {
        let (gs, zs) = (self.regions, self.zones.len());
        let u = i64::from(self.job.unit);
        for (z, zone) in self.zones.iter().enumerate() {
            let stop = table[base + zone.region];
            let up = self.run[z][t] > 0;
            let c = self.cum[z][t + 1] - self.cum[z][t];
            let [first, later] = self.gain[z][t];
            table[base + 2 * gs + z] = if up {
                (c + self.lookup(table, 2 * gs + z, t + 1, s - (u - i64::from(later)))).min(stop)
            } else {
                stop
            };
            if self.job.is_elastic() {
                table[base + 2 * gs + zs + z] = if up {
                    (c + self.lookup(table, 2 * gs + z, t + 1, s - (u - i64::from(first))))
                        .min(stop)
                } else {
                    stop
                };
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
        self.replay(start, sigma0, &mut out);
        out.finished = true;
        out
    }

    /// Follow optimal choices from `start` until the work is done, counting into `out`.
    fn replay(&self, start: Node, sigma0: i64, out: &mut Outcome) {
        let (mut n, mut t, mut sigma) = (start, 0usize, sigma0);
        let (mut starts, mut last_spot) = (0u32, None);
        let u = i64::from(self.job.unit);
        while (i64::from(self.job.deadline) - t as i64) * u - sigma > 0 {
            let Some((m, t2, s2, e)) = self.optimal_option(n, t, sigma) else {
                break;
            };
            if let Edge::Boot { spot } = e {
                starts += 1;
                self.count_boot(out, t, spot, &mut last_spot);
            }
            self.count_run(out, n, t, e);
            (n, t, sigma) = (m, t2, s2);
        }
        // The first start is not a restart.
        out.restarts = starts.saturating_sub(1);
    }

    /// The first choice at a state that attains its value (the table's argmin).
    fn optimal_option(&self, n: Node, t: usize, sigma: i64) -> Option<(Node, usize, i64, Edge)> {
        let here = self.value(n, t, sigma);
        let mut pick = None;
        self.options(n, t, sigma, &mut |c, m, t2, s2, e| {
            if pick.is_none()
                && (c + self.value(m, t2, s2) - here).abs() <= 1e-9 * (1.0 + here.abs())
            {
                pick = Some((m, t2, s2, e));
            }
        });
        pick
    }

    /// Bills a boot at tick `t`: the whole overhead, on spot in zone `spot` or on on-demand.
    fn count_boot(
        &self,
        out: &mut Outcome,
        t: usize,
        spot: Option<usize>,
        last: &mut Option<usize>,
    ) {
        let r = self.job.restart;
        match spot {
            Some(z) => {
                let held = self.held[z][t + r as usize] - self.held[z][t];
                out.spot_ticks += held as u32;
                if last.is_some_and(|l| l != z) {
                    out.moves += 1;
                }
                *last = Some(z);
            }
            None => out.on_demand_ticks += r * self.job.nodes,
        }
    }

    /// Bills a working tick at `t` from placement `n`.
    fn count_run(&self, out: &mut Outcome, n: Node, t: usize, e: Edge) {
        match e {
            Edge::Run { spot: true } => {
                if let Node::Spot(z) | Node::Fresh(z) = n {
                    out.spot_ticks += (self.held[z][t + 1] - self.held[z][t]) as u32;
                }
            }
            Edge::Run { spot: false } => out.on_demand_ticks += self.job.nodes,
            Edge::Boot { .. } | Edge::Idle | Edge::Stop => {}
        }
    }
}

/// The omniscient optimum of one window (it knows the future; a yardstick, not a policy),
/// with one on-demand price everywhere.
pub fn optimal(
    job: &Job,
    zones: &[ZoneFuture<'_>],
    on_demand_price: f64,
    tick_hours: f64,
    egress_cost: f64,
) -> Outcome {
    optimal_priced(job, zones, &[on_demand_price], tick_hours, egress_cost)
}

/// [`optimal`] with an on-demand price per region (`on_demand[g]`: the cheapest zone of
/// region `g`); starting on-demand in another region than the checkpoint's pays egress.
pub fn optimal_priced(
    job: &Job,
    zones: &[ZoneFuture<'_>],
    on_demand: &[f64],
    tick_hours: f64,
    egress_cost: f64,
) -> Outcome {
    Optimum::new(job, zones, on_demand, tick_hours, egress_cost).run()
}

/// Whether zone `z` can hold the job at tick `t` (at least `min_nodes` available).
fn usable(job: &Job, z: &ZoneFuture<'_>, t: usize) -> bool {
    z.available.get(t).is_some_and(|&n| n >= job.min_nodes)
}

/// Instances billed at a usable tick; a gang always holds K (its figures stay exactly those of
/// the gang model, whose prefix sums add K on every tick).
fn billed(job: &Job, z: &ZoneFuture<'_>, t: usize) -> u32 {
    match z.available.get(t) {
        Some(&n) if n >= job.min_nodes => n.min(job.nodes),
        _ => job.nodes,
    }
}

/// Consecutive usable ticks from each tick of the window (one extra 0 at the end).
fn usable_runs(job: &Job, z: &ZoneFuture<'_>, t_len: usize) -> Vec<u32> {
    let mut run = vec![0u32; t_len + 1];
    for t in (0..t_len).rev() {
        if usable(job, z, t) {
            run[t] = run[t + 1] + 1;
        }
    }
    run
}

/// Prefix sums of spot dollars per tick (held nodes × price; on-demand price where the trace
/// has no spot price).
fn spot_dollars(
    job: &Job,
    z: &ZoneFuture<'_>,
    t_len: usize,
    on_demand_price: f64,
    tick_hours: f64,
) -> Vec<f64> {
    let k = f64::from(job.nodes);
    let mut c = vec![0.0; t_len + 1];
    for t in 0..t_len {
        let p = z.spot_price.get(t).copied().unwrap_or(on_demand_price);
        let n = if job.is_elastic() {
            f64::from(billed(job, z, t))
        } else {
            k
        };
        c[t + 1] = c[t] + p * n * tick_hours;
    }
    c
}

/// Prefix sums of spot instances held per tick (instance-ticks billed).
fn held_prefix(job: &Job, z: &ZoneFuture<'_>, t_len: usize) -> Vec<u64> {
    let mut c = vec![0u64; t_len + 1];
    for t in 0..t_len {
        c[t + 1] = c[t] + u64::from(billed(job, z, t));
    }
    c
}

/// Progress units of a working spot tick at each tick: `[first working tick of a run, later
/// tick]`. Depends only on the zone and the tick, since the working count looks back just one
/// restart overhead, all of it inside the run.
fn spot_gains(job: &Job, z: &ZoneFuture<'_>, t_len: usize) -> Vec<[u32; 2]> {
    let r = job.restart as usize;
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
}
