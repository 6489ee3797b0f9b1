//! The events in words: the message the event log keeps beside each typed event.

use std::fmt;

use super::{Event, Placement, ResizeWhy};

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
        if self.egress_usd >= 0.005 {
            write!(f, "; egress ${:.2} of it", self.egress_usd)?;
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
        // Three groups, one function each (each a match over its own events).
        match self {
            Event::Submitted { .. }
            | Event::Cancelled { .. }
            | Event::Failed { .. }
            | Event::WorkersStarted { .. }
            | Event::Hung { .. }
            | Event::Quarantined { .. }
            | Event::Planned { .. }
            | Event::Unplaceable { .. }
            | Event::Probing { .. }
            | Event::Probed { .. }
            | Event::ColdStart { .. }
            | Event::Basis { .. }
            | Event::Waiting { .. }
            | Event::BudgetWarning { .. }
            | Event::OverBudget { .. }
            | Event::Finished { .. } => self.fmt_job(f),
            Event::Notice { .. }
            | Event::Preempted { .. }
            | Event::LeakCollected { .. }
            | Event::Terminated { .. }
            | Event::ForeignInstance { .. }
            | Event::LaunchTimedOut { .. }
            | Event::QueueCancelled { .. } => self.fmt_nodes(f),
            _ => self.fmt_capacity(f),
        }
    }
}

impl Event {
    /// A job's life: submitted, planned or not, probed, measured, waiting, finished.
    fn fmt_job(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
            Event::Hung {
                instance,
                incarnation,
                ..
            } => write!(
                f,
                "workers on {instance} (incarnation {incarnation}) made no progress for the \
                 agent's hang timeout: stopped, restarting from the checkpoint"
            ),
            Event::Quarantined {
                instance, reason, ..
            } => write!(
                f,
                "node {instance} quarantined ({reason}): drained, released once its workers \
                 stopped, and replaced; never used again"
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
            Event::BudgetWarning {
                scope,
                name,
                spent,
                limit,
                ..
            } => write!(
                f,
                "{scope} {name} has spent ${spent:.2}, {:.0} % of its ${limit:.2} budget",
                100.0 * spent / limit.max(1e-9)
            ),
            Event::OverBudget {
                scope,
                name,
                spent,
                limit,
                then,
                ..
            } => write!(
                f,
                "{scope} {name}'s budget runs out (${spent:.2} spent of ${limit:.2}): checkpoint and stop, then {then}"
            ),
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
            Event::Finished { late_h, took_h, .. } => match late_h {
                Some(h) => write!(f, "all work done; finished {h:.1} h after its deadline"),
                None => write!(f, "all work done in {took_h:.1} h"),
            },
            _ => unreachable!("`Display::fmt` routes each event to its group"),
        }
    }

    /// What happened to nodes: notices, reclaims, terminations, leaks, timeouts, queues.
    fn fmt_nodes(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
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
            Event::Preempted {
                ids, lost_samples, ..
            } => {
                write!(
                    f,
                    "{} node(s) reclaimed by the cloud: {}",
                    ids.len(),
                    ids.join(", ")
                )?;
                if *lost_samples > 0.0 {
                    write!(
                        f,
                        "; {lost_samples:.0} samples since the last checkpoint to redo"
                    )?;
                }
                Ok(())
            }
            Event::LeakCollected { id, .. } => write!(
                f,
                "terminated {id}: tagged as ours but owned by no open intent or live job"
            ),
            Event::Terminated { ids, intent, .. } => {
                let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
                write!(
                    f,
                    "terminated {} instance(s) by intent {intent}: {}",
                    ids.len(),
                    ids.join(", ")
                )
            }
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
            _ => unreachable!("`Display::fmt` routes each event to its group"),
        }
    }

    /// Capacity started, refused, replaced, regrouped, resized or moved.
    fn fmt_capacity(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
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
            _ => unreachable!("`Display::fmt` routes each event to its group"),
        }
    }
}
