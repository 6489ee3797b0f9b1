//! The simple online policies tern is measured against: on-demand only, greedy spot, and
//! Uniform Progress. Kept apart from tern's policy so the baselines stay easy to audit.

use super::{DeadlinePolicy, Job, JobProgress, Placement, TickView};

/// On-demand only: the reference every cost ratio divides by (up to the restart overhead).
#[derive(Debug, Default)]
pub struct OnDemandOnly;

impl DeadlinePolicy for OnDemandOnly {
    fn name(&self) -> &'static str {
        "od"
    }
    fn decide(&mut self, _: &Job, _: &JobProgress, _: &TickView<'_>) -> Placement {
        Placement::OnDemand
    }
}

/// Spot whenever any zone has it, wait otherwise; once the safety rule forces on-demand, stay.
#[derive(Debug, Default)]
pub struct Greedy;

impl DeadlinePolicy for Greedy {
    fn name(&self) -> &'static str {
        "greedy"
    }
    fn decide(&mut self, job: &Job, state: &JobProgress, obs: &TickView<'_>) -> Placement {
        if state.placement == Placement::OnDemand {
            return Placement::OnDemand;
        }
        obs.cheapest_up(job.min_nodes, state.placement)
            .map_or(Placement::Idle, Placement::Spot)
    }
}

/// Uniform Progress (DESIGN.md §4.4): spot while available; behind the straight line
/// `t·C/D`, on-demand when spot is not; leave on-demand only when 2 restarts ahead of the line.
#[derive(Debug, Default)]
pub struct UniformProgress;

impl DeadlinePolicy for UniformProgress {
    fn name(&self) -> &'static str {
        "up"
    }
    fn decide(&mut self, job: &Job, state: &JobProgress, obs: &TickView<'_>) -> Placement {
        let t = u64::from(obs.tick);
        let remaining = u64::from(job.deadline.saturating_sub(obs.tick));
        let work_left = u64::from(job.ticks_left(state.done));
        let r = u64::from(job.restart);
        // Progress expected on the line, in units, scaled to avoid rounding: done·D vs t·C.
        let unit = u64::from(job.unit);
        let done_scaled = u64::from(state.done) * u64::from(job.deadline);
        let line_scaled = t * u64::from(job.work) * unit;
        let behind = done_scaled < line_scaled;
        let ahead_2d = done_scaled >= line_scaled + 2 * r * u64::from(job.deadline) * unit;
        let spot = obs.cheapest_up(job.min_nodes, state.placement);
        let running_spot = matches!(state.placement, Placement::Spot(z) if Some(z) == spot);
        if work_left + 2 * r >= remaining {
            // Safety net: keep a running spot VM until it is preempted, else on-demand.
            return match (running_spot, spot) {
                (true, Some(z)) => Placement::Spot(z),
                _ => Placement::OnDemand,
            };
        }
        if state.placement == Placement::OnDemand {
            return match spot {
                Some(z) if ahead_2d => Placement::Spot(z),
                _ => Placement::OnDemand,
            };
        }
        match spot {
            Some(z) => Placement::Spot(z),
            None if behind => Placement::OnDemand,
            None => Placement::Idle,
        }
    }
}
