//! `tern simulate --policy controller`: the closed-loop replay. Each window runs the real
//! controller (its reconcile passes, planner, intents and deadline policy) on a temporary
//! SQLite store, against the simulated cloud driven by the window's slice of the same traces
//! and prices, one pass per trace tick on a virtual clock, with workers simulated from the
//! forecast ([`Workload`]). What it reports is what the product does, in the same terms as the
//! replayed policies ([`WindowResult`]).
//!
//! The job is the replay's: C hours of work at full size on the simulated cloud's one shape
//! (its samples are C hours at the forecast's expected speed), due D hours after the window
//! starts, with a restart of d hours (all of it provisioning, see `window`). Before the
//! window the store is given the lookback of each zone's trace as pool samples, as a
//! controller that had been running would have them; the replay's `tern` sees the same past.
//!
//! With [`LoopSetup::cold_start`] the submitted spec has no `[[observation]]`: the controller
//! must probe the job before it plans it, and the simulated workers run at the speed the
//! observation would have given (the same samples, so costs compare with the warm job's).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use tern_cloud::{Capacity, parse_job_spec};
use tern_replay::{Prepared, WindowResult};
use tern_sim::cloud::SimConfig;
use tern_sim::{SimCloud, Trace};

use tern_plan::ThroughputModel;

use crate::controller::probe::ProbeBounds;
use crate::controller::workload::Workload;
use crate::controller::world::SimWorld;
use crate::controller::{Controller, ControllerConfig, ControllerError};
use crate::jobs::LoadedJob;
use crate::scratch::TempDir;
use crate::sim::policy::{self, SimPolicy};
use crate::sim::regions_of;
use crate::store::{PoolSample, Store, StoreError};

/// Samples/s of the replayed job on one node: an observed 0.2 s step of 64 samples on one V100
/// (what the spec's observation says, so the forecast knows the speed well).
const STEP_SECONDS: f64 = 0.2;
const LOCAL_BATCH: u32 = 64;

#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Controller(#[from] ControllerError),
    #[error("closed-loop job: {0}")]
    Job(String),
    #[error("temporary store: {0}")]
    Io(#[from] std::io::Error),
}

/// Each trace's zone name, made distinct: the replay treats every trace as its own zone (a set
/// may hold several traces of one zone, e.g. other GPUs or counts), and so must the simulated
/// cloud, or their pools would merge. Later repeats get `-2`, `-3`, ...
fn distinct_zones(traces: &[Trace]) -> Vec<String> {
    let mut seen: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
    traces
        .iter()
        .map(|t| {
            let n = seen.entry(t.zone.as_str()).or_default();
            *n += 1;
            if *n == 1 {
                t.zone.clone()
            } else {
                format!("{}-{n}", t.zone)
            }
        })
        .collect()
}

/// The replay's job and traces, as the closed loop runs them.
#[derive(Debug)]
pub struct LoopSetup<'a> {
    pub traces: &'a [Trace],
    pub prepared: &'a Prepared,
    pub job: LoopJob,
    /// Cold start: the spec omits its `[[observation]]` (the controller probes the job, the
    /// simulated workers report the true step time), the rest of the job is the same.
    pub cold_start: bool,
}

/// What a window left behind, for tests: its result, the controller that ran it and its
/// store (in `_dir`).
#[cfg_attr(not(test), allow(dead_code))]
struct Ran {
    result: WindowResult,
    ctl: Controller,
    store: Arc<Store>,
    cloud: Arc<SimCloud>,
    deadline: DateTime<Utc>,
    _dir: TempDir,
}

/// The job of a closed loop, as `tern simulate` describes it (the traces and windows come with
/// each group).
#[derive(Debug, Clone, Copy)]
pub struct LoopJob {
    pub work_hours: f64,
    pub deadline_hours: f64,
    pub restart_hours: f64,
    pub nodes: u32,
    pub min_nodes: u32,
    pub checkpoint_gb: f64,
    /// What the simulated cloud bills a checkpoint crossing regions, USD per GB.
    pub egress_per_gb: f64,
}

/// Every policy on every group of traces (`tern simulate`): the replayed ones through
/// `Prepared::replay`, the closed loops (warm and cold) window by window on the same windows.
/// One row per group, the policies in `policies`' order; `tick` after each window.
pub fn replay_groups(
    groups: &[Vec<Trace>],
    prepared: &[Prepared],
    policies: &[SimPolicy],
    job: LoopJob,
    tick: &(dyn Fn() + Sync),
) -> Result<Vec<Vec<tern_replay::Summary>>, LoopError> {
    let mut results = Vec::new();
    let replayed_kinds = policy::replayed(policies);
    for (p, g) in prepared.iter().zip(groups) {
        let mut replayed = p.replay(&replayed_kinds, tick).into_iter();
        let mut closed = Vec::new();
        for &kind in policies.iter().filter(|k| k.is_closed_loop()) {
            let setup = LoopSetup {
                traces: g,
                prepared: p,
                job,
                cold_start: kind == SimPolicy::ControllerCold,
            };
            closed.push(p.summarise(kind.name(), setup.replay(tick)?.into_iter()));
        }
        let mut closed = closed.into_iter();
        let row = policies
            .iter()
            .filter_map(|&k| {
                if k.is_closed_loop() {
                    closed.next()
                } else {
                    replayed.next()
                }
            })
            .collect();
        results.push(row);
    }
    Ok(results)
}

impl LoopSetup<'_> {
    /// Every window on all cores (one controller per window); `tick` after each.
    pub fn replay(&self, tick: &(dyn Fn() + Sync)) -> Result<Vec<WindowResult>, LoopError> {
        let starts = &self.prepared.starts;
        let next = AtomicUsize::new(0);
        let threads = self.prepared.threads();
        let mut out: Vec<Option<WindowResult>> = vec![None; starts.len()];
        let rows = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| -> Result<Vec<(usize, WindowResult)>, LoopError> {
                        let runtime = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()?;
                        let mut mine = Vec::new();
                        loop {
                            let w = next.fetch_add(1, Ordering::Relaxed);
                            if w >= starts.len() {
                                break;
                            }
                            mine.push((w, runtime.block_on(self.window(starts[w]))?));
                            tick();
                        }
                        Ok(mine)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h.join() {
                    Ok(r) => r,
                    Err(panic) => std::panic::resume_unwind(panic),
                })
                .collect::<Result<Vec<_>, _>>()
        })?;
        for (w, r) in rows.into_iter().flatten() {
            out[w] = Some(r);
        }
        Ok(out.into_iter().flatten().collect())
    }

    fn gap(&self) -> u32 {
        self.traces.first().map_or(60, |t| t.gap_seconds.max(1))
    }

    /// A virtual start on the policy's tick grid (a multiple of the trace's tick).
    fn epoch(&self) -> DateTime<Utc> {
        let gap = i64::from(self.gap());
        let at = 1_750_000_000 / gap * gap;
        Utc.timestamp_opt(at, 0)
            .single()
            .unwrap_or(DateTime::UNIX_EPOCH)
    }

    /// The window's slice of each trace, priced as the replay prices it.
    fn slices(&self, start: usize) -> Vec<Trace> {
        let ticks = self.prepared.job.deadline as usize + 2;
        self.traces
            .iter()
            .zip(distinct_zones(self.traces))
            .enumerate()
            .map(|(z, (t, zone))| {
                let end = (start + ticks).min(t.available.len());
                let prices = self.prepared.spot_prices(z);
                Trace {
                    zone,
                    available: t.available[start..end].to_vec(),
                    prices: Some(prices[start..end.min(prices.len())].to_vec()),
                    on_demand_price: Some(self.prepared.on_demand_prices()[z]),
                    ..t.clone()
                }
            })
            .collect()
    }

    /// What a controller that had been running would have sampled before the window.
    fn history(&self, start: usize, config: &SimConfig, epoch: DateTime<Utc>) -> Vec<PoolSample> {
        let gap = i64::from(self.gap());
        let lookback = crate::controller::POLICY_LOOKBACK_TICKS as usize;
        let base = epoch.timestamp() / gap;
        let mut out = Vec::new();
        for (z, (t, zone)) in self
            .traces
            .iter()
            .zip(distinct_zones(self.traces))
            .enumerate()
        {
            let prices = self.prepared.spot_prices(z);
            let from = start.saturating_sub(lookback);
            for (i, (&available, &spot_price)) in t.available[from..start]
                .iter()
                .zip(&prices[from..start])
                .enumerate()
            {
                out.push(PoolSample {
                    pool: format!("{}@{}", config.instance_type.name, zone),
                    instance_type: config.instance_type.name.clone(),
                    zone: zone.clone(),
                    region: t.region.clone(),
                    tick: base - (start - from - i) as i64,
                    available,
                    spot_price,
                });
            }
        }
        out
    }

    /// The job's spec; `observed`: with its `[[observation]]` (the warm job), else without
    /// (a cold start).
    fn spec_text(&self, samples: f64, observed: bool) -> String {
        let workers = if self.job.min_nodes < self.job.nodes {
            format!(
                "{{ min = {}, max = {} }}",
                self.job.min_nodes, self.job.nodes
            )
        } else {
            self.job.nodes.to_string()
        };
        format!(
            "name = \"job\"\nteam = \"replay\"\naccelerators = [\"V100\"]\nworkers = {workers}\n\
             gang = {gang}\ndeadline = \"{deadline}s\"\nlocal_batch = {LOCAL_BATCH}\n\
             [work]\nsamples = {samples}\n\
             [checkpoint]\ninterval = \"{gap}s\"\nsize_gb = {gb}\nsave_seconds = 0\nrestore_seconds = 0\n\
             {observation}",
            gang = self.job.min_nodes >= self.job.nodes && self.job.nodes > 1,
            deadline = (self.job.deadline_hours * 3600.0).floor() as u64,
            // Down, not up: one sample over C hours is a tick more of work to the policy,
            // which rounds work up to whole ticks.
            samples = samples.floor().max(1.0) as u64,
            gb = self.job.checkpoint_gb,
            // A checkpoint every tick, and the agents checkpoint on a notice (the replay keeps
            // all progress on a reclaim); one pass per tick sees a notice and its reclaim
            // together, too late for the controller's drain to checkpoint.
            gap = self.gap(),
            observation = if observed {
                format!(
                    "[[observation]]\naccelerator = \"V100\"\ngpus = 1\nlocal_batch = {LOCAL_BATCH}\n\
                     step_seconds = {STEP_SECONDS}\n"
                )
            } else {
                String::new()
            },
        )
    }

    /// The job's true speed: the forecast of the spec with its observation (what the warm
    /// job is planned on, and what a cold start's probe measures).
    fn truth(&self, at: DateTime<Utc>) -> Result<Arc<dyn ThroughputModel>, LoopError> {
        let spec = parse_job_spec(&self.spec_text(1.0, true), "replay.toml")
            .map_err(|e| LoopError::Job(e.to_string()))?;
        let loaded = LoadedJob::from_spec(spec, None, "replay", at)
            .map_err(|e| LoopError::Job(e.to_string()))?;
        Ok(loaded.plan_job(at, at, 0.0).model)
    }

    /// The job's samples: C hours at `truth`'s expected speed on K nodes.
    fn samples(&self, truth: &dyn ThroughputModel) -> Result<f64, LoopError> {
        let t = truth
            .throughput("V100", 1, self.job.nodes)
            .ok_or_else(|| LoopError::Job("no forecast for V100".into()))?;
        Ok(self.job.work_hours * 3600.0 * t.expected)
    }

    /// Bounds of a cold start's probe at this loop's pass cadence. The controller passes once
    /// per trace tick (`pass_gap` = the tick) and ends a probe at the last pass before its time
    /// bound, counted from the pass that first sees the probe running; the workers report a
    /// step after each pass that finds them running. A bound of one tick or less would end the
    /// probe at that first pass, with no step reported; two ticks or more (here the default
    /// 900 s, or 2 ticks where that is longer) let it end within its bound with at least one
    /// (all three it wants, where the bound is over three ticks).
    fn probe_bounds(&self) -> ProbeBounds {
        let defaults = ProbeBounds::default();
        ProbeBounds {
            max_seconds: defaults.max_seconds.max(2.0 * f64::from(self.gap())),
            ..defaults
        }
    }

    /// One window, starting at trace tick `start`.
    pub async fn window(&self, start: usize) -> Result<WindowResult, LoopError> {
        Ok(self.run(start).await?.result)
    }

    /// One window, and the controller that ran it.
    async fn run(&self, start: usize) -> Result<Ran, LoopError> {
        let gap = self.gap();
        let epoch = self.epoch();
        let restart_s = (self.job.restart_hours * 3600.0).max(1.0);
        let config = SimConfig {
            start: epoch,
            // The restart is all boot: the controller sees a booted node at its next pass, a
            // tick boundary, so work resumes after the restart rounded up to whole ticks, as
            // in the replay; a restore stall on top would cost part of a tick more.
            boot: Duration::from_secs_f64(restart_s),
            on_demand_price: self.prepared.on_demand_price,
            egress_per_gb: self.job.egress_per_gb,
            ..SimConfig::default()
        };
        let slices = self.slices(start);
        let regions = regions_of(&slices);
        let history = self.history(start, &config, epoch);
        let sim = Arc::new(SimCloud::new(slices, config));
        let dir = TempDir::new("tern-loop")?;
        let store = Arc::new(Store::open(&dir.path().join("state.db"))?);
        store.record_pool_samples(&history)?;
        let mut cfg = ControllerConfig::new("tern-replay", regions);
        let tick = Duration::from_secs(u64::from(gap));
        cfg.policy_tick = tick;
        cfg.migrate_check = tick;
        cfg.replan = tick;
        cfg.plan.provision_s = restart_s;
        // The controller prices a checkpoint's move at the rate the simulated cloud bills.
        cfg.plan.egress_per_gb = self.job.egress_per_gb;
        // A launch is given its whole provisioning time, and more, before it counts as hung.
        cfg.launch_timeout = Duration::from_secs_f64(2.0 * restart_s + 300.0);
        // The simulated workers run at exactly the expected speed: the forecast is exact here,
        // as the replay's job speed is.
        // A cold start's job, once measured, is forecast at the true speed: exact too.
        cfg.exact_forecast = true;
        // One pass per tick, and probe bounds that let a probe end within them at that cadence
        // ([`Self::probe_bounds`]); a warm job never probes.
        cfg.pass_gap = tick;
        cfg.probe = self.probe_bounds();
        let mut ctl = Controller::open(store.clone(), sim.clone(), cfg)?;
        let truth = self.truth(epoch)?;
        let samples = self.samples(truth.as_ref())?;
        let spec = parse_job_spec(&self.spec_text(samples, !self.cold_start), "replay.toml")
            .map_err(|e| LoopError::Job(e.to_string()))?;
        ctl.submit(spec, epoch)?;
        let deadline =
            epoch + TimeDelta::seconds((self.job.deadline_hours * 3600.0).floor() as i64);
        let mut workload = Workload::watching(sim.clone());
        let cloud = sim.clone();
        if self.cold_start {
            workload = workload.with_truth("job", truth);
        }
        let mut world = SimWorld::new(sim, ctl, tick).with_workers(Some(workload));
        world
            .run(usize::MAX, |ctl, now| {
                ctl.job("job").is_none_or(|j| j.state.is_final()) || now >= deadline
            })
            .await?;
        let (now, ctl) = (world.now(), world.ctl);
        let result = self.result(&ctl, &store, &cloud, now, deadline)?;
        Ok(Ran {
            result,
            ctl,
            store,
            cloud,
            deadline,
            _dir: dir,
        })
    }

    /// What the window cost (the instances' hours at their prices, and the cloud's egress
    /// bill) and how it went.
    fn result(
        &self,
        ctl: &Controller,
        store: &Store,
        cloud: &SimCloud,
        now: DateTime<Utc>,
        deadline: DateTime<Utc>,
    ) -> Result<WindowResult, StoreError> {
        let usage = store.usage()?;
        let tick_h = f64::from(self.gap()) / 3600.0;
        let hours = |c: Capacity| -> f64 {
            usage
                .iter()
                .filter(|u| u.capacity == c)
                .map(|u| u.hours(now))
                .sum()
        };
        let compute: f64 = usage.iter().map(|u| u.hours(now) * u.price_per_hour).sum();
        let cost = compute + cloud.egress_bill();
        let finished = ctl
            .job("job")
            .is_some_and(|j| j.work_done() && j.finished_at.is_none_or(|f| f <= deadline));
        let stats = ctl.stats();
        Ok(WindowResult {
            cost,
            finished,
            spot_ticks: (hours(Capacity::Spot) / tick_h).round() as u32,
            on_demand_ticks: (hours(Capacity::OnDemand) / tick_h).round() as u32,
            restarts: (stats.launches / u64::from(self.job.nodes.max(1))).saturating_sub(1) as u32,
            moves: stats.migrations as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(zone: &str) -> Trace {
        Trace {
            source: format!("{zone}.json").into(),
            cloud: tern_cloud::Cloud::Aws,
            region: zone[..zone.len() - 1].into(),
            zone: zone.into(),
            gap_seconds: 600,
            available: vec![1; 4],
            prices: None,
            spot_price: Some(0.9),
            on_demand_price: Some(3.06),
        }
    }

    /// The replay's windows (one every 2 h) of a one-node job on `traces`.
    fn prepared(traces: &[Trace], work_hours: f64, deadline_hours: f64) -> Prepared {
        tern_replay::Scenario {
            traces: traces.to_vec(),
            work_hours,
            deadline_hours,
            restart_hours: 0.2,
            on_demand_price: None,
            spot_price: None,
            stride_hours: 2.0,
            egress_cost: 0.0,
            nodes: 1,
        }
        .prepare()
        .expect("prepared")
    }

    /// The closed loop's one-node job, its checkpoint of `gb` billed at `per_gb` across regions.
    fn one_node(work_hours: f64, deadline_hours: f64, gb: f64, per_gb: f64) -> LoopJob {
        LoopJob {
            work_hours,
            deadline_hours,
            restart_hours: 0.2,
            nodes: 1,
            min_nodes: 1,
            checkpoint_gb: gb,
            egress_per_gb: per_gb,
        }
    }

    /// Two traces of one zone (say K80 and V100 in us-west-2a) stay two pools in the loop, as
    /// they are two zones in the replay.
    #[test]
    fn traces_of_one_zone_become_distinct_zones() {
        let traces = ["us-west-2a", "us-west-2b", "us-west-2a", "us-west-2a"].map(trace);
        assert_eq!(
            distinct_zones(&traces),
            ["us-west-2a", "us-west-2b", "us-west-2a-2", "us-west-2a-3"]
        );
    }

    /// A cold start on a small synthetic set (two zones of 600 s ticks, 8 h, spot out now and
    /// then): the job without its observation is probed, the probe ends (its record says when
    /// and how), and the job is done by its deadline, as the warm job is on the same windows.
    #[test]
    fn a_cold_start_probes_then_finishes_by_the_deadline() {
        let mut a = trace("us-west-2a");
        a.available = (0..48).map(|i| u32::from(i % 12 >= 3)).collect();
        let mut b = trace("us-west-2b");
        b.available = (0..48).map(|i| u32::from(i % 16 < 10)).collect();
        let traces = vec![a, b];
        let prepared = prepared(&traces, 2.0, 4.0);
        let setup = |cold_start| LoopSetup {
            traces: &traces,
            prepared: &prepared,
            job: one_node(2.0, 4.0, 0.0, 0.0),
            cold_start,
        };
        let (cold, warm) = (setup(true), setup(false));
        assert_eq!(cold.probe_bounds().max_seconds, 1200.0, "two 600 s ticks");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        assert!(prepared.starts.len() >= 2);
        for &start in &prepared.starts[..2] {
            let ran = runtime.block_on(cold.run(start)).expect("cold window");
            let job = ran.ctl.job("job").expect("the job");
            assert!(
                ran.result.finished,
                "window {start}: cold job not done by its deadline"
            );
            assert!(job.finished_at.is_some_and(|f| f <= ran.deadline));
            let probe = job.probe.as_ref().expect("a cold start probes");
            assert!(
                probe.running_at.is_some() && probe.ended_at.is_some(),
                "window {start}: probe ran and ended: {probe:?}"
            );
            assert!(probe.seconds(probe.ended_at.unwrap()) <= probe.max_seconds);
            assert!(probe.outcome.is_some());
            assert!(ran.ctl.measured("job"));
            let kinds: Vec<String> = ran
                .store
                .events(0, Some("job"))
                .expect("events")
                .into_iter()
                .map(|e| e.kind)
                .collect();
            for kind in ["probe", "probed", "basis"] {
                assert!(
                    kinds.iter().any(|k| k == kind),
                    "no {kind} event: {kinds:?}"
                );
            }

            let warm = runtime.block_on(warm.run(start)).expect("warm window");
            assert!(warm.result.finished);
            assert!(warm.ctl.job("job").is_some_and(|j| j.probe.is_none()));
        }
    }

    /// A job that starts in a cheap zone of us-east-1, loses it for good and finishes in
    /// us-west-2: its checkpoint crosses regions once and the cloud bills it, and the window
    /// costs that much more than the same window with free egress (same decisions: west is
    /// the only spot left). The controller prices crossings at the rate the cloud bills.
    #[test]
    fn a_checkpoint_that_crosses_regions_is_on_the_bill() {
        let mut east = trace("us-east-1a");
        east.available = (0..48).map(|i| u32::from(i < 4)).collect();
        east.spot_price = Some(0.5);
        let mut west = trace("us-west-2a");
        west.available = vec![1; 48];
        let traces = vec![east, west];
        let prepared = prepared(&traces, 2.0, 6.0);
        let setup = |egress_per_gb| LoopSetup {
            traces: &traces,
            prepared: &prepared,
            job: one_node(2.0, 6.0, 100.0, egress_per_gb),
            cold_start: false,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let start = prepared.starts[0];
        let billed = runtime.block_on(setup(0.01).run(start)).expect("window");
        let free = runtime.block_on(setup(0.0).run(start)).expect("window");
        assert!(billed.result.finished && free.result.finished);
        let transfers = billed.cloud.transfers();
        assert!(!transfers.is_empty(), "the job never left us-east-1");
        for t in &transfers {
            assert_eq!((t.from.as_str(), t.to.as_str()), ("us-east-1", "us-west-2"));
            assert_eq!(t.job, "job");
            assert!((t.dollars - 100.0 * 0.01).abs() < 1e-9, "{t:?}");
        }
        assert!(free.cloud.transfers().is_empty());
        let bill = billed.cloud.egress_bill();
        assert!(
            (billed.result.cost - free.result.cost - bill).abs() < 1e-9,
            "{} vs {} + {bill}",
            billed.result.cost,
            free.result.cost
        );
        assert_eq!(billed.ctl.config().plan.egress_per_gb, 0.01);
        assert_eq!(free.ctl.config().plan.egress_per_gb, 0.0);
    }
}
