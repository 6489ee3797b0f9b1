//! Why a job waits, and why an elastic job changes size: what `wait` and `resize` events say.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a job waits for spot instead of paying for on-demand.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum WaitReason {
    /// No deadline: tern never pays on-demand for such a job.
    NoDeadline,
    /// Slack above the reserve ([`tern_policies::fleet::spot_wait`]).
    Slack {
        slack_h: f64,
        left_h: f64,
        work_h: f64,
        reserve_h: f64,
    },
    /// As above, while the job runs on the nodes it still has.
    OnSurvivors {
        why: Box<WaitReason>,
        survivors: u32,
    },
    /// No offer of the job's shape, spot or on-demand.
    NoCapacity,
    /// The deadline policy expects waiting to cost least ([`tern_policies::deadline::Why`]).
    Policy { why: String },
    /// The job launched its hour's budget of instances
    /// ([`tern_policies::capacity::launch_budget`]).
    LaunchBudget { launched: u32, budget: u32 },
    /// A quota, a team budget or the job's own budget holds it back ([`super::room`]).
    Limit { limit: String },
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::NoDeadline => write!(
                f,
                "no spot capacity now; without a deadline tern never pays on-demand"
            ),
            WaitReason::Slack {
                slack_h,
                left_h,
                work_h,
                reserve_h,
            } => write!(
                f,
                "no spot capacity now; waiting: slack {slack_h:.1} h ({left_h:.1} h left, {work_h:.1} h of work) is above the {reserve_h:.1} h reserve"
            ),
            WaitReason::OnSurvivors { why, survivors } => {
                write!(f, "{why}; running on {survivors} survivor(s)")
            }
            WaitReason::NoCapacity => write!(f, "no capacity of the job's shape anywhere"),
            WaitReason::Policy { why } => write!(f, "the deadline policy waits: {why}"),
            WaitReason::LaunchBudget { launched, budget } => write!(
                f,
                "launched {launched} instance(s) in the last hour, at its budget of {budget}; \
                 capacity keeps failing, so it waits instead of launching more"
            ),
            WaitReason::Limit { limit } => write!(f, "held back by a limit: {limit}"),
        }
    }
}

/// Why an elastic job changes size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "why", content = "wait", rename_all = "kebab-case")]
pub enum ResizeWhy {
    /// Down to the survivors while spot is out.
    SpotOut(WaitReason),
    /// Back up: spot of the shape is offered again.
    SpotBack,
}
