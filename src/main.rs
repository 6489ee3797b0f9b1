//! `tern`: the single binary. This file only wires subcommands; each lives in `cmd/`.

mod cmd;
mod jobs;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "tern",
    version,
    about = "Keeps ML training jobs on the cheapest GPU/TPU capacity that meets their deadlines"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List purchasable offers from the price catalog, cheapest first.
    Offers(cmd::offers::Args),
    /// Import price snapshots and show price history.
    #[command(subcommand)]
    Prices(cmd::prices::Command),
    /// Predicted throughput and runtime of a job (`--job`), or the forecaster's error on
    /// measured profiles (`evaluate`).
    Forecast(cmd::forecast::Args),
    /// Plan fleets for job specs: instance type, zone, spot/on-demand and count, explained.
    Plan(cmd::plan::Args),
    /// Replay real spot traces and compare deadline policies (od, greedy, up, optimal, tern).
    Simulate(cmd::simulate::Args),
    /// Benchmarks that print figures (catalog load, plan, forecast, simulate).
    #[command(subcommand)]
    Bench(cmd::bench::Command),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Offers(args) => cmd::offers::run(args),
        Command::Prices(command) => cmd::prices::run(command),
        Command::Forecast(args) => cmd::forecast::run(args),
        Command::Plan(args) => cmd::plan::run(args),
        Command::Simulate(args) => cmd::simulate::run(args),
        Command::Bench(command) => cmd::bench::run(command),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
