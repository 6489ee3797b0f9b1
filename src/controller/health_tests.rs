//! Quarantine end to end on the simulated cloud, with the test as the agents (on the worker
//! protocol): a straggler and a node whose workers keep crashing alone are each drained,
//! released by intent once their workers stopped, and replaced by another instance; never
//! reused. A training that crashes everywhere quarantines nothing.

use std::sync::Mutex;

use tern_cloud::{InstanceState, Observation};

use super::inputs::Request;
use super::protocol::{self, Answer, Sink};
use super::testkit::Scenario;
use super::testkit::sim;
use super::*;
use crate::api::wire::Progress;

/// The protocol's changes, taken into the controller after each call.
#[derive(Default)]
struct Inbox {
    changes: Mutex<Vec<Request>>,
    writers: Mutex<()>,
}

impl Sink for Inbox {
    fn send(&self, change: Request, _urgent: bool) {
        self.changes.lock().expect("lock").push(change);
    }
    fn writers(&self) -> &Mutex<()> {
        &self.writers
    }
}

impl Inbox {
    fn take_into(&self, ctl: &mut Controller) {
        for c in std::mem::take(&mut *self.changes.lock().expect("lock")) {
            ctl.apply(c).expect("apply");
        }
    }
}

fn setup(workers: &str, deadline: &str) -> (Arc<tern_sim::SimCloud>, Controller) {
    let sim = sim(vec![tern_sim::Trace {
        spot_price: Some(0.9),
        ..tern_sim::testkit::trace("us-west-2a", vec![8; 400])
    }]);
    // Measured on two nodes too, so the planner can forecast a two-node fleet.
    let two = "[[observation]]\naccelerator = \"V100\"\ngpus = 2\nnodes = 2\nlocal_batch = 64\n\
               step_seconds = 0.21";
    let spec = tern_cloud::testkit::spec("j")
        .workers(workers)
        .deadline(Some(deadline))
        .section(two)
        .build();
    let (_, ctl) = Scenario::on(&sim, "health").jobs([spec]).controller();
    (sim, ctl)
}

/// Passes a minute apart until `n` of the job's instances run.
async fn until_running(ctl: &mut Controller, sim: &tern_sim::SimCloud, n: usize) -> Vec<String> {
    for _ in 0..30 {
        ctl.pass(sim.now()).await.expect("pass");
        let running: Vec<String> = ctl
            .instances()
            .filter(|i| i.job == "j" && i.state == InstanceState::Running && !i.draining)
            .map(|i| i.id.to_string())
            .collect();
        if running.len() >= n {
            return running;
        }
        sim.advance(Duration::from_secs(60));
    }
    let said: Vec<String> = ctl
        .store()
        .events(0, Some("j"))
        .expect("events")
        .into_iter()
        .map(|e| format!("{}: {}", e.kind, e.message))
        .collect();
    panic!("the job never ran on {n} nodes: {said:#?}");
}

fn start(ctl: &mut Controller, inbox: &Inbox, instance: &str, now: DateTime<Utc>) -> Answer<u64> {
    let fleet = service::fleet_of(ctl, "j");
    let a = protocol::start(ctl.store(), inbox, "j", instance, None, &fleet, now).expect("start");
    inbox.take_into(ctl);
    match a {
        Answer::Done((k, _)) => Answer::Done(k),
        Answer::Refused(action, why) => Answer::Refused(action, why),
    }
}

fn report(ctl: &mut Controller, inbox: &Inbox, p: Progress, now: DateTime<Utc>) -> bool {
    let fleet = service::fleet_of(ctl, "j");
    let a = protocol::report(ctl.store(), inbox, "j", &fleet, &p, now).expect("report");
    inbox.take_into(ctl);
    match a {
        Answer::Done(v) => v.drain,
        Answer::Refused(..) => true,
    }
}

fn progress(instance: &str, k: u64, done: f64, step_s: Option<f64>) -> Progress {
    Progress {
        done_samples: done,
        checkpoint_samples: done,
        checkpointed: false,
        observation: step_s.map(|s| Observation {
            job: "j".into(),
            accelerator: "V100".into(),
            gpus: 2,
            nodes: 2,
            local_batch: 64,
            step_seconds: s,
            sync_seconds: None,
            at: Utc::now(),
        }),
        incarnation: Some(k),
        instance: Some(instance.into()),
        stopped: false,
        failure: None,
        hung: false,
        crashed: false,
    }
}

fn quarantined(ctl: &Controller) -> Vec<(String, String)> {
    ctl.typed_events(Some("j"))
        .expect("events")
        .into_iter()
        .filter_map(|e| match e {
            Event::Quarantined {
                instance, reason, ..
            } => Some((instance, reason)),
            _ => None,
        })
        .collect()
}

/// After the bad node's workers stopped: the next passes release it by a terminate intent and
/// the job runs on `n` nodes again, none of them the bad one.
async fn released_and_replaced(
    ctl: &mut Controller,
    sim: &tern_sim::SimCloud,
    bad: &str,
    n: usize,
) {
    ctl.pass(sim.now()).await.expect("pass");
    let terminated = ctl
        .typed_events(Some("j"))
        .expect("events")
        .into_iter()
        .any(|e| matches!(&e, Event::Terminated { ids, .. } if ids.iter().any(|x| x.as_str() == bad)));
    assert!(terminated, "the quarantined node is released by intent");
    let running = until_running(ctl, sim, n).await;
    assert!(!running.iter().any(|i| i == bad), "{running:?}");
    assert!(
        ctl.instances()
            .all(|i| i.id.as_str() != bad || i.state == InstanceState::Terminated),
        "the quarantined node is not reused"
    );
}

#[tokio::test]
async fn a_straggler_is_quarantined_released_and_replaced() {
    // Due in 14 h: 17 h of work on one node, so the elastic job runs on two.
    let (sim, mut ctl) = setup("{ min = 1, max = 2 }", "14h");
    let inbox = Inbox::default();
    let nodes = until_running(&mut ctl, &sim, 2).await;
    let k = nodes
        .iter()
        .map(|id| match start(&mut ctl, &inbox, id, sim.now()) {
            Answer::Done(k) => k,
            Answer::Refused(a, why) => panic!("{a:?}: {why}"),
        })
        .max()
        .expect("k");
    let (fast, slow) = (&nodes[0], &nodes[1]);
    let mut done = 0.0;
    let mut drained_at = None;
    for minute in 0..15 {
        done += 1000.0;
        let now = sim.now();
        assert!(!report(
            &mut ctl,
            &inbox,
            progress(fast, k, done, Some(0.2)),
            now
        ));
        if report(&mut ctl, &inbox, progress(slow, k, done, Some(0.5)), now) {
            drained_at = Some(minute);
            break;
        }
        sim.advance(Duration::from_secs(60));
    }
    // Found at minute 10, slow since minute 0; its next report hears the drain.
    assert_eq!(
        drained_at,
        Some(11),
        "told to drain once slow for ten minutes"
    );
    let q = quarantined(&ctl);
    assert_eq!(q.len(), 1, "{q:?}");
    assert_eq!(&q[0].0, slow);
    assert!(q[0].1.contains("straggler"), "{q:?}");
    let mut last = progress(slow, k, done, None);
    (last.stopped, last.checkpointed) = (true, true);
    report(&mut ctl, &inbox, last, sim.now());
    released_and_replaced(&mut ctl, &sim, slow, 2).await;
}

/// Both nodes start in one incarnation; `node` and `other` each report their workers stopped,
/// crashed or not.
fn incarnation_ending(
    ctl: &mut Controller,
    inbox: &Inbox,
    sim: &tern_sim::SimCloud,
    ends: [(&str, bool); 2],
    done: f64,
) -> std::result::Result<(), String> {
    let mut ks = Vec::new();
    for (id, _) in ends {
        match start(ctl, inbox, id, sim.now()) {
            Answer::Done(k) => ks.push(k),
            Answer::Refused(a, why) => return Err(format!("{id}: {a:?}: {why}")),
        }
    }
    assert_eq!(ks[0], ks[1], "one incarnation");
    for (id, crashed) in ends {
        let mut p = progress(id, ks[0], done, None);
        (p.stopped, p.crashed) = (true, crashed);
        report(ctl, inbox, p, sim.now());
    }
    Ok(())
}

#[tokio::test]
async fn a_node_whose_workers_crash_alone_three_incarnations_in_a_row_is_quarantined() {
    let (sim, mut ctl) = setup("{ min = 1, max = 2 }", "14h");
    let inbox = Inbox::default();
    let nodes = until_running(&mut ctl, &sim, 2).await;
    let (bad, good) = (nodes[0].as_str(), nodes[1].as_str());
    // Alone; both (the training's fault, not the node's: the row starts again); then alone
    // three times.
    let rounds = [false, true, false, false, false];
    for (round, both) in rounds.into_iter().enumerate() {
        let done = 1000.0 * (round + 1) as f64;
        incarnation_ending(&mut ctl, &inbox, &sim, [(bad, true), (good, both)], done)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(quarantined(&ctl).is_empty(), "round {round}");
        sim.advance(Duration::from_secs(30));
    }
    // Its agent asks to start again: refused, and the node is quarantined.
    let Answer::Refused(_, why) = start(&mut ctl, &inbox, bad, sim.now()) else {
        panic!("the failing node started again");
    };
    assert!(why.contains("quarantined"), "{why}");
    let q = quarantined(&ctl);
    assert_eq!(q.len(), 1, "{q:?}");
    assert_eq!(q[0].0, bad);
    assert!(q[0].1.contains("3 incarnations in a row"), "{q:?}");
    released_and_replaced(&mut ctl, &sim, bad, 2).await;
    assert_eq!(
        ctl.job("j").expect("job").state,
        crate::store::JobState::Running
    );
}

/// A training that crashes on every node is the training's fault: no node is quarantined
/// (the agents' restart bound fails the job), and a one-node job's node never is.
#[tokio::test]
async fn a_training_that_crashes_everywhere_quarantines_no_node() {
    let (sim, mut ctl) = setup("{ min = 1, max = 2 }", "14h");
    let inbox = Inbox::default();
    let nodes = until_running(&mut ctl, &sim, 2).await;
    for round in 0..5 {
        let ends = [(nodes[0].as_str(), true), (nodes[1].as_str(), true)];
        incarnation_ending(&mut ctl, &inbox, &sim, ends, 1000.0)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        sim.advance(Duration::from_secs(30));
    }
    assert!(matches!(
        start(&mut ctl, &inbox, &nodes[0], sim.now()),
        Answer::Done(_)
    ));
    assert!(quarantined(&ctl).is_empty());

    let (sim, mut ctl) = setup("1", "48h");
    let node = until_running(&mut ctl, &sim, 1).await.remove(0);
    for round in 0..5 {
        let Answer::Done(k) = start(&mut ctl, &inbox, &node, sim.now()) else {
            panic!("round {round}: no start");
        };
        let mut p = progress(&node, k, 1000.0, None);
        (p.stopped, p.crashed) = (true, true);
        report(&mut ctl, &inbox, p, sim.now());
        sim.advance(Duration::from_secs(30));
    }
    assert!(quarantined(&ctl).is_empty());
}
