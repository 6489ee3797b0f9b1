//! Which capacity a job's next nodes take, decided once. A first launch, a replacement of lost
//! nodes and a spot request waiting in the cloud's queue all ask the same question: "spot,
//! on-demand, or wait?". It is answered here, as a value, from the deadline policy's step
//! where the job has a deadline, else from the spot-wait rule ([`fleet::spot_wait`]). The
//! callers carry the answer out.
//!
//! [`fleet::spot_wait`]: tern_policies::fleet::spot_wait

use tern_cloud::Zone;
use tern_policies::deadline::Placement as Policy;

use super::events::WaitReason;
use super::policy::PolicyCall;

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
}
