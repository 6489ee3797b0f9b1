//! A probe's start and end as decisions, a row per branch of `probe::steps`, `cold_said` and
//! `decide::chosen`, on plain values.

use tern_cloud::testkit::offer;
use tern_cloud::{Capacity, InstanceState, IntentId, Offer};
use tern_plan::{Config, JobPlan};

use super::decide::Decision;
use super::events::WaitReason;
use super::probe::{ProbeBounds, steps};
use crate::store::InstanceRecord;

fn spot(shape: &str, zone: &str, price: f64) -> Offer {
    offer(shape, zone, Capacity::Spot).price(price).build()
}

fn node(o: &Offer) -> InstanceRecord {
    InstanceRecord {
        id: format!("i-{}", o.zone).as_str().into(),
        job: "cold".into(),
        intent: IntentId::from_uuid(uuid::Uuid::nil()),
        offer: o.clone().into(),
        state: InstanceState::Running,
        draining: false,
        launched_at: chrono::DateTime::UNIX_EPOCH,
        ended_at: None,
    }
}

fn config(o: &Offer, nodes: u32) -> Config {
    Config {
        offer: o.key(),
        cloud: "sim".into(),
        region: o.region.to_string(),
        zone: o.zone.to_string(),
        instance_type: o.instance_type.name.clone(),
        capacity: o.capacity,
        accelerator: "V100".into(),
        nodes,
        workers: nodes,
        price_per_hour: o.price_per_hour,
        hourly: o.price_per_hour * f64::from(nodes),
        price_per_accelerator_hour: o.price_per_hour,
        expected_cost: 12.5,
        finish_h: 10.0,
        finish_high_h: 12.0,
        hazard_per_hour: 0.0,
        prior: false,
        egress_usd: 0.0,
    }
}

fn plan(choice: Option<Config>, placed: bool, reason: Option<&str>) -> JobPlan {
    JobPlan {
        job: "cold".into(),
        team: "t".into(),
        placed,
        choice,
        reason: reason.map(str::to_string),
        deadline_h: Some(48.0),
        alternatives: Vec::new(),
        versus_cheapest_per_accelerator_hour: None,
    }
}

#[test]
fn every_start_of_a_probe_is_a_row() {
    let (a, b) = (
        spot("p3.2xlarge", "us-west-2a", 0.9),
        spot("p3.2xlarge", "us-west-2b", 1.1),
    );
    let od = offer("p3.2xlarge", "us-west-2a", Capacity::OnDemand)
        .price(3.06)
        .build();
    let allowed = [b.clone(), od.clone(), a.clone()];
    let v100 = ["V100".to_string()];
    let bounds = ProbeBounds::default();
    let start = |gang: bool, on_demand: bool| {
        steps::start(&allowed, (&v100, 1, gang), on_demand, bounds, "cold".into())
    };
    // The cheapest offer first, its shape's other spot offers as fallbacks; none for a gang.
    let Decision::Probe(p) = start(false, false) else {
        panic!()
    };
    assert_eq!(p.offers, [a.clone(), b.clone()]);
    assert_eq!((p.nodes, p.from.len(), p.since), (1, 0, None));
    let Decision::Probe(p) = start(true, false) else {
        panic!()
    };
    assert_eq!(p.offers, std::slice::from_ref(&a));
    // A deadline that cannot afford a reclaimed probe: on-demand.
    let Decision::Probe(p) = start(false, true) else {
        panic!()
    };
    assert_eq!(p.offers, [od]);
    // Nothing holds the job's accelerator: it waits for capacity.
    let none = steps::start(
        &allowed,
        (&["H100".to_string()], 1, false),
        false,
        bounds,
        "x".into(),
    );
    assert_eq!(none, Decision::Wait(WaitReason::NoCapacity));
}

#[test]
fn every_end_of_a_probe_is_a_row() {
    let here = spot("p3.2xlarge", "us-west-2a", 0.9);
    let there = spot("p3.8xlarge", "us-west-2b", 2.0);
    let fleet = [node(&here)];
    let keep = plan(Some(config(&here, 1)), true, None);
    let elsewhere = plan(Some(config(&there, 2)), true, None);
    let at_expected = plan(Some(config(&there, 2)), true, Some("at the expected speed"));
    let unplaced = plan(None, false, Some("no offer meets the deadline"));
    let none: &[InstanceRecord] = &[];
    let check =
        |row: &str, given: steps::Gathered<'_>, (says, retargets, moves): (&str, bool, bool)| {
            let (plan, fleet, unmeasured, stay) = given;
            let (text, retarget, moving) = steps::outcome(plan, fleet, unmeasured, stay);
            assert!(text.contains(says), "{row}: {text}");
            assert_eq!(retarget.is_some(), retargets, "{row}: {retarget:?}");
            assert_eq!(moving.is_some(), moves, "{row}");
        };
    let gone = "capacity is gone";
    check(
        "unmeasured, gone",
        (None, none, true, None),
        (gone, false, false),
    );
    let runs = "keeps running on the probe";
    check(
        "unmeasured, runs",
        (None, &fleet, true, None),
        (runs, false, false),
    );
    let no_plan = (Some(&unplaced), &fleet[..], false, None);
    check("no plan", no_plan, ("no plan meets", false, false));
    let kept = (Some(&keep), &fleet[..], false, None);
    check("plan keeps it", kept, ("the plan keeps 1×", true, false));
    let anew = (Some(&elsewhere), none, false, None);
    check("fleet gone", anew, ("placed like any job", false, false));
    let stays = (Some(&elsewhere), &fleet[..], false, Some(-0.5));
    check("staying pays", stays, ("moving saves nothing", true, false));
    let moves = (Some(&elsewhere), &fleet[..], false, None);
    check("moves", moves, ("moving to 2×", false, true));
    let said = (Some(&at_expected), &fleet[..], false, None);
    check(
        "moves, says the speed",
        said,
        ("; at the expected speed", false, true),
    );
    // Kept: the plan's count on its offer; staying against the plan: the fleet's own.
    let (_, kept, _) = steps::outcome(Some(&keep), &fleet, false, None);
    assert_eq!(kept, Some((here.key(), 1)));
    let (_, stayed, _) = steps::outcome(Some(&elsewhere), &fleet, false, Some(0.0));
    assert_eq!(stayed, Some((here.key(), 1)));
}

/// A row per branch of `decide::chosen`: the planner's choice where it placed the job,
/// else the job is unplaceable with the planner's reason (or a default one).
#[test]
fn the_planners_answer_is_a_choice_or_unplaceable() {
    use crate::controller::decide::{Decision, chosen};
    let here = spot("p3.2xlarge", "us-west-2a", 0.9);
    let placed = plan(Some(config(&here, 1)), true, None);
    assert_eq!(chosen(&placed).map(|c| c.nodes).ok(), Some(1));
    let rows = [
        (plan(None, false, Some("over quota")), "over quota"),
        (plan(None, false, None), "no feasible configuration"),
        (
            plan(Some(config(&here, 1)), false, Some("misses the deadline")),
            "misses the deadline",
        ),
    ];
    for (jp, want) in rows {
        let Err(Decision::Unplaceable { reason }) = chosen(&jp) else {
            panic!("{want}: a plan that placed nothing is unplaceable")
        };
        assert_eq!(reason, want);
    }
}

fn probe_record(o: &Offer) -> crate::store::ProbeRecord {
    crate::store::ProbeRecord {
        accelerator: "V100".into(),
        instance_type: o.instance_type.name.clone(),
        offer: o.key(),
        nodes: 1,
        price_per_hour: o.price_per_hour,
        max_seconds: 900.0,
        max_usd: 5.0,
        started_at: chrono::DateTime::UNIX_EPOCH,
        running_at: Some(chrono::DateTime::UNIX_EPOCH),
        probing_since: None,
        ended_at: None,
        outcome: None,
    }
}

/// A row per branch of `steps::move_off`: the whole probe fleet moves onto the plan's
/// choice, with fallbacks unless the job is a gang, and says so in its event.
#[test]
fn every_move_off_a_probe_is_a_row() {
    let here = spot("p3.2xlarge", "us-west-2a", 0.9);
    let there = spot("p3.8xlarge", "us-west-2b", 2.0);
    let also = spot("p3.8xlarge", "us-west-2c", 2.2);
    let allowed = [there.clone(), also.clone(), here.clone()];
    let choice = config(&there, 2);
    let fleet = [node(&here)];
    for (gang, fallbacks) in [(false, 1), (true, 0)] {
        let d = steps::move_off(
            "cold",
            &fleet,
            (&choice, there.clone()),
            (&allowed, gang),
            7.5,
        );
        let Decision::MoveFromProbe {
            from,
            to,
            count,
            migrating,
        } = d
        else {
            panic!("a move off the probe")
        };
        assert_eq!(from, vec![fleet[0].id.clone()]);
        assert_eq!(count, 2);
        assert_eq!(to[0].key(), there.key(), "gang {gang}");
        assert_eq!(to.len(), 1 + fallbacks, "gang {gang}: {to:?}");
        let Some(event) = migrating else {
            panic!("the move says so")
        };
        let super::events::Event::Migrating {
            moved,
            from_zone,
            to_zone,
            work_h,
            policy,
            ..
        } = *event
        else {
            panic!("a migrating event")
        };
        assert_eq!((moved, work_h), (1, 7.5));
        assert_eq!(
            (from_zone, to_zone),
            (here.zone.clone(), there.zone.clone())
        );
        assert!(policy.is_some_and(|p| p.contains("instead of 0.90 $/h")));
    }
    let none = steps::move_off(
        "cold",
        &[],
        (&choice, there.clone()),
        (&allowed, false),
        0.0,
    );
    let Decision::MoveFromProbe {
        from, migrating, ..
    } = none
    else {
        panic!("a move off the probe")
    };
    assert!(from.is_empty() && migrating.is_none());
}

/// A row per branch of `steps::end`: the probe closed with the outcome, and what follows
/// it only where the plan moves the job.
#[test]
fn every_end_of_a_probe_closes_it_and_moves_only_where_the_plan_does() {
    let here = spot("p3.2xlarge", "us-west-2a", 0.9);
    let there = spot("p3.8xlarge", "us-west-2b", 2.0);
    let fleet = [node(&here)];
    let keep = plan(Some(config(&here, 1)), true, None);
    let elsewhere = plan(Some(config(&there, 2)), true, None);
    let rows: [(&str, steps::Gathered<'_>, bool); 3] = [
        ("kept", (Some(&keep), &fleet, false, None), false),
        ("moves", (Some(&elsewhere), &fleet, false, None), true),
        (
            "staying pays",
            (Some(&elsewhere), &fleet, false, Some(-1.0)),
            false,
        ),
    ];
    for (row, given, moves) in rows {
        let allowed = [there.clone(), here.clone()];
        let d = steps::end(
            (probe_record(&here), super::probe::Ended::Measured),
            given,
            None,
            |c| {
                let to = allowed.iter().find(|o| o.key() == c.offer).cloned()?;
                Some(steps::move_off(
                    "cold",
                    &fleet,
                    (c, to),
                    (&allowed, false),
                    1.0,
                ))
            },
        );
        let Decision::EndProbe(end) = d else {
            panic!("{row}: the probe ends")
        };
        assert_eq!(end.probe.offer, here.key(), "{row}");
        assert_eq!(end.why, super::probe::Ended::Measured, "{row}");
        assert!(!end.outcome.is_empty(), "{row}");
        let moved = matches!(end.then, Some(Decision::MoveFromProbe { count: 2, .. }));
        assert_eq!(moved, moves, "{row}: {:?}", end.then);
    }
}

#[test]
fn the_choice_between_probing_and_planning() {
    use super::probe::{Start, cold_said, start_choice};
    assert!(matches!(
        start_choice(true, true, true, Some(false)),
        Start::Plan { .. }
    ));
    assert!(matches!(
        start_choice(true, true, true, Some(true)),
        Start::Probe {
            on_demand: false,
            ..
        }
    ));
    assert!(matches!(
        start_choice(false, true, true, None),
        Start::Probe {
            on_demand: true,
            ..
        }
    ));
    assert!(matches!(
        start_choice(false, true, false, None),
        Start::Probe {
            on_demand: false,
            ..
        }
    ));
    assert!(matches!(
        start_choice(false, false, false, None),
        Start::Refuse(_)
    ));
    assert!(matches!(
        start_choice(true, false, true, None),
        Start::Plan { .. }
    ));
    // What each start says at once: the plan on the hint once, the refusal, a probe nothing.
    let plan = || Start::Plan { why: "hint".into() };
    let Some(Decision::PlanCold { why }) = cold_said(plan(), false) else {
        panic!("a plan on the hint is said")
    };
    assert_eq!(why, "hint");
    assert_eq!(cold_said(plan(), true), None, "said once");
    let refuse = Start::Refuse("nothing to plan on".into());
    let Some(Decision::Unplaceable { reason }) = cold_said(refuse, false) else {
        panic!("a refusal makes the job unplaceable")
    };
    assert_eq!(reason, "nothing to plan on");
    let probe = Start::Probe {
        on_demand: false,
        why: "cold".into(),
    };
    assert_eq!(cold_said(probe, false), None);
}
