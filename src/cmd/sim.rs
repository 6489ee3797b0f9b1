//! `tern sim serve` / `tern sim report`: the simulated cloud as its own process, so it keeps
//! instances, clock and bills while the controller restarts (`tern controller --sim-endpoint`).
//!
//! The server wraps a [`SimCloud`] and keeps a ledger beside it: when each instance started
//! and ended and at what price (for `billed_dollars`), and which idempotency keys created
//! instances for each intent (a second key with new instances for one intent is a duplicate
//! launch).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Router;
use axum::extract::{Query, State};
use axum::routing::{get, post};
use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use tern_cloud::{
    IdempotencyKey, Instance, InstanceId, InstanceState, Interruption, InterruptionKind,
    LaunchRequest, Offer, Provider, ProviderError, Region,
};
use tern_sim::cloud::SimConfig;
use tern_sim::{FaultSchedule, SimCloud};

use crate::controller::remote::{Wire, WireError, WireOutcome};

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
    #[arg(long, default_value_t = 60.0)]
    speed: f64,
    /// Seed of the fault injection.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fraction of calls throttled (seeded).
    #[arg(long, default_value_t = 0.0)]
    throttle: f64,
}

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    #[arg(long, default_value = "http://127.0.0.1:8480")]
    endpoint: String,
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

#[derive(Debug, Default)]
struct Ledger {
    /// Instance → (start, $/h).
    started: HashMap<InstanceId, (DateTime<Utc>, f64)>,
    ended: HashMap<InstanceId, DateTime<Utc>>,
    /// Intent tag → keys whose launch created instances.
    keys: HashMap<String, HashSet<IdempotencyKey>>,
}

#[derive(Clone)]
struct SimState {
    sim: Arc<SimCloud>,
    ledger: Arc<Mutex<Ledger>>,
    regions: Arc<Vec<Region>>,
}

impl SimState {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One running instance in the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Running {
    pub id: String,
    pub intent: Option<String>,
    pub job: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub now: DateTime<Utc>,
    pub running_instances: usize,
    pub running: Vec<Running>,
    pub duplicate_launches: usize,
    pub billed_dollars: f64,
    pub launched_instances: usize,
}

#[derive(Debug, Deserialize)]
struct RegionArg {
    region: Region,
}

#[derive(Debug, Deserialize)]
struct IdArg {
    id: InstanceId,
}

#[derive(Debug, Deserialize)]
struct OwnerArg {
    owner: String,
}

fn wire<T>(r: Result<T, ProviderError>) -> axum::Json<Wire<T>> {
    axum::Json(match r {
        Ok(v) => Wire::Ok(v),
        Err(e) => Wire::Err(WireError::from(&e)),
    })
}

async fn offers(
    State(s): State<SimState>,
    axum::Json(a): axum::Json<RegionArg>,
) -> axum::Json<Wire<Vec<Offer>>> {
    wire(s.sim.offers(&a.region).await)
}

async fn launch(
    State(s): State<SimState>,
    axum::Json(req): axum::Json<LaunchRequest>,
) -> axum::Json<Wire<WireOutcome>> {
    let out = s.sim.launch(&req).await;
    if let Ok(o) = &out {
        let mut l = s.ledger();
        let mut new = false;
        for i in &o.instances {
            if !l.started.contains_key(&i.id) {
                new = true;
                l.started
                    .insert(i.id.clone(), (i.launched_at, i.offer.price_per_hour));
            }
        }
        if new {
            l.keys
                .entry(req.intent.to_string())
                .or_default()
                .insert(req.key);
        }
    }
    wire(out.map(|o| WireOutcome::from(&o)))
}

async fn terminate(
    State(s): State<SimState>,
    axum::Json(a): axum::Json<IdArg>,
) -> axum::Json<Wire<()>> {
    let out = s.sim.terminate(&a.id).await;
    if out.is_ok() {
        let now = s.sim.now();
        let mut l = s.ledger();
        if l.started.contains_key(&a.id) {
            l.ended.entry(a.id.clone()).or_insert(now);
        }
    }
    wire(out)
}

async fn get_instance(
    State(s): State<SimState>,
    axum::Json(a): axum::Json<IdArg>,
) -> axum::Json<Wire<Option<Instance>>> {
    wire(s.sim.get(&a.id).await)
}

async fn list(
    State(s): State<SimState>,
    axum::Json(a): axum::Json<OwnerArg>,
) -> axum::Json<Wire<Vec<Instance>>> {
    wire(s.sim.list(&a.owner).await)
}

async fn interruptions(State(s): State<SimState>) -> axum::Json<Wire<Vec<Interruption>>> {
    let out = s.sim.interruptions().await;
    if let Ok(v) = &out {
        let now = s.sim.now();
        let mut l = s.ledger();
        for n in v {
            if n.kind == InterruptionKind::Preempted {
                l.ended
                    .entry(n.instance.clone())
                    .or_insert(n.deadline.unwrap_or(now));
            }
        }
    }
    wire(out)
}

async fn now(State(s): State<SimState>) -> axum::Json<DateTime<Utc>> {
    axum::Json(s.sim.now())
}

async fn zones_regions(State(s): State<SimState>) -> axum::Json<Vec<Region>> {
    axum::Json(s.regions.as_ref().clone())
}

#[derive(Debug, Deserialize)]
struct ReportQuery {
    owner: String,
}

async fn report(
    State(s): State<SimState>,
    Query(q): Query<ReportQuery>,
) -> axum::Json<Wire<Report>> {
    // The listing goes through the fault schedule like any call: retry a few times.
    let mut listed = Err(ProviderError::Transient {
        message: "not tried".into(),
    });
    for _ in 0..50 {
        listed = s.sim.list(&q.owner).await;
        if listed.is_ok() {
            break;
        }
    }
    let now = s.sim.now();
    wire(listed.map(|instances| {
        let running: Vec<Running> = instances
            .iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .map(|i| Running {
                id: i.id.to_string(),
                intent: i.intent_id().map(|x| x.to_string()),
                job: i.job().map(String::from),
            })
            .collect();
        let alive: BTreeSet<&str> = running.iter().map(|r| r.id.as_str()).collect();
        let l = s.ledger();
        let billed: f64 = l
            .started
            .iter()
            .map(|(id, (start, price))| {
                // Ended by our record; else still running now; else it went without us
                // seeing it (counted until now: an upper bound).
                let end = l.ended.get(id).copied().unwrap_or(now);
                let end = if alive.contains(id.0.as_str()) {
                    now
                } else {
                    end
                };
                price * ((end - *start).num_milliseconds().max(0) as f64 / 3_600_000.0)
            })
            .sum::<f64>()
            + 0.0;
        Report {
            now,
            running_instances: running.len(),
            running,
            duplicate_launches: l.keys.values().map(|k| k.len().saturating_sub(1)).sum(),
            billed_dollars: billed,
            launched_instances: l.started.len(),
        }
    }))
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?
            .block_on(serve(args)),
        Command::Report(args) => print_report(args),
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.speed > 0.0, "--speed must be > 0");
    let config = SimConfig {
        start: Utc::now(),
        boot: Duration::from_secs(90),
        faults: FaultSchedule {
            seed: args.seed,
            throttle: args.throttle,
            ..FaultSchedule::default()
        },
        ..SimConfig::default()
    };
    let traces = super::demo::sim_traces(&args.traces, args.seed, &config.instance_type.name)?;
    let regions = super::demo::regions_of(&traces);
    let start = config.start;
    let sim = Arc::new(SimCloud::new(traces, config));
    let state = SimState {
        sim: sim.clone(),
        ledger: Arc::new(Mutex::new(Ledger::default())),
        regions: Arc::new(regions),
    };
    let app = Router::new()
        .route("/provider/offers", post(offers))
        .route("/provider/launch", post(launch))
        .route("/provider/terminate", post(terminate))
        .route("/provider/get", post(get_instance))
        .route("/provider/list", post(list))
        .route("/provider/interruptions", post(interruptions))
        .route("/now", get(now))
        .route("/regions", get(zones_regions))
        .route("/report", get(report))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    eprintln!(
        "tern sim: serving the simulated cloud on http://{} at {}× speed",
        listener.local_addr()?,
        args.speed
    );
    let wall0 = Instant::now();
    let speed = args.speed;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let target = start
                + TimeDelta::milliseconds((wall0.elapsed().as_secs_f64() * speed * 1e3) as i64);
            if let Ok(d) = (target - sim.now()).to_std() {
                sim.advance(d);
            }
        }
    });
    axum::serve(listener, app).await?;
    Ok(())
}

fn print_report(args: ReportArgs) -> anyhow::Result<()> {
    let reply = crate::api::client::request(
        &args.endpoint,
        None,
        "GET",
        &format!("/report?owner={}", args.owner),
        "text/plain",
        "",
    )?;
    anyhow::ensure!(
        reply.status == 200,
        "sim answered {}: {}",
        reply.status,
        reply.body
    );
    let report = match serde_json::from_str::<Wire<Report>>(&reply.body)? {
        Wire::Ok(r) => r,
        Wire::Err(e) => anyhow::bail!("sim report failed: {}", ProviderError::from(e)),
    };
    let orphaned: Option<usize> = match &args.state {
        None => None,
        Some(state) => {
            let store = crate::store::Store::at(&crate::store::StoreUrl::parse(state))
                .with_context(|| format!("opening the state store {state}"))?;
            let snap = store.load()?;
            let live: BTreeSet<String> = snap.instances.iter().map(|i| i.id.to_string()).collect();
            let open: BTreeSet<String> = snap.intents.iter().map(|i| i.id.to_string()).collect();
            Some(
                report
                    .running
                    .iter()
                    .filter(|r| {
                        !live.contains(&r.id)
                            && !r.intent.as_ref().is_some_and(|i| open.contains(i))
                    })
                    .count(),
            )
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
    println!(
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
