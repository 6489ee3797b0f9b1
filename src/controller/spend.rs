//! What each job has spent, kept as the pass runs: read once from the store's usage and price
//! history as cost reports bill it ([`crate::report::bill`]), then grown at every pass by what
//! the live instances cost since the last one, at the prices the controller last saw. The
//! budget checks read it; it never touches the store on a pass.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::store::{Store, StoreError};

/// Dollars per job, up to `at`.
#[derive(Debug, Default, Clone)]
pub(super) struct Spend {
    by_job: HashMap<String, f64>,
    at: Option<DateTime<Utc>>,
}

impl Spend {
    /// Everything billed up to `now`, from the store.
    pub(super) fn load(store: &Store, now: DateTime<Utc>) -> Result<Spend, StoreError> {
        let usage = store.usage_open_or_ended_since(None)?;
        let prices = if usage.is_empty() {
            Default::default()
        } else {
            store.prices()?
        };
        let mut by_job: HashMap<String, f64> = HashMap::new();
        for u in &usage {
            let steps = prices.get(&u.offer_key).map_or(&[][..], |p| &p[..]);
            let billed = crate::report::bill(u, None, steps, (None, DateTime::<Utc>::MAX_UTC), now);
            *by_job.entry(u.job.clone()).or_default() +=
                billed.iter().map(|b| b.piece.dollars()).sum::<f64>();
        }
        Ok(Spend {
            by_job,
            at: Some(now),
        })
    }

    /// Add what `live` (job, $/h now, launched at) cost from the last accrual (or its launch,
    /// if later) to `now`.
    pub(super) fn accrue<'a>(
        &mut self,
        live: impl Iterator<Item = (&'a str, f64, DateTime<Utc>)>,
        now: DateTime<Utc>,
    ) {
        let since = self.at.unwrap_or(now);
        for (job, per_hour, launched) in live {
            let from = since.max(launched);
            if now > from {
                let hours = (now - from).num_milliseconds() as f64 / 3_600_000.0;
                *self.by_job.entry(job.to_string()).or_default() += per_hour * hours;
            }
        }
        self.at = Some(now);
    }

    /// Dollars `job` has spent (0 for a job that never ran).
    pub(super) fn of(&self, job: &str) -> f64 {
        self.by_job.get(job).copied().unwrap_or(0.0)
    }

    pub(super) fn is_loaded(&self) -> bool {
        self.at.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accrual_counts_each_instance_from_its_launch_or_the_last_pass() {
        let t0 = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let h = |n: i64| t0 + chrono::TimeDelta::minutes(n * 60);
        let mut s = Spend {
            at: Some(t0),
            ..Spend::default()
        };
        s.accrue([("a", 2.0, t0), ("b", 4.0, h(1))].into_iter(), h(2));
        assert!((s.of("a") - 4.0).abs() < 1e-9);
        assert!((s.of("b") - 4.0).abs() < 1e-9, "b runs from its launch");
        s.accrue([("a", 3.0, t0)].into_iter(), h(3));
        assert!(
            (s.of("a") - 7.0).abs() < 1e-9,
            "the price now holds from the last pass"
        );
        assert_eq!(s.of("c"), 0.0);
    }
}
