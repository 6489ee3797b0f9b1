//! The forecast users read (`forecast` in `tern status --json` and `GET /v1/jobs/NAME`), and
//! the event when what it stands on changes.

use chrono::{DateTime, Utc};

use super::events::Event;
use super::{Controller, Result};
use crate::api::wire::JobForecast;
use crate::jobs::{ForecastBasis, LoadedJob};
use crate::store::{InstanceRecord, JobRecord};

/// The shape a job's forecast is shown at: where it runs, else where its probe runs, else its
/// first accelerator at its smallest worker count on one node.
fn shape_of(r: &JobRecord, mine: &[&InstanceRecord]) -> Option<(String, u32, u32)> {
    let live: Vec<&&InstanceRecord> = mine.iter().filter(|i| !i.draining).collect();
    if let Some(i) = live.first()
        && let Some(a) = i.offer.accelerator()
    {
        let nodes = live.len() as u32;
        return Some((
            a.name.clone(),
            i.offer.accelerator_units().max(1) * nodes,
            nodes,
        ));
    }
    if let Some(p) = r.probe.as_ref() {
        return Some((p.accelerator.clone(), r.spec.workers.min.max(1), p.nodes));
    }
    let a = r.spec.accelerators.first()?;
    Some((a.clone(), r.spec.workers.min.max(1), 1))
}

/// The forecast of `loaded` at `r`'s shape.
pub fn forecast_of(
    r: &JobRecord,
    loaded: Option<&LoadedJob>,
    mine: &[&InstanceRecord],
) -> Option<JobForecast> {
    if r.state.is_final() {
        return None;
    }
    let (accelerator, gpus, nodes) = shape_of(r, mine)?;
    let (basis, p) = match loaded {
        Some(l) => l.forecast_at(&accelerator, gpus, nodes),
        None => (ForecastBasis::None, None),
    };
    Some(JobForecast {
        observations: loaded.map_or(0, |l| l.observations_on(&accelerator)),
        step_seconds: p.as_ref().map(|p| p.step_s),
        samples_per_second: p.as_ref().map(|p| p.throughput()),
        basis: basis.as_str().to_string(),
        accelerator,
        gpus,
        nodes,
    })
}

impl Controller {
    /// The job's forecast as `tern status` shows it.
    pub fn forecast(&self, name: &str) -> Option<JobForecast> {
        let e = self.fleet.jobs.get(name)?;
        let mine: Vec<&InstanceRecord> = self.fleet.instances.of_job(name).collect();
        forecast_of(&e.record, e.loaded.as_deref(), &mine)
    }

    /// The job's forecaster-backed model, as loaded (for [`forecast_of`] where the caller has
    /// the job's instances at hand).
    pub(super) fn loaded(&self, name: &str) -> Option<&LoadedJob> {
        self.fleet.jobs.get(name)?.loaded.as_deref()
    }

    /// Report a change of what the job's forecast stands on, at the shape users see, when a
    /// refit (`new`) changes it.
    pub(super) fn basis_changed(
        &self,
        name: &str,
        old: Option<&LoadedJob>,
        new: &LoadedJob,
        at: DateTime<Utc>,
    ) -> Result<()> {
        let Some(e) = self.fleet.jobs.get(name) else {
            return Ok(());
        };
        let mine: Vec<&InstanceRecord> = self.fleet.instances.of_job(name).collect();
        let (Some(before), Some(after)) = (
            forecast_of(&e.record, old, &mine),
            forecast_of(&e.record, Some(new), &mine),
        ) else {
            return Ok(());
        };
        if before.basis == after.basis {
            return Ok(());
        }
        self.emit(
            at,
            Event::Basis {
                job: name.to_string(),
                accelerator: after.accelerator,
                from: before.basis,
                to: after.basis,
                step_s: after.step_seconds,
            },
        )
    }
}
