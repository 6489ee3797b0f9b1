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
    /// foldhash: every pass adds to it once per live instance.
    by_job: HashMap<String, f64, foldhash::fast::RandomState>,
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
        let mut by_job: HashMap<String, f64, foldhash::fast::RandomState> = HashMap::default();
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

    /// Add what one instance of `job` at `per_hour` cost from `from` to `now`.
    pub(super) fn add(
        &mut self,
        job: &str,
        per_hour: f64,
        from: DateTime<Utc>,
        now: DateTime<Utc>,
    ) {
        if now > from {
            let hours = (now - from).num_milliseconds() as f64 / 3_600_000.0;
            self.adjust(job, per_hour * hours);
        }
    }

    /// Add `dollars` (negative to take off) to `job`'s spend.
    pub(super) fn adjust(&mut self, job: &str, dollars: f64) {
        match self.by_job.get_mut(job) {
            Some(d) => *d += dollars,
            None => {
                self.by_job.insert(job.to_string(), dollars);
            }
        }
    }

    /// The spend is now up to `now`.
    pub(super) fn mark(&mut self, now: DateTime<Utc>) {
        self.at = Some(now);
    }

    /// Up to when the spend is counted.
    pub(super) fn at(&self) -> Option<DateTime<Utc>> {
        self.at
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
    fn spend_counts_each_instance_from_its_launch_or_the_last_pass() {
        let t0 = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let h = |n: i64| t0 + chrono::TimeDelta::minutes(n * 60);
        let mut s = Spend {
            at: Some(t0),
            ..Spend::default()
        };
        let since = s.at().expect("loaded");
        s.add("a", 2.0, since.max(t0), h(2));
        s.add("b", 4.0, since.max(h(1)), h(2));
        s.mark(h(2));
        assert!((s.of("a") - 4.0).abs() < 1e-9);
        assert!((s.of("b") - 4.0).abs() < 1e-9, "b runs from its launch");
        s.add("a", 3.0, s.at().expect("marked").max(t0), h(3));
        assert!(
            (s.of("a") - 7.0).abs() < 1e-9,
            "the price now holds from the last pass"
        );
        s.add("a", 3.0, h(4), h(3));
        assert!((s.of("a") - 7.0).abs() < 1e-9, "nothing before it started");
        assert_eq!(s.of("c"), 0.0);
    }
}
