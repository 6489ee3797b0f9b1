//! `tern explain` and `GET /v1/jobs/NAME/decisions`: a job's decision timeline, built by one
//! pure function ([`timeline`]) over the events the controller stored for it and what the
//! store billed it, so the command reading a store and the API answer the same JSON.
//!
//! Each decision carries the reason the controller gave (the event's message) and the numbers
//! it compared (the typed event's fields). A move also carries the saving the move rule
//! expected and, once its old nodes are released, the saving realised so far, read from the
//! bill by [`crate::report::saving::realised`] (the one formula every report shows): what the
//! new nodes' hours would have cost at the old price, less what they cost, less what the old
//! nodes cost while both ran. A move cut short before its old nodes went (a notice, a
//! reclaim, a cancel…) has none: `null`, "not known".

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::events::{Event, ResizeWhy, WaitReason};
use crate::api::wire::decisions::{DecisionView, Timeline};
use crate::report::saving::{self, Bills, Move};
use crate::store::{self, Store, StoreError};

/// Event kinds (the store's `kind`) that, before a move's old nodes are released, cut it
/// short: it never ran as planned, so it has no realised saving.
const CHANGES: &[&str] = &[
    "migrate",
    "notice",
    "preempted",
    "resize",
    "replace",
    "regroup",
    "finished",
    "cancel",
    "failed",
    "over-budget",
    "quarantine",
];

/// The timeline of `job` from its stored events (oldest first; others' events are skipped)
/// and its bill up to `now`.
pub fn timeline(
    job: &str,
    events: &[store::StoredEvent],
    bills: Bills<'_>,
    now: DateTime<Utc>,
) -> Timeline {
    let mine: Vec<&store::StoredEvent> = events
        .iter()
        .filter(|e| e.job.as_deref() == Some(job))
        .collect();
    let mut decisions = Vec::new();
    for (i, e) in mine.iter().enumerate() {
        let typed = e.fields.as_ref().and_then(crate::event::read);
        let Some((kind, numbers)) = (match &typed {
            Some(t) => decision(t),
            // Stored before events carried their fields: the kind and message only.
            None => untyped_kind(&e.kind).map(|k| (k, BTreeMap::new())),
        }) else {
            continue;
        };
        let (expected_saving, realised_saving) = match &typed {
            Some(Event::Migrating {
                net_saving,
                from_zone,
                from_capacity,
                from_price,
                to_zone,
                to_capacity,
                ..
            }) => {
                let later = &mine[i + 1..];
                let realised = landed(later).then(|| {
                    let until = later
                        .iter()
                        .find(|l| l.kind == "migrate")
                        .map_or(now, |l| l.at);
                    let m = Move {
                        job,
                        at: e.at,
                        until,
                        from: (from_zone, *from_capacity, *from_price),
                        to: (to_zone, *to_capacity),
                    };
                    saving::realised(bills, m, now)
                });
                (Some(*net_saving), realised)
            }
            _ => (None, None),
        };
        decisions.push(DecisionView {
            at: e.at,
            kind: kind.to_string(),
            reason: e.message.clone(),
            numbers,
            expected_saving,
            realised_saving,
        });
    }
    Timeline {
        job: job.to_string(),
        decisions,
    }
}

/// Whether a move's old nodes were released (`migrated`) before anything cut it short.
fn landed(later: &[&store::StoredEvent]) -> bool {
    later
        .iter()
        .find(|e| e.kind == "migrated" || CHANGES.contains(&e.kind.as_str()))
        .is_some_and(|e| e.kind == "migrated")
}

/// The timeline's kind for an event stored without fields.
fn untyped_kind(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "plan" => "plan",
        "launched" => "launch",
        "wait" => "wait",
        "migrate" => "move",
        "resize" => "resize",
        "notice" => "notice",
        "queue-cancelled" => "fallback",
        "replace" => "replace",
        "finished" => "finish",
        "cancel" => "cancel",
        _ => return None,
    })
}

/// A typed event as a decision: its kind and numbers; `None` for what is no decision
/// (submission, workers starting, terminations confirmed, forecasts…).
fn decision(e: &Event) -> Option<(&'static str, BTreeMap<String, f64>)> {
    let mut n = BTreeMap::new();
    let mut put = |k: &str, v: f64| {
        n.insert(k.to_string(), v);
    };
    let kind = match e {
        Event::Planned { placement: p, .. } => {
            put("nodes", f64::from(p.nodes));
            put("expected_cost", p.expected_cost);
            if p.egress_usd > 0.0 {
                put("egress_usd", p.egress_usd);
            }
            put("finish_h", p.finish_h);
            if let Some(d) = p.deadline_h {
                put("deadline_h", d);
            }
            "plan"
        }
        Event::Unplaceable { .. } => "unplaceable",
        Event::Launched { count, price, .. } => {
            put("nodes", *count as f64);
            put("price_per_h", *price);
            put("total_per_h", *count as f64 * price);
            "launch"
        }
        Event::LaunchFailed { .. } => "launch-failed",
        Event::CapacityError { avoided, .. } => {
            put("avoided_min", avoided.as_secs_f64() / 60.0);
            "capacity"
        }
        Event::LaunchTimedOut { after, avoided, .. } => {
            put("after_min", after.as_secs_f64() / 60.0);
            put("avoided_min", avoided.as_secs_f64() / 60.0);
            "timeout"
        }
        Event::Waiting { reason, .. } => {
            wait_numbers(reason, &mut put);
            "wait"
        }
        Event::Migrating {
            moved,
            of,
            from_price,
            to_price,
            net_saving,
            work_h,
            budget,
            ..
        } => {
            put("moved", f64::from(*moved));
            put("of", f64::from(*of));
            put("from_price_per_h", *from_price);
            put("to_price_per_h", *to_price);
            put("net_saving", *net_saving);
            put("work_h", *work_h);
            put("disruption_budget", *budget);
            "move"
        }
        Event::Resized { from, to, why, .. } => {
            put("from", f64::from(*from));
            put("to", f64::from(*to));
            if let ResizeWhy::SpotOut(w) = why {
                wait_numbers(w, &mut put);
            }
            "resize"
        }
        Event::Replacing {
            missing, on_demand, ..
        } => {
            put("missing", f64::from(*missing));
            // The deadline needs the work now and spot has none: on-demand.
            if *on_demand { "fallback" } else { "replace" }
        }
        Event::QueueCancelled { .. } => "fallback",
        // A node held the job back: it is drained, released and replaced.
        Event::Quarantined { .. } => "quarantine",
        // The user's decision, not the controller's: it still ends the job's timeline.
        Event::Cancelled { .. } => "cancel",
        Event::Regrouped { released, .. } => {
            put("released", *released as f64);
            "regroup"
        }
        Event::Notice { ids, lead_s, .. } => {
            put("nodes", ids.len() as f64);
            if let Some(s) = lead_s {
                put("lead_s", *s as f64);
            }
            "notice"
        }
        Event::Preempted {
            ids, lost_samples, ..
        } => {
            put("nodes", ids.len() as f64);
            put("lost_samples", *lost_samples);
            "preempted"
        }
        Event::Probing {
            nodes,
            max_seconds,
            max_usd,
            ..
        } => {
            put("nodes", f64::from(*nodes));
            put("max_seconds", *max_seconds);
            put("max_usd", *max_usd);
            "probe"
        }
        Event::Probed { seconds, usd, .. } => {
            put("seconds", *seconds);
            put("usd", *usd);
            "probed"
        }
        Event::ColdStart { .. } => "cold-start",
        Event::BudgetWarning { spent, limit, .. } => {
            put("spent", *spent);
            put("limit", *limit);
            "budget-warning"
        }
        Event::OverBudget { spent, limit, .. } => {
            put("spent", *spent);
            put("limit", *limit);
            "over-budget"
        }
        Event::Finished { late_h, took_h, .. } => {
            put("took_h", *took_h);
            if let Some(l) = late_h {
                put("late_h", *l);
            }
            "finish"
        }
        Event::Submitted { .. }
        | Event::Failed { .. }
        | Event::WorkersStarted { .. }
        | Event::Hung { .. }
        | Event::LeakCollected { .. }
        | Event::Terminated { .. }
        | Event::ForeignInstance { .. }
        | Event::Migrated { .. }
        | Event::Basis { .. } => return None,
    };
    Some((kind, n))
}

/// The numbers a wait compared (the slack rule's hours, the launch budget).
fn wait_numbers(reason: &WaitReason, put: &mut impl FnMut(&str, f64)) {
    match reason {
        WaitReason::Slack {
            slack_h,
            left_h,
            work_h,
            reserve_h,
        } => {
            put("slack_h", *slack_h);
            put("left_h", *left_h);
            put("work_h", *work_h);
            put("reserve_h", *reserve_h);
        }
        WaitReason::OnSurvivors { why, survivors } => {
            put("survivors", f64::from(*survivors));
            wait_numbers(why, put);
        }
        WaitReason::LaunchBudget { launched, budget } => {
            put("launched", f64::from(*launched));
            put("launch_budget", f64::from(*budget));
        }
        WaitReason::NoDeadline
        | WaitReason::NoCapacity
        | WaitReason::Policy { .. }
        | WaitReason::Limit { .. } => {}
    }
}

/// Why a timeline could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("no job named '{name}' in this store{}", known_list(known))]
    UnknownJob { name: String, known: Vec<String> },
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        " (it has no jobs)".to_string()
    } else {
        format!(" (known: {})", known.join(", "))
    }
}

/// `job`'s timeline from `store`, billed up to `now`; an unknown job is an error naming the
/// known ones.
pub fn load(store: &Store, job: &str, now: DateTime<Utc>) -> Result<Timeline, ExplainError> {
    if store.job(job)?.is_none() {
        let known = store
            .load()?
            .jobs
            .iter()
            .map(|j| j.name().to_string())
            .collect();
        return Err(ExplainError::UnknownJob {
            name: job.to_string(),
            known,
        });
    }
    let usage = store.job_usage_with_offers(job)?;
    let prices = store.job_prices(job)?;
    let bills = Bills {
        usage: &usage,
        prices: &prices,
    };
    Ok(timeline(job, &store.events(0, Some(job))?, bills, now))
}

/// The timeline for people: a line per decision, then its numbers and, for a move, its saving.
pub fn text(t: &Timeline) -> String {
    let mut out = String::new();
    if t.decisions.is_empty() {
        let _ = writeln!(out, "{}: no decisions yet", t.job);
        return out;
    }
    let _ = writeln!(out, "{}: {} decision(s)", t.job, t.decisions.len());
    for d in &t.decisions {
        let _ = writeln!(
            out,
            "{}  {:<9} {}",
            d.at.format("%Y-%m-%d %H:%M:%S"),
            d.kind,
            d.reason
        );
        if !d.numbers.is_empty() {
            let numbers: Vec<String> = d
                .numbers
                .iter()
                .map(|(k, v)| format!("{k}={}", number(*v)))
                .collect();
            let _ = writeln!(out, "{:21}{}", "", numbers.join(" "));
        }
        if let Some(e) = d.expected_saving {
            let realised = match d.realised_saving {
                Some(r) => format!("${r:.2}"),
                None => "not known (its old nodes were not released)".to_string(),
            };
            let _ = writeln!(
                out,
                "{:21}saving: expected ${e:.2}, realised {realised}",
                ""
            );
        }
    }
    out
}

/// A number as short as it reads exactly enough: integers bare, the rest to 4 places.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.4}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::events::Placement;
    use chrono::TimeDelta;
    use tern_cloud::{Capacity, Zone};

    fn at(minutes: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-02T08:00:00Z")
            .expect("time")
            .with_timezone(&Utc)
            + TimeDelta::minutes(minutes)
    }

    /// A stored event as the controller writes it: kind, message and typed fields.
    fn stored(id: i64, minutes: i64, e: &Event) -> store::StoredEvent {
        store::StoredEvent {
            id,
            at: at(minutes),
            job: e.job().map(str::to_string),
            kind: e.kind().to_string(),
            message: e.to_string(),
            fields: Some(serde_json::to_value(e).expect("json")),
        }
    }

    /// One node's usage interval on `zone`'s p4d `capacity` at `price` $/h, over minutes
    /// `[from, to)` of the test's clock.
    fn node(
        n: u32,
        zone: &str,
        capacity: Capacity,
        price: f64,
        (from, to): (i64, i64),
    ) -> store::Usage {
        store::Usage {
            instance: format!("i-{n}"),
            job: "bert".into(),
            offer_key: format!("aws/{zone}/p4d/{capacity}"),
            capacity,
            price_per_hour: price,
            on_demand_per_hour: Some(3.0),
            started_at: at(from),
            ended_at: Some(at(to)),
        }
    }

    /// The bill of [`migrating`]'s move at minute 60: two on-demand nodes in use1-az1 at $3/h
    /// until minute 90, then two spot nodes in use1-az2 at $1/h from minute 60 to 400.
    fn moved_bill() -> Vec<(store::Usage, Option<tern_cloud::Offer>)> {
        let (od, spot) = (Capacity::OnDemand, Capacity::Spot);
        [
            node(1, "use1-az1", od, 3.0, (0, 90)),
            node(2, "use1-az1", od, 3.0, (0, 90)),
            node(3, "use1-az2", spot, 1.0, (60, 400)),
            node(4, "use1-az2", spot, 1.0, (60, 400)),
        ]
        .into_iter()
        .map(|u| (u, None))
        .collect()
    }

    fn no_bill() -> Bills<'static> {
        static NONE: std::sync::LazyLock<store::PriceLog> =
            std::sync::LazyLock::new(Default::default);
        Bills {
            usage: &[],
            prices: &NONE,
        }
    }

    fn migrating(job: &str) -> Event {
        Event::Migrating {
            job: job.into(),
            moved: 2,
            of: 2,
            from_capacity: Capacity::OnDemand,
            from_price: 3.0,
            from_zone: Zone::new("use1-az1"),
            to_capacity: Capacity::Spot,
            to_price: 1.0,
            to_zone: Zone::new("use1-az2"),
            net_saving: 10.0,
            work_h: 4.0,
            budget: 0.25,
            policy: None,
        }
    }

    #[test]
    fn a_hand_written_life_reads_as_its_decisions_with_their_numbers() {
        let j = || "bert".to_string();
        let events = [
            Event::Submitted {
                job: j(),
                samples: 1e6,
                workers: "2".into(),
                accelerators: vec!["A100".into()],
                due_in_h: Some(12.0),
            },
            Event::Planned {
                job: j(),
                placement: Placement {
                    solver: "milp".into(),
                    nodes: 2,
                    instance_type: "p4d".into(),
                    capacity: Capacity::Spot,
                    zone: "use1-az1".into(),
                    expected_cost: 42.5,
                    egress_usd: 4.0,
                    finish_h: 6.0,
                    deadline_h: Some(12.0),
                    versus_cheapest: None,
                    policy: None,
                    basis: None,
                },
            },
            Event::Launched {
                job: j(),
                count: 2,
                instance_type: "p4d".into(),
                capacity: Capacity::Spot,
                zone: Zone::new("use1-az1"),
                price: 1.5,
            },
            Event::Submitted {
                job: "other".into(),
                samples: 1.0,
                workers: "1".into(),
                accelerators: vec![],
                due_in_h: None,
            },
            Event::Waiting {
                job: j(),
                reason: WaitReason::Slack {
                    slack_h: 3.0,
                    left_h: 9.0,
                    work_h: 6.0,
                    reserve_h: 1.5,
                },
            },
            Event::Notice {
                job: j(),
                pool: "spot use1-az1".into(),
                ids: vec!["i-1".into()],
                lead_s: Some(120),
            },
            Event::Replacing {
                job: j(),
                missing: 1,
                on_demand: true,
            },
            migrating("bert"),
            Event::Migrated {
                job: j(),
                released: 2,
            },
            Event::Resized {
                job: j(),
                from: 2,
                to: 1,
                why: ResizeWhy::SpotOut(WaitReason::NoCapacity),
            },
            migrating("bert"),
        ];
        // Minutes of each event: the first move at 60, its old nodes released at 90, the
        // resize at 240 (2.5 h later); the second move has nothing after it.
        let minutes = [0, 0, 1, 2, 10, 20, 21, 60, 90, 240, 300];
        let mut log: Vec<store::StoredEvent> = events
            .iter()
            .zip(minutes)
            .enumerate()
            .map(|(i, (e, m))| stored(i as i64 + 1, m, e))
            .collect();
        // An event stored before events carried fields: its kind and message still count.
        log.push(store::StoredEvent {
            id: 99,
            at: at(400),
            job: Some(j()),
            kind: "launched".into(),
            message: "1× p4d spot".into(),
            fields: None,
        });

        let (usage, prices) = (moved_bill(), store::PriceLog::new());
        let bills = Bills {
            usage: &usage,
            prices: &prices,
        };
        let t = timeline("bert", &log, bills, at(500));
        assert_eq!(t.job, "bert");
        let kinds: Vec<&str> = t.decisions.iter().map(|d| d.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "plan", "launch", "wait", "notice", "fallback", "move", "resize", "move", "launch"
            ]
        );
        let d = &t.decisions;
        assert_eq!(d[0].numbers["expected_cost"], 42.5);
        assert_eq!(d[0].numbers["egress_usd"], 4.0);
        assert!(
            d[0].reason.contains("egress $4.00 of it"),
            "{}",
            d[0].reason
        );
        assert_eq!(d[0].numbers["deadline_h"], 12.0);
        assert_eq!(d[0].at, at(0));
        assert!(
            d[0].reason.starts_with("planner (milp): 2× p4d spot"),
            "{}",
            d[0].reason
        );
        assert_eq!(d[1].numbers["total_per_h"], 3.0);
        assert_eq!(d[2].numbers["slack_h"], 3.0);
        assert_eq!(d[2].numbers["reserve_h"], 1.5);
        assert_eq!(d[3].numbers["lead_s"], 120.0);
        assert_eq!(d[4].numbers["missing"], 1.0);
        // The first move, billed until the next (minute 300): the new nodes' 4 h each at
        // the old $3/h, less what they cost ($1/h), less the old nodes' half hour after the
        // move ($3/h each).
        assert_eq!(d[5].expected_saving, Some(10.0));
        let realised = d[5].realised_saving.expect("the first move landed");
        assert!(
            (realised - (2.0 * 4.0 * (3.0 - 1.0) - 2.0 * 0.5 * 3.0)).abs() < 1e-9,
            "{realised}"
        );
        assert_eq!(d[5].numbers["from_price_per_h"], 3.0);
        assert_eq!(d[6].numbers["to"], 1.0);
        assert_eq!(d[6].expected_saving, None);
        // The second: its old nodes were never released.
        assert_eq!(d[7].expected_saving, Some(10.0));
        assert_eq!(d[7].realised_saving, None);
        assert!(d[8].numbers.is_empty());
        assert!(
            d.iter()
                .all(|x| x.kind == "move" || x.realised_saving.is_none())
        );

        let shown = text(&t);
        assert!(shown.starts_with("bert: 9 decision(s)\n"), "{shown}");
        assert!(
            shown.contains("saving: expected $10.00, realised $13.00"),
            "{shown}"
        );
        assert!(
            shown.contains("saving: expected $10.00, realised not known (its old nodes"),
            "{shown}"
        );
        assert!(shown.contains("slack_h=3 work_h=6"), "{shown}");
        for k in kinds {
            assert!(shown.contains(&format!("  {k} ")), "{k}: {shown}");
        }
        let json = serde_json::to_value(&t).expect("json");
        assert_eq!(json["decisions"][0]["at"], "2026-11-02T08:00:00Z");
        assert!(json["decisions"][0]["realised_saving"].is_null());
    }

    #[test]
    fn a_cancel_ends_the_timeline() {
        let j = || "bert".to_string();
        let events = [
            migrating("bert"),
            Event::Migrated {
                job: j(),
                released: 2,
            },
            Event::Cancelled { job: j() },
        ];
        let log: Vec<store::StoredEvent> = events
            .iter()
            .zip([60, 90, 150])
            .enumerate()
            .map(|(i, (e, m))| stored(i as i64 + 1, m, e))
            .collect();
        let (usage, prices) = (moved_bill(), store::PriceLog::new());
        let bills = Bills {
            usage: &usage,
            prices: &prices,
        };
        let t = timeline("bert", &log, bills, at(150));
        let kinds: Vec<&str> = t.decisions.iter().map(|d| d.kind.as_str()).collect();
        assert_eq!(kinds, ["move", "cancel"]);
        assert_eq!(t.decisions[1].reason, "cancelled by the user");
        // The move landed before the cancel: its saving is the bill's, to the cancel (the
        // test's bill runs on; `now` ends it): 1.5 h at $3 − $1 on two nodes, less the old
        // nodes' half hour.
        let realised = t.decisions[0].realised_saving.expect("landed");
        assert!(
            (realised - (2.0 * 1.5 * 2.0 - 2.0 * 0.5 * 3.0)).abs() < 1e-9,
            "{realised}"
        );
    }

    #[test]
    fn a_move_cut_short_before_its_old_nodes_go_has_no_realised_saving() {
        let log = [
            stored(1, 0, &migrating("j")),
            stored(
                2,
                5,
                &Event::Notice {
                    job: "j".into(),
                    pool: "p".into(),
                    ids: vec![],
                    lead_s: None,
                },
            ),
            stored(
                3,
                10,
                &Event::Migrated {
                    job: "j".into(),
                    released: 2,
                },
            ),
            stored(
                4,
                70,
                &Event::Finished {
                    job: "j".into(),
                    late_h: None,
                    took_h: 1.0,
                },
            ),
        ];
        let t = timeline("j", &log, no_bill(), at(70));
        assert_eq!(t.decisions[0].realised_saving, None);
        assert_eq!(
            timeline("nobody", &log, no_bill(), at(70)).decisions,
            vec![]
        );
        assert_eq!(
            text(&timeline("nobody", &log, no_bill(), at(70))),
            "nobody: no decisions yet\n"
        );
    }
}
