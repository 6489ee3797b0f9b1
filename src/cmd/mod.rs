//! One module per subcommand. Each exposes `Args` (or `Command`) and `run`.

pub mod bench;
pub mod bench_forecast;
pub mod bench_plan;
pub mod bench_simulate;
pub mod catalog_source;
pub mod forecast;
pub mod offers;
pub mod output;
pub mod plan;
pub mod prices;
pub mod simulate;
