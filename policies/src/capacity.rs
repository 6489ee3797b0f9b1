//! What the controller does when capacity does not hold: how long it avoids a pool after
//! failures there, and how many launches one job may make in an hour. Pure, so the controller
//! and its tests state the same arithmetic.
//!
//! A *strike* against a pool (offer key) is a capacity or quota error, a launch that timed
//! out, or a reclaim notice. Each strike within [`STRIKE_MEMORY`] of the last doubles how long
//! the pool is avoided, from [`BASE_BACKOFF`] (Karpenter's insufficient-capacity cache keeps
//! 3 min) up to [`MAX_BACKOFF`]. Spot that flaps every few minutes thus costs a handful of
//! launches per hour at first and about one per pool per hour after, not one per tick.

use std::time::Duration;

/// How long a pool is avoided after a single failure.
pub const BASE_BACKOFF: Duration = Duration::from_secs(180);
/// The longest a pool is avoided, however often it failed.
pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// A strike this long after the previous one starts the count again.
pub const STRIKE_MEMORY: Duration = Duration::from_secs(2 * 3600);
/// Instance launches one job may make in any hour, per node of its largest fleet.
pub const LAUNCHES_PER_NODE_HOUR: u32 = 4;

/// How long to avoid a pool after its `strikes`-th strike in a row (1 = the first), from
/// `base` after one failure ([`BASE_BACKOFF`] unless configured).
pub fn backoff(strikes: u32, base: Duration) -> Duration {
    let doublings = strikes.saturating_sub(1).min(16);
    base.saturating_mul(1u32 << doublings)
        .min(MAX_BACKOFF.max(base))
}

/// The strike count after a new strike `since_last` after the previous one (`None`: first).
pub fn next_strikes(strikes: u32, since_last: Option<Duration>) -> u32 {
    match since_last {
        Some(d) if d < STRIKE_MEMORY => strikes.saturating_add(1),
        _ => 1,
    }
}

/// The most instances a job of at most `max_workers` nodes may launch in any 60 minutes:
/// enough to replace its whole fleet [`LAUNCHES_PER_NODE_HOUR`] times, so a job never stalls
/// for lack of launches while capacity holds, and flapping capacity cannot make it launch
/// without bound.
pub fn launch_budget(max_workers: u32) -> u32 {
    LAUNCHES_PER_NODE_HOUR.saturating_mul(max_workers.max(1))
}

/// How many of `wanted` instances a job may launch now, having launched `last_hour` in the
/// past hour.
pub fn launches_allowed(wanted: u32, last_hour: u32, max_workers: u32) -> u32 {
    wanted.min(launch_budget(max_workers).saturating_sub(last_hour))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_strike_up_to_an_hour() {
        let minutes: Vec<u64> = (1..=8)
            .map(|s| backoff(s, BASE_BACKOFF).as_secs() / 60)
            .collect();
        assert_eq!(minutes, vec![3, 6, 12, 24, 48, 60, 60, 60]);
        assert_eq!(backoff(0, BASE_BACKOFF), BASE_BACKOFF);
        assert_eq!(backoff(u32::MAX, BASE_BACKOFF), MAX_BACKOFF);
    }

    #[test]
    fn strikes_count_up_only_while_failures_keep_coming() {
        assert_eq!(next_strikes(0, None), 1);
        assert_eq!(next_strikes(3, Some(Duration::from_secs(600))), 4);
        assert_eq!(next_strikes(3, Some(STRIKE_MEMORY)), 1);
        assert_eq!(next_strikes(u32::MAX, Some(Duration::ZERO)), u32::MAX);
    }

    #[test]
    fn the_launch_budget_caps_what_is_launched() {
        assert_eq!(launch_budget(0), 4);
        assert_eq!(launch_budget(8), 32);
        assert_eq!(launches_allowed(4, 0, 4), 4);
        assert_eq!(launches_allowed(4, 14, 4), 2);
        assert_eq!(launches_allowed(4, 16, 4), 0);
        assert_eq!(launches_allowed(4, 99, 4), 0);
    }

    /// A pool that fails at every try, tried as soon as its backoff ends: over 24 h it is
    /// tried at most 5 + 23 times (3+6+12+24+48 min ≈ 1.6 h for the first five, then hourly).
    #[test]
    fn a_pool_that_always_fails_is_tried_about_hourly() {
        let (mut t, mut strikes, mut tries) = (Duration::ZERO, 0, 0);
        let mut last: Option<Duration> = None;
        while t < Duration::from_secs(24 * 3600) {
            tries += 1;
            strikes = next_strikes(strikes, last.map(|l| t - l));
            last = Some(t);
            t += backoff(strikes, BASE_BACKOFF);
        }
        assert!(tries <= 5 + 23, "{tries}");
    }
}
