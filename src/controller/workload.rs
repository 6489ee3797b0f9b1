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
use tern_cloud::{CheckpointSpec, InstanceId, InstanceState, Observation};
use tern_plan::ThroughputModel;
use tern_sim::SimCloud;

use super::{Controller, ControllerError};
use crate::store::JobRecord;

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

/// A job's progress as one step changes it.
#[derive(Debug)]
struct Progress {
    done: f64,
    checkpoint: f64,
    /// A checkpoint was taken on request (drain, notice, scale-up): it answers a drain.
    saved: bool,
}

impl Progress {
    fn save(&mut self) {
        self.checkpoint = self.done;
        self.saved = true;
    }
}

/// What a membership change (or a notice) did at the start of a step.
#[derive(Debug)]
struct Change {
    /// Samples thrown away: the workers restarted from an older checkpoint.
    lost: f64,
    /// A notice seen while the node still counts as running: save after this step's work.
    save_after: bool,
}

impl Run {
    /// Drains and membership changes at the start of a step. `notice`: a member's agent saw a
    /// reclaim notice in time to save, before the reclaim, so before this step's progress when
    /// the controller already saw the node go, and after it otherwise.
    fn change(
        &mut self,
        job: &JobRecord,
        now_members: BTreeSet<InstanceId>,
        notice: bool,
        p: &mut Progress,
    ) -> Change {
        let c = &job.spec.checkpoint;
        let changed = now_members != self.members;
        let save_first = notice && changed;
        // A drain the controller asks for after the nodes went finds no agent to save.
        let alive = self.members.iter().any(|m| now_members.contains(m));
        if (job.drain_requested && alive) || save_first {
            // The agent runs the job's checkpoint command, unless it did already on the
            // notice and stopped. A save on a notice fits in its lead.
            p.save();
            if !self.halted && !save_first {
                self.save(c.save_s);
            }
        }
        let mut lost = 0.0;
        if changed {
            let grew =
                now_members.len() > self.members.len() && self.members.is_subset(&now_members);
            if grew && !self.members.is_empty() {
                // A planned scale-up: checkpoint first, then restart with more workers.
                p.save();
                self.stall_s += c.save_s;
            } else if p.done > p.checkpoint {
                lost = p.done - p.checkpoint;
                p.done = p.checkpoint;
            }
            self.stall_s += c.restore_s;
            self.members = now_members;
            self.halted = false;
        }
        Change {
            lost,
            save_after: notice && !save_first,
        }
    }

    /// `dt_s` seconds of training at `thr` samples/s, after any stall; a periodic checkpoint
    /// every `interval_s`, and one at the end.
    fn work(&mut self, c: &CheckpointSpec, thr: f64, total: f64, dt_s: f64, p: &mut Progress) {
        let stall = self.stall_s.min(dt_s);
        self.stall_s -= stall;
        let dt_s = dt_s - stall;
        p.done = (p.done + thr * dt_s).min(total);
        self.since_checkpoint_s += dt_s;
        if self.since_checkpoint_s >= c.interval_s || p.done >= total {
            p.checkpoint = p.done;
            self.since_checkpoint_s = 0.0;
        }
    }

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

/// Step time of a job the simulated workers have no speed for (nobody measured it, it has no
/// hint, and the simulation was given no true model): one local batch per GPU every 0.25 s,
/// scaling linearly. The simulated cloud needs some speed; the probe then measures this one.
pub const UNMEASURED_STEP_S: f64 = 0.25;

/// Local batch the simulated workers report for a job whose spec names none.
pub const UNMEASURED_BATCH: u32 = 64;

/// Progress of every job, advanced step by step.
#[derive(Default)]
pub struct Workload {
    runs: HashMap<String, Run>,
    /// The speed each job really runs at, where the simulation knows better than the
    /// controller's forecast (a cold-start job the controller must measure).
    truth: HashMap<String, Arc<dyn ThroughputModel>>,
    /// Samples thrown away by restarts from a checkpoint, per job (for reports and tests).
    pub lost_samples: HashMap<String, f64>,
    /// The instances' metadata, where the agents see reclaim notices; without it only the
    /// controller's drain makes them checkpoint.
    metadata: Option<Arc<SimCloud>>,
}

impl std::fmt::Debug for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workload")
            .field("runs", &self.runs.len())
            .field("truth", &self.truth.len())
            .finish()
    }
}

impl Workload {
    pub fn new() -> Workload {
        Workload::default()
    }

    /// Job `job` really runs at `model`'s expected speed, whatever the controller forecasts.
    pub fn with_truth(mut self, job: &str, model: Arc<dyn ThroughputModel>) -> Workload {
        self.truth.insert(job.to_string(), model);
        self
    }

    /// Samples/s of `job` on `nodes` × `per_node` accelerators, as the simulated workers run
    /// it: the true model, else the controller's forecast, else [`UNMEASURED_STEP_S`].
    fn speed(
        truth: &HashMap<String, Arc<dyn ThroughputModel>>,
        ctl: &Controller,
        job: &JobRecord,
        acc: &str,
        per_node: u32,
        nodes: u32,
    ) -> f64 {
        let name = job.name();
        let known = match truth.get(name) {
            Some(m) => m.throughput(acc, per_node, nodes),
            None => ctl
                .model(name)
                .and_then(|m| m.throughput(acc, per_node, nodes)),
        };
        known.map_or_else(
            || f64::from(per_node * nodes * batch_of(job)) / UNMEASURED_STEP_S,
            |t| t.expected,
        )
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
        let mut members = running_members(ctl);
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
            let notice = self
                .metadata
                .as_ref()
                .is_some_and(|m| run.agent_saw_notice(m, c.save_s));
            let mut p = Progress {
                done: job.done_samples,
                checkpoint: job.checkpoint_samples,
                saved: false,
            };
            let change = run.change(&job, now_members, notice, &mut p);
            if change.lost > 0.0 {
                *self.lost_samples.entry(name.clone()).or_default() += change.lost;
            }
            let n = run.members.len() as u32;
            let mut measured = None;
            if n >= job.spec.workers.min.div_ceil(per_node).max(1) && !run.halted {
                let thr = Self::speed(&self.truth, ctl, &job, &accelerator, per_node, n);
                run.work(&c, thr, job.total_samples, dt.as_secs_f64(), &mut p);
                measured = (thr > 0.0 && dt.as_secs_f64() > 0.0).then_some(thr);
            }
            if change.save_after {
                // The agent saw the notice during this step, its node still counted as running:
                // it saves what the step did and stops until the node goes.
                p.save();
                run.since_checkpoint_s = 0.0;
                run.halted = true;
            }
            ctl.report_progress(&name, p.done, p.checkpoint, p.saved, now)?;
            // As an agent does, the simulated workers report the step time they ran at; only
            // while the job is unmeasured or probing (a refit per report is not free, and the
            // exact speed adds nothing once known).
            let reports = job.probe.as_ref().is_some_and(|p| p.is_open()) || !ctl.measured(&name);
            if let Some(thr) = measured.filter(|_| reports) {
                let batch = batch_of(&job);
                let gpus = per_node * n;
                ctl.observe(&Observation {
                    job: name.clone(),
                    accelerator: accelerator.clone(),
                    gpus,
                    nodes: n,
                    local_batch: batch,
                    step_seconds: f64::from(gpus * batch) / thr,
                    sync_seconds: None,
                    at: now,
                })?;
            }
        }
        Ok(())
    }
}

/// The local batch the simulated workers run `job` at.
fn batch_of(job: &JobRecord) -> u32 {
    job.spec.local_batch.unwrap_or(UNMEASURED_BATCH)
}

/// Each job's running instances, with the accelerator and its count per node.
fn running_members(ctl: &Controller) -> HashMap<String, (BTreeSet<InstanceId>, String, u32)> {
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
    members
}
