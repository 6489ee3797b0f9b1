//! `tern bench simulate`: time the trace replay behind `tern simulate` — every trace in a folder
//! as its own zone, every policy, windows at a stride — and print the figure.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use tern_replay::{PolicyKind, Scenario};
use tern_sim::Trace;

use super::output::print_json_line;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folder of trace files (`*.json`), e.g. the 9-AZ aws-02-15-2023 V100 traces.
    #[arg(long, value_name = "DIR")]
    pub traces: PathBuf,
    #[command(flatten)]
    pub job: WindowJob,
    #[arg(long)]
    pub json: bool,
}

/// The job a trace benchmark replays: C hours of work, due D hours after each window starts,
/// d hours per restart, a window every H hours.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct WindowJob {
    #[arg(long, default_value_t = 48.0, value_parser = super::number::positive, allow_negative_numbers = true)]
    pub work_hours: f64,
    #[arg(long, default_value_t = 52.0, value_parser = super::number::positive, allow_negative_numbers = true)]
    pub deadline_hours: f64,
    #[arg(long, default_value_t = 0.2, value_parser = super::number::non_negative, allow_negative_numbers = true)]
    pub restart_hours: f64,
    #[arg(long, default_value_t = 6.0, value_parser = super::number::positive, allow_negative_numbers = true)]
    pub stride_hours: f64,
}

impl WindowJob {
    /// The replay of `traces` as the zones of this job (one node, flags' default prices).
    pub fn scenario(&self, traces: Vec<Trace>) -> Scenario {
        Scenario {
            traces,
            work_hours: self.work_hours,
            deadline_hours: self.deadline_hours,
            restart_hours: self.restart_hours,
            on_demand_price: None,
            spot_price: None,
            stride_hours: self.stride_hours,
            egress_cost: 0.0,
            nodes: 1,
        }
    }
}

/// Every `*.json` trace in `dir`, in name order.
pub fn load_folder(dir: &std::path::Path) -> anyhow::Result<Vec<Trace>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    anyhow::ensure!(!files.is_empty(), "no *.json trace in {}", dir.display());
    Ok(files
        .iter()
        .map(|f| Trace::load(f))
        .collect::<Result<Vec<_>, _>>()?)
}

#[derive(Debug, serde::Serialize)]
struct Figure {
    zones: usize,
    trace_hours: f64,
    windows: usize,
    policies: usize,
    seconds: f64,
    seconds_per_policy: Vec<(String, f64)>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let traces = load_folder(&args.traces)?;
    let prepared = traces
        .iter()
        .map(|t| args.job.scenario(vec![t.clone()]).prepare())
        .collect::<Result<Vec<_>, _>>()?;
    let mut per_policy = Vec::new();
    let all = Instant::now();
    for p in PolicyKind::ALL {
        let t0 = Instant::now();
        for prep in &prepared {
            prep.replay(&[p], &|| ());
        }
        per_policy.push((p.name().to_owned(), t0.elapsed().as_secs_f64()));
    }
    let figure = Figure {
        zones: traces.len(),
        trace_hours: traces.iter().map(Trace::hours).fold(0.0, f64::max),
        windows: prepared.iter().map(|p| p.windows()).sum(),
        policies: PolicyKind::ALL.len(),
        seconds: all.elapsed().as_secs_f64(),
        seconds_per_policy: per_policy,
    };
    if args.json {
        return print_json_line(&figure);
    }
    say!(
        "replayed {} zones × {:.0} h, {} windows × {} policies in {:.2} s",
        figure.zones,
        figure.trace_hours,
        figure.windows,
        figure.policies,
        figure.seconds
    );
    for (p, s) in &figure.seconds_per_policy {
        say!("  {p:8} {s:.2} s");
    }
    Ok(())
}
