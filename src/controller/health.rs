//! Nodes that hold a job back, and what is done with them. A **straggler** is a node whose
//! measured step stays more than [`SLOW_FACTOR`] × the median of the job's other nodes for
//! [`SLOW_FOR`]; a **failing node** is one whose workers ended by themselves (crashed or hung)
//! alone, while another node's were stopped as asked, in [`FAILING_IN_A_ROW`] incarnations in
//! a row (a training that fails on every node, or on a job's only node, is the training's
//! fault: the agent's restart bound fails the job). Either is quarantined: drained (its agent
//! checkpoints and stops), released by intent once its workers stopped, and replaced by new
//! capacity like any node the job lost. A released instance is never used again.
//!
//! The step a node reports is the one its training measured (`step_seconds` in its progress
//! file). In a synchronous data-parallel job every node waits for the slowest in each
//! collective, so the wall-clock step is the same everywhere: a script that wants its
//! stragglers found reports its own compute time per step.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};

use super::decide;
use super::{Controller, Result};

/// How much slower than the others' median a straggler's step is.
pub const SLOW_FACTOR: f64 = 2.0;
/// How long a node must stay that slow.
pub const SLOW_FOR: TimeDelta = TimeDelta::minutes(10);
/// Incarnations in a row whose workers crashed or hung on one node before it is quarantined.
pub const FAILING_IN_A_ROW: u32 = 3;

/// One node's last measured step, and since when it has been a straggler's.
#[derive(Debug, Clone, PartialEq)]
struct Pace {
    step_s: f64,
    at: DateTime<Utc>,
    slow_since: Option<DateTime<Utc>>,
}

/// The step times a job's nodes reported lately.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Watch {
    nodes: BTreeMap<String, Pace>,
}

/// A node found to straggle.
#[derive(Debug, Clone, PartialEq)]
pub struct Straggler {
    pub instance: String,
    pub step_s: f64,
    pub median_s: f64,
    pub slow_for: TimeDelta,
}

impl Straggler {
    /// The quarantine's reason, in words.
    pub fn reason(&self) -> String {
        format!(
            "straggler: {:.3} s a step against a median of {:.3} s on the other nodes, for {} min",
            self.step_s,
            self.median_s,
            self.slow_for.num_minutes()
        )
    }
}

impl Watch {
    /// `instance` measured a step of `step_s` at `at`: the straggler it has become, if it
    /// has. Only other nodes heard from within [`SLOW_FOR`] count toward the median.
    pub fn step(&mut self, instance: &str, step_s: f64, at: DateTime<Utc>) -> Option<Straggler> {
        if !(step_s.is_finite() && step_s > 0.0) {
            return None;
        }
        let mut others: Vec<f64> = self
            .nodes
            .iter()
            .filter(|(id, p)| id.as_str() != instance && at - p.at <= SLOW_FOR)
            .map(|(_, p)| p.step_s)
            .collect();
        let median_s = median(&mut others);
        let slow = median_s.is_some_and(|m| step_s > SLOW_FACTOR * m);
        let before = self.nodes.get(instance).and_then(|p| p.slow_since);
        let slow_since = slow.then(|| before.unwrap_or(at));
        self.nodes.insert(
            instance.to_string(),
            Pace {
                step_s,
                at,
                slow_since,
            },
        );
        let since = slow_since?;
        let slow_for = at - since;
        (slow_for >= SLOW_FOR).then(|| Straggler {
            instance: instance.to_string(),
            step_s,
            median_s: median_s.unwrap_or(0.0),
            slow_for,
        })
    }

    /// Forget a node (quarantined, or gone).
    pub fn forget(&mut self, instance: &str) {
        self.nodes.remove(instance);
    }
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    })
}

impl Controller {
    /// A node's measured step, for the straggler watch of its job.
    pub(super) fn watch_step(
        &mut self,
        job: &str,
        instance: &str,
        step_s: f64,
        at: DateTime<Utc>,
    ) -> Result<()> {
        let Some(e) = self.fleet.jobs.get_mut(job) else {
            return Ok(());
        };
        let Some(s) = e.watch.step(instance, step_s, at) else {
            return Ok(());
        };
        e.watch.forget(instance);
        self.quarantine(job, instance, s.reason(), at)
    }

    /// A node of `job` reported straggling or failing: whether it is quarantined is
    /// [`decide::quarantine`]'s to say, and it is carried out at once (between passes: the
    /// node's agent is answered `quarantined` from its next call).
    pub(super) fn quarantine(
        &mut self,
        job: &str,
        instance: &str,
        reason: String,
        at: DateTime<Utc>,
    ) -> Result<()> {
        let ended = self
            .fleet
            .jobs
            .get(job)
            .is_none_or(|e| e.record.state.is_final());
        let id = tern_cloud::InstanceId::new(instance.to_string());
        let node = self.fleet.instances.get(&id);
        let decision = decide::quarantine(job, node, ended, reason);
        self.carry_out_now(job, decision, at)
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn t(minutes: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 29, 0, 0, 0)
            .single()
            .expect("time")
            + TimeDelta::minutes(minutes)
    }

    #[test]
    fn a_node_twice_as_slow_as_the_others_for_ten_minutes_is_a_straggler() {
        let mut w = Watch::default();
        let mut found = None;
        for m in 0..=12 {
            assert_eq!(w.step("a", 1.0, t(m)), None);
            assert_eq!(w.step("b", 1.1, t(m)), None);
            let s = w.step("slow", 2.5, t(m));
            if s.is_some() {
                found = Some((m, s));
                break;
            }
        }
        let (m, s) = found.expect("found");
        assert_eq!(m, 10, "slow since minute 0, found at minute 10");
        let s = s.expect("straggler");
        assert_eq!(s.instance, "slow");
        assert!((s.median_s - 1.05).abs() < 1e-9, "{s:?}");
        assert!(s.reason().contains("2.500 s a step"), "{}", s.reason());
    }

    #[test]
    fn a_slow_spell_shorter_than_ten_minutes_or_under_twice_the_median_is_not() {
        let mut w = Watch::default();
        for m in 0..60 {
            w.step("a", 1.0, t(m));
            // 1.9 × the median: slow, not a straggler.
            assert_eq!(w.step("b", 1.9, t(m)), None, "minute {m}");
            // Twice as slow for 9 minutes in every 10, then itself again.
            let step = if m % 10 == 9 { 1.0 } else { 2.5 };
            assert_eq!(w.step("c", step, t(m)), None, "minute {m}");
        }
    }

    #[test]
    fn a_lone_node_or_one_whose_peers_went_quiet_is_never_a_straggler() {
        let mut w = Watch::default();
        for m in 0..30 {
            assert_eq!(w.step("only", 5.0, t(m)), None);
        }
        // A peer heard once, long ago, is no median.
        let mut w = Watch::default();
        w.step("peer", 0.1, t(0));
        for m in 11..40 {
            assert_eq!(w.step("a", 5.0, t(m)), None);
        }
        // Bad numbers are ignored.
        assert_eq!(w.step("a", f64::NAN, t(41)), None);
        assert_eq!(w.step("a", -1.0, t(41)), None);
    }
}
