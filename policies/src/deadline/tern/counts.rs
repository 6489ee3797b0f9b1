//! Availability statistics of one zone for tern's deadline policy: transitions counted with
//! exponential forgetting, and the hazard and recovery rates (with their confidence bounds)
//! the model is built from.

/// Availability statistics of one zone, learned from the past with exponential forgetting.
#[derive(Debug, Clone, Copy)]
pub(super) struct Counts {
    /// Up at t−1, and up / down at t.
    pub(super) stay_up: f64,
    pub(super) went_down: f64,
    /// Down at t−1, and up / down at t.
    pub(super) came_up: f64,
    pub(super) stay_down: f64,
    /// Of `went_down`, how often another zone was up at that tick.
    pub(super) down_other_up: f64,
    /// The part of `stay_up` / `went_down` seen while the run of capacity was young (at most
    /// one restart overhead old): fresh capacity often vanishes again quickly, and a new
    /// instance lives through exactly that period while it boots.
    pub(super) young_up: f64,
    pub(super) young_down: f64,
    /// Consecutive up ticks ending at the last tick seen (not forgotten).
    pub(super) age: u32,
    /// Weight of the prior, in ticks: one hour of pretend history with half a transition each
    /// way (capacity that lasts and outages that last about two hours), so a zone without history
    /// is neither trusted nor written off, and a few hours of real data outweigh the guess.
    pub(super) prior: f64,
}

impl Default for Counts {
    fn default() -> Self {
        Counts {
            stay_up: 0.0,
            went_down: 0.0,
            came_up: 0.0,
            stay_down: 0.0,
            down_other_up: 0.0,
            young_up: 0.0,
            young_down: 0.0,
            age: 0,
            prior: 1.0,
        }
    }
}

impl Counts {
    pub(super) fn decay(&mut self, f: f64) {
        self.stay_up *= f;
        self.went_down *= f;
        self.came_up *= f;
        self.stay_down *= f;
        self.down_other_up *= f;
        self.young_up *= f;
        self.young_down *= f;
    }

    /// Count one tick's transition of this zone (`was_up` → `is_up`). Runs of capacity at most
    /// `young` ticks old are also counted apart; `others_up` says whether any zone was up.
    pub(super) fn observe(&mut self, was_up: bool, is_up: bool, young: u32, others_up: bool) {
        let is_young = self.age <= young;
        match (was_up, is_up) {
            (true, true) => {
                self.stay_up += 1.0;
                if is_young {
                    self.young_up += 1.0;
                }
                self.age = self.age.saturating_add(1);
            }
            (true, false) => {
                self.went_down += 1.0;
                if is_young {
                    self.young_down += 1.0;
                }
                if others_up {
                    self.down_other_up += 1.0;
                }
                self.age = 0;
            }
            (false, true) => {
                self.came_up += 1.0;
                self.age = 1;
            }
            (false, false) => self.stay_down += 1.0,
        }
    }

    /// Hazard while a run of capacity is young (boot-time risk of a fresh start).
    pub(super) fn hazard_young(&self) -> f64 {
        (self.young_down + 0.5) / (self.young_up + self.young_down + self.prior)
    }

    /// Losses of runs that have outlived one restart overhead, and the weight of all their
    /// ticks with the prior's.
    pub(super) fn established(&self) -> (f64, f64) {
        let down = (self.went_down - self.young_down).max(0.0);
        let up = (self.stay_up - self.young_up).max(0.0);
        (down, up + down + self.prior)
    }

    /// Hazard once a run has outlived one restart overhead.
    pub(super) fn hazard_established(&self) -> f64 {
        let (down, n) = self.established();
        (down + 0.5) / n
    }

    /// The established hazard, one standard error lower: what staying is judged on when a
    /// move is weighed, so only a hazard gap the counts are sure of pays for a move.
    pub(super) fn hazard_established_low(&self) -> f64 {
        let p = self.hazard_established();
        (p - standard_error(p, self.established().1)).max(0.0)
    }

    /// Hazard of a new instance, one standard error higher: the young-run hazard, never below
    /// the established one (the rule [`Model::boot_hazard`] applies to the snapped model),
    /// each at the upper end of what its counts allow (see [`Counts::hazard_established_low`]).
    pub(super) fn hazard_start_high(&self) -> f64 {
        let n_young = self.young_up + self.young_down + self.prior;
        let high = |p: f64, n: f64| (p + standard_error(p, n)).min(1.0);
        high(self.hazard_young(), n_young)
            .max(high(self.hazard_established(), self.established().1))
    }

    /// Per-tick hazard of losing capacity.
    pub(super) fn hazard(&self) -> f64 {
        (self.went_down + 0.5) / (self.stay_up + self.went_down + self.prior)
    }

    /// Per-tick chance that capacity comes back.
    pub(super) fn recovery(&self) -> f64 {
        (self.came_up + 0.5) / (self.came_up + self.stay_down + self.prior)
    }

    /// The recovery rate, one standard error lower: what a wait for this zone is judged on,
    /// so a zone the counts have rarely or never seen come back is not waited for.
    pub(super) fn recovery_low(&self) -> f64 {
        let p = self.recovery();
        (p - standard_error(p, self.came_up + self.stay_down + self.prior)).max(0.0)
    }

    pub(super) fn other_up_after_loss(&self) -> f64 {
        (self.down_other_up + 0.5) / (self.went_down + 1.0)
    }
}

/// Standard error of a rate `p` estimated from `n` (weighted) trials.
fn standard_error(p: f64, n: f64) -> f64 {
    (p * (1.0 - p) / n.max(1.0)).sqrt()
}
