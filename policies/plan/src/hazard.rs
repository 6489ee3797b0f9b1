//! Spot interruption rates from availability history.

/// Interruptions per hour of a gang of `needed` instances, from an availability series (the
/// count of instances available at each tick, `gap_s` seconds apart): the number of times the
/// count falls below `needed` after having been at or above it, divided by the hours it was at
/// or above it. Half an event is added (a Jeffreys-style prior), so a short clean history gives a
/// small positive rate rather than zero. `None` when the series never has enough capacity.
pub fn hazard_per_hour(available: &[u32], gap_s: f64, needed: u32) -> Option<f64> {
    if !(gap_s.is_finite() && gap_s > 0.0) {
        return None;
    }
    let up = |c: &u32| *c >= needed.max(1);
    let up_ticks = available.iter().filter(|c| up(c)).count();
    if up_ticks == 0 {
        return None;
    }
    let losses = available
        .windows(2)
        .filter(|w| up(&w[0]) && !up(&w[1]))
        .count();
    let hours = up_ticks as f64 * gap_s / 3600.0;
    Some((losses as f64 + 0.5) / hours)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_losses_per_available_hour() {
        // 10 ticks of 360 s = 1 h up, one loss, then back.
        let s = [1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1];
        let h = hazard_per_hour(&s, 360.0, 1).unwrap();
        assert!((h - 1.5 / 1.0).abs() < 1e-9, "{h}");
        // A gang of 4 sees more losses on a 0..4 count series than a single node.
        let counts = [4, 4, 3, 4, 4, 2, 4, 4];
        assert!(
            hazard_per_hour(&counts, 300.0, 4).unwrap()
                > hazard_per_hour(&counts, 300.0, 1).unwrap()
        );
        assert_eq!(hazard_per_hour(&[0, 0], 60.0, 1), None);
        assert_eq!(hazard_per_hour(&[1], 0.0, 1), None);
        // A clean history is a small positive rate, not zero.
        assert!(hazard_per_hour(&[1; 1000], 60.0, 1).unwrap() > 0.0);
    }
}
