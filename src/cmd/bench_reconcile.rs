//! `tern bench reconcile`: CPU time of one reconcile pass over N jobs and M instances on the
//! simulated cloud (target: ≤ 100 ms for 1,000 jobs / 10,000 instances).
//!
//! Setup (not measured): N elastic V100 jobs of M/N workers each are submitted and placed, and
//! the fleet boots. Measured: steady-state passes, where the controller takes notices, lists
//! and diffs the whole fleet, checks open intents and every job. CPU time is the main thread's
//! on-CPU time from `/proc/thread-self/schedstat` (the runtime is single-threaded), so other
//! processes on the machine do not inflate it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{TimeZone, Utc};
use tern_cloud::{Cloud, Region, parse_job_spec};
use tern_sim::cloud::SimConfig;
use tern_sim::{Delayed, SimCloud, Trace};

use super::output::print_json_line;
use tern::controller::{Controller, ControllerConfig};
use tern::store::Store;

/// The size of a benchmark fleet (`bench reconcile`, `bench api`).
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct FleetArgs {
    #[arg(long, default_value_t = 1000)]
    pub jobs: u32,
    #[arg(long, default_value_t = 10_000)]
    pub instances: u32,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub fleet: FleetArgs,
    /// Measured passes (the figure is their mean).
    #[arg(long, default_value_t = 40)]
    pub passes: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, serde::Serialize)]
struct Figure {
    jobs: u32,
    instances: usize,
    passes: usize,
    /// Mean CPU ms of a steady-state pass.
    cpu_ms: f64,
    /// Median and slowest wall-clock ms of a pass.
    wall_ms: f64,
    wall_ms_max: f64,
    /// CPU ms of the first pass, which plans and launches every job (MILP included).
    placement_cpu_ms: f64,
}

/// Nanoseconds this thread has run on a CPU.
fn thread_cpu_ns() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat")
        .context("reading /proc/thread-self/schedstat (Linux only)")?;
    text.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .context("unexpected /proc/thread-self/schedstat format")
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(bench(args))
}

/// A simulated cloud with ten zones (behind a [`Delayed`] wrapper) of plenty and a controller with `jobs` elastic V100 jobs of
/// `instances / jobs` workers each, submitted but not yet placed.
pub(crate) fn bench_fleet(size: FleetArgs) -> anyhow::Result<(Arc<SimCloud>, Delayed, Controller)> {
    let FleetArgs { jobs, instances } = size;
    anyhow::ensure!(
        jobs > 0 && instances >= jobs,
        "need --jobs > 0 and --instances >= --jobs"
    );
    let per_job = instances / jobs;
    let zones: Vec<Trace> = "abcdefghij"
        .chars()
        .map(|c| Trace {
            source: PathBuf::from(format!("bench-{c}.json")),
            cloud: Cloud::Aws,
            region: "us-west-2".into(),
            zone: format!("us-west-2{c}"),
            gap_seconds: 300,
            available: vec![instances; 100],
            prices: None,
            spot_price: Some(0.9 + f64::from(u32::from(c) - u32::from('a')) * 0.01),
            on_demand_price: Some(3.06),
        })
        .collect();
    let start = Utc
        .with_ymd_and_hms(2026, 11, 23, 0, 0, 0)
        .single()
        .context("time")?;
    let sim = Arc::new(SimCloud::new(
        zones,
        SimConfig {
            start,
            boot: Duration::from_secs(60),
            ..SimConfig::default()
        },
    ));
    let store = Arc::new(Store::in_memory()?);
    let mut config = ControllerConfig::new("tern-bench", vec![Region::new("us-west-2")]);
    config.plan.time_limit = Duration::from_secs(10);
    // No delay unless a benchmark sets one (`bench api` measures with a slow cloud).
    let cloud = Delayed::new(sim.clone(), Duration::ZERO);
    let mut ctl = Controller::open(store, Arc::new(cloud.clone()), config)?;
    for j in 0..jobs {
        let text = format!(
            "name = \"bench-{j:05}\"\nteam = \"t{}\"\naccelerators = [\"V100\"]\nworkers = {per_job}\n\
             deadline = \"400h\"\nlocal_batch = 64\n[work]\nsamples = 100_000_000\n\
             [[observation]]\naccelerator = \"V100\"\ngpus = 1\nlocal_batch = 64\nstep_seconds = 0.2\n",
            j % 10
        );
        ctl.submit(parse_job_spec(&text, "bench.toml")?, start)?;
    }
    Ok((sim, cloud, ctl))
}

async fn bench(args: Args) -> anyhow::Result<()> {
    let (sim, _, mut ctl) = bench_fleet(args.fleet)?;
    let t0 = thread_cpu_ns()?;
    ctl.pass(sim.now()).await?;
    let placement = (thread_cpu_ns()? - t0) as f64 / 1e6;
    // Boot, then let the controller see everything running.
    sim.advance(Duration::from_secs(120));
    ctl.pass(sim.now()).await?;
    // The kernel updates a thread's run time at scheduler ticks (a few ms), so one pass's
    // reading is coarse; the figure is the sum of per-pass readings over many passes divided
    // by their number (the rounding errors average out). Advancing the simulated cloud
    // between passes is not counted.
    let mut wall = Vec::new();
    let passes = args.passes.max(1);
    let mut cpu_ns = 0u64;
    for _ in 0..passes {
        sim.advance(Duration::from_secs(60));
        let (c0, w0) = (thread_cpu_ns()?, std::time::Instant::now());
        ctl.pass(sim.now()).await?;
        wall.push(w0.elapsed().as_secs_f64() * 1e3);
        cpu_ns += thread_cpu_ns()?.saturating_sub(c0);
    }
    let cpu_total = cpu_ns as f64 / 1e6;
    if ctl.instances().next().is_none() {
        for e in ctl.store().events(0, None)?.iter().rev().take(3) {
            eprintln!("{:?} {}: {}", e.job, e.kind, e.message);
        }
        anyhow::bail!("the benchmark fleet did not launch (events above)");
    }
    wall.sort_by(f64::total_cmp);
    let figure = Figure {
        jobs: args.fleet.jobs,
        instances: ctl.instances().count(),
        passes,
        cpu_ms: cpu_total / passes as f64,
        wall_ms: wall[wall.len() / 2],
        wall_ms_max: wall[wall.len() - 1],
        placement_cpu_ms: placement,
    };
    if args.json {
        print_json_line(&figure)?;
    } else {
        println!(
            "one reconcile pass over {} jobs / {} instances: {:.1} ms CPU (mean of {}), {:.1} ms wall (median; max {:.1}); first pass (plan + launch everything): {:.0} ms CPU",
            figure.jobs,
            figure.instances,
            figure.cpu_ms,
            figure.passes,
            figure.wall_ms,
            figure.wall_ms_max,
            figure.placement_cpu_ms
        );
    }
    Ok(())
}
