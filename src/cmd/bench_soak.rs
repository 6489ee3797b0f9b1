//! `tern bench soak`: the fault-injection soak ([`tern::sim::soak`]) against this binary.

use anyhow::Context;
use tern::sim::soak::{SoakConfig, run as soak};

use super::output::print_json_line;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Wall-clock budget in seconds (the run ends earlier once every job is done).
    #[arg(long, default_value_t = 150)]
    pub seconds: u64,
    /// Seeds the traces, the faults, the kill times and the garbage.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Virtual seconds of the simulated cloud per wall second.
    #[arg(long, default_value_t = 900.0, value_parser = super::number::positive, allow_negative_numbers = true)]
    pub speed: f64,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.speed > 0.0 && args.speed.is_finite(),
        "--speed must be > 0"
    );
    let tern = std::env::current_exe().context("finding this tern binary")?;
    let r = soak(SoakConfig {
        tern,
        seconds: args.seconds.max(10),
        seed: args.seed,
        speed: args.speed,
    })?;
    if args.json {
        return print_json_line(&r);
    }
    say!(
        "soak: {:.0} s wall, {} SIGKILLs; faults: flapping spot, 10 % throttled, 2 % transient, 20 % notices lost, 20 % late",
        r.wall_seconds,
        r.kills
    );
    say!(
        "deadlines met: {} of {} jobs on-demand could finish in time (states: {:?})",
        r.feasible_met_deadline,
        r.feasible_jobs,
        r.job_states
    );
    say!(
        "orphaned instances {}, duplicate launches {} (of {} launched), samples lost beyond a checkpoint {}",
        r.orphaned_instances,
        r.duplicate_launches,
        r.launched_instances,
        r.samples_lost_beyond_checkpoint
    );
    say!(
        "worst hour of launches {:.2} × the launch budget ({} job(s) over); garbage reports: {} sent, {} refused, {} accepted; server errors {}",
        r.worst_launch_hour_vs_budget,
        r.jobs_over_launch_budget,
        r.garbage_sent,
        r.garbage_refused,
        r.garbage_accepted,
        r.server_errors
    );
    Ok(())
}
