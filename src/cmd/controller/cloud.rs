//! Which cloud `tern controller` acts on: AWS, GCP or the simulated cloud (in this process,
//! from `--trace-from` on, or a `tern sim serve` process), its regions and the loop's clock.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use chrono::Utc;
use tern::controller::service::{Clock, WallClock};
use tern::sim::RemoteSim;
use tern::sim::clock::{LocalSimClock, RemoteSimClock};
use tern_cloud::Provider;
use tern_sim::cloud::SimConfig;
use tern_sim::{FaultSchedule, SimCloud};

use super::{Args, ProviderKind};

/// The price history live prices are recorded in (the one `tern prices` reads).
#[cfg(any(feature = "aws", feature = "gcp"))]
fn open_price_history(args: &Args) -> anyhow::Result<tern_pricing::PriceHistory> {
    let path = args.price_db.path()?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    tern_pricing::PriceHistory::open(&path)
        .with_context(|| format!("opening the price history {}", path.display()))
}

/// The AWS provider from the flags; credentials come from the standard AWS chain.
#[cfg(feature = "aws")]
async fn aws_provider(args: &Args) -> anyhow::Result<(Arc<dyn Provider>, Vec<tern_cloud::Region>)> {
    let region = args
        .region
        .clone()
        .or_else(|| std::env::var("AWS_REGION").ok())
        .context("--provider aws needs --region (or AWS_REGION)")?;
    let config = tern_aws::AwsConfig {
        extra_regions: args.extra_regions.clone(),
        endpoint_url: args.aws_endpoint.clone(),
        queue_url: args.sqs_queue_url.clone(),
        dry_run: args.dry_run,
        owner: Some(args.owner.clone()),
        launch_template: args.launch_template.clone(),
        instance_types: args.instance_types.clone(),
        ..tern_aws::AwsConfig::new(region)
    };
    // CreateFleet takes its AMI, network and instance profile from a launch template only.
    anyhow::ensure!(
        config.launch_template.is_some() || config.dry_run,
        "--provider aws needs --launch-template NAME (the AMI, subnet and instance profile of \
         the workers; the Terraform module creates one), or --dry-run"
    );
    let history = open_price_history(args)?;
    let provider = tern_aws::AwsProvider::connect(config)
        .await
        .context("connecting to AWS")?
        .with_price_history(Arc::new(std::sync::Mutex::new(history)));
    let regions = provider.regions();
    Ok((Arc::new(provider), regions))
}

#[cfg(not(feature = "aws"))]
async fn aws_provider(_: &Args) -> anyhow::Result<(Arc<dyn Provider>, Vec<tern_cloud::Region>)> {
    bail!(
        "this tern was built without AWS support; build it with `cargo install --path . --features aws`"
    )
}

/// The GCP provider from the flags; credentials come from Application Default Credentials.
#[cfg(feature = "gcp")]
async fn gcp_provider(args: &Args) -> anyhow::Result<(Arc<dyn Provider>, Vec<tern_cloud::Region>)> {
    let project = args
        .project
        .clone()
        .context("--provider gcp needs --project (or GOOGLE_CLOUD_PROJECT)")?;
    let region = args
        .region
        .clone()
        .context("--provider gcp needs --region (e.g. us-central1)")?;
    if let Some(z) = args
        .zones
        .iter()
        .find(|z| !z.starts_with(&format!("{region}-")))
    {
        bail!("--zone {z} is not a zone of --region {region} (expected {region}-a, {region}-b, …)");
    }
    let config = tern_gcp::GcpConfig {
        zones: args.zones.clone(),
        endpoint: args.gcp_endpoint.clone(),
        billing_endpoint: args.gcp_endpoint.clone(),
        tpu_endpoint: args.gcp_endpoint.clone(),
        anonymous: args.gcp_anonymous,
        service_account: args.service_account.clone(),
        instance_template: args.instance_template.clone(),
        dry_run: args.dry_run,
        owner: Some(args.owner.clone()),
        machine_types: args.instance_types.clone(),
        ..tern_gcp::GcpConfig::new(project, region)
    };
    let history = open_price_history(args)?;
    let provider = tern_gcp::GcpProvider::connect(config)
        .await
        .context("connecting to GCP")?
        .with_price_history(Arc::new(std::sync::Mutex::new(history)));
    let regions = provider.regions();
    Ok((Arc::new(provider), regions))
}

#[cfg(not(feature = "gcp"))]
async fn gcp_provider(_: &Args) -> anyhow::Result<(Arc<dyn Provider>, Vec<tern_cloud::Region>)> {
    bail!(
        "this tern was built without GCP support; build it with `cargo install --path . --features gcp`"
    )
}

/// The provider, the regions whose offers the planner sees, the clock of the loop, and the
/// simulated cloud when it is in this process.
pub(super) type CloudParts = (
    Arc<dyn Provider>,
    Vec<tern_cloud::Region>,
    Arc<dyn Clock>,
    Option<Arc<SimCloud>>,
);

/// How long a starting controller keeps asking a cloud that fails transiently (a connection
/// refused or reset, a throttle) before it gives up: a controller and its simulated cloud
/// often start together, and a blip at start is no reason to exit.
const START_PATIENCE: Duration = Duration::from_secs(30);

/// `call` until it succeeds, fails for good, or [`START_PATIENCE`] has passed.
async fn patiently<T, F, Fut>(what: &str, mut call: F) -> Result<T, tern_cloud::ProviderError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tern_cloud::ProviderError>>,
{
    let until = std::time::Instant::now() + START_PATIENCE;
    let mut delay = Duration::from_millis(100);
    loop {
        match call().await {
            Err(e) if e.is_retryable() && std::time::Instant::now() + delay < until => {
                tracing::warn!(error = %e, "asking the simulated cloud for {what}: {e}; trying again");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

pub(super) async fn cloud(args: &Args) -> anyhow::Result<CloudParts> {
    match (args.provider, &args.sim_endpoint) {
        (ProviderKind::Aws, _) => {
            let (provider, regions) = aws_provider(args).await?;
            Ok((provider, regions, Arc::new(WallClock), None))
        }
        (ProviderKind::Gcp, _) => {
            let (provider, regions) = gcp_provider(args).await?;
            Ok((provider, regions, Arc::new(WallClock), None))
        }
        (ProviderKind::Sim, Some(url)) => {
            let sim_token =
                super::super::token::resolve(args.sim_token.as_deref(), None, "--sim-token")?;
            let http = tern::http::client_with_ca(args.ca.as_deref())?;
            let remote = RemoteSim::new(url.clone(), http).with_token(sim_token);
            let regions = patiently("its regions", || remote.regions())
                .await
                .with_context(|| format!("asking the simulated cloud at {url} for its regions"))?;
            let clock = patiently("its clock", || RemoteSimClock::new(remote.clone()))
                .await
                .context("reading the simulated cloud's clock")?;
            Ok((Arc::new(remote), regions, Arc::new(clock), None))
        }
        (ProviderKind::Sim, None) => {
            let config = SimConfig {
                start: Utc::now(),
                boot: Duration::from_secs_f64(args.sim_boot_seconds),
                faults: FaultSchedule {
                    seed: args.seed,
                    ..FaultSchedule::default()
                },
                ..SimConfig::default()
            };
            let mut traces =
                tern::sim::sim_traces(&args.traces, args.seed, &config.instance_type.name)?;
            super::super::demo::print_trace_note(&traces);
            let (config, within) = match args.trace_from {
                Some(from) => starting_traces_at(&mut traces.traces, from, config)?,
                None => (config, Duration::ZERO),
            };
            let regions = tern::sim::regions_of(&traces.traces);
            let sim = Arc::new(SimCloud::new(traces.traces, config));
            // Into the first tick as far as --trace-from says: the clock reads now again.
            sim.advance(within);
            let clock = LocalSimClock::new(sim.clone(), args.speed());
            Ok((sim.clone(), regions, Arc::new(clock), Some(sim)))
        }
    }
}

/// The traces `from` seconds in: whole ticks dropped from each, and the part of a tick left
/// (of the shortest gap) as a start that much earlier. `config` with that start, and the
/// part to advance the cloud by before its clock starts.
fn starting_traces_at(
    traces: &mut [tern_sim::Trace],
    from: f64,
    config: SimConfig,
) -> anyhow::Result<(SimConfig, Duration)> {
    let gap = traces.iter().map(|t| t.gap_seconds).min().unwrap_or(1);
    let within = from % f64::from(gap);
    for t in traces.iter_mut() {
        let first = ((from - within) / f64::from(t.gap_seconds)).floor() as usize;
        let (shown, hours) = (t.source.display().to_string(), t.hours());
        *t = t
            .clone()
            .from_tick(first)
            .with_context(|| format!("--trace-from {from} s: {shown} is only {hours:.1} h long"))?;
    }
    let within = Duration::from_secs_f64(within);
    let start = config.start - chrono::TimeDelta::from_std(within)?;
    Ok((SimConfig { start, ..config }, within))
}
