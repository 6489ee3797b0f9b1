//! Runtime forecaster (DESIGN.md §4.1): how fast a data-parallel job runs on a given
//! accelerator type and count, before it has run there, with an interval the planner can use
//! for deadline safety.
//!
//! * [`model`]: the Pollux throughput form (compute linear in local batch; all-reduce cost by
//!   replica count, separately inside one node and across nodes; overlap exponent γ).
//! * [`fit`]: MAP fit on log step time with argmin's L-BFGS, a prior for what the data cannot
//!   identify (cross-node sync from interconnect bandwidth ratios), and a Laplace covariance
//!   that turns extrapolation and prior-only parameters into wider intervals.
//! * [`Forecaster`]: online state per (job, accelerator); cross-accelerator bootstrap by the
//!   single-GPU speed ratio (Sia), or a datasheet relative-speed prior ([`speed`]).
//! * [`evaluate`]: the offline checks behind `tern forecast evaluate` (fit on all rows, on
//!   single-node rows, on single-node rows plus ≤ 2 chosen probes, or bootstrap).
//! * [`profile`]: CSV parsers over text (no IO).
//! * [`hint`]: a wide cold-start prior from the spec's FLOPs per sample, for a job never
//!   observed anywhere.

pub mod evaluate;
pub mod fit;
mod forecaster;
pub mod hint;
#[cfg(test)]
mod hint_tests;
pub mod model;
pub mod profile;
pub mod speed;
#[cfg(test)]
mod tests;

pub use evaluate::{
    BootstrapMethod, Donor, Evaluation, FitOn, evaluate, evaluate_bootstrap, select_probes,
};
pub use fit::{Fit, FitOptions, Identified};
pub use forecaster::{
    Basis, Forecaster, Interconnect, Prediction, Query, Z_90, blend, bootstrap, pool, transfer,
};
pub use hint::Hint;
pub use model::{Params, Sample, Shape};
pub use profile::{GradientNoise, ProfileRow, parse_profile, parse_validation};

/// Errors of the forecaster and its profile parsers.
#[derive(Debug, thiserror::Error)]
pub enum ForecastError {
    #[error("{file}:{line}: {msg}")]
    Profile {
        file: String,
        line: usize,
        msg: String,
    },
    #[error("no observations to fit")]
    NoData,
    #[error("sample {index} is invalid (need step time, local batch, GPUs, nodes > 0): {reason}")]
    BadSample { index: usize, reason: String },
    #[error("invalid observation for job `{job}`: {reason}")]
    BadObservation { job: String, reason: String },
    #[error("job `{job}` has no observations on any accelerator; add some or a profile")]
    NoObservations { job: String },
    #[error("accelerator `{0}` is not in the relative-speed table; observe the job on it first")]
    UnknownAccelerator(String),
    #[error("the fitted model's curvature matrix is singular")]
    Singular,
}
