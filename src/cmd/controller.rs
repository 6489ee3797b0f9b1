//! `tern controller`: the long-running service (reconcile loop, HTTP API, metrics) on the
//! simulated cloud (in process, or a `tern sim serve` process) or on AWS. The loop and the API
//! are the library's ([`tern::controller::service`], [`tern::api`]); this file turns flags into
//! a store, a lease, a provider and a clock.

mod cloud;

use cloud::cloud;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tern::api::leader::Gate;
use tern::api::{ApiState, router};
use tern::controller::lease::{
    LeaderSeen, Leadership, Lease, default_holder, host_name, lock_state_file,
};
use tern::controller::metrics::Metrics;
use tern::controller::probe::ProbeBounds;
use tern::controller::service::{Service, ServiceConfig, Shared, Workers};
use tern::controller::{Controller, ControllerConfig};
use tern::store::{Store, StoreUrl};
use tern_cloud::Provider;
use tern_sim::SimCloud;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProviderKind {
    /// The simulated cloud: in this process, or a `tern sim serve` process (`--sim-endpoint`).
    Sim,
    /// AWS EC2 through the AWS SDK (needs a tern built with `--features aws`).
    Aws,
    /// GCP Compute Engine through google-cloud-rust (needs a tern built with `--features gcp`).
    Gcp,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value = "sim")]
    provider: ProviderKind,
    /// Spot availability traces for the simulated cloud (default: the demo's AWS V100 traces).
    #[arg(long = "trace", value_name = "FILE")]
    traces: Vec<PathBuf>,
    /// Quota and budget file (see examples/quota.toml): its quotas, team budgets and shares
    /// hold for every plan and launch, and its budgets appear in cost reports. Read again on
    /// SIGHUP and `PUT /v1/quotas`.
    #[arg(long, value_name = "FILE")]
    quota: Option<PathBuf>,
    /// Fairness between teams, as `tern plan --fairness` (wins over the quota file's).
    #[arg(long, value_name = "F", value_parser = super::number::non_negative, allow_negative_numbers = true)]
    fairness: Option<f64>,
    /// Use the simulated cloud of a `tern sim serve` process instead of one in this process.
    #[arg(long, value_name = "URL")]
    sim_endpoint: Option<String>,
    /// Bearer token of the `tern sim serve` process (its `--token`).
    #[arg(long, env = "TERN_SIM_TOKEN", hide_env_values = true)]
    sim_token: Option<String>,
    /// PEM CA certificate to trust for an `https://` simulated cloud endpoint.
    #[arg(long, env = "TERN_CA", value_name = "FILE")]
    ca: Option<PathBuf>,
    /// Virtual seconds of the simulated cloud per wall second (default 60; 1 with
    /// --local-agents, whose trainings run in real time).
    #[arg(long, value_parser = super::number::positive, allow_negative_numbers = true)]
    speed: Option<f64>,
    /// Run a real `tern agent` on this machine for every instance the in-process simulated
    /// cloud runs, as a worker template does on a cloud: its own folder under the state
    /// folder, the job's agent token, the job's `[run]`, its reclaim notice in its own
    /// instance metadata; killed with everything it started when the instance ends. Jobs
    /// without a `[run]` keep simulated workers. Stopping the controller stops every agent.
    #[arg(long)]
    local_agents: bool,
    /// Start the simulated cloud's traces this far in (seconds, or `105m`, `2h`): try a
    /// training against a chosen moment of a recording, such as just before a reclaim.
    #[arg(long, value_name = "DURATION", value_parser = super::number::duration)]
    trace_from: Option<f64>,
    /// Seconds (virtual) an in-process simulated instance takes to boot.
    #[arg(long, default_value_t = 90.0, value_parser = super::number::non_negative, allow_negative_numbers = true)]
    sim_boot_seconds: f64,
    /// Seed of the simulated cloud's fault injection.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// AWS or GCP: the home region (offers, launches; on AWS the SQS queue). On AWS it may come
    /// from AWS_REGION.
    #[arg(long)]
    region: Option<String>,
    /// GCP: the project tern launches in.
    #[arg(long, env = "GOOGLE_CLOUD_PROJECT")]
    project: Option<String>,
    /// GCP: use only these zones of the region (default: every zone that is UP).
    #[arg(long = "zone", value_name = "ZONE")]
    zones: Vec<String>,
    /// GCP: the workers' service account (email).
    #[arg(long, value_name = "EMAIL")]
    service_account: Option<String>,
    /// GCP: the instance template workers start from (`global/instanceTemplates/NAME`): image,
    /// network, and a startup script that runs `tern agent`.
    #[arg(long, value_name = "TEMPLATE")]
    instance_template: Option<String>,
    /// GCP: send every Compute, Cloud TPU and Cloud Billing Catalog call here (a local fake of
    /// the APIs).
    #[arg(long, value_name = "URL")]
    gcp_endpoint: Option<String>,
    /// GCP: send no credentials (only for a local fake at --gcp-endpoint).
    #[arg(long, requires = "gcp_endpoint")]
    gcp_anonymous: bool,
    /// AWS: also list and terminate tern's instances in these regions.
    #[arg(long = "extra-region", value_name = "REGION")]
    extra_regions: Vec<String>,
    /// AWS or GCP: log every mutating call (CreateFleet, TerminateInstances, DeleteMessageBatch;
    /// instances.insert, bulkInsert, delete) with its parameters instead of making it.
    #[arg(long)]
    dry_run: bool,
    /// AWS: the launch template instances start from (name or `lt-…` id).
    #[arg(long)]
    launch_template: Option<String>,
    /// AWS: the SQS queue an EventBridge rule feeds with spot interruption, rebalance and
    /// state-change events.
    #[arg(long, value_name = "URL")]
    sqs_queue_url: Option<String>,
    /// AWS: send every API call here (an emulator such as moto); the SDK also honours
    /// `AWS_ENDPOINT_URL`.
    #[arg(long, value_name = "URL")]
    aws_endpoint: Option<String>,
    /// AWS or GCP: offer only these instance types (GCP: machine types; default: every type
    /// with accelerators).
    #[arg(long = "instance-type", value_name = "TYPE")]
    instance_types: Vec<String>,
    /// AWS or GCP: live prices the controller reads (AWS spot and Pricing API, GCP Billing
    /// Catalog) are recorded in this price history (the one `tern prices` reads).
    #[command(flatten)]
    price_db: super::prices::DbArgs,
    /// State store: a SQLite file (`sqlite:PATH` or a path) or a PostgreSQL URL
    /// (`postgres://user@host/db`) that several controllers share for high availability.
    /// Default: <data dir>/tern/controller.db.
    /// The URL may hold a password: its value is never shown (`--help` included).
    #[arg(long, env = "TERN_STATE", hide_env_values = true)]
    state: Option<String>,
    /// Seconds a leader's lease lasts without renewal: a standby sharing the store takes over
    /// within this plus a fifth of it after the leader dies.
    #[arg(long, default_value_t = 15.0, value_parser = super::number::positive, allow_negative_numbers = true)]
    lease_seconds: f64,
    /// This controller's name in the leader lease (default: host-pid-random).
    #[arg(long)]
    id: Option<String>,
    /// The URL clients reach this controller's API at, written into the leader lease so that a
    /// deposed controller's 503s point clients at the leader (default: the scheme and --listen
    /// address, with this host's name when listening on every address).
    #[arg(long, value_name = "URL")]
    advertise: Option<String>,
    #[arg(long, default_value = "127.0.0.1:8470")]
    listen: SocketAddr,
    /// The bearer token every `/v1` request must carry (`--token` or `--token-file`).
    #[command(flatten)]
    token: super::token::TokenArgs,
    /// Serve the API over HTTPS with this PEM certificate chain (needs `--tls-key`).
    #[arg(long, env = "TERN_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of `--tls-cert`.
    #[arg(long, env = "TERN_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// What the API's clients may hold: connections, slow and idle ones.
    #[command(flatten)]
    connections: super::serving::ConnectionArgs,
    /// Value of the `tern:owner` tag on instances; the leak collector only touches these.
    #[arg(long, default_value = "tern")]
    owner: String,
    /// Collect instances that carry this owner tag but were launched by another state store
    /// (a lost or replaced state file, another controller with the same `--owner`): without
    /// it they are reported (`foreign` events, `tern_foreign_instances`) and left running.
    #[arg(long)]
    adopt: bool,
    /// Do not simulate training progress: only agents' reports move jobs forward.
    #[arg(long)]
    no_simulated_workers: bool,
    /// Log one JSON object per line on stderr instead of human-readable lines.
    #[arg(long)]
    log_json: bool,
    /// Longest cold-start probe of a job nobody has measured (seconds, or `15m`); a spec's
    /// `[probe] max_duration` overrides it.
    #[arg(long, default_value = "15m", value_parser = super::number::duration)]
    probe_max_duration: f64,
    /// Most a cold-start probe may cost, dollars; a spec's `[probe] max_usd` overrides it.
    #[arg(long, default_value_t = 10.0, value_parser = super::number::positive, allow_negative_numbers = true)]
    probe_max_usd: f64,
    /// Read offers (spot prices, capacity) at least every SECONDS while any job is active
    /// (virtual seconds on the in-process simulated cloud); a spot price that moved more than
    /// 1 % re-checks every running job for a cheaper place. Default: once per 5-minute
    /// policy tick.
    #[arg(long, value_name = "SECONDS", value_parser = super::number::positive, allow_negative_numbers = true)]
    offers_every: Option<f64>,
    /// Seconds between periodic reconcile passes (wall time).
    #[arg(long, default_value_t = 1.0, value_parser = super::number::positive, allow_negative_numbers = true)]
    period: f64,
}

impl Args {
    /// Virtual seconds per wall second of the in-process simulated cloud.
    fn speed(&self) -> f64 {
        self.speed
            .unwrap_or(if self.local_agents { 1.0 } else { 60.0 })
    }
}

fn state_url(state: Option<&str>) -> anyhow::Result<StoreUrl> {
    match state {
        Some(s) => Ok(StoreUrl::parse(s)),
        None => {
            let dir = dirs::data_dir()
                .context("no data directory; pass --state PATH")?
                .join("tern");
            std::fs::create_dir_all(&dir)?;
            Ok(StoreUrl::Sqlite(dir.join("controller.db")))
        }
    }
}

fn open_store(url: &StoreUrl) -> anyhow::Result<Store> {
    Store::at(url).with_context(|| match url {
        StoreUrl::Sqlite(path) => format!("opening {}", path.display()),
        StoreUrl::Postgres(_) => "connecting to the PostgreSQL state store".to_string(),
    })
}

/// Resolves on SIGINT or SIGTERM: the controller hands its lease over and exits.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The quota file's quotas against the offers the cloud has now: a family or region none of
/// them has is a typo that would leave the real limit unenforced. Skipped (with a warning)
/// when the offers cannot be read; a reload checks again.
async fn check_quotas_against(
    limits: &tern::limits::Limits,
    path: &std::path::Path,
    provider: &dyn Provider,
    regions: &[tern_cloud::Region],
) -> anyhow::Result<()> {
    if limits.quota.is_empty() {
        return Ok(());
    }
    let mut offers = Vec::new();
    for region in regions {
        match provider.offers(region).await {
            Ok(o) => offers.extend(o),
            Err(e) => {
                tracing::warn!("--quota not checked against the offers of {region}: {e}");
                return Ok(());
            }
        }
    }
    limits.check_against(&offers, &path.display().to_string())?;
    Ok(())
}

/// Read the quota file again at every SIGHUP. A file that does not check leaves the one in
/// force, and the log says where it is wrong. One that checks wins over a quota file set
/// through `PUT /v1/quotas`, which is then forgotten. Each reload is in the audit log.
#[cfg(unix)]
async fn reload_on_hangup(
    path: PathBuf,
    shared: Arc<tern::controller::service::Shared>,
    store: Arc<tern::store::Store>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!(
            "cannot listen for SIGHUP: the quota file reloads only through PUT /v1/quotas"
        );
        return;
    };
    while hup.recv().await.is_some() {
        let shown = path.display().to_string();
        let read = tern_cloud::input::read_text_capped(&path, tern_cloud::input::Limit::SETTINGS);
        let reloaded = match read {
            Ok(text) => shared
                .reload_limits(&text, &shown)
                .map_err(|e| e.to_string()),
            Err(e) => Err(format!("reading {shown}: {e}")),
        };
        let status = match reloaded {
            Ok(l) => {
                tracing::info!(
                    quotas = l.quota.len(),
                    teams = l.team.len(),
                    "SIGHUP: {shown} reloaded"
                );
                match store.clear_setting(tern::store::QUOTAS) {
                    Ok(true) => tracing::info!(
                        "SIGHUP: {shown} replaces the quota file set through PUT /v1/quotas"
                    ),
                    Ok(false) => {}
                    Err(e) => tracing::error!(
                        "SIGHUP: forgetting the quota file set through PUT /v1/quotas: {e}; \
                         it would come back at a restart"
                    ),
                }
                200
            }
            Err(e) => {
                tracing::error!("SIGHUP: {e}; the quota file in force stays");
                400
            }
        };
        let entry = tern::store::AuditEntry {
            id: 0,
            at: chrono::Utc::now(),
            token: "operator".into(),
            role: "admin".into(),
            method: "SIGHUP".into(),
            path: shown,
            job: None,
            team: None,
            status,
        };
        if let Err(e) = store.add_audit(&entry) {
            tracing::error!("SIGHUP: writing the audit log: {e}");
        }
    }
}

/// The quota file in force at start: one set through `PUT /v1/quotas` and stored wins over
/// `--quota`'s (it is the later change; a SIGHUP reload forgets it).
fn quotas_in_force(
    store: &tern::store::Store,
    file: tern::limits::Limits,
) -> anyhow::Result<tern::limits::Limits> {
    let Some((text, at)) = store.setting(tern::store::QUOTAS)? else {
        return Ok(file);
    };
    match tern::limits::Limits::parse(&text, "the quota file set through PUT /v1/quotas") {
        Ok(limits) => {
            tracing::info!(
                "quotas: the quota file set through PUT /v1/quotas at {at} is in force \
                 (a SIGHUP reloads --quota's file instead)"
            );
            Ok(limits)
        }
        Err(e) => {
            tracing::warn!("quotas: {e}; --quota's file is in force instead");
            Ok(file)
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(serve(args))
}

/// Structured logs on stderr: human-readable, or one JSON object per line.
pub(crate) fn init_logs(json: bool) {
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO);
    // A second initialisation (tests calling `run` twice) keeps the first subscriber.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

async fn serve(args: Args) -> anyhow::Result<()> {
    init_logs(args.log_json);
    let token = args
        .token
        .get()?
        .context("the API needs a bearer token: --token, --token-file or TERN_TOKEN")?;
    let (tls, limits) = checked(&args)?;
    let holder = args.id.clone().unwrap_or_else(default_holder);
    let seen = LeaderSeen::default();
    let gate = Gate::new(seen.clone());
    // A standby on a shared store listens from the start and points clients at the leader.
    let url = state_url(args.state.as_deref())?;
    let early = match &url {
        StoreUrl::Postgres(_) => Some(listen(&args, tls.clone(), &gate).await?),
        StoreUrl::Sqlite(_) => None,
    };
    let Some(Led {
        store,
        url,
        shown,
        leadership,
        _file_lock,
    }) = lead(&args, url, &holder, seen).await?
    else {
        return Ok(());
    };
    // Where the cloud and its clock live: in this process, or a `tern sim serve` process.
    let (provider, regions, clock, sim) = cloud(&args).await?;
    if let Some(path) = &args.quota {
        check_quotas_against(&limits, path, provider.as_ref(), &regions).await?;
    }
    let limits = quotas_in_force(&store, limits)?;
    // A real cloud's workers are real: only agents' reports move jobs forward.
    let workers = match (args.provider, args.no_simulated_workers, args.local_agents) {
        (ProviderKind::Sim, false, false) => Workers::Simulated,
        (ProviderKind::Sim, false, true) => Workers::SimulatedUnlessRun,
        _ => Workers::Agents,
    };
    let config = ControllerConfig {
        limits: Arc::new(limits),
        ..controller_config(&args, regions)
    };
    let controller = Controller::open(store.clone(), provider, config)?;
    let shared = Shared::new();
    let metrics = Arc::new(Metrics::new());
    let config = ServiceConfig {
        period: Duration::from_secs_f64(args.period.max(0.05)),
        workers,
    };
    let service = Service::new(
        controller,
        shared.clone(),
        clock.clone(),
        metrics.clone(),
        leadership,
        &config,
    );
    #[cfg(unix)]
    if let Some(path) = args.quota.clone() {
        tokio::spawn(reload_on_hangup(path, shared.clone(), store.clone()));
    }
    let state = ApiState {
        shared,
        store: store.clone(),
        token: token.into(),
        metrics,
        clock,
    };
    // Open before a SQLite controller binds, so its first request is never answered as a
    // standby's (a PostgreSQL standby has listened all along, pointing at the leader).
    gate.open(router(state));
    let (server, listener_addr) = match early {
        Some(listening) => listening,
        None => listen(&args, tls.clone(), &gate).await?,
    };
    let scheme = tern::serve::scheme(tls.as_ref());
    tracing::info!(
        "leading as {}; serving the API on {scheme}://{listener_addr} (state {}, {})",
        holder,
        shown,
        cloud_shown(&args)
    );
    let hosts = match sim.filter(|_| args.local_agents) {
        Some(sim) => {
            let server = format!("{scheme}://{listener_addr}");
            Some(local_hosts(&args, sim, store.clone(), server, &url).await?)
        }
        None => None,
    };
    let mut running = service.spawn()?;
    let ended = tokio::select! {
        ended = running.finished() => {
            ended.map_err(anyhow::Error::from)
                .and_then(|()| Err(anyhow::anyhow!("the reconcile loop stopped")))
        }
        served = server => {
            served.map_err(anyhow::Error::from)
                .and_then(|s| s.map_err(anyhow::Error::from))
                .and_then(|()| Err(anyhow::anyhow!("the HTTP server stopped")))
        }
        () = shutdown_signal() => {
            tracing::info!("shutting down");
            Ok(())
        }
    };
    // The agents first, while the API still answers their last reports.
    if let Some(h) = hosts {
        h.stop().await;
    }
    running.stop()?;
    ended
}

/// The API's server on `--listen`, serving what `gate` lets through (the leader's routes once
/// it is open, a 503 naming the leader before).
async fn listen(
    args: &Args,
    tls: Option<Arc<rustls::ServerConfig>>,
    gate: &Gate,
) -> anyhow::Result<(Serving, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    if gate.is_closed() {
        tracing::info!(
            "listening on {}://{addr}: answering with the leader's address until this \
             controller leads",
            tern::serve::scheme(tls.as_ref())
        );
    }
    let server = tokio::spawn(tern::serve::run_within(
        listener,
        tls,
        gate.router(),
        args.connections.limits(),
    ));
    Ok((server, addr))
}

type Serving = tokio::task::JoinHandle<Result<(), tern::serve::ServeError>>;

/// The hosts of `--local-agents`: one folder per instance beside the state file (or in the
/// data folder for a PostgreSQL store), the agents told this controller's address.
async fn local_hosts(
    args: &Args,
    sim: Arc<SimCloud>,
    store: Arc<Store>,
    server: String,
    url: &StoreUrl,
) -> anyhow::Result<tern::sim::hosts::RunningHosts> {
    let root = match url {
        StoreUrl::Sqlite(path) => {
            let mut name = path.file_name().unwrap_or_default().to_os_string();
            name.push(".hosts");
            path.with_file_name(name)
        }
        StoreUrl::Postgres(_) => dirs::data_dir()
            .context("no data directory for --local-agents' hosts")?
            .join("tern")
            .join("controller.hosts"),
    };
    let config = tern::sim::hosts::HostsConfig {
        exe: std::env::current_exe().context("finding the tern binary for the agents")?,
        server,
        ca: args.tls_cert.clone(),
        root: root.clone(),
        owner: args.owner.clone(),
        simulated_workers: !args.no_simulated_workers,
    };
    let hosts = tern::sim::hosts::start(sim, store, config)
        .await
        .with_context(|| format!("starting --local-agents' hosts in {}", root.display()))?;
    tracing::info!(
        "--local-agents: a real `tern agent` per instance, in {}; instance metadata at {}",
        root.display(),
        hosts.metadata
    );
    Ok(hosts)
}

/// The TLS config, if any, and the quota file (empty without `--quota`), and the flags
/// checked, before anything is opened.
type TlsAndBudgets = (
    Option<std::sync::Arc<rustls::ServerConfig>>,
    tern::limits::Limits,
);

fn checked(args: &Args) -> anyhow::Result<TlsAndBudgets> {
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tern::serve::tls::server_config(cert, key)?),
        _ => None,
    };
    let limits = match &args.quota {
        Some(p) => tern::limits::Limits::load(p)?,
        None => Default::default(),
    };
    let in_process = args.provider == ProviderKind::Sim && args.sim_endpoint.is_none();
    anyhow::ensure!(
        !args.local_agents || in_process,
        "--local-agents runs agents for the instances of the simulated cloud in this process: \
         it needs --provider sim and no --sim-endpoint"
    );
    anyhow::ensure!(
        !args.local_agents || args.speed() == 1.0,
        "--local-agents runs real trainings, in real time: --speed must be 1 (their step \
         times are wall seconds), found {}",
        args.speed()
    );
    anyhow::ensure!(
        args.trace_from.is_none() || in_process,
        "--trace-from starts the traces of the simulated cloud in this process: it needs \
         --provider sim and no --sim-endpoint"
    );
    anyhow::ensure!(
        args.lease_seconds >= 1.0,
        "--lease-seconds must be at least 1"
    );
    if let Some(url) = &args.advertise {
        anyhow::ensure!(
            (url.starts_with("http://") || url.starts_with("https://"))
                && url
                    .split_once("://")
                    .is_some_and(|(_, rest)| !rest.is_empty()),
            "--advertise {url}: expected the API's URL, http://HOST:PORT or https://HOST:PORT"
        );
    }
    Ok((tls, limits))
}

/// The cloud as the log shows it.
fn cloud_shown(args: &Args) -> String {
    match (&args.provider, &args.sim_endpoint) {
        (ProviderKind::Aws, _) => "AWS".to_string(),
        (ProviderKind::Gcp, _) => "GCP".to_string(),
        (ProviderKind::Sim, Some(url)) => format!("simulated cloud at {url}"),
        (ProviderKind::Sim, None) => {
            format!("simulated cloud in process at {}× speed", args.speed())
        }
    }
}

/// The store a leader acts on, and what keeps it the leader.
struct Led {
    store: Arc<Store>,
    url: StoreUrl,
    /// The store as the log shows it.
    shown: String,
    leadership: Option<Lease>,
    _file_lock: Option<std::fs::File>,
}

/// Wait until this process may act on the store: only one controller acts on a store (and
/// serves the API); a standby waits here. A SQLite file is guarded by an OS lock (freed at once
/// when its holder dies), taken before the file is opened; a shared PostgreSQL store by the
/// leader lease. `None`: asked to shut down while waiting.
async fn lead(
    args: &Args,
    url: StoreUrl,
    holder: &str,
    seen: LeaderSeen,
) -> anyhow::Result<Option<Led>> {
    let mut file_lock = None;
    if let StoreUrl::Sqlite(path) = &url {
        tokio::select! {
            lock = lock_state_file(path) => {
                file_lock = Some(lock.with_context(|| format!("locking {}", path.display()))?);
            }
            () = shutdown_signal() => return Ok(None),
        }
    }
    let store = Arc::new(open_store(&url)?);
    let shown = match &url {
        StoreUrl::Sqlite(path) => path.display().to_string(),
        StoreUrl::Postgres(_) => store.describe(),
    };
    let mut leadership = None;
    if let StoreUrl::Postgres(_) = &url {
        let ttl = Duration::from_secs_f64(args.lease_seconds);
        let mut lease = Leadership::new(store.clone(), holder.to_string(), ttl)
            .advertising(advertised(args))
            .telling(seen);
        tokio::select! {
            () = lease.wait_to_lead() => {}
            () = shutdown_signal() => return Ok(None),
        }
        leadership = Some(
            lease
                .keep()
                .context("starting the lease's renewal thread")?,
        );
    }
    Ok(Some(Led {
        store,
        url,
        shown,
        leadership,
        _file_lock: file_lock,
    }))
}

/// Where clients reach this controller: `--advertise`, or the scheme and listen address (this
/// host's name in place of an unspecified address).
fn advertised(args: &Args) -> String {
    if let Some(url) = &args.advertise {
        return url.clone();
    }
    let scheme = if args.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    let host = if args.listen.ip().is_unspecified() {
        host_name().unwrap_or_else(|| args.listen.ip().to_string())
    } else {
        args.listen.ip().to_string()
    };
    match args.listen.ip() {
        std::net::IpAddr::V6(_) if host.contains(':') => {
            format!("{scheme}://[{host}]:{}", args.listen.port())
        }
        _ => format!("{scheme}://{host}:{}", args.listen.port()),
    }
}

fn controller_config(args: &Args, regions: Vec<tern_cloud::Region>) -> ControllerConfig {
    let in_process_sim = args.provider == ProviderKind::Sim && args.sim_endpoint.is_none();
    let mut config = ControllerConfig {
        adopt_foreign: args.adopt,
        probe: ProbeBounds {
            max_seconds: args.probe_max_duration,
            max_usd: args.probe_max_usd,
        },
        // A pass follows the last within the period plus the pass's own time, in the clock's
        // time (virtual for an in-process simulated cloud): a second of work there, ten against
        // a real cloud's API and a full MILP.
        pass_gap: Duration::from_secs_f64(if in_process_sim {
            (args.period.max(0.05) + 1.0) * args.speed()
        } else {
            args.period.max(0.05) + 10.0
        }),
        fairness: args.fairness,
        offers_every: args.offers_every.map(Duration::from_secs_f64),
        ..ControllerConfig::new(args.owner.clone(), regions)
    };
    // The in-process cloud boots in a known time: the planner's price of provisioning (a
    // launch's wait, a move's restart) is that, not a real cloud's five minutes.
    if in_process_sim {
        config.plan.provision_s = args.sim_boot_seconds;
    }
    config
}
