//! Simulated training for `tern demo` and the scenario tests: plays the worker agents' part by
//! turning running instances into reported progress.
//!
//! The rules follow torchrun elastic semantics: every membership change restarts all workers
//! from the last checkpoint (after a `restore_s` stall); a drain request (interruption notice or
//! migration) takes a checkpoint at once if a node of the run is still there to take it; a
//! periodic checkpoint is taken every `interval_s`.
//! The agent on a node watches its own metadata for a reclaim notice, as `tern agent` does, so a
//! notice whose lead covers `save_s` checkpoints even when the controller's next pass comes
//! after the reclaim. A node lost without a fresh checkpoint therefore costs the progress since
//! the last one, and never more.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tern_cloud::{InstanceId, InstanceState};
use tern_sim::SimCloud;

use super::{Controller, ControllerError};

#[derive(Debug, Default)]
struct Run {
    members: BTreeSet<InstanceId>,
    /// Seconds of restart or checkpoint stall still to sit out.
    stall_s: f64,
    since_checkpoint_s: f64,
    /// Members whose reclaim notice the agent has acted on.
    noticed: BTreeSet<InstanceId>,
    /// An agent drained on a notice: the workers saved and stopped until the membership
    /// changes, as `tern agent` stops its worker after the checkpoint.
    halted: bool,
}

impl Run {
    /// The workers stall for a checkpoint save.
    fn save(&mut self, save_s: f64) {
        self.stall_s += save_s;
        self.since_checkpoint_s = 0.0;
    }

    /// Whether a member's agent saw a new reclaim notice early enough to save before the
    /// reclaim: then it checkpoints, as `tern agent` does on a notice.
    fn agent_saw_notice(&mut self, cloud: &SimCloud, save_s: f64) -> bool {
        let mut save = false;
        for id in &self.members {
            if self.noticed.contains(id) {
                continue;
            }
            if let Some(n) = cloud.agent_notice(id) {
                self.noticed.insert(id.clone());
                save |= (n.reclaim_at - n.seen_at).as_seconds_f64() >= save_s;
            }
        }
        self.noticed.retain(|id| self.members.contains(id));
        save
    }
}

/// Progress of every job, advanced step by step.
#[derive(Debug, Default)]
pub struct Workload {
    runs: HashMap<String, Run>,
    /// Samples thrown away by restarts from a checkpoint, per job (for reports and tests).
    pub lost_samples: HashMap<String, f64>,
    /// The instances' metadata, where the agents see reclaim notices; without it only the
    /// controller's drain makes them checkpoint.
    metadata: Option<Arc<SimCloud>>,
}

impl Workload {
    pub fn new() -> Workload {
        Workload::default()
    }

    /// Workers whose agents watch `cloud`'s instance metadata for reclaim notices.
    pub fn watching(cloud: Arc<SimCloud>) -> Workload {
        Workload {
            metadata: Some(cloud),
            ..Workload::default()
        }
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
            // A member's agent saw a reclaim notice: it saves before the reclaim, which is
            // before this step's progress when the controller already saw the node go.
            let notice = self
                .metadata
                .as_ref()
                .is_some_and(|m| run.agent_saw_notice(m, c.save_s));
            let save_first = notice && now_members != run.members;
            // A drain the controller asks for after the nodes went finds no agent to save.
            let alive = run.members.iter().any(|m| now_members.contains(m));
            if (job.drain_requested && alive) || save_first {
                // Checkpoint now: the agent runs the job's checkpoint command, unless it did
                // already on the notice and stopped. A save on a notice fits in its lead.
                checkpoint = done;
                checkpointed = true;
                if !run.halted && !save_first {
                    run.save(c.save_s);
                }
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
                run.halted = false;
            }
            let n = run.members.len() as u32;
            if n >= job.spec.workers.min.div_ceil(per_node).max(1) && !run.halted {
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
            if notice && !save_first {
                checkpoint = done;
                checkpointed = true;
                run.since_checkpoint_s = 0.0;
                run.halted = true;
            }
            ctl.report_progress(&name, done, checkpoint, checkpointed, now)?;
        }
        Ok(())
    }
}
