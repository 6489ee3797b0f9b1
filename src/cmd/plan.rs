//! `tern plan`: the chosen fleet for a set of job specs, its expected cost and finish, and the
//! runners-up with why they lost.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use serde::Deserialize;
use tern_cloud::{Budget, Offer};
use tern_plan::{Objective, PlanOptions, PlanReport, Quota, hazard_per_hour, plan};

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
    #[arg(long, default_value_t = 0.0, value_name = "F", value_parser = super::number::non_negative, allow_negative_numbers = true)]
    pub fairness: f64,
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
    /// The team's weight in the pool when `--fairness` is on (1 when absent).
    pub share: Option<f64>,
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

    /// Teams' weights for `--fairness` (`share`), where set.
    pub fn weights(&self) -> BTreeMap<String, f64> {
        self.team
            .iter()
            .filter_map(|(k, b)| Some((k.clone(), b.share?)))
            .collect()
    }
}

pub fn load_limits(path: &Path) -> anyhow::Result<LimitsFile> {
    let shown = path.display().to_string();
    let text = tern_cloud::input::read_text_capped(path, tern_cloud::input::Limit::SETTINGS)
        .with_context(|| format!("reading {shown}"))?;
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
        tern_cloud::name::check_name(name).map_err(|found| {
            anyhow::anyhow!(
                "{shown}: team name {found}: expected {}",
                tern_cloud::name::NAME_RULE
            )
        })?;
        for v in [b.total_usd, b.per_hour_usd].into_iter().flatten() {
            anyhow::ensure!(
                v.is_finite() && v >= 0.0,
                "{shown}: team.{name}: budgets must be non-negative numbers, got {v}"
            );
        }
        if let Some(share) = b.share {
            anyhow::ensure!(
                share.is_finite() && share > 0.0,
                "{shown}: team.{name}.share: expected a weight > 0, got {share}"
            );
        }
    }
    Ok(limits)
}

/// Refuses quotas that no offer of the catalog could ever count against: an unknown family or
/// region is a typo that would otherwise leave the real limit unenforced.
pub fn check_limits(limits: &LimitsFile, offers: &[Offer], shown: &str) -> anyhow::Result<()> {
    for (i, q) in limits.quota.iter().enumerate() {
        let of_cloud = || offers.iter().filter(|o| o.cloud == q.cloud);
        let families: BTreeSet<String> = of_cloud()
            .filter_map(|o| o.accelerator().map(|a| a.family()))
            .collect();
        anyhow::ensure!(
            families.iter().any(|f| f.eq_ignore_ascii_case(&q.family)),
            "{shown}: quota[{i}].family: no {} offer in the catalog has family {}; known: {}",
            q.cloud,
            tern_cloud::name::shown(&q.family),
            families.into_iter().collect::<Vec<_>>().join(", ")
        );
        if let Some(r) = &q.region {
            let regions: BTreeSet<&str> = of_cloud().map(|o| o.region.as_str()).collect();
            anyhow::ensure!(
                regions.contains(r.as_str()),
                "{shown}: quota[{i}].region: no {} offer in the catalog is in region {}; known: {}",
                q.cloud,
                tern_cloud::name::shown(r),
                regions.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
    }
    Ok(())
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
        Some(p) => {
            let limits = load_limits(p)?;
            check_limits(&limits, &catalog.offers, &p.display().to_string())?;
            limits
        }
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
    let hazards = hazards(&args, &catalog.offers)?;
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
        team_weights: limits.weights(),
        fairness: args.fairness,
        quotas: limits.quota,
        ..PlanOptions::default()
    };
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
        println!(
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
    print_teams(r);
    println!(
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

/// Each team's accelerators against its entitlement, when there is more than one team or
/// fairness is on.
fn print_teams(r: &PlanReport) {
    if r.teams.len() < 2 && r.fairness == 0.0 {
        return;
    }
    println!("teams (fairness {}):", r.fairness);
    for t in &r.teams {
        let share = t
            .share
            .map(|s| format!("{:.0} % of its entitlement", s * 100.0))
            .unwrap_or_else(|| "nothing it could run".into());
        println!(
            "    {} (weight {}): {} of {} jobs placed, {} of {:.1} accelerators entitled: {share}",
            t.team, t.weight, t.placed, t.jobs, t.accelerators, t.entitled
        );
    }
    if let Some(cost_only) = r.cost_only_expected_cost {
        println!(
            "    fairness changes the expected cost by ${:+.2} (cost only: ${cost_only:.2})",
            r.expected_cost - cost_only
        );
    }
}
