//! Simulated training for `tern demo`, the closed loop and the scenario tests: a simulated
//! `tern agent` on every running instance, speaking the worker protocol ([`protocol`]) as the
//! real one does over HTTP, and acting only on its answers.
//!
//! Each agent asks to start the job's workers on its instance and is told an incarnation, to
//! wait, or that nothing runs there; it reports the job's progress after each step and obeys
//! the answer: `drain` (checkpoint, report it, stop), `stop` (restart as a new incarnation),
//! or a refusal's action. It watches its own instance's metadata for a reclaim notice, as
//! `tern agent` does, so a notice whose lead covers `save_s` checkpoints even when the
//! controller's next pass comes after the reclaim. It reads no job or instance flag.
//!
//! The training follows torchrun elastic semantics: every change of the running workers
//! restarts them all from the last checkpoint (after a `restore_s` stall), a planned scale-up
//! checkpoints first, and a periodic checkpoint is taken every `interval_s`. A node lost
//! without a fresh checkpoint therefore costs the progress since the last one, and never more.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tern_cloud::{CheckpointSpec, InstanceId, InstanceState, Observation, Region};
use tern_plan::ThroughputModel;
use tern_sim::SimCloud;

use super::inputs::Request;
use super::protocol::{self, Answer, Fleet, Sink, Verdict};
use super::{Controller, ControllerError};
use crate::api::wire::{Action, Progress};
use crate::store::JobRecord;

/// Where the simulated agents' protocol calls leave their changes: taken into the controller
/// after each call, as the service's loop takes the API's.
#[derive(Debug, Default)]
struct Queue {
    changes: Mutex<Vec<Request>>,
    writers: Mutex<()>,
}

impl Sink for Queue {
    fn send(&self, change: Request, _urgent: bool) {
        self.changes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(change);
    }

    fn writers(&self) -> &Mutex<()> {
        &self.writers
    }
}

impl Queue {
    fn take_into(&self, ctl: &mut Controller) -> Result<(), ControllerError> {
        let changes = std::mem::take(&mut *self.changes.lock().unwrap_or_else(|e| e.into_inner()));
        for c in changes {
            ctl.apply(c)?;
        }
        Ok(())
    }
}

/// A simulated `tern agent` on one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agent {
    /// Asking to start the job's workers here (or told to wait).
    Asking,
    /// Its workers run as this incarnation.
    Running(u64),
    /// Done on this instance: drained on a notice, or told nothing runs here.
    Gone,
}

/// One job's training: its agents and the group of workers that trains.
#[derive(Debug, Default)]
struct Run {
    agents: BTreeMap<InstanceId, Agent>,
    /// The workers that trained together at the last step: instance and incarnation (a new
    /// incarnation is a restart, even on the same nodes).
    members: BTreeSet<(InstanceId, u64)>,
    /// Seconds of restart or checkpoint stall still to sit out.
    stall_s: f64,
    since_checkpoint_s: f64,
    /// Instances whose reclaim notice the agent has acted on.
    noticed: BTreeSet<InstanceId>,
    /// The training's samples, kept between steps (what the workers have, reported or not:
    /// a group that lost its nodes has rolled back to its checkpoint before anyone reports).
    samples: Option<Samples>,
    /// Where the checkpoint lives: the region of the group that last restored (and since
    /// wrote) it, as the policies' model has it.
    checkpoint_region: Option<Region>,
}

/// A job's samples as the training has them.
#[derive(Debug, Clone, Copy)]
struct Samples {
    done: f64,
    checkpoint: f64,
}

impl Samples {
    fn save(&mut self) {
        self.checkpoint = self.done;
    }
}

impl Run {
    /// The running workers changed (or not) since the last step: a restart from the last
    /// checkpoint, after a checkpoint first when it is a planned scale-up. Samples lost.
    fn regroup(
        &mut self,
        c: &CheckpointSpec,
        members: BTreeSet<(InstanceId, u64)>,
        p: &mut Samples,
    ) -> f64 {
        if members == self.members {
            return 0.0;
        }
        let grew = members.len() > self.members.len() && self.members.is_subset(&members);
        let mut lost = 0.0;
        if grew && !self.members.is_empty() {
            p.save();
            self.stall_s += c.save_s;
        } else if p.done > p.checkpoint {
            lost = p.done - p.checkpoint;
            p.done = p.checkpoint;
        }
        if !members.is_empty() {
            self.stall_s += c.restore_s;
        }
        self.members = members;
        lost
    }

    /// `dt_s` seconds of training at `thr` samples/s, after any stall; a periodic checkpoint
    /// every `interval_s`, and one at the end.
    fn work(&mut self, c: &CheckpointSpec, thr: f64, total: f64, dt_s: f64, p: &mut Samples) {
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

    /// Running agents whose instance's metadata shows a new reclaim notice early enough to
    /// save before the reclaim: they checkpoint after this step and stop, as `tern agent`
    /// does on a notice.
    fn noticed_now(&mut self, cloud: &SimCloud, save_s: f64) -> Vec<InstanceId> {
        let mut out = Vec::new();
        for (id, a) in &self.agents {
            if !matches!(a, Agent::Running(_)) || self.noticed.contains(id) {
                continue;
            }
            if let Some(n) = cloud.agent_notice(id) {
                self.noticed.insert(id.clone());
                if (n.reclaim_at - n.seen_at).as_seconds_f64() >= save_s {
                    out.push(id.clone());
                }
            }
        }
        out
    }

    fn running(&self) -> BTreeSet<(InstanceId, u64)> {
        self.agents
            .iter()
            .filter_map(|(id, a)| match a {
                Agent::Running(k) => Some((id.clone(), *k)),
                _ => None,
            })
            .collect()
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
    /// The cloud the agents run on: its instance metadata, where they see reclaim notices,
    /// and its egress meter, which bills their checkpoint reads across regions. Without it
    /// only the controller's drain makes them checkpoint, and nothing bills egress.
    metadata: Option<Arc<SimCloud>>,
    queue: Queue,
    /// Every answer each instance's agent was given, in order, when kept (tests compare them
    /// with a real agent's).
    answers: Option<BTreeMap<InstanceId, Vec<String>>>,
    /// Leave the jobs with a `[run]` to the real agents running it (`--local-agents`).
    spare_run: bool,
}

impl std::fmt::Debug for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workload")
            .field("runs", &self.runs.len())
            .field("truth", &self.truth.len())
            .finish()
    }
}

/// What one step of a job's workers knows: the job, where it runs, and when.
struct Step<'a> {
    job: &'a JobRecord,
    fleet: Fleet,
    accelerator: String,
    per_node: u32,
    now: DateTime<Utc>,
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

    /// Workers whose agents watch `cloud`'s instance metadata for reclaim notices.
    pub fn watching(cloud: Arc<SimCloud>) -> Workload {
        Workload {
            metadata: Some(cloud),
            ..Workload::default()
        }
    }

    /// Move only the jobs without a `[run]`: real agents run the others' programs.
    pub fn sparing_jobs_with_run(mut self) -> Workload {
        self.spare_run = true;
        self
    }

    /// Keep every answer the agents are given ([`Self::answers`]).
    pub fn keeping_answers(mut self) -> Workload {
        self.answers = Some(BTreeMap::new());
        self
    }

    /// The answers each instance's agent was given, in order (`start: incarnation N`,
    /// `start: wait`, `report: ok`, `report: drain`, `report: stop`, `report: 409 done`, …).
    pub fn answers(&self) -> BTreeMap<InstanceId, Vec<String>> {
        self.answers.clone().unwrap_or_default()
    }

    /// Samples/s of `job` on `nodes` × `per_node` accelerators, as the simulated workers run
    /// it: the true model, else the controller's forecast, else [`UNMEASURED_STEP_S`].
    fn speed(
        &self,
        ctl: &Controller,
        job: &JobRecord,
        acc: &str,
        per_node: u32,
        nodes: u32,
    ) -> f64 {
        let name = job.name();
        let known = match self.truth.get(name) {
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

    /// Advance every job by `dt` ending at `now`: its agents start, train and report.
    pub fn step(
        &mut self,
        ctl: &mut Controller,
        dt: Duration,
        now: DateTime<Utc>,
    ) -> Result<(), ControllerError> {
        let mut members = running_members(ctl);
        let names: Vec<String> = ctl
            .jobs()
            .filter(|j| !(self.spare_run && j.spec.run.is_some()))
            .filter(|j| {
                !j.state.is_final()
                    || self
                        .runs
                        .get(j.name())
                        .is_some_and(|r| !r.running().is_empty())
            })
            .map(|j| j.name().to_string())
            .collect();
        for name in names {
            let Some(job) = ctl.job(&name).cloned() else {
                continue;
            };
            let (now_running, accelerator, per_node) = members.remove(&name).unwrap_or_default();
            let idle = self
                .runs
                .get(&name)
                .is_none_or(|r| r.agents.is_empty() && r.members.is_empty());
            if now_running.is_empty() && idle {
                continue;
            }
            let step = Step {
                fleet: super::service::fleet_of(ctl, &name),
                job: &job,
                accelerator,
                per_node: per_node.max(1),
                now,
            };
            self.step_job(ctl, &step, now_running, dt)?;
        }
        self.runs.retain(|name, r| {
            ctl.job(name).is_some_and(|j| !j.state.is_final()) || !r.running().is_empty()
        });
        Ok(())
    }

    fn step_job(
        &mut self,
        ctl: &mut Controller,
        s: &Step<'_>,
        now_running: BTreeMap<InstanceId, Region>,
        dt: Duration,
    ) -> Result<(), ControllerError> {
        let name = s.job.name().to_string();
        let c = s.job.spec.checkpoint;
        let mut run = self.runs.remove(&name).unwrap_or_default();
        // An agent lives as long as its instance runs; a new instance gets a new agent.
        run.agents.retain(|id, _| now_running.contains_key(id));
        for id in now_running.keys() {
            run.agents.entry(id.clone()).or_insert(Agent::Asking);
        }
        self.ask_to_start(ctl, s, &mut run)?;
        let noticed = match &self.metadata {
            Some(m) => run.noticed_now(m, c.save_s),
            None => Vec::new(),
        };
        run.noticed.retain(|id| now_running.contains_key(id));
        let mut p = run.samples.unwrap_or(Samples {
            done: s.job.done_samples,
            checkpoint: s.job.checkpoint_samples,
        });
        let running = run.running();
        let restored = running != run.members && !running.is_empty();
        let lost = run.regroup(&c, running, &mut p);
        if lost > 0.0 {
            *self.lost_samples.entry(name.clone()).or_default() += lost;
        }
        if restored {
            self.restore(s.job, &mut run, &now_running, &p);
        }
        let n = run.members.len() as u32;
        let mut measured = None;
        let min_nodes = s.job.spec.workers.min.div_ceil(s.per_node).max(1);
        if n >= min_nodes && !s.job.state.is_final() {
            let thr = self.speed(ctl, s.job, &s.accelerator, s.per_node, n);
            run.work(&c, thr, s.job.total_samples, dt.as_secs_f64(), &mut p);
            measured = (thr > 0.0 && dt.as_secs_f64() > 0.0).then_some(thr);
        }
        // As an agent does, the workers report the step time they ran at; only while the job
        // is unmeasured or probing (a refit per report is not free, and the exact speed adds
        // nothing once known).
        let reports = s.job.probe.as_ref().is_some_and(|p| p.is_open()) || !ctl.measured(&name);
        let observation = measured.filter(|_| reports).map(|thr| {
            let batch = batch_of(s.job);
            let gpus = s.per_node * n;
            Observation {
                job: name.clone(),
                accelerator: s.accelerator.clone(),
                gpus,
                nodes: n,
                local_batch: batch,
                step_seconds: f64::from(gpus * batch) / thr,
                sync_seconds: None,
                at: s.now,
            }
        });
        self.report_all(ctl, s, &mut run, &mut p, &noticed, observation)?;
        if p.done >= s.job.total_samples && !s.job.state.is_final() {
            self.training_ended(ctl, s, &mut run, &p)?;
        }
        // A worker told to restart asks again at once, as `tern agent` does.
        self.ask_to_start(ctl, s, &mut run)?;
        run.samples = Some(p);
        self.runs.insert(name, run);
        Ok(())
    }

    /// Every agent still asking asks to start; each acts on its answer.
    fn ask_to_start(
        &mut self,
        ctl: &mut Controller,
        s: &Step<'_>,
        run: &mut Run,
    ) -> Result<(), ControllerError> {
        let store = ctl.store().clone();
        let asking: Vec<InstanceId> = run
            .agents
            .iter()
            .filter(|(_, a)| **a == Agent::Asking)
            .map(|(id, _)| id.clone())
            .collect();
        for id in asking {
            let answer = protocol::start(
                &store,
                &self.queue,
                s.job.name(),
                id.as_str(),
                None,
                &s.fleet,
                s.now,
            )?;
            self.queue.take_into(ctl)?;
            let (next, said) = match answer {
                Answer::Done((k, _)) => (Agent::Running(k), format!("start: incarnation {k}")),
                Answer::Refused(Action::Wait, _) => (Agent::Asking, "start: wait".to_string()),
                Answer::Refused(action, _) => {
                    (Agent::Gone, format!("start: {}", action_name(action)))
                }
            };
            self.said(&id, said);
            run.agents.insert(id, next);
        }
        Ok(())
    }

    /// Every running agent reports the step's progress and acts on the answer. Agents in
    /// `noticed` saw a reclaim notice: they checkpoint and make their last report.
    fn report_all(
        &mut self,
        ctl: &mut Controller,
        s: &Step<'_>,
        run: &mut Run,
        p: &mut Samples,
        noticed: &[InstanceId],
        mut observation: Option<Observation>,
    ) -> Result<(), ControllerError> {
        // Those that are leaving report first (a notice, a drained instance), so the others
        // hear in the same step that their incarnation lost a node, as they would seconds
        // later in real time.
        let mut running: Vec<(InstanceId, u64)> = run.running().into_iter().collect();
        let draining = |id: &InstanceId| {
            noticed.contains(id)
                || s.fleet
                    .live
                    .iter()
                    .any(|l| l.id == id.as_str() && l.draining)
        };
        running.sort_by_key(|(id, _)| !draining(id));
        for (id, k) in running {
            let notice = noticed.contains(&id);
            if notice {
                p.save();
            }
            let mut report = progress(p, &id, k, observation.take());
            report.checkpointed = notice;
            report.stopped = notice;
            let answer = self.send(ctl, s, &report)?;
            let said = said_of(&answer);
            self.said(&id, if notice { format!("last {said}") } else { said });
            if notice {
                run.agents.insert(id, Agent::Gone);
                continue;
            }
            let next = self.obey(ctl, s, p, &id, k, answer)?;
            run.agents.insert(id, next);
        }
        Ok(())
    }

    /// The job's work is done: the training saved and exited by itself, as `tern_train` does
    /// at the job's samples, and each agent makes its last report and is done.
    fn training_ended(
        &mut self,
        ctl: &mut Controller,
        s: &Step<'_>,
        run: &mut Run,
        p: &Samples,
    ) -> Result<(), ControllerError> {
        for (id, k) in run.running() {
            let mut report = progress(p, &id, k, None);
            report.checkpointed = true;
            report.stopped = true;
            let answer = self.send(ctl, s, &report)?;
            self.said(&id, format!("last {}", said_of(&answer)));
            run.agents.insert(id, Agent::Gone);
        }
        Ok(())
    }

    /// What an agent does with the answer to its report: go on, checkpoint and stop (`drain`,
    /// or the job ended), stop and start again (`stop`), or kill its workers (409 `stop`).
    fn obey(
        &mut self,
        ctl: &mut Controller,
        s: &Step<'_>,
        p: &mut Samples,
        id: &InstanceId,
        k: u64,
        answer: Answer<Verdict>,
    ) -> Result<Agent, ControllerError> {
        let (save, last) = match &answer {
            Answer::Done(v) if v.drain => (true, true),
            Answer::Done(v) if v.stop => (false, true),
            Answer::Done(_) => return Ok(Agent::Running(k)),
            Answer::Refused(Action::Done, _) => (true, true),
            Answer::Refused(Action::Stop, _) => return Ok(Agent::Asking),
            Answer::Refused(_, _) => return Ok(Agent::Gone),
        };
        if save {
            p.save();
        }
        if last {
            let mut report = progress(p, id, k, None);
            report.checkpointed = save;
            report.stopped = true;
            let answer = self.send(ctl, s, &report)?;
            self.said(id, format!("last {}", said_of(&answer)));
        }
        // A drained agent asks again: the answer says whether anything runs here now (a move
        // called off gives the node back; a node that is leaving is told `done`).
        Ok(match answer {
            Answer::Refused(..) => Agent::Gone,
            Answer::Done(_) => Agent::Asking,
        })
    }

    /// The group restarted from the job's checkpoint: each region of its nodes other than the
    /// checkpoint's reads a copy across regions, billed by the cloud; the checkpoint then
    /// lives with the group's first node.
    fn restore(
        &self,
        job: &JobRecord,
        run: &mut Run,
        regions: &BTreeMap<InstanceId, Region>,
        p: &Samples,
    ) {
        let group: Vec<&Region> = run
            .members
            .iter()
            .filter_map(|(id, _)| regions.get(id))
            .collect();
        let Some(&first) = group.first() else {
            return;
        };
        if let (Some(from), Some(cloud)) = (&run.checkpoint_region, &self.metadata)
            && p.checkpoint > 0.0
        {
            let to: BTreeSet<&Region> = group.iter().copied().collect();
            for to in to {
                cloud.transfer(job.name(), from, to, job.spec.checkpoint.size_gb);
            }
        }
        run.checkpoint_region = Some(first.clone());
    }

    /// One report through the protocol, its changes taken into the controller.
    fn send(
        &mut self,
        ctl: &mut Controller,
        s: &Step<'_>,
        report: &Progress,
    ) -> Result<Answer<Verdict>, ControllerError> {
        let store = ctl.store().clone();
        let answer = protocol::report(&store, &self.queue, s.job.name(), &s.fleet, report, s.now)?;
        self.queue.take_into(ctl)?;
        Ok(answer)
    }

    fn said(&mut self, id: &InstanceId, said: String) {
        if let Some(a) = self.answers.as_mut() {
            a.entry(id.clone()).or_default().push(said);
        }
    }
}

/// A report of the job's samples from `id`'s workers of incarnation `k`.
fn progress(p: &Samples, id: &InstanceId, k: u64, observation: Option<Observation>) -> Progress {
    Progress {
        done_samples: p.done,
        checkpoint_samples: p.checkpoint,
        checkpointed: false,
        observation,
        incarnation: Some(k),
        instance: Some(id.to_string()),
        stopped: false,
        failure: None,
        hung: false,
        crashed: false,
    }
}

fn action_name(a: Action) -> &'static str {
    match a {
        Action::Stop => "409 stop",
        Action::Wait => "409 wait",
        Action::Done => "409 done",
        Action::Exit => "409 exit",
    }
}

/// An answer to a report, as [`Workload::answers`] keeps it.
pub fn said_of(answer: &Answer<Verdict>) -> String {
    match answer {
        Answer::Done(v) if v.drain => "report: drain".into(),
        Answer::Done(v) if v.stop => "report: stop".into(),
        Answer::Done(_) => "report: ok".into(),
        Answer::Refused(a, _) => format!("report: {}", action_name(*a)),
    }
}

/// The local batch the simulated workers run `job` at.
fn batch_of(job: &JobRecord) -> u32 {
    job.spec.local_batch.unwrap_or(UNMEASURED_BATCH)
}

/// Each job's running instances with their regions, the accelerator and its count per node.
fn running_members(
    ctl: &Controller,
) -> HashMap<String, (BTreeMap<InstanceId, Region>, String, u32)> {
    let mut members: HashMap<String, (BTreeMap<InstanceId, Region>, String, u32)> = HashMap::new();
    for i in ctl.instances() {
        if i.state != InstanceState::Running {
            continue;
        }
        let e = members.entry(i.job.clone()).or_insert_with(|| {
            (
                BTreeMap::new(),
                i.offer
                    .accelerator()
                    .map(|a| a.name.clone())
                    .unwrap_or_default(),
                i.offer.accelerator_units().max(1),
            )
        });
        e.0.insert(i.id.clone(), i.offer.region.clone());
    }
    members
}
