//! tern's own deadline policy: a learned two-state availability model per zone, an expected
//! cost-to-go table solved for it, and the migration rule for moves between zones. Kept in one
//! place because the three only make sense together: the table is solved for the model the
//! counts give, and the decision reads both.

use super::{DeadlinePolicy, INF, Job, JobProgress, Placement, TickView, Why};
use crate::migrate::{self, MoveCandidate, MoveRule};

mod counts;
use counts::Counts;

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
    /// Hazard of a start on capacity of unknown age: the young-run hazard, but never below the
    /// established one. A later start in the table must not look safer than starting on
    /// established capacity now, or waiting would win by an artefact of the two estimates
    /// (where young runs happened to last better) and burn slack for nothing.
    fn boot_hazard(&self) -> f64 {
        self.hb.max(self.h)
    }

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
        let prob = |p: f64| snap(clamp_rate(p)).min(1.0 - 1e-6);
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
                        .min(self.start_spot(&m, m.boot_hazard(), rem, sigma));
                    cell[SP] = self.spot_continue(&m, rem, sigma).min(cell[N1]);
                }
                cell[O0] = self.od_continue(&m, 0, rem, sigma).min(cell[N0]);
                cell[O1] = self.od_continue(&m, 1, rem, sigma).min(cell[N1]);
                self.v[rem as usize * self.width + sigma as usize] = cell;
            }
        }
    }
}

/// Re-solve `table` for `raw` (snapped) when it does not cover the state `(tick, rem, sigma)`,
/// or when the model drifted past the hysteresis and the last solve (`solved_at`) is an eighth
/// of the deadline old; returns the model the table was solved for.
fn refresh(
    table: &mut ValueTable,
    solved_at: &mut Option<u32>,
    job: &Job,
    raw: Model,
    (tick, rem, sigma): (u32, i64, i64),
) -> Model {
    let model = raw.snapped();
    let spacing = (job.deadline / 8).max(1);
    let covers = rem.max(0) as usize <= table.max_r
        && (sigma.max(0) as usize) < table.width
        && table.restart == job.restart.max(1) as usize;
    let stale = match (table.model, *solved_at) {
        (None, _) => true,
        _ if !covers => true,
        (Some(old), None) => old != model,
        (Some(old), Some(at)) => old.far_from(&raw) && tick >= at + spacing,
    };
    if solved_at.is_none() {
        *solved_at = Some(tick);
    }
    if stale {
        *solved_at = Some(tick);
        table.solve(model, job.restart, rem.max(0) as u32, sigma.max(0) as u32);
    }
    table.model.unwrap_or(model)
}

/// A rate kept inside (0, 1), so the table's logs and mixes stay finite.
fn clamp_rate(p: f64) -> f64 {
    p.clamp(1e-6, 1.0 - 1e-6)
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
/// trusted nor written off. The same model of "some zone has capacity", which decides whether
/// waiting pays, is learned from that series itself, not multiplied out of the zones' models:
/// zones of one cloud lose capacity together, and treating them as independent made waiting
/// look far safer than it was (9 AWS V100 zones, D = 52 h: 1.08 → 1.05 × the optimum). Solve
/// the expected cost-to-go of the job over (remaining time, slack)
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
/// cost per tick (price plus hazard × restart, plus the checkpoint's egress where the zone is in
/// another region, spread over the run a start there buys), and a running job moves only when
/// [`migrate::decide`] says the saving beats the move (restart, egress) by the threshold, with a
/// deadline margin and a cool-down; the saving counts the restarts each zone is expected to
/// cost, with the hazard gap shrunk by one standard error each side (hysteresis that scales
/// with how little the counts know). The table is re-solved only when the learned model drifts.
/// A start in a dearer zone while a cheaper one is down waits a tick instead, as long as the
/// slack a restart burns is worth less than a tick of the price gap and a one-tick look ahead
/// says so ([`Tern::wait_for_cheaper`]): with time to spare, the cheaper zone is often back
/// before the dearer start would have booted.
/// With no past at all (one tick of history), it waits rather than start on-demand while
/// waiting is safe: that choice would be the prior's word against itself.
/// No constant here is fitted to a particular trace: the only scales are the job's own
/// (deadline, restart overhead), the prices, and the one-hour prior.
#[derive(Debug, Default)]
pub struct Tern {
    counts: Vec<Counts>,
    /// The same statistics for "some zone has capacity", counted on that series itself: zones
    /// of one cloud lose capacity together far more often than independent zones would.
    any: Counts,
    /// Length of history already folded into `counts`.
    seen: usize,
    table: ValueTable,
    /// Tick of the last solve in this window; re-solving waits at least an eighth of the
    /// deadline. `None` at the start of a window.
    solved_at: Option<u32>,
    /// A table for one zone alone (a cheaper zone that is down), and its last solve: what a
    /// start there would cost once it is back ([`Tern::wait_for_cheaper`]).
    alone: ValueTable,
    alone_solved_at: Option<u32>,
    rule: Option<MoveRule>,
    /// The costs behind the last decision ([`DeadlinePolicy::why`]).
    last: Option<Why>,
}

impl Tern {
    pub fn new() -> Tern {
        Tern::default()
    }

    /// Fold history ticks not yet seen into the per-zone counts.
    fn learn(&mut self, job: &Job, obs: &TickView<'_>) {
        let len = obs.zones.iter().map(|z| z.history.len()).min().unwrap_or(0);
        if self.counts.len() != obs.zones.len() {
            self.start_counting(obs);
        }
        let half_life = f64::from(job.deadline.max(1));
        let forget = 0.5f64.powf(1.0 / half_life);
        let k = job.min_nodes;
        let ups = |i: usize, z: usize| obs.zones[z].history[i] >= k;
        let any_up = |i: usize| (0..obs.zones.len()).any(|z| ups(i, z));
        if self.seen == 0 && len > 0 {
            for (z, c) in self.counts.iter_mut().enumerate() {
                c.age = u32::from(ups(0, z));
            }
            self.any.age = u32::from(any_up(0));
        }
        for i in self.seen.max(1)..len {
            let n_up = any_up(i);
            for (z, c) in self.counts.iter_mut().enumerate() {
                c.decay(forget);
                c.observe(ups(i - 1, z), ups(i, z), job.restart, n_up);
            }
            self.any.decay(forget);
            self.any.observe(any_up(i - 1), n_up, job.restart, n_up);
        }
        self.seen = self.seen.max(len);
    }

    /// Fresh counts for every zone, with a prior worth one hour of ticks.
    fn start_counting(&mut self, obs: &TickView<'_>) {
        let prior = (1.0 / obs.tick_hours).max(1.0);
        self.counts = vec![
            Counts {
                prior,
                ..Counts::default()
            };
            obs.zones.len()
        ];
        self.any = Counts {
            prior,
            ..Counts::default()
        };
        self.seen = 0;
    }

    /// Expected $ per progress tick of spot in zone `z`: its price, plus what each expected
    /// restart costs: the zone's price while a new instance boots, and `lost`, what the slack
    /// the boot burns is worth ([`Tern::slack_value`]: nothing with time to spare, up to the
    /// on-demand ending when slack is short). A fixed price per restart got one end wrong:
    /// at on-demand it made noisy hazard gaps between zones of one price look worth a move
    /// with slack to spare, at the spot price it sent tight jobs to cheap, flaky zones.
    /// A start in another region than the checkpoint's also pays its egress once, spread over
    /// the ticks that start is expected to run: until the zone's next loss (1/h) or the end
    /// of the work, whichever comes first. Without it a restart after a preemption ranked
    /// zones as if the checkpoint were everywhere.
    fn zone_score(
        &self,
        job: &Job,
        state: &JobProgress,
        obs: &TickView<'_>,
        z: usize,
        lost: f64,
    ) -> f64 {
        let h = self.counts.get(z).map_or(0.5, Counts::hazard);
        let left = f64::from(job.ticks_left(state.done).max(1));
        let per_tick = h.max(1.0 / left);
        self.score_at(job, obs, z, h, lost) + egress_to(state, obs, z) * per_tick
    }

    /// [`Tern::zone_score`] at hazard `h`.
    fn score_at(&self, job: &Job, obs: &TickView<'_>, z: usize, h: f64, lost: f64) -> f64 {
        let k = f64::from(job.nodes) * obs.tick_hours;
        let boot = f64::from(job.restart) * obs.zones[z].spot_price * k;
        obs.zones[z].spot_price * k + h * (boot + lost)
    }

    /// The model of zone `z` alone: its own hazards and recovery, no other zone to fall back
    /// on. With one zone this is the pooled model; with several, [`Tern::pooled_model`]
    /// takes "some zone is up" from its own series instead.
    fn zone_model(&self, job: &Job, obs: &TickView<'_>, z: usize) -> Model {
        let k = f64::from(job.nodes) * obs.tick_hours;
        let c = self.counts.get(z).copied().unwrap_or_default();
        Model {
            h: clamp_rate(c.hazard_established()),
            hb: clamp_rate(c.hazard_young()),
            rho: 0.0,
            hu: clamp_rate(c.hazard()),
            qu: clamp_rate(c.recovery()),
            spot_tick: obs.zones[z].spot_price * k,
            od_tick: obs.on_demand_price * k,
        }
    }

    fn pooled_model(&self, job: &Job, obs: &TickView<'_>, best: usize) -> Model {
        let alone = self.zone_model(job, obs, best);
        if self.counts.len() == 1 {
            return alone;
        }
        let c = self.counts.get(best).copied().unwrap_or_default();
        Model {
            rho: c.other_up_after_loss().clamp(0.0, 1.0),
            hu: clamp_rate(self.any.hazard()),
            qu: clamp_rate(self.any.recovery()),
            ..alone
        }
    }

    /// Which zones are up now, which score best, and whether the job's spot zone still holds.
    /// `lost` prices the slack of a restart, as in [`Tern::zone_score`].
    fn zones(&self, job: &Job, state: &JobProgress, obs: &TickView<'_>, lost: f64) -> Zones {
        let up: Vec<usize> = (0..obs.zones.len())
            .filter(|&z| obs.zones[z].up(job.min_nodes))
            .collect();
        let best_up = self.best_zone(job, state, obs, up.iter().copied(), lost);
        let best_any = self
            .best_zone(job, state, obs, 0..obs.zones.len(), lost)
            .unwrap_or(0);
        let here = match state.placement {
            Placement::Spot(z) if up.contains(&z) => Some(z),
            _ => None,
        };
        Zones {
            any_up: !up.is_empty(),
            best_up,
            best_any,
            here,
        }
    }

    /// The zone of `zones` with the least [`Tern::zone_score`] (the first one on ties).
    fn best_zone(
        &self,
        job: &Job,
        state: &JobProgress,
        obs: &TickView<'_>,
        zones: impl Iterator<Item = usize>,
        lost: f64,
    ) -> Option<usize> {
        zones.min_by(|&a, &b| {
            self.zone_score(job, state, obs, a, lost)
                .total_cmp(&self.zone_score(job, state, obs, b, lost))
        })
    }

    /// Re-solve the value table for `raw` (snapped) when it does not cover this state, or when
    /// the model drifted past the hysteresis and the last solve is an eighth of the deadline
    /// old; returns the model the table was solved for.
    fn refresh_table(
        &mut self,
        job: &Job,
        obs: &TickView<'_>,
        raw: Model,
        rem: i64,
        sigma: i64,
    ) -> Model {
        let at = (obs.tick, rem, sigma);
        refresh(&mut self.table, &mut self.solved_at, job, raw, at)
    }

    /// The action with the least expected cost under `m`: keep the current placement, start
    /// spot in the best zone, start on-demand, or wait (ties go in that order).
    fn choose(
        &self,
        job: &Job,
        state: &JobProgress,
        zones: &Zones,
        m: &Model,
        rem: i64,
        sigma: i64,
    ) -> (Placement, Why) {
        let t = &self.table;
        let a = usize::from(zones.any_up);
        let idle = t.idle(m, a, rem, sigma);
        let start_od = t.start_od(m, a, rem, sigma);
        let start_spot = self.start_spot_cost(job, state, zones.best_up, m, rem, sigma);
        let keep = match state.placement {
            Placement::Spot(_) if zones.here.is_some() => t.spot_continue(m, rem, sigma),
            Placement::OnDemand => t.od_continue(m, a, rem, sigma),
            _ => INF,
        };
        let why = Why {
            keep,
            spot: start_spot,
            on_demand: start_od,
            wait: idle,
            egress: 0.0,
            moved: None,
        };
        let choice = if keep.is_finite() && keep <= idle.min(start_od).min(start_spot) {
            state.placement
        } else if start_spot.is_finite() && start_spot <= idle.min(start_od) {
            zones.best_up.map_or(Placement::Idle, Placement::Spot)
        } else if start_od <= idle {
            Placement::OnDemand
        } else {
            Placement::Idle
        };
        (choice, why)
    }

    /// Expected cost of starting spot in zone `best_up` now.
    fn start_spot_cost(
        &self,
        job: &Job,
        state: &JobProgress,
        best_up: Option<usize>,
        m: &Model,
        rem: i64,
        sigma: i64,
    ) -> f64 {
        let Some(z) = best_up else { return INF };
        // Capacity that has lasted longer than a boot is as safe as a running instance; fresh
        // capacity carries the young-run hazard.
        let c = self.counts.get(z).copied().unwrap_or_default();
        let fresh = c.age <= job.restart;
        // Hysteresis against blips: a job on on-demand does not leave it for fresh capacity.
        if fresh && state.placement == Placement::OnDemand {
            INF
        } else {
            self.table
                .start_spot(m, if fresh { m.boot_hazard() } else { m.h }, rem, sigma)
        }
    }

    /// [`Tern::slack_value`], bounded by finishing the work left on on-demand instead of
    /// spot: where one more restart could miss the deadline, the table calls it priceless,
    /// but ranking zones needs a number.
    fn restart_value(
        &self,
        job: &Job,
        state: &JobProgress,
        m: &Model,
        rem: i64,
        sigma: i64,
    ) -> f64 {
        let cap = f64::from(job.ticks_left(state.done)) * (m.od_tick - m.spot_tick).max(0.0);
        self.slack_value(job, m, rem, sigma).min(cap)
    }

    /// What the `restart` ticks of slack a restart burns are worth: the expected cost to finish
    /// the same work on spot with that much less time, minus with it (the value table's own
    /// price of slack: nothing with time to spare, growing as on-demand becomes the likely
    /// ending). Only the slack: the boot's billed hours are priced apart, by whoever calls.
    /// (Comparing states `restart` ticks on, one with that work done, also charged the work
    /// again, so every restart was billed twice and cheap zones looked dearer than they are.)
    fn slack_value(&self, job: &Job, m: &Model, rem: i64, sigma: i64) -> f64 {
        let r = i64::from(job.restart);
        let t = &self.table;
        let with = t.spot_running(m, rem, sigma);
        let without = t.spot_running(m, rem - r, sigma - r);
        if with.is_finite() && without.is_finite() {
            (without - with).max(0.0)
        } else {
            INF
        }
    }

    /// Whether to wait a tick for zone `c`, cheaper than `b` and down now, rather than start in
    /// `b` at `start_b` (the expected cost of that start). Only while the slack a restart burns
    /// (`lost`) is worth less than one tick of the price gap: with time to spare, a start in
    /// the dearer zone means paying its price until a move back (a restart) or the end, where
    /// the cheaper zone is often back within minutes. The wait is judged one tick ahead: `c`
    /// back (its recovery rate, one standard error lower, so a zone seldom or never seen to
    /// come back is not waited for), a start there, priced by a table solved for `c` alone;
    /// else a start in `b`, one tick of slack poorer. (Judging the whole wait in `c`'s table alone,
    /// with on-demand as its only fallback, waited too long on tight deadlines: 13 synthetic
    /// H100 zones, D = 52 h, 1.48 → 1.94 × the optimum.)
    #[allow(clippy::too_many_arguments)]
    fn wait_for_cheaper(
        &mut self,
        job: &Job,
        state: &JobProgress,
        obs: &TickView<'_>,
        m: &Model,
        (b, c): (usize, usize),
        lost: f64,
        start_b: f64,
        (rem, sigma): (i64, i64),
    ) -> bool {
        let k = f64::from(job.nodes) * obs.tick_hours;
        let gap = (obs.zones[b].spot_price - obs.zones[c].spot_price) * k;
        if gap <= 0.0 || lost >= gap || obs.zones[c].up(job.min_nodes) {
            return false;
        }
        let z = self.counts.get(c).copied().unwrap_or_default();
        let raw = self.zone_model(job, obs, c);
        let at = (obs.tick, rem, sigma);
        let mc = refresh(&mut self.alone, &mut self.alone_solved_at, job, raw, at);
        let start_c = self
            .alone
            .start_spot(&mc, mc.boot_hazard(), rem - 1, sigma - 1)
            + egress_to(state, obs, c);
        let later_b = self.table.start_spot(m, m.h, rem - 1, sigma - 1) + egress_to(state, obs, b);
        mix(z.recovery_low(), start_c, later_b) < start_b
    }

    /// What [`migrate::decide`] weighs for a move of a running spot job from `cur` to `best`,
    /// with `lost` what one restart's slack is worth ([`Tern::restart_value`]).
    fn move_candidate(
        &self,
        job: &Job,
        state: &JobProgress,
        obs: &TickView<'_>,
        cur: usize,
        best: usize,
        lost: f64,
    ) -> MoveCandidate {
        let k = f64::from(job.nodes) * obs.tick_hours;
        let rem = i64::from(job.deadline) - i64::from(obs.tick);
        let sigma = rem - i64::from(job.ticks_left(state.done));
        let established = |z: usize| {
            self.counts
                .get(z)
                .map_or(0.5, Counts::hazard_established_low)
        };
        let starting = |z: usize| self.counts.get(z).map_or(0.5, Counts::hazard_start_high);
        let egress = egress_to(state, obs, best);
        MoveCandidate {
            remaining_work_hours: f64::from(job.ticks_left(state.done)) * obs.tick_hours,
            // The running instance has outlived its boot; a new one must live through it
            // first, at the young-run hazard where that is the higher one. Each zone's rate
            // prices its expected restarts (billed boot and the slack it burns), but a gap
            // between two hazard estimates is partly noise: the current zone is judged one
            // standard error safer than its counts say and the candidate one error riskier,
            // so only a gap the counts are sure of pays for a move.
            current_rate: self.score_at(job, obs, cur, established(cur), lost) / obs.tick_hours,
            candidate_rate: self.score_at(job, obs, best, starting(best), lost) / obs.tick_hours,
            restart_hours: f64::from(job.restart) * obs.tick_hours,
            held_rate: obs.zones[best].spot_price * k / obs.tick_hours,
            lost_progress_cost: lost,
            egress,
            slack_hours: sigma as f64 * obs.tick_hours,
            hours_since_last_move: state
                .last_move
                .map(|l| f64::from(obs.tick.saturating_sub(l)) * obs.tick_hours),
        }
    }
}

/// What a start in zone `z` pays to bring the checkpoint there: the egress when it lives in
/// another region, else nothing. Every zone choice of the policy (a start, a restart after a
/// preemption, a wait for a cheaper zone, a move) prices it with this one function.
fn egress_to(state: &JobProgress, obs: &TickView<'_>, z: usize) -> f64 {
    match state.checkpoint_region {
        Some(g) if g != obs.zones[z].region => obs.egress_cost,
        _ => 0.0,
    }
}

/// The zones one decision looks at.
#[derive(Debug, Clone, Copy)]
struct Zones {
    /// Some zone has capacity for the job now.
    any_up: bool,
    /// The best-scoring zone with capacity now, and the best-scoring zone overall.
    best_up: Option<usize>,
    best_any: usize,
    /// The job's current spot zone, if it is still up.
    here: Option<usize>,
}

impl DeadlinePolicy for Tern {
    fn name(&self) -> &'static str {
        "tern"
    }

    fn reset(&mut self) {
        self.counts.clear();
        self.any = Counts::default();
        self.seen = 0;
        self.solved_at = None;
        self.alone_solved_at = None;
        self.rule = None;
        self.last = None;
    }

    fn why(&self) -> Option<Why> {
        self.last
    }

    fn decide(&mut self, job: &Job, state: &JobProgress, obs: &TickView<'_>) -> Placement {
        self.learn(job, obs);
        let rule = *self.rule.get_or_insert_with(|| {
            MoveRule::for_job(
                f64::from(job.restart) * obs.tick_hours,
                obs.on_demand_price * f64::from(job.nodes),
            )
        });
        // A booting instance is committed: abandoning it only wastes what was paid.
        if state.booting > 0 {
            self.last = None;
            return state.placement;
        }
        // The table is solved for the zone the job would run in, ranked first by price and
        // billed boots; once solved, it prices the slack a restart burns, and the zones are
        // ranked again with that.
        let first = self.zones(job, state, obs, 0.0);
        let model_zone = first.here.or(first.best_up).unwrap_or(first.best_any);
        let raw = self.pooled_model(job, obs, model_zone);
        let rem = i64::from(job.deadline) - i64::from(obs.tick);
        let sigma = rem - i64::from(job.ticks_left(state.done));
        let m = self.refresh_table(job, obs, raw, rem, sigma);
        let lost = self.restart_value(job, state, &m, rem, sigma);
        let zones = self.zones(job, state, obs, lost);
        let (mut choice, mut why) = self.choose(job, state, &zones, &m, rem, sigma);
        why.egress = zones.best_up.map_or(0.0, |z| egress_to(state, obs, z));
        // With one tick of history (a window with no past) nothing has been seen to change:
        // on-demand over waiting is the prior's word against itself. Committing to the
        // dearest option then waits one tick while waiting is safe; the next tick is data.
        if choice == Placement::OnDemand
            && state.placement == Placement::Idle
            && self.seen <= 1
            && why.wait.is_finite()
        {
            choice = Placement::Idle;
        }
        // A start in a dearer zone while a cheaper one is down: with slack to spare, wait.
        if let Placement::Spot(b) = choice
            && state.placement != choice
            && self.wait_for_cheaper(
                job,
                state,
                obs,
                &m,
                (b, zones.best_any),
                lost,
                why.spot,
                (rem, sigma),
            )
        {
            choice = Placement::Idle;
        }
        // A running spot job may still move to a better zone; the migrate rule decides.
        let mut placement = choice;
        if let (Placement::Spot(cur), Some(best)) = (choice, zones.best_up)
            && state.placement == Placement::Spot(cur)
            && best != cur
        {
            let candidate = self.move_candidate(job, state, obs, cur, best, lost);
            let verdict = migrate::decide(&rule, &candidate);
            if verdict.is_move() {
                placement = Placement::Spot(best);
            }
            why.moved = Some(verdict);
        }
        self.last = Some(why);
        placement
    }
}

#[cfg(test)]
#[path = "tern_tests.rs"]
mod tests;
