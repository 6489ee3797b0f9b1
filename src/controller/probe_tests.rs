//! Cold start on the simulated cloud: a job nobody has measured probes, is measured by its
//! (simulated) workers, and is planned on what they measured; the deadline-tight case; and the
//! probe's bounds, as a property of [`probe::verdict`] under any pass timing.

use proptest::prelude::*;
use tern_cloud::{Accelerator, InstanceType, parse_job_spec};
use tern_sim::cloud::SimConfig;
use tern_sim::{SimCloud, Trace};

use super::probe::{self, Ended, Verdict};
use super::testkit::{Scenario, start};
use super::workload::Workload;
use super::world::SimWorld;
use super::*;
use crate::store::ProbeRecord;

fn trace(zone: &str, spot: f64, on_demand: f64) -> Trace {
    Trace {
        spot_price: Some(spot),
        on_demand_price: Some(on_demand),
        ..tern_sim::testkit::trace(zone, vec![8; 2000])
    }
}

fn v100(name: &str, gpus: u32) -> InstanceType {
    InstanceType {
        name: name.into(),
        vcpus: 8.0 * f64::from(gpus),
        memory_gib: 61.0 * f64::from(gpus),
        accelerator: Some(Accelerator::new("V100", gpus)),
    }
}

/// One zone selling a 1-GPU and a 4-GPU V100 shape.
fn two_shapes() -> Arc<SimCloud> {
    Arc::new(SimCloud::with_types(
        vec![
            trace("us-west-2a", 0.9, 3.06),
            trace("us-west-2a", 3.6, 12.24),
        ],
        vec![v100("p3.2xlarge", 1), v100("p3.8xlarge", 4)],
        SimConfig {
            start: start(),
            boot: Duration::from_secs(60),
            ..SimConfig::default()
        },
    ))
}

/// The spec text of a job; `measured` adds the step its workers really take.
fn spec_text(name: &str, extra: &str, measured: bool) -> String {
    let mut s = format!(
        "name = \"{name}\"\nteam = \"t\"\naccelerators = [\"V100\"]\nlocal_batch = 64\n{extra}\n\
         [work]\nsamples = 2_000_000\n"
    );
    if measured {
        s.push_str(
            "[[observation]]\naccelerator = \"V100\"\ngpus = 1\nlocal_batch = 64\nstep_seconds = 0.2\n",
        );
    }
    s
}

/// The true speed of the job: what its measured twin forecasts.
fn truth(name: &str, extra: &str) -> Arc<dyn tern_plan::ThroughputModel> {
    let spec = parse_job_spec(&spec_text(name, extra, true), "truth.toml").expect("spec");
    crate::jobs::LoadedJob::from_spec(spec, None, name, start())
        .expect("load")
        .plan_job(start(), start(), 0.0)
        .model
}

fn config() -> ControllerConfig {
    let mut c = ControllerConfig::new("test-owner", vec![Region::new("us-west-2")]);
    c.pass_gap = Duration::from_secs(60);
    c
}

fn kinds(ctl: &Controller, job: &str) -> Vec<(String, String)> {
    ctl.store()
        .events(0, Some(job))
        .expect("events")
        .into_iter()
        .map(|e| (e.kind, e.message))
        .collect()
}

/// Passes a minute apart with simulated workers ([`SimWorld`]), until the job ends or
/// `minutes` pass; the controller and the workers back.
async fn run(
    ctl: Controller,
    sim: &Arc<SimCloud>,
    w: Workload,
    job: &str,
    minutes: usize,
) -> (Controller, Workload) {
    let minute = Duration::from_secs(60);
    let mut world = SimWorld::new(sim.clone(), ctl, minute).with_workers(Some(w));
    world
        .run(minutes, |ctl, _| {
            ctl.job(job).is_some_and(|j| j.state.is_final())
        })
        .await
        .expect("pass");
    (world.ctl, world.workers.unwrap_or_default())
}

#[tokio::test]
async fn a_job_nobody_measured_probes_is_measured_and_planned() {
    let sim = two_shapes();
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(&dir.path().join("s.db")).expect("store"));
    let mut ctl = Scenario::on(&sim, "test-owner")
        .store(store)
        .configured(config())
        .controller()
        .1;
    let extra = "workers = { min = 1, max = 4 }";
    let spec = parse_job_spec(&spec_text("cold", extra, false), "cold.toml").expect("spec");
    ctl.submit(spec, sim.now())
        .expect("a job without observations is accepted");
    let before = ctl.forecast("cold").expect("forecast");
    assert_eq!(before.basis, "none", "{before:?}");
    let w = Workload::new().with_truth("cold", truth("cold", extra));
    let (ctl, _w) = run(ctl, &sim, w, "cold", 30).await;

    let events = kinds(&ctl, "cold");
    let has = |k: &str| events.iter().any(|(kind, _)| kind == k);
    assert!(has("probe") && has("probed") && has("basis"), "{events:#?}");
    assert!(!has("unplaceable"), "{events:#?}");
    let probe = ctl
        .job("cold")
        .and_then(|j| j.probe.clone())
        .expect("a probe record");
    assert!(!probe.is_open(), "{probe:?}");
    assert_eq!(
        probe.instance_type, "p3.2xlarge",
        "the cheapest shape holding 1 GPU"
    );
    assert!(probe.seconds(sim.now()) <= probe.max_seconds, "{probe:?}");
    let after = ctl.forecast("cold").expect("forecast");
    assert_eq!(after.basis, "measured", "{after:?}");
    // The simulated workers ran 0.2 s steps of 64 on one V100 at the probe's shape.
    let f = ctl
        .fleet
        .jobs
        .get("cold")
        .and_then(|e| e.loaded.clone())
        .expect("loaded");
    let (basis, p) = f.forecast_at("V100", 1, 1);
    let step = p.expect("prediction").step_s;
    assert_eq!(basis.as_str(), "measured");
    assert!((step - 0.2).abs() / 0.2 < 0.10, "measured step {step}");
    // The plan after the probe stands on the measured steps: its event names no weaker basis.
    let planned: Vec<events::Placement> = ctl
        .typed_events(Some("cold"))
        .expect("events")
        .into_iter()
        .filter_map(|e| match e {
            Event::Planned { placement, .. } => Some(placement),
            _ => None,
        })
        .collect();
    let last = planned.last().expect("a plan");
    assert_eq!(last.basis, None, "{last:?}");
}

#[tokio::test]
async fn a_probe_whose_capacity_is_lost_ends_and_the_job_probes_again() {
    let sim = two_shapes();
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(&dir.path().join("s.db")).expect("store"));
    let mut ctl = Scenario::on(&sim, "test-owner")
        .store(store)
        .configured(config())
        .controller()
        .1;
    let extra = "workers = 1";
    let spec = parse_job_spec(&spec_text("lost", extra, false), "l.toml").expect("spec");
    ctl.submit(spec, sim.now()).expect("submit");
    ctl.pass(sim.now()).await.expect("pass");
    // The cloud loses the probe's instance before a step is measured.
    let ids: Vec<InstanceId> = ctl.instances().map(|i| i.id.clone()).collect();
    assert_eq!(ids.len(), 1, "the probe launched");
    sim.terminate(&ids[0]).await.expect("gone");
    let w = Workload::new().with_truth("lost", truth("lost", extra));
    let (ctl, _w) = run(ctl, &sim, w, "lost", 30).await;
    let events = kinds(&ctl, "lost");
    let probes = events.iter().filter(|(k, _)| k == "probe").count();
    assert_eq!(probes, 2, "{events:#?}");
    assert!(
        events
            .iter()
            .any(|(k, m)| k == "probed" && m.contains("its capacity was lost")),
        "{events:#?}"
    );
    assert_eq!(ctl.forecast("lost").expect("forecast").basis, "measured");
}

#[tokio::test]
async fn after_its_probe_a_job_moves_to_the_shape_its_deadline_needs_from_the_probes_checkpoint() {
    let sim = two_shapes();
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(&dir.path().join("s.db")).expect("store"));
    let mut ctl = Scenario::on(&sim, "test-owner")
        .store(store)
        .configured(config())
        .controller()
        .1;
    // 2 M samples at 0.2 s per 64 on one V100 is 1.7 h; due in 1.5 h, it needs the 4-GPU node.
    let extra = "workers = { min = 1, max = 4 }\ndeadline = \"90m\"\n\
                 [checkpoint]\ninterval = \"5m\"\nsave_seconds = 10\nrestore_seconds = 10";
    let spec = parse_job_spec(&spec_text("moves", extra, false), "m.toml").expect("spec");
    ctl.submit(spec, sim.now()).expect("submit");
    let w = Workload::new().with_truth("moves", truth("moves", extra));
    let (ctl, w) = run(ctl, &sim, w, "moves", 120).await;

    let events = kinds(&ctl, "moves");
    let probe = ctl
        .job("moves")
        .and_then(|j| j.probe.clone())
        .expect("probe");
    assert_eq!(probe.instance_type, "p3.2xlarge", "{probe:?}");
    let probed = events.iter().find(|(k, _)| k == "probed").expect("probed");
    assert!(
        probed.1.contains("moving to") && probed.1.contains("p3.8xlarge"),
        "{events:#?}"
    );
    assert!(events.iter().any(|(k, _)| k == "migrated"), "{events:#?}");
    let j = ctl.job("moves").expect("job");
    assert_eq!(j.state, crate::store::JobState::Finished, "{events:#?}");
    assert!(
        j.reason.is_none(),
        "finished by its deadline: {:?}",
        j.reason
    );
    assert!(
        j.target_offer
            .as_deref()
            .is_some_and(|o| o.contains("p3.8xlarge")),
        "{j:?}"
    );
    // The new node started from the checkpoint the drain took: what the simulated workers
    // did between that checkpoint and the probe node's release (one pass: at most a minute at
    // the 4-GPU node's 1,280 samples/s) is all that is lost, not the probe's work.
    let lost = w.lost_samples.get("moves").copied().unwrap_or(0.0);
    assert!(lost <= 1280.0 * 60.0, "lost {lost} samples");
}

/// One zone selling a 1-GPU V100 shape and a slower 1-GPU L4 shape at `l4_spot` $/h.
fn two_accelerators(l4_spot: f64) -> Arc<SimCloud> {
    let l4 = InstanceType {
        name: "g6.xlarge".into(),
        vcpus: 4.0,
        memory_gib: 16.0,
        accelerator: Some(Accelerator::new("L4", 1)),
    };
    Arc::new(SimCloud::with_types(
        vec![
            trace("us-west-2a", 0.9, 3.06),
            trace("us-west-2a", l4_spot, 0.80),
        ],
        vec![v100("p3.2xlarge", 1), l4],
        SimConfig {
            start: start(),
            boot: Duration::from_secs(60),
            ..SimConfig::default()
        },
    ))
}

#[tokio::test]
async fn a_second_accelerator_is_probed_when_its_prior_costs_money_and_the_job_moves_there() {
    let sim = two_accelerators(0.35);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(&dir.path().join("s.db")).expect("store"));
    let mut ctl = Scenario::on(&sim, "test-owner")
        .store(store)
        .configured(config())
        .controller()
        .1;
    // Measured on a V100 (0.2 s per 64), allowed an L4 nobody measured. 30 M samples: 26 h
    // on the V100; on the L4, 46 h at the datasheet prior's expected speed (cheaper per
    // sample) but 110 h at that prior's pessimistic bound, past the 64 h deadline. Until the
    // L4 is measured only the V100 plan is safe; measured, the L4's plan fits.
    let text = "name = \"two\"\nteam = \"t\"\naccelerators = [\"V100\", \"L4\"]\n\
                local_batch = 64\nworkers = 1\ndeadline = \"64h\"\n[work]\nsamples = 30_000_000\n\
                [[observation]]\naccelerator = \"V100\"\ngpus = 1\nlocal_batch = 64\nstep_seconds = 0.2\n";
    let spec = parse_job_spec(text, "two.toml").expect("spec");
    ctl.submit(spec, sim.now()).expect("submit");
    // The L4 really runs at its prior's expected speed.
    let model = ctl.model("two").expect("model");
    let w = Workload::new().with_truth("two", model);
    let (ctl, _w) = run(ctl, &sim, w, "two", 40).await;

    let events = kinds(&ctl, "two");
    let probes: Vec<&String> = events
        .iter()
        .filter(|(k, _)| k == "probe")
        .map(|(_, m)| m)
        .collect();
    assert_eq!(probes.len(), 1, "{events:#?}");
    assert!(
        probes[0].contains("g6.xlarge") && probes[0].contains("expected to pay"),
        "{probes:?}"
    );
    let j = ctl.job("two").expect("job");
    let p = j.probe.clone().expect("probe");
    assert_eq!(p.accelerator, "L4");
    assert!(!p.is_open(), "{p:?}\n{events:#?}");
    assert!(
        j.target_offer
            .as_deref()
            .is_some_and(|o| o.contains("g6.xlarge")),
        "{j:?}\n{events:#?}"
    );
    assert_eq!(ctl.forecast("two").expect("forecast").basis, "measured");
}

#[tokio::test]
async fn no_second_probe_when_what_it_could_find_would_not_change_the_plan() {
    // The L4 at $0.10/h: even at the slowest speed its prior allows it is the cheaper choice.
    let sim = two_accelerators(0.10);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(&dir.path().join("s.db")).expect("store"));
    let mut ctl = Scenario::on(&sim, "test-owner")
        .store(store)
        .configured(config())
        .controller()
        .1;
    // As above with a deadline loose enough for the L4's pessimistic bound: the plan takes
    // the L4 on its prior, and knowing its speed better would not change what it buys.
    let text = "name = \"loose\"\nteam = \"t\"\naccelerators = [\"V100\", \"L4\"]\n\
                local_batch = 64\nworkers = 1\ndeadline = \"300h\"\n[work]\nsamples = 30_000_000\n\
                [[observation]]\naccelerator = \"V100\"\ngpus = 1\nlocal_batch = 64\nstep_seconds = 0.2\n";
    ctl.submit(parse_job_spec(text, "l.toml").expect("spec"), sim.now())
        .expect("submit");
    ctl.pass(sim.now()).await.expect("pass");
    let events = kinds(&ctl, "loose");
    assert!(events.iter().all(|(k, _)| k != "probe"), "{events:#?}");
    assert!(ctl.job("loose").is_some_and(|j| j.probe.is_none()));
}

#[tokio::test]
async fn a_probed_job_no_plan_fits_at_the_pessimistic_bound_goes_on_at_the_expected_speed() {
    let sim = two_shapes();
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(&dir.path().join("s.db")).expect("store"));
    let mut ctl = Scenario::on(&sim, "test-owner")
        .store(store)
        .configured(config())
        .controller()
        .1;
    // 2 M samples in 45 minutes: the 4-GPU node's expected half hour fits, the bound of a
    // forecast measured on one GPU does not.
    let extra = "workers = { min = 1, max = 4 }\ndeadline = \"45m\"";
    let spec = parse_job_spec(&spec_text("late", extra, false), "l.toml").expect("spec");
    ctl.submit(spec, sim.now()).expect("submit");
    let w = Workload::new().with_truth("late", truth("late", extra));
    let (ctl, _w) = run(ctl, &sim, w, "late", 10).await;
    let events = kinds(&ctl, "late");
    let probed = events
        .iter()
        .find(|(k, _)| k == "probed")
        .unwrap_or_else(|| panic!("{events:#?}"));
    assert!(
        probed.1.contains("p3.8xlarge") && probed.1.contains("planned at the expected speed"),
        "{probed:?}"
    );
}

/// Submits a ResNet-50-sized job (2.46e10 FLOPs a sample, 2 M samples) on up to 4 V100s with
/// only a hint, due in `deadline`, and runs one pass: about half an hour at the hint's
/// expected speed, 2.1 h at its pessimistic bound.
async fn hinted(deadline: &str) -> (Controller, Vec<(String, String)>) {
    let sim = two_shapes();
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(&dir.path().join("s.db")).expect("store"));
    let mut ctl = Scenario::on(&sim, "test-owner")
        .store(store)
        .configured(config())
        .controller()
        .1;
    let extra = format!(
        "workers = {{ min = 1, max = 4 }}\ndeadline = \"{deadline}\"\n\
         [hint]\nflops_per_sample = 2.46e10\nparams = 2.56e7"
    );
    let spec = parse_job_spec(&spec_text("tight", &extra, false), "t.toml").expect("spec");
    ctl.submit(spec, sim.now()).expect("submit");
    assert_eq!(ctl.forecast("tight").expect("forecast").basis, "hint");
    ctl.pass(sim.now()).await.expect("pass");
    let events = kinds(&ctl, "tight");
    assert!(
        events.iter().all(|(k, _)| k != "probe"),
        "no probe: {events:#?}"
    );
    assert!(ctl.job("tight").is_some_and(|j| j.probe.is_none()));
    drop(dir);
    (ctl, events)
}

#[tokio::test]
async fn a_deadline_with_no_room_for_a_probe_plans_on_the_hints_pessimistic_bound() {
    // 140 minutes: the pessimistic 2.1 h fits, but not after a 15-minute probe.
    let (_, events) = hinted("140m").await;
    let cold = events.iter().find(|(k, _)| k == "cold-start");
    assert!(
        cold.is_some_and(|(_, m)| m.contains("no room for a probe")),
        "{events:#?}"
    );
    // Placed or waiting for spot as the deadline policy decides, never refused.
    assert!(
        events.iter().any(|(k, _)| k == "plan" || k == "wait"),
        "{events:#?}"
    );
    assert!(
        events.iter().all(|(k, _)| k != "unplaceable"),
        "{events:#?}"
    );
    if let Some((_, m)) = events.iter().find(|(k, _)| k == "plan") {
        assert!(m.contains("forecast: hint"), "{m}");
        assert!(!m.contains("expected speed"), "{m}");
    }
}

#[tokio::test]
async fn a_deadline_too_tight_even_for_the_pessimistic_bound_is_planned_at_the_hints_speed() {
    let (_, events) = hinted("70m").await;
    assert!(
        events.iter().all(|(k, _)| k != "unplaceable"),
        "{events:#?}"
    );
    let plan = events
        .iter()
        .find(|(k, _)| k == "plan")
        .unwrap_or_else(|| panic!("a plan: {events:#?}"));
    assert!(plan.1.contains("no room for a probe"), "{plan:?}");
    assert!(plan.1.contains("expected speed"), "{plan:?}");
}

fn open_probe(price: f64, nodes: u32, max_seconds: f64, max_usd: f64) -> ProbeRecord {
    ProbeRecord {
        accelerator: "V100".into(),
        instance_type: "p3.2xlarge".into(),
        offer: "sim/z/p3.2xlarge/spot".into(),
        nodes,
        price_per_hour: price,
        max_seconds,
        max_usd,
        started_at: start(),
        running_at: Some(start()),
        probing_since: None,
        ended_at: None,
        outcome: None,
    }
}

proptest! {
    /// Whatever the pass timing (each pass within `gap` of the one before, and no later than
    /// the one a probe asks for), a probe that measures nothing ends at or before its time
    /// bound and having spent at most its money bound, once its bound exceeds one gap.
    #[test]
    fn a_probe_never_runs_past_its_bounds(
        price in 0.1f64..100.0,
        nodes in 1u32..8,
        max_seconds in 120.0f64..7200.0,
        max_usd in 0.5f64..50.0,
        gap in 1.0f64..60.0,
        jitter in proptest::collection::vec(0.0f64..1.0, 1..4000),
    ) {
        let p = open_probe(price, nodes, max_seconds, max_usd);
        prop_assume!(probe::limit_seconds(&p) > gap);
        let mut t = 0.0;
        let mut ended = None;
        for j in jitter.iter().cycle().take(100_000) {
            let now = start() + chrono::TimeDelta::milliseconds((t * 1e3) as i64);
            match probe::verdict(&p, 0, now, gap) {
                Verdict::End(why) => {
                    ended = Some((t, why));
                    break;
                }
                // The next pass: within the gap, and no later than the probe asked.
                Verdict::Continue(d) => t += (gap * j).min(d.as_secs_f64()).max(1e-3),
            }
        }
        let (t, why) = ended.expect("the probe ended");
        prop_assert_eq!(why, Ended::Bound);
        prop_assert!(t <= max_seconds + 1e-3, "ran {t} s of {max_seconds}");
        let usd = t / 3600.0 * price * f64::from(nodes);
        prop_assert!(usd <= max_usd + 1e-6, "spent {usd} of {max_usd}");
    }
}

#[test]
fn a_probe_ends_as_soon_as_enough_steps_are_measured() {
    let p = open_probe(1.0, 1, 900.0, 10.0);
    let now = start() + chrono::TimeDelta::seconds(30);
    assert!(matches!(
        probe::verdict(&p, 1, now, 10.0),
        Verdict::Continue(_)
    ));
    assert_eq!(
        probe::verdict(&p, probe::MIN_REPORTS, now, 10.0),
        Verdict::End(Ended::Measured)
    );
}
