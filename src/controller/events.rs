//! What the controller decided, as typed events. Each is written to the store's event log (what
//! `tern demo` prints and `/v1/events` serves), logged as one structured line and counted by
//! kind, all in [`Controller::emit`], so no decision is reported in two different ways.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tern_cloud::{Capacity, InstanceId, Zone};

use super::{Controller, Result};

/// Why a job waits for spot instead of paying for on-demand.
#[derive(Debug, Clone, PartialEq)]
pub enum WaitReason {
    /// No deadline: tern never pays on-demand for such a job.
    NoDeadline,
    /// Slack above the reserve ([`tern_policies::fleet::spot_wait`]).
    Slack {
        slack_h: f64,
        left_h: f64,
        work_h: f64,
        reserve_h: f64,
    },
    /// As above, while the job runs on the nodes it still has.
    OnSurvivors {
        why: Box<WaitReason>,
        survivors: u32,
    },
    /// No offer of the job's shape, spot or on-demand.
    NoCapacity,
    /// The deadline policy expects waiting to cost least ([`tern_policies::deadline::Why`]).
    Policy(String),
    /// The job launched its hour's budget of instances
    /// ([`tern_policies::capacity::launch_budget`]).
    LaunchBudget { launched: u32, budget: u32 },
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::NoDeadline => write!(
                f,
                "no spot capacity now; without a deadline tern never pays on-demand"
            ),
            WaitReason::Slack {
                slack_h,
                left_h,
                work_h,
                reserve_h,
            } => write!(
                f,
                "no spot capacity now; waiting: slack {slack_h:.1} h ({left_h:.1} h left, {work_h:.1} h of work) is above the {reserve_h:.1} h reserve"
            ),
            WaitReason::OnSurvivors { why, survivors } => {
                write!(f, "{why}; running on {survivors} survivor(s)")
            }
            WaitReason::NoCapacity => write!(f, "no capacity of the job's shape anywhere"),
            WaitReason::Policy(why) => write!(f, "the deadline policy waits: {why}"),
            WaitReason::LaunchBudget { launched, budget } => write!(
                f,
                "launched {launched} instance(s) in the last hour, at its budget of {budget}; \
                 capacity keeps failing, so it waits instead of launching more"
            ),
        }
    }
}

/// Why an elastic job changes size.
#[derive(Debug, Clone, PartialEq)]
pub enum ResizeWhy {
    /// Down to the survivors while spot is out.
    SpotOut(WaitReason),
    /// Back up: spot of the shape is offered again.
    SpotBack,
}

/// The planner's choice for a job, as the event log explains it.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub solver: String,
    pub nodes: u32,
    pub instance_type: String,
    pub capacity: Capacity,
    pub zone: String,
    pub expected_cost: f64,
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

/// One decision or observation of the controller.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Submitted {
        job: String,
        samples: f64,
        workers: String,
        accelerators: Vec<String>,
        due_in_h: Option<f64>,
    },
    Cancelled {
        job: String,
    },
    /// The job's training failed for good on a worker (its agent's restarts ran out).
    Failed {
        job: String,
        reason: String,
    },
    /// An agent started the job's workers on an instance, as an incarnation.
    WorkersStarted {
        job: String,
        instance: String,
        incarnation: u64,
        /// A new incarnation (the previous one fenced) rather than a node joining.
        opened: bool,
    },
    /// Nodes of one pool will be reclaimed (spot notice or maintenance).
    Notice {
        job: String,
        pool: String,
        ids: Vec<String>,
        lead_s: Option<i64>,
    },
    Preempted {
        job: String,
        ids: Vec<String>,
    },
    LeakCollected {
        job: Option<String>,
        id: InstanceId,
    },
    /// Tagged with our owner but launched by another state store (`cluster`: its id, if any).
    ForeignInstance {
        job: Option<String>,
        id: InstanceId,
        cluster: Option<String>,
    },
    LaunchTimedOut {
        job: String,
        id: InstanceId,
        after: Duration,
        offer: String,
        /// How long the offer is avoided now.
        avoided: Duration,
    },
    /// A queued spot request cancelled: the deadline needs on-demand now.
    QueueCancelled {
        job: String,
        id: InstanceId,
        offer: String,
    },
    Planned {
        job: String,
        placement: Placement,
    },
    Unplaceable {
        job: String,
        reason: String,
    },
    Waiting {
        job: String,
        reason: WaitReason,
    },
    Launched {
        job: String,
        count: usize,
        instance_type: String,
        capacity: Capacity,
        zone: Zone,
        price: f64,
    },
    LaunchFailed {
        job: String,
        error: String,
    },
    CapacityError {
        job: String,
        offer: String,
        error: String,
        /// How long the offer is avoided now.
        avoided: Duration,
    },
    Replacing {
        job: String,
        missing: u32,
        on_demand: bool,
    },
    Regrouped {
        job: String,
        zone: Zone,
        released: usize,
    },
    Resized {
        job: String,
        from: u32,
        to: u32,
        why: ResizeWhy,
    },
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
    Migrated {
        job: String,
        released: usize,
    },
    Finished {
        job: String,
        /// Hours after the deadline, when it finished late.
        late_h: Option<f64>,
        took_h: f64,
    },
    /// A job nobody has measured starts its probe (`controller::probe`).
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
    Probed {
        job: String,
        why: String,
        seconds: f64,
        usd: f64,
        outcome: String,
    },
    /// A job nobody has measured is planned without a probe, and why.
    ColdStart {
        job: String,
        why: String,
    },
    /// What the job's forecast stands on changed (a first measured step replaced the hint).
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
            Event::Notice { .. } => "notice",
            Event::Preempted { .. } => "preempted",
            Event::LeakCollected { .. } => "leak",
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
        }
    }

    /// The job the event is about, if any.
    /// Events an operator must act on (logged as warnings).
    pub fn needs_attention(&self) -> bool {
        matches!(self, Event::ForeignInstance { .. })
    }

    pub fn job(&self) -> Option<&str> {
        match self {
            Event::LeakCollected { job, .. } | Event::ForeignInstance { job, .. } => job.as_deref(),
            Event::Submitted { job, .. }
            | Event::Cancelled { job }
            | Event::Failed { job, .. }
            | Event::WorkersStarted { job, .. }
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
            | Event::ColdStart { job, .. } => Some(job),
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "planner ({}): {}× {} {} in {}, expected ${:.0} total, finish in {:.1} h",
            self.solver,
            self.nodes,
            self.instance_type,
            self.capacity,
            self.zone,
            self.expected_cost,
            self.finish_h
        )?;
        if let Some(d) = self.deadline_h {
            write!(f, " (deadline {d:.1} h)")?;
        }
        if let Some(v) = &self.versus_cheapest {
            write!(f, "; {v}")?;
        }
        if let Some(p) = &self.policy {
            write!(f, "; policy: {p}")?;
        }
        if let Some(b) = &self.basis {
            write!(f, "; forecast: {b}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Submitted {
                samples,
                workers,
                accelerators,
                due_in_h,
                ..
            } => {
                write!(
                    f,
                    "{samples} samples on {workers} × [{}]",
                    accelerators.join(", ")
                )?;
                if let Some(h) = due_in_h {
                    write!(f, ", due in {h:.1} h")?;
                }
                Ok(())
            }
            Event::Cancelled { .. } => write!(f, "cancelled by the user"),
            Event::Failed { reason, .. } => write!(f, "failed: {reason}"),
            Event::WorkersStarted {
                instance,
                incarnation,
                opened,
                ..
            } => {
                let how = if *opened { "opened" } else { "joined" };
                write!(
                    f,
                    "workers started on {instance}: {how} incarnation {incarnation}"
                )
            }
            Event::Notice {
                pool, ids, lead_s, ..
            } => {
                write!(
                    f,
                    "{} node(s) ({pool}: {}) will be reclaimed",
                    ids.len(),
                    ids.join(", ")
                )?;
                if let Some(s) = lead_s {
                    write!(f, " in {s} s")?;
                }
                write!(f, ": checkpoint now, replacement requested")
            }
            Event::Preempted { ids, .. } => write!(
                f,
                "{} node(s) reclaimed by the cloud: {}",
                ids.len(),
                ids.join(", ")
            ),
            Event::LeakCollected { id, .. } => write!(
                f,
                "terminated {id}: tagged as ours but owned by no open intent or live job"
            ),
            Event::ForeignInstance { id, cluster, .. } => write!(
                f,
                "{id} carries our owner tag but {}; left running (restore that store, or \
                 start the controller with --adopt to collect it)",
                match cluster {
                    Some(c) => format!("was launched by the controller of store {c}"),
                    None => "no store id (tern:cluster)".to_string(),
                }
            ),
            Event::LaunchTimedOut {
                id,
                after,
                offer,
                avoided,
                ..
            } => write!(
                f,
                "{id} did not come up within {after:?}; terminated, {offer} avoided for {} min",
                avoided.as_secs().div_ceil(60)
            ),
            Event::QueueCancelled { id, offer, .. } => write!(
                f,
                "{id} still queued for {offer} and the deadline needs on-demand now; cancelled"
            ),
            Event::Planned { placement, .. } => write!(f, "{placement}"),
            Event::Unplaceable { reason, .. } => write!(f, "{reason}"),
            Event::Probing {
                nodes,
                instance_type,
                capacity,
                zone,
                max_seconds,
                max_usd,
                why,
                ..
            } => write!(
                f,
                "probing on {nodes}× {instance_type} {capacity} in {zone} for at most {:.0} min or ${max_usd:.2}: {why}",
                max_seconds / 60.0
            ),
            Event::Probed {
                why,
                seconds,
                usd,
                outcome,
                ..
            } => write!(
                f,
                "probe ended ({why}) after {:.1} min, ${usd:.2}; {outcome}",
                seconds / 60.0
            ),
            Event::ColdStart { why, .. } => write!(f, "{why}"),
            Event::Basis {
                accelerator,
                from,
                to,
                step_s,
                ..
            } => {
                write!(f, "forecast on {accelerator}: {from} → {to}")?;
                if let Some(s) = step_s {
                    write!(f, " ({s:.4} s/step)")?;
                }
                Ok(())
            }
            Event::Waiting { reason, .. } => write!(f, "{reason}"),
            Event::Launched {
                count,
                instance_type,
                capacity,
                zone,
                price,
                ..
            } => write!(
                f,
                "{count}× {instance_type} {capacity} in {zone} at ${price:.2}/h each"
            ),
            Event::LaunchFailed { error, .. } => write!(f, "{error}"),
            Event::CapacityError {
                offer,
                error,
                avoided,
                ..
            } => {
                write!(
                    f,
                    "{offer}: {error}; avoided for {} min",
                    avoided.as_secs().div_ceil(60)
                )
            }
            Event::Replacing {
                missing, on_demand, ..
            } => {
                let why = if *on_demand {
                    "no spot capacity and the deadline needs the work now: on-demand"
                } else {
                    "replacing lost node(s) with spot"
                };
                write!(f, "{missing} node(s) missing: {why}")
            }
            Event::Regrouped { zone, released, .. } => write!(
                f,
                "gang cannot be completed in {zone}: releasing {released} node(s) to place the whole gang again"
            ),
            Event::Resized { from, to, why, .. } => match why {
                ResizeWhy::SpotOut(wait) => write!(
                    f,
                    "{from} → {to} node(s): {wait}; the job goes on at the smaller size"
                ),
                ResizeWhy::SpotBack => write!(
                    f,
                    "{from} → {to} node(s): spot capacity of the shape is offered again"
                ),
            },
            Event::Migrating {
                moved,
                of,
                from_capacity,
                from_price,
                from_zone,
                to_capacity,
                to_price,
                to_zone,
                net_saving,
                work_h,
                budget,
                policy,
                ..
            } => {
                write!(
                    f,
                    "{moved} of {of} node(s) {from_capacity} ${from_price:.2}/h in {from_zone} → {to_capacity} ${to_price:.2}/h in {to_zone}: net saving ${net_saving:.0} over {work_h:.1} h of work (disruption budget {:.0} %)",
                    budget * 100.0
                )?;
                match policy {
                    Some(p) => write!(f, "; policy: {p}"),
                    None => Ok(()),
                }
            }
            Event::Migrated { released, .. } => {
                write!(f, "released {released} old node(s) after checkpoint")
            }
            Event::Finished { late_h, took_h, .. } => match late_h {
                Some(h) => write!(f, "all work done; finished {h:.1} h after its deadline"),
                None => write!(f, "all work done in {took_h:.1} h"),
            },
        }
    }
}

impl Controller {
    /// Record a decision: event log, structured log line and per-kind count, in one place.
    pub(super) fn emit(&self, at: DateTime<Utc>, event: Event) -> Result<()> {
        let kind = event.kind();
        let job = event.job();
        let message = event.to_string();
        let id = self.store.add_event(at, job, kind, &message)?;
        if event.needs_attention() {
            tracing::warn!(event = id, at = %at, job = job.unwrap_or("-"), kind, "{message}");
        } else {
            tracing::info!(event = id, at = %at, job = job.unwrap_or("-"), kind, "{message}");
        }
        *self
            .event_counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(kind)
            .or_default() += 1;
        Ok(())
    }

    /// Events emitted so far by kind (for `/metrics`).
    pub fn event_counts(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.event_counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
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
}
