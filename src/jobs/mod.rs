//! Loading job specs for the controller and the commands that plan or forecast them: parse and
//! validate the TOML, seed a forecaster from the spec's observations and profile, and expose it
//! to the planner.

mod profile;

pub use profile::load_profile;

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tern_cloud::{JobSpec, Observation, SpecError, parse_job_spec};
use tern_plan::{PlanJob, Throughput, ThroughputModel};
use tern_policies::forecast::{Basis, ForecastError, Forecaster, Shape, speed};

/// Why a job spec cannot be loaded or forecast; each names the file (or request) it is about.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("{shown}: {source}")]
    Forecast {
        shown: String,
        #[source]
        source: ForecastError,
    },
    #[error("{dir}: no placements{suffix}.csv or scalability{suffix}.csv{hint}")]
    NoProfile {
        dir: String,
        suffix: String,
        /// What to try instead, or empty.
        hint: &'static str,
    },
    #[error("{shown}: `local_batch` is needed when there are no observations")]
    NoBatch { shown: String },
}

impl JobError {
    fn forecast(shown: &str) -> impl FnOnce(ForecastError) -> JobError + '_ {
        move |source| JobError::Forecast {
            shown: shown.to_string(),
            source,
        }
    }
}

/// A validated job spec with a fitted forecaster.
#[derive(Debug, Clone)]
pub struct LoadedJob {
    pub spec: JobSpec,
    pub forecaster: Forecaster,
    /// Per-accelerator batch the job runs at (from the spec, else the median observed one).
    pub local_batch: f64,
    /// GPUs per node seen in single-node observations, per accelerator.
    node_gpus: Vec<(String, u32)>,
}

impl LoadedJob {
    /// Read and validate `path`; profile paths in the spec are relative to its folder.
    pub fn load(path: &Path, now: DateTime<Utc>) -> Result<LoadedJob, JobError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| JobError::Read {
            path: shown.clone(),
            source,
        })?;
        let spec = parse_job_spec(&text, &shown)?;
        Self::from_spec(spec, path.parent().unwrap_or(Path::new(".")), &shown, now)
    }

    /// Seed a forecaster from a parsed spec. `base` resolves relative profile paths.
    pub fn from_spec(
        spec: JobSpec,
        base: &Path,
        shown: &str,
        now: DateTime<Utc>,
    ) -> Result<LoadedJob, JobError> {
        let mut f = Forecaster::new();
        let mut batches: Vec<u32> = Vec::new();
        for o in &spec.observations {
            f.observe(&o.to_observation(&spec.name, now))
                .map_err(JobError::forecast(shown))?;
            batches.push(o.local_batch);
        }
        let mut node_gpus: Vec<(String, u32)> = spec
            .observations
            .iter()
            .filter(|o| o.nodes == 1)
            .map(|o| (o.accelerator.clone(), o.gpus))
            .collect();
        if let Some(p) = &spec.profile {
            let dir = base.join(&p.path);
            if let Some(n) = p.node_type.as_deref().and_then(speed::node_type) {
                f.set_cross_ratio(&p.accelerator, speed::cross_ratio(n.link_gbps, n.nic_gbps));
                node_gpus.push((p.accelerator.clone(), n.gpus));
            }
            for r in load_profile(&dir, p.node_type.as_deref())? {
                let lb = r.shape.local_batch.round().max(1.0) as u32;
                f.observe(&Observation {
                    job: spec.name.clone(),
                    accelerator: p.accelerator.clone(),
                    gpus: r.shape.gpus,
                    nodes: r.shape.nodes,
                    local_batch: lb,
                    step_seconds: r.step_s,
                    sync_seconds: r.sync_s,
                    at: now,
                })
                .map_err(JobError::forecast(shown))?;
                batches.push(lb);
                if r.shape.nodes == 1 {
                    node_gpus.push((p.accelerator.clone(), r.shape.gpus));
                }
            }
        }
        let local_batch = match spec.local_batch {
            Some(b) => f64::from(b),
            None => {
                batches.sort_unstable();
                match batches.get(batches.len() / 2) {
                    Some(b) => f64::from(*b),
                    None => {
                        return Err(JobError::NoBatch {
                            shown: shown.to_string(),
                        });
                    }
                }
            }
        };
        f.refit().map_err(JobError::forecast(shown))?;
        Ok(LoadedJob {
            spec,
            forecaster: f,
            local_batch,
            node_gpus,
        })
    }

    /// GPUs per node to assume for `accelerator` when no VM size is given: `forced`, else the
    /// largest single node observed, else the usual cloud node for that GPU, else 8.
    pub fn gpus_per_node(&self, accelerator: &str, forced: Option<u32>) -> u32 {
        forced
            .or_else(|| {
                self.node_gpus
                    .iter()
                    .filter(|(a, _)| a == accelerator)
                    .map(|(_, g)| *g)
                    .max()
            })
            .or_else(|| {
                let name = speed::lookup(accelerator)?.name;
                speed::NODE_TYPES
                    .iter()
                    .find(|n| n.accelerator == name)
                    .map(|n| n.gpus)
            })
            .unwrap_or(8)
    }

    /// The job as the planner sees it, `now` being the planning time and `submitted` the time
    /// relative deadlines count from.
    pub fn plan_job(
        &self,
        submitted: DateTime<Utc>,
        now: DateTime<Utc>,
        remaining_samples: f64,
    ) -> PlanJob {
        let spec = &self.spec;
        PlanJob {
            name: spec.name.clone(),
            team: spec.team.clone(),
            remaining_samples,
            deadline_s: spec
                .deadline
                .map(|d| ((d.resolve(submitted) - now).num_milliseconds() as f64 / 1e3).max(0.0)),
            accelerators: spec.accelerators.clone(),
            workers: spec.workers,
            gang: spec.gang,
            checkpoint: spec.checkpoint,
            budget: spec.budget,
            priority: spec.priority,
            model: Arc::new(ForecastModel {
                job: spec.name.clone(),
                forecaster: self.forecaster.clone(),
                local_batch: self.local_batch,
            }),
        }
    }
}

/// The fitted forecaster behind the planner's [`ThroughputModel`] seam. Uses the 90 % upper
/// bound of step time as the pessimistic throughput.
#[derive(Debug)]
pub struct ForecastModel {
    job: String,
    forecaster: Forecaster,
    local_batch: f64,
}

impl ThroughputModel for ForecastModel {
    fn throughput(&self, accelerator: &str, per_node: u32, nodes: u32) -> Option<Throughput> {
        let shape = Shape::new(per_node * nodes, nodes, self.local_batch);
        let p = self
            .forecaster
            .predict(&self.job, accelerator, &shape)
            .ok()?;
        let batch = shape.global_batch();
        Some(Throughput {
            expected: batch / p.step_s,
            pessimistic: batch / p.step_high_s,
            prior: matches!(p.basis, Basis::RelativeSpeed { .. }),
        })
    }
}
