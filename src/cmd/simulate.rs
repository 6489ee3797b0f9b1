//! `tern simulate`: replay real spot traces and compare deadline policies by cost and misses.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use tern::sim::policy::{self, SimPolicy};
use tern_cloud::{Budget, CheckpointSpec, JobSpec, ProfileRef, Work, WorkerRange};
use tern_policies::deadline::relative_throughput;
use tern_policies::forecast::speed;
use tern_replay::{Elasticity, Prepared, Scenario, Summary};
use tern_sim::Trace;

use super::output::{print_json_line, table};
use tern::jobs::LoadedJob;
use tern::sim::closed_loop::{LoopJob, replay_groups};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Trace files (Can't Be Late JSON). Several files are several zones the job may use,
    /// unless `--per-trace`.
    #[arg(long = "trace", value_name = "FILE", num_args = 1.., required = true)]
    pub traces: Vec<PathBuf>,
    /// Hours of work at full speed (C).
    #[arg(long, value_name = "C", value_parser = super::number::positive, allow_negative_numbers = true)]
    pub work_hours: f64,
    /// Hours from the start of a window to the deadline (D).
    #[arg(long, value_name = "D", value_parser = super::number::positive, allow_negative_numbers = true)]
    pub deadline_hours: f64,
    /// Hours without progress whenever a new instance starts (d).
    #[arg(long, value_name = "d", value_parser = super::number::non_negative, allow_negative_numbers = true)]
    pub restart_hours: f64,
    /// On-demand $/h per instance in every zone [default: each trace's own price_info, else
    /// 3.06 (p3.2xlarge)]; ratios are relative to the cheapest zone's.
    #[arg(long, value_name = "P", value_parser = super::number::positive, allow_negative_numbers = true)]
    pub on_demand_price: Option<f64>,
    /// Spot $/h per instance for traces without a price series [default: the trace's
    /// price_info, else 0.30 × on-demand].
    #[arg(long, value_name = "S", value_parser = super::number::non_negative, allow_negative_numbers = true)]
    pub spot_price: Option<f64>,
    /// A window starts every H hours of the trace.
    #[arg(long, value_name = "H", default_value_t = 6.0, value_parser = super::number::positive, allow_negative_numbers = true)]
    pub stride_hours: f64,
    /// Checkpoint size, for egress when a move changes region.
    #[arg(long, value_name = "G", default_value_t = 0.0, value_parser = super::number::non_negative, allow_negative_numbers = true)]
    pub checkpoint_gb: f64,
    /// Egress $/GB across regions.
    #[arg(long, value_name = "E", default_value_t = 0.0, value_parser = super::number::non_negative, allow_negative_numbers = true)]
    pub egress_per_gb: f64,
    /// Instances the job wants (K). Without --min-nodes it is a gang: spot counts only when K
    /// are available.
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub nodes: u32,
    /// Fewest instances the job can run on (elastic, 1 ≤ M ≤ K) [default: K, a gang]. On spot it
    /// holds min(available, K) nodes, at the speed of --profile/--job's scaling curve, else
    /// linear (n/K).
    #[arg(long, value_name = "M")]
    pub min_nodes: Option<u32>,
    /// Profile directory (placements/scalability CSVs): the forecaster fitted on it gives the
    /// elastic job's relative speed with n nodes, throughput(n)/throughput(K).
    #[arg(long, value_name = "DIR", conflicts_with = "job")]
    pub profile: Option<PathBuf>,
    /// Node type of a Sia-layout profile (`placements-<G>.csv`: aws, azure, dgx, quad, rtx).
    #[arg(long, value_name = "G", requires = "profile")]
    pub gpu: Option<String>,
    /// Also write a cost report of the replay: every window of every online policy as a job
    /// (team = the policy), billed as `tern cost-report` bills. The format follows the file's
    /// extension: .html, .json, .csv, .svg, else a table.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Job spec (TOML) whose forecast gives the elastic job's scaling curve.
    #[arg(long, value_name = "FILE")]
    pub job: Option<PathBuf>,
    /// Accelerator to take the scaling curve for [default: the profile's (its node type's, or
    /// the spec's profile accelerator), else the spec's first].
    #[arg(long, value_name = "NAME")]
    pub accelerator: Option<String>,
    /// GPUs per node for the scaling curve [default: as `tern forecast`: the largest single
    /// node observed, else the accelerator's usual cloud node].
    #[arg(long, value_name = "N")]
    pub gpus_per_node: Option<u32>,
    /// Policies to compare, comma-separated: od, greedy, up, optimal, tern, informed (tern
    /// told each window's own availability statistics: a yardstick), controller,
    /// controller-cold.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "od,greedy,up,optimal,tern"
    )]
    pub policy: Vec<String>,
    /// Replay each trace as its own single-zone job, and report every zone and their average.
    #[arg(long)]
    pub per_trace: bool,
    /// Print one JSON object, keyed by policy, as the last line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct PolicyReport {
    mean_cost_ratio: f64,
    p90_cost_ratio: f64,
    deadline_misses: usize,
    windows: usize,
    spot_share: f64,
    moves_per_window: f64,
    restarts_per_window: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    zones: Option<std::collections::BTreeMap<String, PolicyReport>>,
}

impl PolicyReport {
    fn from_summary(s: &Summary) -> PolicyReport {
        PolicyReport {
            mean_cost_ratio: s.mean_cost_ratio,
            p90_cost_ratio: s.p90_cost_ratio,
            deadline_misses: s.deadline_misses,
            windows: s.windows,
            spot_share: s.spot_share,
            moves_per_window: s.mean_moves,
            restarts_per_window: s.mean_restarts,
            zones: None,
        }
    }

    /// Average of per-zone figures (each zone weighs the same), misses and windows summed.
    fn average(parts: &[(&str, &Summary)]) -> PolicyReport {
        let n = parts.len().max(1) as f64;
        let avg = |f: fn(&Summary) -> f64| parts.iter().map(|(_, s)| f(s)).sum::<f64>() / n;
        PolicyReport {
            mean_cost_ratio: avg(|s| s.mean_cost_ratio),
            p90_cost_ratio: avg(|s| s.p90_cost_ratio),
            deadline_misses: parts.iter().map(|(_, s)| s.deadline_misses).sum(),
            windows: parts.iter().map(|(_, s)| s.windows).sum(),
            spot_share: avg(|s| s.spot_share),
            moves_per_window: avg(|s| s.mean_moves),
            restarts_per_window: avg(|s| s.mean_restarts),
            zones: Some(
                parts
                    .iter()
                    .map(|(z, s)| ((*z).to_owned(), PolicyReport::from_summary(s)))
                    .collect(),
            ),
        }
    }
}

/// What `tern simulate` runs, checked before anything is replayed.
struct Checked {
    policies: Vec<SimPolicy>,
    traces: Vec<Trace>,
    min_nodes: u32,
    curve: Option<(Vec<f64>, String)>,
}

fn check(args: &Args) -> anyhow::Result<Checked> {
    let policies = args
        .policy
        .iter()
        .map(|p| p.parse::<SimPolicy>())
        .collect::<Result<Vec<_>, _>>()?;
    anyhow::ensure!(!policies.is_empty(), "--policy names no policy");
    let traces = args
        .traces
        .iter()
        .map(|f| Trace::load(f))
        .collect::<Result<Vec<_>, _>>()?;
    for (name, v) in [
        ("--checkpoint-gb", args.checkpoint_gb),
        ("--egress-per-gb", args.egress_per_gb),
    ] {
        anyhow::ensure!(v.is_finite() && v >= 0.0, "{name} must be ≥ 0, got {v}");
    }
    anyhow::ensure!(args.nodes >= 1, "--nodes must be at least 1, got 0");
    let min_nodes = args.min_nodes.unwrap_or(args.nodes);
    anyhow::ensure!(
        (1..=args.nodes).contains(&min_nodes),
        "--min-nodes must be between 1 and --nodes ({}), got {min_nodes}",
        args.nodes
    );
    let curve = scaling_curve(args)?;
    Ok(Checked {
        policies,
        traces,
        min_nodes,
        curve,
    })
}

/// The trace groups (one per trace with `--per-trace`, else all together) and their prepared
/// replays.
fn prepare(args: &Args, c: &Checked) -> anyhow::Result<(Vec<Vec<Trace>>, Vec<Prepared>)> {
    let elastic = Elasticity {
        min_nodes: c.min_nodes,
        relative_throughput: c.curve.as_ref().map(|(v, _)| v.clone()),
    };
    let groups: Vec<Vec<Trace>> = if args.per_trace {
        c.traces.iter().map(|t| vec![t.clone()]).collect()
    } else {
        vec![c.traces.clone()]
    };
    let scenario = |traces: Vec<Trace>| Scenario {
        traces,
        work_hours: args.work_hours,
        deadline_hours: args.deadline_hours,
        restart_hours: args.restart_hours,
        on_demand_price: args.on_demand_price,
        spot_price: args.spot_price,
        stride_hours: args.stride_hours,
        egress_cost: args.checkpoint_gb * args.egress_per_gb,
        nodes: args.nodes,
    };
    let prepared = groups
        .iter()
        .map(|g| scenario(g.clone()).prepare_elastic(&elastic))
        .collect::<Result<Vec<_>, _>>()
        .context("cannot replay these traces")?;
    for p in &prepared {
        p.check_memory(&policy::replayed(&c.policies))
            .context("cannot replay these traces")?;
    }
    Ok((groups, prepared))
}

/// A progress bar over `total` windows, on a terminal only.
fn progress(total: usize) -> Option<indicatif::ProgressBar> {
    std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(total as u64);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{spinner} replaying {pos}/{len} windows [{bar:30}] {eta} left",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let c = check(&args)?;
    let (groups, prepared) = prepare(&args, &c)?;
    let loops = c.policies.iter().filter(|p| p.is_closed_loop()).count();
    let passes = loops + usize::from(c.policies.iter().any(|p| !p.is_closed_loop()));
    let total: usize = prepared.iter().map(|p| p.windows()).sum::<usize>() * passes;
    let bar = progress(total);
    let started = Instant::now();
    let tick = || {
        if let Some(b) = &bar {
            b.inc(1);
        }
    };
    let job = LoopJob {
        work_hours: args.work_hours,
        deadline_hours: args.deadline_hours,
        restart_hours: args.restart_hours,
        nodes: args.nodes,
        min_nodes: c.min_nodes,
        checkpoint_gb: args.checkpoint_gb,
        egress_per_gb: args.egress_per_gb,
    };
    let results =
        replay_groups(&groups, &prepared, &c.policies, job, &tick).context("closed-loop replay")?;
    let elapsed = started.elapsed();
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    if let Some(path) = &args.report {
        write_report(path, &prepared, &groups, &c.policies)?;
    }
    let zone_names = zone_names(&args, &c.traces);
    let reports = reports(&args, &c.policies, &zone_names, &results);
    let windows = total / passes.max(1);
    let setup = setup_line(&args, &c, &prepared[0], windows, elapsed.as_secs_f64());
    say_err!("{setup}");
    if args.json {
        let mut report = serde_json::Map::new();
        for (p, r) in &reports {
            report.insert(p.name().to_owned(), serde_json::to_value(r)?);
        }
        return print_json_line(&report);
    }
    print_table(&args, &c.policies, &zone_names, &results, &reports);
    say!("{setup}");
    Ok(())
}

/// The rows' zone labels: one per trace with `--per-trace`, else the zones together.
fn zone_names(args: &Args, traces: &[Trace]) -> Vec<String> {
    if args.per_trace {
        return row_labels(traces);
    }
    let names: Vec<&str> = traces.iter().map(|t| t.zone.as_str()).collect();
    vec![if names.len() <= 3 {
        names.join("+")
    } else {
        format!("{} zones", names.len())
    }]
}

/// Each policy's figures: over all traces together, or averaged over `--per-trace` rows.
fn reports(
    args: &Args,
    policies: &[SimPolicy],
    zone_names: &[String],
    results: &[Vec<Summary>],
) -> Vec<(SimPolicy, PolicyReport)> {
    policies
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let r = if args.per_trace {
                let parts: Vec<(&str, &Summary)> = zone_names
                    .iter()
                    .zip(results)
                    .map(|(z, s)| (z.as_str(), &s[i]))
                    .collect();
                PolicyReport::average(&parts)
            } else {
                PolicyReport::from_summary(&results[0][i])
            };
            (p, r)
        })
        .collect()
}

/// The line that says what was replayed (stderr, and after the table).
fn setup_line(args: &Args, c: &Checked, first: &Prepared, windows: usize, secs: f64) -> String {
    let mut setup = format!(
        "{} trace(s), {} window(s) × {} policies; job {} h of work ({} ticks of {} s), deadline {} h, \
         restart {} h ({} ticks), {} node(s); cheapest on-demand ${:.4}/h; replayed in {:.2} s",
        c.traces.len(),
        windows,
        c.policies.len(),
        args.work_hours,
        first.job.work,
        c.traces[0].gap_seconds,
        args.deadline_hours,
        args.restart_hours,
        first.job.restart,
        first.job.nodes,
        first.on_demand_price,
        secs
    );
    let min_nodes = c.min_nodes;
    if min_nodes < args.nodes {
        let speeds: Vec<String> = first.job.speed[min_nodes as usize..]
            .iter()
            .map(|&u| format!("{:.3}", f64::from(u) / f64::from(first.job.unit)))
            .collect();
        setup = format!(
            "{setup}\nelastic: runs on {min_nodes}..={} nodes; relative speed with {min_nodes}..={} \
             nodes: {} ({})",
            args.nodes,
            args.nodes,
            speeds.join(" "),
            c.curve.as_ref().map_or("linear", |(_, from)| from.as_str())
        );
    } else if c.curve.is_some() {
        say_err!(
            "note: without --min-nodes below --nodes the job is a gang; the scaling curve is unused"
        );
    }
    if c.policies.contains(&SimPolicy::ControllerCold) {
        setup = format!(
            "{setup}\ncontroller-cold: the closed loop's job has no measured step time; the \
             controller probes it first"
        );
    }
    setup
}

fn print_table(
    args: &Args,
    policies: &[SimPolicy],
    zone_names: &[String],
    results: &[Vec<Summary>],
    reports: &[(SimPolicy, PolicyReport)],
) {
    let mut t = table(&[
        "zone",
        "policy",
        "windows",
        "mean cost/OD",
        "p90 cost/OD",
        "misses",
        "spot share",
        "moves/window",
    ]);
    let mut add = |zone: &str, name: &str, r: &PolicyReport| {
        t.add_row(vec![
            zone.to_owned(),
            name.to_owned(),
            r.windows.to_string(),
            format!("{:.3}", r.mean_cost_ratio),
            format!("{:.3}", r.p90_cost_ratio),
            r.deadline_misses.to_string(),
            format!("{:.0} %", 100.0 * r.spot_share),
            format!("{:.2}", r.moves_per_window),
        ]);
    };
    for (z, res) in zone_names.iter().zip(results) {
        for (p, s) in policies.iter().zip(res) {
            add(z, p.name(), &PolicyReport::from_summary(s));
        }
    }
    if args.per_trace && results.len() > 1 {
        for (p, r) in reports {
            add("average", p.name(), r);
        }
    }
    say!("{t}");
}

/// One label per trace for `--per-trace` rows and JSON keys: the zone, and `zone#n` (n from 1,
/// in argument order) when several traces share a zone, so none overwrites another.
fn row_labels(traces: &[Trace]) -> Vec<String> {
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let shared = |z: &str| traces.iter().filter(|t| t.zone == z).count() > 1;
    traces
        .iter()
        .map(|t| {
            if !shared(&t.zone) {
                return t.zone.clone();
            }
            let n = seen.entry(t.zone.as_str()).or_insert(0);
            *n += 1;
            format!("{}#{n}", t.zone)
        })
        .collect()
}

/// The relative throughput per node count from `--profile` or `--job`, and where it came from.
fn scaling_curve(args: &Args) -> anyhow::Result<Option<(Vec<f64>, String)>> {
    let now = chrono::Utc::now();
    let (loaded, from) = match (&args.profile, &args.job) {
        (Some(dir), _) => (
            profile_job(dir, args.gpu.as_deref(), args.accelerator.as_deref(), now)?,
            dir.display().to_string(),
        ),
        (None, Some(file)) => (LoadedJob::load(file, now)?, file.display().to_string()),
        (None, None) => return Ok(None),
    };
    let accelerator = args
        .accelerator
        .clone()
        .or_else(|| loaded.spec.profile.as_ref().map(|p| p.accelerator.clone()))
        .or_else(|| loaded.spec.accelerators.first().cloned())
        .context("the job names no accelerator; pass --accelerator")?;
    let gpus = loaded.gpus_per_node(&accelerator, args.gpus_per_node.map(|n| n.max(1)));
    let curve = relative_throughput(
        &loaded.forecaster,
        &loaded.spec.name,
        &accelerator,
        gpus,
        loaded.batch(&from.to_string())?,
        args.nodes,
    )
    .with_context(|| format!("no scaling curve for {accelerator} from {from}"))?;
    Ok(Some((
        curve,
        format!("forecast from {from}, {accelerator}, {gpus} GPU(s)/node"),
    )))
}

/// A job whose only knowledge is a measured profile, as `tern forecast` would seed it.
fn profile_job(
    dir: &Path,
    node_type: Option<&str>,
    accelerator: Option<&str>,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<LoadedJob> {
    // The profile's accelerator only labels its series (the curve is the profile's own fit);
    // a known node type names it, which also sets its interconnect prior.
    let accelerator = accelerator
        .map(str::to_owned)
        .or_else(|| {
            node_type
                .and_then(speed::node_type)
                .map(|n| n.accelerator.to_owned())
        })
        .unwrap_or_else(|| "profile".to_owned());
    let spec = JobSpec {
        name: "profile".into(),
        team: "simulate".into(),
        work: Work::Samples(1),
        deadline: None,
        accelerators: vec![accelerator.clone()],
        workers: WorkerRange { min: 1, max: 1 },
        gang: false,
        checkpoint: CheckpointSpec::default(),
        budget: Budget::default(),
        priority: 0,
        local_batch: None,
        observations: Vec::new(),
        profile: Some(ProfileRef {
            path: Some(dir.display().to_string()),
            placements: None,
            scalability: None,
            accelerator,
            node_type: node_type.map(str::to_owned),
        }),
        hint: None,
        probe: Default::default(),
        constraints: Default::default(),
        run: None,
        disk_gb: None,
    };
    Ok(LoadedJob::from_spec(
        spec,
        Some(Path::new(".")),
        &dir.display().to_string(),
        now,
    )?)
}

/// `--report FILE`: the replay's windows as a cost report (see [`tern::sim::replay_report`]).
fn write_report(
    path: &std::path::Path,
    prepared: &[tern_replay::Prepared],
    groups: &[Vec<Trace>],
    policies: &[SimPolicy],
) -> anyhow::Result<()> {
    use tern::report::{self, CostQuery, Ledger};
    use tern::sim::replay_report::{ReplayJobs, add_to_ledger};
    let mut ledger = Ledger::default();
    let mut added = Vec::new();
    for (i, (p, g)) in prepared.iter().zip(groups).enumerate() {
        let prefix = if groups.len() > 1 {
            format!("g{i}-")
        } else {
            String::new()
        };
        let replay = ReplayJobs {
            prepared: p,
            traces: g,
            prefix,
        };
        added = add_to_ledger(&mut ledger, &replay, &policy::replayed(policies));
    }
    let now = ledger.latest().unwrap_or_else(chrono::Utc::now);
    let report = report::build(&ledger, &CostQuery::default(), now)?;
    let format = match path.extension().and_then(|e| e.to_str()) {
        Some("html") => super::cost_report::Format::Html,
        Some("json") => super::cost_report::Format::Json,
        Some("csv") => super::cost_report::Format::Csv,
        Some("svg") => super::cost_report::Format::Svg,
        _ => super::cost_report::Format::Table,
    };
    let text = super::cost_report::render(&report, format)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    let names: Vec<&str> = added.iter().map(|p| p.name()).collect();
    let left_out: Vec<&str> = policies
        .iter()
        .filter(|p| p.replayed().is_none_or(|k| !added.contains(&k)))
        .map(|p| p.name())
        .collect();
    say_err!(
        "wrote {} ({} windows as jobs, teams {}{})",
        path.display(),
        report.rows.len(),
        names.join(", "),
        if left_out.is_empty() {
            String::new()
        } else {
            format!(
                "; not replayed tick by tick, so not in it: {}",
                left_out.join(", ")
            )
        }
    );
    Ok(())
}
