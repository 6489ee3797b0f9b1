//! The API's wire types: what `/v1` serves and accepts, shared by the server, the CLI, the
//! agent and (later) the Terraform provider. Field names are a public interface.

pub mod costs;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A job as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobStatus {
    pub name: String,
    pub team: String,
    pub state: String,
    pub reason: Option<String>,
    pub progress: f64,
    pub done_samples: f64,
    pub checkpoint_samples: f64,
    pub total_samples: f64,
    pub submitted_at: DateTime<Utc>,
    pub deadline_at: Option<DateTime<Utc>>,
    pub instances: usize,
    pub spot_instances: usize,
    pub dollars_per_hour: f64,
}

/// Progress reported by a worker agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Progress {
    pub done_samples: f64,
    pub checkpoint_samples: f64,
    /// True when this report follows a checkpoint the controller asked for (drain).
    #[serde(default)]
    pub checkpointed: bool,
    /// A measured step (step time at a shape): refits the job's throughput forecast.
    #[serde(default)]
    pub observation: Option<tern_cloud::Observation>,
}

/// What the controller answers a progress report with: whether to checkpoint now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProgressReply {
    pub drain: bool,
    pub state: String,
    /// What the controller adjusted in the report, and why (e.g. `done_samples` below the
    /// last checkpoint); empty when it was taken as sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clamped: Vec<String>,
}

/// One entry of the event log (`GET /v1/events`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventView {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub job: Option<String>,
    pub kind: String,
    pub message: String,
}

/// The body of every error answer: `{"error": "..."}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}
