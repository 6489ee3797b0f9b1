//! `tern bench api`: latency of the controller's HTTP API while reconcile passes run against a
//! slow cloud (every provider call delayed, 200 ms by default).
//!
//! Setup (not measured): the `bench reconcile` fleet (N jobs, M instances) is placed and booted
//! with no delay. Measured: the service runs passes back to back with the delay on, while a
//! client on its own thread alternates `GET /v1/jobs` and `POST /v1/jobs/{name}/progress` and
//! times each answer. What the API must show is that no request waits for a cloud call.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tern::api::{ApiState, router};
use tern::controller::metrics::Metrics;
use tern::controller::service::{Clock, Service, ServiceConfig, Shared};
use tern::sim::clock::LocalSimClock;

use super::bench_reconcile::{FleetArgs, bench_fleet};
use super::output::print_json_line;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub fleet: FleetArgs,
    /// Delay added to every cloud call while measuring, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub cloud_delay_ms: u64,
    /// How long to measure, in seconds.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, serde::Serialize)]
struct Figure {
    jobs: u32,
    instances: usize,
    cloud_delay_ms: u64,
    passes: u64,
    get_jobs_requests: usize,
    get_jobs_p50_ms: f64,
    get_jobs_p99_ms: f64,
    progress_requests: usize,
    progress_p50_ms: f64,
    progress_p99_ms: f64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(bench(args))
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The load: one client on its own thread and runtime, so its timings do not include waiting
/// for the server's workers to be free for the client itself.
fn load(
    base: String,
    token: String,
    jobs: u32,
    seconds: u64,
) -> std::thread::JoinHandle<anyhow::Result<(Vec<f64>, Vec<f64>)>> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let client = tern::http::client()?;
            let workers = start_workers(&client, &base, &token).await?;
            let (mut gets, mut posts) = (Vec::new(), Vec::new());
            let t_end = Instant::now() + Duration::from_secs(seconds);
            let mut k: u64 = 0;
            while Instant::now() < t_end {
                k += 1;
                let t0 = Instant::now();
                let r = client
                    .get(format!("{base}/v1/jobs"))
                    .bearer_auth(&token)
                    .send()
                    .await?;
                anyhow::ensure!(r.status().is_success(), "GET /v1/jobs: {}", r.status());
                r.bytes().await?;
                gets.push(t0.elapsed().as_secs_f64() * 1e3);
                let job = format!("bench-{:05}", (k * 7919) % u64::from(jobs));
                let Some((instance, incarnation)) = workers.get(&job) else {
                    continue;
                };
                let t0 = Instant::now();
                let r = client
                    .post(format!("{base}/v1/jobs/{job}/progress"))
                    .bearer_auth(&token)
                    .json(&serde_json::json!({
                        "done_samples": k as f64,
                        "checkpoint_samples": 0.0,
                        "instance": instance,
                        "incarnation": incarnation,
                    }))
                    .send()
                    .await?;
                anyhow::ensure!(r.status().is_success(), "POST progress: {}", r.status());
                r.bytes().await?;
                posts.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            Ok((gets, posts))
        })
    })
}

/// Start workers on each job's first instance, as its agent would: (instance, incarnation)
/// by job, for the progress reports.
async fn start_workers(
    client: &reqwest::Client,
    base: &str,
    token: &str,
) -> anyhow::Result<std::collections::HashMap<String, (String, u64)>> {
    let jobs: Vec<tern::api::wire::JobStatus> = client
        .get(format!("{base}/v1/jobs"))
        .bearer_auth(token)
        .send()
        .await?
        .json()
        .await?;
    let mut out = std::collections::HashMap::new();
    for j in jobs {
        let Some(id) = j.instance_ids.first() else {
            continue;
        };
        let r = client
            .post(format!("{base}/v1/jobs/{}/start", j.name))
            .bearer_auth(token)
            .json(&serde_json::json!({ "instance": id }))
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "POST start: {}", r.status());
        let started: tern::api::wire::StartReply = r.json().await?;
        out.insert(j.name, (id.clone(), started.incarnation));
    }
    anyhow::ensure!(
        !out.is_empty(),
        "no job has an instance to start workers on"
    );
    Ok(out)
}

async fn bench(args: Args) -> anyhow::Result<()> {
    let (sim, cloud, mut ctl) = bench_fleet(args.fleet)?;
    ctl.pass(sim.now()).await?;
    sim.advance(Duration::from_secs(120));
    ctl.pass(sim.now()).await?;
    let instances = ctl.instances().count();
    anyhow::ensure!(instances > 0, "the benchmark fleet did not launch");
    cloud.set_delay(Duration::from_millis(args.cloud_delay_ms));

    let store = ctl.store().clone();
    let clock: Arc<dyn Clock> = Arc::new(LocalSimClock::new(sim.clone(), 60.0));
    let shared = Shared::new();
    let metrics = Arc::new(Metrics::new());
    let config = ServiceConfig {
        period: Duration::ZERO,
        workers: tern::controller::service::Workers::Agents,
    };
    let service = Service::new(
        ctl,
        shared.clone(),
        clock.clone(),
        metrics.clone(),
        None,
        &config,
    );
    let token = "bench-token".to_string();
    let state = ApiState {
        shared,
        store,
        token: token.clone().into(),
        metrics: metrics.clone(),
        clock,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    // The serving stack the controller runs: its accept loop, connection caps and deadlines.
    tokio::spawn(tern::serve::run_within(
        listener,
        None,
        router(state),
        tern::serve::ConnectionLimits::default(),
    ));
    let client = load(base, token, args.fleet.jobs, args.seconds);
    let running = service.spawn()?;
    let (mut gets, mut posts) = tokio::task::spawn_blocking(move || client.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the load thread panicked"))??;
    running.stop()?;
    let passes = metrics.passes();
    gets.sort_by(f64::total_cmp);
    posts.sort_by(f64::total_cmp);
    let figure = Figure {
        jobs: args.fleet.jobs,
        instances,
        cloud_delay_ms: args.cloud_delay_ms,
        passes,
        get_jobs_requests: gets.len(),
        get_jobs_p50_ms: percentile(&gets, 0.5),
        get_jobs_p99_ms: percentile(&gets, 0.99),
        progress_requests: posts.len(),
        progress_p50_ms: percentile(&posts, 0.5),
        progress_p99_ms: percentile(&posts, 0.99),
    };
    if args.json {
        print_json_line(&figure).context("printing")?;
    } else {
        say!(
            "API over {} jobs / {} instances, cloud calls +{} ms, {} passes in {} s:\n  GET /v1/jobs: p50 {:.1} ms, p99 {:.1} ms ({} requests)\n  POST /v1/jobs/{{name}}/progress: p50 {:.1} ms, p99 {:.1} ms ({} requests)",
            figure.jobs,
            figure.instances,
            figure.cloud_delay_ms,
            figure.passes,
            args.seconds,
            figure.get_jobs_p50_ms,
            figure.get_jobs_p99_ms,
            figure.get_jobs_requests,
            figure.progress_p50_ms,
            figure.progress_p99_ms,
            figure.progress_requests
        );
    }
    Ok(())
}
