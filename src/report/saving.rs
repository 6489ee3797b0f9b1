//! What a move saved, read from the bill: the one formula `tern explain`, the decisions API,
//! the HTML report and `tern demo` all show.

use chrono::{DateTime, Utc};
use tern_cloud::{Capacity, Offer, OfferKey, PriceSteps, Zone};

use super::bill::{bill, dollars_within};
use crate::store::{PriceLog, Usage};

/// What the store billed: usage intervals (with the offer each ran on, where known) and the
/// recorded price changes. Every job's, or only the one job's: [`realised`] reads its own.
#[derive(Debug, Clone, Copy)]
pub struct Bills<'a> {
    pub usage: &'a [(Usage, Option<Offer>)],
    pub prices: &'a PriceLog,
}

/// One move as [`realised`] reads it: the job, when the move began, until when its new place
/// counts (its next move, or the end), the pool it left (zone, capacity, $/h when it left) and
/// the pool it went to.
#[derive(Debug)]
pub struct Move<'a> {
    pub job: &'a str,
    pub at: DateTime<Utc>,
    pub until: DateTime<Utc>,
    pub from: (&'a Zone, Capacity, f64),
    pub to: (&'a Zone, Capacity),
}

/// What a move saved, from usage and recorded prices, not from its expectation:
/// `stay − paid − held`, where
/// - `paid` is what the job's nodes on the new pool (those started from the move until
///   `until`) were billed over that time;
/// - `stay` is what the same hours would have cost at the old pool's price at the same
///   moments (its recorded price steps after the move, the price it was left at before the
///   first);
/// - `held` is the move's cost: what the old nodes running when the move began were billed
///   from then until they were released (both pools paid while the new nodes booted and
///   restored the checkpoint).
///
/// Work lost to the move shows as longer running on the new pool, which `stay` prices at the
/// old rate too; a move that pays less than it costs comes out negative.
pub fn realised(bills: Bills<'_>, m: Move<'_>, now: DateTime<Utc>) -> f64 {
    let on = |key: &str, (zone, capacity): (&Zone, Capacity)| {
        OfferKey::parse(key)
            .is_some_and(|k| k.zone == zone.as_str() && k.capacity() == Some(capacity))
    };
    let billed = |u: &Usage, o: Option<&Offer>, from, to| {
        let steps = bills
            .prices
            .get(&u.offer_key)
            .map_or(&[][..], Vec::as_slice);
        bill(u, o, steps, (Some(from), to), now)
    };
    let mine = bills.usage.iter().filter(|(u, _)| u.job == m.job);
    let (mut stay, mut paid, mut held) = (0.0, 0.0, 0.0);
    let mut old_key = None;
    for (u, o) in mine.clone() {
        let running_then = u.started_at <= m.at && u.ended_at.is_none_or(|e| e > m.at);
        if running_then && on(&u.offer_key, (m.from.0, m.from.1)) {
            held += dollars_within(&billed(u, o.as_ref(), m.at, now), (m.at, now));
            old_key.get_or_insert(u.offer_key.clone());
        }
    }
    let old_steps = PriceSteps::new(
        old_key
            .and_then(|k| bills.prices.get(&k))
            .map(|p| p.iter().copied().filter(|(t, _)| *t > m.at).collect())
            .unwrap_or_default(),
    );
    for (u, o) in mine {
        if u.started_at < m.at || u.started_at >= m.until || !on(&u.offer_key, m.to) {
            continue;
        }
        for b in billed(u, o.as_ref(), m.at, m.until) {
            paid += b.piece.dollars();
            stay += old_steps
                .pieces(b.piece.from, b.piece.to, m.from.2)
                .iter()
                .map(tern_cloud::Piece::dollars)
                .sum::<f64>();
        }
    }
    stay - paid - held
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn usage(job: &str, key: &str, price: f64, from_h: f64, to_h: f64) -> Usage {
        let at = |h: f64| t0() + chrono::TimeDelta::seconds((h * 3600.0) as i64);
        Usage {
            instance: format!("{job}-{key}-{from_h}"),
            job: job.into(),
            offer_key: key.into(),
            capacity: Capacity::Spot,
            price_per_hour: price,
            on_demand_per_hour: Some(30.0),
            started_at: at(from_h),
            ended_at: Some(at(to_h)),
        }
    }

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).expect("time")
    }

    #[test]
    fn a_moves_realised_saving_is_the_old_price_for_the_new_hours_less_both_bills() {
        let (a, b) = ("sim/z-a/p5.48xlarge/spot", "sim/z-b/p5.48xlarge/spot");
        let hour = chrono::TimeDelta::hours(1);
        let usage: Vec<_> = [
            // The moved node: on the old pool 2 h before the move, 6 min after it.
            usage("j", a, 10.0, -2.0, 0.1),
            // The new node: 2 h on the new pool.
            usage("j", b, 4.0, 0.0, 2.0),
            // Another job on the new pool, and this job after its next move: not this move's.
            usage("k", b, 4.0, 0.0, 2.0),
            usage("j", b, 4.0, 3.0, 4.0),
        ]
        .into_iter()
        .map(|u| (u, None))
        .collect();
        // The old pool's price rose an hour after the move: staying would have cost more.
        let prices: PriceLog = [(a.to_string(), vec![(t0() + hour, 12.0)])].into();
        let (za, zb) = (Zone::new("z-a"), Zone::new("z-b"));
        let m = Move {
            job: "j",
            at: t0(),
            until: t0() + hour * 3,
            from: (&za, Capacity::Spot, 10.0),
            to: (&zb, Capacity::Spot),
        };
        let bills = Bills {
            usage: &usage,
            prices: &prices,
        };
        let got = realised(bills, m, t0() + hour * 5);
        // Stay: 1 h at $10 and 1 h at $12; paid: 2 h at $4; held: 0.1 h at $10.
        let want = (10.0 + 12.0) - 2.0 * 4.0 - 0.1 * 10.0;
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
    }
}
