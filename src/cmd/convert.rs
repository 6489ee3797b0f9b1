//! `tern convert skypilot TASK`: a SkyPilot task file as the tern job spec it is submitted as,
//! and the flags a task needs besides its file (shared with `tern submit TASK.yaml`).

use std::path::{Path, PathBuf};

use tern_cloud::Work;
use tern_cloud::skypilot::{self, Conversion, TaskOptions};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// A SkyPilot task (YAML) → the equivalent tern job spec (TOML), printed for review, with
    /// what of the task tern does not apply on stderr.
    Skypilot(Args),
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The task file.
    task: PathBuf,
    #[command(flatten)]
    flags: TaskFlags,
    /// One JSON object: `spec` (the TOML), `warnings` and `candidates` (where the job may run,
    /// one per accelerator × use_spot × place, as SkyPilot lists a task's).
    #[arg(long)]
    json: bool,
}

/// What a tern job needs that a SkyPilot task does not say.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TaskFlags {
    /// The job's team (default: TERN_TEAM, else `default`).
    #[arg(long, env = "TERN_TEAM")]
    pub team: Option<String>,
    /// The job's name (default: the task's `name`, else the file's name without `.yaml`).
    #[arg(long)]
    pub name: Option<String>,
    /// When the job must be done: a duration after submission (`3d 4h`) or an RFC 3339 time.
    #[arg(long)]
    pub deadline: Option<String>,
    /// The work, in samples…
    #[arg(long, conflicts_with_all = ["steps", "batch"])]
    pub samples: Option<u64>,
    /// …or in optimiser steps of a global batch (`--batch`).
    #[arg(long, requires = "batch")]
    pub steps: Option<u64>,
    /// The global batch size per step, with `--steps`.
    #[arg(long, requires = "steps")]
    pub batch: Option<u64>,
}

impl TaskFlags {
    /// Whether any flag is given (a TOML spec takes none: it says all of it).
    pub fn any(&self) -> bool {
        self.name.is_some()
            || self.deadline.is_some()
            || self.samples.is_some()
            || self.steps.is_some()
            || self.batch.is_some()
    }

    fn work(&self) -> anyhow::Result<Work> {
        match (self.samples, self.steps, self.batch) {
            (Some(n), _, _) if n > 0 => Ok(Work::Samples(n)),
            (None, Some(steps), Some(batch)) if steps > 0 && batch > 0 => {
                Ok(Work::Steps { steps, batch })
            }
            _ => anyhow::bail!(
                "a SkyPilot task does not say how much work it is: pass --samples N, or --steps N \
                 and --batch B (each ≥ 1)"
            ),
        }
    }
}

/// Whether `path` is a SkyPilot task rather than a tern spec: by its extension.
pub fn is_task(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}

/// Reads and converts the task at `path`.
pub fn convert(path: &Path, flags: &TaskFlags) -> anyhow::Result<Conversion> {
    let shown = path.display().to_string();
    let text = tern::jobs::read_spec(path)?;
    let catalog = tern_pricing::bundled()?;
    let opts = TaskOptions {
        team: flags.team.clone().unwrap_or_else(|| "default".into()),
        name: flags.name.clone(),
        deadline: flags.deadline.clone(),
        work: flags.work()?,
        cwd: std::env::current_dir()?,
        catalog: &catalog.offers,
    };
    Ok(skypilot::convert_task(&text, &shown, &opts)?)
}

pub fn run(command: Command) -> anyhow::Result<()> {
    let Command::Skypilot(args) = command;
    let c = convert(&args.task, &args.flags)?;
    if args.json {
        let spec = tern_cloud::parse_job_spec(&c.spec, &args.task.display().to_string())?;
        return super::output::print_json_line(&serde_json::json!({
            "spec": c.spec,
            "warnings": c.warnings,
            "candidates": skypilot::candidates(&spec),
        }));
    }
    for w in &c.warnings {
        say_err!("warning: {w}");
    }
    print!("{}", c.spec);
    Ok(())
}
