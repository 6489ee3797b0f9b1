//! Scenario tests of the reconcile loop on the simulated cloud, one file per scenario under
//! `tests/`: launches, moves, notices, crashes, leaks and failing job steps. Here: what they
//! share (a trace with a spot price, a job, hooks in front of the cloud, a run of passes).

use std::sync::Mutex;

use tern_cloud::{Cloud, IdempotencyKey, Instance, InstanceState};
use tern_sim::{Asked, Intercepted, SimCloud, Trace, Verdict};

use super::testkit::{Scenario, sim, start};
use super::world::SimWorld;
use super::*;
use crate::store::JobState;
use tern_cloud::{Capacity, IntentKind, IntentState, LaunchRequest, Tags, tag};

fn trace(zone: &str, data: Vec<u32>) -> Trace {
    Trace {
        spot_price: Some(0.9),
        ..tern_sim::testkit::trace(zone, data)
    }
}

fn job(name: &str, workers: &str, gang: bool) -> JobSpec {
    tern_cloud::testkit::spec(name)
        .workers(workers)
        .gang(gang)
        .build()
}

fn config() -> ControllerConfig {
    ControllerConfig::new("test-owner", vec![Region::new("us-west-2")])
}

/// The sim behind a hook that records every launch's key and loses the answer of the first
/// launch, as if the controller died right after the cloud acted and before it wrote the
/// outcome down.
fn forgetful(inner: Arc<SimCloud>) -> (Arc<Intercepted>, Arc<Mutex<Vec<IdempotencyKey>>>) {
    let keys = Arc::new(Mutex::new(Vec::new()));
    let lose = Mutex::new(true);
    let seen = keys.clone();
    let provider = Intercepted::new(inner).on_call(move |asked| match asked {
        Asked::Launch(request) => {
            seen.lock().expect("lock").push(request.key);
            if std::mem::take(&mut *lose.lock().expect("lock")) {
                Verdict::Lose(ProviderError::Transient {
                    message: "connection reset after the request was sent".into(),
                })
            } else {
                Verdict::Forward
            }
        }
        _ => Verdict::Forward,
    });
    (Arc::new(provider), keys)
}

/// Terminate calls seen by [`intent_checked`]: how many an open intent asked for, and the ids
/// of those none did.
#[derive(Debug, Default)]
struct Terminations {
    by_intent: usize,
    without: Vec<InstanceId>,
}

/// `inner` with every terminate call checked against `store` as the cloud is called: an open
/// `terminate` or `migrate` intent must already list the instance (ARCHITECTURE.md, invariant
/// 1: every termination is an intent written before the provider is called).
fn intent_checked(
    inner: Arc<dyn Provider>,
    store: Arc<Store>,
) -> (Arc<Intercepted>, Arc<Mutex<Terminations>>) {
    let seen = Arc::new(Mutex::new(Terminations::default()));
    let record = seen.clone();
    let provider = Intercepted::new(inner).on_call(move |asked| {
        let Asked::Terminate(id) = asked else {
            return Verdict::Forward;
        };
        let open = store.load().expect("load").intents;
        let asked_for = open.iter().any(|i| {
            i.state == IntentState::Pending
                && match &i.kind {
                    IntentKind::Terminate { instances } => instances.contains(id),
                    IntentKind::Migrate { from, .. } => from.contains(id),
                    _ => false,
                }
        });
        let mut seen = record.lock().expect("lock");
        if asked_for {
            seen.by_intent += 1;
        } else {
            seen.without.push(id.clone());
        }
        Verdict::Forward
    });
    (Arc::new(provider), seen)
}

/// `passes` minutes of virtual time with no workers, one pass at the end of each.
async fn run(ctl: &mut Controller, sim: &SimCloud, passes: usize) {
    for _ in 0..passes {
        sim.advance(Duration::from_secs(60));
        ctl.pass(sim.now()).await.expect("pass");
    }
}

/// How many events of `kind` the store holds.
fn store_events(ctl: &Controller, kind: &str) -> usize {
    ctl.store()
        .events(0, None)
        .expect("events")
        .iter()
        .filter(|e| e.kind == kind)
        .count()
}

mod crashes;
mod failures;
mod launches;
mod leaks;
mod moves;
mod notices;
