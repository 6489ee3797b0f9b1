//! Candidate configurations: for each job, every (offer, node count) it may run on, costed and
//! checked against the job's own limits and the shared ones it would break alone. Offers are
//! indexed once per plan, since a plan over the whole catalog makes hundreds of thousands of
//! configurations.

use std::collections::{HashMap, HashSet};

use tern_cloud::{Availability, Offer};

use super::cost::{Cost, Why, evaluate_with};
use super::resources::{Resources, TeamIds};
use super::{Entry, Status};
use crate::input::{Objective, PlanJob, PlanOptions, Throughput};

/// Per-offer facts every configuration on an offer shares.
pub(super) struct OfferIndex {
    /// Offers by lower-cased accelerator name, so each job scans only what it may use.
    by_accelerator: HashMap<String, Vec<usize>>,
    /// Indices into [`PlanOptions::quotas`] of the quotas each offer counts against.
    quotas: Vec<Vec<(usize, u32)>>,
    /// Spot interruptions per node-hour of each offer (0 for on-demand).
    hazard: Vec<f64>,
}

impl OfferIndex {
    pub(super) fn new(offers: &[Offer], options: &PlanOptions) -> OfferIndex {
        let mut index = OfferIndex {
            by_accelerator: HashMap::new(),
            quotas: vec![Vec::new(); offers.len()],
            hazard: vec![0.0; offers.len()],
        };
        for (i, o) in offers.iter().enumerate() {
            if matches!(o.availability, Availability::Unavailable) {
                continue;
            }
            let Some(a) = o.accelerator() else { continue };
            index
                .by_accelerator
                .entry(a.name.to_ascii_lowercase())
                .or_default()
                .push(i);
            if !options.quotas.is_empty() {
                index.quotas[i] = quotas_of(o, options);
            }
            if o.capacity.is_preemptible() {
                index.hazard[i] = spot_hazard(o, options);
            }
        }
        index
    }

    /// Offers with one of `job`'s accelerators, in the job's order of accelerators.
    fn offers_for(&self, job: &PlanJob) -> Vec<usize> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for name in &job.accelerators {
            if !seen.insert(name.to_ascii_lowercase()) {
                continue;
            }
            out.extend(
                self.by_accelerator
                    .get(&name.to_ascii_lowercase())
                    .into_iter()
                    .flatten(),
            );
        }
        out
    }
}

/// The quotas offer `o` counts against, by index, with what one VM of it uses of each.
fn quotas_of(o: &Offer, options: &PlanOptions) -> Vec<(usize, u32)> {
    options
        .quotas
        .iter()
        .enumerate()
        .filter_map(|(k, q)| Some((k, q.per_node(o)?)))
        .collect()
}

/// Interruptions per node-hour of a spot offer: learned for its zone and type, else the default.
fn spot_hazard(o: &Offer, options: &PlanOptions) -> f64 {
    // Without history, skip building the lookup key.
    if options.hazards.is_empty() {
        options.default_spot_hazard_per_hour
    } else {
        options
            .hazards
            .get(&(o.zone.0.clone(), o.instance_type.name.clone()))
            .copied()
            .unwrap_or(options.default_spot_hazard_per_hour)
    }
}

/// Every configuration of `job`, by offer then node count, with its status, its use of shared
/// resources and its objective value. Registers the resources they need.
pub(super) fn of_job<'a>(
    job: &'a PlanJob,
    offers: &'a [Offer],
    index: &OfferIndex,
    resources: &mut Resources<'a>,
    options: &PlanOptions,
) -> Vec<Entry> {
    let team = resources.team(job, options);
    // Throughput depends on the shape, not on the zone or price: forecast each shape once.
    let mut throughputs: HashMap<(&str, u32, u32), Option<Throughput>> = HashMap::new();
    let mut list = Vec::new();
    for i in index.offers_for(job) {
        let offer = &offers[i];
        if !job.constraints.allows(offer) {
            continue;
        }
        let per_node = offer.accelerator_units();
        let acc = offer.accelerator().map_or("", |a| a.name.as_str());
        for nodes in node_counts(job, per_node) {
            let thr = *throughputs
                .entry((acc, per_node, nodes))
                .or_insert_with(|| job.model.throughput(acc, per_node, nodes));
            let (cost, infeasible) =
                evaluate_with(job, i, offer, nodes, index.hazard[i], thr, options);
            let (usage, over) = usage(&cost, offer, index, team, resources, options);
            let objective = match options.objective {
                Objective::Cost => cost.expected_cost,
                Objective::Time => cost.finish_h,
            };
            let status = match infeasible.or(over) {
                Some(reason) => Status::Infeasible(reason),
                None => Status::Candidate,
            };
            list.push((cost, status, usage, objective));
        }
    }
    list
}

/// What one configuration uses of each shared resource (quotas, the offer's cap, the team's
/// budgets), and the first of those limits it breaks on its own.
fn usage(
    cost: &Cost,
    offer: &Offer,
    index: &OfferIndex,
    team: Option<TeamIds>,
    resources: &mut Resources<'_>,
    options: &PlanOptions,
) -> (Vec<(usize, f64)>, Option<Why>) {
    let mut usage = Vec::new();
    let mut over = None;
    for &(q, per_node) in &index.quotas[cost.offer] {
        let limit = options.quotas[q].limit;
        let needs = per_node * cost.nodes;
        if needs > limit {
            over.get_or_insert(Why::Over {
                resource: resources.quota(q),
                needs,
            });
        }
        usage.push((resources.quota(q), f64::from(needs)));
    }
    if let Availability::Available(Some(cap)) = offer.availability {
        let nodes = cost.nodes;
        let id = resources.cap(cost.offer, offer, cap);
        if nodes > cap {
            over.get_or_insert(Why::Over {
                resource: id,
                needs: nodes,
            });
        }
        usage.push((id, f64::from(nodes)));
    }
    if let Some((total, hourly)) = team {
        if let Some(id) = total {
            usage.push((id, cost.expected_cost));
        }
        if let Some(id) = hourly {
            usage.push((id, cost.hourly));
        }
    }
    (usage, over)
}

/// Node counts worth considering: those whose accelerators fit `workers`, thinned to the
/// ends of the range and the powers of two between (throughput is smooth in the count, and
/// data-parallel jobs are usually sized in powers of two).
pub(super) fn node_counts(job: &PlanJob, per_node: u32) -> Vec<u32> {
    if per_node == 0 {
        return Vec::new();
    }
    let lo = job.workers.min.div_ceil(per_node).max(1);
    let hi = job.workers.max / per_node;
    sizes_between(lo, hi)
}

/// `lo`, `hi` and the powers of two strictly between them, ascending; empty when `lo > hi`.
pub fn sizes_between(lo: u32, hi: u32) -> Vec<u32> {
    if lo > hi {
        return Vec::new();
    }
    let mut out = vec![lo];
    let mut p = 1u32;
    while p < hi {
        if p > lo {
            out.push(p);
        }
        p = p.saturating_mul(2);
    }
    if hi > lo {
        out.push(hi);
    }
    out
}
