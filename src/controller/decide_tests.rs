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
    on_demand: true,
};
const OUT: SpotNow = SpotNow {
    offered: false,
    allowed: true,
    on_demand: true,
};
const NEVER: SpotNow = SpotNow {
    offered: false,
    allowed: false,
    on_demand: true,
};
/// A spot-only job.
const SPOT_ONLY: SpotNow = SpotNow {
    offered: true,
    allowed: true,
    on_demand: false,
};

/// One row per branch: the policy's step where there is one (whatever spot looks like),
/// else spot when offered, else the spot-wait rule, unless spot is not allowed at all; a
/// spot-only job never gets on-demand.
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
            Some(call(Policy::OnDemand)),
            SPOT_ONLY,
            None,
            CapacityCall::Spot {
                zone: None,
                why: why
                    .clone()
                    .map(|w| format!("{w}; the job allows no on-demand: spot")),
            },
        ),
        // Running on spot in zone a: it stays there (a gang keeps its zone).
        (
            Some(PolicyCall {
                now: Policy::Spot(0),
                ..call(Policy::OnDemand)
            }),
            SPOT_ONLY,
            None,
            CapacityCall::Spot {
                zone: Some(Zone::new("a")),
                why: why
                    .clone()
                    .map(|w| format!("{w}; the job allows no on-demand: spot")),
            },
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
        (
            None,
            SpotNow {
                offered: false,
                ..SPOT_ONLY
            },
            None,
            CapacityCall::Spot {
                zone: None,
                why: None,
            },
        ),
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
        offer: offer(SHAPE, zone, capacity).build().into(),
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
        Decision::Release { ids } => format!("release {}", ids.len()),
        Decision::CancelQueued { id, .. } => format!("cancel {id}"),
        Decision::Launch { offers, count, .. } => format!(
            "launch {count} on {} {} (+{} fallbacks)",
            offers[0].capacity,
            offers[0].zone,
            offers.len() - 1
        ),
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
        Decision::Move { step, to, .. } => format!(
            "move {} to {} {} (+{} fallbacks)",
            step.movers.len(),
            step.to.capacity,
            step.to.zone,
            to.len() - 1
        ),
        Decision::WarnBudget { budget, .. } => format!("warn {budget}"),
        Decision::StopForBudget { stop, drain, .. } => {
            format!("stop for {} drain={drain}", stop.name)
        }
        Decision::EndForBudget {
            release, closed, ..
        } => {
            format!("end for budget, release {} closed={closed}", release.len())
        }
        Decision::EndOverBudget { limit, .. } => format!("end over budget ${limit}"),
        Decision::Finish { late_h, then, .. } => {
            format!("finish late {late_h:?}, then {}", short(then))
        }
        Decision::TimeOut { id, .. } => format!("time out {id}"),
        Decision::CollectLeak { id } => format!("collect {id}"),
        Decision::Quarantine { id, .. } => format!("quarantine {id}"),
        Decision::PlanCold { why } => format!("plan cold: {why}"),
        Decision::Unplaceable { reason } => format!("unplaceable: {reason}"),
        Decision::Probe(p) => format!("probe {} on {}", p.nodes, p.offers[0].zone),
        Decision::EndProbe(e) => format!("end probe: {}", e.outcome),
        Decision::MoveFromProbe { count, .. } => format!("move {count} from the probe"),
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
    let Decision::Replace {
        offers,
        missing,
        on_demand,
    } = replace(&running(&with_spot, two(), 3, false))
    else {
        panic!("a job short of a node, spot offered: a replacement")
    };
    assert_eq!((missing, on_demand), (1, false));
    assert_eq!(offers[0].capacity, Capacity::Spot);
    assert_eq!(
        short(&grow(SHAPE, &with_spot, 2, 4)),
        "resize 2->4, then nothing"
    );
    assert_eq!(grow(SHAPE, &no_spot, 2, 4), Decision::Nothing);
    assert_eq!(grow(SHAPE, &with_spot, 4, 4), Decision::Nothing);
}

fn moving<'a>(
    offers: &'a [Offer],
    running: Vec<(InstanceRecord, f64)>,
    constraints: &'a tern_cloud::Constraints,
) -> Moving<'a> {
    Moving {
        gang: false,
        deadline: false,
        fleet_nodes: running.len() as u32,
        running: dearest_first(running),
        offers,
        policy: None,
        speed: Some(300.0),
        remaining_samples: 300.0 * 3600.0 * 40.0,
        hours_left: None,
        budget_fraction: 0.25,
        restart_h: 0.2,
        hours_since_last_move: None,
        checkpoint_gb: 0.0,
        egress_per_gb: tern_cloud::EGRESS_DOLLARS_PER_GB,
        constraints,
        on_demand_rate: 3.06,
        on_demand: vec![od("a-1b")],
    }
}

/// One row per branch of `movement`: the cheaper-spot rule without a deadline, the policy's
/// wish with one.
#[test]
fn each_branch_of_the_move_decision() {
    let none = tern_cloud::Constraints::default();
    let cheap = offer(SHAPE, "a-1c", Capacity::Spot).price(0.3).build();
    let offers = [cheap.clone(), spot("a-1a"), od("a-1a")];
    let gang_offers = [spot("a"), od("a-1a")];
    let four = || -> Vec<(InstanceRecord, f64)> {
        (0..4)
            .map(|k| (node(&format!("i-{k}"), "a-1a", Capacity::Spot), 0.9))
            .collect()
    };
    let on_od = vec![
        (node("i-1", "a-1a", Capacity::OnDemand), 3.06),
        (node("i-2", "a-1a", Capacity::Spot), 0.9),
    ];
    let rows: Vec<(&str, Moving<'_>, &str)> = vec![
        (
            "40 h left at $0.90 against $0.30: a budget's worth moves",
            moving(&offers, four(), &none),
            "move 1 to spot a-1c (+1 fallbacks)",
        ),
        (
            "the on-demand node goes first",
            moving(&offers, on_od.clone(), &none),
            "move 1 to spot a-1c",
        ),
        (
            "minutes of work left: not worth a move",
            Moving {
                remaining_samples: 300.0 * 60.0,
                ..moving(&offers, four(), &none)
            },
            "nothing",
        ),
        (
            "no forecast: the rule cannot weigh it",
            Moving {
                speed: None,
                ..moving(&offers, four(), &none)
            },
            "nothing",
        ),
        (
            "a deadline job without the policy's step stays",
            Moving {
                deadline: true,
                ..moving(&offers, four(), &none)
            },
            "nothing",
        ),
        (
            "the policy wants on-demand",
            Moving {
                deadline: true,
                policy: Some(call(Policy::OnDemand)),
                ..moving(&offers, four(), &none)
            },
            "move 1 to on-demand a-1b",
        ),
        (
            "the policy wants where the job is",
            Moving {
                deadline: true,
                policy: Some(PolicyCall {
                    now: Policy::OnDemand,
                    ..call(Policy::OnDemand)
                }),
                ..moving(&offers, four(), &none)
            },
            "nothing",
        ),
        (
            "the policy sends a gang to another zone: all of it",
            Moving {
                deadline: true,
                gang: true,
                policy: Some(call(Policy::Spot(0))),
                ..moving(&gang_offers, four(), &none)
            },
            "move 4 to spot a (+0 fallbacks)",
        ),
    ];
    for (what, view, want) in rows {
        let got = short(&movement(&view));
        assert!(got.starts_with(want), "{what}: got {got:?}, want {want:?}");
    }
    let gang = Moving {
        deadline: true,
        gang: true,
        policy: Some(call(Policy::Spot(0))),
        ..moving(&gang_offers, four(), &none)
    };
    let Decision::Move { step, of, to } = movement(&gang) else {
        panic!("the policy sends a gang to another zone: a move")
    };
    assert_eq!(step.movers.len() as u32, of, "a gang moves whole");
    assert_eq!(to[0].zone, step.to.zone);
}

/// One row per branch of `launch`: the planner's offer stands without a policy, the
/// policy names the pool with one.
#[test]
fn each_branch_of_a_placed_jobs_launch() {
    let offers = [spot("a-1a"), spot("a-1b"), od("a-1a")];
    let view = |planned: Offer| Launching {
        planned,
        nodes: 2,
        gang: false,
        offers: &offers,
        policy: None,
        spot_wait: Some(WaitReason::NoDeadline),
        on_demand: vec![od("a-1a")],
    };
    let rows: Vec<(&str, Launching<'_>, &str)> = vec![
        (
            "the planner's spot offer",
            view(spot("a-1b")),
            "launch 2 on spot a-1b (+1 fallbacks)",
        ),
        (
            "on-demand planned, slack: wait for spot",
            view(od("a-1a")),
            "wait",
        ),
        (
            "on-demand planned, the deadline needs it",
            Launching {
                spot_wait: None,
                ..view(od("a-1a"))
            },
            "launch 2 on on-demand a-1a (+0 fallbacks)",
        ),
        (
            "a gang has no fallbacks",
            Launching {
                gang: true,
                ..view(spot("a-1a"))
            },
            "launch 2 on spot a-1a (+0 fallbacks)",
        ),
        (
            "the policy sends it to on-demand",
            Launching {
                policy: Some(call(Policy::OnDemand)),
                ..view(spot("a-1a"))
            },
            "launch 2 on on-demand a-1a",
        ),
        (
            "the policy waits",
            Launching {
                policy: Some(call(Policy::Idle)),
                ..view(spot("a-1a"))
            },
            "wait",
        ),
        (
            "the policy names a zone with no spot: the planner's spot pick",
            Launching {
                policy: Some(call(Policy::Spot(1))),
                ..view(spot("a-1a"))
            },
            "launch 2 on spot a-1a (+1 fallbacks)",
        ),
        (
            "the policy names a zone with no spot, the planner picked on-demand",
            Launching {
                policy: Some(call(Policy::Spot(1))),
                ..view(od("a-1a"))
            },
            "wait no capacity",
        ),
    ];
    for (what, v, want) in rows {
        let got = short(&launch(&v));
        assert!(got.starts_with(want), "{what}: got {got:?}, want {want:?}");
    }
}

/// A queued spot request is cancelled exactly when the capacity decision says on-demand.
#[test]
fn a_queued_request_is_cancelled_only_when_the_deadline_needs_on_demand() {
    let request = node("q-1", "a-1a", Capacity::Spot);
    let slack = Some(WaitReason::NoDeadline);
    assert_eq!(
        short(&queued(&request, None, slack.clone(), true)),
        "nothing"
    );
    assert_eq!(short(&queued(&request, None, None, true)), "cancel q-1");
    let od = call(Policy::OnDemand);
    assert_eq!(
        short(&queued(&request, Some(&od), slack.clone(), true)),
        "cancel q-1"
    );
    let idle = call(Policy::Idle);
    assert_eq!(short(&queued(&request, Some(&idle), None, true)), "nothing");
    // A spot-only job keeps its request: on-demand is not its to take.
    assert_eq!(short(&queued(&request, Some(&od), None, false)), "nothing");
    assert_eq!(short(&queued(&request, None, None, false)), "nothing");
}

#[test]
fn a_jobs_own_nodes_are_room_in_their_pool_and_nobody_elses() {
    let full = offer(SHAPE, "us-west-2a", Capacity::Spot)
        .availability(tern_cloud::Availability::Unavailable)
        .build();
    let some = offer(SHAPE, "us-west-2b", Capacity::Spot)
        .availability(tern_cloud::Availability::Available(Some(2)))
        .build();
    let offers = vec![full, some, od("us-west-2a")];
    let mut leaving = node("c", "us-west-2b", Capacity::Spot);
    leaving.draining = true;
    let mine = [
        node("a", "us-west-2a", Capacity::Spot),
        node("b", "us-west-2b", Capacity::Spot),
        leaving,
        node("d", "us-west-2a", Capacity::OnDemand),
    ];
    let mine: Vec<&InstanceRecord> = mine.iter().collect();
    let seen = with_own_room(&offers, &mine);
    let room: Vec<tern_cloud::Availability> = seen.iter().map(|o| o.availability).collect();
    assert_eq!(
        room,
        [
            // Its one node in a full pool: room for that node.
            tern_cloud::Availability::Available(Some(1)),
            // Two more offered, one held (the draining node's slot is being taken back).
            tern_cloud::Availability::Available(Some(3)),
            // On-demand is not counted.
            offers[2].availability,
        ]
    );
    // Nothing of another job's counts: no node of this job, the offers as the cloud said.
    assert_eq!(with_own_room(&offers, &[]), offers);
}

/// The end of a job, a row per branch of `decide::end`: finished or already ended, what it
/// holds released or kept while its workers save.
#[test]
fn every_end_of_a_job_is_a_row() {
    let t0 = chrono::DateTime::UNIX_EPOCH;
    let h = chrono::TimeDelta::hours;
    let ending = |finishing: bool, held: usize, saving: bool, due: Option<i64>| Ending {
        finishing,
        deadline_at: due.map(|d| t0 + h(d)),
        submitted_at: t0,
        held: (0..held)
            .map(|k| format!("i-{k}").as_str().into())
            .collect(),
        saving,
        now: t0 + h(10),
    };
    let rows = [
        (
            (true, 2, false, Some(12)),
            "finish late None, then release 2",
        ),
        (
            (true, 2, false, Some(8)),
            "finish late Some(2.0), then release 2",
        ),
        ((true, 2, true, None), "finish late None, then nothing"),
        ((true, 0, false, None), "finish late None, then nothing"),
        ((false, 2, false, None), "release 2"),
        ((false, 2, true, None), "nothing"),
        ((false, 0, false, None), "nothing"),
    ];
    for ((finishing, held, saving, due), want) in rows {
        let got = short(&end(&ending(finishing, held, saving, due)));
        assert_eq!(
            got, want,
            "finishing {finishing}, {held} held, saving {saving}"
        );
    }
    let Decision::Release { ids } = end(&ending(false, 2, false, None)) else {
        panic!("an ended job that holds nodes releases them")
    };
    assert_eq!(ids, ending(false, 2, false, None).held);
    let Decision::Finish { took_h, .. } = end(&ending(true, 0, false, None)) else {
        panic!("a job whose work is done finishes")
    };
    assert_eq!(took_h, 10.0);
}

/// A launch that never came up, and an instance nothing accounts for: a row per branch of
/// `decide::timed_out` and `decide::leak`.
#[test]
fn every_timeout_and_leak_is_a_row() {
    let t0 = chrono::DateTime::UNIX_EPOCH;
    let ten = std::time::Duration::from_secs(600);
    let at = |s: i64| t0 + chrono::TimeDelta::seconds(s);
    let pending = InstanceRecord {
        state: InstanceState::Pending,
        ..node("i-1", "a-1a", Capacity::Spot)
    };
    let rows = [
        (&pending, 601, false, "time out i-1"),
        (&pending, 600, false, "nothing"),
        (&pending, 601, true, "nothing"),
        (&node("i-1", "a-1a", Capacity::Spot), 601, false, "nothing"),
    ];
    for (i, s, terminating, want) in rows {
        let got = short(&timed_out(i, (at(s), ten), terminating));
        assert_eq!(
            got, want,
            "{:?} at {s} s, terminating {terminating}",
            i.state
        );
    }
    let Decision::TimeOut { offer, after, .. } = timed_out(&pending, (at(601), ten), false) else {
        panic!("a pending launch past the timeout times out")
    };
    assert_eq!((offer, after), (pending.offer.key(), ten));
    let id: tern_cloud::InstanceId = "i-9".into();
    let rows = [
        ((at(0), at(600)), false, "collect i-9"),
        ((at(0), at(599)), false, "nothing"),
        ((at(0), at(900)), true, "nothing"),
    ];
    let Decision::CollectLeak { id: collected } = leak(&id, (at(0), at(600), ten), false) else {
        panic!("a leak past the grace is collected")
    };
    assert_eq!(collected, id);
    for ((first, now), terminating, want) in rows {
        let got = short(&leak(&id, (first, now, ten), terminating));
        assert_eq!(
            got, want,
            "seen at {first}, now {now}, terminating {terminating}"
        );
    }
}

#[test]
fn every_quarantine_is_a_row() {
    let running = node("i-1", "a-1a", Capacity::Spot);
    let draining = InstanceRecord {
        draining: true,
        ..running.clone()
    };
    let ended = InstanceRecord {
        state: InstanceState::Terminated,
        ..running.clone()
    };
    let others = InstanceRecord {
        job: "other".into(),
        ..running.clone()
    };
    let rows = [
        (Some(&running), false, "quarantine i-1"),
        (Some(&running), true, "nothing"),
        (Some(&draining), false, "nothing"),
        (Some(&ended), false, "nothing"),
        (Some(&others), false, "nothing"),
        (None, false, "nothing"),
    ];
    for (i, job_ended, want) in rows {
        let got = short(&quarantine(&running.job, i, job_ended, "slow".into()));
        assert_eq!(got, want, "{i:?}, job ended {job_ended}");
    }
    let Decision::Quarantine { reason, .. } =
        quarantine(&running.job, Some(&running), false, "slow".into())
    else {
        panic!("a running node of a running job is quarantined")
    };
    assert_eq!(reason, "slow");
}
