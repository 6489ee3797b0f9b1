use chrono::{DateTime, TimeDelta, Utc};
use tern_cloud::{Capacity, JobSpec};

use super::*;
use crate::report::bill::Billed;
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
        events: Vec::new(),
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
    let back: CostReport = serde_json::from_value(json.clone()).expect("older JSON");
    assert_eq!(back, r);
    // Nor buckets or a projection.
    for key in ["bucket", "buckets", "projection"] {
        json.as_object_mut().expect("report").remove(key);
    }
    let back: CostReport = serde_json::from_value(json).expect("older JSON");
    assert!(back.buckets.is_empty() && back.projection.is_none());
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
    let html = html::page(&r, &[]).expect("html");
    assert!(
        html.contains("id=\"total-cost\">$4.50<"),
        "total in the page"
    );
    assert!(
        html.contains("id=\"total-probe\">$0.00<") && html.contains("id=\"total-rest\">$4.50<")
    );
    // The three charts, and the waterfalls of the total and of the one job with a plan.
    assert_eq!(html.matches("<svg").count(), 5);
    assert_eq!(html.matches("class=\"waterfall\"").count(), 2);
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).expect("time").to_utc()
}

/// Job s of team nlp: spot at $1.37/h from 0.3 h to 50.7 h whose price moves to $2.11/h at
/// 5.55 h and to $0.93/h at 30.123 h, and an on-demand instance at $3.30/h across midnight
/// (23.9 h to 24.2 h): pieces that straddle hour, day and week boundaries and price steps.
fn straddling() -> Ledger {
    let s = job("s", "nlp", JobState::Finished);
    let usage = vec![
        usage("s", "i-1", Capacity::Spot, 1.37, 0.3, Some(50.7)),
        usage("s", "i-2", Capacity::OnDemand, 3.3, 23.9, Some(24.2)),
    ];
    Ledger {
        jobs: vec![s],
        usage: usage.into_iter().map(|u| (u, None)).collect(),
        prices: BTreeMap::from([(
            "aws/use1-az1/p3.2xlarge/spot".to_string(),
            vec![(t(5.55), 2.11), (t(30.123), 0.93)],
        )]),
        budgets: BTreeMap::new(),
        events: Vec::new(),
    }
}

#[test]
fn buckets_cut_pieces_at_their_boundaries_and_add_up_to_the_total() {
    let l = straddling();
    // By hand: 5.25 h × 1.37 + 24.573 h × 2.11 + 20.577 h × 0.93 spot, 0.3 h × 3.30 on demand.
    let by_hand = 5.25 * 1.37 + 24.573 * 2.11 + 20.577 * 0.93 + 0.3 * 3.3;
    for (now, unit, n) in [
        // 0.3 h to 60 h: hours 0 through 59.
        (60.0, BucketUnit::Hour, 60),
        // To day 20: days 0 through 19.
        (24.0 * 20.0, BucketUnit::Day, 20),
        // To day 100 (Wednesday 2024-02-23): the weeks from Monday 2023-11-13 through it.
        (24.0 * 100.0, BucketUnit::Week, 15),
    ] {
        let r = build(&l, &CostQuery::default(), t(now)).expect("report");
        assert_eq!(r.bucket, unit, "{now}");
        assert_eq!(r.buckets.len(), n, "{unit:?}");
        let sum: f64 = r.buckets.iter().map(|b| b.spot + b.on_demand).sum();
        assert_eq!(cents(sum), cents(r.total.cost), "{unit:?}: {sum}");
        assert_eq!(cents(sum), cents(by_hand), "{unit:?}: {sum}");
        let od: f64 = r.buckets.iter().map(|b| b.on_demand).sum();
        assert_eq!(cents(od), 99, "{unit:?}");
        // Contiguous, one unit each, the first holding the first billed second.
        let len = buckets::length(unit);
        assert!(r.buckets[0].start <= t(0.3) && t(0.3) < r.buckets[0].start + len);
        for w in r.buckets.windows(2) {
            assert_eq!(w[1].start - w[0].start, len);
        }
        assert!(r.buckets.last().expect("last").start + len >= t(now));
    }
    // Hourly: the hour 00:00–01:00 of 2023-11-16 holds 0.2 h on demand, and the spot hour
    // of the price step at 5.55 h both prices.
    let r = build(&l, &CostQuery::default(), t(60.0)).expect("report");
    let h24 = r
        .buckets
        .iter()
        .find(|b| b.start == t(24.0))
        .expect("hour 24");
    assert_eq!(h24.label, "2023-11-16 00:00");
    assert_eq!(cents(h24.on_demand), 66);
    let h5 = &r.buckets[5];
    assert_eq!(h5.label, "2023-11-15 05:00");
    assert_eq!(
        cents(h5.spot * 100.0),
        cents(100.0 * (0.55 * 1.37 + 0.45 * 2.11))
    );
    // Days keep their old field, cut at midnight the same way.
    let days: f64 = r.days.iter().map(|d| d.spot + d.on_demand).sum();
    assert_eq!(cents(days), cents(r.total.cost));
}

#[test]
fn a_piece_across_midnight_is_cut_at_every_hour() {
    let piece = Billed {
        piece: tern_cloud::Piece {
            from: at("2026-11-23T23:30:00Z"),
            to: at("2026-11-24T01:15:00Z"),
            price_per_hour: 2.0,
        },
        on_demand_per_hour: 4.0,
    };
    let hours = buckets::cut(std::slice::from_ref(&piece), BucketUnit::Hour);
    let got: Vec<(String, i64)> = hours
        .iter()
        .map(|(s, p)| {
            let d: f64 = p.iter().map(|b| b.piece.dollars()).sum();
            (buckets::label(BucketUnit::Hour, *s), cents(d))
        })
        .collect();
    assert_eq!(
        got,
        [
            ("2026-11-23 23:00".to_string(), 100),
            ("2026-11-24 00:00".to_string(), 200),
            ("2026-11-24 01:00".to_string(), 50),
        ]
    );
    let weeks = buckets::cut(std::slice::from_ref(&piece), BucketUnit::Week);
    assert_eq!(weeks.len(), 1, "Monday 23 and Tuesday 24 share a week");
}

#[test]
fn the_unit_follows_the_span_at_its_thresholds() {
    let ms = TimeDelta::milliseconds(1);
    assert_eq!(
        buckets::unit_for(TimeDelta::hours(72) - ms),
        BucketUnit::Hour
    );
    assert_eq!(buckets::unit_for(TimeDelta::hours(72)), BucketUnit::Day);
    assert_eq!(buckets::unit_for(TimeDelta::weeks(8) - ms), BucketUnit::Day);
    assert_eq!(buckets::unit_for(TimeDelta::weeks(8)), BucketUnit::Week);
    // The span runs from the first billed piece (0 h) to the report's end.
    let l = ledger();
    for (until, unit) in [
        (71.99, BucketUnit::Hour),
        (72.0, BucketUnit::Day),
        (24.0 * 56.0 - 0.01, BucketUnit::Day),
        (24.0 * 56.0, BucketUnit::Week),
    ] {
        let q = CostQuery {
            until: Some(t(until)),
            ..CostQuery::default()
        };
        let r = build(&l, &q, t(until)).expect("report");
        assert_eq!(r.bucket, unit, "until {until} h");
    }
    // A report that starts later: its span is shorter.
    let q = CostQuery {
        since: Some(t(3.0)),
        until: Some(t(74.0)),
        ..CostQuery::default()
    };
    assert_eq!(build(&l, &q, t(74.0)).expect("r").bucket, BucketUnit::Hour);
}

#[test]
fn weeks_are_iso_weeks_from_monday() {
    let w = BucketUnit::Week;
    // Wednesday 2023-11-15 is in week 46, which began Monday the 13th.
    assert_eq!(buckets::floor(w, t(0.0)), at("2023-11-13T00:00:00Z"));
    assert_eq!(buckets::label(w, buckets::floor(w, t(0.0))), "2023-W46");
    // New Year's Day 2027 (a Friday) is in the 53rd week of 2026.
    let ny = buckets::floor(w, at("2027-01-01T12:00:00Z"));
    assert_eq!(ny, at("2026-12-28T00:00:00Z"));
    assert_eq!(buckets::label(w, ny), "2026-W53");
    assert_eq!(buckets::label(w, at("2026-11-23T00:00:00Z")), "2026-W48");
    // The last second of a Sunday is still its week.
    let sunday = at("2026-11-29T23:59:59Z");
    assert_eq!(buckets::label(w, buckets::floor(w, sunday)), "2026-W48");
    assert_eq!(
        buckets::label(BucketUnit::Day, buckets::floor(BucketUnit::Day, sunday)),
        "2026-11-29"
    );
    let r = build(&straddling(), &CostQuery::default(), t(2400.0)).expect("report");
    assert_eq!(r.buckets[0].label, "2023-W46");
    assert_eq!(r.buckets[1].label, "2023-W47");
}

#[test]
fn spend_is_projected_to_the_latest_deadline_of_unfinished_jobs() {
    let mut l = ledger();
    // Job c runs spot at $1/h since 8 h; its deadline is 48 h after submission (t = 48).
    l.jobs.push(job("c", "nlp", JobState::Running));
    l.usage
        .push((usage("c", "i-9", Capacity::Spot, 1.0, 8.0, None), None));
    let r = build(&l, &CostQuery::default(), t(10.0)).expect("report");
    let p = r.projection.as_ref().expect("a projection");
    assert_eq!((p.from, p.until), (t(10.0), t(48.0)));
    // Spent: 4.5 (job a) + 2 (c); the last hour's rate, $1/h, for 38 h.
    assert_eq!(cents(p.spent), 650);
    assert_eq!(cents(p.per_hour), 100);
    assert_eq!(cents(p.dollars), 650 + 3800);
    let json = serde_json::to_value(&r).expect("json");
    assert_eq!(json["bucket"], "hour");
    assert_eq!(json["projection"]["until"], "2023-11-17T00:00:00Z");
    let svg = chart::cumulative(&r).expect("svg");
    assert!(svg.contains("projected to the deadline") && svg.contains("$44.50"));

    // Every job finished (or cancelled): nothing to project to.
    for j in &mut l.jobs {
        j.state = if j.name() == "b" {
            JobState::Cancelled
        } else {
            JobState::Finished
        };
    }
    let r = build(&l, &CostQuery::default(), t(10.0)).expect("report");
    assert_eq!(r.projection, None);
    assert!(!chart::cumulative(&r).expect("svg").contains("projected"));
    assert!(serde_json::to_value(&r).expect("json")["projection"].is_null());
    // Unfinished, but without deadlines: none either.
    for j in &mut l.jobs {
        j.state = JobState::Running;
        j.deadline_at = None;
    }
    let r = build(&l, &CostQuery::default(), t(10.0)).expect("report");
    assert_eq!(r.projection, None);
}

#[test]
fn the_charts_name_their_unit_and_label_at_most_24_ticks() {
    for (now, unit) in [(70.0, "hour"), (24.0 * 50.0, "day"), (24.0 * 700.0, "week")] {
        let r = build(&straddling(), &CostQuery::default(), t(now)).expect("report");
        let svg = chart::daily(&r).expect("svg");
        let caption = format!("Cost per {unit} (UTC), by capacity");
        assert!(svg.contains(&caption), "{unit}");
        // Tick labels are bucket names: `11-15 00:00`, `2023-11-15`, `2023-W46`.
        let ticks = svg
            .split("<text")
            .filter(|t| {
                let text = t.split('>').nth(1).unwrap_or("");
                let text = text.split('<').next().unwrap_or("").trim();
                (text.len() == 11 && text.contains(':'))
                    || (text.starts_with("20") && (text.len() == 10 || text.contains("-W")))
            })
            .count();
        assert!((1..=24).contains(&ticks), "{unit}: {ticks} labels");
        let html = html::page(&r, &[]).expect("html");
        assert_eq!(
            html.matches("<tr class=\"bucket\">").count(),
            r.buckets.len()
        );
    }
    // Nothing billed: no buckets, empty charts without a time on their axis.
    let r = build(&Ledger::default(), &CostQuery::default(), t(1.0)).expect("report");
    assert!(r.buckets.is_empty() && r.projection.is_none());
    for svg in [chart::daily(&r), chart::cumulative(&r)] {
        let svg = svg.expect("svg");
        assert!(svg.starts_with("<svg") && !svg.contains("00:00"), "{svg}");
    }
}
