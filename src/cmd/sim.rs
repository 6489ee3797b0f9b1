//! `tern sim serve` / `tern sim report`: the simulated cloud as its own process
//! ([`tern::sim::server`]), and what it holds and bills.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use tern::sim::{RemoteSim, server, sim_traces};
use tern::store::{Store, StoreUrl};
use tern_sim::cloud::SimConfig;
use tern_sim::{FaultSchedule, SimCloud, SimQuota};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Serve the simulated cloud over HTTP (the provider API, its clock and a report).
    Serve(ServeArgs),
    /// Print what the simulated cloud holds and bills; last line of `--json` is one object.
    Report(ReportArgs),
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[arg(long, default_value = "127.0.0.1:8480")]
    listen: SocketAddr,
    /// Spot availability traces, one zone each (default: the demo's AWS V100 traces).
    #[arg(long = "trace", value_name = "FILE")]
    traces: Vec<PathBuf>,
    /// Virtual seconds per wall second.
    #[arg(long, default_value_t = 60.0, value_parser = super::number::positive, allow_negative_numbers = true)]
    speed: f64,
    /// Seed of the fault injection.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fraction of calls throttled (seeded).
    #[arg(long, default_value_t = 0.0, value_parser = super::number::fraction, allow_negative_numbers = true)]
    throttle: f64,
    /// Fraction of calls failing with a transient server error (seeded).
    #[arg(long, default_value_t = 0.0, value_parser = super::number::fraction, allow_negative_numbers = true)]
    transient: f64,
    /// Fraction of spot reclaims with no notice and no preemption event (seeded).
    #[arg(long, default_value_t = 0.0, value_parser = super::number::fraction, allow_negative_numbers = true)]
    lost_notices: f64,
    /// Fraction of spot notices delivered a quarter of their lead time before the reclaim.
    #[arg(long, default_value_t = 0.0, value_parser = super::number::fraction, allow_negative_numbers = true)]
    late_notices: f64,
    /// Bearer token every request must carry (required to listen beyond loopback).
    #[arg(long, env = "TERN_SIM_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the bearer token from this file (its trailing newline dropped) instead.
    #[arg(long, env = "TERN_SIM_TOKEN_FILE", value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// An accelerator quota, enforced on launch and listed by the provider's `quotas`:
    /// `REGION:FAMILY[:CAPACITY]=LIMIT` (e.g. `us-east-1:V100:spot=8`); repeatable.
    #[arg(long = "quota", value_name = "QUOTA", value_parser = str::parse::<SimQuota>)]
    quotas: Vec<SimQuota>,
    /// What the server's clients may hold: connections, slow and idle ones.
    #[command(flatten)]
    connections: super::serving::ConnectionArgs,
}

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    #[arg(long, default_value = "http://127.0.0.1:8480")]
    endpoint: String,
    /// Bearer token of the simulated cloud (its `--token`).
    #[arg(long, env = "TERN_SIM_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// PEM CA certificate to trust for an `https://` endpoint.
    #[arg(long, env = "TERN_CA", value_name = "FILE")]
    ca: Option<PathBuf>,
    /// The controller's owner tag.
    #[arg(long, default_value = "tern")]
    owner: String,
    /// The controller's state store (a SQLite path or a PostgreSQL URL, as for `tern
    /// controller --state`): running instances that no live record or open intent there
    /// accounts for are counted as orphaned.
    #[arg(long)]
    state: Option<String>,
    #[arg(long)]
    json: bool,
}

pub fn run(command: Command) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match command {
        Command::Serve(args) => runtime.block_on(serve(args)),
        Command::Report(args) => runtime.block_on(print_report(args)),
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.speed > 0.0, "--speed must be > 0");
    let token =
        super::token::resolve(args.token.as_deref(), args.token_file.as_deref(), "--token")?;
    // Anyone who reaches it can launch and terminate: open only on this machine.
    anyhow::ensure!(
        token.is_some() || args.listen.ip().is_loopback(),
        "listening on {} (beyond loopback) needs --token or --token-file",
        args.listen
    );
    let config = SimConfig {
        start: Utc::now(),
        boot: Duration::from_secs(90),
        faults: FaultSchedule {
            seed: args.seed,
            throttle: args.throttle,
            transient: args.transient,
            lost_notices: args.lost_notices,
            late_notices: args.late_notices,
            ..FaultSchedule::default()
        },
        ..SimConfig::default()
    };
    let traces = sim_traces(&args.traces, args.seed, &config.instance_type.name)?;
    super::demo::print_trace_note(&traces);
    let regions = tern::sim::regions_of(&traces.traces);
    let sim = args
        .quotas
        .into_iter()
        .fold(SimCloud::new(traces.traces, config), SimCloud::with_quota);
    let sim = Arc::new(sim);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    say_err!(
        "tern sim: serving the simulated cloud on http://{} at {}× speed",
        listener.local_addr()?,
        args.speed
    );
    tokio::spawn(server::run_clock(sim.clone(), args.speed));
    let router = server::router(sim, regions, token.map(Into::into));
    tern::serve::run_within(listener, None, router, args.connections.limits()).await?;
    Ok(())
}

async fn print_report(args: ReportArgs) -> anyhow::Result<()> {
    let token = super::token::resolve(args.token.as_deref(), None, "--token")?;
    let http = tern::http::client_with_ca(args.ca.as_deref())?;
    let remote = RemoteSim::new(args.endpoint.clone(), http).with_token(token);
    let report = remote.report(&args.owner).await.with_context(|| {
        format!(
            "asking the simulated cloud at {} for its report",
            args.endpoint
        )
    })?;
    let orphaned: Option<usize> = match &args.state {
        None => None,
        Some(state) => {
            let url = StoreUrl::parse(state);
            let store = Store::read_only(&url).with_context(|| match &url {
                StoreUrl::Sqlite(path) => format!("opening the state store {}", path.display()),
                // The URL may hold a password.
                StoreUrl::Postgres(_) => "opening the PostgreSQL state store".to_string(),
            })?;
            Some(server::orphans(&report, &store.load()?))
        }
    };
    if args.json {
        return crate::cmd::output::print_json_line(&serde_json::json!({
            "now": report.now,
            "running_instances": report.running_instances,
            "orphaned_instances": orphaned,
            "duplicate_launches": report.duplicate_launches,
            "billed_dollars": report.billed_dollars,
            "launched_instances": report.launched_instances,
        }));
    }
    say!(
        "{} running, {} orphaned, {} duplicate launches, {} launched in all, ${:.2} billed (virtual time {})",
        report.running_instances,
        orphaned.map_or("?".to_string(), |n| n.to_string()),
        report.duplicate_launches,
        report.launched_instances,
        report.billed_dollars,
        report.now
    );
    Ok(())
}
