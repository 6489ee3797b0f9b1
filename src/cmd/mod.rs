//! One module per subcommand. Each exposes `Args` (or `Command`) and `run`.

pub mod bench;
pub mod catalog_source;
pub mod offers;
pub mod output;
pub mod prices;
