//! `tern bench forecast`: fit and predict latency of the runtime forecaster, and what refitting
//! 1,000 jobs costs on one controller tick. Synthetic jobs from known parameters, so the
//! benchmark needs no data files.

use std::time::Instant;

use chrono::{DateTime, Utc};
use tern_cloud::Observation;
use tern_policies::forecast::fit::fit;
use tern_policies::forecast::{FitOptions, Forecaster, Params, Sample, Shape};

use super::bench::Timings;
use super::output::print_json_line;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Jobs in the controller-tick benchmark.
    #[arg(long, default_value_t = 1000)]
    pub jobs: usize,
    /// Repetitions of each timing.
    #[arg(long, default_value_t = 5)]
    pub iterations: usize,
    #[arg(long)]
    pub json: bool,
}

/// Shapes a job typically reports: one to four GPUs on a node, then 2–8 nodes.
fn shapes() -> Vec<Shape> {
    let mut v = Vec::new();
    for (g, n) in [(1, 1), (2, 1), (4, 1), (8, 2), (16, 4), (32, 8)] {
        for m in [32.0, 64.0, 128.0] {
            v.push(Shape::new(g, n, m));
        }
    }
    v
}

/// A job's true parameters, varied deterministically by index.
fn params(i: usize) -> Params {
    let k = 1.0 + (i % 17) as f64 / 8.0;
    Params {
        alpha_c: 0.02 * k,
        beta_c: 0.001 / k,
        alpha_r: 0.01 * k,
        beta_r: 0.0005,
        alpha_n: 0.04 * k,
        beta_n: 0.002,
        gamma: 1.0 + (i % 5) as f64 / 2.0,
    }
}

fn observation(job: usize, s: &Shape, step: f64, at: DateTime<Utc>) -> Observation {
    Observation {
        job: format!("job-{job}"),
        accelerator: "T4".into(),
        gpus: s.gpus,
        nodes: s.nodes,
        local_batch: s.local_batch as u32,
        step_seconds: step,
        sync_seconds: None,
        at,
    }
}

fn time_ms(f: impl FnOnce()) -> f64 {
    let start = Instant::now();
    f();
    start.elapsed().as_secs_f64() * 1e3
}

/// What `tern bench forecast` measured.
struct Figures {
    job_rows: usize,
    profile_rows: usize,
    cold: Timings,
    warm: Timings,
    profile: Timings,
    ticks: Ticks,
}

/// The controller's side of [`Figures`].
struct Ticks {
    predict_ms: f64,
    initial: usize,
    initial_ms: f64,
    steady: Timings,
    steady_n: usize,
    shifted: Timings,
    shifted_n: usize,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let iterations = args.iterations.max(1);
    let jobs = args.jobs.max(1);
    let f = measure(iterations, jobs)?;
    let build = super::bench::build_profile();
    if !args.json {
        print_text(&f, jobs, build);
    }
    print_json_line(&serde_json::json!({
        "bench": "forecast",
        "build": build,
        "jobs": jobs,
        "fit_cold_ms": f.cold.p50_ms,
        "fit_warm_ms": f.warm.p50_ms,
        "fit_profile_rows": f.profile_rows,
        "fit_profile_ms": f.profile.p50_ms,
        "predict_us": f.ticks.predict_ms * 1e3,
        "initial_fit_all_ms": f.ticks.initial_ms,
        "steady_tick_refits": f.ticks.steady_n,
        "steady_tick_p50_ms": f.ticks.steady.p50_ms,
        "shifted_tick_refits": f.ticks.shifted_n,
        "refit_tick_p50_ms": f.ticks.shifted.p50_ms,
        "refit_tick_p95_ms": f.ticks.shifted.p95_ms,
        "refit_tick_per_job_ms": f.ticks.shifted.p50_ms / jobs as f64,
    }))
}

/// A profile-sized fit's rows: every shape at 11 batch sizes, like a Pollux placements file.
fn profile_rows(p: &Params) -> Vec<Sample> {
    let mut rows = Vec::new();
    for (g, n) in [
        (1, 1),
        (2, 1),
        (3, 1),
        (4, 1),
        (2, 2),
        (4, 2),
        (8, 2),
        (16, 4),
        (32, 8),
        (64, 16),
    ] {
        for i in 0..11 {
            let shape = Shape::new(g, n, 32.0 * 1.4f64.powi(i));
            rows.push(Sample {
                shape,
                step_s: p.step_s(&shape),
            });
        }
    }
    rows
}

fn measure(iterations: usize, jobs: usize) -> anyhow::Result<Figures> {
    let p = params(3);
    let job_rows: Vec<Sample> = shapes()
        .into_iter()
        .map(|shape| Sample {
            shape,
            step_s: p.step_s(&shape),
        })
        .collect();
    let profile_rows = profile_rows(&p);
    let opts = FitOptions::default();
    let (mut cold, mut warm, mut profile) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..iterations {
        let mut theta = None;
        cold.push(time_ms(|| {
            theta = fit(&job_rows, &opts, None).ok().map(|f| f.theta);
        }));
        warm.push(time_ms(|| {
            let _ = fit(&job_rows, &opts, theta.as_ref());
        }));
        profile.push(time_ms(|| {
            let _ = fit(&profile_rows, &opts, None);
        }));
    }
    Ok(Figures {
        job_rows: job_rows.len(),
        profile_rows: profile_rows.len(),
        cold: Timings::from_samples(cold),
        warm: Timings::from_samples(warm),
        profile: Timings::from_samples(profile),
        ticks: controller_ticks(iterations, jobs)?,
    })
}

/// The controller's side: `jobs` jobs with every shape observed, fitted cold once; then ticks
/// where each job reports one more step and everything refits. Steady ticks: every job reports
/// its usual step time (±0.3 % jitter), so (almost) nothing is refitted. Shifted ticks: every
/// job runs 10 % slower at one shape (a noisy neighbour), so every model is refitted,
/// warm-started.
fn controller_ticks(iterations: usize, jobs: usize) -> anyhow::Result<Ticks> {
    let at = DateTime::<Utc>::UNIX_EPOCH;
    let mut f = Forecaster::new();
    for j in 0..jobs {
        let pj = params(j);
        for s in shapes() {
            f.observe(&observation(j, &s, pj.step_s(&s), at))?;
        }
    }
    let mut initial = 0;
    let initial_ms = time_ms(|| initial = f.refit().unwrap_or(0));
    let (mut steady, mut shifted) = (Vec::new(), Vec::new());
    let (mut steady_n, mut shifted_n) = (0, 0);
    for it in 0..iterations {
        for j in 0..jobs {
            let s = shapes()[(j + it) % shapes().len()];
            let jitter = 1.0 + 0.003 * if (j + it) % 2 == 0 { 1.0 } else { -1.0 };
            f.observe(&observation(j, &s, params(j).step_s(&s) * jitter, at))?;
        }
        steady.push(time_ms(|| steady_n = f.refit().unwrap_or(0)));
        for j in 0..jobs {
            let s = shapes()[(j + it) % shapes().len()];
            let slow = 1.1f64.powi(it as i32 + 2);
            f.observe(&observation(j, &s, params(j).step_s(&s) * slow, at))?;
        }
        shifted.push(time_ms(|| shifted_n = f.refit().unwrap_or(0)));
    }
    let query = Shape::new(16, 4, 64.0);
    let predictions = 10_000;
    let predict_ms = time_ms(|| {
        for j in 0..predictions {
            let _ = f.predict(&format!("job-{}", j % jobs), "T4", &query);
        }
    }) / predictions as f64;
    Ok(Ticks {
        predict_ms,
        initial,
        initial_ms,
        steady: Timings::from_samples(steady),
        steady_n,
        shifted: Timings::from_samples(shifted),
        shifted_n,
    })
}

fn print_text(f: &Figures, jobs: usize, build: &str) {
    say!(
        "fit, one job ({} shapes): cold p50 {:.2} ms, warm-started p50 {:.2} ms",
        f.job_rows,
        f.cold.p50_ms,
        f.warm.p50_ms
    );
    say!(
        "fit, profile-sized ({} rows): p50 {:.1} ms",
        f.profile_rows,
        f.profile.p50_ms
    );
    say!("predict: {:.1} µs per call", f.ticks.predict_ms * 1e3);
    say!(
        "controller, {jobs} jobs ({build} build): first fit of all {} models {:.0} ms",
        f.ticks.initial,
        f.ticks.initial_ms
    );
    say!(
        "  tick, steady observations: {} refits, p50 {:.1} ms, p95 {:.1} ms",
        f.ticks.steady_n,
        f.ticks.steady.p50_ms,
        f.ticks.steady.p95_ms
    );
    say!(
        "  tick, every job 10 % slower at one shape: {} refits, p50 {:.0} ms, p95 {:.0} ms ({:.2} ms per job)",
        f.ticks.shifted_n,
        f.ticks.shifted.p50_ms,
        f.ticks.shifted.p95_ms,
        f.ticks.shifted.p50_ms / jobs as f64
    );
}
