//! What a job needs at a pass ([`view::need`]), from views built by hand: one row per branch,
//! a probing job and a job under a budget stop among them.

use chrono::{DateTime, TimeZone, Utc};

use super::budget::Stop;
use super::view::{self, JobView, Need};
use crate::limits::Exhausted;
use crate::store::{JobRecord, JobState, ProbeRecord};

fn at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 7, 12, 0, 0).unwrap()
}

/// A job placed on two nodes, half done.
fn placed() -> JobRecord {
    let mut r = JobRecord::new(tern_cloud::testkit::spec("j").build(), at());
    r.state = JobState::Running;
    r.total_samples = 1000.0;
    r.done_samples = 500.0;
    r.target_offer = Some("aws/p3.2xlarge/us-east-1a/spot".into());
    (r.target_count, r.planned_count) = (2, 2);
    r
}

fn probe(ended: bool) -> ProbeRecord {
    ProbeRecord {
        accelerator: "V100".into(),
        instance_type: "p3.2xlarge".into(),
        offer: "aws/p3.2xlarge/us-east-1a/on-demand".into(),
        nodes: 2,
        price_per_hour: 3.06,
        max_seconds: 900.0,
        max_usd: 5.0,
        started_at: at(),
        running_at: Some(at()),
        probing_since: None,
        ended_at: ended.then(at),
        outcome: None,
    }
}

fn stop() -> Stop {
    Stop {
        since: at(),
        scope: "team",
        name: "ml".into(),
        limit: 100.0,
        then: Exhausted::Hold,
    }
}

/// A view of `r` holding `live` nodes (and `draining` more), due a plan and a move check.
fn view<'a>(r: &'a JobRecord, live: usize, draining: usize) -> JobView<'a> {
    JobView {
        record: r,
        stopping: None,
        held: live + draining,
        live,
        busy: false,
        due_plan: true,
        due_move: true,
    }
}

#[test]
fn each_branch_of_what_a_job_needs() {
    let whole = placed();
    let mut done = placed();
    done.done_samples = done.total_samples;
    let mut cancelled = placed();
    cancelled.state = JobState::Cancelled;
    let mut finished = placed();
    finished.state = JobState::Finished;
    let mut unplaced = placed();
    unplaced.target_offer = None;
    let mut shrunk = placed();
    shrunk.target_count = 1;
    let mut probing = placed();
    probing.probe = Some(probe(false));
    let mut probed = placed();
    probed.probe = Some(probe(true));
    let stop = stop();
    fn under<'a>(stop: &'a Stop, v: JobView<'a>) -> JobView<'a> {
        JobView {
            stopping: Some(stop),
            ..v
        }
    }
    let stopping = |v| under(&stop, v);
    let rows: Vec<(&str, JobView<'_>, Need)> = vec![
        (
            "whole and due: a move check",
            view(&whole, 2, 0),
            Need::CheckMove,
        ),
        (
            "whole, move check not due",
            JobView {
                due_move: false,
                ..view(&whole, 2, 0)
            },
            Need::Nothing,
        ),
        ("a node lost: replace", view(&whole, 1, 1), Need::Replace),
        (
            "a node lost, no plan due",
            JobView {
                due_plan: false,
                ..view(&whole, 1, 0)
            },
            Need::Nothing,
        ),
        ("nothing runs: place", view(&whole, 0, 0), Need::Place),
        ("no target: place", view(&unplaced, 2, 0), Need::Place),
        (
            "resized below its plan: grow",
            view(&shrunk, 1, 0),
            Need::Grow,
        ),
        (
            "an intent open",
            JobView {
                busy: true,
                ..view(&whole, 1, 0)
            },
            Need::Nothing,
        ),
        ("work done: release", view(&done, 2, 0), Need::Release),
        (
            "work done, an intent open: release all the same",
            JobView {
                busy: true,
                ..view(&done, 2, 0)
            },
            Need::Release,
        ),
        (
            "work done, holds nothing: finish",
            view(&done, 0, 0),
            Need::Release,
        ),
        (
            "cancelled, holds a node",
            view(&cancelled, 1, 0),
            Need::Release,
        ),
        (
            "finished, holds nothing",
            view(&finished, 0, 0),
            Need::Nothing,
        ),
        (
            "probing, whole: not moved",
            view(&probing, 2, 0),
            Need::Nothing,
        ),
        (
            "probing, a node lost: replace",
            view(&probing, 1, 0),
            Need::Replace,
        ),
        (
            "probe over: a move check",
            view(&probed, 2, 0),
            Need::CheckMove,
        ),
        (
            "budget stop, whole: not moved",
            stopping(view(&whole, 2, 0)),
            Need::Nothing,
        ),
        (
            "budget stop, a node lost: not replaced",
            stopping(view(&whole, 1, 1)),
            Need::Nothing,
        ),
        (
            "budget stop, nothing runs: not placed",
            stopping(view(&whole, 0, 0)),
            Need::Nothing,
        ),
        (
            "budget stop, shrunk: not grown",
            stopping(view(&shrunk, 1, 0)),
            Need::Nothing,
        ),
        (
            "budget stop, work done: release",
            stopping(view(&done, 2, 0)),
            Need::Release,
        ),
    ];
    for (row, v, want) in rows {
        assert_eq!(view::need(&v), want, "{row}");
    }
}

#[test]
fn every_question_about_a_placed_job_is_asked_at_one_node_count() {
    let mut r = placed();
    assert_eq!(view::nodes_of(&r), 2);
    // Resized below its plan: still asked at the plan.
    r.target_count = 1;
    assert_eq!(view::nodes_of(&r), 2);
    // Running more than planned: at what it runs.
    r.target_count = 3;
    assert_eq!(view::nodes_of(&r), 3);
    // Nothing planned yet (a queued request's job): one node, never zero.
    (r.target_count, r.planned_count) = (0, 0);
    assert_eq!(view::nodes_of(&r), 1);
}
