//! One usage interval → billed pieces: the cloud's billing rule (per second, one-minute
//! minimum), the prices that held while it ran, clipped to the report's window.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use tern_cloud::{Capacity, Cloud, Offer, Piece, PriceSteps};

use crate::store::Usage;

/// A billed stretch of one instance at one price, with the on-demand price of the same shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Billed {
    pub piece: Piece,
    pub on_demand_per_hour: f64,
}

impl Billed {
    pub fn on_demand_dollars(&self) -> f64 {
        self.piece.hours() * self.on_demand_per_hour
    }
}

/// The cloud an interval ran on: the offer's, else the first part of its offer key.
pub fn cloud_of(usage: &Usage, offer: Option<&Offer>) -> Cloud {
    offer.map(|o| o.cloud).unwrap_or_else(|| {
        match tern_cloud::OfferKey::parse(&usage.offer_key).map(|k| k.cloud) {
            Some("gcp") => Cloud::Gcp,
            Some("sim") => Cloud::Sim,
            _ => Cloud::Aws,
        }
    })
}

/// Bill `usage` up to `now` (an open interval runs until then), inside `[since, until)`.
/// The launch price holds until the first recorded change after the launch; `prices` are the
/// recorded changes of the interval's offer key.
pub fn bill(
    usage: &Usage,
    offer: Option<&Offer>,
    prices: &[(DateTime<Utc>, f64)],
    window: (Option<DateTime<Utc>>, DateTime<Utc>),
    now: DateTime<Utc>,
) -> Vec<Billed> {
    let rule = cloud_of(usage, offer).billing();
    let end = rule.billed_end(usage.started_at, usage.ended_at.unwrap_or(now));
    let from = window
        .0
        .map_or(usage.started_at, |s| s.max(usage.started_at));
    let to = end.min(window.1);
    if to <= from {
        return Vec::new();
    }
    let after_launch: Vec<(DateTime<Utc>, f64)> = prices
        .iter()
        .copied()
        .filter(|(at, _)| *at > usage.started_at)
        .collect();
    PriceSteps::new(after_launch)
        .pieces(from, to, usage.price_per_hour)
        .into_iter()
        .map(|piece| Billed {
            on_demand_per_hour: on_demand_price(usage, piece.price_per_hour),
            piece,
        })
        .collect()
}

/// The on-demand price of the same shape: recorded at launch; for on-demand capacity the price
/// paid; else (unknown) the price paid, so no saving is claimed that was not measured.
fn on_demand_price(usage: &Usage, paid: f64) -> f64 {
    match (usage.capacity, usage.on_demand_per_hour) {
        (Capacity::OnDemand, _) => paid,
        (_, Some(od)) => od,
        (_, None) => paid,
    }
}

/// Dollars of `pieces` inside `[from, to)`: each piece cut at the window's edges and billed at
/// its own price, so a window's share follows the same price steps as the whole.
pub fn dollars_within(pieces: &[Billed], (from, to): (DateTime<Utc>, DateTime<Utc>)) -> f64 {
    pieces
        .iter()
        .map(|b| {
            Piece {
                from: b.piece.from.max(from),
                to: b.piece.to.min(to),
                price_per_hour: b.piece.price_per_hour,
            }
            .dollars()
        })
        .sum()
}

/// `pieces` cut at UTC midnights, keyed by day (`YYYY-MM-DD`): [`super::buckets::cut`] by day.
pub fn by_day(pieces: &[Billed]) -> BTreeMap<String, Vec<Billed>> {
    super::buckets::cut(pieces, super::buckets::BucketUnit::Day)
        .into_iter()
        .map(|(start, p)| (start.date_naive().to_string(), p))
        .collect()
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_006_400 + s, 0).expect("time")
    }

    fn usage(start: i64, end: Option<i64>) -> Usage {
        Usage {
            instance: "i-1".into(),
            job: "j".into(),
            offer_key: "aws/use1-az1/p3.2xlarge/spot".into(),
            capacity: Capacity::Spot,
            price_per_hour: 1.0,
            on_demand_per_hour: Some(3.0),
            started_at: t(start),
            ended_at: end.map(t),
        }
    }

    fn dollars(b: &[Billed]) -> f64 {
        b.iter().map(|b| b.piece.dollars()).sum()
    }

    #[test]
    fn a_spot_price_that_moves_mid_interval_is_billed_piecewise() {
        // Launched at $1/h; the price was $0.80 before the launch (ignored: the launch price
        // holds), $1.50 from 40 min, $0.60 from 100 min; ran 2 h.
        // By hand: 40/60 × 1.00 + 60/60 × 1.50 + 20/60 × 0.60 = 0.6667 + 1.5 + 0.2 = 2.3667.
        let prices = vec![(t(-600), 0.8), (t(2400), 1.5), (t(6000), 0.6)];
        let b = bill(
            &usage(0, Some(7200)),
            None,
            &prices,
            (None, t(99_999)),
            t(99_999),
        );
        assert_eq!(b.len(), 3);
        assert!(
            (dollars(&b) - (2.0 / 3.0 + 1.5 + 0.2)).abs() < 1e-9,
            "{}",
            dollars(&b)
        );
        let od: f64 = b.iter().map(Billed::on_demand_dollars).sum();
        assert!((od - 6.0).abs() < 1e-9);
    }

    #[test]
    fn thirty_seconds_are_billed_as_sixty() {
        let b = bill(&usage(0, Some(30)), None, &[], (None, t(99_999)), t(99_999));
        assert!((dollars(&b) - 1.0 / 60.0).abs() < 1e-12, "{}", dollars(&b));
    }

    #[test]
    fn the_window_clips_and_an_open_interval_runs_until_now() {
        let u = usage(0, None);
        let b = bill(&u, None, &[], (Some(t(1800)), t(99_999)), t(3600));
        assert!((dollars(&b) - 0.5).abs() < 1e-12);
        assert!(bill(&u, None, &[], (Some(t(4000)), t(99_999)), t(3600)).is_empty());
    }

    #[test]
    fn days_split_at_midnight() {
        // t(0) is midnight UTC (1_700_006_400 = 2023-11-15T00:00:00Z); run 23:00 → 01:00.
        let b = bill(
            &usage(-3600, Some(3600)),
            None,
            &[],
            (None, t(99_999)),
            t(99_999),
        );
        let days = by_day(&b);
        assert_eq!(days.len(), 2);
        for (_, pieces) in days {
            assert!((dollars(&pieces) - 1.0).abs() < 1e-12);
        }
        assert_eq!(t(0) - t(-3600), TimeDelta::hours(1));
    }
}
