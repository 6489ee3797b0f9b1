//! `tern bench closed-loop`: time the closed-loop replay (`tern simulate --policy controller`)
//! of every trace in a folder as the zones of one job, next to the replayed `tern` policy on
//! the same windows, and print both figures and their cost ratio from this one run.

use std::path::PathBuf;
use std::time::Instant;

use tern::sim::closed_loop::{LoopJob, LoopSetup};
use tern::sim::policy::SimPolicy;
use tern_replay::PolicyKind;

use super::bench_simulate::{WindowJob, load_folder};
use super::output::print_json_line;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folder of trace files (`*.json`): all of them are zones of the one job.
    #[arg(long, value_name = "DIR")]
    pub traces: PathBuf,
    #[command(flatten)]
    pub job: WindowJob,
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
    let traces = load_folder(&args.traces)?;
    let prepared = args.job.scenario(traces.clone()).prepare()?;
    let t0 = Instant::now();
    let tern = prepared.replay(&[PolicyKind::Tern], &|| ()).remove(0);
    let tern_seconds = t0.elapsed().as_secs_f64();
    let setup = LoopSetup {
        traces: &traces,
        prepared: &prepared,
        job: LoopJob {
            work_hours: args.job.work_hours,
            deadline_hours: args.job.deadline_hours,
            restart_hours: args.job.restart_hours,
            nodes: 1,
            min_nodes: 1,
            checkpoint_gb: 0.0,
            egress_per_gb: 0.0,
        },
        cold_start: false,
    };
    let t1 = Instant::now();
    let windows = setup.replay(&|| ())?;
    let controller_seconds = t1.elapsed().as_secs_f64();
    let ctl = prepared.summarise(SimPolicy::Controller.name(), windows.into_iter());
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
    say!(
        "{} build: {} zones, {} windows; replayed tern in {:.2} s, the controller in a closed loop in {:.1} s ({:.2} s per window on {} threads)",
        figure.build,
        figure.zones,
        figure.windows,
        figure.tern_seconds,
        figure.controller_seconds,
        figure.seconds_per_window,
        prepared.threads()
    );
    say!(
        "mean cost / on-demand: tern {:.4} ({} misses), controller {:.4} ({} misses): controller = {:.3} × tern",
        figure.tern_mean_cost_ratio,
        figure.tern_misses,
        figure.controller_mean_cost_ratio,
        figure.controller_misses,
        figure.controller_vs_tern
    );
    Ok(())
}
