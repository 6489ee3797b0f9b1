//! tern's simulated cloud, a product feature rather than a test mock.
//!
//! - [`trace`]: real spot availability traces (Can't Be Late JSON layout), validated on load.
//! - [`SimCloud`]: a [`tern_cloud::Provider`] on a virtual clock that replays the same traces,
//!   delivers interruption notices with each cloud's lead time, injects capacity, quota,
//!   throttling and transient faults on a seeded schedule, and records every call, so the
//!   controller that drives AWS and GCP can run against it unchanged.
//! - [`Intercepted`]: one scriptable provider in front of another, for tests and drills.

pub mod cloud;
pub mod intercept;
pub mod latency;
#[cfg(any(test, feature = "test-util"))]
pub mod testkit;
pub mod trace;

pub use cloud::{AgentNotice, Call, FaultSchedule, SimCloud, SimQuota, Transfer};
pub use intercept::{Asked, Intercepted, Verdict};
pub use latency::Delayed;
pub use trace::{Trace, TraceError};

/// Errors of the simulator that are not provider errors (those are `tern_cloud::ProviderError`).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("invalid simulation: {reason}")]
    Invalid { reason: String },
}

impl SimError {
    /// Whether the user can fix this by changing arguments (as opposed to a trace file's content).
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, SimError::Invalid { .. })
    }
}
