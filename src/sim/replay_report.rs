//! `tern simulate --report`: a replay as a cost report. Each window of each online policy is a
//! job (`<policy>-w<start tick>`, team = the policy), each run of one node on one zone is an
//! instance, billed by the report's own billing at the trace's prices. So a policy's cost can
//! be read window by window, and `--by team` compares the policies.
//!
//! Replay time has no calendar: tick 0 of the trace is 2000-01-01T00:00:00Z.

use chrono::{DateTime, TimeDelta, Utc};
use tern_cloud::{Capacity, parse_job_spec};
use tern_replay::{PolicyKind, Prepared, TickUse};
use tern_sim::Trace;

use crate::report::Ledger;
use crate::store::{JobRecord, JobState, Usage};

/// What the replay's windows are built from.
#[derive(Debug)]
pub struct ReplayJobs<'a> {
    pub prepared: &'a Prepared,
    pub traces: &'a [Trace],
    /// Prefix of job names (one per group of zones with `--per-trace`), may be empty.
    pub prefix: String,
}

fn base() -> DateTime<Utc> {
    DateTime::from_timestamp(946_684_800, 0).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// Add every window of every online policy in `policies` to `ledger`; `optimal` is left out
/// (not replayed tick by tick). Returns the policies added.
pub fn add_to_ledger(
    ledger: &mut Ledger,
    replay: &ReplayJobs<'_>,
    policies: &[PolicyKind],
) -> Vec<PolicyKind> {
    let gap = i64::from(replay.traces.first().map_or(600, |t| t.gap_seconds));
    let at = |tick: i64| base() + TimeDelta::seconds(gap * tick);
    for (zone, t) in replay.traces.iter().enumerate() {
        let key = offer_key(&t.zone, true);
        let mut points: Vec<(DateTime<Utc>, f64)> = Vec::new();
        for (tick, &p) in replay.prepared.spot_prices(zone).iter().enumerate() {
            if points.last().is_none_or(|l| l.1 != p) {
                points.push((at(tick as i64), p));
            }
        }
        ledger.prices.insert(key, points);
    }
    let mut added = Vec::new();
    for &policy in policies {
        let Some(windows) = replay.prepared.trace_windows(policy) else {
            continue;
        };
        added.push(policy);
        for (start, result, ticks) in windows {
            let name = format!("{}{}-w{start:06}", replay.prefix, policy.name());
            let Some(mut job) = job_record(&name, policy.name(), at(start as i64)) else {
                continue;
            };
            if result.finished {
                job.state = JobState::Finished;
            } else {
                job.state = JobState::Unplaceable;
                job.reason = Some("missed its deadline".into());
            }
            let window_start = at(start as i64);
            let instances = usage_of(&name, &ticks, replay, |t| {
                window_start + TimeDelta::seconds(gap * i64::from(t))
            });
            ledger
                .usage
                .extend(instances.into_iter().map(|u| (u, None)));
            ledger.jobs.push(job);
        }
    }
    added
}

fn offer_key(zone: &str, spot: bool) -> String {
    let capacity = if spot {
        Capacity::Spot
    } else {
        Capacity::OnDemand
    };
    format!("sim/{zone}/node/{}", capacity.as_str())
}

/// A job record for a window: the spec only names it and its team.
fn job_record(name: &str, team: &str, submitted: DateTime<Utc>) -> Option<JobRecord> {
    let text = format!(
        "name = \"{name}\"\nteam = \"{team}\"\naccelerators = [\"V100\"]\nworkers = 1\n\
         [work]\nsamples = 1\n"
    );
    parse_job_spec(&text, "replay")
        .ok()
        .map(|spec| JobRecord::new(spec, submitted))
}

/// Runs of one node in one zone at one capacity, over consecutive ticks, as instances.
fn usage_of(
    job: &str,
    ticks: &[TickUse],
    replay: &ReplayJobs<'_>,
    time: impl Fn(u32) -> DateTime<Utc>,
) -> Vec<Usage> {
    let most = ticks.iter().map(|t| t.held).max().unwrap_or(0);
    let mut out = Vec::new();
    for node in 0..most {
        let mut run: Option<(TickUse, u32)> = None;
        let held: Vec<&TickUse> = ticks.iter().filter(|t| node < t.held).collect();
        for t in held {
            match run {
                Some((first, last))
                    if last + 1 == t.tick && first.zone == t.zone && first.spot == t.spot =>
                {
                    run = Some((first, t.tick));
                }
                _ => {
                    if let Some((first, last)) = run {
                        out.push(instance(job, out.len(), first, last, replay, &time));
                    }
                    run = Some((*t, t.tick));
                }
            }
        }
        if let Some((first, last)) = run {
            out.push(instance(job, out.len(), first, last, replay, &time));
        }
    }
    out
}

fn instance(
    job: &str,
    n: usize,
    first: TickUse,
    last: u32,
    replay: &ReplayJobs<'_>,
    time: &impl Fn(u32) -> DateTime<Utc>,
) -> Usage {
    let zone = replay
        .traces
        .get(first.zone)
        .map_or("?", |t| t.zone.as_str());
    Usage {
        instance: format!("{job}-{n}"),
        job: job.to_string(),
        offer_key: offer_key(zone, first.spot),
        capacity: if first.spot {
            Capacity::Spot
        } else {
            Capacity::OnDemand
        },
        price_per_hour: first.price_per_hour,
        on_demand_per_hour: Some(replay.prepared.on_demand_price_of(first.zone)),
        started_at: time(first.tick),
        ended_at: Some(time(last + 1)),
    }
}
