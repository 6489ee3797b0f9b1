//! Fencing of training workers: which agent may start workers, and whose progress counts.
//!
//! Each start of a job's workers on an instance joins the job's current incarnation or opens
//! the next one (a number that only grows, DESIGN §5b). A new incarnation opens only once
//! every worker of the previous one is fenced: its agent reported it stopped, or its instance
//! ended. A progress report counts only from a running worker of the current incarnation on
//! an instance that has not ended, so a paused or orphaned worker that wakes up late, or an
//! agent on an instance the controller ended, is refused (409) instead of trusted, and its
//! agent kills it. Pure functions over what the API handler read; it writes the outcome.

use crate::api::wire::Action;
use crate::store::{Incarnation, JobState};
use tern_cloud::WorkerRange;

/// One of the job's instances that has not ended, as the controller last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    pub id: String,
    /// Being drained (a reclaim notice, a migration away): its workers must stop.
    pub draining: bool,
    /// Launched by a move that is still open: its workers start only once the workers it
    /// replaces are fenced, never beside them.
    pub moving_in: bool,
    /// What it was launched as (told to the agent); `gpus` also sets how many nodes the
    /// job's worker range holds.
    pub accelerator: Option<String>,
    pub gpus: u32,
}

/// What the job looks like to a fencing decision.
#[derive(Debug, Clone, Copy)]
pub struct JobSide<'a> {
    pub name: &'a str,
    pub state: JobState,
    pub live: &'a [Live],
    pub current: &'a Incarnation,
    /// The job's accelerator range (its node range, given the accelerators per node).
    pub workers: WorkerRange,
    /// The controller is stopping the job (a budget ran out): every instance drains.
    pub stopping: bool,
}

/// The answer to an agent asking to start workers on `instance`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Join the current incarnation (it is intact: a node joins an elastic run).
    Join(u64),
    /// Open this new incarnation: the previous one is fenced.
    Open(u64),
    /// The previous incarnation still has running workers; they are told to stop.
    Wait(String),
    /// Nothing more of this job runs on this instance, as planned (the job is over, or the
    /// instance is being drained).
    Done(String),
    /// Nothing of this job may run on this instance.
    Refuse(String),
}

/// The verdict on a progress report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// Counted. `drain`: this instance is leaving, checkpoint and stop. `stop`: another
    /// worker of this incarnation is gone, so restart as a new one.
    Accept { drain: bool, stop: bool },
    /// The job ended (cancelled, finished, stopped over budget) while these workers ran, and
    /// this is their last report: the checkpoint they saved on the way out is recorded, and
    /// nothing else moves.
    Last,
    /// Refused (409): moves nothing.
    Refuse { action: Action, why: String },
}

impl JobSide<'_> {
    fn live(&self, instance: &str) -> Option<&Live> {
        self.live.iter().find(|l| l.id == instance)
    }

    /// A worker is fenced when it reported itself stopped or its instance ended.
    fn fenced(&self, w: &crate::store::Worker) -> bool {
        !w.running || self.live(&w.instance).is_none()
    }

    fn live_list(&self) -> String {
        if self.live.is_empty() {
            return format!("it has no instances (it is {})", self.state.as_str());
        }
        let ids: Vec<&str> = self.live.iter().map(|l| l.id.as_str()).collect();
        format!("its instances: {}", ids.join(", "))
    }
}

/// How many nodes of `per_node` accelerators the job's worker range holds (at least one).
pub fn max_nodes(workers: WorkerRange, per_node: u32) -> u32 {
    (workers.max / per_node.max(1)).max(1)
}

/// May workers start on `instance`, and as which incarnation?
///
/// Never two trainings of one job: a node joins the running incarnation only while the job's
/// node range has room for it (an elastic job growing, or a gang still forming) and every
/// running worker is one the new node may train beside: none of them draining, and none of
/// them left behind by the move that brought this node. A one-node job, a complete gang and
/// a move's new capacity therefore wait until the old workers are fenced, then open the next
/// incarnation from the checkpoint.
pub fn start(job: &JobSide<'_>, instance: &str) -> Start {
    if job.state.is_final() {
        let why = format!("job {} is {}", job.name, job.state.as_str());
        return match job.state {
            JobState::Failed => Start::Refuse(why),
            _ => Start::Done(why),
        };
    }
    let Some(here) = job.live(instance) else {
        return Start::Refuse(format!(
            "instance {instance} is not one of job {}'s instances; {}",
            job.name,
            job.live_list()
        ));
    };
    if job.stopping {
        return Start::Done(format!(
            "job {} is being stopped: its workers do not start again",
            job.name
        ));
    }
    // A drained instance's agent waits: the instance ends soon, or the drain is called off (a
    // move whose new capacity was lost) and its workers start again.
    if here.draining {
        return Start::Wait(format!(
            "instance {instance} is being drained: job {}'s workers start there again only if \
             the drain is called off",
            job.name
        ));
    }
    let cur = job.current;
    if cur.number == 0 {
        return Start::Open(1);
    }
    // The asking agent has no workers running (it asks only once its tree is gone), so its
    // own worker of this incarnation, if any, counts as stopped.
    let running: Vec<&crate::store::Worker> = cur
        .workers
        .iter()
        .filter(|w| w.instance != instance && !job.fenced(w))
        .collect();
    if running.is_empty() {
        return Start::Open(cur.number + 1);
    }
    let beside = |w: &&crate::store::Worker| {
        job.live(&w.instance)
            .is_some_and(|l| !l.draining && l.moving_in == here.moving_in)
    };
    let intact = cur.worker(instance).is_none() && running.len() == cur.workers.len();
    let room = (running.len() as u32) < max_nodes(job.workers, here.gpus);
    if intact && room && running.iter().all(beside) {
        return Start::Join(cur.number);
    }
    let ids: Vec<&str> = running.iter().map(|w| w.instance.as_str()).collect();
    let why = match (room, here.moving_in) {
        (false, _) => format!(
            "(job {} holds at most {} node(s) of {} accelerators, and a node joins a running \
             training only while there is room)",
            job.name,
            max_nodes(job.workers, here.gpus),
            here.gpus
        ),
        (true, true) => "(this node is a move's new capacity: it never trains beside the \
             workers it replaces)"
            .to_string(),
        (true, false) => "(a node joins only an intact incarnation)".to_string(),
    };
    Start::Wait(format!(
        "incarnation {} of job {} still has workers on {}: they stop first {why}",
        cur.number,
        job.name,
        ids.join(", ")
    ))
}

/// Does a report from `instance`'s workers of `incarnation` count? `stopped`: the report says
/// those workers are gone (the agent's last report for them).
pub fn report(
    job: &JobSide<'_>,
    instance: Option<&str>,
    incarnation: Option<u64>,
    stopped: bool,
) -> Report {
    let refuse = |action, why: String| Report::Refuse { action, why };
    let (Some(instance), Some(k)) = (instance, incarnation) else {
        return refuse(
            Action::Exit,
            "a progress report names its `instance` and `incarnation` (from POST /v1/jobs/NAME/start; tern agent sends both)".into(),
        );
    };
    let cur = job.current;
    if job.state.is_final() {
        // The last report of the workers that ran when the job ended keeps the checkpoint
        // they saved on the way out (no other incarnation can open on an ended job).
        let last = stopped
            && job.state != JobState::Failed
            && k == cur.number
            && cur.worker(instance).is_some_and(|w| w.running);
        if last {
            return Report::Last;
        }
        let action = match job.state {
            JobState::Failed => Action::Exit,
            _ => Action::Done,
        };
        return refuse(
            action,
            format!(
                "job {} is {}: stop its workers",
                job.name,
                job.state.as_str()
            ),
        );
    }
    if k < cur.number {
        return refuse(
            Action::Stop,
            format!(
                "incarnation {k} is stale: job {}'s workers are incarnation {}",
                job.name, cur.number
            ),
        );
    }
    if k > cur.number {
        return refuse(
            Action::Stop,
            format!(
                "incarnation {k} of job {} was never started (current: {})",
                job.name, cur.number
            ),
        );
    }
    match cur.worker(instance) {
        None => refuse(
            Action::Stop,
            format!(
                "instance {instance} has no workers in incarnation {k} of job {}",
                job.name
            ),
        ),
        // Its workers never said they stopped, but the instance is gone: whatever still
        // reports in its name (a late agent, a copied token) is not training this job.
        Some(_) if job.live(instance).is_none() => refuse(
            Action::Exit,
            format!(
                "instance {instance} of job {} has ended: its workers' reports no longer count; {}",
                job.name,
                job.live_list()
            ),
        ),
        Some(w) if !w.running => refuse(
            Action::Stop,
            format!("instance {instance}'s workers of incarnation {k} stopped already"),
        ),
        Some(_) => Report::Accept {
            drain: job.stopping || job.live(instance).is_some_and(|l| l.draining),
            stop: cur
                .workers
                .iter()
                .any(|w| w.instance != instance && job.fenced(w)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Worker;
    use chrono::{TimeZone, Utc};

    fn worker(instance: &str, running: bool) -> Worker {
        Worker {
            instance: instance.into(),
            running,
            started_at: Utc.timestamp_opt(1_800_000_000, 0).single().expect("t"),
            stopped_at: None,
            failure: None,
            address: None,
            rank: 0,
        }
    }

    fn live(ids: &[(&str, bool)]) -> Vec<Live> {
        ids.iter()
            .map(|(id, draining)| Live {
                id: (*id).into(),
                draining: *draining,
                moving_in: false,
                accelerator: None,
                gpus: 1,
            })
            .collect()
    }

    fn side<'a>(live: &'a [Live], cur: &'a Incarnation) -> JobSide<'a> {
        JobSide {
            name: "j",
            state: JobState::Running,
            live,
            current: cur,
            workers: WorkerRange { min: 1, max: 4 },
            stopping: false,
        }
    }

    #[test]
    fn the_first_start_opens_and_later_nodes_join_an_intact_incarnation() {
        let l = live(&[("a", false), ("b", false)]);
        let none = Incarnation::default();
        assert_eq!(start(&side(&l, &none), "a"), Start::Open(1));
        let one = Incarnation {
            number: 1,
            workers: vec![worker("a", true)],
        };
        assert_eq!(start(&side(&l, &one), "b"), Start::Join(1));
    }

    #[test]
    fn a_new_incarnation_waits_until_every_old_worker_is_fenced() {
        // b got a notice: it drains; a keeps running. A new node c must not join.
        let l = live(&[("a", false), ("b", true), ("c", false)]);
        let cur = Incarnation {
            number: 3,
            workers: vec![worker("a", true), worker("b", true)],
        };
        assert!(matches!(start(&side(&l, &cur), "c"), Start::Wait(w) if w.contains("a, b")));
        assert!(matches!(start(&side(&l, &cur), "b"), Start::Wait(w) if w.contains("drained")));
        // b stopped: a is told to stop, and a start still waits for a.
        let cur = Incarnation {
            number: 3,
            workers: vec![worker("a", true), worker("b", false)],
        };
        assert_eq!(
            report(&side(&l, &cur), Some("a"), Some(3), false),
            Report::Accept {
                drain: false,
                stop: true
            }
        );
        assert!(matches!(start(&side(&l, &cur), "c"), Start::Wait(w) if w.contains(" a:")));
        // a asks to start again (its workers are gone): the old incarnation is fenced.
        assert_eq!(start(&side(&l, &cur), "a"), Start::Open(4));
    }

    #[test]
    fn an_ended_instance_fences_its_workers() {
        let l = live(&[("a", false)]);
        let cur = Incarnation {
            number: 2,
            workers: vec![worker("a", true), worker("gone", true)],
        };
        assert_eq!(start(&side(&l, &cur), "a"), Start::Open(3));
    }

    #[test]
    fn stale_unknown_and_stopped_reporters_are_refused() {
        let l = live(&[("a", false), ("b", true)]);
        let cur = Incarnation {
            number: 5,
            workers: vec![worker("a", true), worker("b", false)],
        };
        let s = side(&l, &cur);
        let action = |r: Report| match r {
            Report::Refuse { action, .. } => Some(action),
            Report::Accept { .. } | Report::Last => None,
        };
        assert_eq!(
            action(report(&s, Some("a"), Some(4), false)),
            Some(Action::Stop)
        );
        assert_eq!(
            action(report(&s, Some("a"), Some(6), false)),
            Some(Action::Stop)
        );
        assert_eq!(
            action(report(&s, Some("b"), Some(5), false)),
            Some(Action::Stop)
        );
        assert_eq!(
            action(report(&s, Some("z"), Some(5), false)),
            Some(Action::Stop)
        );
        assert_eq!(action(report(&s, None, Some(5), false)), Some(Action::Exit));
        let done = JobSide {
            state: JobState::Cancelled,
            ..s
        };
        assert_eq!(
            action(report(&done, Some("a"), Some(5), false)),
            Some(Action::Done)
        );
        assert!(matches!(start(&done, "a"), Start::Done(w) if w.contains("cancelled")));
        let failed = JobSide {
            state: JobState::Failed,
            ..s
        };
        assert_eq!(
            action(report(&failed, Some("a"), Some(5), false)),
            Some(Action::Exit)
        );
        assert!(matches!(start(&failed, "a"), Start::Refuse(_)));
        assert!(matches!(start(&s, "z"), Start::Refuse(w) if w.contains("its instances: a, b")));
    }

    #[test]
    fn a_running_worker_on_an_ended_instance_is_refused() {
        // b ended (reclaimed, terminated) before its agent said its workers stopped, and
        // before anyone opened a new incarnation: its report still does not count.
        let l = live(&[("a", false)]);
        let cur = Incarnation {
            number: 2,
            workers: vec![worker("a", true), worker("b", true)],
        };
        assert!(matches!(
            report(&side(&l, &cur), Some("b"), Some(2), false),
            Report::Refuse { action: Action::Exit, why } if why.contains("has ended")
        ));
        assert_eq!(
            report(&side(&l, &cur), Some("a"), Some(2), false),
            Report::Accept {
                drain: false,
                stop: true
            }
        );
        // Alone: no live instance at all.
        assert!(matches!(
            report(&side(&[], &cur), Some("a"), Some(2), false),
            Report::Refuse {
                action: Action::Exit,
                ..
            }
        ));
    }

    #[test]
    fn a_draining_instance_is_told_to_drain() {
        let l = live(&[("a", true)]);
        let cur = Incarnation {
            number: 1,
            workers: vec![worker("a", true)],
        };
        assert_eq!(
            report(&side(&l, &cur), Some("a"), Some(1), false),
            Report::Accept {
                drain: true,
                stop: false
            }
        );
    }

    fn side_of<'a>(live: &'a [Live], cur: &'a Incarnation, min: u32, max: u32) -> JobSide<'a> {
        JobSide {
            workers: WorkerRange { min, max },
            ..side(live, cur)
        }
    }

    fn running(ids: &[&str], number: u64) -> Incarnation {
        Incarnation {
            number,
            workers: ids.iter().map(|id| worker(id, true)).collect(),
        }
    }

    #[test]
    fn a_one_node_job_never_runs_two_trainings() {
        // A one-node job moved: the new node's agent asks before the old node is drained.
        let l = live(&[("old", false), ("new", false)]);
        let cur = running(&["old"], 1);
        let s = side_of(&l, &cur, 1, 1);
        assert!(matches!(start(&s, "new"), Start::Wait(w) if w.contains("at most 1 node")));
        // Once the old workers stopped, the new node opens the next incarnation.
        let stopped = Incarnation {
            number: 1,
            workers: vec![worker("old", false)],
        };
        assert_eq!(start(&side_of(&l, &stopped, 1, 1), "new"), Start::Open(2));
        // Eight accelerators a node and a range of 1 to 8: still one node.
        let eight: Vec<Live> = l
            .iter()
            .map(|x| Live {
                gpus: 8,
                ..x.clone()
            })
            .collect();
        assert!(matches!(
            start(&side_of(&eight, &cur, 1, 8), "new"),
            Start::Wait(_)
        ));
    }

    #[test]
    fn a_gang_forms_but_a_complete_one_takes_no_one_more() {
        let l = live(&[("a", false), ("b", false), ("c", false)]);
        // Two fixed nodes: the second joins the first to form the gang.
        assert_eq!(
            start(&side_of(&l, &running(&["a"], 1), 2, 2), "b"),
            Start::Join(1)
        );
        // The gang is complete: a third node waits.
        let full = running(&["a", "b"], 1);
        assert!(matches!(
            start(&side_of(&l, &full, 2, 2), "c"),
            Start::Wait(_)
        ));
        // An elastic job with room takes it.
        assert_eq!(start(&side_of(&l, &full, 1, 4), "c"), Start::Join(1));
    }

    #[test]
    fn a_moves_new_capacity_waits_for_the_workers_it_replaces() {
        let mut l = live(&[("a", false), ("b", false), ("a2", false), ("b2", false)]);
        for x in l.iter_mut().filter(|x| x.id.ends_with('2')) {
            x.moving_in = true;
        }
        let cur = running(&["a", "b"], 4);
        // An elastic job with room still does not train new capacity beside the old.
        let s = side_of(&l, &cur, 1, 8);
        assert!(matches!(start(&s, "a2"), Start::Wait(w) if w.contains("move")));
        // The old workers stopped: the first new node opens, the second joins it.
        let fenced = Incarnation {
            number: 4,
            workers: vec![worker("a", false), worker("b", false)],
        };
        assert_eq!(start(&side_of(&l, &fenced, 1, 8), "a2"), Start::Open(5));
        let next = running(&["a2"], 5);
        assert_eq!(start(&side_of(&l, &next, 1, 8), "b2"), Start::Join(5));
        // An old node does not join the new capacity's incarnation either.
        assert!(matches!(
            start(&side_of(&l, &next, 1, 8), "a"),
            Start::Wait(_)
        ));
    }

    #[test]
    fn a_stop_drains_every_instance_through_the_report() {
        let l = live(&[("a", false)]);
        let cur = running(&["a"], 2);
        let s = JobSide {
            stopping: true,
            ..side(&l, &cur)
        };
        assert_eq!(
            report(&s, Some("a"), Some(2), false),
            Report::Accept {
                drain: true,
                stop: false
            }
        );
        assert!(matches!(start(&s, "a"), Start::Done(w) if w.contains("being stopped")));
    }

    #[test]
    fn the_last_report_after_the_job_ended_is_taken_from_its_running_workers_only() {
        let l = live(&[("a", false)]);
        let cur = running(&["a"], 3);
        for state in [
            JobState::Cancelled,
            JobState::OverBudget,
            JobState::Finished,
        ] {
            let s = JobSide {
                state,
                ..side(&l, &cur)
            };
            assert_eq!(report(&s, Some("a"), Some(3), true), Report::Last);
            // The same report with the instance already released still carries the save.
            let gone = JobSide { live: &[], ..s };
            assert_eq!(report(&gone, Some("a"), Some(3), true), Report::Last);
            // Not the last report, a stale incarnation, a stranger: refused.
            for (id, k, stopped) in [("a", 3, false), ("a", 2, true), ("z", 3, true)] {
                assert!(matches!(
                    report(&s, Some(id), Some(k), stopped),
                    Report::Refuse {
                        action: Action::Done,
                        ..
                    }
                ));
            }
        }
        let stopped = Incarnation {
            number: 3,
            workers: vec![worker("a", false)],
        };
        let cancelled = JobSide {
            state: JobState::Cancelled,
            ..side(&l, &stopped)
        };
        assert!(matches!(
            report(&cancelled, Some("a"), Some(3), true),
            Report::Refuse { .. }
        ));
        let failed = JobSide {
            state: JobState::Failed,
            ..side(&l, &cur)
        };
        assert!(matches!(
            report(&failed, Some("a"), Some(3), true),
            Report::Refuse {
                action: Action::Exit,
                ..
            }
        ));
    }
}
