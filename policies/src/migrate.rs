//! Whether a running job should move to other capacity (DESIGN.md §4.3).
//!
//! Moving is never free: the job checkpoints, waits for the new capacity and restores, paying for
//! what it holds meanwhile, may lose progress since the last checkpoint, and pays egress when the
//! checkpoint crosses regions or clouds. A move must beat all of that by a threshold, keep the
//! deadline with a margin, and not follow another move too closely (every move restarts all
//! workers, so flapping between two near-equal offers is the failure to avoid).

/// Thresholds of the rule. Defaults scale with the job, not with any particular trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoveRule {
    /// Net saving must exceed this many dollars...
    pub floor: f64,
    /// ...and this fraction of the remaining cost where the job is now.
    pub fraction: f64,
    /// Slack (hours) that must remain after the move's overhead.
    pub margin_hours: f64,
    /// No second move within this many hours of the last one.
    pub cooldown_hours: f64,
}

impl MoveRule {
    /// Floor = one restart paid at on-demand price (a move must be worth more than a restart);
    /// fraction = 5 % (Karpenter-like: small savings are not worth the disruption); margin = two
    /// restarts (the move's own plus one preemption after it); cool-down = four restarts.
    pub fn for_job(restart_hours: f64, on_demand_rate: f64) -> MoveRule {
        MoveRule {
            floor: restart_hours * on_demand_rate,
            fraction: 0.05,
            margin_hours: 2.0 * restart_hours,
            cooldown_hours: 4.0 * restart_hours,
        }
    }
}

/// One candidate move, in dollars and hours. Rates are $ per hour of *progress* (price / speed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoveCandidate {
    pub remaining_work_hours: f64,
    /// $/progress-hour where the job runs now.
    pub current_rate: f64,
    /// $/progress-hour at the candidate.
    pub candidate_rate: f64,
    /// Checkpoint + provision + restore time.
    pub restart_hours: f64,
    /// $/h of what is held (billed) while moving.
    pub held_rate: f64,
    /// $ of progress since the last checkpoint that the move throws away.
    pub lost_progress_cost: f64,
    /// $ of moving the checkpoint (size × $/GB) when the region or cloud changes, else 0.
    pub egress: f64,
    /// Remaining time minus remaining work, in hours, before the move.
    pub slack_hours: f64,
    pub hours_since_last_move: Option<f64>,
}

/// Why a job stays put, or by how much a move wins.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    Move {
        net_saving: f64,
    },
    /// Saving minus cost does not clear the threshold.
    NotWorth {
        net_saving: f64,
        threshold: f64,
    },
    /// The move's overhead would eat into the deadline margin.
    DeadlineAtRisk,
    CoolingDown,
}

impl Decision {
    pub fn is_move(&self) -> bool {
        matches!(self, Decision::Move { .. })
    }
}

/// Apply the rule: move only if saving − cost > max(floor, fraction × remaining cost), the
/// deadline holds with margin, and the cool-down has passed.
pub fn decide(rule: &MoveRule, c: &MoveCandidate) -> Decision {
    if c.hours_since_last_move
        .is_some_and(|h| h < rule.cooldown_hours)
    {
        return Decision::CoolingDown;
    }
    if c.slack_hours - c.restart_hours < rule.margin_hours {
        return Decision::DeadlineAtRisk;
    }
    let saving = (c.current_rate - c.candidate_rate) * c.remaining_work_hours;
    let cost = c.restart_hours * c.held_rate + c.lost_progress_cost + c.egress;
    let net_saving = saving - cost;
    let threshold = rule
        .floor
        .max(rule.fraction * c.current_rate * c.remaining_work_hours);
    if net_saving > threshold {
        Decision::Move { net_saving }
    } else {
        Decision::NotWorth {
            net_saving,
            threshold,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate() -> MoveCandidate {
        MoveCandidate {
            remaining_work_hours: 40.0,
            current_rate: 1.8,
            candidate_rate: 0.9,
            restart_hours: 0.2,
            held_rate: 0.9,
            lost_progress_cost: 0.0,
            egress: 0.0,
            slack_hours: 4.0,
            hours_since_last_move: None,
        }
    }

    fn rule() -> MoveRule {
        MoveRule::for_job(0.2, 3.06)
    }

    #[test]
    fn a_large_saving_moves() {
        // Saving 0.9 × 40 = 36 $, cost 0.18 $, threshold max(0.612, 3.6).
        match decide(&rule(), &candidate()) {
            Decision::Move { net_saving } => assert!((net_saving - 35.82).abs() < 1e-9),
            other => panic!("expected a move, got {other:?}"),
        }
    }

    #[test]
    fn egress_can_cancel_a_saving() {
        let c = MoveCandidate {
            egress: 34.0,
            ..candidate()
        };
        assert!(matches!(decide(&rule(), &c), Decision::NotWorth { .. }));
    }

    #[test]
    fn small_savings_stay_below_the_fraction() {
        // 2 % cheaper: saving 1.44 $ < 5 % of 72 $ remaining.
        let c = MoveCandidate {
            candidate_rate: 1.8 * 0.98,
            ..candidate()
        };
        assert!(matches!(
            decide(&rule(), &c),
            Decision::NotWorth { threshold, .. } if (threshold - 3.6).abs() < 1e-9
        ));
    }

    #[test]
    fn the_floor_applies_near_the_end() {
        // 1 h left: 5 % of 1.8 $ is tiny, the floor (one on-demand restart, 0.612 $) rules.
        let c = MoveCandidate {
            remaining_work_hours: 1.0,
            candidate_rate: 1.2,
            ..candidate()
        };
        assert!(!decide(&rule(), &c).is_move());
    }

    #[test]
    fn deadline_margin_and_cooldown_block_moves() {
        let tight = MoveCandidate {
            slack_hours: 0.5,
            ..candidate()
        };
        assert_eq!(decide(&rule(), &tight), Decision::DeadlineAtRisk);
        let recent = MoveCandidate {
            hours_since_last_move: Some(0.5),
            ..candidate()
        };
        assert_eq!(decide(&rule(), &recent), Decision::CoolingDown);
        let later = MoveCandidate {
            hours_since_last_move: Some(1.0),
            ..candidate()
        };
        assert!(decide(&rule(), &later).is_move());
    }
}
