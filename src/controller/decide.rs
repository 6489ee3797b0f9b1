//! Decisions as values. The phases gather a read-only view of one job (its instances, the
//! offers it may use, the deadline policy's step, the spot-wait rule's answer, the on-demand
//! pick) and ask a pure function here what to do; the answer is a [`Decision`] that
//! `Controller::carry_out` carries out (its event, its intent before the cloud, the store).
//!
//! [`capacity`] is the one question a first launch, a replacement of lost nodes and a spot
//! request waiting in the cloud's queue all ask: "spot, on-demand, or wait?", answered from the
//! deadline policy's step where the job has a deadline, else from the spot-wait rule
//! ([`fleet::spot_wait`]). Over it: [`launch`] (a placed job), [`replace`] and [`grow`] (a
//! running job short of nodes), [`movement`] (a running job that may move) and [`queued`] (a
//! spot request in the cloud's queue).
//!
//! [`fleet::spot_wait`]: tern_policies::fleet::spot_wait

use chrono::{DateTime, Utc};
use tern_cloud::{Availability, Capacity, InstanceId, InstanceState, Offer, Zone};
use tern_policies::deadline::Placement as Policy;

use super::budget::Stop;
use super::events::{ResizeWhy, WaitReason};
use super::policy::PolicyCall;
use super::probe::{ProbeEnd, ProbeStart};
use crate::store::InstanceRecord;

/// Offers of `shape` and `capacity` that are not known to be unavailable, cheapest first;
/// `zone` pins a gang to where its nodes run.
pub(super) fn pool<'a>(
    offers: &'a [Offer],
    shape: &str,
    capacity: Capacity,
    zone: Option<&Zone>,
) -> Vec<&'a Offer> {
    let mut v: Vec<&Offer> = offers
        .iter()
        .filter(|o| {
            o.instance_type.name == shape
                && o.capacity == capacity
                && !matches!(o.availability, Availability::Unavailable)
                && zone.is_none_or(|z| &o.zone == z)
        })
        .collect();
    v.sort_by(|a, b| a.price_per_hour.total_cmp(&b.price_per_hour));
    v
}

/// `offers` as one job sees them when it plans its whole fleet anew: the cloud leaves every
/// instance already running out of what a spot pool still offers, but the job's own (`mine`,
/// not draining) are its to keep, so they count as room in their pool. Another job's
/// instances still count against it.
pub(super) fn with_own_room(offers: &[Offer], mine: &[&InstanceRecord]) -> Vec<Offer> {
    let mut out = offers.to_vec();
    for o in out.iter_mut().filter(|o| o.capacity == Capacity::Spot) {
        let key = o.key();
        let own = mine
            .iter()
            .filter(|i| !i.draining && i.offer.key() == key)
            .count() as u32;
        if own == 0 {
            continue;
        }
        o.availability = match o.availability {
            Availability::Unavailable => Availability::Available(Some(own)),
            Availability::Available(Some(n)) => Availability::Available(Some(n + own)),
            other => other,
        };
    }
    out
}

/// Whether any spot offer of `shape` is among `offers` (the ones a job's constraints allow),
/// with capacity now or not: waiting for spot makes sense only then. An on-demand-only job,
/// or one whose allowed zones sell no spot, runs on on-demand at once.
pub(super) fn spot_allowed(offers: &[Offer], shape: &str) -> bool {
    offers
        .iter()
        .any(|o| o.capacity == Capacity::Spot && o.instance_type.name == shape)
}

/// Whether any on-demand offer of `shape` is among `offers` (the ones a job's constraints
/// allow).
pub(super) fn on_demand_allowed(offers: &[Offer], shape: &str) -> bool {
    offers
        .iter()
        .any(|o| o.capacity == Capacity::OnDemand && o.instance_type.name == shape)
}

/// The answer.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum CapacityCall {
    /// Spot, in `zone` first where the policy names one.
    Spot {
        zone: Option<Zone>,
        why: Option<String>,
    },
    /// On-demand now: the deadline needs it, or spot was never an option.
    OnDemand { why: Option<String> },
    /// Neither: wait for spot, for this reason.
    Wait(WaitReason),
}

/// What the decision reads besides the policy's step.
#[derive(Debug, Clone, Copy)]
pub(super) struct SpotNow {
    /// Spot of the job's shape has room now (the planner chose it, or the pool lists it).
    pub offered: bool,
    /// The job's constraints allow spot of its shape at all (an on-demand-only job never
    /// waits for it).
    pub allowed: bool,
    /// The job's constraints allow on-demand of its shape: a spot-only job takes spot where
    /// the deadline policy would take on-demand (waiting for what it may not buy only
    /// misses the deadline for sure).
    pub on_demand: bool,
}

/// Decide. `spot_wait` is asked only when the answer depends on it: it is the spot-wait rule's
/// reason to wait, or `None` when the deadline needs on-demand now.
pub(super) fn capacity(
    call: Option<&PolicyCall>,
    spot: SpotNow,
    spot_wait: impl FnOnce() -> Option<WaitReason>,
) -> CapacityCall {
    if let Some(call) = call {
        let why = call.why();
        return match call.step.placement {
            Policy::Idle => CapacityCall::Wait(WaitReason::Policy { why }),
            // Where it runs now, if on spot: a gang stays in its zone.
            Policy::OnDemand if !spot.on_demand => CapacityCall::Spot {
                zone: call.zone(call.now).cloned(),
                why: Some(format!("{why}; the job allows no on-demand: spot")),
            },
            Policy::OnDemand => CapacityCall::OnDemand { why: Some(why) },
            p => CapacityCall::Spot {
                zone: call.zone(p).cloned(),
                why: Some(why),
            },
        };
    }
    if spot.offered {
        return CapacityCall::Spot {
            zone: None,
            why: None,
        };
    }
    match spot.allowed.then(spot_wait).flatten() {
        Some(wait) => CapacityCall::Wait(wait),
        None if spot.allowed && !spot.on_demand => CapacityCall::Spot {
            zone: None,
            why: None,
        },
        None => CapacityCall::OnDemand { why: None },
    }
}

/// What a placed job's launch reads: the planner's choice, and the rest as for [`Running`].
#[derive(Debug, Clone)]
pub(super) struct Launching<'a> {
    /// The offer the planner chose, and how many nodes.
    pub planned: Offer,
    pub nodes: u32,
    pub gang: bool,
    pub offers: &'a [Offer],
    pub policy: Option<PolicyCall>,
    /// The spot-wait rule's reason to wait at the plan's pessimistic finish.
    pub spot_wait: Option<WaitReason>,
    /// The on-demand pick, where the policy asks for on-demand.
    pub on_demand: Vec<Offer>,
}

/// Launch a job the planner placed. Without a deadline policy the planner's offer stands
/// (unless it is on-demand and the spot-wait rule says to wait); the policy names a pool:
/// spot in its zone, on-demand, or waiting.
pub(super) fn launch(v: &Launching<'_>) -> Decision {
    let shape = v.planned.instance_type.name.as_str();
    let spot = SpotNow {
        offered: v.planned.capacity == Capacity::Spot,
        allowed: spot_allowed(v.offers, shape),
        on_demand: on_demand_allowed(v.offers, shape),
    };
    let (to, why) = match capacity(v.policy.as_ref(), spot, || v.spot_wait.clone()) {
        CapacityCall::Wait(wait) => return Decision::Wait(wait),
        CapacityCall::OnDemand { why } | CapacityCall::Spot { why, .. } if v.policy.is_none() => {
            (Some(v.planned.clone()), why)
        }
        CapacityCall::OnDemand { why } => (v.on_demand.first().cloned(), why),
        CapacityCall::Spot { zone, why } => {
            let to = pool(v.offers, shape, Capacity::Spot, zone.as_ref());
            match to.first() {
                Some(o) => (Some((*o).clone()), why),
                // The policy's zone has no room now (a notice struck its pool, which the
                // policy's history cannot know yet): the planner's spot pick, if it has one.
                None if v.planned.capacity == Capacity::Spot => {
                    let why = why.map(|w| match &zone {
                        Some(z) => format!("{w}; {z} has no room now: the planner's spot pick"),
                        None => w,
                    });
                    (Some(v.planned.clone()), why)
                }
                None => (None, why),
            }
        }
    };
    let Some(to) = to else {
        return Decision::Wait(WaitReason::NoCapacity);
    };
    let mut offers = vec![to.clone()];
    if !v.gang {
        offers.extend(super::fallbacks(v.offers, &to));
    }
    Decision::Launch {
        offers,
        count: v.nodes,
        why,
        planned: None,
    }
}

/// The planner's choice for a job, or, where it placed none, the job is unplaceable, saying
/// why.
pub(super) fn chosen(jp: &tern_plan::JobPlan) -> Result<&tern_plan::Config, Decision> {
    jp.choice.as_ref().filter(|_| jp.placed).ok_or_else(|| {
        let reason = jp.reason.as_deref().unwrap_or("no feasible configuration");
        Decision::Unplaceable {
            reason: reason.to_string(),
        }
    })
}

/// A spot request waiting in the cloud's queue (a TPU queued resource) is cancelled once the
/// job's deadline needs on-demand now: the same question as a launch, for a request spot has
/// no room for yet.
pub(super) fn queued(
    request: &InstanceRecord,
    policy: Option<&PolicyCall>,
    spot_wait: Option<WaitReason>,
    on_demand: bool,
) -> Decision {
    let waiting = SpotNow {
        offered: false,
        allowed: true,
        on_demand,
    };
    match capacity(policy, waiting, || spot_wait) {
        CapacityCall::OnDemand { .. } => Decision::CancelQueued {
            id: request.id.clone(),
            offer: request.offer.key(),
        },
        _ => Decision::Nothing,
    }
}

/// What a running job's decision reads: gathered by the phase, read here only.
#[derive(Debug, Clone)]
pub(super) struct Running<'a> {
    pub gang: bool,
    /// Nodes that count toward the fleet (not draining), in id order.
    pub live: Vec<InstanceRecord>,
    /// Every instance the job holds, draining ones too.
    pub held: Vec<InstanceId>,
    pub target: u32,
    /// The job's minimum nodes on its shape (elastic jobs run on survivors down to it).
    pub min_nodes: u32,
    /// The offers the job's constraints allow.
    pub offers: &'a [Offer],
    /// The deadline policy's step (jobs with a deadline).
    pub policy: Option<PolicyCall>,
    /// The spot-wait rule's reason to wait at the job's pessimistic speed; `None` when the
    /// deadline needs on-demand now.
    pub spot_wait: Option<WaitReason>,
    /// The on-demand pick (`on_demand_pool`), in the zone of the job's first node (read for a
    /// gang only) and anywhere.
    pub on_demand_here: Vec<Offer>,
    pub on_demand_anywhere: Vec<Offer>,
}

/// What the controller does about one job this pass.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Decision {
    Nothing,
    /// Take a node that straggles or keeps failing out of its job for good (`reason` in
    /// words): drained now, released once its workers stopped, replaced like a lost node.
    Quarantine {
        id: InstanceId,
        reason: String,
    },
    /// Wait for spot (reported once per reason).
    Wait(WaitReason),
    /// Start a placed job's `count` nodes on the first of `offers` that takes them (`why`:
    /// the deadline policy's reasons, for the plan's event).
    Launch {
        offers: Vec<Offer>,
        count: u32,
        why: Option<String>,
        /// The plan it carries out: once the launch is admitted, the job aims at it and its
        /// `plan` event is reported.
        planned: Option<Box<super::events::Placement>>,
    },
    /// Start `missing` nodes of a running job on the first of `offers` that takes them.
    Replace {
        offers: Vec<Offer>,
        missing: u32,
        on_demand: bool,
    },
    /// Give `release` back, then go on with `then`. `anew`: the whole gang goes, to be placed
    /// again from nothing.
    Regroup {
        zone: Zone,
        release: Vec<InstanceId>,
        anew: bool,
        then: Box<Decision>,
    },
    /// Move `step.movers` to the first of `to` that takes them (`of`: the job's nodes).
    Move {
        step: Box<MoveStep>,
        of: u32,
        to: Vec<Offer>,
    },
    /// Terminate what a job holds (it finished or was cancelled).
    Release {
        ids: Vec<InstanceId>,
    },
    /// Cancel a spot request waiting in the cloud's queue: the deadline needs on-demand now.
    CancelQueued {
        id: InstanceId,
        offer: String,
    },
    /// Change an elastic job's size, then go on with `then`.
    Resize {
        from: u32,
        to: u32,
        why: ResizeWhy,
        then: Box<Decision>,
    },
    /// A budget the job spends from is at 80 % (a team's names no job): the warning, once.
    WarnBudget {
        scope: &'static str,
        budget: String,
        spent: f64,
        limit: f64,
    },
    /// A budget reaches its end within the lead: the job checkpoints and stops (`drain`: ask
    /// its workers to, as it holds capacity and has not been asked).
    StopForBudget {
        stop: Stop,
        spent: f64,
        drain: bool,
    },
    /// The budget stop is over (its checkpoint came, it holds nothing, or the limit is
    /// reached): end the job over budget, or hold it, releasing `release`. `closed`: the job
    /// ended meanwhile, and only the stop is closed.
    EndForBudget {
        stop: Stop,
        spent: f64,
        release: Vec<InstanceId>,
        closed: bool,
    },
    /// A job about to be placed whose own budget cannot pay for the rest of its work: it
    /// ends over budget now (it holds nothing).
    EndOverBudget {
        reason: String,
        limit: f64,
    },
    /// The job's work is done: it is finished (`late_h`: hours past its deadline; `took_h`:
    /// since it was submitted), then `then` (what it holds goes).
    Finish {
        late_h: Option<f64>,
        took_h: f64,
        then: Box<Decision>,
    },
    /// A launch not running after the launch timeout (`after`): terminated by intent, and its
    /// offer avoided.
    TimeOut {
        id: InstanceId,
        offer: String,
        after: std::time::Duration,
    },
    /// An owned instance nothing accounts for, past the leak grace: terminated by intent.
    CollectLeak {
        id: InstanceId,
    },
    /// A job nobody has measured is planned on its hint without a probe, for `why` (said
    /// once, and noted in its plans' events).
    PlanCold {
        why: String,
    },
    /// No plan can place the job: it is unplaceable, saying why (once per reason).
    Unplaceable {
        reason: String,
    },
    /// Measure a job nobody has measured (or a second accelerator of one): a probe.
    Probe(Box<ProbeStart>),
    /// A probe is over: close it, then what its measurement leads to.
    EndProbe(Box<ProbeEnd>),
    /// Move the whole probe fleet `from` onto the plan's choice (`to`, its first, then
    /// fallbacks), `count` nodes; `migrating`: the move's event.
    MoveFromProbe {
        from: Vec<InstanceId>,
        to: Vec<Offer>,
        count: u32,
        migrating: Option<Box<super::events::Event>>,
    },
}

/// A job that finished its work or ended, as its end is decided.
#[derive(Debug, Clone)]
pub(super) struct Ending {
    /// Its work is done and it is not marked ended yet.
    pub finishing: bool,
    pub deadline_at: Option<DateTime<Utc>>,
    pub submitted_at: DateTime<Utc>,
    /// What it holds.
    pub held: Vec<InstanceId>,
    /// Its workers still run there, saving on the way out, within the stop grace: what it
    /// holds is kept until they say they stopped.
    pub saving: bool,
    pub now: DateTime<Utc>,
}

/// The end of a job: finished (when its work is done), then what it holds released unless
/// its workers are still saving.
pub(super) fn end(v: &Ending) -> Decision {
    let release = if v.held.is_empty() || v.saving {
        Decision::Nothing
    } else {
        Decision::Release {
            ids: v.held.clone(),
        }
    };
    if !v.finishing {
        return release;
    }
    let hours = super::hours;
    Decision::Finish {
        late_h: v
            .deadline_at
            .filter(|d| v.now > *d)
            .map(|d| hours(v.now - d)),
        took_h: hours(v.now - v.submitted_at),
        then: Box::new(release),
    }
}

/// A launch still pending `timeout` after it was made times out (one already being
/// terminated is left to its intent).
pub(super) fn timed_out(
    i: &InstanceRecord,
    (now, timeout): (DateTime<Utc>, std::time::Duration),
    terminating: bool,
) -> Decision {
    let late = chrono::TimeDelta::from_std(timeout).is_ok_and(|t| now - i.launched_at > t);
    if i.state != tern_cloud::InstanceState::Pending || !late || terminating {
        return Decision::Nothing;
    }
    Decision::TimeOut {
        id: i.id.clone(),
        offer: i.offer.key(),
        after: timeout,
    }
}

/// A node of job `job` found straggling or failing (`reason`) is quarantined, unless the job
/// has ended or the node is gone, another job's, ended or already draining.
pub(super) fn quarantine(
    job: &str,
    node: Option<&InstanceRecord>,
    job_ended: bool,
    reason: String,
) -> Decision {
    let Some(i) = node else {
        return Decision::Nothing;
    };
    if job_ended || i.job != job || i.draining || i.state == InstanceState::Terminated {
        return Decision::Nothing;
    }
    Decision::Quarantine {
        id: i.id.clone(),
        reason,
    }
}

/// An instance nothing accounts for, first seen unaccounted at `first`, is collected once the
/// leak grace has passed (one already being terminated is left to its intent).
pub(super) fn leak(
    id: &InstanceId,
    (first, now, grace): (DateTime<Utc>, DateTime<Utc>, std::time::Duration),
    terminating: bool,
) -> Decision {
    let past = chrono::TimeDelta::from_std(grace).is_ok_and(|g| now - first >= g);
    if !past || terminating {
        return Decision::Nothing;
    }
    Decision::CollectLeak { id: id.clone() }
}

/// A running job short of nodes: replace them (spot of its shape first; on-demand only when
/// the deadline needs it; a gang only in its zone), or run on what it has, or give a gang back.
pub(super) fn replace(v: &Running<'_>) -> Decision {
    let Some(first) = v.live.first().map(|i| &i.offer) else {
        return Decision::Nothing;
    };
    let n_live = v.live.len() as u32;
    let missing = v.target.saturating_sub(n_live);
    if missing == 0 {
        return Decision::Nothing;
    }
    let zone = v.gang.then_some(&first.zone);
    let shape = first.instance_type.name.as_str();
    let spot_list = pool(v.offers, shape, Capacity::Spot, zone);
    let spot = SpotNow {
        offered: !spot_list.is_empty(),
        allowed: spot_allowed(v.offers, shape),
        on_demand: on_demand_allowed(v.offers, shape),
    };
    let on_demand = if v.gang {
        &v.on_demand_here
    } else {
        &v.on_demand_anywhere
    };
    match capacity(v.policy.as_ref(), spot, || v.spot_wait.clone()) {
        CapacityCall::Wait(wait) => without_spot(v, missing, wait),
        CapacityCall::OnDemand { .. } if v.gang && v.policy.is_some() => gang_on_demand(v),
        CapacityCall::OnDemand { .. } => top_up(on_demand.clone(), missing, true),
        CapacityCall::Spot { .. } if v.policy.is_none() => {
            top_up(spot_list.into_iter().cloned().collect(), missing, false)
        }
        CapacityCall::Spot { zone: want, why } => {
            let wait = WaitReason::Policy {
                why: why.unwrap_or_default(),
            };
            // A gang's zone is gone: it gives its survivors back to start whole elsewhere.
            if v.gang && want.as_ref() != Some(&first.zone) {
                return without_spot(v, missing, wait);
            }
            let mut list = spot_list;
            list.sort_by_key(|o| Some(&o.zone) != want.as_ref());
            if list.is_empty() {
                // Spot holds the survivors but has no room for more: run on them.
                return without_spot(v, missing, wait);
            }
            top_up(list.into_iter().cloned().collect(), missing, false)
        }
    }
}

fn top_up(offers: Vec<Offer>, missing: u32, on_demand: bool) -> Decision {
    if offers.is_empty() {
        return Decision::Wait(WaitReason::NoCapacity);
    }
    Decision::Replace {
        offers,
        missing,
        on_demand,
    }
}

/// The deadline needs a gang on on-demand: all of it, as the policy's job is all on one
/// capacity. Spot survivors are released too (the gang restarts on the new nodes anyway), or
/// each of their reclaims would restart it again with no slack left to pay for it.
fn gang_on_demand(v: &Running<'_>) -> Decision {
    let Some(first) = v.live.first().map(|i| &i.offer) else {
        return Decision::Nothing;
    };
    let spot: Vec<InstanceId> = v
        .live
        .iter()
        .filter(|i| i.offer.capacity == Capacity::Spot)
        .map(|i| i.id.clone())
        .collect();
    let kept = v.live.len() as u32 - spot.len() as u32;
    // On-demand survivors pin the gang's zone; with none, any zone will do.
    let list = if kept > 0 {
        &v.on_demand_here
    } else {
        &v.on_demand_anywhere
    };
    let then = top_up(list.clone(), v.target.saturating_sub(kept), true);
    if spot.is_empty() || list.is_empty() {
        return then;
    }
    Decision::Regroup {
        zone: first.zone.clone(),
        release: spot,
        anew: false,
        then: Box::new(then),
    }
}

/// No spot of the shape and the deadline allows waiting. A gang cannot run short: it gives its
/// zone back to be placed anew. An elastic job goes on with its survivors when they are at
/// least its minimum (the agents' torchrun re-rendezvous at the smaller size) and grows back
/// when spot returns ([`grow`]).
fn without_spot(v: &Running<'_>, missing: u32, wait: WaitReason) -> Decision {
    let Some(first) = v.live.first().map(|i| &i.offer) else {
        return Decision::Nothing;
    };
    if v.gang {
        return Decision::Regroup {
            zone: first.zone.clone(),
            release: v.held.clone(),
            anew: true,
            then: Box::new(Decision::Nothing),
        };
    }
    let n_live = v.live.len() as u32;
    let surviving = Decision::Wait(WaitReason::OnSurvivors {
        why: Box::new(wait.clone()),
        survivors: n_live,
    });
    if n_live < v.min_nodes.max(1) {
        return surviving;
    }
    Decision::Resize {
        from: n_live + missing,
        to: n_live,
        why: ResizeWhy::SpotOut(wait),
        then: Box::new(surviving),
    }
}

/// An elastic job resized below its planned size grows back once spot of its shape is offered
/// again: a resize to the planned size (the replacement follows from the new target).
pub(super) fn grow(shape: &str, offers: &[Offer], target: u32, planned: u32) -> Decision {
    let back = !pool(offers, shape, Capacity::Spot, None).is_empty();
    if !back || planned <= target {
        return Decision::Nothing;
    }
    Decision::Resize {
        from: target,
        to: planned,
        why: ResizeWhy::SpotBack,
        then: Box::new(Decision::Nothing),
    }
}

mod movement;
pub(super) use movement::{MoveStep, Moving, dearest_first, movement};

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
