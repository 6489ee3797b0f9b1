//! `tern bench ...`: benchmarks that print figures. Timings are wall-clock over repetitions;
//! report ratios from one run, the machines are noisy.

use std::time::Instant;

use super::output::print_json_line;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Time loading (decompressing and parsing) the bundled catalog.
    Catalog {
        #[arg(long, default_value_t = 20)]
        iterations: usize,
        #[arg(long)]
        json: bool,
    },
    /// Time the planner: N jobs from the example specs against the whole bundled catalog.
    Plan(super::bench_plan::Args),
    /// Time forecaster fits, predictions and a 1,000-job refit tick.
    Forecast(super::bench_forecast::Args),
    /// CPU time of one controller reconcile pass over N jobs / M instances on the sim.
    Reconcile(super::bench_reconcile::Args),
    /// Latency of the controller's API (GET /v1/jobs, POST progress) while passes run
    /// against a slow cloud.
    Api(super::bench_api::Args),
    /// Time `tern simulate`: every trace in a folder as a zone, all five policies.
    Simulate(super::bench_simulate::Args),
    /// Time the closed-loop replay (the real controller, `tern simulate --policy controller`)
    /// of a folder of traces as one job's zones, next to the replayed `tern` policy.
    ClosedLoop(super::bench_closed_loop::Args),
    /// Fault-injection soak: flapping capacity, throttling, transient errors, lost and late
    /// notices, SIGKILLed controller, a garbage-sending agent; prints what must stay zero.
    Soak(super::bench_soak::Args),
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Catalog { iterations, json } => bench_catalog(iterations.max(1), json),
        Command::Plan(args) => super::bench_plan::run(args),
        Command::Forecast(args) => super::bench_forecast::run(args),
        Command::Reconcile(args) => super::bench_reconcile::run(args),
        Command::Simulate(args) => super::bench_simulate::run(args),
        Command::Api(args) => super::bench_api::run(args),
        Command::Soak(args) => super::bench_soak::run(args),
        Command::ClosedLoop(args) => super::bench_closed_loop::run(args),
    }
}

/// "debug" or "release": figures from a debug build are not worth reporting, so say which.
pub fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// Summary of repeated timings, in milliseconds.
#[derive(Debug, serde::Serialize)]
pub struct Timings {
    pub iterations: usize,
    pub min_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
}

impl Timings {
    pub fn from_samples(mut ms: Vec<f64>) -> Self {
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
        Self {
            iterations: ms.len(),
            min_ms: ms[0],
            p50_ms: at(0.5),
            p95_ms: at(0.95),
            max_ms: ms[ms.len() - 1],
        }
    }
}

fn bench_catalog(iterations: usize, json: bool) -> anyhow::Result<()> {
    let mut samples = Vec::with_capacity(iterations);
    let mut offers = 0;
    let mut rows = 0;
    for _ in 0..iterations {
        let start = Instant::now();
        let catalog = tern_pricing::bundled()?;
        samples.push(start.elapsed().as_secs_f64() * 1e3);
        offers = catalog.offers.len();
        rows = catalog.sources.iter().map(|s| s.2).sum();
    }
    let t = Timings::from_samples(samples);
    let profile = build_profile();
    if !json {
        say!(
            "bundled catalog: {rows} rows -> {offers} offers; load p50 {:.1} ms, p95 {:.1} ms, min {:.1} ms, max {:.1} ms over {} runs ({profile} build)",
            t.p50_ms,
            t.p95_ms,
            t.min_ms,
            t.max_ms,
            t.iterations
        );
    }
    print_json_line(&serde_json::json!({
        "bench": "catalog",
        "build": profile,
        "rows": rows,
        "offers": offers,
        "iterations": t.iterations,
        "min_ms": t.min_ms,
        "p50_ms": t.p50_ms,
        "p95_ms": t.p95_ms,
        "max_ms": t.max_ms,
    }))
}
