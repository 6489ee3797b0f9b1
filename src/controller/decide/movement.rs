//! Whether a running job moves: the cheaper-spot rule without a deadline, the deadline
//! policy's wish with one (re-exported by [`super`], so callers say `decide::movement`).

use tern_cloud::{Availability, Capacity, Offer};
use tern_policies::deadline::Placement as Policy;
use tern_policies::fleet::{self, MoveInput, Node, Target};

use super::{Decision, pool};
use crate::controller::fallbacks;
use crate::controller::policy::PolicyCall;
use crate::store::InstanceRecord;

/// The move the controller starts: which nodes leave, for which offer, and why.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::controller) struct MoveStep {
    pub movers: Vec<InstanceRecord>,
    /// $/h of the movers now.
    pub from_rate: f64,
    pub to: Offer,
    pub net_saving: f64,
    pub work_h: f64,
    pub policy: Option<String>,
}

/// What the move decision reads about a running job.
#[derive(Debug, Clone)]
pub(in crate::controller) struct Moving<'a> {
    pub gang: bool,
    pub deadline: bool,
    /// The running nodes with their price now, dearest first ([`dearest_first`]).
    pub running: Vec<(InstanceRecord, f64)>,
    /// Every node the job holds (the disruption budget is a share of it).
    pub fleet_nodes: u32,
    pub offers: &'a [Offer],
    /// The deadline policy's step (jobs with a deadline).
    pub policy: Option<PolicyCall>,
    /// Samples per second at the expected speed, if the job can be forecast.
    pub speed: Option<f64>,
    pub remaining_samples: f64,
    pub hours_left: Option<f64>,
    pub budget_fraction: f64,
    pub restart_h: f64,
    pub hours_since_last_move: Option<f64>,
    pub checkpoint_gb: f64,
    /// Egress $/GB across regions (the controller's one rate, [`tern_plan::PlanOptions`]'s).
    pub egress_per_gb: f64,
    pub constraints: &'a tern_cloud::Constraints,
    /// On-demand $/h of one node of the shape (the move rule's floor).
    pub on_demand_rate: f64,
    /// The on-demand pick, where the policy asks for on-demand.
    pub on_demand: Vec<Offer>,
}

/// `running` dearest first, on-demand before spot (the order the move rule considers nodes
/// in): the first names the shape, the gang's zone and the on-demand price to compare with.
pub(in crate::controller) fn dearest_first(
    running: Vec<(InstanceRecord, f64)>,
) -> Vec<(InstanceRecord, f64)> {
    let order = fleet::dearest_first(&nodes_of(&running, None));
    let mut slots: Vec<Option<(InstanceRecord, f64)>> = running.into_iter().map(Some).collect();
    order.into_iter().filter_map(|k| slots[k].take()).collect()
}

/// Whether a running job moves. With a deadline, where the deadline policy wants it (spot in
/// another zone, back from on-demand to spot, or onto on-demand when the deadline needs it; a
/// disruption budget of nodes per check, a gang whole). Without one, to cheaper spot when
/// [`fleet::plan_move`] says the saving beats the cost of moving; never onto on-demand.
pub(in crate::controller) fn movement(v: &Moving<'_>) -> Decision {
    let step = if v.deadline { by_policy(v) } else { by_rule(v) };
    let Some(step) = step else {
        return Decision::Nothing;
    };
    let mut to = vec![step.to.clone()];
    if !v.gang {
        to.extend(fallbacks(v.offers, &step.to));
    }
    Decision::Move {
        step: Box::new(step),
        of: v.fleet_nodes,
        to,
    }
}

impl Moving<'_> {
    fn work_h(&self) -> f64 {
        fleet::work_hours(self.remaining_samples, self.speed.unwrap_or(0.0))
    }

    /// The move rule's input for moving to `best` (both paths read the same one).
    fn input<'n>(&self, nodes: &'n [Node], best: &Offer) -> MoveInput<'n> {
        let work_h = self.work_h();
        MoveInput {
            nodes,
            fleet_nodes: self.fleet_nodes,
            target: target_of(best),
            gang: self.gang,
            budget_fraction: self.budget_fraction,
            work_h,
            restart_h: self.restart_h,
            slack_h: self.hours_left.map_or(f64::INFINITY, |h| h - work_h),
            hours_since_last_move: self.hours_since_last_move,
            checkpoint_gb: self.checkpoint_gb,
            egress_per_gb: self.egress_per_gb,
            data_egress: self
                .constraints
                .data_egress(best.region.as_str(), self.egress_per_gb),
            on_demand_rate: self.on_demand_rate,
        }
    }
}

fn by_rule(v: &Moving<'_>) -> Option<MoveStep> {
    let first = &v.running.first()?.0.offer;
    let zone = v.gang.then_some(&first.zone);
    let best = (*pool(v.offers, &first.instance_type.name, Capacity::Spot, zone).first()?).clone();
    v.speed?;
    let nodes = nodes_of(&v.running, Some(&best));
    let plan = fleet::plan_move(&v.input(&nodes, &best)).ok()?;
    Some(MoveStep {
        movers: plan
            .movers
            .iter()
            .map(|&k| v.running[k].0.clone())
            .collect(),
        from_rate: plan.current_rate,
        to: best,
        net_saving: plan.net_saving,
        work_h: v.work_h(),
        policy: None,
    })
}

fn by_policy(v: &Moving<'_>) -> Option<MoveStep> {
    let first = &v.running.first()?.0.offer;
    let call = v.policy.as_ref()?;
    let want = call.step.placement;
    if want == call.now || want == Policy::Idle {
        return None;
    }
    let best = match want {
        Policy::OnDemand => v.on_demand.first()?.clone(),
        p => (*pool(
            v.offers,
            &first.instance_type.name,
            Capacity::Spot,
            call.zone(p),
        )
        .first()?)
        .clone(),
    };
    let nodes = nodes_of(&v.running, Some(&best));
    let picked: Vec<usize> = if v.gang {
        (0..nodes.len()).filter(|&i| !nodes[i].in_target).collect()
    } else {
        fleet::movers(&v.input(&nodes, &best), |_| true)
    };
    if picked.is_empty() {
        return None;
    }
    Some(MoveStep {
        movers: picked.iter().map(|&k| v.running[k].0.clone()).collect(),
        from_rate: picked.iter().map(|&i| nodes[i].price).sum(),
        to: best,
        net_saving: match call.step.why.and_then(|w| w.moved) {
            Some(tern_policies::migrate::Decision::Move { net_saving }) => net_saving,
            _ => 0.0,
        },
        work_h: v.work_h(),
        policy: Some(call.why()),
    })
}

/// A pool as the move rule sees it: its price and, when the cloud says, its room.
fn target_of(offer: &Offer) -> Target {
    Target {
        price: offer.price_per_hour,
        room: match offer.availability {
            Availability::Available(Some(k)) => Some(k),
            _ => None,
        },
    }
}

/// The running nodes as the move rule sees them, against the target pool `best`.
fn nodes_of(running: &[(InstanceRecord, f64)], best: Option<&Offer>) -> Vec<Node> {
    running
        .iter()
        .map(|(i, price)| Node {
            price: *price,
            on_demand: i.offer.capacity == Capacity::OnDemand,
            in_target: best.is_some_and(|b| i.offer.key() == b.key()),
            other_region: best.is_some_and(|b| i.offer.region != b.region),
        })
        .collect()
}
