//! `tern plan`: the chosen fleet for a set of job specs, its expected cost and finish, and the
//! runners-up with why they lost.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::Utc;
use tern::limits::Limits;
use tern_cloud::Offer;
use tern_plan::{Objective, PlanOptions, PlanReport, hazard_per_hour, plan};

use super::catalog_source::CatalogArgs;
use super::output::print_json_line;
use tern::jobs::{LoadedJob, check_regions};

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
    #[arg(long, default_value_t = 10.0, value_name = "SECS", value_parser = super::number::positive, allow_negative_numbers = true)]
    pub time_limit: f64,
    /// Skip the MILP and use the greedy heuristic.
    #[arg(long)]
    pub greedy: bool,
    /// Spot interruptions per node-hour to assume where no history is known.
    #[arg(long, default_value_t = PlanOptions::default().default_spot_hazard_per_hour, value_name = "PER_HOUR", value_parser = super::number::non_negative, allow_negative_numbers = true)]
    pub spot_hazard: f64,
    /// Availability history of one offer's zone and instance type, as ZONE:TYPE=TRACE.json (a
    /// Can't Be Late trace; ZONE as `tern offers` prints it, e.g. use1-az4). Its interruption
    /// rate replaces --spot-hazard for that offer. Repeatable.
    #[arg(long, value_name = "ZONE:TYPE=FILE")]
    pub availability: Vec<String>,
    /// How much each team's share of its entitlement weighs against cost when quota cannot
    /// serve every team: 0 = cost only; any F > 0 first leaves no team with nothing where
    /// some plan serves it, then prices each accelerator a team falls short of its
    /// entitlement at F times the cost-only plan's cost per accelerator (placing a job still
    /// comes first). Weights come from `share` in the quota file's [team.NAME].
    /// The quota file's `fairness` applies when this is not given; 0 when neither is.
    #[arg(long, value_name = "F", value_parser = super::number::non_negative, allow_negative_numbers = true)]
    pub fairness: Option<f64>,
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

/// The `--quota` file, checked against the catalog's offers.
pub fn load_limits(path: &Path, offers: &[Offer]) -> anyhow::Result<Limits> {
    let limits = Limits::load(path)?;
    limits.check_against(offers, &path.display().to_string())?;
    Ok(limits)
}

/// `--availability ZONE:TYPE=FILE` split, with ZONE:TYPE checked against the catalog's offers
/// (a typo would silently leave the default hazard in place).
fn availability_key<'a>(
    spec: &'a str,
    offers: &[Offer],
) -> anyhow::Result<(&'a str, &'a str, &'a str)> {
    let (key, file) = spec
        .split_once('=')
        .ok_or_else(|| anyhow::anyhow!("--availability {spec}: expected ZONE:TYPE=FILE"))?;
    let (zone, ty) = key
        .split_once(':')
        .ok_or_else(|| anyhow::anyhow!("--availability {spec}: expected ZONE:TYPE before '='"))?;
    if !offers
        .iter()
        .any(|o| o.zone.as_str() == zone && o.instance_type.name == ty)
    {
        let in_zone: BTreeSet<&str> = offers
            .iter()
            .filter(|o| o.zone.as_str() == zone)
            .map(|o| o.instance_type.name.as_str())
            .collect();
        let hint = if in_zone.is_empty() {
            "no offer of the catalog is in that zone (zones as `tern offers` prints them)"
                .to_owned()
        } else {
            format!(
                "types offered there: {}",
                in_zone.into_iter().collect::<Vec<_>>().join(", ")
            )
        };
        anyhow::bail!(
            "--availability {}: no offer of {} in zone {}; {hint}",
            tern_cloud::name::shown(spec),
            tern_cloud::name::shown(ty),
            tern_cloud::name::shown(zone)
        );
    }
    Ok((zone, ty, file))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let now = Utc::now();
    let catalog = args.catalog.load()?;
    let loaded = load_jobs(&args, &catalog.offers, now)?;
    let jobs: Vec<_> = loaded
        .iter()
        .map(|j| j.plan_job(now, now, j.spec.work.samples() as f64))
        .collect();
    let limits = match &args.quota {
        Some(p) => load_limits(p, &catalog.offers)?,
        None => Limits::default(),
    };
    anyhow::ensure!(
        args.time_limit.is_finite() && args.time_limit > 0.0,
        "--time-limit must be a positive number of seconds"
    );
    anyhow::ensure!(
        args.spot_hazard.is_finite() && args.spot_hazard >= 0.0,
        "--spot-hazard must be a non-negative rate per hour"
    );
    let hazards = hazards(&args, &catalog.offers)?;
    let base = PlanOptions {
        hazards,
        objective: match args.objective {
            ObjectiveArg::Cost => Objective::Cost,
            ObjectiveArg::Time => Objective::Time,
        },
        time_limit: Duration::from_secs_f64(args.time_limit),
        default_spot_hazard_per_hour: args.spot_hazard,
        alternatives: args.alternatives,
        use_milp: !args.greedy,
        ..PlanOptions::default()
    };
    let options = limits.plan_options(base, args.fairness);
    let report = plan(&jobs, &catalog.offers, &options);
    if args.json {
        return print_json_line(&report);
    }
    print_report(&report, &args.catalog.describe());
    for j in loaded.iter().filter(|j| !j.measured()) {
        let on = if j.spec.hint.is_some() {
            "its [hint] (a wide prior)"
        } else {
            "nothing: add a [hint] to price it here"
        };
        say!(
            "note: nobody has measured {}: this plan stands on {on}; `tern controller` starts \
             it with a bounded probe and plans it on the steps it measures",
            j.spec.name
        );
    }
    Ok(())
}

/// The job specs, each checked against the catalog's regions, their names unique.
fn load_jobs(
    args: &Args,
    offers: &[tern_cloud::Offer],
    now: chrono::DateTime<Utc>,
) -> anyhow::Result<Vec<LoadedJob>> {
    let loaded = args
        .jobs
        .iter()
        .map(|p| LoadedJob::load(p, now))
        .collect::<Result<Vec<_>, _>>()?;
    let regions: std::collections::BTreeSet<&str> =
        offers.iter().map(|o| o.region.as_str()).collect();
    for (j, path) in loaded.iter().zip(&args.jobs) {
        check_regions(
            &j.spec,
            regions.iter().copied(),
            &path.display().to_string(),
        )?;
    }
    let mut names = std::collections::HashSet::new();
    for j in &loaded {
        anyhow::ensure!(
            names.insert(j.spec.name.as_str()),
            "two job specs are named '{}'; job names must be unique",
            j.spec.name
        );
    }
    Ok(loaded)
}

/// Spot interruption rates learned from `--availability ZONE:TYPE=TRACE` files.
fn hazards(
    args: &Args,
    offers: &[tern_cloud::Offer],
) -> anyhow::Result<std::collections::HashMap<(String, String), f64>> {
    let mut hazards = std::collections::HashMap::new();
    for spec in &args.availability {
        let (zone, ty, file) = availability_key(spec, offers)?;
        let trace = tern_sim::Trace::load(Path::new(file))?;
        let rate = hazard_per_hour(&trace.available, f64::from(trace.gap_seconds), 1).ok_or_else(
            || anyhow::anyhow!("{file}: the trace never has capacity, so no rate can be learned"),
        )?;
        hazards.insert((zone.to_owned(), ty.to_owned()), rate);
    }
    Ok(hazards)
}

fn print_report(r: &PlanReport, catalog: &str) {
    for j in &r.jobs {
        print_job(j);
    }
    let c = &r.candidates;
    say!(
        "{} of {} jobs placed, expected ${:.2} in total ({} objective)",
        r.placed,
        r.placed + r.unplaced,
        r.expected_cost,
        match r.objective {
            Objective::Cost => "cost",
            Objective::Time => "time",
        }
    );
    print_teams(r);
    say!(
        "solver: {:?}{}{} in {:.0} ms; {} offers from the {catalog}; configurations: {} generated, {} infeasible, {} dominated, {} beyond the per-job cap, {} in the MILP ({} columns over {} independent groups of jobs)",
        r.solver,
        r.fallback_reason
            .as_deref()
            .map(|f| format!(" ({f})"))
            .unwrap_or_default(),
        r.gap
            .filter(|g| *g > 0.0)
            .map(|g| format!(" (proved within {:.3} % of the optimum)", g * 100.0))
            .unwrap_or_default(),
        r.solve_ms,
        r.offers,
        c.generated,
        c.infeasible,
        c.dominated,
        c.truncated,
        c.considered,
        r.milp_columns,
        r.components
    );
}

/// One job's choice (or why it has none), the note on its price and its alternatives.
fn print_job(j: &tern_plan::JobPlan) {
    let deadline = j
        .deadline_h
        .map(|d| format!(", deadline in {d:.1} h"))
        .unwrap_or_default();
    match &j.choice {
        Some(c) => {
            say!(
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
            say!(
                "    ${:.2}/h, expected ${:.2} in total, finishes in {:.1} h (at worst {:.1} h){deadline}",
                c.hourly,
                c.expected_cost,
                c.finish_h,
                c.finish_high_h
            );
        }
        None => {
            say!("{} (team {}): NOT PLACED{deadline}", j.job, j.team);
            if let Some(reason) = &j.reason {
                say!("    why: {reason}");
            }
        }
    }
    if let Some(v) = &j.versus_cheapest_per_accelerator_hour {
        say!("    note: {v}");
    }
    for a in &j.alternatives {
        say!(
            "    instead of {} x {} [{}] {} in {}: {}",
            a.config.nodes,
            a.config.instance_type,
            a.config.accelerator,
            a.config.capacity,
            a.config.zone,
            a.why_not
        );
    }
    say!();
}

/// Each team's accelerators against its entitlement, when there is more than one team or
/// fairness is on.
fn print_teams(r: &PlanReport) {
    if r.teams.len() < 2 && r.fairness == 0.0 {
        return;
    }
    say!("teams (fairness {}):", r.fairness);
    for t in &r.teams {
        let share = t
            .share
            .map(|s| format!("{:.0} % of its entitlement", s * 100.0))
            .unwrap_or_else(|| "nothing it could run".into());
        say!(
            "    {} (weight {}): {} of {} jobs placed, {} of {:.1} accelerators entitled: {share}",
            t.team,
            t.weight,
            t.placed,
            t.jobs,
            t.accelerators,
            t.entitled
        );
    }
    if let Some(cost_only) = r.cost_only_expected_cost {
        say!(
            "    fairness changes the expected cost by ${:+.2} (cost only: ${cost_only:.2})",
            r.expected_cost - cost_only
        );
    }
}
