//! Loading job specs for the controller and the commands that plan or forecast them: parse and
//! validate the TOML, seed a forecaster from the spec's observations and profile, and expose it
//! to the planner.

mod profile;

pub use profile::{inline_profile, load_profile, profile_rows};

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tern_cloud::input::{Limit, ReadError, read_text_capped};
use tern_cloud::{JobSpec, MAX_DEADLINE_S, SpecError, parse_job_spec};
use tern_plan::{PlanJob, Throughput, ThroughputModel};
use tern_policies::forecast::{Basis, ForecastError, Forecaster, Hint, Prediction, Shape, speed};

/// Why a job spec cannot be loaded or forecast; each names the file (or request) it is about.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: ReadError,
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
    #[error("{shown}: `{field}`: no region named {name:?} in the catalog{closest}")]
    UnknownRegion {
        shown: String,
        field: String,
        name: String,
        /// " (closest known: …)" or empty.
        closest: String,
    },
    #[error("{shown}: `local_batch` is needed when there are no observations")]
    NoBatch { shown: String },
    #[error(
        "{shown}: `profile.path` names a file on the controller, which it does not read; send \
         the CSV text in `profile.placements`/`profile.scalability` (`tern submit` does)"
    )]
    ProfilePath { shown: String },
    #[error(
        "{shown}: `accelerators`: unknown accelerator {name:?} (neither in the speed table nor measured in the spec); known: {known}"
    )]
    UnknownAccelerator {
        shown: String,
        name: String,
        known: String,
    },
    #[error("{what}: {why}")]
    Rewrite { what: &'static str, why: String },
    #[error("{shown}: `deadline`: {at} is {why}")]
    Deadline {
        shown: String,
        at: DateTime<Utc>,
        why: &'static str,
    },
}

/// Checks what only a new submission must satisfy, against the submission time: every
/// accelerator is one tern can forecast (in the speed table, or measured in the spec itself),
/// and the deadline is in the future and at most [`MAX_DEADLINE_S`] away. Not re-checked when
/// a stored job is reloaded.
/// Region names in `regions` (those without wildcards) and `data.region` must be regions the
/// catalog knows; a typo would otherwise rule every offer out, or price egress for data that
/// is not there. The error suggests the closest names, as `tern offers` does.
pub fn check_regions<'a>(
    spec: &JobSpec,
    known: impl IntoIterator<Item = &'a str> + Clone,
    shown: &str,
) -> Result<(), JobError> {
    let c = &spec.constraints;
    let named = c
        .regions
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("regions[{i}]"), r))
        .chain(
            c.data
                .iter()
                .map(|d| ("data.region".to_string(), &d.region)),
        )
        .chain(c.any_of.iter().enumerate().flat_map(|(a, alt)| {
            alt.regions
                .iter()
                .enumerate()
                .map(move |(i, r)| (format!("any_of[{a}].regions[{i}]"), r))
        }))
        .filter(|(_, r)| !r.contains(['*', '?']));
    for (field, name) in named {
        if !known
            .clone()
            .into_iter()
            .any(|k| k.eq_ignore_ascii_case(name))
        {
            let close = tern_pricing::suggest(name, known.clone(), 3);
            return Err(JobError::UnknownRegion {
                shown: shown.to_string(),
                field,
                name: name.clone(),
                closest: if close.is_empty() {
                    String::new()
                } else {
                    format!(" (closest known: {})", close.join(", "))
                },
            });
        }
    }
    Ok(())
}

pub fn check_new(spec: &JobSpec, now: DateTime<Utc>, shown: &str) -> Result<(), JobError> {
    let measured = |a: &str| {
        spec.observations.iter().any(|o| o.accelerator == a)
            || spec.profile.as_ref().is_some_and(|p| p.accelerator == a)
    };
    if let Some(a) = spec
        .accelerators
        .iter()
        .find(|a| speed::lookup(a).is_none() && !measured(a))
    {
        let known: Vec<&str> = speed::TABLE.iter().map(|h| h.name).collect();
        return Err(JobError::UnknownAccelerator {
            shown: shown.to_string(),
            name: a.clone(),
            known: known.join(", "),
        });
    }
    if let Some(d) = spec.deadline {
        let at = d.resolve(now);
        let horizon = i64::try_from(MAX_DEADLINE_S).unwrap_or(i64::MAX);
        let why = if at <= now {
            "in the past"
        } else if (at - now).num_seconds() > horizon {
            "more than 10 years away"
        } else {
            return Ok(());
        };
        return Err(JobError::Deadline {
            shown: shown.to_string(),
            at,
            why,
        });
    }
    Ok(())
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
    /// Per-accelerator batch the job runs at (from the spec, else the median observed one);
    /// `None` for a job nobody has measured that names none (its probe reports it).
    pub local_batch: Option<f64>,
    /// GPUs per node seen in single-node observations, per accelerator.
    node_gpus: Vec<(String, u32)>,
    /// The forecaster as the planner's model, built once: a pass asks every job's speed.
    model: Arc<ForecastModel>,
}

impl LoadedJob {
    /// Read and validate `path`; profile paths in the spec are relative to its folder.
    pub fn load(path: &Path, now: DateTime<Utc>) -> Result<LoadedJob, JobError> {
        let shown = path.display().to_string();
        let text = read_spec(path)?;
        let spec = parse_job_spec(&text, &shown)?;
        Self::from_spec(spec, Some(spec_folder(path)), &shown, now)
    }

    /// Seed a forecaster from a parsed spec. `base` resolves relative profile paths; `None`
    /// refuses them (the controller reads no file a spec names).
    pub fn from_spec(
        spec: JobSpec,
        base: Option<&Path>,
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
        // A step on one GPU says nothing about how many a node holds: only multi-GPU steps
        // on one node count (else an accelerator seen on one GPU ran 16 workers on 16 nodes).
        let mut node_gpus: Vec<(String, u32)> = spec
            .observations
            .iter()
            .filter(|o| o.nodes == 1 && o.gpus > 1)
            .map(|o| (o.accelerator.clone(), o.gpus))
            .collect();
        if let Some(p) = &spec.profile {
            if let Some(n) = p.node_type.as_deref().and_then(speed::node_type) {
                f.set_cross_ratio(&p.accelerator, speed::cross_ratio(n.link_gbps, n.nic_gbps));
                node_gpus.push((p.accelerator.clone(), n.gpus));
            }
            for r in profile_rows(p, base, shown)? {
                let lb = r.shape.local_batch.round().max(1.0) as u32;
                // The row's own placement, fullest node included (an `Observation` is even).
                let shape = Shape {
                    local_batch: f64::from(lb),
                    ..r.shape
                };
                f.observe_at(&spec.name, &p.accelerator, shape, r.step_s)
                    .map_err(JobError::forecast(shown))?;
                batches.push(lb);
                if r.shape.nodes == 1 && r.shape.gpus > 1 {
                    node_gpus.push((p.accelerator.clone(), r.shape.gpus));
                }
            }
        }
        let local_batch = spec.local_batch.map(f64::from).or_else(|| {
            batches.sort_unstable();
            batches.get(batches.len() / 2).map(|b| f64::from(*b))
        });
        if let Some(h) = &spec.hint {
            f.set_hint(
                &spec.name,
                Hint {
                    flops_per_sample: h.flops_per_sample,
                    params: h.params,
                },
            );
        }
        f.refit().map_err(JobError::forecast(shown))?;
        let model = Arc::new(ForecastModel {
            job: spec.name.clone(),
            forecaster: f.clone(),
            local_batch: local_batch.unwrap_or(0.0),
        });
        Ok(LoadedJob {
            spec,
            forecaster: f,
            local_batch,
            node_gpus,
            model,
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

    /// The batch, or the error a command that needs one reports.
    pub fn batch(&self, shown: &str) -> Result<f64, JobError> {
        self.local_batch.ok_or_else(|| JobError::NoBatch {
            shown: shown.to_string(),
        })
    }

    /// Whether a step of the job was measured anywhere (its spec's observations or profile,
    /// or its agents' reports): then every accelerator has a forecast from it, and the job
    /// is planned without a probe.
    pub fn measured(&self) -> bool {
        !self.spec.observations.is_empty() || self.spec.profile.is_some()
    }

    /// Steps reported on `accelerator` (the spec's and the agents').
    pub fn observations_on(&self, accelerator: &str) -> usize {
        let profiled = self
            .spec
            .profile
            .as_ref()
            .is_some_and(|p| p.accelerator == accelerator);
        self.spec
            .observations
            .iter()
            .filter(|o| o.accelerator == accelerator)
            .count()
            + usize::from(profiled)
    }

    /// What the forecast of `accelerator` at `gpus` on `nodes` stands on, with the prediction
    /// when there is one.
    pub fn forecast_at(
        &self,
        accelerator: &str,
        gpus: u32,
        nodes: u32,
    ) -> (ForecastBasis, Option<Prediction>) {
        let Some(batch) = self.local_batch else {
            return (ForecastBasis::None, None);
        };
        let shape = Shape::new(gpus.max(1), nodes.clamp(1, gpus.max(1)), batch);
        match self
            .forecaster
            .predict(&self.spec.name, accelerator, &shape)
        {
            Ok(p) => (ForecastBasis::of(&p.basis), Some(p)),
            Err(_) => (ForecastBasis::None, None),
        }
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
            model: self.model(),
            constraints: spec.constraints.clone(),
            checkpoint_region: None,
        }
    }

    /// The job's throughput model (its fitted forecaster at its local batch).
    pub fn model(&self) -> Arc<dyn ThroughputModel> {
        self.model.clone()
    }
}

/// The text of a job spec file, capped at [`Limit::SPEC`].
pub fn read_spec(path: &Path) -> Result<String, JobError> {
    read_text_capped(path, Limit::SPEC).map_err(|source| JobError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// The spec as the controller receives it: a `[profile] path` is read here, relative to
/// `base` (the spec's folder), and sent as CSV text, since the controller reads no file a
/// spec names. Used by `tern submit` and the Terraform provider.
pub fn wire_spec(text: &str, spec: &JobSpec, base: &Path) -> Result<String, JobError> {
    let Some(p) = spec.profile.as_ref().filter(|p| p.path.is_some()) else {
        return Ok(text.to_owned());
    };
    let inline = inline_profile(p, base)?;
    let mut root: toml::Table = toml::from_str(text).map_err(|e| JobError::Rewrite {
        what: "re-reading the spec",
        why: e.to_string(),
    })?;
    let mut profile = toml::Table::new();
    let fields = [
        ("accelerator", Some(inline.accelerator)),
        ("node_type", inline.node_type),
        ("placements", inline.placements),
        ("scalability", inline.scalability),
    ];
    for (key, value) in fields {
        if let Some(v) = value {
            profile.insert(key.to_owned(), toml::Value::String(v));
        }
    }
    root.insert("profile".to_owned(), toml::Value::Table(profile));
    toml::to_string(&root).map_err(|e| JobError::Rewrite {
        what: "writing the spec",
        why: e.to_string(),
    })
}

/// The folder a spec's relative paths resolve against: the spec file's own.
pub fn spec_folder(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
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
        if self.local_batch <= 0.0 {
            return None;
        }
        let shape = Shape::new(per_node * nodes, nodes, self.local_batch);
        let p = self
            .forecaster
            .predict(&self.job, accelerator, &shape)
            .ok()?;
        let batch = shape.global_batch();
        Some(Throughput {
            expected: batch / p.step_s,
            pessimistic: batch / p.step_high_s,
            prior: matches!(p.basis, Basis::RelativeSpeed { .. } | Basis::Hint),
        })
    }
}

/// What a forecast stands on, as `tern status` shows it: the job's own steps on that
/// accelerator (`measured`), its steps on another one scaled by the single-GPU speed ratio
/// (`bootstrap`), another accelerator's model scaled by datasheet speed (`prior`), the spec's
/// `[hint]` alone (`hint`), or nothing (`none`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForecastBasis {
    Measured,
    Bootstrap,
    Prior,
    Hint,
    None,
}

impl ForecastBasis {
    pub fn of(b: &Basis) -> ForecastBasis {
        match b {
            Basis::Fitted => ForecastBasis::Measured,
            Basis::Bootstrap { .. } => ForecastBasis::Bootstrap,
            Basis::RelativeSpeed { .. } => ForecastBasis::Prior,
            Basis::Hint => ForecastBasis::Hint,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ForecastBasis::Measured => "measured",
            ForecastBasis::Bootstrap => "bootstrap",
            ForecastBasis::Prior => "prior",
            ForecastBasis::Hint => "hint",
            ForecastBasis::None => "none",
        }
    }
}

impl std::fmt::Display for ForecastBasis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = "name = \"j\"\nteam = \"t\"\naccelerators = [\"T4\"]\nworkers = 1\n\
                        [work]\nsamples = 1000\n[profile]\npath = \"imagenet\"\naccelerator = \"T4\"\n";

    fn profiles() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/profiles/pollux-t4")
    }

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-23T00:00:00Z")
            .expect("time")
            .with_timezone(&Utc)
    }

    #[test]
    fn an_endless_spec_file_is_refused_at_the_spec_limit() {
        let e = LoadedJob::load(Path::new("/dev/zero"), now()).expect_err("endless");
        assert!(
            e.to_string()
                .starts_with("reading /dev/zero: larger than 4 MiB, the limit for a job spec"),
            "{e}"
        );
    }

    #[test]
    fn the_controller_reads_no_profile_path_but_takes_inline_text() {
        let spec = parse_job_spec(SPEC, "j.toml").expect("spec");
        let e = LoadedJob::from_spec(spec.clone(), None, "j", now()).expect_err("path");
        assert!(matches!(e, JobError::ProfilePath { .. }), "{e}");
        let p = spec.profile.as_ref().expect("profile");
        let inline = inline_profile(p, &profiles()).expect("inline");
        assert!(inline.path.is_none() && inline.placements.is_some());
        let from_disk =
            LoadedJob::from_spec(spec.clone(), Some(&profiles()), "j", now()).expect("from disk");
        let mut sent = spec;
        sent.profile = Some(inline);
        let from_text = LoadedJob::from_spec(sent, None, "j", now()).expect("inline");
        assert_eq!(from_disk.local_batch, from_text.local_batch);
        let shape = Shape::new(4, 2, from_disk.local_batch.expect("batch"));
        let step = |j: &LoadedJob| {
            j.forecaster
                .predict("j", "T4", &shape)
                .expect("predict")
                .step_s
        };
        assert_eq!(step(&from_disk), step(&from_text));
    }

    #[test]
    fn new_jobs_need_known_accelerators_and_a_deadline_ahead() {
        let ok = SPEC.replace("[profile]\npath = \"imagenet\"\naccelerator = \"T4\"\n", "");
        let check = |text: &str| {
            let spec = parse_job_spec(text, "j.toml").expect("spec");
            check_new(&spec, now(), "j.toml").map_err(|e| e.to_string())
        };
        assert_eq!(check(&ok), Ok(()));
        let e = check(&ok.replace("[\"T4\"]", "[\"T4\", \"Z9000\"]")).expect_err("unknown");
        // One the spec itself measured can be forecast.
        let measured = ok.replace("[\"T4\"]", "[\"Z9000\"]")
            + "[[observation]]\naccelerator = \"Z9000\"\ngpus = 1\nlocal_batch = 8\nstep_seconds = 0.5\n";
        assert_eq!(check(&measured), Ok(()));
        assert!(
            e.contains("unknown accelerator \"Z9000\"") && e.contains("V100"),
            "{e}"
        );
        for (deadline, why) in [
            ("2026-11-22T00:00:00Z", "in the past"),
            ("2046-11-22T00:00:00Z", "more than 10 years away"),
        ] {
            let e = check(&format!("deadline = \"{deadline}\"\n{ok}")).expect_err(deadline);
            assert!(e.contains("`deadline`") && e.contains(why), "{e}");
        }
    }

    /// A one-GPU step shows one GPU in use, not the node's size: the usual node decides until
    /// a multi-GPU step on one node is seen.
    #[test]
    fn node_size_comes_from_multi_gpu_steps_only() {
        let spec = SPEC
            .replace("[profile]\npath = \"imagenet\"\naccelerator = \"T4\"\n", "")
            .replace("[\"T4\"]", "[\"H100\"]");
        let obs = |gpus: u32| {
            format!(
                "[[observation]]\naccelerator = \"H100\"\ngpus = {gpus}\nlocal_batch = 8\nstep_seconds = 0.5\n"
            )
        };
        let load = |text: String| {
            let spec = parse_job_spec(&text, "j.toml").expect("spec");
            LoadedJob::from_spec(spec, None, "j", now()).expect("job")
        };
        let one = load(format!("{spec}{}", obs(1)));
        assert_eq!(one.gpus_per_node("H100", None), 8, "p5.48xlarge holds 8");
        let four = load(format!("{spec}{}{}", obs(1), obs(4)));
        assert_eq!(four.gpus_per_node("H100", None), 4);
        assert_eq!(four.gpus_per_node("H100", Some(2)), 2);
    }

    /// A profile row keeps its placement: on nodes whose GPUs share one host bridge (as Sia's
    /// Azure nodes) `17` steps slower than `44`. Averaged as "8 on 2 nodes", both rows would
    /// misplace the even placement the controller runs.
    #[test]
    fn a_profile_row_keeps_its_placement() {
        // One step = compute + the fullest node's all-reduce (0.1 s per GPU beyond the first).
        let step = |busiest: u32, m: u32| 0.1 + 0.02 * f64::from(m) + 0.1 * f64::from(busiest - 1);
        let mut csv = String::from("placement,local_bsz,step_time\n");
        for m in [4, 8, 16, 32] {
            for k in 1..=8 {
                csv += &format!("{k},{m},{}\n", step(k, m));
            }
            for (a, b) in [(1, 7), (2, 6), (3, 5), (4, 4), (1, 3), (2, 2)] {
                csv += &format!("{a}{b},{m},{}\n", step(b, m) + 0.01);
            }
        }
        let spec = SPEC
            .replace("[\"T4\"]", "[\"V100\"]")
            .replace(
                "path = \"imagenet\"",
                &format!("placements = \"\"\"\n{csv}\"\"\""),
            )
            .replace("accelerator = \"T4\"", "accelerator = \"V100\"");
        let spec = parse_job_spec(&spec, "j.toml").expect("spec");
        let job = LoadedJob::from_spec(spec, None, "j", now()).expect("job");
        for busiest in [4, 7] {
            let shape = Shape::placed(8, 2, busiest, 8.0);
            let predicted = job
                .forecaster
                .predict("j", "V100", &shape)
                .expect("predict");
            let truth = step(busiest, 8) + 0.01;
            assert!(
                (predicted.step_s / truth - 1.0).abs() < 0.05,
                "{shape:?}: {} vs {truth}",
                predicted.step_s
            );
        }
    }
}
