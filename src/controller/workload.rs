//! Simulated training for `tern demo` and the scenario tests: plays the worker agents' part by
//! turning running instances into reported progress.
//!
//! The rules follow torchrun elastic semantics: every membership change restarts all workers
//! from the last checkpoint (after a `restore_s` stall); a drain request (interruption notice or
//! migration) takes a checkpoint at once; a periodic checkpoint is taken every `interval_s`.
//! A node lost without a fresh checkpoint therefore costs the progress since the last one, and
//! never more.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tern_cloud::{InstanceId, InstanceState};

use super::{Controller, ControllerError};

#[derive(Debug, Default)]
struct Run {
    members: BTreeSet<InstanceId>,
    /// Seconds of restart or checkpoint stall still to sit out.
    stall_s: f64,
    since_checkpoint_s: f64,
}

/// Progress of every job, advanced step by step.
#[derive(Debug, Default)]
pub struct Workload {
    runs: HashMap<String, Run>,
    /// Samples thrown away by restarts from a checkpoint, per job (for reports and tests).
    pub lost_samples: HashMap<String, f64>,
}

impl Workload {
    pub fn new() -> Workload {
        Workload::default()
    }

    /// Advance every job by `dt` ending at `now`, and report progress to the controller.
    pub fn step(
        &mut self,
        ctl: &mut Controller,
        dt: Duration,
        now: DateTime<Utc>,
    ) -> Result<(), ControllerError> {
        let mut members: HashMap<String, (BTreeSet<InstanceId>, String, u32)> = HashMap::new();
        for i in ctl.instances() {
            if i.state != InstanceState::Running {
                continue;
            }
            let e = members.entry(i.job.clone()).or_insert_with(|| {
                (
                    BTreeSet::new(),
                    i.offer
                        .accelerator()
                        .map(|a| a.name.clone())
                        .unwrap_or_default(),
                    i.offer.accelerator_units().max(1),
                )
            });
            e.0.insert(i.id.clone());
        }
        let names: Vec<String> = ctl
            .jobs()
            .filter(|j| !j.state.is_final())
            .map(|j| j.name().to_string())
            .collect();
        for name in names {
            let Some(job) = ctl.job(&name).cloned() else {
                continue;
            };
            let (now_members, accelerator, per_node) = members.remove(&name).unwrap_or_default();
            let per_node = per_node.max(1);
            let run = self.runs.entry(name.clone()).or_default();
            if now_members.is_empty() && run.members.is_empty() && !job.drain_requested {
                continue;
            }
            let c = job.spec.checkpoint;
            let mut done = job.done_samples;
            let mut checkpoint = job.checkpoint_samples;
            let mut checkpointed = false;
            let mut dt_s = dt.as_secs_f64();
            if job.drain_requested {
                // Checkpoint now: the agent runs the job's checkpoint command.
                checkpoint = done;
                checkpointed = true;
                run.stall_s += c.save_s;
                run.since_checkpoint_s = 0.0;
            }
            if now_members != run.members {
                let grew =
                    now_members.len() > run.members.len() && run.members.is_subset(&now_members);
                if grew && !run.members.is_empty() {
                    // A planned scale-up: checkpoint first, then restart with more workers.
                    checkpoint = done;
                    checkpointed = true;
                    run.stall_s += c.save_s;
                } else if done > checkpoint {
                    *self.lost_samples.entry(name.clone()).or_default() += done - checkpoint;
                    done = checkpoint;
                }
                run.stall_s += c.restore_s;
                run.members = now_members;
            }
            let n = run.members.len() as u32;
            if n >= job.spec.workers.min.div_ceil(per_node).max(1) {
                let stall = run.stall_s.min(dt_s);
                run.stall_s -= stall;
                dt_s -= stall;
                let thr = ctl
                    .model(&name)
                    .and_then(|m| m.throughput(&accelerator, per_node, n))
                    .map_or(0.0, |t| t.expected);
                done = (done + thr * dt_s).min(job.total_samples);
                run.since_checkpoint_s += dt_s;
                if run.since_checkpoint_s >= c.interval_s || done >= job.total_samples {
                    checkpoint = done;
                    run.since_checkpoint_s = 0.0;
                }
            }
            ctl.report_progress(&name, done, checkpoint, checkpointed, now)?;
        }
        Ok(())
    }
}
