//! One job as a pass sees it. [`JobView`] is built once per job per pass by the triage from
//! the job's record, its entry's marks and the fleet's index; [`need`] (pure) says what the
//! job needs this pass. A job that needs capacity questions answered gets one [`Outlook`]:
//! the deadline policy asked once, at one node count ([`nodes_of`]), with the speeds, the work
//! and restart hours and the spot-wait rule's answer at that count. `replace`, `consider_move`
//! and `cancel_late_queues` all read it, so they cannot ask the same job different questions.

use chrono::{DateTime, Utc};
use tern_cloud::Offer;

use super::Controller;
use super::budget::Stop;
use super::events::WaitReason;
use super::policy::PolicyCall;
use crate::store::JobRecord;

/// The node count every question about a placed job is asked at: the size it was planned at,
/// or its target where that is larger (never zero, so a queued request's job has a speed).
pub(super) fn nodes_of(r: &JobRecord) -> u32 {
    r.planned_count.max(r.target_count).max(1)
}

/// One job at the start of a pass.
#[derive(Debug, Clone, Copy)]
pub(super) struct JobView<'a> {
    pub record: &'a JobRecord,
    /// A budget stop in progress ([`super::budget`]): the job takes no new capacity.
    pub stopping: Option<&'a Stop>,
    /// Instances it holds, draining ones too.
    pub held: usize,
    /// Instances it holds that count toward its fleet (not draining).
    pub live: usize,
    /// An intent of it is open (a launch or a move underway).
    pub busy: bool,
    /// It is due a plan: an event marked it, or the re-plan period passed.
    pub due_plan: bool,
    /// Its move check period passed.
    pub due_move: bool,
}

/// What a job needs this pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    Nothing,
    /// It ended or its work is done: finish it and release what it holds.
    Release,
    /// It runs nothing (or has no target): plan and place it.
    Place,
    /// It runs fewer nodes than its target: replace the lost ones.
    Replace,
    /// An elastic job resized below its plan: grow back when spot is offered.
    Grow,
    /// It runs whole: check for a cheaper place.
    CheckMove,
}

/// What job `v` needs. A job that finished its work is released even while an intent of it
/// is open (that intent is cancelled when it next runs); otherwise an open intent waits. A
/// job under a budget stop takes no new capacity: it is neither placed, replaced, grown nor
/// moved until the stop settles ([`super::budget::settle`]). A probe is not moved: it ends
/// (`due_probes`), then the plan decides.
pub(super) fn need(v: &JobView<'_>) -> Need {
    let r = v.record;
    let finished = r.work_done();
    if r.state.is_final() || finished {
        let unmarked = finished && r.state != crate::store::JobState::Finished;
        return match v.held > 0 || unmarked {
            true => Need::Release,
            false => Need::Nothing,
        };
    }
    if v.busy || v.stopping.is_some() {
        return Need::Nothing;
    }
    if r.target_offer.is_none() || v.live == 0 {
        return if v.due_plan {
            Need::Place
        } else {
            Need::Nothing
        };
    }
    if v.live < r.target_count as usize {
        return if v.due_plan {
            Need::Replace
        } else {
            Need::Nothing
        };
    }
    if r.target_count < r.planned_count && v.due_plan {
        return Need::Grow;
    }
    if r.probe.as_ref().is_some_and(|p| p.is_open()) || !v.due_move {
        return Need::Nothing;
    }
    Need::CheckMove
}

/// The capacity questions about a placed job, asked once at one node count ([`nodes_of`]).
#[derive(Debug, Clone)]
pub(super) struct Outlook {
    /// The deadline policy's step (a job with a deadline and a forecast).
    pub policy: Option<PolicyCall>,
    /// Samples per second on [`nodes_of`] nodes of the shape asked about: (expected,
    /// pessimistic).
    pub speed: Option<(f64, f64)>,
    /// Hours one restart takes the job.
    pub restart_h: f64,
    /// The spot-wait rule's reason to wait, for the work left after the last checkpoint at
    /// the pessimistic speed; `None` when the deadline needs on-demand now.
    pub spot_wait: Option<WaitReason>,
}

impl Controller {
    /// [`Outlook`] of job `name` on `offer`'s shape (where it runs, or where its request
    /// waits).
    pub(super) fn outlook(&mut self, name: &str, offer: &Offer, now: DateTime<Utc>) -> Outlook {
        let nodes = self.fleet.jobs.get(name).map_or(1, |e| nodes_of(&e.record));
        let policy = self.ask_policy(name, offer, nodes, now);
        let speed = self.throughput(name, offer, nodes);
        let work_h = self.work_hours(name, speed.map_or(0.0, |t| t.1));
        Outlook {
            policy,
            speed,
            restart_h: self.restart_hours(name),
            spot_wait: self.spot_wait(name, work_h, now),
        }
    }
}
