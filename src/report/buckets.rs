//! Time buckets that fit a report's span (from its first billed piece to its end): hours under
//! 3 days, days under 8 weeks, else ISO weeks from Monday 00:00 UTC. Billed pieces are cut
//! exactly at bucket boundaries, so the buckets add up to the report's total; and the
//! projection of spend to the latest deadline of the report's unfinished jobs.

use std::collections::BTreeMap;

use chrono::{DateTime, Datelike, TimeDelta, Utc};
use tern_cloud::{Capacity, Piece};

pub use crate::api::wire::costs::{BucketCost, BucketUnit, Projection};

use super::BilledUsage;
use super::bill::{Billed, dollars_within};

/// Every boundary of every unit is a whole number of units after this Monday, 1970-01-05
/// 00:00 UTC (hours, days and weeks all have fixed lengths in UTC).
const MONDAY: i64 = 4 * 86_400;

/// The unit for a span: hours under 3 days, days under 8 weeks, weeks beyond.
pub fn unit_for(span: TimeDelta) -> BucketUnit {
    if span < TimeDelta::days(3) {
        BucketUnit::Hour
    } else if span < TimeDelta::weeks(8) {
        BucketUnit::Day
    } else {
        BucketUnit::Week
    }
}

/// One bucket's length.
pub fn length(unit: BucketUnit) -> TimeDelta {
    match unit {
        BucketUnit::Hour => TimeDelta::hours(1),
        BucketUnit::Day => TimeDelta::days(1),
        BucketUnit::Week => TimeDelta::weeks(1),
    }
}

fn base() -> DateTime<Utc> {
    DateTime::from_timestamp(MONDAY, 0).unwrap_or_default()
}

/// Which bucket `t` falls in, counted from 1970-01-05 (negative before it).
pub fn index(unit: BucketUnit, t: DateTime<Utc>) -> i64 {
    (t - base())
        .num_milliseconds()
        .div_euclid(length(unit).num_milliseconds())
}

/// The start of bucket `i` (see [`index`]).
pub fn start_of(unit: BucketUnit, i: i64) -> DateTime<Utc> {
    base() + TimeDelta::milliseconds(i.saturating_mul(length(unit).num_milliseconds()))
}

/// The start of the bucket holding `t`.
pub fn floor(unit: BucketUnit, t: DateTime<Utc>) -> DateTime<Utc> {
    start_of(unit, index(unit, t))
}

/// The bucket's name in reports: `2026-11-23 14:00`, `2026-11-23`, `2026-W48`.
pub fn label(unit: BucketUnit, start: DateTime<Utc>) -> String {
    match unit {
        BucketUnit::Hour => start.format("%Y-%m-%d %H:00").to_string(),
        BucketUnit::Day => start.format("%Y-%m-%d").to_string(),
        BucketUnit::Week => {
            let w = start.iso_week();
            format!("{}-W{:02}", w.year(), w.week())
        }
    }
}

/// A shorter name for a chart's axis: an hour without its year (`11-23 14:00`).
pub fn tick(unit: BucketUnit, start: DateTime<Utc>) -> String {
    match unit {
        BucketUnit::Hour => start.format("%m-%d %H:00").to_string(),
        _ => label(unit, start),
    }
}

/// `pieces` cut at the boundaries of `unit`, keyed by bucket start.
pub fn cut(pieces: &[Billed], unit: BucketUnit) -> BTreeMap<DateTime<Utc>, Vec<Billed>> {
    let mut out: BTreeMap<DateTime<Utc>, Vec<Billed>> = BTreeMap::new();
    for b in pieces {
        let mut at = b.piece.from;
        while at < b.piece.to {
            let i = index(unit, at);
            let to = start_of(unit, i + 1).min(b.piece.to);
            out.entry(start_of(unit, i)).or_default().push(Billed {
                piece: Piece {
                    from: at,
                    to,
                    price_per_hour: b.piece.price_per_hour,
                },
                on_demand_per_hour: b.on_demand_per_hour,
            });
            at = to;
        }
    }
    out
}

/// The report's buckets and projection.
pub(super) struct Series {
    pub unit: BucketUnit,
    pub buckets: Vec<BucketCost>,
    pub projection: Option<Projection>,
}

/// Buckets over `billed`, every one from the first billed piece to the report's end (`until`,
/// or the last billed piece's end if later: a one-minute minimum may reach past it), empty ones
/// included so the chart's time axis is even.
///
/// The projection runs from that end, at the spend rate of the last bucket's length before it
/// (of the whole span when shorter), to `deadline` (the latest deadline of the report's
/// unfinished jobs). There is none without such a deadline after the end (no deadlines, or
/// every job finished), nor when nothing was billed.
pub(super) fn series(
    billed: &[BilledUsage<'_>],
    until: DateTime<Utc>,
    deadline: Option<DateTime<Utc>>,
) -> Series {
    let pieces = || billed.iter().flat_map(|(_, _, p)| p);
    let Some(first) = pieces().map(|b| b.piece.from).min() else {
        return Series {
            unit: unit_for(TimeDelta::zero()),
            buckets: Vec::new(),
            projection: None,
        };
    };
    let end = pieces().map(|b| b.piece.to).fold(until, DateTime::max);
    let unit = unit_for(end - first);
    let mut sums: BTreeMap<DateTime<Utc>, (f64, f64)> = BTreeMap::new();
    for (u, _, p) in billed {
        for (start, part) in cut(p, unit) {
            let dollars: f64 = part.iter().map(|b| b.piece.dollars()).sum();
            let s = sums.entry(start).or_default();
            match u.capacity {
                Capacity::Spot => s.0 += dollars,
                _ => s.1 += dollars,
            }
        }
    }
    let buckets: Vec<BucketCost> = (index(unit, first)..)
        .map(|i| start_of(unit, i))
        .take_while(|s| *s < end)
        .map(|start| {
            let (spot, on_demand) = sums.get(&start).copied().unwrap_or_default();
            BucketCost {
                start,
                label: label(unit, start),
                spot,
                on_demand,
            }
        })
        .collect();
    let projection = deadline.filter(|d| *d > end).map(|until| {
        let spent: f64 = buckets.iter().map(|b| b.spot + b.on_demand).sum();
        let window = ((end - length(unit)).max(first), end);
        let all: Vec<Billed> = pieces().cloned().collect();
        let per_hour = dollars_within(&all, window) / hours(window.1 - window.0);
        Projection {
            from: end,
            spent,
            per_hour,
            until,
            dollars: spent + per_hour * hours(until - end),
        }
    });
    Series {
        unit,
        buckets,
        projection,
    }
}

fn hours(d: TimeDelta) -> f64 {
    d.num_milliseconds().max(1) as f64 / 3.6e6
}
