//! `tern sim serve`: a [`SimCloud`] behind HTTP, so it keeps instances, clock and bills while
//! a controller restarts (`tern controller --sim-endpoint`).
//!
//! Beside the cloud the server keeps a ledger: when each instance started and ended and on what
//! offer (for `billed_dollars`, billed the way cost reports bill: per second with a one-minute
//! minimum, at the pool's price as it moved), and which idempotency keys created instances for
//! each intent (a second key with new instances for one intent is a duplicate launch).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Query, State};
use axum::routing::{get, post};
use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use tern_cloud::{
    CloudQuota, IdempotencyKey, Instance, InstanceId, InstanceState, Interruption,
    InterruptionKind, LaunchRequest, Offer, Provider, ProviderError, Region,
};
use tern_sim::SimCloud;

use super::wire::{Wire, WireError, WireOutcome};
use crate::serve;

#[derive(Debug, Default)]
struct Ledger {
    /// Instance → (start, the offer it launched on, at its launch price).
    started: HashMap<InstanceId, (DateTime<Utc>, Arc<Offer>)>,
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
                    .insert(i.id.clone(), (i.launched_at, i.offer.clone()));
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

async fn quotas(
    State(s): State<SimState>,
    axum::Json(a): axum::Json<RegionArg>,
) -> axum::Json<Wire<Vec<CloudQuota>>> {
    wire(s.sim.quotas(&a.region).await)
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
            .map(|(id, (start, offer))| {
                // Ended by our record; else still running now; else it went without us
                // seeing it (counted until now: an upper bound).
                let end = l.ended.get(id).copied().unwrap_or(now);
                let end = if alive.contains(id.as_str()) {
                    None
                } else {
                    Some(end)
                };
                billed(&s.sim, id, *start, end, offer, now)
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

/// Dollars one instance cost: the same billing as `tern cost-report`'s.
fn billed(
    sim: &SimCloud,
    id: &InstanceId,
    start: DateTime<Utc>,
    end: Option<DateTime<Utc>>,
    offer: &Offer,
    now: DateTime<Utc>,
) -> f64 {
    let usage = crate::store::Usage {
        instance: id.to_string(),
        job: String::new(),
        offer_key: offer.key(),
        capacity: offer.capacity,
        price_per_hour: offer.price_per_hour,
        on_demand_per_hour: None,
        started_at: start,
        ended_at: end,
    };
    let steps = sim.price_steps(offer);
    crate::report::bill(
        &usage,
        Some(offer),
        steps.points(),
        (None, DateTime::<Utc>::MAX_UTC),
        now,
    )
    .iter()
    .map(|b| b.piece.dollars())
    .sum()
}

/// The routes of the simulated cloud's provider API, clock and report; with a `token`, every
/// route needs it as a bearer token (its launches and terminations are a cloud's).
pub fn router(sim: Arc<SimCloud>, regions: Vec<Region>, token: Option<Arc<str>>) -> Router {
    let state = SimState {
        sim,
        ledger: Arc::new(Mutex::new(Ledger::default())),
        regions: Arc::new(regions),
    };
    let routes = Router::new()
        .route("/provider/offers", post(offers))
        .route("/provider/launch", post(launch))
        .route("/provider/terminate", post(terminate))
        .route("/provider/list", post(list))
        .route("/provider/interruptions", post(interruptions))
        .route("/provider/quotas", post(quotas))
        .route("/now", get(now))
        .route("/regions", get(zones_regions))
        .route("/report", get(report))
        .with_state(state);
    let routes = match token {
        Some(t) => routes.layer(axum::middleware::from_fn_with_state(
            t,
            serve::auth::require_bearer,
        )),
        None => routes,
    };
    serve::errors::json_errors(routes)
}

/// Advance `sim`'s clock with wall time × `speed` from now on, every 50 ms, forever.
pub async fn run_clock(sim: Arc<SimCloud>, speed: f64) {
    let start = sim.now();
    let wall0 = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let target =
            start + TimeDelta::milliseconds((wall0.elapsed().as_secs_f64() * speed * 1e3) as i64);
        if let Ok(d) = (target - sim.now()).to_std() {
            sim.advance(d);
        }
    }
}

/// Running instances of `report` that the state store neither tracks nor expects from an open
/// intent: what a controller with this store leaked.
pub fn orphans(report: &Report, snapshot: &crate::store::Snapshot) -> usize {
    let live: BTreeSet<String> = snapshot
        .instances
        .iter()
        .map(|i| i.id.to_string())
        .collect();
    let open: BTreeSet<String> = snapshot.intents.iter().map(|i| i.id.to_string()).collect();
    report
        .running
        .iter()
        .filter(|r| !live.contains(&r.id) && !r.intent.as_ref().is_some_and(|i| open.contains(i)))
        .count()
}
