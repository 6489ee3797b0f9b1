//! `tern bench plan`: planner latency for N jobs drawn from the example specs, against the
//! whole bundled catalog.

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use tern_cloud::parse_job_spec;
use tern_plan::{PlanOptions, plan};

use super::bench::Timings;
use super::output::print_json_line;
use tern::jobs::LoadedJob;

/// The example specs, compiled in so the benchmark runs from any folder.
const SPECS: [(&str, &str); 4] = [
    (
        "examples/jobs/resnet50-imagenet.toml",
        include_str!("../../examples/jobs/resnet50-imagenet.toml"),
    ),
    (
        "examples/jobs/llm-finetune-a100.toml",
        include_str!("../../examples/jobs/llm-finetune-a100.toml"),
    ),
    (
        "examples/jobs/small-t4-job.toml",
        include_str!("../../examples/jobs/small-t4-job.toml"),
    ),
    (
        "examples/jobs/gang-bert-v100.toml",
        include_str!("../../examples/jobs/gang-bert-v100.toml"),
    ),
];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Jobs per plan (cycled from the example specs, renamed job-0, job-1, ...).
    #[arg(long, default_value_t = 100)]
    pub jobs: usize,
    /// Plans to time.
    #[arg(long, default_value_t = 5)]
    pub iterations: usize,
    /// Quotas and team budgets (the `tern plan --quota` format), to benchmark a contended plan.
    #[arg(long, value_name = "FILE")]
    pub quota: Option<std::path::PathBuf>,
    /// Make every job different (each gets its own amount of work, 50-150 % of its
    /// template's), so no two can be merged into one class: the planner's worst case.
    #[arg(long)]
    pub distinct: bool,
    /// HiGHS time limit per plan, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub time_limit: f64,
    /// Teams' shares against cost, as `tern plan --fairness` (the specs' teams compete).
    #[arg(long, default_value_t = 0.0, value_name = "F", value_parser = super::number::non_negative, allow_negative_numbers = true)]
    pub fairness: f64,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // Plan as of a fixed date, so the examples' absolute deadlines stay in the future and the
    // benchmark measures the same problem on every run.
    let now = Utc
        .with_ymd_and_hms(2026, 11, 22, 0, 0, 0)
        .single()
        .ok_or_else(|| anyhow::anyhow!("bad benchmark date"))?;
    let catalog = tern_pricing::bundled()?;
    let jobs = jobs(&args, now)?;
    let limits = match &args.quota {
        Some(p) => super::plan::load_limits(p, &catalog.offers)?,
        None => tern::limits::Limits::default(),
    };
    let base = PlanOptions {
        time_limit: Duration::from_secs_f64(args.time_limit.max(0.001)),
        ..PlanOptions::default()
    };
    let options = limits.plan_options(base, Some(args.fairness));
    let mut samples = Vec::new();
    let mut last = None;
    for _ in 0..args.iterations.max(1) {
        let start = Instant::now();
        let report = plan(&jobs, &catalog.offers, &options);
        samples.push(start.elapsed().as_secs_f64() * 1e3);
        last = Some(report);
    }
    let report = last.ok_or_else(|| anyhow::anyhow!("no iteration ran"))?;
    let t = Timings::from_samples(samples);
    let build = super::bench::build_profile();
    if !args.json {
        print_text(&args, catalog.offers.len(), &t, &report, build);
    }
    print_json_line(&serde_json::json!({
        "bench": "plan",
        "build": build,
        "jobs": args.jobs,
        "distinct": args.distinct,
        "offers": catalog.offers.len(),
        "iterations": t.iterations,
        "p50_ms": t.p50_ms,
        "p95_ms": t.p95_ms,
        "min_ms": t.min_ms,
        "max_ms": t.max_ms,
        "solver": report.solver_family,
        "solver_detail": report.solver,
        "gap": report.gap,
        "components": report.components,
        "milp_columns": report.milp_columns,
        "placed": report.placed,
        "quotas": options.quotas.len(),
        "configurations": report.candidates.generated,
        "milp_configurations": report.candidates.considered,
        "infeasible": report.candidates.infeasible,
        "dominated": report.candidates.dominated,
        "truncated": report.candidates.truncated,
        "last_solve_ms": report.solve_ms,
        "fairness": report.fairness,
        "teams": report.teams,
    }))
}

fn print_text(
    args: &Args,
    offers: usize,
    t: &Timings,
    report: &tern_plan::PlanReport,
    build: &str,
) {
    say!(
        "plan {} jobs x {} offers: p50 {:.1} ms, p95 {:.1} ms over {} runs ({build} build); solver {:?} (gap {}), {} placed; configurations {} generated, {} in the MILP as {} columns over {} components; solve {:.1} ms",
        args.jobs,
        offers,
        t.p50_ms,
        t.p95_ms,
        t.iterations,
        report.solver,
        report
            .gap
            .map_or("none".to_string(), |g| format!("{:.3} %", g * 100.0)),
        report.placed,
        report.candidates.generated,
        report.candidates.considered,
        report.milp_columns,
        report.components,
        report.solve_ms
    );
}

/// `args.jobs` jobs drawn in turn from the example specs (with `--distinct`, each with its own
/// amount of work, so no two are alike).
fn jobs(args: &Args, now: chrono::DateTime<Utc>) -> anyhow::Result<Vec<tern_plan::PlanJob>> {
    let templates = SPECS
        .iter()
        .map(|(name, text)| {
            let spec = parse_job_spec(text, name)?;
            Ok(LoadedJob::from_spec(
                spec,
                Some(Path::new("examples/jobs")),
                name,
                now,
            )?)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((0..args.jobs)
        .map(|i| {
            let t = &templates[i % templates.len()];
            let share = if args.distinct {
                0.5 + (i * 7919 % 1000) as f64 / 1000.0
            } else {
                1.0
            };
            let mut j = t.plan_job(now, now, t.spec.work.samples() as f64 * share);
            j.name = format!("job-{i}");
            j
        })
        .collect())
}
