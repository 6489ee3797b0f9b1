//! The command line end to end: the `tern` binary's commands, their output and errors, the cost report in a real browser, and the demo. One binary, so CI links the tree once for all of them.

#[path = "../common/mod.rs"]
mod common;

mod cli_offers;
mod cli_plan;
mod controller_demo;
mod cost_report;
mod explain_cli;
mod forecast_cli;
mod readers;
mod readme_examples;
mod report_browser;
mod simulate_cli;
mod skypilot;
mod tokens_cli;
