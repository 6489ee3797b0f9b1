//! The JSON of `GET /v1/jobs/NAME/decisions` and `tern explain --json`: a job's decision
//! timeline, built once by `timeline` in the controller's `explain` module.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One job's decisions, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub job: String,
    pub decisions: Vec<DecisionView>,
}

/// One decision: when, what kind, the reason the controller gave and the numbers it compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionView {
    pub at: DateTime<Utc>,
    /// `plan`, `launch`, `wait`, `move`, `resize`, `fallback`, `notice`, and the rest of a
    /// job's life (`replace`, `regroup`, `preempted`, `probe`, `finish`…).
    pub kind: String,
    pub reason: String,
    /// The figures the decision compared, by name (hours `_h`, dollars per hour `_per_h`).
    pub numbers: BTreeMap<String, f64>,
    /// A move's net saving as the move rule expected it, in dollars; `null` for other kinds.
    pub expected_saving: Option<f64>,
    /// A move's saving as it turned out, in dollars; `null` until it can be known.
    pub realised_saving: Option<f64>,
}
