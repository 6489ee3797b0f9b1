//! SkyPilot task files (YAML) → tern job specs (TOML), read as SkyPilot reads them.
//!
//! A task says what runs (`run`, `setup`, `envs`, `secrets`, `workdir`, `num_nodes`) and on
//! what (`resources`); a tern spec also says how much work there is, by when, and for which
//! team, so those come from the caller ([`TaskOptions`]). The conversion is text to text: the
//! TOML it prints is what `tern submit` sends, read by the same parser as a hand-written spec.
//!
//! Every field is read, warned about (accepted, not applied: the warning says why) or refused
//! (tern cannot do it), by its path and line: nothing is dropped silently.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::job::Work;
use crate::name::{NAME_RULE, check_name};
use crate::run::check_env_name;
use crate::spec::{Location, SpecError};
use crate::{Amount, CapacityRule, Offer};

mod resources;
mod spec;
mod yaml;

pub use spec::candidates;
use yaml::{Node, Yaml};

/// What a tern spec needs that a SkyPilot task does not say.
#[derive(Debug, Clone)]
pub struct TaskOptions<'a> {
    pub team: String,
    /// Overrides the task's `name`.
    pub name: Option<String>,
    /// As a spec writes it (`"3d 4h"`, RFC 3339).
    pub deadline: Option<String>,
    pub work: Work,
    /// Where relative `workdir`s start (SkyPilot: the directory `sky launch` runs in).
    pub cwd: std::path::PathBuf,
    /// For accelerator names' spelling and the accelerators of an `instance_type` given
    /// alone; may be empty.
    pub catalog: &'a [Offer],
}

/// A task read: the equivalent spec, and what of the task it does not apply.
#[derive(Debug, Clone, Serialize)]
pub struct Conversion {
    /// The tern job spec, TOML.
    pub spec: String,
    pub warnings: Vec<Warning>,
}

/// A field accepted but not (fully) applied, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Warning {
    #[serde(flatten)]
    pub at: Location,
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: `{}`: {}", self.at, self.field, self.message)
    }
}

/// One way a task may run, as SkyPilot's candidate `Resources` after expanding `any_of`,
/// `ordered` and accelerator sets. `None`: any.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Candidate {
    pub cloud: Option<String>,
    pub region: Option<String>,
    pub zone: Option<String>,
    pub accelerator: Option<String>,
    pub count: Option<u32>,
    pub use_spot: bool,
    pub instance_type: Option<String>,
    pub cpus: Option<Amount>,
    /// GiB.
    pub memory: Option<Amount>,
    #[serde(skip)]
    pub max_price: Option<f64>,
}

/// `job_recovery.max_restarts_on_errors`, the same for every candidate.
#[derive(Debug, Clone, Copy)]
struct Recovery {
    max_restarts: u32,
}

/// The task-level fields and what tern does with them.
const TASK_FIELDS: &str = "name, num_nodes, envs, secrets, setup, run, workdir, resources";

fn refused_task_field(key: &str) -> Option<&'static str> {
    Some(match key {
        "file_mounts" | "file_mounts_mapping" => {
            "tern copies no files to workers: fetch data in `setup` (e.g. `aws s3 sync`) or bake \
             it into the image"
        }
        "service" => "SkyServe services are not supported: tern runs training jobs",
        "pool" => "worker pools are not supported: tern launches capacity per job",
        "volumes" | "volume_mounts" => {
            "tern attaches no volumes: read data from object storage in `setup`"
        }
        "config" => "per-task SkyPilot config overrides are not supported",
        "managed_secrets" => "managed secrets are not supported: give values in `secrets`",
        "event_callback" => "event callbacks are not supported: read `tern events` instead",
        "inputs" | "outputs" => "SkyPilot's experimental data estimates are not supported",
        "api_server_access" | "_metadata" | "_user_specified_yaml" => {
            "SkyPilot API server settings are not supported"
        }
        _ => return None,
    })
}

/// Reads `text` (the file at `path`, for messages) as a SkyPilot task.
pub fn convert_task(
    text: &str,
    path: &str,
    opts: &TaskOptions<'_>,
) -> Result<Conversion, SpecError> {
    let mut r = Reader {
        file: path,
        catalog: opts.catalog,
        warnings: Vec::new(),
        recovery: None,
        disk_gb: None,
    };
    let root = yaml::load(text)
        .map_err(|(line, msg)| SpecError::Syntax {
            at: r.at(line),
            msg,
        })?
        .ok_or_else(|| SpecError::Missing {
            at: r.at(1),
            field: "run".into(),
            expected: "a SkyPilot task: at least `resources` and `run`".into(),
        })?;
    let task = r.task(&root, opts)?;
    let candidates = r.resources(root.get("resources"))?;
    let spec = spec::render(
        &task,
        &candidates,
        r.recovery.map(|x| x.max_restarts),
        r.disk_gb,
        opts,
        path,
    )?;
    // The TOML is read back by the spec parser, so what is printed is what would be submitted.
    crate::parse_job_spec(&spec, &format!("{path} (converted)"))?;
    Ok(Conversion {
        spec,
        warnings: r.warnings,
    })
}

/// The task-level fields, read.
#[derive(Debug, Default)]
struct Task {
    name: String,
    num_nodes: u32,
    env: BTreeMap<String, String>,
    setup: Option<String>,
    run: String,
    workdir: Option<String>,
}

/// Reads one task file, collecting warnings.
struct Reader<'a> {
    file: &'a str,
    catalog: &'a [Offer],
    warnings: Vec<Warning>,
    recovery: Option<Recovery>,
    /// `disk_size`, the largest any candidate asks for.
    disk_gb: Option<u32>,
}

impl Reader<'_> {
    fn task(&mut self, root: &Node, opts: &TaskOptions<'_>) -> Result<Task, SpecError> {
        let mut t = Task {
            num_nodes: 1,
            ..Task::default()
        };
        let mut name = None;
        for (k, v) in self.map(root, "task")? {
            match k.as_str() {
                "name" => name = Some((self.string(v, k)?, v)),
                "num_nodes" => t.num_nodes = self.nodes(v)?,
                "envs" | "secrets" => self.env(v, k, &mut t.env)?,
                "setup" => t.setup = Some(self.string(v, k)?).filter(|s| !s.trim().is_empty()),
                "run" => t.run = self.string(v, k)?,
                "workdir" => t.workdir = Some(self.workdir(v, &opts.cwd)?),
                "resources" => {}
                other => match refused_task_field(other) {
                    Some(why) => return Err(self.unsupported(v, other, why)),
                    None => {
                        return Err(SpecError::Unknown {
                            at: self.at(v.line),
                            field: other.to_string(),
                            allowed: TASK_FIELDS.into(),
                        });
                    }
                },
            }
        }
        t.name = match (&opts.name, name) {
            (Some(n), _) => n.clone(),
            (None, Some((n, v))) => {
                check_name(&n).map_err(|found| self.invalid(v, "name", NAME_RULE, &found))?;
                n
            }
            // As a file called `train.yaml` reads: job `train`.
            (None, None) => match std::path::Path::new(self.file)
                .file_stem()
                .and_then(|s| s.to_str())
                .filter(|s| check_name(s).is_ok())
            {
                Some(stem) => stem.to_string(),
                None => {
                    return Err(SpecError::Missing {
                        at: self.at(1),
                        field: "name".into(),
                        expected: format!(
                            "a job name ({NAME_RULE}): `name:` in the task, or --name"
                        ),
                    });
                }
            },
        };
        if t.run.trim().is_empty() {
            let line = root.get("run").map_or(1, |n| n.line);
            return Err(SpecError::Missing {
                at: self.at(line),
                field: "run".into(),
                expected: "the commands each node runs (tern starts nothing without them)".into(),
            });
        }
        Ok(t)
    }

    fn nodes(&mut self, v: &Node) -> Result<u32, SpecError> {
        match v.value {
            Yaml::Int(n) if (1..=1024).contains(&n) => Ok(n as u32),
            _ => Err(self.invalid(v, "num_nodes", "an integer from 1 to 1024", v.kind())),
        }
    }

    /// `envs` and `secrets` (dict form): names checked, values kept and never echoed.
    fn env(
        &mut self,
        v: &Node,
        key: &str,
        out: &mut BTreeMap<String, String>,
    ) -> Result<(), SpecError> {
        if v.value == Yaml::Null {
            return Ok(());
        }
        if key == "secrets" && matches!(v.value, Yaml::Seq(_)) {
            return Err(self.unsupported(
                v,
                key,
                "secrets by name (the list form) are not supported: give each a value",
            ));
        }
        for (name, val) in self.map(v, key)? {
            let field = format!("{key}.{name}");
            check_env_name(name).map_err(|found| {
                self.invalid(
                    val,
                    &field,
                    "a variable name: a letter or `_`, then letters, digits or `_`",
                    &found,
                )
            })?;
            let text = match &val.value {
                Yaml::Str(s) => s.clone(),
                Yaml::Int(i) => i.to_string(),
                Yaml::Float(x) => x.to_string(),
                // As SkyPilot's str() writes them.
                Yaml::Bool(b) => if *b { "True" } else { "False" }.to_string(),
                Yaml::Null => {
                    return Err(SpecError::Missing {
                        at: self.at(val.line),
                        field,
                        expected: "a value (SkyPilot takes an empty one from --env/--secret at \
                                   launch; tern needs it in the file)"
                            .into(),
                    });
                }
                _ => return Err(self.invalid(val, &field, "a string", val.kind())),
            };
            if text.contains('\0') {
                return Err(self.invalid(
                    val,
                    &field,
                    "a string without NUL characters",
                    "a NUL character",
                ));
            }
            if out.insert(name.clone(), text).is_some() {
                return Err(self.invalid(
                    val,
                    &field,
                    "a name set once in `envs` and `secrets`",
                    "set in both",
                ));
            }
        }
        Ok(())
    }

    /// A local folder, made absolute as SkyPilot does; tern copies nothing, so it must exist
    /// on the workers too (it does with `--local-agents`, on this machine).
    fn workdir(&mut self, v: &Node, cwd: &std::path::Path) -> Result<String, SpecError> {
        if matches!(v.value, Yaml::Map(_)) {
            return Err(self.unsupported(
                v,
                "workdir",
                "a git repository as workdir is not supported: clone it in `setup`",
            ));
        }
        let s = self.string(v, "workdir")?;
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let path = match (s.strip_prefix("~/"), home) {
            (Some(rest), Some(h)) => h.join(rest),
            _ => cwd.join(&s),
        };
        if !path.is_dir() {
            return Err(self.invalid(
                v,
                "workdir",
                "a folder that exists",
                &format!("{}", path.display()),
            ));
        }
        let shown = path.display().to_string();
        self.warn(
            v,
            "workdir",
            &format!(
                "tern copies no files to workers: the job runs in {shown} on each worker, which \
                 must already hold it (true with --local-agents on this machine)"
            ),
        );
        Ok(shown)
    }

    // --- typed readers shared with `resources` ---

    fn at(&self, line: usize) -> Location {
        Location {
            file: self.file.to_string(),
            line: Some(line),
        }
    }

    fn invalid(&self, v: &Node, field: &str, expected: &str, found: &str) -> SpecError {
        SpecError::Invalid {
            at: self.at(v.line),
            field: field.to_string(),
            expected: expected.to_string(),
            found: found.to_string(),
        }
    }

    fn unsupported(&self, v: &Node, field: &str, why: &str) -> SpecError {
        SpecError::Unsupported {
            at: self.at(v.line),
            field: field.to_string(),
            why: why.to_string(),
        }
    }

    /// Once per field path.
    fn warn(&mut self, v: &Node, field: &str, message: &str) {
        if !self.warnings.iter().any(|w| w.field == field) {
            self.warnings.push(Warning {
                at: self.at(v.line),
                field: field.to_string(),
                message: message.to_string(),
            });
        }
    }

    fn map<'n>(&self, v: &'n Node, field: &str) -> Result<&'n [(String, Node)], SpecError> {
        match &v.value {
            Yaml::Map(m) => Ok(m),
            _ => Err(self.invalid(v, field, "a mapping", v.kind())),
        }
    }

    fn string(&self, v: &Node, field: &str) -> Result<String, SpecError> {
        match &v.value {
            Yaml::Str(s) => Ok(s.clone()),
            _ => Err(self.invalid(v, field, "a string", v.kind())),
        }
    }

    /// YAML 1.1's spellings too, as PyYAML reads them for SkyPilot.
    fn boolean(&self, v: &Node, field: &str) -> Result<bool, SpecError> {
        match &v.value {
            Yaml::Bool(b) => Ok(*b),
            Yaml::Str(s) => match s.to_ascii_lowercase().as_str() {
                "yes" | "on" | "y" => Ok(true),
                "no" | "off" | "n" => Ok(false),
                _ => Err(self.invalid(v, field, "true or false", &format!("{s:?}"))),
            },
            _ => Err(self.invalid(v, field, "true or false", v.kind())),
        }
    }
}

/// How a [`Work`] is written in a spec's `[work]`.
fn work_lines(work: &Work, out: &mut String) {
    match work {
        Work::Samples(n) => {
            let _ = writeln!(out, "samples = {n}");
        }
        Work::Steps { steps, batch } => {
            let _ = writeln!(out, "steps = {steps}\nbatch = {batch}");
        }
    }
}

/// Which capacity rule a set of `use_spot` values is.
fn capacity_of(spot: bool, on_demand: bool) -> CapacityRule {
    match (spot, on_demand) {
        (true, false) => CapacityRule::SpotOnly,
        (false, true) => CapacityRule::OnDemandOnly,
        _ => CapacityRule::Any,
    }
}

#[cfg(test)]
mod tests;
