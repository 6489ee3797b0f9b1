//! tern's fleet planner (DESIGN.md §4.2): which instance type, zone, capacity type and how many
//! instances for each job, minimising expected total cost under deadlines, quotas, availability
//! caps and budgets.
//!
//! Pure and synchronous: the caller passes offers, forecasts and time (as "seconds from now")
//! in; no IO. A separate crate from `tern-policies` so that the native HiGHS build (minutes)
//! is not a dependency of the light policies.

mod hazard;
mod input;
mod plan;
pub mod problem;
pub mod solve;

pub use hazard::hazard_per_hour;
pub use input::{
    Objective, PlanJob, PlanOptions, Quota, QuotaUnit, Throughput, ThroughputModel, notice_seconds,
};
pub use plan::{
    Alternative, CandidateCounts, Config, JobPlan, PlanReport, TeamShare, interruption_seconds,
    plan, sizes_between,
};
pub use problem::{Assignment, Choice, Fairness, Problem, TeamTerm};
pub use solve::{Solved, SolverKind, greedy, solve};
