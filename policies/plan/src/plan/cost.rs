//! What one configuration costs and when it finishes, with expected spot interruptions priced
//! in, and whether the job alone rules it out (its deadline, its own budget). Numbers only: a
//! plan costs hundreds of thousands of configurations, and strings are made only for those
//! shown (`explain`).

use tern_cloud::{CheckpointSpec, Cloud, Offer, egress_dollars};

use crate::input::{PlanJob, PlanOptions, Throughput, notice_seconds};

/// Cost and time of one configuration, and why it is infeasible (if it is) for this job alone.
/// The numbers of one configuration: `nodes` VMs of `offers[offer]`. Strings for people are
/// made only for what is shown ([`config`](super::explain::config)); a plan over the whole
/// catalog costs hundreds of thousands of these.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Cost {
    pub(super) offer: usize,
    pub(super) nodes: u32,
    pub(super) workers: u32,
    pub(super) hourly: f64,
    pub(super) expected_cost: f64,
    pub(super) finish_h: f64,
    pub(super) finish_high_h: f64,
    pub(super) hazard_per_hour: f64,
    pub(super) prior: bool,
    /// Expected egress in `expected_cost`: the data read at each start, the checkpoint
    /// brought over from another region once.
    pub(super) egress: f64,
}

/// Cost and time of one configuration, and why it is infeasible (if it is) for this job alone.
/// `hazard_per_node` is the offer's interruptions per node-hour (0 for on-demand).
pub(super) fn evaluate_with(
    job: &PlanJob,
    offer_index: usize,
    offer: &Offer,
    nodes: u32,
    hazard_per_node: f64,
    thr: Option<Throughput>,
    options: &PlanOptions,
) -> (Cost, Option<Why>) {
    let workers = offer.accelerator_units() * nodes;
    let mut cost = Cost {
        offer: offer_index,
        nodes,
        workers,
        hourly: offer.price_per_hour * f64::from(nodes),
        expected_cost: f64::INFINITY,
        finish_h: f64::INFINITY,
        finish_high_h: f64::INFINITY,
        // Any node's loss interrupts the gang (all workers restart together).
        hazard_per_hour: hazard_per_node * f64::from(nodes),
        prior: false,
        egress: 0.0,
    };
    let Some(thr) = thr.filter(|t| t.expected > 0.0 && t.pessimistic > 0.0) else {
        let acc_name = offer.accelerator().map_or("", |a| a.name.as_str());
        return (
            cost,
            Some(Why::NoForecast(format!(
                "no throughput forecast for {acc_name} x{workers}"
            ))),
        );
    };
    cost.prior = thr.prior;
    let restart_s = restart_seconds(job, offer, options);
    let finish_high_s = cost.finish(job, thr, restart_s, options.provision_s);
    cost.egress = egress(job, offer, &cost, options);
    cost.expected_cost += cost.egress;
    let why = why_infeasible(job, &cost, finish_high_s);
    (cost, why)
}

/// Expected egress of a configuration: reading the data from another region once per start
/// (the first and each expected restart), and bringing the checkpoint over from the region it
/// lives in once (later restarts find it in the offer's region).
fn egress(job: &PlanJob, offer: &Offer, cost: &Cost, options: &PlanOptions) -> f64 {
    let region = offer.region.as_str();
    let data = job.constraints.data_egress(region, options.egress_per_gb);
    let checkpoint = job.checkpoint_region.as_deref().map_or(0.0, |from| {
        egress_dollars(job.checkpoint.size_gb, options.egress_per_gb, from, region)
    });
    data * (1.0 + cost.hazard_per_hour * cost.finish_h) + checkpoint
}

fn restart_seconds(job: &PlanJob, offer: &Offer, options: &PlanOptions) -> f64 {
    interruption_seconds(&job.checkpoint, offer.cloud, options.provision_s)
}

/// Cost of one interruption on `cloud`, in seconds: a new VM, restore, and the progress since
/// the last checkpoint (half an interval expected; none if the checkpoint can be written within
/// the cloud's notice). The planner and the controller's deadline policy both price it so.
pub fn interruption_seconds(cp: &CheckpointSpec, cloud: Cloud, provision_s: f64) -> f64 {
    let lost = if cp.save_s <= notice_seconds(cloud) {
        0.0
    } else {
        cp.interval_s / 2.0
    };
    provision_s + cp.restore_s + lost
}

impl Cost {
    /// Fill in the finish times and expected cost at throughput `thr`. Returns the pessimistic
    /// finish in seconds, which the deadline test compares unrounded.
    fn finish(&mut self, job: &PlanJob, thr: Throughput, restart_s: f64, provision_s: f64) -> f64 {
        let hazard = self.hazard_per_hour;
        let run_s = job.remaining_samples / thr.expected;
        let run_high_s = job.remaining_samples / thr.pessimistic.min(thr.expected);
        // Expected interruptions over the run stretch it by hazard × restart time per hour.
        let stretch = 1.0 + hazard * restart_s / 3600.0;
        let finish_s = provision_s + run_s * stretch;
        let extra = if hazard > 0.0 { restart_s } else { 0.0 };
        let finish_high_s = provision_s + run_high_s * stretch + extra;
        self.finish_h = finish_s / 3600.0;
        self.finish_high_h = finish_high_s / 3600.0;
        self.expected_cost = self.hourly * finish_s / 3600.0;
        finish_high_s
    }
}

/// Why a configuration is ruled out before the MILP, as numbers: a plan rules out hundreds of
/// thousands, and words are made only for the few a report shows ([`Why::describe`]).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Why {
    NoForecast(String),
    /// Pessimistic and expected finish, and the deadline, in hours from now.
    Deadline {
        high_h: f64,
        expected_h: f64,
        deadline_h: f64,
    },
    JobBudget {
        cost: f64,
        total: f64,
    },
    JobHourlyBudget {
        hourly: f64,
        per_hour: f64,
    },
    /// Needs more of a shared resource (by id) than its whole limit.
    Over {
        resource: usize,
        needs: u32,
    },
}

impl Why {
    /// The sentence a report shows; `label` names a shared resource by id.
    pub(super) fn describe<'l>(&self, label: impl Fn(usize) -> &'l str) -> String {
        match self {
            Why::NoForecast(text) => text.clone(),
            Why::Deadline {
                high_h,
                expected_h,
                deadline_h,
            } => format!(
                "misses the deadline: finishes in {high_h:.1} h at worst ({expected_h:.1} h expected), deadline in {deadline_h:.1} h"
            ),
            Why::JobBudget { cost, total } => {
                format!("over the job budget: ${cost:.2} > ${total:.2}")
            }
            Why::JobHourlyBudget { hourly, per_hour } => {
                format!("over the job budget: ${hourly:.2}/h > ${per_hour:.2}/h")
            }
            Why::Over { resource, needs } => format!("over {}: needs {needs}", label(*resource)),
        }
    }
}

/// The first limit of the job's own that the configuration breaks: the deadline (at the
/// pessimistic finish), then the job's total and hourly budgets.
fn why_infeasible(job: &PlanJob, cost: &Cost, finish_high_s: f64) -> Option<Why> {
    if let Some(d) = job.deadline_s
        && finish_high_s > d
    {
        return Some(Why::Deadline {
            high_h: cost.finish_high_h,
            expected_h: cost.finish_h,
            deadline_h: d / 3600.0,
        });
    }
    if let Some(total) = job.budget.total_usd
        && cost.expected_cost > total
    {
        return Some(Why::JobBudget {
            cost: cost.expected_cost,
            total,
        });
    }
    let hourly = cost.hourly;
    if let Some(per_hour) = job.budget.per_hour_usd
        && hourly > per_hour
    {
        return Some(Why::JobHourlyBudget { hourly, per_hour });
    }
    None
}

/// [`evaluate_with`] for one offer on its own, with the default hazard handling (tests).
#[cfg(test)]
pub(super) fn evaluate(
    job: &PlanJob,
    offer: &Offer,
    nodes: u32,
    options: &PlanOptions,
) -> (Cost, Option<Why>) {
    let acc = offer.accelerator().map_or("", |a| a.name.as_str());
    let hazard = if offer.capacity.is_preemptible() {
        options
            .hazards
            .get(&(offer.zone.0.clone(), offer.instance_type.name.clone()))
            .copied()
            .unwrap_or(options.default_spot_hazard_per_hour)
    } else {
        0.0
    };
    let thr = job.model.throughput(acc, offer.accelerator_units(), nodes);
    evaluate_with(job, 0, offer, nodes, hazard, thr, options)
}
