//! `tern`: the single binary. This file only wires subcommands; each lives in `cmd/` and calls
//! the `tern` library.

/// `println!` for people: the line through [`tern::terminal::safe`] first, so no text a worker
/// or a file wrote can drive the terminal. JSON for scripts is printed as it is.
macro_rules! say {
    () => {
        println!()
    };
    ($($arg:tt)*) => {
        println!("{}", tern::terminal::safe(&format!($($arg)*)))
    };
}

/// `eprintln!` for people, likewise.
macro_rules! say_err {
    ($($arg:tt)*) => {
        eprintln!("{}", tern::terminal::safe(&format!($($arg)*)))
    };
}

mod cmd;

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
    /// Run the controller on the simulated cloud with the example jobs, printing every
    /// decision and a cost summary (no credentials needed).
    Demo(cmd::demo::Args),
    /// The long-running controller: reconcile loop, HTTP API, /metrics (simulated cloud or AWS).
    Controller(Box<cmd::controller::Args>),
    /// Submit a job spec (TOML) or a SkyPilot task (YAML) to a running controller.
    Submit(cmd::submit::SubmitArgs),
    /// Read another tool's job file as a tern job spec (`skypilot TASK.yaml`).
    #[command(subcommand)]
    Convert(cmd::convert::Command),
    /// Show jobs of a running controller.
    Status(cmd::submit::StatusArgs),
    /// Cancel a job on a running controller.
    Cancel(cmd::submit::CancelArgs),
    /// Scoped API tokens (admin, team, agent): create, list, revoke.
    #[command(subcommand)]
    Token(cmd::tokens::Command),
    /// The controller's audit log: mutating API calls and refusals, by whom.
    Audit(cmd::audit::Args),
    /// What jobs cost, billed at the prices that held: by job, team, day, cloud, capacity or
    /// instance type, against on-demand and the plan; table, CSV, JSON, HTML or SVG.
    CostReport(cmd::cost_report::Args),
    /// A job's decisions in order (plan, launch, wait, move, resize, fallback, notice…), with
    /// the reasons and the numbers compared, and what each move saved.
    Explain(cmd::explain::Args),
    /// Worker agent for a training VM: progress reports, notices, drain, torchrun.
    Agent(cmd::agent::Args),
    /// Started by `tern agent` beside the training: stops the training's processes when the
    /// agent dies (its stdin closes). Not for direct use.
    #[command(hide = true)]
    AgentWatchdog(cmd::agent::WatchdogArgs),
    /// The simulated cloud as a process (`serve`) and what it holds and bills (`report`).
    #[command(subcommand)]
    Sim(cmd::sim::Command),
    /// List purchasable offers from the price catalog, cheapest first.
    Offers(cmd::offers::Args),
    /// Import price snapshots and show price history.
    #[command(subcommand)]
    Prices(cmd::prices::Command),
    /// Plan fleets for job specs: instance type, zone, spot/on-demand and count, explained.
    Plan(cmd::plan::Args),
    /// Benchmarks that print figures (catalog load, ...).
    #[command(subcommand)]
    Bench(cmd::bench::Command),
    /// Predicted throughput and runtime of a job (`--job`), or the forecaster's error on
    /// measured profiles (`evaluate`).
    Forecast(cmd::forecast::Args),
    /// Replay real spot traces and compare deadline policies (od, greedy, up, optimal, tern).
    Simulate(cmd::simulate::Args),
}

fn main() -> std::process::ExitCode {
    quiet_on_closed_stdout();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Offers(args) => cmd::offers::run(args),
        Command::Demo(args) => cmd::demo::run(args),
        Command::Controller(args) => cmd::controller::run(*args),
        Command::Submit(args) => cmd::submit::submit(args),
        Command::Convert(command) => cmd::convert::run(command),
        Command::Status(args) => cmd::submit::status(args),
        Command::Cancel(args) => cmd::submit::cancel(args),
        Command::Token(command) => cmd::tokens::run(command),
        Command::Audit(args) => cmd::audit::run(args),
        Command::CostReport(args) => cmd::cost_report::run(args),
        Command::Explain(args) => cmd::explain::run(args),
        Command::Agent(args) => cmd::agent::run(args),
        Command::AgentWatchdog(args) => cmd::agent::watchdog(args),
        Command::Sim(command) => cmd::sim::run(command),
        Command::Prices(command) => cmd::prices::run(command),
        Command::Plan(args) => cmd::plan::run(args),
        Command::Bench(command) => cmd::bench::run(command),
        Command::Forecast(args) => cmd::forecast::run(args),
        Command::Simulate(args) => cmd::simulate::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            say_err!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `tern offers | head` closes the pipe early; Rust ignores SIGPIPE, so the next `println!`
/// panics. A closed stdout means the reader has had enough: exit as a shell expects (128 +
/// SIGPIPE) without a backtrace. Every other panic keeps the default report.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}
