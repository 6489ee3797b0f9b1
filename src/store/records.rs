//! The records the store keeps, as the controller and the reports read them: jobs (and a
//! cold-start job's probe), instances, pool samples, usage intervals, events, and the
//! snapshot a restarted controller loads.

use super::*;

/// Lifecycle of a job under the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    Pending,
    Running,
    Finished,
    /// No capacity can run it (no offer for its accelerators, or its deadline cannot be met).
    Unplaceable,
    Cancelled,
    /// Its training failed for good on a worker (the agent's restarts ran out); the reason
    /// names the exit status and the last lines of stderr.
    Failed,
    /// Its own budget, or its team's (`on_exhausted = "drain"`), ran out: it checkpointed
    /// and stopped; the reason gives the figures.
    OverBudget,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Finished => "finished",
            JobState::Unplaceable => "unplaceable",
            JobState::Cancelled => "cancelled",
            JobState::Failed => "failed",
            JobState::OverBudget => "over-budget",
        }
    }

    pub(super) fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "pending" => JobState::Pending,
            "running" => JobState::Running,
            "finished" => JobState::Finished,
            "unplaceable" => JobState::Unplaceable,
            "cancelled" => JobState::Cancelled,
            "failed" => JobState::Failed,
            "over-budget" => JobState::OverBudget,
            other => return Err(StoreError::Invalid(format!("unknown job state {other}"))),
        })
    }

    /// Finished, cancelled, failed or over budget: nothing more will run for it.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Finished | JobState::Cancelled | JobState::Failed | JobState::OverBudget
        )
    }
}

/// A job as the controller tracks it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub spec: JobSpec,
    pub state: JobState,
    pub reason: Option<String>,
    pub submitted_at: DateTime<Utc>,
    pub deadline_at: Option<DateTime<Utc>>,
    pub total_samples: f64,
    /// Progress as last reported by the workers (agent).
    pub done_samples: f64,
    /// Progress safe in the last checkpoint: what a restart resumes from.
    pub checkpoint_samples: f64,
    pub checkpoint_at: Option<DateTime<Utc>>,
    /// Set on an interruption notice; the agent checkpoints and clears it.
    pub drain_requested: bool,
    pub target_offer: Option<String>,
    pub target_count: u32,
    /// The size the planner chose; an elastic job resized below it grows back to it.
    pub planned_count: u32,
    pub last_move_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// What the planner expected the job to cost when it first placed it.
    pub planned_cost: Option<f64>,
    /// The job's latest probe (measuring run), if it had one.
    pub probe: Option<ProbeRecord>,
}

/// A probe: the short, bounded run that measures a job nobody had measured. Its window
/// (`probing_since` or `running_at`, to `ended_at` or now while open) is billed as probe spend
/// in cost reports.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProbeRecord {
    pub accelerator: String,
    pub instance_type: String,
    /// Offer key of what it launched on.
    pub offer: String,
    pub nodes: u32,
    pub price_per_hour: f64,
    pub max_seconds: f64,
    pub max_usd: f64,
    /// When it was launched.
    pub started_at: DateTime<Utc>,
    /// When a pass first saw its capacity running: its bounds count from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_at: Option<DateTime<Utc>>,
    /// For a second probe (another accelerator, when it pays): when the first began, so
    /// the job's whole probing is one window of probe spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probing_since: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    /// What the plan did when it ended (kept the probe's shape, moved, measured nothing…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

impl ProbeRecord {
    /// Whether the probe still runs.
    pub fn is_open(&self) -> bool {
        self.ended_at.is_none()
    }

    /// Seconds its capacity ran as a probe (to `now` while open; 0 before it ran).
    pub fn seconds(&self, now: DateTime<Utc>) -> f64 {
        let Some(from) = self.running_at else {
            return 0.0;
        };
        let end = self.ended_at.unwrap_or(now);
        ((end - from).num_milliseconds() as f64 / 1e3).max(0.0)
    }
}

impl JobRecord {
    pub fn new(spec: JobSpec, submitted_at: DateTime<Utc>) -> JobRecord {
        JobRecord {
            deadline_at: spec.deadline.map(|d| d.resolve(submitted_at)),
            total_samples: spec.work.samples() as f64,
            spec,
            state: JobState::Pending,
            reason: None,
            submitted_at,
            done_samples: 0.0,
            checkpoint_samples: 0.0,
            checkpoint_at: None,
            drain_requested: false,
            target_offer: None,
            target_count: 0,
            planned_count: 0,
            last_move_at: None,
            finished_at: None,
            planned_cost: None,
            probe: None,
        }
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }
}

/// An instance the controller launched (or adopted), with its place in the job.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceRecord {
    pub id: InstanceId,
    pub job: String,
    pub intent: IntentId,
    pub offer: std::sync::Arc<Offer>,
    pub state: InstanceState,
    /// A notice said it will be reclaimed: it no longer counts toward the job's fleet.
    pub draining: bool,
    pub launched_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

/// Pool samples kept in the store, in policy ticks (8 days of 5-minute ticks; with other tick
/// lengths the policy's own lookback is what matters, and it is shorter).
pub const POOL_SAMPLE_TICKS: i64 = 8 * 24 * 12;

/// One spot pool's availability at one policy tick (see `controller::policy`).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSample {
    /// `instance_type@zone`.
    pub pool: String,
    pub instance_type: String,
    pub zone: String,
    pub region: String,
    pub tick: i64,
    pub available: u32,
    pub spot_price: f64,
}

/// Most instances `job` started in any 60 minutes of `usage` (what the launch budget bounds).
pub fn most_started_in_an_hour(usage: &[Usage], job: &str) -> u32 {
    let mut starts: Vec<DateTime<Utc>> = usage
        .iter()
        .filter(|u| u.job == job)
        .map(|u| u.started_at)
        .collect();
    starts.sort();
    let hour = chrono::TimeDelta::hours(1);
    (0..starts.len())
        .map(|i| {
            let n = starts[i..]
                .iter()
                .take_while(|t| **t - starts[i] < hour)
                .count();
            u32::try_from(n).unwrap_or(u32::MAX)
        })
        .max()
        .unwrap_or(0)
}

/// Offer key → recorded price changes (time, $/h), oldest first.
pub type PriceLog = BTreeMap<String, Vec<(DateTime<Utc>, f64)>>;

/// One row of the usage table.
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    pub instance: String,
    pub job: String,
    pub offer_key: String,
    pub capacity: Capacity,
    pub price_per_hour: f64,
    pub on_demand_per_hour: Option<f64>,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

impl Usage {
    /// Hours billed up to `now` (or the end of the interval).
    pub fn hours(&self, now: DateTime<Utc>) -> f64 {
        let end = self.ended_at.unwrap_or(now);
        ((end - self.started_at).num_milliseconds().max(0) as f64) / 3_600_000.0
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub job: Option<String>,
    pub kind: String,
    pub message: String,
    /// The typed event as JSON (`controller::Event`); `None` for events stored before it was.
    pub fields: Option<serde_json::Value>,
}

/// Everything a controller needs to resume: live jobs, open intents, live instances.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub jobs: Vec<JobRecord>,
    pub intents: Vec<Intent>,
    pub instances: Vec<InstanceRecord>,
}
