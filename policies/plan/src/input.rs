//! What the planner is given. Forecasts arrive through [`ThroughputModel`], so this crate does
//! not depend on how they are made (fitted model, relative-speed prior, a test's table).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tern_cloud::{Budget, Capacity, CheckpointSpec, Cloud, Constraints, Offer, WorkerRange};

/// Predicted training throughput of one configuration, samples per second.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Throughput {
    pub expected: f64,
    /// A pessimistic (low) throughput: the deadline test uses it.
    pub pessimistic: f64,
    /// No observation of this job backs the number (a relative-speed prior).
    pub prior: bool,
}

/// Predicts a job's throughput on `nodes` VMs with `per_node` accelerators of one type.
pub trait ThroughputModel: Send + Sync + std::fmt::Debug {
    fn throughput(&self, accelerator: &str, per_node: u32, nodes: u32) -> Option<Throughput>;
}

/// A job as the planner sees it: what remains to do, by when, and on what.
#[derive(Debug, Clone)]
pub struct PlanJob {
    pub name: String,
    pub team: String,
    pub remaining_samples: f64,
    /// Seconds from now; `None` = no deadline.
    pub deadline_s: Option<f64>,
    /// Accelerator names allowed (matched case-insensitively against offers).
    pub accelerators: Vec<String>,
    /// Allowed total accelerators (GPUs or TPU chips) across all nodes.
    pub workers: WorkerRange,
    pub gang: bool,
    pub checkpoint: CheckpointSpec,
    pub budget: Budget,
    /// Higher is placed first when resources are short.
    pub priority: i32,
    pub model: Arc<dyn ThroughputModel>,
    /// Where it may run; a configuration on an offer it rules out is never considered.
    pub constraints: Constraints,
    /// Region of the checkpoint it resumes from (`None`: nothing to resume). A start in
    /// another region pays once to bring it over (`checkpoint.size_gb` × `egress_per_gb`).
    pub checkpoint_region: Option<String>,
}

/// An account limit on accelerators: e.g. 64 A100 (any size) in aws/us-east-1, spot only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    pub cloud: Cloud,
    /// `None` = every region of the cloud together.
    #[serde(default)]
    pub region: Option<String>,
    /// Accelerator family (`A100` covers `A100-80GB`; `tpu-v5p` covers every v5p slice).
    pub family: String,
    /// `None` = spot and on-demand together.
    #[serde(default)]
    pub capacity: Option<Capacity>,
    /// Units (see `unit`) allowed at once.
    pub limit: u32,
    /// What `limit` counts: accelerators of `family` (the default), or the vCPUs of the
    /// instance classes `family` names (AWS counts its GPU quotas so: `family = "p"` covers
    /// p3, p4d and p5; `"g,vt"` covers g5 and vt1).
    #[serde(default)]
    pub unit: QuotaUnit,
}

/// What a [`Quota`]'s limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QuotaUnit {
    #[default]
    Accelerators,
    Vcpus,
    /// Accelerators of exactly the model `family` names (GCP counts `A100-80GB` apart from
    /// `A100`).
    Model,
}

impl Quota {
    /// What one VM of `offer` uses of this quota; `None` when the offer does not count
    /// against it. The planner and the controller's accounting both ask this.
    pub fn per_node(&self, offer: &Offer) -> Option<u32> {
        let scoped = self.cloud == offer.cloud
            && self
                .region
                .as_deref()
                .is_none_or(|r| r == offer.region.as_str())
            && self.capacity.is_none_or(|c| c == offer.capacity);
        if !scoped {
            return None;
        }
        match self.unit {
            QuotaUnit::Accelerators => {
                let a = offer.accelerator()?;
                a.family()
                    .eq_ignore_ascii_case(&self.family)
                    .then(|| offer.accelerator_units())
            }
            QuotaUnit::Model => {
                let a = offer.accelerator()?;
                a.name
                    .eq_ignore_ascii_case(&self.family)
                    .then(|| offer.accelerator_units())
            }
            QuotaUnit::Vcpus => {
                let class = instance_class(&offer.instance_type.name);
                self.family
                    .split(',')
                    .any(|c| c.trim().eq_ignore_ascii_case(class))
                    .then(|| offer.instance_type.vcpus.ceil() as u32)
            }
        }
    }

    /// The quota with `used` units already taken (its limit what is left, at least 0).
    pub fn less(&self, used: u32) -> Quota {
        Quota {
            limit: self.limit.saturating_sub(used),
            ..self.clone()
        }
    }

    /// Whether `other` limits the same thing (cloud, region, family, capacity, unit).
    pub fn same_scope(&self, other: &Quota) -> bool {
        self.cloud == other.cloud
            && self.region == other.region
            && self.family.eq_ignore_ascii_case(&other.family)
            && self.capacity == other.capacity
            && self.unit == other.unit
    }
}

/// The letters before an instance type's generation digit: `p4d.24xlarge` → `p`,
/// `vt1.3xlarge` → `vt`, `a2-highgpu-1g` → `a`.
fn instance_class(name: &str) -> &str {
    let end = name
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(name.len());
    &name[..end]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Objective {
    /// Minimise expected total cost; deadlines are constraints.
    #[default]
    Cost,
    /// Finish soonest, within budgets and deadlines.
    Time,
}

#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub objective: Objective,
    /// HiGHS time limit; the greedy answers if it runs out with nothing better.
    pub time_limit: Duration,
    /// Seconds from a launch request to a VM running the job's first step.
    pub provision_s: f64,
    /// Spot interruptions per node-hour when no history is known. 0.1/h (one interruption per
    /// ten node-hours) sits inside the range measured on real GPU spot traces: the V100
    /// availability traces of Can't Be Late show runs between losses from about 2 h (busy
    /// zones) to well over a day, and AWS's Spot Advisor puts most GPU types in its
    /// ">20 % per month" band. Callers with availability history pass `hazards` instead.
    pub default_spot_hazard_per_hour: f64,
    /// Interruptions per node-hour by (zone, instance type), learned from history.
    pub hazards: HashMap<(String, String), f64>,
    /// After pruning, keep at most this many configurations per job (cheapest first).
    pub max_candidates_per_job: usize,
    /// Alternatives listed per job in the explanation.
    pub alternatives: usize,
    pub use_milp: bool,
    /// Team budgets ($ total and $/h) by team name.
    pub team_budgets: BTreeMap<String, Budget>,
    pub quotas: Vec<Quota>,
    /// Cross-region egress, USD per GB: a job whose data lives elsewhere pays it on every
    /// start (the first and each expected restart); a job whose checkpoint lives elsewhere
    /// pays it once.
    pub egress_per_gb: f64,
    /// How much teams' shares weigh against cost (0 = cost only); see `plan::shares`.
    pub fairness: f64,
    /// Each team's weight in the pool (1 when absent).
    pub team_weights: BTreeMap<String, f64>,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self {
            objective: Objective::Cost,
            time_limit: Duration::from_secs(5),
            provision_s: 300.0,
            default_spot_hazard_per_hour: 0.1,
            hazards: HashMap::new(),
            max_candidates_per_job: 48,
            alternatives: 3,
            use_milp: true,
            team_budgets: BTreeMap::new(),
            quotas: Vec::new(),
            egress_per_gb: tern_cloud::EGRESS_DOLLARS_PER_GB,
            fairness: 0.0,
            team_weights: BTreeMap::new(),
        }
    }
}

/// How long the cloud warns before reclaiming spot capacity (DESIGN.md §5).
pub fn notice_seconds(cloud: Cloud) -> f64 {
    match cloud {
        Cloud::Aws | Cloud::Sim => 120.0,
        Cloud::Gcp => 30.0,
    }
}
