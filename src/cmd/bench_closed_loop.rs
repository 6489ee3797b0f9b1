//! `tern bench closed-loop`: time the closed-loop replay (`tern simulate --policy controller`)
//! of every trace in a folder as the zones of one job, next to the replayed `tern` policy on
//! the same windows, and print both figures and their cost ratio from this one run.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use tern::sim::closed_loop::LoopSetup;
use tern_sim::{PolicyKind, Scenario, Trace};

use super::output::print_json_line;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folder of trace files (`*.json`): all of them are zones of the one job.
    #[arg(long, value_name = "DIR")]
    pub traces: PathBuf,
    #[arg(long, default_value_t = 48.0, value_parser = super::number::positive, allow_negative_numbers = true)]
    pub work_hours: f64,
    #[arg(long, default_value_t = 52.0, value_parser = super::number::positive, allow_negative_numbers = true)]
    pub deadline_hours: f64,
    #[arg(long, default_value_t = 0.2, value_parser = super::number::non_negative, allow_negative_numbers = true)]
    pub restart_hours: f64,
    #[arg(long, default_value_t = 6.0, value_parser = super::number::positive, allow_negative_numbers = true)]
    pub stride_hours: f64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, serde::Serialize)]
struct Figure {
    build: &'static str,
    zones: usize,
    windows: usize,
    tern_seconds: f64,
    controller_seconds: f64,
    seconds_per_window: f64,
    tern_mean_cost_ratio: f64,
    controller_mean_cost_ratio: f64,
    controller_vs_tern: f64,
    tern_misses: usize,
    controller_misses: usize,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(&args.traces)
        .with_context(|| format!("cannot list {}", args.traces.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    anyhow::ensure!(
        !files.is_empty(),
        "no *.json trace in {}",
        args.traces.display()
    );
    let traces = files
        .iter()
        .map(|f| Trace::load(f))
        .collect::<Result<Vec<_>, _>>()?;
    let prepared = Scenario {
        traces: traces.clone(),
        work_hours: args.work_hours,
        deadline_hours: args.deadline_hours,
        restart_hours: args.restart_hours,
        on_demand_price: None,
        spot_price: None,
        stride_hours: args.stride_hours,
        egress_cost: 0.0,
        nodes: 1,
    }
    .prepare()?;
    let t0 = Instant::now();
    let tern = prepared.replay(&[PolicyKind::Tern], &|| ()).remove(0);
    let tern_seconds = t0.elapsed().as_secs_f64();
    let setup = LoopSetup {
        traces: &traces,
        prepared: &prepared,
        work_hours: args.work_hours,
        deadline_hours: args.deadline_hours,
        restart_hours: args.restart_hours,
        nodes: 1,
        min_nodes: 1,
        checkpoint_gb: 0.0,
    };
    let t1 = Instant::now();
    let windows = setup.replay(&|| ())?;
    let controller_seconds = t1.elapsed().as_secs_f64();
    let ctl = prepared.summarise(PolicyKind::Controller, windows.into_iter());
    let figure = Figure {
        build: super::bench::build_profile(),
        zones: traces.len(),
        windows: prepared.windows(),
        tern_seconds,
        controller_seconds,
        seconds_per_window: controller_seconds / prepared.windows().max(1) as f64,
        tern_mean_cost_ratio: tern.mean_cost_ratio,
        controller_mean_cost_ratio: ctl.mean_cost_ratio,
        controller_vs_tern: ctl.mean_cost_ratio / tern.mean_cost_ratio,
        tern_misses: tern.deadline_misses,
        controller_misses: ctl.deadline_misses,
    };
    if args.json {
        return print_json_line(&figure);
    }
    println!(
        "{} build: {} zones, {} windows; replayed tern in {:.2} s, the controller in a closed loop in {:.1} s ({:.2} s per window on {} threads)",
        figure.build,
        figure.zones,
        figure.windows,
        figure.tern_seconds,
        figure.controller_seconds,
        figure.seconds_per_window,
        prepared.threads()
    );
    println!(
        "mean cost / on-demand: tern {:.4} ({} misses), controller {:.4} ({} misses): controller = {:.3} × tern",
        figure.tern_mean_cost_ratio,
        figure.tern_misses,
        figure.controller_mean_cost_ratio,
        figure.controller_misses,
        figure.controller_vs_tern
    );
    Ok(())
}
