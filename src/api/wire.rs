//! The API's wire types: what `/v1` serves and accepts, shared by the server, the CLI, the
//! agent and (later) the Terraform provider. Field names are a public interface.

pub mod access;
pub mod costs;
pub mod decisions;

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
    /// The job's live instances (not ended), draining ones included: what an agent passes as
    /// `--instance-id`.
    #[serde(default)]
    pub instance_ids: Vec<String>,
    /// The job's forecast where it runs (or would run first); `None` for a job that ended.
    #[serde(default)]
    pub forecast: Option<JobForecast>,
    /// What its workers run (the spec's `[run]`); env values are shown only to admins and the
    /// job's team (`<redacted>` for its agents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<tern_cloud::run::RunSpec>,
    /// Why the job is not running as planned now (a limit, the deadline policy, no capacity),
    /// and since when; absent once it runs or ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
}

/// A job's current wait, as the last pass saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiting {
    pub reason: String,
    pub since: DateTime<Utc>,
}

impl JobStatus {
    /// As `who` may see it: env values redacted unless it is an admin or of the job's team.
    pub fn for_caller(&self, may_read_secrets: bool) -> std::borrow::Cow<'_, JobStatus> {
        match &self.run {
            Some(r) if !may_read_secrets && !r.env.is_empty() => {
                let mut shown = self.clone();
                shown.run = Some(r.redacted());
                std::borrow::Cow::Owned(shown)
            }
            _ => std::borrow::Cow::Borrowed(self),
        }
    }
}

/// A job's throughput forecast at one shape, and what it stands on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobForecast {
    pub accelerator: String,
    /// Accelerators in all.
    pub gpus: u32,
    pub nodes: u32,
    /// Expected seconds per step; `None` when `basis` is `none`.
    pub step_seconds: Option<f64>,
    pub samples_per_second: Option<f64>,
    /// `measured` | `bootstrap` | `prior` | `hint` | `none`.
    pub basis: String,
    /// Steps measured on this accelerator (the spec's and the agents' reports).
    pub observations: usize,
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
    /// The incarnation of the workers that made this report (`POST /v1/jobs/{name}/start`
    /// gave it). A report from any other incarnation is refused (409) and moves nothing.
    #[serde(default)]
    pub incarnation: Option<u64>,
    /// The instance the reporting agent runs on.
    #[serde(default)]
    pub instance: Option<String>,
    /// The agent's workers are all gone: this is their last report in this incarnation.
    #[serde(default)]
    pub stopped: bool,
    /// Set with `stopped` when the workers failed for good (restarts exhausted): the exit
    /// status and the last lines of their stderr. The job fails with it as its reason.
    #[serde(default)]
    pub failure: Option<String>,
    /// Set with `stopped` when the agent stopped the workers because they made no progress
    /// for its hang timeout (they are restarted from the checkpoint).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hung: bool,
    /// Set with `stopped` when the workers exited by themselves with a failure status (they
    /// are restarted from the checkpoint). A node whose workers crash or hang alone (another
    /// node's stopped as asked) in three incarnations in a row is quarantined: drained,
    /// released and replaced.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub crashed: bool,
}

/// `POST /v1/jobs/{name}/start`: an agent asks to start the job's workers on its instance.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StartRequest {
    pub instance: String,
    /// The node's address (its private IP), for jobs whose nodes must find each other
    /// (`[run] node_env = "skypilot"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// The incarnation the agent's workers run as, and the shape they run on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StartReply {
    pub incarnation: u64,
    /// The instance's accelerator and how many it has, as the controller launched it.
    pub accelerator: Option<String>,
    pub gpus_per_node: Option<u32>,
    /// This node's rank in its incarnation: 0 for the node that opened it, then in the order
    /// the nodes started.
    #[serde(default)]
    pub node_rank: u32,
    /// How many nodes the job runs on (its workers over the instance's accelerators).
    #[serde(default)]
    pub nodes: Option<u32>,
    /// The addresses the incarnation's nodes gave, from rank 0 to this node's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_addresses: Vec<String>,
}

/// What an agent must do with its workers when the controller refuses a start or a report
/// (the `action` of a 409 answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Another incarnation is not fenced yet: ask again shortly.
    Wait,
    /// These workers are stale (an older incarnation, or told to restart): kill them now,
    /// then ask to start again.
    Stop,
    /// Nothing more of this job runs here, as planned (it finished or was cancelled, or
    /// this instance is drained): stop the workers and exit 0.
    Done,
    /// Nothing of this job may run here (not one of its instances, the job failed): stop
    /// the workers and exit with the error.
    Exit,
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
    /// Stop these workers (checkpoint signal, grace, kill) and ask to start again: another
    /// node of their incarnation stopped, so every worker restarts as a new one.
    #[serde(default)]
    pub stop: bool,
}

/// One entry of the event log (`GET /v1/events`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventView {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub job: Option<String>,
    pub kind: String,
    pub message: String,
    /// The event's typed fields (`event` = `kind`), absent for events from before they were
    /// stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<serde_json::Value>,
}

/// The body of every error answer: `{"error": "..."}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    /// On a refused start or progress report (409): what the agent must do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
    /// On a 503 from a controller that does not lead (deposed, or on standby): the leader's
    /// URL, when it is known. Clients send the request there instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
}
