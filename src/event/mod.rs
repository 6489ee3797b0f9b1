//! The event vocabulary: what the controller decided and saw, as typed values (`Event`),
//! with each one's kind, job, rendering ([`show`]) and counters ([`Tally`]) in one place, below
//! every module that writes, serves or reads events (the controller emits them, the store
//! keeps their JSON, reports and `tern explain` read them back typed). The wait reasons and
//! resize causes are in [`wait`].

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tern_cloud::{Capacity, InstanceId, IntentId, Zone};

pub use wait::{ResizeWhy, WaitReason};

mod show;
mod wait;

/// The planner's choice for a job, as the event log explains it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    pub solver: String,
    pub nodes: u32,
    pub instance_type: String,
    pub capacity: Capacity,
    pub zone: String,
    pub expected_cost: f64,
    /// Egress in `expected_cost`: the checkpoint brought from another region, the data read
    /// from another at each expected start (0 in events written before it was kept).
    #[serde(default)]
    pub egress_usd: f64,
    pub finish_h: f64,
    pub deadline_h: Option<f64>,
    /// How the choice compares with the cheapest $/accelerator-hour, when it is not that.
    pub versus_cheapest: Option<String>,
    /// The deadline policy's reasons for spot, zone or on-demand (jobs with a deadline).
    pub policy: Option<String>,
    /// What the forecast stands on when it is not a measurement (`hint`, `prior`…), and why
    /// a job nobody measured was planned without a probe.
    pub basis: Option<String>,
}

/// One decision or observation of the controller. Stored with its fields as JSON (tagged by
/// `event`, the same name as [`Event::kind`]), so tests and tools read the typed value back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event")]
pub enum Event {
    #[serde(rename = "submit")]
    Submitted {
        job: String,
        samples: f64,
        workers: String,
        accelerators: Vec<String>,
        due_in_h: Option<f64>,
    },
    #[serde(rename = "cancel")]
    Cancelled { job: String },
    /// The job's training failed for good on a worker (its agent's restarts ran out).
    #[serde(rename = "failed")]
    Failed { job: String, reason: String },
    /// An agent started the job's workers on an instance, as an incarnation.
    #[serde(rename = "workers")]
    WorkersStarted {
        job: String,
        instance: String,
        incarnation: u64,
        /// A new incarnation (the previous one fenced) rather than a node joining.
        opened: bool,
    },
    /// An agent stopped the job's workers on an instance: they made no progress for its hang
    /// timeout. It restarts them from the checkpoint (counting toward its restart bound).
    #[serde(rename = "hung")]
    Hung {
        job: String,
        instance: String,
        incarnation: u64,
    },
    /// A node held the job back (a straggler, or workers that crashed or hung alone in three
    /// incarnations in a row): drained, released once its workers stopped, and replaced.
    #[serde(rename = "quarantine")]
    Quarantined {
        job: String,
        instance: String,
        reason: String,
    },
    /// Nodes of one pool will be reclaimed (spot notice or maintenance).
    #[serde(rename = "notice")]
    Notice {
        job: String,
        pool: String,
        ids: Vec<String>,
        lead_s: Option<i64>,
    },
    #[serde(rename = "preempted")]
    Preempted {
        job: String,
        ids: Vec<String>,
        /// Samples done since the job's last checkpoint when its nodes went: the work to
        /// redo (cost attribution). Defaulted: events stored before it was recorded.
        #[serde(default)]
        lost_samples: f64,
    },
    #[serde(rename = "leak")]
    LeakCollected { job: Option<String>, id: InstanceId },
    /// Instances the cloud confirmed terminated, by the `terminate` or `migrate` intent that
    /// asked (every termination is one: ARCHITECTURE.md, invariant 1).
    #[serde(rename = "terminated")]
    Terminated {
        job: Option<String>,
        ids: Vec<InstanceId>,
        intent: IntentId,
    },
    /// Tagged with our owner but launched by another state store (`cluster`: its id, if any).
    #[serde(rename = "foreign")]
    ForeignInstance {
        job: Option<String>,
        id: InstanceId,
        cluster: Option<String>,
    },
    #[serde(rename = "timeout")]
    LaunchTimedOut {
        job: String,
        id: InstanceId,
        after: Duration,
        offer: String,
        /// How long the offer is avoided now.
        avoided: Duration,
    },
    /// A queued spot request cancelled: the deadline needs on-demand now.
    #[serde(rename = "queue-cancelled")]
    QueueCancelled {
        job: String,
        id: InstanceId,
        offer: String,
    },
    #[serde(rename = "plan")]
    Planned { job: String, placement: Placement },
    #[serde(rename = "unplaceable")]
    Unplaceable { job: String, reason: String },
    #[serde(rename = "wait")]
    Waiting { job: String, reason: WaitReason },
    #[serde(rename = "launched")]
    Launched {
        job: String,
        count: usize,
        instance_type: String,
        capacity: Capacity,
        zone: Zone,
        price: f64,
    },
    #[serde(rename = "launch-failed")]
    LaunchFailed { job: String, error: String },
    #[serde(rename = "capacity")]
    CapacityError {
        job: String,
        offer: String,
        error: String,
        /// How long the offer is avoided now.
        avoided: Duration,
    },
    #[serde(rename = "replace")]
    Replacing {
        job: String,
        missing: u32,
        on_demand: bool,
    },
    #[serde(rename = "regroup")]
    Regrouped {
        job: String,
        zone: Zone,
        released: usize,
    },
    #[serde(rename = "resize")]
    Resized {
        job: String,
        from: u32,
        to: u32,
        why: ResizeWhy,
    },
    #[serde(rename = "migrate")]
    Migrating {
        job: String,
        moved: u32,
        of: u32,
        from_capacity: Capacity,
        from_price: f64,
        from_zone: Zone,
        to_capacity: Capacity,
        to_price: f64,
        to_zone: Zone,
        net_saving: f64,
        work_h: f64,
        budget: f64,
        /// The deadline policy's reasons (jobs with a deadline).
        policy: Option<String>,
    },
    #[serde(rename = "migrated")]
    Migrated { job: String, released: usize },
    #[serde(rename = "finished")]
    Finished {
        job: String,
        /// Hours after the deadline, when it finished late.
        late_h: Option<f64>,
        took_h: f64,
    },
    /// A job nobody has measured starts its probe (`controller::probe`).
    #[serde(rename = "probe")]
    Probing {
        job: String,
        nodes: u32,
        instance_type: String,
        capacity: Capacity,
        zone: Zone,
        max_seconds: f64,
        max_usd: f64,
        /// Why this probe and not a plan (the deadline, the hint).
        why: String,
    },
    /// The probe ended: what it measured, what it cost and what the plan did next.
    #[serde(rename = "probed")]
    Probed {
        job: String,
        why: String,
        seconds: f64,
        usd: f64,
        outcome: String,
    },
    /// A job's or a team's spend passed 80 % of its budget (`scope`: `job` or `team`; `name`
    /// the team's name for a team).
    #[serde(rename = "budget-warning")]
    BudgetWarning {
        job: Option<String>,
        scope: String,
        name: String,
        spent: f64,
        limit: f64,
    },
    /// A budget will run out within the drain lead: the job checkpoints and stops, then ends
    /// `over-budget` (`drain`) or waits for budget (`hold`).
    #[serde(rename = "over-budget")]
    OverBudget {
        job: String,
        scope: String,
        name: String,
        spent: f64,
        limit: f64,
        then: String,
    },
    /// A job nobody has measured is planned without a probe, and why.
    #[serde(rename = "cold-start")]
    ColdStart { job: String, why: String },
    /// What the job's forecast stands on changed (a first measured step replaced the hint).
    #[serde(rename = "basis")]
    Basis {
        job: String,
        accelerator: String,
        from: String,
        to: String,
        step_s: Option<f64>,
    },
}

impl Event {
    /// The event log's `kind` column (a public interface: `/v1/events`, `tern demo`).
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Submitted { .. } => "submit",
            Event::Cancelled { .. } => "cancel",
            Event::Failed { .. } => "failed",
            Event::WorkersStarted { .. } => "workers",
            Event::Hung { .. } => "hung",
            Event::Quarantined { .. } => "quarantine",
            Event::Notice { .. } => "notice",
            Event::Preempted { .. } => "preempted",
            Event::LeakCollected { .. } => "leak",
            Event::Terminated { .. } => "terminated",
            Event::ForeignInstance { .. } => "foreign",
            Event::LaunchTimedOut { .. } => "timeout",
            Event::QueueCancelled { .. } => "queue-cancelled",
            Event::Planned { .. } => "plan",
            Event::Unplaceable { .. } => "unplaceable",
            Event::Waiting { .. } => "wait",
            Event::Launched { .. } => "launched",
            Event::LaunchFailed { .. } => "launch-failed",
            Event::CapacityError { .. } => "capacity",
            Event::Replacing { .. } => "replace",
            Event::Regrouped { .. } => "regroup",
            Event::Resized { .. } => "resize",
            Event::Migrating { .. } => "migrate",
            Event::Migrated { .. } => "migrated",
            Event::Finished { .. } => "finished",
            Event::Probing { .. } => "probe",
            Event::Probed { .. } => "probed",
            Event::Basis { .. } => "basis",
            Event::ColdStart { .. } => "cold-start",
            Event::BudgetWarning { .. } => "budget-warning",
            Event::OverBudget { .. } => "over-budget",
        }
    }

    /// The job the event is about, if any.
    /// Events an operator must act on (logged as warnings).
    pub fn needs_attention(&self) -> bool {
        matches!(self, Event::ForeignInstance { .. })
    }

    pub fn job(&self) -> Option<&str> {
        match self {
            Event::LeakCollected { job, .. }
            | Event::BudgetWarning { job, .. }
            | Event::ForeignInstance { job, .. }
            | Event::Terminated { job, .. } => job.as_deref(),
            Event::Submitted { job, .. }
            | Event::Cancelled { job }
            | Event::Failed { job, .. }
            | Event::WorkersStarted { job, .. }
            | Event::Hung { job, .. }
            | Event::Quarantined { job, .. }
            | Event::Notice { job, .. }
            | Event::Preempted { job, .. }
            | Event::LaunchTimedOut { job, .. }
            | Event::QueueCancelled { job, .. }
            | Event::Planned { job, .. }
            | Event::Unplaceable { job, .. }
            | Event::Waiting { job, .. }
            | Event::Launched { job, .. }
            | Event::LaunchFailed { job, .. }
            | Event::CapacityError { job, .. }
            | Event::Replacing { job, .. }
            | Event::Regrouped { job, .. }
            | Event::Resized { job, .. }
            | Event::Migrating { job, .. }
            | Event::Migrated { job, .. }
            | Event::Finished { job, .. }
            | Event::Probing { job, .. }
            | Event::Probed { job, .. }
            | Event::Basis { job, .. }
            | Event::ColdStart { job, .. }
            | Event::OverBudget { job, .. } => Some(job),
        }
    }
}

/// The counts the controller's `Stats` shows, derived from events as they are emitted, so
/// the event log, `/metrics`, the benchmark and the closed-loop figures cannot disagree.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub by_kind: std::collections::BTreeMap<&'static str, u64>,
    pub notices: u64,
    pub launches: u64,
    pub terminations: u64,
    pub leaks_collected: u64,
    pub migrations: u64,
}

impl Tally {
    /// Count `event`.
    pub fn count(&mut self, event: &Event) {
        *self.by_kind.entry(event.kind()).or_default() += 1;
        match event {
            Event::Notice { ids, .. } => self.notices += ids.len() as u64,
            Event::Launched { count, .. } => self.launches += *count as u64,
            Event::Terminated { ids, .. } => self.terminations += ids.len() as u64,
            Event::LeakCollected { .. } => self.leaks_collected += 1,
            Event::Migrated { .. } => self.migrations += 1,
            _ => {}
        }
    }
}

/// The typed event a stored event's JSON fields hold; `None` for fields that are not one (an
/// event stored before its kind had fields, or by a version that named them otherwise).
pub fn read(fields: &serde_json::Value) -> Option<Event> {
    serde_json::from_value(fields.clone()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_the_event_log_always_showed_them() {
        let e = Event::Notice {
            job: "bert".into(),
            pool: "spot use1-az1".into(),
            ids: vec!["i-1".into(), "i-2".into()],
            lead_s: Some(120),
        };
        assert_eq!(e.kind(), "notice");
        assert_eq!(e.job(), Some("bert"));
        assert_eq!(
            e.to_string(),
            "2 node(s) (spot use1-az1: i-1, i-2) will be reclaimed in 120 s: checkpoint now, replacement requested"
        );
        let w = Event::Waiting {
            job: "j".into(),
            reason: WaitReason::OnSurvivors {
                why: Box::new(WaitReason::NoDeadline),
                survivors: 3,
            },
        };
        assert_eq!(
            w.to_string(),
            "no spot capacity now; without a deadline tern never pays on-demand; running on 3 survivor(s)"
        );
        let f = Event::Finished {
            job: "j".into(),
            late_h: Some(1.5),
            took_h: 9.0,
        };
        assert_eq!(
            f.to_string(),
            "all work done; finished 1.5 h after its deadline"
        );
    }

    /// An event is stored as a value: its JSON tag is its kind, and it reads back equal.
    #[test]
    fn events_round_trip_as_typed_values_tagged_by_kind() {
        let events = [
            Event::Waiting {
                job: "j".into(),
                reason: WaitReason::OnSurvivors {
                    why: Box::new(WaitReason::Slack {
                        slack_h: 3.0,
                        left_h: 9.0,
                        work_h: 6.0,
                        reserve_h: 1.5,
                    }),
                    survivors: 2,
                },
            },
            Event::Resized {
                job: "j".into(),
                from: 4,
                to: 2,
                why: ResizeWhy::SpotOut(WaitReason::Policy { why: "p".into() }),
            },
            Event::Resized {
                job: "j".into(),
                from: 2,
                to: 4,
                why: ResizeWhy::SpotBack,
            },
            Event::LaunchTimedOut {
                job: "j".into(),
                id: "i-1".into(),
                after: Duration::from_secs(600),
                offer: "o".into(),
                avoided: Duration::from_millis(1500),
            },
            Event::Terminated {
                job: None,
                ids: vec!["i-2".into()],
                intent: IntentId::from_uuid(uuid::Uuid::nil()),
            },
        ];
        for e in events {
            let v = serde_json::to_value(&e).expect("serialise");
            assert_eq!(v["event"], e.kind(), "{v}");
            assert_eq!(serde_json::from_value::<Event>(v).expect("read back"), e);
        }
    }
}
