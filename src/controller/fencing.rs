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

/// One of the job's instances that has not ended, as the controller last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    pub id: String,
    /// Being drained (a reclaim notice, a migration away): its workers must stop.
    pub draining: bool,
    /// What it was launched as (told to the agent; not used to decide).
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

/// May workers start on `instance`, and as which incarnation?
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
    if here.draining {
        return Start::Done(format!(
            "instance {instance} is being drained: job {}'s workers do not start there again",
            job.name
        ));
    }
    let cur = job.current;
    if cur.number == 0 {
        return Start::Open(1);
    }
    // The asking agent has no workers running (it asks only once its tree is gone), so its
    // own worker of this incarnation, if any, counts as stopped.
    let mine = |w: &crate::store::Worker| w.instance == instance;
    let intact = cur.worker(instance).is_none()
        && cur
            .workers
            .iter()
            .all(|w| !job.fenced(w) && job.live(&w.instance).is_some_and(|l| !l.draining));
    if intact {
        return Start::Join(cur.number);
    }
    let running: Vec<&str> = cur
        .workers
        .iter()
        .filter(|w| !mine(w) && !job.fenced(w))
        .map(|w| w.instance.as_str())
        .collect();
    if running.is_empty() {
        return Start::Open(cur.number + 1);
    }
    Start::Wait(format!(
        "incarnation {} of job {} still has workers on {}: they stop first",
        cur.number,
        job.name,
        running.join(", ")
    ))
}

/// Does a report from `instance`'s workers of `incarnation` count?
pub fn report(job: &JobSide<'_>, instance: Option<&str>, incarnation: Option<u64>) -> Report {
    let refuse = |action, why: String| Report::Refuse { action, why };
    let (Some(instance), Some(k)) = (instance, incarnation) else {
        return refuse(
            Action::Exit,
            "a progress report names its `instance` and `incarnation` (from POST /v1/jobs/NAME/start; tern agent sends both)".into(),
        );
    };
    if job.state.is_final() {
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
    let cur = job.current;
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
            drain: job.live(instance).is_some_and(|l| l.draining),
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
        }
    }

    fn live(ids: &[(&str, bool)]) -> Vec<Live> {
        ids.iter()
            .map(|(id, draining)| Live {
                id: (*id).into(),
                draining: *draining,
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
        assert!(matches!(start(&side(&l, &cur), "b"), Start::Done(w) if w.contains("drained")));
        // b stopped: a is told to stop, and a start still waits for a.
        let cur = Incarnation {
            number: 3,
            workers: vec![worker("a", true), worker("b", false)],
        };
        assert_eq!(
            report(&side(&l, &cur), Some("a"), Some(3)),
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
            Report::Accept { .. } => None,
        };
        assert_eq!(action(report(&s, Some("a"), Some(4))), Some(Action::Stop));
        assert_eq!(action(report(&s, Some("a"), Some(6))), Some(Action::Stop));
        assert_eq!(action(report(&s, Some("b"), Some(5))), Some(Action::Stop));
        assert_eq!(action(report(&s, Some("z"), Some(5))), Some(Action::Stop));
        assert_eq!(action(report(&s, None, Some(5))), Some(Action::Exit));
        let done = JobSide {
            state: JobState::Cancelled,
            ..s
        };
        assert_eq!(
            action(report(&done, Some("a"), Some(5))),
            Some(Action::Done)
        );
        assert!(matches!(start(&done, "a"), Start::Done(w) if w.contains("cancelled")));
        let failed = JobSide {
            state: JobState::Failed,
            ..s
        };
        assert_eq!(
            action(report(&failed, Some("a"), Some(5))),
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
            report(&side(&l, &cur), Some("b"), Some(2)),
            Report::Refuse { action: Action::Exit, why } if why.contains("has ended")
        ));
        assert_eq!(
            report(&side(&l, &cur), Some("a"), Some(2)),
            Report::Accept {
                drain: false,
                stop: true
            }
        );
        // Alone: no live instance at all.
        assert!(matches!(
            report(&side(&[], &cur), Some("a"), Some(2)),
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
            report(&side(&l, &cur), Some("a"), Some(1)),
            Report::Accept {
                drain: true,
                stop: false
            }
        );
    }
}
