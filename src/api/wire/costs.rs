//! The JSON of cost reports: `GET /v1/costs` and `tern cost-report --format json`. Field
//! names are a public interface (README "Cost reports" documents each).

use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// How rows are grouped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupBy {
    #[default]
    Job,
    Team,
    Day,
    Cloud,
    Capacity,
    InstanceType,
}

impl GroupBy {
    pub const ALL: [GroupBy; 6] = [
        GroupBy::Job,
        GroupBy::Team,
        GroupBy::Day,
        GroupBy::Cloud,
        GroupBy::Capacity,
        GroupBy::InstanceType,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Job => "job",
            GroupBy::Team => "team",
            GroupBy::Day => "day",
            GroupBy::Cloud => "cloud",
            GroupBy::Capacity => "capacity",
            GroupBy::InstanceType => "instance-type",
        }
    }
}

impl FromStr for GroupBy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        GroupBy::ALL
            .into_iter()
            .find(|g| g.as_str() == s)
            .ok_or_else(|| {
                let all: Vec<&str> = GroupBy::ALL.iter().map(|g| g.as_str()).collect();
                format!("unknown grouping '{s}'; expected one of {}", all.join(", "))
            })
    }
}

/// What to report on: the `tern cost-report` flags and `GET /v1/costs` query parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CostQuery {
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    #[serde(default)]
    pub by: GroupBy,
    pub job: Option<String>,
    pub team: Option<String>,
    /// Hide jobs that never launched an instance.
    #[serde(default)]
    pub launched_only: bool,
    /// Also list every instance of every job (its segments across recoveries and moves).
    #[serde(default)]
    pub split: bool,
}

/// One row: a job, team, day, cloud, capacity type or instance type (`key`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CostRow {
    pub key: String,
    /// The job's state (rows by job only).
    pub state: Option<String>,
    /// Why the job is in its state, when it is not running (unplaceable, missed deadline).
    pub reason: Option<String>,
    pub jobs: usize,
    pub instances: usize,
    pub instance_hours: f64,
    pub spot_hours: f64,
    /// Dollars billed, at the prices that held.
    pub cost: f64,
    /// Of `cost`, the dollars billed inside the jobs' probe windows (from when a probe's
    /// capacity ran to its end, or now while open): what measuring cold jobs cost. Part of
    /// `cost`, not added to it; 0 for jobs without a probe. Defaulted: older servers omit it.
    #[serde(default)]
    pub probe_usd: f64,
    /// The same instance-hours at the on-demand price of the same type and zone.
    pub on_demand_cost: f64,
    /// `on_demand_cost - cost`.
    pub savings: f64,
    /// `savings / on_demand_cost × 100` (0 with no usage).
    pub savings_pct: f64,
    /// Spot instance-hours ÷ instance-hours (0 with no usage).
    pub spot_share: f64,
    /// The planner's estimate for the whole job when it first placed it (summed over jobs).
    pub planned_cost: Option<f64>,
    /// `cost - planned_cost`: the forecast error in dollars.
    pub plan_error: Option<f64>,
    /// `cost − planned_cost` split by cause (rows by job or team, and the total); null for
    /// other groupings and for a job that neither was planned nor cost anything. Defaulted:
    /// older servers omit it.
    #[serde(default)]
    pub attribution: Option<Attribution>,
}

/// Why actual cost differs from the plan: additive parts, in dollars, that sum to
/// `cost − planned_cost` (a job never planned counts as planned at $0). Each is zero when its
/// cause is absent; `report::attribution` defines them (README "Where the dollars went").
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    /// Productive node-hours against the node-hours the plan paid for, at the plan's price.
    pub forecast: f64,
    /// Prices in force against prices at plan time, for the hours that ran.
    pub prices: f64,
    /// Replacements of reclaimed nodes: their boot, restore and redone work, and the price
    /// difference of the pool they ran in.
    pub interruptions: f64,
    /// tern's own moves, resizes and placements elsewhere than planned: checkpoint restore and
    /// overlap, less (or plus) the price difference of the pools moved to.
    pub moves: f64,
    /// On-demand hours bought where the plan said spot (to keep a deadline).
    pub fallback: f64,
    /// Spend inside the job's probe window.
    pub probe: f64,
}

impl Attribution {
    /// The parts' names, in the order reports show them.
    pub const PARTS: [&'static str; 6] = [
        "forecast",
        "prices",
        "interruptions",
        "moves",
        "fallback",
        "probe",
    ];

    /// Each part with its name, in [`Self::PARTS`] order.
    pub fn parts(&self) -> [(&'static str, f64); 6] {
        [
            ("forecast", self.forecast),
            ("prices", self.prices),
            ("interruptions", self.interruptions),
            ("moves", self.moves),
            ("fallback", self.fallback),
            ("probe", self.probe),
        ]
    }

    /// The sum of the parts: `cost − planned_cost`.
    pub fn total(&self) -> f64 {
        self.parts().iter().map(|(_, v)| v).sum()
    }

    /// Part-wise sum (a team's or the total's, over its jobs).
    pub fn add(&mut self, other: &Attribution) {
        self.forecast += other.forecast;
        self.prices += other.prices;
        self.interruptions += other.interruptions;
        self.moves += other.moves;
        self.fallback += other.fallback;
        self.probe += other.probe;
    }
}

impl CostRow {
    /// `cost − probe_usd`: what the row cost besides probing.
    pub fn rest_usd(&self) -> f64 {
        self.cost - self.probe_usd
    }
}

/// One instance of a job: a segment of its run between interruptions, moves and resizes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    pub job: String,
    pub instance: String,
    pub cloud: String,
    pub zone: String,
    pub instance_type: String,
    pub capacity: String,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    pub billed_hours: f64,
    pub cost: f64,
    pub on_demand_cost: f64,
}

/// Spend of one day by capacity type (the HTML report's stacked bars).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DayCost {
    pub day: String,
    pub spot: f64,
    pub on_demand: f64,
}

/// The length of the report's time buckets, chosen from its span (`report::buckets`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BucketUnit {
    Hour,
    #[default]
    Day,
    Week,
}

impl BucketUnit {
    pub fn as_str(self) -> &'static str {
        match self {
            BucketUnit::Hour => "hour",
            BucketUnit::Day => "day",
            BucketUnit::Week => "week",
        }
    }
}

/// Spend of one time bucket by capacity type: `[start, start + one unit)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BucketCost {
    pub start: DateTime<Utc>,
    /// `2026-11-23 14:00`, `2026-11-23` or `2026-W48` (ISO week, from Monday 00:00 UTC).
    pub label: String,
    pub spot: f64,
    pub on_demand: f64,
}

/// Where spend is heading: from the report's end (`from`, `spent`) at `per_hour` until the
/// latest deadline of its unfinished jobs (`until`, `dollars`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    pub from: DateTime<Utc>,
    pub spent: f64,
    pub per_hour: f64,
    pub until: DateTime<Utc>,
    pub dollars: f64,
}

/// A team against its budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamBudget {
    pub team: String,
    /// Billed up to the report's end, since the beginning (budgets are not windowed).
    pub spent: f64,
    pub budget_usd: Option<f64>,
    pub budget_per_hour_usd: Option<f64>,
    pub left: Option<f64>,
    /// $/h of the team's instances running at the report's end.
    pub burn_per_hour: f64,
    /// The latest deadline of the team's unfinished jobs.
    pub deadline: Option<DateTime<Utc>>,
    /// `spent + burn_per_hour × hours to deadline`.
    pub projected_at_deadline: Option<f64>,
}

/// A cost report; its JSON is a public interface (README "Cost reports").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostReport {
    pub generated_at: DateTime<Utc>,
    pub since: Option<DateTime<Utc>>,
    pub until: DateTime<Utc>,
    pub by: GroupBy,
    pub rows: Vec<CostRow>,
    pub total: CostRow,
    pub segments: Vec<Segment>,
    pub days: Vec<DayCost>,
    pub budgets: Vec<TeamBudget>,
    /// The unit of `buckets`: hours for a span under 3 days, days under 8 weeks, else weeks.
    /// Defaulted (as are `buckets` and `projection`): older servers omit them.
    #[serde(default)]
    pub bucket: BucketUnit,
    /// Spend per bucket, every bucket from the first billed piece to the report's end.
    #[serde(default)]
    pub buckets: Vec<BucketCost>,
    /// None without a deadline ahead among the report's unfinished jobs, or with nothing billed.
    #[serde(default)]
    pub projection: Option<Projection>,
}
