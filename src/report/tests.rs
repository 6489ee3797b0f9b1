use chrono::{DateTime, TimeDelta, Utc};
use tern_cloud::{Capacity, JobSpec};

use super::*;
use crate::store::ProbeRecord;

fn t(h: f64) -> DateTime<Utc> {
    // 2023-11-15T00:00:00Z plus `h` hours.
    DateTime::from_timestamp(1_700_006_400, 0).expect("time")
        + TimeDelta::milliseconds((h * 3.6e6) as i64)
}

fn job(name: &str, team: &str, state: JobState) -> JobRecord {
    // 100 steps of 10: 1,000 samples.
    let spec: JobSpec = tern_cloud::testkit::spec(name)
        .team(team)
        .local_batch(None)
        .samples(1000)
        .unmeasured()
        .build();
    let mut j = JobRecord::new(spec, t(0.0));
    j.state = state;
    j
}

fn usage(job: &str, id: &str, cap: Capacity, price: f64, from: f64, to: Option<f64>) -> Usage {
    Usage {
        instance: id.into(),
        job: job.into(),
        offer_key: format!("aws/use1-az1/p3.2xlarge/{}", cap.as_str()),
        capacity: cap,
        price_per_hour: price,
        on_demand_per_hour: Some(3.0),
        started_at: t(from),
        ended_at: to.map(t),
    }
}

fn ledger() -> Ledger {
    let mut a = job("a", "nlp", JobState::Finished);
    a.planned_cost = Some(4.0);
    let b = job("b", "vision", JobState::Unplaceable);
    // Job a: three recoveries (four instances), one on demand at the end.
    let usage = vec![
        usage("a", "i-1", Capacity::Spot, 1.0, 0.0, Some(1.0)),
        usage("a", "i-2", Capacity::Spot, 1.0, 1.5, Some(2.5)),
        usage("a", "i-3", Capacity::Spot, 1.0, 3.0, Some(4.0)),
        usage("a", "i-4", Capacity::OnDemand, 3.0, 4.0, Some(4.5)),
    ];
    Ledger {
        jobs: vec![a, b],
        usage: usage.into_iter().map(|u| (u, None)).collect(),
        prices: BTreeMap::new(),
        budgets: BTreeMap::from([(
            "nlp".to_string(),
            Budget {
                total_usd: Some(10.0),
                per_hour_usd: None,
            },
        )]),
    }
}

#[test]
fn a_job_with_three_recoveries_is_one_row_and_a_job_that_never_ran_costs_nothing() {
    let r = build(&ledger(), &CostQuery::default(), t(10.0)).expect("report");
    assert_eq!(r.rows.len(), 2);
    let a = &r.rows[0];
    assert_eq!((a.key.as_str(), a.instances), ("a", 4));
    // 3 spot hours at $1 + 0.5 on-demand hours at $3.
    assert!((a.cost - 4.5).abs() < 1e-9, "{}", a.cost);
    // The same 3.5 instance-hours on demand at $3.
    assert!((a.on_demand_cost - 10.5).abs() < 1e-9);
    assert!((a.spot_share - 3.0 / 3.5).abs() < 1e-9);
    assert_eq!(a.plan_error.map(|e| (e * 100.0).round()), Some(50.0));
    let b = &r.rows[1];
    assert_eq!(b.cost, 0.0);
    assert!(
        b.state
            .as_deref()
            .is_some_and(|s| s.starts_with("unplaceable"))
    );
    assert!((r.total.cost - 4.5).abs() < 1e-9);
    let hidden = CostQuery {
        launched_only: true,
        ..CostQuery::default()
    };
    assert_eq!(build(&ledger(), &hidden, t(10.0)).expect("r").rows.len(), 1);
    let split = CostQuery {
        split: true,
        ..CostQuery::default()
    };
    assert_eq!(
        build(&ledger(), &split, t(10.0)).expect("r").segments.len(),
        4
    );
}

#[test]
fn a_price_change_mid_interval_is_billed_at_both_prices() {
    let mut l = ledger();
    // i-1 ran 0–1 h launched at $1/h; the spot price moved to $2/h at 15 min.
    l.prices.insert(
        "aws/use1-az1/p3.2xlarge/spot".into(),
        vec![(t(0.25), 2.0), (t(1.6), 1.0)],
    );
    let q = CostQuery {
        job: Some("a".into()),
        split: true,
        ..CostQuery::default()
    };
    let r = build(&l, &q, t(10.0)).expect("report");
    // i-1: 0.25 × 1 + 0.75 × 2 = 1.75; i-2 (1.5–2.5, launched at $1, change to $2 at 0.25 h
    // is before its launch, to $1 at 1.6 h): 0.1 × 1 + 0.9 × 1 = 1.0 — the launch price
    // holds until the first change after the launch; i-3: 1.0; i-4: 1.5.
    let i1 = &r.segments[0];
    assert!((i1.cost - 1.75).abs() < 1e-9, "{}", i1.cost);
    assert!(
        (r.total.cost - (1.75 + 1.0 + 1.0 + 1.5)).abs() < 1e-9,
        "{}",
        r.total.cost
    );
}

#[test]
fn groupings_add_up_to_the_same_total() {
    let l = ledger();
    let total = build(&l, &CostQuery::default(), t(10.0))
        .expect("r")
        .total
        .cost;
    for by in GroupBy::ALL {
        let q = CostQuery {
            by,
            ..CostQuery::default()
        };
        let r = build(&l, &q, t(10.0)).expect("report");
        let sum: f64 = r.rows.iter().map(|x| x.cost).sum();
        assert!((sum - total).abs() < 1e-9, "{by:?}: {sum} vs {total}");
        assert!((r.total.cost - total).abs() < 1e-9);
    }
    let by_cap = build(
        &l,
        &CostQuery {
            by: GroupBy::Capacity,
            ..CostQuery::default()
        },
        t(10.0),
    )
    .expect("r");
    let keys: Vec<&str> = by_cap.rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["on-demand", "spot"]);
}

#[test]
fn the_window_clips_intervals() {
    let q = CostQuery {
        since: Some(t(0.5)),
        until: Some(t(2.0)),
        ..CostQuery::default()
    };
    let r = build(&ledger(), &q, t(10.0)).expect("report");
    // i-1 from 0.5 to 1.0 and i-2 from 1.5 to 2.0, at $1/h.
    assert!((r.total.cost - 1.0).abs() < 1e-9, "{}", r.total.cost);
}

#[test]
fn bad_queries_are_refused_with_what_exists() {
    let l = ledger();
    let late = CostQuery {
        since: Some(t(5.0)),
        until: Some(t(1.0)),
        ..CostQuery::default()
    };
    let e = build(&l, &late, t(10.0)).expect_err("since after until");
    assert!(e.to_string().contains("is after --until"), "{e}");
    let q = CostQuery {
        job: Some("nope".into()),
        ..CostQuery::default()
    };
    let e = build(&l, &q, t(10.0)).expect_err("unknown job");
    assert!(
        e.to_string().contains("no job named 'nope'") && e.to_string().contains("a, b"),
        "{e}"
    );
    assert!(e.is_bad_input());
    let q = CostQuery {
        team: Some("infra".into()),
        ..CostQuery::default()
    };
    let e = build(&l, &q, t(10.0)).expect_err("unknown team");
    assert!(e.to_string().contains("nlp, vision"), "{e}");
}

#[test]
fn a_team_is_measured_against_its_budget() {
    let mut l = ledger();
    // A running job of team nlp: $1/h since 8 h, deadline 48 h after submission (t = 48).
    let mut c = job("c", "nlp", JobState::Running);
    c.spec.name = "c".into();
    l.jobs.push(c);
    l.usage
        .push((usage("c", "i-9", Capacity::Spot, 1.0, 8.0, None), None));
    let q = CostQuery {
        by: GroupBy::Team,
        ..CostQuery::default()
    };
    let r = build(&l, &q, t(10.0)).expect("report");
    let nlp = r.budgets.iter().find(|b| b.team == "nlp").expect("nlp");
    assert!((nlp.spent - 6.5).abs() < 1e-9, "{}", nlp.spent);
    assert_eq!(nlp.left.map(|x| (x * 100.0).round()), Some(350.0));
    assert!((nlp.burn_per_hour - 1.0).abs() < 1e-9);
    // 6.5 + 1 $/h × 38 h to the deadline.
    assert_eq!(nlp.projected_at_deadline.map(|x| x.round()), Some(45.0));
}

/// The text budget table has a header over every column: team, spent, budget, left, the
/// budget per hour, the burn rate and the projection (it once had six headers over seven).
#[test]
fn the_budget_table_has_a_header_for_every_column() {
    let mut l = ledger();
    l.jobs.push(job("c", "nlp", JobState::Running));
    l.usage
        .push((usage("c", "i-9", Capacity::Spot, 1.0, 8.0, None), None));
    let q = CostQuery {
        by: GroupBy::Team,
        ..CostQuery::default()
    };
    let text = render::table_text(&build(&l, &q, t(10.0)).expect("report"));
    let header = text
        .lines()
        .find(|l| l.contains("spent $"))
        .expect("a budget table");
    for h in ["budget $/h", "burn $/h", "at deadline $"] {
        assert!(header.contains(h), "{header}");
    }
    let cells = |line: &str| line.split_whitespace().count();
    let row = text
        .lines()
        .skip_while(|l| !l.contains("spent $"))
        .find(|l| l.trim_start().starts_with("nlp"))
        .expect("the nlp row");
    // Seven columns; an empty cell prints nothing, so a row has at most as many words.
    assert!(cells(row) <= 7, "{row}");
    assert_eq!(header.matches(" $").count() + 1, 7, "{header}");
}

/// A probe that ran `[from, to)` hours (`to` None: still open). Its recorded price is far off
/// the usage's, so a test fails if the report bills the record instead of the usage.
fn probe(from: f64, to: Option<f64>) -> ProbeRecord {
    ProbeRecord {
        accelerator: "V100".into(),
        instance_type: "p3.2xlarge".into(),
        offer: "aws/use1-az1/p3.2xlarge/spot".into(),
        nodes: 1,
        price_per_hour: 99.0,
        max_seconds: 3600.0,
        max_usd: 100.0,
        started_at: t(from - 0.1),
        running_at: Some(t(from)),
        probing_since: None,
        ended_at: to.map(t),
        outcome: None,
    }
}

/// `ledger()` plus job p: one spot instance at $2.40/h from 1 h to 4 h, probing 1.5–2.25 h
/// and then kept as the job's capacity.
fn ledger_with_probe() -> Ledger {
    let mut l = ledger();
    let mut p = job("p", "nlp", JobState::Running);
    p.probe = Some(probe(1.5, Some(2.25)));
    l.jobs.push(p);
    l.usage
        .push((usage("p", "i-7", Capacity::Spot, 2.4, 1.0, Some(4.0)), None));
    l
}

fn cents(v: f64) -> i64 {
    (v * 100.0).round() as i64
}

#[test]
fn a_probe_inside_one_interval_bills_only_its_window_as_probe_spend() {
    let r = build(&ledger_with_probe(), &CostQuery::default(), t(10.0)).expect("report");
    let p = r.rows.iter().find(|x| x.key == "p").expect("row p");
    // By hand: 0.75 h × $2.40 = $1.80 of probe; the whole 3 h × $2.40 = $7.20 is the cost.
    assert_eq!(cents(p.probe_usd), 180, "{}", p.probe_usd);
    assert_eq!(cents(p.cost), 720, "{}", p.cost);
    assert_eq!(cents(p.rest_usd()), 540);
}

#[test]
fn an_open_probe_runs_until_now_and_a_price_step_splits_it() {
    let mut l = ledger_with_probe();
    let p = l.jobs.iter_mut().find(|j| j.name() == "p").expect("p");
    p.probe = Some(probe(3.0, None));
    let i7 = l.usage.iter_mut().find(|(u, _)| u.instance == "i-7");
    i7.expect("i-7").0.ended_at = None;
    // The spot price moves to $1.20/h at 3.5 h; the report runs to 4.5 h (now, and job a's
    // last end). By hand: 0.5 h × 2.40 + 1 h × 1.20 = $2.40.
    l.prices
        .insert("aws/use1-az1/p3.2xlarge/spot".into(), vec![(t(3.5), 1.2)]);
    let r = build(&l, &CostQuery::default(), t(4.5)).expect("report");
    let row = r.rows.iter().find(|x| x.key == "p").expect("row p");
    assert_eq!(cents(row.probe_usd), 240, "{}", row.probe_usd);
}

#[test]
fn a_job_without_a_probe_shows_no_probe_spend() {
    let r = build(&ledger_with_probe(), &CostQuery::default(), t(10.0)).expect("report");
    for key in ["a", "b"] {
        let row = r.rows.iter().find(|x| x.key == key).expect("row");
        assert_eq!(row.probe_usd, 0.0, "{key}");
        assert_eq!(row.rest_usd(), row.cost, "{key}");
    }
}

#[test]
fn probe_spend_sums_into_the_total_in_every_grouping() {
    let mut l = ledger_with_probe();
    // A second probed job: $1/h from 5 h, probing 5–5.5 h: $0.50.
    let mut q = job("q", "vision", JobState::Running);
    q.probe = Some(probe(5.0, Some(5.5)));
    l.jobs.push(q);
    l.usage
        .push((usage("q", "i-8", Capacity::Spot, 1.0, 5.0, Some(6.0)), None));
    for by in GroupBy::ALL {
        let query = CostQuery {
            by,
            ..CostQuery::default()
        };
        let r = build(&l, &query, t(10.0)).expect("report");
        let sum: f64 = r.rows.iter().map(|x| x.probe_usd).sum();
        assert_eq!(cents(r.total.probe_usd), 230, "{by:?}");
        assert!((sum - r.total.probe_usd).abs() < 1e-9, "{by:?}: {sum}");
    }
}

#[test]
fn a_report_from_a_server_without_probe_spend_still_parses() {
    let r = build(&ledger(), &CostQuery::default(), t(10.0)).expect("report");
    let mut json = serde_json::to_value(&r).expect("json");
    for row in json["rows"].as_array_mut().expect("rows") {
        row.as_object_mut().expect("row").remove("probe_usd");
    }
    json["total"]
        .as_object_mut()
        .expect("total")
        .remove("probe_usd");
    let back: CostReport = serde_json::from_value(json).expect("older JSON");
    assert_eq!(back, r);
}

#[test]
fn every_format_renders_the_same_totals() {
    let q = CostQuery {
        split: true,
        ..CostQuery::default()
    };
    let r = build(&ledger(), &q, t(10.0)).expect("report");
    let table = render::table_text(&r);
    assert!(table.contains("4.50") && table.contains("10.50"), "{table}");
    let csv = render::csv_text(&r).expect("csv");
    let header = csv.lines().next().expect("header");
    assert_eq!(header, render::CSV_COLUMNS.join(","));
    assert!(
        csv.lines()
            .any(|l| l.starts_with("total,job,total,") && l.contains("4.500000"))
    );
    let json: CostReport =
        serde_json::from_str(&serde_json::to_string(&r).expect("json")).expect("round trip");
    assert_eq!(json, r);
    for svg in [
        chart::daily(&r).expect("daily"),
        chart::cumulative(&r).expect("cumulative"),
        chart::rows(&r).expect("rows"),
    ] {
        assert!(svg.starts_with("<svg") && svg.contains("<rect"), "{svg}");
    }
    assert!(table.contains("probe $"), "{table}");
    let html = html::page(&r).expect("html");
    assert!(
        html.contains("id=\"total-cost\">$4.50<"),
        "total in the page"
    );
    assert!(
        html.contains("id=\"total-probe\">$0.00<") && html.contains("id=\"total-rest\">$4.50<")
    );
    assert_eq!(html.matches("<svg").count(), 3);
}
