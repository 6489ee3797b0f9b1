//! The controller and `tern simulate --policy tern` take the same decision for the same state.
//!
//! A seeded two-zone trace drives the simulated cloud; the controller runs one pass per policy
//! tick with a deadline job. At every tick the observation the controller hands the policy
//! (each zone's availability history, spot prices, regions, the tick, the on-demand price) must
//! equal the one the replay engine builds from the trace itself (`history = trace[..=t]`), and
//! the policy, asked through `deadline::step` as the replay asks it, must decide the same on
//! both for the job's state.

use tern_policies::deadline::{self, Placement, Tern, TickView, ZoneView};
use tern_sim::{SimCloud, Trace};

use super::decide::{self, Decision};
use super::policy::PolicyCall;
use super::testkit::Scenario;
use super::testkit::{sim, start};
use super::*;
use crate::controller::workload::Workload;

const GAP: u32 = 1800;

/// Runs of capacity and outages of 2–12 ticks, from a seeded generator (a splitmix step).
fn runs(mut seed: u64, ticks: usize) -> Vec<u32> {
    let mut next = || {
        seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut out = Vec::with_capacity(ticks);
    let mut up = next() % 2 == 0;
    while out.len() < ticks {
        let len = 2 + (next() % 11) as usize;
        out.extend(std::iter::repeat_n(u32::from(up) * 2, len));
        up = !up;
    }
    out.truncate(ticks);
    out
}

/// A one-node job due `deadline` after submission, with a measured step time.
fn spec(deadline: &str) -> JobSpec {
    tern_cloud::testkit::spec("j")
        .deadline(Some(deadline))
        .build()
}

fn trace(zone: &str, data: Vec<u32>, price: f64) -> Trace {
    Trace {
        gap_seconds: GAP,
        spot_price: Some(price),
        ..tern_sim::testkit::trace(zone, data)
    }
}

/// A controller on `sim` with a `GAP`-second policy tick, and its store.
fn controller(name: &str, sim: &Arc<SimCloud>) -> (Arc<Store>, Controller) {
    Scenario::on(sim, name)
        .config(|c| {
            c.policy_tick = Duration::from_secs(u64::from(GAP));
            c.migrate_check = Duration::from_secs(u64::from(GAP));
        })
        .controller()
}

/// The simulated cloud's first spot offer.
async fn spot_offer(sim: &SimCloud) -> Offer {
    let offers = sim.offers(&Region::new("us-west-2")).await.expect("offers");
    offers
        .into_iter()
        .find(|o| o.capacity == tern_cloud::Capacity::Spot)
        .expect("a spot offer")
}

/// The kind of a decision, for the coverage check.
fn kind(d: &Decision) -> &'static str {
    match d {
        Decision::Nothing => "nothing",
        Decision::Wait(_) => "wait",
        Decision::Launch { .. } => "launch",
        Decision::Replace { .. } => "replace",
        Decision::Regroup { .. } => "regroup",
        Decision::Resize { .. } => "resize",
        Decision::Move { .. } => "move",
        Decision::Release { .. } => "release",
        Decision::CancelQueued { .. } => "cancel-queued",
        Decision::WarnBudget { .. } => "warn-budget",
        Decision::StopForBudget { .. } => "stop-for-budget",
        Decision::EndForBudget { .. } => "end-for-budget",
        Decision::EndOverBudget { .. } => "end-over-budget",
        Decision::Finish { .. } => "finish",
        Decision::TimeOut { .. } => "time-out",
        Decision::CollectLeak { .. } => "collect-leak",
        Decision::Quarantine { .. } => "quarantine",
        Decision::PlanCold { .. } => "plan-cold",
        Decision::Unplaceable { .. } => "unplaceable",
        Decision::Probe(_) => "probe",
        Decision::EndProbe(_) => "end-probe",
        Decision::MoveFromProbe { .. } => "move-from-probe",
    }
}

/// Where a decision starts capacity: (capacity, zone) of its first offer.
fn lands(d: &Decision) -> Option<(tern_cloud::Capacity, String)> {
    let first = match d {
        Decision::Launch { offers, .. } | Decision::Replace { offers, .. } => offers.first()?,
        Decision::Move { to, .. } => to.first()?,
        Decision::Regroup { then, .. } | Decision::Resize { then, .. } => return lands(then),
        _ => return None,
    };
    Some((first.capacity, first.zone.to_string()))
}

/// The replay's step, as the controller's decisions carry it out: a launch, a replacement, a
/// move and a queued request each land where the replay's placement says (spot in its zone,
/// on-demand), or start nothing when it waits. Records the kinds of decision seen.
fn decide_as_the_replay(
    step: deadline::Step,
    input: &policy::PolicyInput,
    offers: &[Offer],
    node: &crate::store::InstanceRecord,
    seen: &mut std::collections::BTreeSet<&'static str>,
) {
    let call = PolicyCall {
        step,
        zones: input.zones.clone(),
        now: input.state.placement,
    };
    let od: Vec<Offer> = offers
        .iter()
        .filter(|o| o.capacity == tern_cloud::Capacity::OnDemand)
        .cloned()
        .collect();
    let want = match step.placement {
        Placement::Idle => None,
        Placement::OnDemand => Some((tern_cloud::Capacity::OnDemand, od[0].zone.to_string())),
        Placement::Spot(z) => Some((tern_cloud::Capacity::Spot, input.zones[z].to_string())),
    };
    let none = tern_cloud::Constraints::default();
    let launch = decide::launch(&decide::Launching {
        planned: (*node.offer).clone(),
        nodes: 1,
        gang: false,
        offers,
        policy: Some(call.clone()),
        spot_wait: None,
        on_demand: od.clone(),
    });
    let replace = decide::replace(&decide::Running {
        gang: false,
        live: vec![node.clone()],
        held: vec![node.id.clone()],
        target: 2,
        min_nodes: 1,
        offers,
        policy: Some(call.clone()),
        spot_wait: None,
        on_demand_here: od.clone(),
        on_demand_anywhere: od.clone(),
    });
    let moved = decide::movement(&decide::Moving {
        gang: false,
        deadline: true,
        running: vec![(node.clone(), node.offer.price_per_hour)],
        fleet_nodes: 1,
        offers,
        policy: Some(call.clone()),
        speed: Some(320.0),
        remaining_samples: 1e6,
        hours_left: Some(24.0),
        budget_fraction: 1.0,
        restart_h: 0.2,
        hours_since_last_move: None,
        checkpoint_gb: 0.0,
        egress_per_gb: tern_cloud::EGRESS_DOLLARS_PER_GB,
        constraints: &none,
        on_demand_rate: 3.06,
        on_demand: od.clone(),
    });
    let queued = decide::queued(node, Some(&call), None, true);
    // A gang of two on this node, one short: it stays only in its zone.
    let gang = decide::replace(&decide::Running {
        gang: true,
        live: vec![node.clone()],
        held: vec![node.id.clone()],
        target: 2,
        min_nodes: 2,
        offers,
        policy: Some(call.clone()),
        spot_wait: None,
        on_demand_here: od.clone(),
        on_demand_anywhere: od.clone(),
    });
    for d in [&launch, &replace, &moved, &queued, &gang] {
        seen.insert(kind(d));
    }
    // Spot in the zone the gang's node is in (whatever that node's capacity).
    let home = want.as_ref().is_some_and(|(c, z)| {
        *c == tern_cloud::Capacity::Spot && *z == node.offer.zone.to_string()
    });
    match &want {
        // Waiting, or spot in another zone: the gang gives its zone back, whole.
        None => assert!(
            matches!(gang, Decision::Regroup { anew: true, .. }),
            "{gang:?}"
        ),
        Some(_) if !home && step.placement != Placement::OnDemand => {
            assert!(
                matches!(gang, Decision::Regroup { anew: true, .. }),
                "{gang:?}"
            )
        }
        Some(w) => assert_eq!(lands(&gang).as_ref(), Some(w), "gang: {gang:?}"),
    }
    assert_eq!(lands(&launch), want.clone(), "launch: {launch:?}");
    match &want {
        // Where the replay waits, a running job short of a node runs on what it has.
        None => assert!(matches!(replace, Decision::Resize { .. }), "{replace:?}"),
        Some(w) => assert_eq!(lands(&replace).as_ref(), Some(w), "replace: {replace:?}"),
    }
    // A node already where the replay wants it has nowhere to go (it may still be booting,
    // which the policy counts as nowhere yet).
    let there = want == Some((node.offer.capacity, node.offer.zone.to_string()));
    let stays = want.is_none() || step.placement == call.now || there;
    match &want {
        _ if stays => assert_eq!(moved, Decision::Nothing),
        Some(w) => assert_eq!(lands(&moved).as_ref(), Some(w), "move: {moved:?}"),
        None => unreachable!(),
    }
    let cancel = step.placement == Placement::OnDemand;
    assert_eq!(matches!(queued, Decision::CancelQueued { .. }), cancel);
}

async fn check_seed(seed: u64, seen: &mut std::collections::BTreeSet<&'static str>) -> usize {
    let start = start();
    let ticks = 60;
    let traces = vec![
        trace("us-west-2a", runs(seed, ticks + 5), 0.9),
        trace("us-west-2b", runs(seed + 1000, ticks + 5), 1.1),
    ];
    let avail: Vec<Vec<u32>> = traces.iter().map(|t| t.available.clone()).collect();
    let sim = sim(traces);
    let (_, mut ctl) = controller("same", &sim);
    let spec = spec("24h");
    ctl.submit(spec, start).expect("submit");
    let mut workload = Workload::new();
    let offer = spot_offer(&sim).await;
    let mut compared = 0;
    for t in 0..ticks {
        let now = sim.now();
        ctl.pass(now).await.expect("pass");
        if ctl.job("j").is_some_and(|j| j.state.is_final()) {
            break;
        }
        let Some(input) = ctl.policy_input("j", &offer, 1, now) else {
            panic!("seed {seed}, tick {t}: the controller has no policy input");
        };
        // The replay's view of the same tick: each zone's trace up to and including it.
        let views: Vec<ZoneView<'_>> = avail
            .iter()
            .zip([0.9, 1.1])
            .map(|(a, p)| ZoneView {
                history: &a[..=t],
                spot_price: p,
                region: 0,
            })
            .collect();
        assert_eq!(input.tick as usize, t, "seed {seed}");
        assert_eq!(input.tick_hours, f64::from(GAP) / 3600.0);
        for (z, v) in views.iter().enumerate() {
            assert_eq!(
                input.histories[z].as_slice(),
                v.history,
                "seed {seed}, tick {t}, zone {z}: the controller learned another history"
            );
            assert_eq!(input.prices[z], v.spot_price, "seed {seed}, tick {t}");
            assert_eq!(input.regions[z], v.region);
        }
        assert_eq!(input.on_demand_price, 3.06);
        // The policy object kept between passes holds the same histories, tick by tick.
        assert_eq!(
            ctl.class_histories("j", &offer, 1, now),
            Some(input.histories.clone()),
            "seed {seed}, tick {t}: the kept histories drifted from the logs"
        );
        let replay = TickView {
            tick: t as u32,
            zones: &views,
            on_demand_price: 3.06,
            tick_hours: f64::from(GAP) / 3600.0,
            egress_cost: input.egress_cost,
        };
        let mine = input.step(&mut Tern::new());
        let theirs = deadline::step(&mut Tern::new(), &input.job, &input.state, &replay);
        assert_eq!(mine, theirs, "seed {seed}, tick {t}: {:?}", input.state);
        if let Some(node) = ctl.instances().find(|i| i.job == "j").cloned() {
            let offers = sim.offers(&Region::new("us-west-2")).await.expect("offers");
            decide_as_the_replay(theirs, &input, &offers, &node, seen);
        }
        compared += 1;
        let step = Duration::from_secs(u64::from(GAP));
        sim.advance(step);
        workload.step(&mut ctl, step, sim.now()).expect("workload");
    }
    compared
}

#[tokio::test]
async fn the_controller_hands_the_policy_the_replays_view_and_gets_its_decision() {
    let mut compared = 0;
    let mut seen = std::collections::BTreeSet::new();
    // The replay's steps, carried out by the controller's decisions, reach every decision a
    // policy step can produce: seeds run in order until they have (each trajectory reaches
    // some; which depends on how the workers' progress falls on the ticks).
    let every = [
        "cancel-queued",
        "launch",
        "move",
        "nothing",
        "regroup",
        "replace",
        "resize",
        "wait",
    ];
    let every: std::collections::BTreeSet<&str> = every.into_iter().collect();
    for seed in 1..=12 {
        compared += check_seed(seed, &mut seen).await;
        if seen == every && seed >= 3 {
            break;
        }
    }
    assert!(compared >= 30, "only {compared} ticks compared");
    assert_eq!(seen, every, "decisions seen");
}

#[tokio::test]
async fn the_controller_acts_on_the_policys_choice() {
    // Zone a up for the first six hours, b never: with a loose deadline the policy picks spot
    // in a, and the controller launches exactly there.
    let start = start();
    let sim = sim(vec![
        trace("us-west-2a", vec![2; 40], 0.9),
        trace("us-west-2b", vec![0; 40], 0.5),
    ]);
    let (_, mut ctl) = controller("acts", &sim);
    let spec = spec("72h");
    ctl.submit(spec, start).expect("submit");
    ctl.pass(start).await.expect("pass");
    let launched: Vec<_> = ctl.instances().collect();
    assert_eq!(launched.len(), 1);
    assert_eq!(launched[0].offer.capacity, tern_cloud::Capacity::Spot);
    assert_eq!(launched[0].offer.zone.as_str(), "us-west-2a");
    let plan = ctl
        .typed_events(Some("j"))
        .expect("events")
        .into_iter()
        .find_map(|e| match e {
            Event::Planned { placement, .. } => Some(placement),
            _ => None,
        })
        .expect("a plan event");
    let why = plan.policy.expect("the deadline policy's reasons");
    assert!(why.contains("expected cost to finish"), "{why}");
    let input = ctl
        .policy_input("j", &launched[0].offer.clone(), 1, start)
        .expect("input");
    assert_eq!(input.state.placement, Placement::Spot(0));
}

/// Jobs the policy cannot tell apart (one spec, submitted together) share one policy object;
/// a job with another deadline gets its own.
#[tokio::test]
async fn alike_jobs_share_one_policy_object() {
    let start = start();
    let sim = sim(vec![
        trace("us-west-2a", vec![2; 40], 0.9),
        trace("us-west-2b", vec![2; 40], 1.1),
    ]);
    let (_, mut ctl) = controller("share", &sim);
    for (name, deadline) in [("a", "24h"), ("b", "24h"), ("c", "48h")] {
        let mut s = spec(deadline);
        s.name = name.into();
        ctl.submit(s, start).expect("submit");
    }
    ctl.pass(start).await.expect("pass");
    let offer = spot_offer(&sim).await;
    for name in ["a", "b", "c"] {
        assert!(ctl.ask_policy(name, &offer, 1, start).is_some(), "{name}");
    }
    assert_eq!(ctl.policy_objects(), 2);
}

/// The one-slot trace: zone a sells one spot node at $0.90/h, and the job holds it; zone b has
/// room at $1.10/h. The cloud leaves the job's own node out of what a still offers, but the
/// job's own instances never count against it: with a deadline and without, the job stays in
/// a and never moves to the dearer zone, also after a probe of an unmeasured job (whose move
/// off the probe's on-demand node lands on spot in a).
#[tokio::test]
async fn a_job_holding_the_only_slot_of_the_cheapest_zone_never_moves_to_a_dearer_one() {
    let cases = [
        (Some("72h"), true),
        (None, true),
        (Some("72h"), false),
        (None, false),
    ];
    for (deadline, measured) in cases {
        let start = start();
        let sim = sim(vec![
            trace("us-west-2a", vec![1; 80], 0.9),
            trace("us-west-2b", vec![8; 80], 1.1),
        ]);
        let (store, mut ctl) = controller("one-slot", &sim);
        let mut spec = tern_cloud::testkit::spec("j").deadline(deadline);
        if !measured {
            spec = spec.unmeasured();
        }
        let spec = spec.build();
        ctl.submit(spec, start).expect("submit");
        let mut workload = Workload::new();
        let step = Duration::from_secs(u64::from(GAP) / 6);
        for _ in 0..120 {
            ctl.pass(sim.now()).await.expect("pass");
            sim.advance(step);
            workload.step(&mut ctl, step, sim.now()).expect("workload");
            for i in ctl.instances().filter(|i| i.job == "j") {
                assert_eq!(
                    i.offer.zone.as_str(),
                    "us-west-2a",
                    "{deadline:?}, measured {measured}: {i:?}"
                );
            }
        }
        let kinds: Vec<String> = store
            .events(0, Some("j"))
            .expect("events")
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert!(kinds.iter().any(|k| k == "workers"), "{kinds:?}");
        // The probe's move from on-demand to spot in a is the only kind allowed: to a cheaper
        // pool, never out of a.
        for e in ctl.typed_events(Some("j")).expect("events") {
            if let Event::Migrating {
                from_price,
                to_price,
                to_zone,
                ..
            } = &e
            {
                assert!(
                    to_price < from_price && to_zone.as_str() == "us-west-2a",
                    "{deadline:?}, measured {measured}: {e:?}"
                );
            }
        }
    }
}

/// After a preemption the policy is told where the checkpoint lives (`checkpoint_home`): the
/// region the job last ran in, though nothing of it runs any more, so a restart in another
/// region is charged the checkpoint's egress as the replay charges it.
#[tokio::test]
async fn a_preempted_job_is_asked_about_with_its_checkpoints_region() {
    // Zone a (us-west-2) up for four ticks; zone b (us-east-1) only from tick 8.
    let up_then_down: Vec<u32> = [vec![2; 4], vec![0; 36]].concat();
    let down_then_up: Vec<u32> = [vec![0; 8], vec![2; 32]].concat();
    let sim = sim(vec![
        trace("us-west-2a", up_then_down, 0.9),
        trace("us-east-1a", down_then_up, 0.9),
    ]);
    let (_, mut ctl) = Scenario::on(&sim, "home")
        .config(|c| {
            c.policy_tick = Duration::from_secs(u64::from(GAP));
            c.regions = vec![Region::new("us-west-2"), Region::new("us-east-1")];
        })
        .jobs([spec("72h")])
        .controller();
    let mut workers = Workload::new();
    let offer = spot_offer(&sim).await;
    let mut asked = Vec::new();
    for _ in 0..7 {
        let now = sim.now();
        ctl.pass(now).await.expect("pass");
        let input = ctl.policy_input("j", &offer, 1, now).expect("input");
        let west = input.zones.iter().position(|z| z.as_str() == "us-west-2a");
        let home = west.map(|z| input.regions[z]);
        let running = ctl.instances().any(|i| i.job == "j");
        asked.push((running, input.state.checkpoint_region, home));
        let step = Duration::from_secs(u64::from(GAP));
        sim.advance(step);
        workers.step(&mut ctl, step, sim.now()).expect("workers");
    }
    assert!(asked[0].0, "it starts in us-west-2a: {asked:?}");
    let (running, known, west) = asked[6];
    assert!(!running, "nothing is up at tick 6: {asked:?}");
    assert!(west.is_some());
    assert_eq!(known, west, "the checkpoint is in us-west-2: {asked:?}");
}
