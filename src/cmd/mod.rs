//! One module per subcommand. Each exposes `Args` (or `Command`) and `run`.

pub mod agent;
pub mod audit;
pub mod bench;
pub mod bench_api;
pub mod bench_closed_loop;
pub mod bench_forecast;
pub mod bench_plan;
pub mod bench_reconcile;
pub mod bench_simulate;
pub mod bench_soak;
pub mod catalog_source;
pub mod controller;
pub mod cost_report;
pub mod demo;
pub mod forecast;
pub mod number;
pub mod offers;
pub mod output;
pub mod plan;
pub mod prices;
pub mod serving;
pub mod sim;
pub mod simulate;
pub mod submit;
pub mod token;
pub mod tokens;
