use chrono::TimeDelta;
use proptest::prelude::*;
use tern_cloud::JobSpec;

use super::*;
use crate::report::bill::bill;

fn t(h: f64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_006_400, 0).expect("time")
        + TimeDelta::milliseconds((h * 3.6e6).round() as i64)
}

/// A job planned at `planned` dollars, with a checkpoint that restores in `restore_s`.
fn record(planned: Option<f64>, restore_s: f64, done: f64) -> JobRecord {
    let mut spec: JobSpec = tern_cloud::testkit::spec("j").samples(1000).build();
    spec.checkpoint.restore_s = restore_s;
    let mut r = JobRecord::new(spec, t(0.0));
    r.planned_cost = planned;
    r.done_samples = done;
    r
}

const SPOT_A: &str = "aws/use1-az1/p3.2xlarge/spot";
const SPOT_B: &str = "aws/use1-az2/p3.2xlarge/spot";
const OD_A: &str = "aws/use1-az1/p3.2xlarge/on-demand";
/// Another instance type, for replacements and moves in the property test.
const G5_B: &str = "aws/use1-az2/g5.xlarge/spot";

fn usage(id: &str, key: &str, price: f64, from: f64, to: f64) -> Usage {
    Usage {
        instance: id.into(),
        job: "j".into(),
        offer_key: key.into(),
        capacity: pool_of(key).expect("key").2,
        price_per_hour: price,
        on_demand_per_hour: None,
        started_at: t(from),
        ended_at: Some(t(to)),
    }
}

fn planned(at: f64, key: &str, nodes: u32, cost: f64) -> (DateTime<Utc>, Change) {
    let (zone, instance_type, capacity) = pool_of(key).expect("key");
    (
        t(at),
        Change::Planned {
            zone,
            instance_type,
            capacity,
            nodes,
            expected_cost: cost,
            finish_h: 1.0,
        },
    )
}

/// A run to attribute: the record, its usage billed with `prices`, its events and probe.
struct Case {
    record: JobRecord,
    usage: Vec<Usage>,
    prices: PriceLog,
    events: Vec<(DateTime<Utc>, Change)>,
    probe: Option<Window>,
    rates: BTreeMap<String, f64>,
}

impl Case {
    fn billed(&self) -> Vec<Vec<Billed>> {
        self.usage
            .iter()
            .map(|u| {
                let log = self.prices.get(&u.offer_key).map_or(&[][..], |p| &p[..]);
                bill(u, None, log, (None, DateTime::<Utc>::MAX_UTC), t(1000.0))
            })
            .collect()
    }

    /// The parts, and `cost − plan` as the bill says.
    fn attribute(&self) -> (Attribution, f64) {
        let billed = self.billed();
        let run = JobRun {
            record: &self.record,
            billed: self
                .usage
                .iter()
                .zip(&billed)
                .map(|(u, b)| (u, &b[..]))
                .collect(),
            prices: &self.prices,
            events: self.events.clone(),
            probe: self.probe,
            rates: &self.rates,
        };
        let cost: f64 = billed.iter().flatten().map(|b| b.piece.dollars()).sum();
        (
            attribute(&run),
            cost - self.record.planned_cost.unwrap_or(0.0),
        )
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn flat(keys: &[(&str, f64)]) -> PriceLog {
    keys.iter()
        .map(|(k, p)| (k.to_string(), vec![(t(-1.0), *p)]))
        .collect()
}

#[test]
fn a_run_as_planned_has_only_zeros() {
    // Planned: 2 nodes × 5 h at $1/h = $10. Ran exactly that on the planned pool.
    let case = Case {
        record: record(Some(10.0), 60.0, 1000.0),
        usage: vec![
            usage("i-1", SPOT_A, 1.0, 0.0, 5.0),
            usage("i-2", SPOT_A, 1.0, 0.0, 5.0),
        ],
        prices: flat(&[(SPOT_A, 1.0), (SPOT_B, 0.5)]),
        events: vec![planned(0.0, SPOT_A, 2, 10.0)],
        probe: None,
        rates: BTreeMap::new(),
    };
    let (a, diff) = case.attribute();
    assert!(close(diff, 0.0));
    assert_eq!(a, Attribution::default(), "{a:?}");
}

#[test]
fn a_slower_run_is_forecast_error_and_a_price_rise_is_prices() {
    // Planned $5 (5 node-hours at $1). It took 8 h, and the price doubled from hour 6:
    // billed 6 × $1 + 2 × $2 = $10. Prices: 2 h × ($2 − $1) = $2; forecast: 3 h × $1 = $3.
    let mut prices = flat(&[(SPOT_A, 1.0)]);
    prices.get_mut(SPOT_A).expect("log").push((t(6.0), 2.0));
    let case = Case {
        record: record(Some(5.0), 0.0, 1000.0),
        usage: vec![usage("i-1", SPOT_A, 1.0, 0.0, 8.0)],
        prices,
        events: vec![planned(0.0, SPOT_A, 1, 5.0)],
        probe: None,
        rates: BTreeMap::new(),
    };
    let (a, diff) = case.attribute();
    assert!(close(diff, 5.0), "{diff}");
    assert!(close(a.prices, 2.0), "{a:?}");
    assert!(close(a.forecast, 3.0), "{a:?}");
    assert!(close(a.total(), diff));
    assert_eq!(
        (a.interruptions, a.moves, a.fallback, a.probe),
        (0.0, 0.0, 0.0, 0.0)
    );
}

#[test]
fn a_move_to_a_cheaper_pool_shows_its_overlap_against_its_saving() {
    // Planned 1 node × 10 h at $1 in az1 ($10). At 2 h it moves to az2 at $0.50: the new node
    // starts at 2 h, the old one is released at 2.5 h (0.5 h overlap); restore takes 360 s.
    // Billed: 2.5 × $1 + 8.5 × $0.50 = $6.75, so −$3.25 against the plan.
    // Moves: the pool difference, 8.5 h × ($0.50 − $1) = −$4.25, plus the overhead at the
    // plan's price, (0.5 + 0.1) node-hours × $1 = $0.60: −$3.65. Forecast: the rest of the
    // 11 node-hours, 11 − 0.6 = 10.4 h × $1 − $10 = $0.40.
    let case = Case {
        record: record(Some(10.0), 360.0, 1000.0),
        usage: vec![
            usage("i-1", SPOT_A, 1.0, 0.0, 2.5),
            usage("i-2", SPOT_B, 0.5, 2.0, 10.5),
        ],
        prices: flat(&[(SPOT_A, 1.0), (SPOT_B, 0.5)]),
        events: vec![
            planned(0.0, SPOT_A, 1, 10.0),
            (t(2.0), migrating(1)),
            (t(2.5), Change::Migrated),
        ],
        probe: None,
        rates: BTreeMap::new(),
    };
    let (a, diff) = case.attribute();
    assert!(close(diff, -3.25), "{diff}");
    assert!(close(a.moves, -3.65), "{a:?}");
    assert!(close(a.forecast, 0.40), "{a:?}");
    assert!(close(a.total(), diff));
}

fn migrating(moved: u32) -> Change {
    Change::Migrating { moved }
}

#[test]
fn a_reclaim_costs_the_redone_work_the_restore_and_the_replacements_boot() {
    // Planned 1 node × 4 h at $1. Reclaimed at 2 h with 100 of the job's 1,000 samples since
    // its checkpoint; the replacement launches at 2 h, its workers start at 2.1 h, restore
    // takes 180 s. It ran 2 + 2.6 = 4.6 node-hours: 1,000 samples / 4.6 h = 217.4/h, so the
    // redo is 0.46 h; with 0.05 h restore and 0.1 h boot, interruptions are 0.61 h × $1.
    let case = Case {
        record: record(Some(4.0), 180.0, 1000.0),
        usage: vec![
            usage("i-1", SPOT_A, 1.0, 0.0, 2.0),
            usage("i-2", SPOT_A, 1.0, 2.0, 4.6),
        ],
        prices: flat(&[(SPOT_A, 1.0)]),
        events: vec![
            planned(0.0, SPOT_A, 1, 4.0),
            (
                t(2.0),
                Change::Preempted {
                    ids: vec!["i-1".into()],
                    lost_samples: 100.0,
                },
            ),
            (
                t(2.1),
                Change::WorkersStarted {
                    instance: "i-2".into(),
                },
            ),
        ],
        probe: None,
        rates: BTreeMap::new(),
    };
    let (a, diff) = case.attribute();
    assert!(close(diff, 0.6), "{diff}");
    assert!(close(a.interruptions, 0.46 + 0.05 + 0.1), "{a:?}");
    assert!(close(a.forecast, 0.6 - 0.61), "{a:?}");
    assert!(close(a.total(), diff));
}

#[test]
fn hours_of_another_instance_type_count_by_the_work_they_do() {
    // Planned 1× p4d (rate 8) for 2 h at $8/h = $16. Reclaimed at 1 h (restore instant); the
    // replacement is 8× p3 (rate 1 each) at $0.50/h for 1 h: 8 p3-hours do 1 p4d-hour's work.
    // Billed 8 + 4 = $12. The work took the plan's 2 p4d-hours (forecast 0); the replacement's
    // hour of work cost $4 where the plan's pool charges $8: interruptions −$4.
    const P4D: &str = "aws/use1-az1/p4d.24xlarge/spot";
    let mut usage_list = vec![usage("i-1", P4D, 8.0, 0.0, 1.0)];
    for i in 0..8 {
        usage_list.push(usage(&format!("i-r{i}"), SPOT_A, 0.5, 1.0, 2.0));
    }
    let case = Case {
        record: record(Some(16.0), 0.0, 1000.0),
        usage: usage_list,
        prices: flat(&[(P4D, 8.0), (SPOT_A, 0.5)]),
        events: vec![
            planned(0.0, P4D, 1, 16.0),
            (
                t(1.0),
                Change::Notice {
                    ids: vec!["i-1".into()],
                },
            ),
        ],
        probe: None,
        rates: BTreeMap::from([
            ("p4d.24xlarge".to_string(), 8.0),
            ("p3.2xlarge".to_string(), 1.0),
        ]),
    };
    let (a, diff) = case.attribute();
    assert!(close(diff, -4.0), "{diff}");
    assert!(close(a.interruptions, -4.0), "{a:?}");
    assert!(close(a.forecast, 0.0), "{a:?}");
    assert!(close(a.total(), diff));
}

#[test]
fn on_demand_where_the_plan_said_spot_is_fallback_and_probe_spend_is_probe() {
    // Planned 1 spot node × 4 h at $1. A probe ran on its node for the first 0.5 h; the job
    // then ran to 3 h on spot and 1 h on demand at $3 (the deadline). Billed: 3 + 3 = $6.
    let case = Case {
        record: record(Some(4.0), 0.0, 1000.0),
        usage: vec![
            usage("i-1", SPOT_A, 1.0, 0.0, 3.0),
            usage("i-2", OD_A, 3.0, 3.0, 4.0),
        ],
        prices: flat(&[(SPOT_A, 1.0), (OD_A, 3.0)]),
        events: vec![planned(0.0, SPOT_A, 1, 4.0)],
        probe: Some((t(0.0), t(0.5))),
        rates: BTreeMap::new(),
    };
    let (a, diff) = case.attribute();
    assert!(close(diff, 2.0), "{diff}");
    assert!(close(a.probe, 0.5), "{a:?}");
    assert!(close(a.fallback, 2.0), "{a:?}");
    // 3.5 node-hours outside the probe against the plan's 4.
    assert!(close(a.forecast, -0.5), "{a:?}");
    assert!(close(a.total(), diff));
}

#[test]
fn a_job_never_planned_counts_its_cost_against_a_plan_of_zero() {
    let case = Case {
        record: record(None, 0.0, 0.0),
        usage: vec![usage("i-1", SPOT_A, 1.0, 0.0, 2.0)],
        prices: flat(&[(SPOT_A, 1.0)]),
        events: Vec::new(),
        probe: Some((t(0.0), t(2.0))),
        rates: BTreeMap::new(),
    };
    let (a, diff) = case.attribute();
    assert!(close(diff, 2.0));
    assert!(close(a.probe, 2.0), "{a:?}");
    assert!(close(a.total(), diff));
}

/// One random run: which causes it has, and its shape.
#[derive(Debug, Clone)]
struct Random {
    forecast_error: bool,
    price_moves: bool,
    notices: bool,
    moves: bool,
    fallback: bool,
    probe: bool,
    nodes: u32,
    hours: f64,
    price: f64,
    seed: u64,
}

fn random() -> impl Strategy<Value = Random> {
    (
        (any::<bool>(), any::<bool>(), any::<bool>()),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        1u32..5,
        0.5f64..30.0,
        0.1f64..8.0,
        any::<u64>(),
    )
        .prop_map(
            |(
                (forecast_error, price_moves, notices),
                (moves, fallback, probe),
                nodes,
                hours,
                price,
                seed,
            )| {
                Random {
                    forecast_error,
                    price_moves,
                    notices,
                    moves,
                    fallback,
                    probe,
                    nodes,
                    hours,
                    price,
                    seed,
                }
            },
        )
}

/// A deterministic generator for the run's details (splitmix64).
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Build the run `r` describes: its nodes run `hours` on the planned pool, with each cause
/// present only when its flag says so.
fn build(r: &Random) -> Case {
    let mut d = Draw(r.seed);
    let p = r.price;
    let other = p * (0.3 + d.next());
    let on_demand = p * (2.0 + d.next());
    let mut prices = flat(&[(SPOT_A, p), (G5_B, other), (OD_A, on_demand)]);
    if r.price_moves {
        for key in [SPOT_A, G5_B, OD_A] {
            let log = prices.get_mut(key).expect("log");
            for _ in 0..3 {
                let at = d.next() * r.hours * 1.5;
                log.push((t(at), log[0].1 * (0.5 + d.next())));
            }
            log.sort_by_key(|a| a.0);
        }
    }
    // Whole seconds, as the cloud bills.
    let planned_h = (r.hours * 3600.0).round() / 3600.0;
    let ran_h = if r.forecast_error {
        planned_h * (0.5 + d.next())
    } else {
        planned_h
    };
    let mut events = vec![planned(
        0.0,
        SPOT_A,
        r.nodes,
        f64::from(r.nodes) * planned_h * p,
    )];
    let mut usage = Vec::new();
    let mut next_id = 0;
    let mut id = || {
        next_id += 1;
        format!("i-{next_id}")
    };
    for _ in 0..r.nodes {
        // Each node's life: a first stretch, then what the flags add after it.
        let split = ran_h * (0.2 + 0.6 * d.next());
        let me = id();
        if r.notices && d.next() < 0.7 {
            usage.push(usage_at(&me, SPOT_A, &prices, 0.0, split));
            events.push((
                t(split),
                Change::Preempted {
                    ids: vec![me],
                    lost_samples: 500.0 * d.next(),
                },
            ));
            let next = id();
            events.push((
                t(split + 0.05),
                Change::WorkersStarted {
                    instance: next.clone(),
                },
            ));
            let key = if d.next() < 0.5 { SPOT_A } else { G5_B };
            usage.push(usage_at(&next, key, &prices, split, ran_h + 0.1));
        } else if r.moves && d.next() < 0.7 {
            let overlap = 0.2 * d.next();
            usage.push(usage_at(&me, SPOT_A, &prices, 0.0, split + overlap));
            events.push((t(split), migrating(1)));
            events.push((t(split + overlap), Change::Migrated));
            usage.push(usage_at(&id(), G5_B, &prices, split, ran_h));
        } else if r.fallback && d.next() < 0.7 {
            usage.push(usage_at(&me, SPOT_A, &prices, 0.0, split));
            usage.push(usage_at(&id(), OD_A, &prices, split, ran_h));
        } else {
            usage.push(usage_at(&me, SPOT_A, &prices, 0.0, ran_h));
        }
    }
    if r.probe {
        // The probe measures the job before its plan, on a node of its own.
        usage.push(usage_at(&id(), SPOT_A, &prices, -0.5, 0.0));
    }
    events.sort_by_key(|a| a.0);
    Case {
        record: record(
            Some(f64::from(r.nodes) * planned_h * p),
            600.0 * d.next(),
            1000.0 * f64::from(r.nodes),
        ),
        usage,
        prices,
        events,
        probe: r.probe.then(|| (t(-0.5), t(0.0))),
        // The other type does 0.3 to 2.3 times the work of the planned one per node-hour.
        rates: BTreeMap::from([
            ("p3.2xlarge".to_string(), 1.0),
            ("g5.xlarge".to_string(), 0.3 + 2.0 * d.next()),
        ]),
    }
}

/// An interval on `key` launched at its price then.
fn usage_at(id: &str, key: &str, prices: &PriceLog, from: f64, to: f64) -> Usage {
    let price = price_at(prices, key, t(from)).expect("priced");
    usage(id, key, price, from, to.max(from + 0.02))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn the_parts_sum_to_actual_minus_plan_and_are_zero_without_their_cause(r in random()) {
        let case = build(&r);
        let (a, diff) = case.attribute();
        prop_assert!((a.total() - diff).abs() < 0.01, "{:?} sums to {} not {}", a, a.total(), diff);
        let zero = |v: f64| v.abs() < 1e-6;
        if !r.forecast_error && !r.notices && !r.moves && !r.fallback {
            prop_assert!(zero(a.forecast), "forecast {:?}", a);
        }
        if !r.price_moves {
            prop_assert!(zero(a.prices), "prices {:?}", a);
        }
        if !r.notices {
            prop_assert!(zero(a.interruptions), "interruptions {:?}", a);
        }
        if !r.moves {
            prop_assert!(zero(a.moves), "moves {:?}", a);
        }
        if !r.fallback {
            prop_assert!(zero(a.fallback), "fallback {:?}", a);
        }
        if !r.probe {
            prop_assert!(zero(a.probe), "probe {:?}", a);
        }
        if !(r.forecast_error || r.price_moves || r.notices || r.moves || r.fallback || r.probe) {
            prop_assert!(zero(a.total()), "a run as planned: {:?}", a);
        }
    }
}

#[test]
fn stored_event_fields_are_read_as_typed_events_into_what_attribution_reads() {
    use crate::event::{Event, Placement, read};
    let change = |v: &serde_json::Value| read(v).as_ref().and_then(Change::of);
    let planned = Event::Planned {
        job: "j".into(),
        placement: Placement {
            solver: "milp".into(),
            nodes: 2,
            instance_type: "p4d.24xlarge".into(),
            capacity: Capacity::Spot,
            zone: "use1-az1".into(),
            expected_cost: 42.5,
            egress_usd: 0.0,
            finish_h: 6.0,
            deadline_h: None,
            versus_cheapest: None,
            policy: None,
            basis: None,
        },
    };
    let plan = serde_json::to_value(&planned).expect("json");
    assert_eq!(
        change(&plan),
        Some(Change::Planned {
            zone: "use1-az1".into(),
            instance_type: "p4d.24xlarge".into(),
            capacity: Capacity::Spot,
            nodes: 2,
            expected_cost: 42.5,
            finish_h: 6.0,
        })
    );
    // Stored before lost_samples was recorded (and a placement before its optional notes).
    let gone = serde_json::json!({"event": "preempted", "job": "j", "ids": ["i-1"]});
    assert_eq!(
        change(&gone),
        Some(Change::Preempted {
            ids: vec!["i-1".into()],
            lost_samples: 0.0
        })
    );
    let mut old_plan = plan.clone();
    for note in ["deadline_h", "versus_cheapest", "policy", "basis"] {
        old_plan["placement"]
            .as_object_mut()
            .expect("object")
            .remove(note);
    }
    assert_eq!(change(&old_plan), change(&plan));
    let finished = Event::Finished {
        job: "j".into(),
        late_h: None,
        took_h: 1.0,
    };
    assert_eq!(
        change(&serde_json::to_value(&finished).expect("json")),
        None
    );
    assert_eq!(change(&serde_json::json!({"event": "plan"})), None);
}
