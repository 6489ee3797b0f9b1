//! Where the dollars went: a job's `cost − planned_cost` split into additive parts (the
//! wire's [`Attribution`]) by one pure function, [`attribute`], over what the cost report
//! already bills (the job's pieces) and the job's stored events.
//!
//! The scheme prices every billed hour three ways and takes the differences, so the parts sum
//! to `cost − plan` by construction (up to float rounding):
//!
//! - `a`: the price billed (the prices that held);
//! - `q`: the price its pool had when the job was planned (the price log at plan time);
//! - `p`: the plan's price (the planned pool's `q`).
//!
//! An hour of another instance type does another amount of work, so each hour `h` also counts
//! as `e = h·r` plan-node-hours, `r` its node's work rate over the planned node's (accelerators
//! × relative speed; 1 when either is unknown). Then, over the hours outside the probe window,
//! `Σ a·h − plan` = `Σ (a − q)·h` (**prices**) + `Σ (q·h − p·e)` (what the work cost on its
//! pool against the planned pool, both at plan-time prices: charged to what put the hour
//! there: **fallback** for on-demand where the plan said spot, **interruptions** for a
//! replacement of a reclaimed node, **moves** for anything else off the planned pool) +
//! `p·Σe − plan`. That last term is split in plan-node-hours: the overhead of interruptions
//! (boot of replacements, restore, work redone since the last checkpoint) and of moves (the
//! overlap while old and new nodes both run, restore after a move or resize), each at `p`,
//! and the rest, productive work against what the plan paid for (`plan / p`), is
//! **forecast** error. Probe-window dollars are **probe**.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use tern_cloud::{Capacity, OfferKey};

use super::Window;
use super::bill::{Billed, dollars_within};
use crate::api::wire::costs::Attribution;
use crate::event::Event;
use crate::store::{JobRecord, PriceLog, Usage};

/// What attribution reads of a job's events: the changes of its nodes and their causes, taken
/// from the typed events ([`crate::event::Event`]) the controller stored.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// `plan`: the placement's pool, size and estimate.
    Planned {
        zone: String,
        instance_type: String,
        capacity: Capacity,
        nodes: u32,
        expected_cost: f64,
        finish_h: f64,
    },
    /// `notice`: nodes to be reclaimed (drained, checkpointed).
    Notice { ids: Vec<String> },
    /// `preempted`: nodes gone, with the samples done since the last checkpoint.
    Preempted { ids: Vec<String>, lost_samples: f64 },
    /// `replace`: replacements requested.
    Replacing,
    /// `migrate`: a move of `moved` nodes starts.
    Migrating { moved: u32 },
    /// `migrated`: the old nodes of a move are released.
    Migrated,
    /// `resize`: the job goes to `to` nodes.
    Resized { to: u32 },
    /// `regroup`: a gang gathered into one zone.
    Regrouped,
    /// `workers`: an instance's workers started.
    WorkersStarted { instance: String },
}

impl Change {
    /// The change an event makes; `None` for kinds attribution ignores.
    pub fn of(event: &Event) -> Option<Change> {
        Some(match event {
            Event::Planned { placement: p, .. } => Change::Planned {
                zone: p.zone.clone(),
                instance_type: p.instance_type.clone(),
                capacity: p.capacity,
                nodes: p.nodes,
                expected_cost: p.expected_cost,
                finish_h: p.finish_h,
            },
            Event::Notice { ids, .. } => Change::Notice { ids: ids.clone() },
            Event::Preempted {
                ids, lost_samples, ..
            } => Change::Preempted {
                ids: ids.clone(),
                lost_samples: *lost_samples,
            },
            Event::Replacing { .. } => Change::Replacing,
            Event::Migrating { moved, .. } => Change::Migrating { moved: *moved },
            Event::Migrated { .. } => Change::Migrated,
            Event::Resized { to, .. } => Change::Resized { to: *to },
            Event::Regrouped { .. } => Change::Regrouped,
            Event::WorkersStarted { instance, .. } => Change::WorkersStarted {
                instance: instance.clone(),
            },
            _ => return None,
        })
    }
}

/// What put an instance where it ran: the latest change of nodes before its launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    /// The first placement (no change before it).
    Initial,
    /// A replacement after a notice or a reclaim.
    Replacement,
    /// tern's own move, resize or regroup.
    Move,
}

/// Everything [`attribute`] needs about one job.
#[derive(Debug)]
pub struct JobRun<'a> {
    pub record: &'a JobRecord,
    /// The job's usage intervals with their billed pieces (the report's, inside its window).
    pub billed: Vec<(&'a Usage, &'a [Billed])>,
    pub prices: &'a PriceLog,
    /// The job's typed events, oldest first.
    pub events: Vec<(DateTime<Utc>, Change)>,
    /// The job's probe window.
    pub probe: Option<Window>,
    /// Work per node-hour by instance type (accelerators × relative speed), where known.
    pub rates: &'a BTreeMap<String, f64>,
}

/// The stored events that carry their typed fields, by job, oldest first.
pub fn typed_events(
    events: &[crate::store::StoredEvent],
) -> BTreeMap<String, Vec<(DateTime<Utc>, Change)>> {
    let mut out: BTreeMap<String, Vec<(DateTime<Utc>, Change)>> = BTreeMap::new();
    for e in events {
        let (Some(job), Some(fields)) = (&e.job, &e.fields) else {
            continue;
        };
        if let Some(change) = crate::event::read(fields).as_ref().and_then(Change::of) {
            out.entry(job.clone()).or_default().push((e.at, change));
        }
    }
    out
}

/// Work per node-hour of each instance type among `offers`: its accelerators × their speed
/// relative to a T4 (`tern_policies`' speed table). Types without a known accelerator are
/// left out (their hours count one for one).
pub fn work_rates<'o>(
    offers: impl Iterator<Item = &'o tern_cloud::Offer>,
) -> BTreeMap<String, f64> {
    offers
        .filter_map(|o| {
            let acc = o.instance_type.accelerator.as_ref()?;
            let speed = tern_policies::forecast::speed::relative_speed(&acc.name)?;
            Some((o.instance_type.name.clone(), f64::from(acc.count) * speed))
        })
        .collect()
}

/// The plan the job is measured against: when it was made, on which pool, at what price.
struct Basis {
    at: DateTime<Utc>,
    /// (zone, instance type, capacity): offer keys are `cloud/zone/type/capacity`.
    pool: Option<(String, String, Capacity)>,
    price: f64,
}

impl Basis {
    /// An hour on `instance_type` in plan-node-hours: its node's rate over the planned
    /// node's, or 1 when either is unknown.
    fn ratio(&self, rates: &BTreeMap<String, f64>, instance_type: &str) -> f64 {
        let planned = self.pool.as_ref().and_then(|p| rates.get(&p.1));
        match (rates.get(instance_type), planned) {
            (Some(r), Some(p)) if *p > 0.0 => r / p,
            _ => 1.0,
        }
    }
}

/// `cost − planned_cost` of `run` in parts; see the module's comment for the scheme.
pub fn attribute(run: &JobRun<'_>) -> Attribution {
    let planned = run.record.planned_cost.unwrap_or(0.0);
    let basis = basis(run);
    let p = basis.price;
    let mut out = Attribution::default();
    // Plan-node-hours outside the probe window.
    let mut hours = 0.0;
    for (u, pieces) in &run.billed {
        let q = price_at(run.prices, &u.offer_key, basis.at).unwrap_or(u.price_per_hour);
        let r = basis.ratio(run.rates, &type_of(&u.offer_key));
        let cause = cause_of(u, &run.events);
        let fallback = u.capacity == Capacity::OnDemand
            && basis.pool.as_ref().is_some_and(|b| b.2 == Capacity::Spot);
        for b in pieces.iter() {
            let (probe_usd, probe_h) = run.probe.map_or((0.0, 0.0), |w| within(b, w));
            out.probe += probe_usd;
            let h = b.piece.hours() - probe_h;
            let a_h = b.piece.dollars() - probe_usd;
            hours += h * r;
            out.prices += a_h - q * h;
            let mix = q * h - p * h * r;
            match (fallback, cause) {
                (true, _) => out.fallback += mix,
                (false, Cause::Replacement) => out.interruptions += mix,
                (false, Cause::Move | Cause::Initial) => out.moves += mix,
            }
        }
    }
    let (mut h_int, mut h_mv) = overhead_hours(run, &basis, hours);
    let over = h_int + h_mv;
    if over > hours && over > 0.0 {
        // The overheads cannot exceed the hours that ran (estimates at the edges of a window).
        h_int *= hours / over;
        h_mv *= hours / over;
    }
    out.interruptions += p * h_int;
    out.moves += p * h_mv;
    out.forecast = p * (hours - h_int - h_mv) - planned;
    out
}

/// The probe window's share of a piece: dollars and hours.
fn within(b: &Billed, (from, to): Window) -> (f64, f64) {
    let usd = dollars_within(std::slice::from_ref(b), (from, to));
    let lo = b.piece.from.max(from);
    let hi = b.piece.to.min(to);
    let h = if hi > lo {
        (hi - lo).num_milliseconds() as f64 / 3_600_000.0
    } else {
        0.0
    };
    (usd, h)
}

/// The plan: the job's first placement event (its time and pool), priced from the price log
/// at that time; without one, the first instance's launch.
fn basis(run: &JobRun<'_>) -> Basis {
    let placed = run.events.iter().find_map(|(at, e)| match e {
        Change::Planned {
            zone,
            instance_type,
            capacity,
            nodes,
            expected_cost,
            finish_h,
        } => Some((
            *at,
            (zone.clone(), instance_type.clone(), *capacity),
            (*nodes, *expected_cost, *finish_h),
        )),
        _ => None,
    });
    let first = run
        .billed
        .iter()
        .map(|(u, _)| *u)
        .min_by_key(|u| u.started_at);
    let Some((at, pool, (nodes, expected_cost, finish_h))) = placed else {
        return match first {
            Some(u) => Basis {
                at: u.started_at,
                pool: pool_of(&u.offer_key),
                price: price_at(run.prices, &u.offer_key, u.started_at).unwrap_or(u.price_per_hour),
            },
            None => Basis {
                at: run.record.submitted_at,
                pool: None,
                price: 0.0,
            },
        };
    };
    let on_pool = |key: &str| pool_of(key).as_ref() == Some(&pool);
    let key = run
        .billed
        .iter()
        .map(|(u, _)| u.offer_key.as_str())
        .chain(run.prices.keys().map(String::as_str))
        .find(|k| on_pool(k));
    let launched = run
        .billed
        .iter()
        .find(|(u, _)| on_pool(&u.offer_key))
        .map(|(u, _)| u.price_per_hour);
    let implied =
        (nodes > 0 && finish_h > 0.0).then(|| expected_cost / (f64::from(nodes) * finish_h));
    let price = key
        .and_then(|k| price_at(run.prices, k, at))
        .or(launched)
        .or(implied)
        .unwrap_or(0.0);
    Basis {
        at,
        pool: Some(pool),
        price,
    }
}

/// The instance type of an offer key `cloud/zone/type/capacity` (empty when malformed).
fn type_of(key: &str) -> String {
    OfferKey::parse(key)
        .map(|k| k.instance_type.to_string())
        .unwrap_or_default()
}

/// (zone, instance type, capacity) of an offer key `cloud/zone/type/capacity`.
fn pool_of(key: &str) -> Option<(String, String, Capacity)> {
    let k = OfferKey::parse(key)?;
    Some((
        k.zone.to_string(),
        k.instance_type.to_string(),
        k.capacity()?,
    ))
}

/// The price `key` had at `at`: the last change recorded at or before it, else the first one
/// recorded (the offer was first seen later), else unknown.
fn price_at(prices: &PriceLog, key: &str, at: DateTime<Utc>) -> Option<f64> {
    let log = prices.get(key)?;
    log.iter()
        .rev()
        .find(|(t, _)| *t <= at)
        .or_else(|| log.first())
        .map(|(_, p)| *p)
}

/// The latest change of nodes at or before `u`'s launch.
fn cause_of(u: &Usage, events: &[(DateTime<Utc>, Change)]) -> Cause {
    events
        .iter()
        .take_while(|(at, _)| *at <= u.started_at)
        .filter_map(|(_, e)| match e {
            Change::Notice { .. } | Change::Preempted { .. } | Change::Replacing => {
                Some(Cause::Replacement)
            }
            Change::Migrating { .. } | Change::Resized { .. } | Change::Regrouped => {
                Some(Cause::Move)
            }
            _ => None,
        })
        .last()
        .unwrap_or(Cause::Initial)
}

/// Plan-node-hours of overhead: (interruptions, moves). `hours`: the plan-node-hours that
/// ran outside the probe window (the redo's rate is the job's samples per one of them).
fn overhead_hours(run: &JobRun<'_>, basis: &Basis, hours: f64) -> (f64, f64) {
    let restore_h = run.record.spec.checkpoint.restore_s.max(0.0) / 3600.0;
    let per_hour = if hours > 0.0 {
        run.record.done_samples / hours
    } else {
        0.0
    };
    // A node's ratio by instance id, and that of the first node launched at or after a time.
    let ratio_of = |key: &str| basis.ratio(run.rates, &type_of(key));
    let by_id: BTreeMap<&str, f64> = run
        .billed
        .iter()
        .map(|(u, _)| (u.instance.as_str(), ratio_of(&u.offer_key)))
        .collect();
    let of_ids = |ids: &[String]| -> f64 {
        ids.iter()
            .map(|id| by_id.get(id.as_str()).copied().unwrap_or(1.0))
            .sum()
    };
    let launched_from = |at: DateTime<Utc>| -> f64 {
        run.billed
            .iter()
            .filter(|(u, _)| u.started_at >= at)
            .min_by_key(|(u, _)| u.started_at)
            .map_or(1.0, |(u, _)| ratio_of(&u.offer_key))
    };
    let mut interruptions = boot_of_replacements(run, &ratio_of);
    let mut moves = 0.0;
    for (i, (at, e)) in run.events.iter().enumerate() {
        match e {
            Change::Notice { ids, .. } => interruptions += of_ids(ids) * restore_h,
            Change::Preempted {
                ids, lost_samples, ..
            } => {
                interruptions += of_ids(ids) * restore_h;
                if per_hour > 0.0 {
                    interruptions += lost_samples.max(0.0) / per_hour;
                }
            }
            Change::Migrating { moved, .. } => {
                let overlap_h = run.events[i + 1..]
                    .iter()
                    .find(|(_, e)| matches!(e, Change::Migrated))
                    .map_or(0.0, |(end, _)| hours_between(*at, *end));
                moves += f64::from(*moved) * (overlap_h + restore_h) * launched_from(*at);
            }
            Change::Resized { to, .. } => {
                moves += f64::from(*to) * restore_h * launched_from(*at);
            }
            _ => {}
        }
    }
    (interruptions, moves)
}

/// Plan-node-hours from each replacement's launch to its workers' first start (its boot).
fn boot_of_replacements(run: &JobRun<'_>, ratio_of: &dyn Fn(&str) -> f64) -> f64 {
    let started: BTreeMap<&str, DateTime<Utc>> =
        run.events
            .iter()
            .rev()
            .fold(BTreeMap::new(), |mut m, (at, e)| {
                if let Change::WorkersStarted { instance } = e {
                    m.insert(instance.as_str(), *at);
                }
                m
            });
    run.billed
        .iter()
        .filter(|(u, _)| cause_of(u, &run.events) == Cause::Replacement)
        .filter_map(|(u, _)| {
            let up = started.get(u.instance.as_str())?;
            Some(hours_between(u.started_at, *up) * ratio_of(&u.offer_key))
        })
        .sum()
}

fn hours_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    ((to - from).num_milliseconds().max(0)) as f64 / 3_600_000.0
}

#[cfg(test)]
#[path = "attribution_tests.rs"]
mod tests;
