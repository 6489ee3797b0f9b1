use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{Constraints, Offer};

/// How much training a job has to do.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Work {
    /// Total samples to process.
    Samples(u64),
    /// `steps` optimiser steps at a total (global) batch of `batch` samples.
    Steps { steps: u64, batch: u64 },
}

impl Work {
    pub fn samples(&self) -> u64 {
        match *self {
            Work::Samples(n) => n,
            Work::Steps { steps, batch } => steps.saturating_mul(batch),
        }
    }
}

/// Allowed number of accelerators (workers) for a job: elastic when `min < max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRange {
    pub min: u32,
    pub max: u32,
}

impl WorkerRange {
    pub fn is_elastic(&self) -> bool {
        self.min < self.max
    }
    pub fn contains(&self, n: u32) -> bool {
        (self.min..=self.max).contains(&n)
    }
}

/// How the job checkpoints. Drives migration and preemption cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CheckpointSpec {
    pub interval_s: f64,
    pub size_gb: f64,
    pub save_s: f64,
    pub restore_s: f64,
}

impl Default for CheckpointSpec {
    fn default() -> Self {
        Self {
            interval_s: 1800.0,
            size_gb: 10.0,
            save_s: 60.0,
            restore_s: 120.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Budget {
    pub total_usd: Option<f64>,
    pub per_hour_usd: Option<f64>,
}

/// `[hint]`: the model's training cost per sample, as the user knows it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ModelHint {
    /// Training FLOPs per sample (forward + backward, ≈ 3 × forward; ≈ 6 × params × tokens for
    /// a transformer).
    pub flops_per_sample: f64,
    /// Parameter count, for the size of the gradient all-reduce.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<f64>,
}

/// `[probe]`: how long and how dear the measuring run of a job nobody has measured may be.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ProbeSpec {
    /// Longest probe, seconds of running instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seconds: Option<f64>,
    /// Most the probe may cost, dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_usd: Option<f64>,
    /// `false` plans on the hint (or waits for observations) instead of probing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

impl ProbeSpec {
    pub fn is_default(&self) -> bool {
        *self == ProbeSpec::default()
    }
}

/// When a job must finish: an absolute time, or a duration after submission (resolved against
/// the submission time the controller passes in, so parsing never reads the clock).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Deadline {
    At(DateTime<Utc>),
    /// Seconds after submission.
    AfterSeconds(u64),
}

impl Deadline {
    pub fn resolve(&self, submitted: DateTime<Utc>) -> DateTime<Utc> {
        match *self {
            Deadline::At(t) => t,
            Deadline::AfterSeconds(s) => {
                let s = i64::try_from(s).unwrap_or(i64::MAX);
                submitted
                    .checked_add_signed(
                        chrono::TimeDelta::try_seconds(s).unwrap_or(chrono::TimeDelta::MAX),
                    )
                    .unwrap_or(DateTime::<Utc>::MAX_UTC)
            }
        }
    }
}

/// A step time measured before submission (inline in the job spec) to seed the forecaster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedStep {
    pub accelerator: String,
    pub gpus: u32,
    pub nodes: u32,
    pub local_batch: u32,
    pub step_seconds: f64,
    pub sync_seconds: Option<f64>,
}

impl ObservedStep {
    pub fn to_observation(&self, job: &str, at: DateTime<Utc>) -> Observation {
        Observation {
            job: job.to_string(),
            accelerator: self.accelerator.clone(),
            gpus: self.gpus,
            nodes: self.nodes,
            local_batch: self.local_batch,
            step_seconds: self.step_seconds,
            sync_seconds: self.sync_seconds,
            at,
        }
    }
}

/// A throughput profile (see data/profiles/README.md) that seeds the forecaster: a folder on
/// the machine that reads the spec, or the CSV text itself. Over the API only the inline form is
/// accepted, so the controller never opens a file a submitter names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileRef {
    /// As written in the spec: relative paths are relative to the spec file's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Inline `placements[-<node_type>].csv` text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placements: Option<String>,
    /// Inline `scalability[-<node_type>].csv` text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalability: Option<String>,
    /// Accelerator the profile was measured on.
    pub accelerator: String,
    /// Node-type suffix of Sia-layout files (`placements-<node_type>.csv`), if any.
    pub node_type: Option<String>,
}

/// What a user submits (already validated; see the job-spec parser for the TOML form).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub name: String,
    pub team: String,
    pub work: Work,
    pub deadline: Option<Deadline>,
    /// Accelerator names the job may run on (`A100`, `H100`, `tpu-v5p-8`).
    pub accelerators: Vec<String>,
    pub workers: WorkerRange,
    /// All workers must share one zone (data-parallel jobs with heavy all-reduce).
    pub gang: bool,
    pub checkpoint: CheckpointSpec,
    pub budget: Budget,
    pub priority: i32,
    /// Per-accelerator batch size the training script uses.
    pub local_batch: Option<u32>,
    /// Measurements that seed the forecaster before the job has run under tern.
    pub observations: Vec<ObservedStep>,
    pub profile: Option<ProfileRef>,
    /// What the user knows of the model before any step is measured (`[hint]`): seeds a wide
    /// prior so a job nobody has measured can still be planned for its deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<ModelHint>,
    /// Bounds of the short measuring run a job nobody has measured starts with (`[probe]`);
    /// unset fields take the controller's defaults.
    #[serde(default, skip_serializing_if = "ProbeSpec::is_default")]
    pub probe: ProbeSpec,
    /// Where it may run (clouds, regions, zones, exclusions, data location, price cap,
    /// capacity type); empty allows everything.
    #[serde(default, skip_serializing_if = "Constraints::is_empty")]
    pub constraints: Constraints,
    /// What its workers run (`[run]`); `None`: the agents bring their own command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<crate::run::RunSpec>,
    /// Boot disk of each VM, in GB (`disk_gb`); `None`: the launch or instance template's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_gb: Option<u32>,
}

/// One measured training step, reported by the worker agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub job: String,
    pub accelerator: String,
    /// Total accelerators (replicas) in the step.
    pub gpus: u32,
    pub nodes: u32,
    pub local_batch: u32,
    /// Seconds per iteration, compute and gradient sync together.
    pub step_seconds: f64,
    /// The all-reduce part, when the training script measured it.
    pub sync_seconds: Option<f64>,
    pub at: DateTime<Utc>,
}

/// A step slower than a day is a unit mistake (ms for s) or garbage, not a measurement.
pub const MAX_STEP_SECONDS: f64 = 86_400.0;

impl Observation {
    /// What is wrong with this measurement, if anything: the same rules as a spec's
    /// `[[observation]]`. Checked before an observation is fitted or stored, so a bad one is
    /// refused whole and cannot poison the job's later reports.
    pub fn check(&self) -> Result<(), String> {
        let fail = |field: &str, want: &str, got: String| {
            Err(format!("observation.{field}: expected {want}, got {got}"))
        };
        if self.accelerator.trim().is_empty() {
            return fail("accelerator", "an accelerator name", "\"\"".into());
        }
        if self.gpus == 0 {
            return fail("gpus", "an integer >= 1", "0".into());
        }
        if self.nodes == 0 || self.nodes > self.gpus {
            let want = format!("an integer from 1 to gpus = {}", self.gpus);
            return fail("nodes", &want, self.nodes.to_string());
        }
        if self.local_batch == 0 {
            return fail("local_batch", "an integer >= 1", "0".into());
        }
        if !(self.step_seconds > 0.0 && self.step_seconds <= MAX_STEP_SECONDS) {
            let want = format!("seconds > 0 and <= {MAX_STEP_SECONDS}");
            return fail("step_seconds", &want, self.step_seconds.to_string());
        }
        if let Some(sync) = self.sync_seconds
            && !(sync >= 0.0 && sync <= self.step_seconds)
        {
            let want = format!("seconds from 0 to step_seconds = {}", self.step_seconds);
            return fail("sync_seconds", &want, sync.to_string());
        }
        Ok(())
    }
}

/// A throughput and runtime estimate with its uncertainty.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    pub throughput_samples_per_s: f64,
    /// Expected seconds to finish the remaining work.
    pub runtime_s: f64,
    /// Optimistic and pessimistic runtimes; planners use `high_s` for deadline safety.
    pub low_s: f64,
    pub high_s: f64,
    /// True when no observation of this job backs the estimate (a relative-speed prior).
    pub prior_only: bool,
}

/// `count` VMs of `offer` for `job`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    pub job: String,
    pub offer: Offer,
    pub count: u32,
}

/// A planner's answer: what to run where, what it should cost, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub allocations: Vec<Allocation>,
    pub expected_cost: f64,
    pub expected_finish: Option<DateTime<Utc>>,
    pub reasons: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observation() -> Observation {
        Observation {
            job: "j".into(),
            accelerator: "V100".into(),
            gpus: 8,
            nodes: 2,
            local_batch: 32,
            step_seconds: 0.4,
            sync_seconds: Some(0.1),
            at: DateTime::<Utc>::MIN_UTC,
        }
    }

    #[test]
    fn a_bad_observation_names_its_field() {
        assert_eq!(observation().check(), Ok(()));
        type Spoil = fn(&mut Observation);
        let cases: Vec<(&str, Spoil)> = vec![
            ("observation.gpus", |o| o.gpus = 0),
            ("observation.nodes", |o| o.nodes = 0),
            ("observation.nodes", |o| o.nodes = 9),
            ("observation.local_batch", |o| o.local_batch = 0),
            ("observation.accelerator", |o| o.accelerator = " ".into()),
            ("observation.step_seconds", |o| o.step_seconds = 0.0),
            ("observation.step_seconds", |o| o.step_seconds = -1.0),
            ("observation.step_seconds", |o| o.step_seconds = f64::NAN),
            ("observation.step_seconds", |o| {
                o.step_seconds = f64::INFINITY
            }),
            ("observation.step_seconds", |o| o.step_seconds = 1e9),
            ("observation.sync_seconds", |o| o.sync_seconds = Some(-0.1)),
            ("observation.sync_seconds", |o| o.sync_seconds = Some(1.0)),
            ("observation.sync_seconds", |o| {
                o.sync_seconds = Some(f64::NAN)
            }),
        ];
        for (field, spoil) in cases {
            let mut o = observation();
            spoil(&mut o);
            let err = o.check().expect_err(field);
            assert!(err.starts_with(field), "{field}: {err}");
            assert!(err.contains("expected"), "{err}");
        }
    }

    #[test]
    fn work_in_samples() {
        assert_eq!(Work::Samples(10).samples(), 10);
        assert_eq!(
            Work::Steps {
                steps: 1000,
                batch: 256
            }
            .samples(),
            256_000
        );
        let r = WorkerRange { min: 2, max: 8 };
        assert!(r.is_elastic() && r.contains(2) && r.contains(8) && !r.contains(9));
    }
}
