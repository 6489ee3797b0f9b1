//! `tern simulate`: replay real spot traces and compare deadline policies by cost and misses.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use tern_sim::{PolicyKind, Scenario, Summary, Trace};

use super::output::{print_json_line, table};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Trace files (Can't Be Late JSON). Several files are several zones the job may use,
    /// unless `--per-trace`.
    #[arg(long = "trace", value_name = "FILE", num_args = 1.., required = true)]
    pub traces: Vec<PathBuf>,
    /// Hours of work at full speed (C).
    #[arg(long, value_name = "C")]
    pub work_hours: f64,
    /// Hours from the start of a window to the deadline (D).
    #[arg(long, value_name = "D")]
    pub deadline_hours: f64,
    /// Hours without progress whenever a new instance starts (d).
    #[arg(long, value_name = "d")]
    pub restart_hours: f64,
    /// On-demand $/h per instance [default: the trace's price_info, else 3.06 (p3.2xlarge)].
    #[arg(long, value_name = "P")]
    pub on_demand_price: Option<f64>,
    /// Spot $/h per instance for traces without a price series [default: the trace's
    /// price_info, else 0.30 × on-demand].
    #[arg(long, value_name = "S")]
    pub spot_price: Option<f64>,
    /// A window starts every H hours of the trace.
    #[arg(long, value_name = "H", default_value_t = 6.0)]
    pub stride_hours: f64,
    /// Checkpoint size, for egress when a move changes region.
    #[arg(long, value_name = "G", default_value_t = 0.0)]
    pub checkpoint_gb: f64,
    /// Egress $/GB across regions.
    #[arg(long, value_name = "E", default_value_t = 0.0)]
    pub egress_per_gb: f64,
    /// Instances the job needs at once (a gang); spot counts only when that many are available.
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub nodes: u32,
    /// Policies to compare, comma-separated.
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

pub fn run(args: Args) -> anyhow::Result<()> {
    let policies = args
        .policy
        .iter()
        .map(|p| p.parse::<PolicyKind>())
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
    let groups: Vec<Vec<Trace>> = if args.per_trace {
        traces.iter().map(|t| vec![t.clone()]).collect()
    } else {
        vec![traces.clone()]
    };
    let prepared = groups
        .into_iter()
        .map(|g| scenario(g).prepare())
        .collect::<Result<Vec<_>, _>>()
        .context("cannot replay these traces")?;
    let total: usize = prepared.iter().map(|p| p.windows()).sum();
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(total as u64);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{spinner} replaying {pos}/{len} windows [{bar:30}] {eta} left",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    });
    let started = Instant::now();
    let tick = || {
        if let Some(b) = &bar {
            b.inc(1);
        }
    };
    let results: Vec<Vec<Summary>> = prepared
        .iter()
        .map(|p| p.replay(&policies, &tick))
        .collect();
    let elapsed = started.elapsed();
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let zone_names: Vec<String> = if args.per_trace {
        traces.iter().map(|t| t.zone.clone()).collect()
    } else {
        let names: Vec<&str> = traces.iter().map(|t| t.zone.as_str()).collect();
        vec![if names.len() <= 3 {
            names.join("+")
        } else {
            format!("{} zones", names.len())
        }]
    };
    let reports: Vec<(PolicyKind, PolicyReport)> = policies
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let r = if args.per_trace {
                let parts: Vec<(&str, &Summary)> = zone_names
                    .iter()
                    .zip(&results)
                    .map(|(z, s)| (z.as_str(), &s[i]))
                    .collect();
                PolicyReport::average(&parts)
            } else {
                PolicyReport::from_summary(&results[0][i])
            };
            (p, r)
        })
        .collect();
    let first = &prepared[0];
    let setup = format!(
        "{} trace(s), {} window(s) × {} policies; job {} h of work ({} ticks of {} s), deadline {} h, \
         restart {} h ({} ticks), {} node(s); on-demand ${:.4}/h; replayed in {:.2} s",
        traces.len(),
        total,
        policies.len(),
        args.work_hours,
        first.job.work,
        traces[0].gap_seconds,
        args.deadline_hours,
        args.restart_hours,
        first.job.restart,
        first.job.nodes,
        first.on_demand_price,
        elapsed.as_secs_f64()
    );
    eprintln!("{setup}");
    if args.json {
        let mut report = serde_json::Map::new();
        for (p, r) in &reports {
            report.insert(p.name().to_owned(), serde_json::to_value(r)?);
        }
        return print_json_line(&report);
    }
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
    for (z, res) in zone_names.iter().zip(&results) {
        for (p, s) in policies.iter().zip(res) {
            add(z, p.name(), &PolicyReport::from_summary(s));
        }
    }
    if args.per_trace && results.len() > 1 {
        for (p, r) in &reports {
            add("average", p.name(), r);
        }
    }
    println!("{t}");
    println!("{setup}");
    Ok(())
}
