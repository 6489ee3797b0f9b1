//! How a cloud bills an instance: the rule per cloud (granularity and minimum) and a price that
//! may change while the instance runs. The controller's cost reports and the simulated cloud's
//! ledger both bill through these functions, so they agree by construction.

use chrono::{DateTime, TimeDelta, Utc};

use crate::Cloud;

/// Cross-region egress for a checkpoint, USD per GB: the low end of AWS's and GCP's
/// inter-region prices (DESIGN.md §5 gives $0.02–0.12). The policies price a move with it and
/// the simulated cloud bills a checkpoint's crossing at it, unless told another rate.
pub const EGRESS_DOLLARS_PER_GB: f64 = 0.02;

/// What moving `gb` from region `from` to region `to` costs at `per_gb`: nothing within a
/// region.
pub fn egress_dollars(gb: f64, per_gb: f64, from: &str, to: &str) -> f64 {
    if from == to {
        0.0
    } else {
        gb.max(0.0) * per_gb
    }
}

/// A cloud's billing rule for a Linux VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BillingRule {
    /// Billing granularity: a started increment is billed whole.
    pub increment_s: i64,
    /// A VM is billed at least this long, however briefly it ran.
    pub minimum_s: i64,
}

impl Cloud {
    /// AWS (Linux on-demand and spot) and GCP bill per second with a one-minute minimum; the
    /// simulated cloud imitates AWS.
    pub fn billing(self) -> BillingRule {
        match self {
            Cloud::Aws | Cloud::Gcp | Cloud::Sim => BillingRule {
                increment_s: 1,
                minimum_s: 60,
            },
        }
    }
}

impl BillingRule {
    /// The end of the billed span of an instance that ran from `start` to `end`: whole
    /// increments, and never shorter than the minimum.
    pub fn billed_end(self, start: DateTime<Utc>, end: DateTime<Utc>) -> DateTime<Utc> {
        let ran_ms = (end - start).num_milliseconds().max(0);
        let step_ms = self.increment_s.max(1) * 1000;
        let billed_ms = (ran_ms + step_ms - 1) / step_ms * step_ms;
        start + TimeDelta::milliseconds(billed_ms.max(self.minimum_s * 1000))
    }
}

/// A price over time: each point's price holds from its time until the next point.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceSteps {
    points: Vec<(DateTime<Utc>, f64)>,
}

/// A stretch of time at one price.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Piece {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub price_per_hour: f64,
}

impl Piece {
    pub fn hours(&self) -> f64 {
        (self.to - self.from).num_milliseconds().max(0) as f64 / 3_600_000.0
    }

    pub fn dollars(&self) -> f64 {
        self.hours() * self.price_per_hour
    }
}

impl PriceSteps {
    /// Points in any order; of two at the same time, the later in the list wins.
    pub fn new(mut points: Vec<(DateTime<Utc>, f64)>) -> PriceSteps {
        points.reverse();
        points.sort_by_key(|p| p.0);
        points.dedup_by_key(|p| p.0);
        PriceSteps { points }
    }

    /// The points, oldest first.
    pub fn points(&self) -> &[(DateTime<Utc>, f64)] {
        &self.points
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The price in force at `t`; `before` when `t` precedes every point.
    pub fn price_at(&self, t: DateTime<Utc>, before: f64) -> f64 {
        match self.points.partition_point(|p| p.0 <= t) {
            0 => before,
            i => self.points[i - 1].1,
        }
    }

    /// `[from, to)` cut where the price changes, each piece at the price in force over it;
    /// `before` is the price before the first point (the price the instance launched at).
    pub fn pieces(&self, from: DateTime<Utc>, to: DateTime<Utc>, before: f64) -> Vec<Piece> {
        let mut out = Vec::new();
        let mut at = from;
        let changes = self.points.iter().filter(|p| p.0 > from && p.0 < to);
        for &(change, _) in changes {
            out.push(Piece {
                from: at,
                to: change,
                price_per_hour: self.price_at(at, before),
            });
            at = change;
        }
        if to > at {
            out.push(Piece {
                from: at,
                to,
                price_per_hour: self.price_at(at, before),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).expect("time")
    }

    #[test]
    fn a_short_run_is_billed_the_minimum_and_seconds_round_up() {
        let rule = Cloud::Aws.billing();
        assert_eq!(rule.billed_end(t(0), t(30)), t(60));
        assert_eq!(rule.billed_end(t(0), t(0)), t(60));
        let end = t(90) + TimeDelta::milliseconds(200);
        assert_eq!(rule.billed_end(t(0), end), t(91));
        assert_eq!(rule.billed_end(t(0), t(3600)), t(3600));
    }

    #[test]
    fn a_price_change_inside_an_interval_splits_it() {
        // $2/h from launch, $3/h from 30 min, $1/h from 2 h: one hour from 0 to 1 h costs
        // 0.5 × 2 + 0.5 × 3 = $2.50.
        let steps = PriceSteps::new(vec![(t(1800), 3.0), (t(7200), 1.0)]);
        let pieces = steps.pieces(t(0), t(3600), 2.0);
        assert_eq!(pieces.len(), 2);
        let dollars: f64 = pieces.iter().map(Piece::dollars).sum();
        assert!((dollars - 2.5).abs() < 1e-12, "{dollars}");
        // Starting after the first change uses the price then in force.
        let later: f64 = steps
            .pieces(t(3600), t(10800), 2.0)
            .iter()
            .map(Piece::dollars)
            .sum();
        assert!((later - (3.0 + 1.0)).abs() < 1e-12, "{later}");
    }

    #[test]
    fn the_later_of_two_points_at_one_time_wins() {
        let steps = PriceSteps::new(vec![(t(10), 1.0), (t(10), 4.0)]);
        assert_eq!(steps.price_at(t(20), 9.0), 4.0);
        assert_eq!(steps.price_at(t(5), 9.0), 9.0);
    }
}
