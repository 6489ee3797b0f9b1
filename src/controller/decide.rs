//! Decisions as values. The phases gather a read-only view of one job (its instances, the
//! offers it may use, the deadline policy's step, the spot-wait rule's answer, the on-demand
//! pick) and ask a pure function here what to do; the answer is a [`Decision`] that the phase
//! then carries out (intents, then cloud calls, then store writes, then events:
//! `Controller::carry_out`).
//!
//! [`capacity`] is the one question a first launch, a replacement of lost nodes and a spot
//! request waiting in the cloud's queue all ask: "spot, on-demand, or wait?", answered from the
//! deadline policy's step where the job has a deadline, else from the spot-wait rule
//! ([`fleet::spot_wait`]). [`replace`] and [`grow`] decide for a running job short of nodes.
//!
//! [`fleet::spot_wait`]: tern_policies::fleet::spot_wait

use tern_cloud::{Availability, Capacity, InstanceId, Offer, Zone};
use tern_policies::deadline::Placement as Policy;

use super::events::{ResizeWhy, WaitReason};
use super::policy::PolicyCall;
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

/// Whether any spot offer of `shape` is among `offers` (the ones a job's constraints allow),
/// with capacity now or not: waiting for spot makes sense only then. An on-demand-only job,
/// or one whose allowed zones sell no spot, runs on on-demand at once.
pub(super) fn spot_allowed(offers: &[Offer], shape: &str) -> bool {
    offers
        .iter()
        .any(|o| o.capacity == Capacity::Spot && o.instance_type.name == shape)
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
}

/// Decide. `spot_wait` is asked only when the answer depends on it: it is the spot-wait rule's
/// reason to wait, or `None` when the deadline needs on-demand now.
pub(super) fn capacity(
    call: Option<&PolicyCall>,
    spot: SpotNow,
    spot_wait: impl FnOnce() -> Option<WaitReason>,
) -> CapacityCall {
    if let Some(call) = call {
        let why = Some(call.why());
        return match call.step.placement {
            Policy::Idle => CapacityCall::Wait(WaitReason::Policy { why: call.why() }),
            Policy::OnDemand => CapacityCall::OnDemand { why },
            p => CapacityCall::Spot {
                zone: call.zone(p).cloned(),
                why,
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
        None => CapacityCall::OnDemand { why: None },
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
    /// The on-demand pick (`on_demand_pool`), in the zone of the job's first node and
    /// anywhere.
    pub on_demand_here: Vec<Offer>,
    pub on_demand_anywhere: Vec<Offer>,
}

/// What the controller does about one job this pass.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Decision {
    Nothing,
    /// Wait for spot (reported once per reason).
    Wait(WaitReason),
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
    /// Change an elastic job's size, then go on with `then`.
    Resize {
        from: u32,
        to: u32,
        why: ResizeWhy,
        then: Box<Decision>,
    },
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
    };
    let on_demand = if v.gang {
        &v.on_demand_here
    } else {
        &v.on_demand_anywhere
    };
    match capacity(v.policy.as_ref(), spot, || v.spot_wait.clone()) {
        CapacityCall::Wait(wait) => without_spot(v, missing, wait),
        CapacityCall::OnDemand { .. } if v.gang && v.policy.is_some() => gang_on_demand(v),
        CapacityCall::OnDemand { .. } => launch(on_demand.clone(), missing, true),
        CapacityCall::Spot { .. } if v.policy.is_none() => {
            launch(spot_list.into_iter().cloned().collect(), missing, false)
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
            launch(list.into_iter().cloned().collect(), missing, false)
        }
    }
}

fn launch(offers: Vec<Offer>, missing: u32, on_demand: bool) -> Decision {
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
    let then = launch(list.clone(), v.target.saturating_sub(kept), true);
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

#[cfg(test)]
mod tests {
    use super::*;
    use tern_policies::deadline::Step;

    fn call(placement: Policy) -> PolicyCall {
        PolicyCall {
            step: Step {
                placement,
                wanted: placement,
                why: None,
            },
            zones: vec![Zone::new("a"), Zone::new("b")],
            now: Policy::Idle,
        }
    }

    fn slack() -> Option<WaitReason> {
        Some(WaitReason::NoDeadline)
    }

    const OFFERED: SpotNow = SpotNow {
        offered: true,
        allowed: true,
    };
    const OUT: SpotNow = SpotNow {
        offered: false,
        allowed: true,
    };
    const NEVER: SpotNow = SpotNow {
        offered: false,
        allowed: false,
    };

    /// One row per branch: the policy's step where there is one (whatever spot looks like),
    /// else spot when offered, else the spot-wait rule, unless spot is not allowed at all.
    #[test]
    fn each_branch_of_the_capacity_decision() {
        let why = Some(call(Policy::OnDemand).why());
        let rows: Vec<(
            Option<PolicyCall>,
            SpotNow,
            Option<WaitReason>,
            CapacityCall,
        )> = vec![
            (
                Some(call(Policy::Idle)),
                OFFERED,
                None,
                CapacityCall::Wait(WaitReason::Policy {
                    why: call(Policy::Idle).why(),
                }),
            ),
            (
                Some(call(Policy::OnDemand)),
                OFFERED,
                slack(),
                CapacityCall::OnDemand { why: why.clone() },
            ),
            (
                Some(call(Policy::Spot(1))),
                NEVER,
                None,
                CapacityCall::Spot {
                    zone: Some(Zone::new("b")),
                    why: why.clone(),
                },
            ),
            (
                None,
                OFFERED,
                None,
                CapacityCall::Spot {
                    zone: None,
                    why: None,
                },
            ),
            (
                None,
                OUT,
                slack(),
                CapacityCall::Wait(WaitReason::NoDeadline),
            ),
            (None, OUT, None, CapacityCall::OnDemand { why: None }),
            (None, NEVER, slack(), CapacityCall::OnDemand { why: None }),
        ];
        for (k, (policy, spot, wait, want)) in rows.into_iter().enumerate() {
            assert_eq!(capacity(policy.as_ref(), spot, || wait), want, "row {k}");
        }
    }

    /// The spot-wait rule is not consulted where it cannot change the answer.
    #[test]
    fn the_wait_rule_is_asked_only_when_it_decides() {
        for (policy, spot) in [
            (Some(call(Policy::Idle)), OUT),
            (None, OFFERED),
            (None, NEVER),
        ] {
            capacity(policy.as_ref(), spot, || panic!("asked"));
        }
    }

    use crate::store::InstanceRecord;
    use tern_cloud::testkit::offer;
    use tern_cloud::{Capacity, InstanceState, IntentId, Offer};

    const SHAPE: &str = "p3.2xlarge";

    fn node(id: &str, zone: &str, capacity: Capacity) -> InstanceRecord {
        InstanceRecord {
            id: id.into(),
            job: "j".into(),
            intent: IntentId::from_uuid(uuid::Uuid::nil()),
            offer: offer(SHAPE, zone, capacity).build(),
            state: InstanceState::Running,
            draining: false,
            launched_at: chrono::DateTime::UNIX_EPOCH,
            ended_at: None,
        }
    }

    fn od(zone: &str) -> Offer {
        offer(SHAPE, zone, Capacity::OnDemand).price(3.06).build()
    }

    /// A job of `target` nodes running `live`, with spot of its shape offered in `spot`.
    fn running<'a>(
        offers: &'a [Offer],
        live: Vec<InstanceRecord>,
        target: u32,
        gang: bool,
    ) -> Running<'a> {
        Running {
            gang,
            held: live.iter().map(|i| i.id.clone()).collect(),
            live,
            target,
            min_nodes: 1,
            offers,
            policy: None,
            spot_wait: Some(WaitReason::NoDeadline),
            on_demand_here: vec![od("a-1a")],
            on_demand_anywhere: vec![od("a-1b"), od("a-1a")],
        }
    }

    fn spot(zone: &str) -> Offer {
        offer(SHAPE, zone, Capacity::Spot).build()
    }

    fn short(d: &Decision) -> String {
        match d {
            Decision::Nothing => "nothing".into(),
            Decision::Wait(w) => format!("wait {w}"),
            Decision::Replace {
                offers,
                missing,
                on_demand,
            } => format!(
                "replace {missing} on {} ({})",
                offers[0].zone,
                if *on_demand { "od" } else { "spot" }
            ),
            Decision::Regroup {
                release,
                anew,
                then,
                ..
            } => format!(
                "regroup {} anew={anew}, then {}",
                release.len(),
                short(then)
            ),
            Decision::Resize { from, to, then, .. } => {
                format!("resize {from}->{to}, then {}", short(then))
            }
        }
    }

    /// One row per branch of `replace` and `grow`, on plain values.
    #[test]
    fn each_branch_of_a_running_jobs_decision() {
        let with_spot = [spot("a-1a"), od("a-1a")];
        let no_spot = [
            offer(SHAPE, "a-1a", Capacity::Spot)
                .availability(tern_cloud::Availability::Unavailable)
                .build(),
            od("a-1a"),
        ];
        let od_only = [od("a-1a")];
        let spot_elsewhere = [spot("a-1c"), od("a-1a")];
        let two = || {
            vec![
                node("i-1", "a-1a", Capacity::Spot),
                node("i-2", "a-1a", Capacity::Spot),
            ]
        };
        let policy = |p: Policy| Some(call(p));
        type Row<'a> = (&'a str, Running<'a>, &'a str);
        let mut rows: Vec<Row<'_>> = vec![
            (
                "nothing missing",
                running(&with_spot, two(), 2, false),
                "nothing",
            ),
            (
                "spot offered",
                running(&with_spot, two(), 3, false),
                "replace 1 on a-1a (spot)",
            ),
            (
                "no spot, slack: the elastic job shrinks to its survivors",
                running(&no_spot, two(), 3, false),
                "resize 3->2, then wait",
            ),
            (
                "no spot, slack: a gang gives its zone back",
                running(&no_spot, two(), 3, true),
                "regroup 2 anew=true, then nothing",
            ),
        ];
        let mut deadline = running(&no_spot, two(), 3, false);
        deadline.spot_wait = None;
        rows.push((
            "no spot, the deadline needs on-demand",
            deadline,
            "replace 1 on a-1b (od)",
        ));
        let mut gang_od = running(&with_spot, two(), 3, true);
        gang_od.policy = policy(Policy::OnDemand);
        rows.push((
            "the policy sends a gang to on-demand: its spot nodes go too",
            gang_od,
            "regroup 2 anew=false, then replace 3 on a-1b (od)",
        ));
        let mut moved = running(&spot_elsewhere, two(), 3, true);
        moved.policy = policy(Policy::Spot(0));
        rows.push((
            "the policy names another zone for a gang",
            moved,
            "regroup 2 anew=true, then nothing",
        ));
        let mut idle = running(&with_spot, two(), 3, false);
        idle.policy = policy(Policy::Idle);
        rows.push(("the policy waits", idle, "resize 3->2, then wait"));
        let mut few = running(&no_spot, two(), 3, false);
        few.min_nodes = 3;
        rows.push(("below its minimum it only waits", few, "wait"));
        let mut nowhere = running(&no_spot, two(), 3, false);
        nowhere.spot_wait = None;
        nowhere.on_demand_anywhere.clear();
        rows.push(("no capacity at all", nowhere, "wait no capacity"));
        rows.push((
            "spot is not allowed at all: on-demand at once",
            running(&od_only, two(), 3, false),
            "replace 1 on a-1b (od)",
        ));
        for (what, view, want) in rows {
            let got = short(&replace(&view));
            assert!(got.starts_with(want), "{what}: got {got:?}, want {want:?}");
        }
        assert_eq!(
            short(&grow(SHAPE, &with_spot, 2, 4)),
            "resize 2->4, then nothing"
        );
        assert_eq!(grow(SHAPE, &no_spot, 2, 4), Decision::Nothing);
        assert_eq!(grow(SHAPE, &with_spot, 4, 4), Decision::Nothing);
    }
}
