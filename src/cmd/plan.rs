//! `tern plan`: the chosen fleet for a set of job specs, its expected cost and finish, and the
//! runners-up with why they lost.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use serde::Deserialize;
use tern_cloud::Budget;
use tern_plan::{Objective, PlanOptions, PlanReport, Quota, hazard_per_hour, plan};

use super::catalog_source::CatalogArgs;
use super::output::print_json_line;
use tern::jobs::LoadedJob;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Job specs (TOML) to plan together.
    #[arg(value_name = "JOB.toml", required = true)]
    pub jobs: Vec<PathBuf>,
    #[command(flatten)]
    pub catalog: CatalogArgs,
    /// Quotas and team budgets (TOML; see README).
    #[arg(long, value_name = "FILE")]
    pub quota: Option<PathBuf>,
    /// What to minimise: expected total cost, or finish time within budgets.
    #[arg(long, value_enum, default_value = "cost")]
    pub objective: ObjectiveArg,
    /// HiGHS time limit, seconds; the greedy answers if the MILP cannot.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub time_limit: f64,
    /// Skip the MILP and use the greedy heuristic.
    #[arg(long)]
    pub greedy: bool,
    /// Spot interruptions per node-hour to assume where no history is known.
    #[arg(long, default_value_t = PlanOptions::default().default_spot_hazard_per_hour, value_name = "PER_HOUR")]
    pub spot_hazard: f64,
    /// Availability history of one offer's zone and instance type, as ZONE:TYPE=TRACE.json (a
    /// Can't Be Late trace; ZONE as `tern offers` prints it, e.g. use1-az4). Its interruption
    /// rate replaces --spot-hazard for that offer. Repeatable.
    #[arg(long, value_name = "ZONE:TYPE=FILE")]
    pub availability: Vec<String>,
    /// Runners-up listed per job.
    #[arg(long, default_value_t = 3)]
    pub alternatives: usize,
    /// One JSON object on the last line instead of the text report.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ObjectiveArg {
    Cost,
    Time,
}

/// The `--quota` file: `[[quota]]` tables and `[team.NAME]` budgets.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    #[serde(default)]
    pub quota: Vec<Quota>,
    #[serde(default)]
    pub team: BTreeMap<String, TeamBudget>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamBudget {
    pub total_usd: Option<f64>,
    pub per_hour_usd: Option<f64>,
}

impl LimitsFile {
    pub fn budgets(&self) -> BTreeMap<String, Budget> {
        self.team
            .iter()
            .map(|(k, b)| {
                (
                    k.clone(),
                    Budget {
                        total_usd: b.total_usd,
                        per_hour_usd: b.per_hour_usd,
                    },
                )
            })
            .collect()
    }
}

pub fn load_limits(path: &Path) -> anyhow::Result<LimitsFile> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {shown}"))?;
    let limits: LimitsFile = toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
        anyhow::anyhow!(
            "{shown}{}: {}",
            line.map(|l| format!(":{l}")).unwrap_or_default(),
            e.message()
        )
    })?;
    for (name, b) in &limits.team {
        for v in [b.total_usd, b.per_hour_usd].into_iter().flatten() {
            anyhow::ensure!(
                v.is_finite() && v >= 0.0,
                "{shown}: team.{name}: budgets must be non-negative numbers, got {v}"
            );
        }
    }
    Ok(limits)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let now = Utc::now();
    let catalog = args.catalog.load()?;
    let loaded = args
        .jobs
        .iter()
        .map(|p| LoadedJob::load(p, now))
        .collect::<Result<Vec<_>, _>>()?;
    let mut names = std::collections::HashSet::new();
    for j in &loaded {
        anyhow::ensure!(
            names.insert(j.spec.name.as_str()),
            "two job specs are named '{}'; job names must be unique",
            j.spec.name
        );
    }
    let jobs: Vec<_> = loaded
        .iter()
        .map(|j| j.plan_job(now, now, j.spec.work.samples() as f64))
        .collect();
    let limits = match &args.quota {
        Some(p) => load_limits(p)?,
        None => LimitsFile::default(),
    };
    anyhow::ensure!(
        args.time_limit.is_finite() && args.time_limit > 0.0,
        "--time-limit must be a positive number of seconds"
    );
    anyhow::ensure!(
        args.spot_hazard.is_finite() && args.spot_hazard >= 0.0,
        "--spot-hazard must be a non-negative rate per hour"
    );
    let mut hazards = std::collections::HashMap::new();
    for spec in &args.availability {
        let (key, file) = spec
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--availability {spec}: expected ZONE:TYPE=FILE"))?;
        let (zone, ty) = key.split_once(':').ok_or_else(|| {
            anyhow::anyhow!("--availability {spec}: expected ZONE:TYPE before '='")
        })?;
        let trace = tern_sim::Trace::load(Path::new(file))?;
        let rate = hazard_per_hour(&trace.available, f64::from(trace.gap_seconds), 1).ok_or_else(
            || anyhow::anyhow!("{file}: the trace never has capacity, so no rate can be learned"),
        )?;
        hazards.insert((zone.to_owned(), ty.to_owned()), rate);
    }
    let options = PlanOptions {
        hazards,
        objective: match args.objective {
            ObjectiveArg::Cost => Objective::Cost,
            ObjectiveArg::Time => Objective::Time,
        },
        time_limit: Duration::from_secs_f64(args.time_limit),
        default_spot_hazard_per_hour: args.spot_hazard,
        alternatives: args.alternatives,
        use_milp: !args.greedy,
        team_budgets: limits.budgets(),
        quotas: limits.quota,
        ..PlanOptions::default()
    };
    let report = plan(&jobs, &catalog.offers, &options);
    if args.json {
        return print_json_line(&report);
    }
    print_report(&report, &args.catalog.describe());
    Ok(())
}

fn print_report(r: &PlanReport, catalog: &str) {
    for j in &r.jobs {
        let deadline = j
            .deadline_h
            .map(|d| format!(", deadline in {d:.1} h"))
            .unwrap_or_default();
        match &j.choice {
            Some(c) => {
                println!(
                    "{} (team {}): {} x {} [{}] {} in {}{}",
                    j.job,
                    j.team,
                    c.nodes,
                    c.instance_type,
                    c.accelerator,
                    c.capacity,
                    c.zone,
                    if c.prior {
                        " (throughput from a prior)"
                    } else {
                        ""
                    }
                );
                println!(
                    "    ${:.2}/h, expected ${:.2} in total, finishes in {:.1} h (at worst {:.1} h){deadline}",
                    c.hourly, c.expected_cost, c.finish_h, c.finish_high_h
                );
            }
            None => {
                println!("{} (team {}): NOT PLACED{deadline}", j.job, j.team);
                if let Some(reason) = &j.reason {
                    println!("    why: {reason}");
                }
            }
        }
        if let Some(v) = &j.versus_cheapest_per_accelerator_hour {
            println!("    note: {v}");
        }
        for a in &j.alternatives {
            println!(
                "    instead of {} x {} [{}] {} in {}: {}",
                a.config.nodes,
                a.config.instance_type,
                a.config.accelerator,
                a.config.capacity,
                a.config.zone,
                a.why_not
            );
        }
        println!();
    }
    let c = &r.candidates;
    println!(
        "{} of {} jobs placed, expected ${:.2} in total ({} objective)",
        r.placed,
        r.placed + r.unplaced,
        r.expected_cost,
        match r.objective {
            Objective::Cost => "cost",
            Objective::Time => "time",
        }
    );
    println!(
        "solver: {:?}{} in {:.0} ms; {} offers from the {catalog}; configurations: {} generated, {} infeasible, {} dominated, {} beyond the per-job cap, {} in the MILP",
        r.solver,
        r.fallback_reason
            .as_deref()
            .map(|f| format!(" ({f})"))
            .unwrap_or_default(),
        r.solve_ms,
        r.offers,
        c.generated,
        c.infeasible,
        c.dominated,
        c.truncated,
        c.considered
    );
}
