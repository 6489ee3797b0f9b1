//! The simulated workers and a real `tern agent` are twins: for each stop path the controller
//! decides (a reclaim notice and the regroup it causes, a move, the job's end) the answers a
//! simulated agent gets are the ones `tests/agent_training` asserts a real agent gets.

use tern_cloud::testkit::spec;

#[path = "../../tests/common/answers.rs"]
pub(super) mod answers;
use tern_sim::Trace;

use super::testkit::Scenario;
use super::testkit::sim;
use super::world::SimWorld;
use super::*;
use crate::store::JobState;

/// The spec's measured step on two nodes.
const TWO_NODES: &str = "[[observation]]\naccelerator = \"V100\"\ngpus = 2\nnodes = 2\n\
                         local_batch = 64\nstep_seconds = 0.21";

const TICK: Duration = Duration::from_secs(60);

fn trace(zone: &str, data: Vec<u32>, prices: Option<Vec<f64>>) -> Trace {
    Trace {
        prices,
        ..tern_sim::testkit::trace(zone, data)
    }
}

fn world(traces: Vec<Trace>, job: JobSpec) -> SimWorld {
    let sim = sim(traces);
    // Agents that learn of a notice from the controller alone, as the real test's do.
    let workers = super::workload::Workload::new().keeping_answers();
    Scenario::on(&sim, "test-owner")
        .jobs([job])
        .world(TICK)
        .with_workers(Some(workers))
}

/// Each instance's agent's answers, reduced ([`answers::of_simulated`]).
fn told(w: &SimWorld) -> BTreeMap<String, Vec<String>> {
    let all = w
        .workers
        .as_ref()
        .map(|wl| wl.answers())
        .unwrap_or_default();
    all.into_iter()
        .map(|(id, said)| (id.to_string(), answers::of_simulated(&said)))
        .collect()
}

/// A reclaim notice takes one node of a two-node elastic job (the trace drops the zone to
/// one instance): that node drains and waits to be released; the other is told to stop and
/// restarts as the next incarnation on its own, to the job's end (as
/// `a_two_node_elastic_job_loses_a_node_to_a_notice_and_finishes_on_the_other` asserts of
/// real agents).
#[tokio::test]
async fn a_notice_and_its_regroup_tell_the_simulated_workers_what_they_tell_a_real_agent() {
    let mut a = vec![2; 3];
    a.extend(vec![1; 300]);
    let job = spec("elastic")
        .workers("{ min = 1, max = 2 }")
        .deadline(Some("3h"))
        .samples(4_000_000)
        .top("capacity = \"spot-only\"")
        .section(TWO_NODES)
        .build();
    let mut w = world(vec![trace("us-west-2a", a, None)], job);
    w.run(600, SimWorld::settled).await.expect("run");
    assert_eq!(
        w.ctl.job("elastic").map(|j| j.state),
        Some(JobState::Finished)
    );
    let mut lists: Vec<Vec<String>> = told(&w).into_values().collect();
    lists.sort_by_key(|l| l.contains(&"report: drain".to_string()));
    assert_eq!(lists.len(), 2, "{lists:?}");
    assert_eq!(lists[0], answers::REGROUPED, "{lists:?}");
    assert_eq!(lists[1], answers::LEAVING, "{lists:?}");
}

/// A price rise moves a one-node job: the old node drains and waits to be released; the new
/// node waits until then and runs the next incarnation to the job's end (as
/// `a_one_node_move_with_real_training_never_runs_two_trainings` asserts of real agents).
#[tokio::test]
async fn a_move_tells_the_simulated_workers_what_it_tells_a_real_agent() {
    let rise: Vec<f64> = (0..300).map(|t| if t < 3 { 0.9 } else { 90.0 }).collect();
    let job = spec("one")
        .deadline(None)
        .samples(3_000_000)
        .top("capacity = \"spot-only\"")
        .build();
    let mut w = world(
        vec![
            trace("us-west-2a", vec![2; 300], Some(rise)),
            trace("us-west-2b", vec![2; 300], Some(vec![1.2; 300])),
        ],
        job,
    );
    w.run(600, SimWorld::settled).await.expect("run");
    assert_eq!(w.ctl.job("one").map(|j| j.state), Some(JobState::Finished));
    let lists: Vec<Vec<String>> = told(&w).into_values().collect();
    // Instance ids are in launch order: the old node first.
    assert_eq!(
        lists,
        [answers::LEAVING.to_vec(), answers::MOVED_TO.to_vec()]
    );
}

/// The job's end: the training exits at the job's work and its last report is taken (as
/// `every_stop_path_ends_the_whole_tree` asserts of a real agent).
#[tokio::test]
async fn the_jobs_end_tells_the_simulated_workers_what_it_tells_a_real_agent() {
    let job = spec("short").deadline(None).samples(200_000).build();
    let mut w = world(vec![trace("us-west-2a", vec![2; 300], None)], job);
    w.run(600, SimWorld::settled).await.expect("run");
    assert_eq!(
        w.ctl.job("short").map(|j| j.state),
        Some(JobState::Finished)
    );
    let lists: Vec<Vec<String>> = told(&w).into_values().collect();
    assert_eq!(lists, [answers::JOB_END.to_vec()]);
}
