//! The simulated world a controller runs in: the simulated cloud on its virtual clock, the
//! controller, and simulated workers. One drive loop for `tern demo`, the closed-loop replay
//! (`tern simulate --policy controller`) and the scenario tests: a pass at the cloud's time;
//! unless the caller stops there, the clock moves one tick and the workers work it.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tern_sim::SimCloud;

use super::workload::Workload;
use super::{Controller, ControllerError};

/// See the module docs. The fields are public: a test may drop `ctl` and open another on the
/// same store (a restart), or read the workers' losses.
pub struct SimWorld {
    pub sim: Arc<SimCloud>,
    pub ctl: Controller,
    /// `None`: nothing trains (jobs make no progress), for tests of the fleet alone.
    pub workers: Option<Workload>,
    pub tick: Duration,
}

impl std::fmt::Debug for SimWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimWorld")
            .field("now", &self.sim.now())
            .field("tick", &self.tick)
            .field("ctl", &self.ctl)
            .finish()
    }
}

impl SimWorld {
    /// `ctl` on `sim`, one pass per `tick`, with simulated workers that watch the cloud's
    /// instance metadata for notices (as `tern agent` does).
    pub fn new(sim: Arc<SimCloud>, ctl: Controller, tick: Duration) -> SimWorld {
        SimWorld {
            workers: Some(Workload::watching(sim.clone())),
            sim,
            ctl,
            tick,
        }
    }

    /// Other workers (a job's true speed, agents that do not watch), or none.
    pub fn with_workers(mut self, workers: Option<Workload>) -> SimWorld {
        self.workers = workers;
        self
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.sim.now()
    }

    /// One round: a pass now; then, unless `stop` says so after it (told the pass's time), a
    /// tick of the clock and of the workers. Whether it stopped.
    pub async fn round(
        &mut self,
        stop: impl FnOnce(&Controller, DateTime<Utc>) -> bool,
    ) -> Result<bool, ControllerError> {
        let now = self.sim.now();
        self.ctl.pass(now).await?;
        if stop(&self.ctl, now) {
            return Ok(true);
        }
        self.sim.advance(self.tick);
        if let Some(w) = self.workers.as_mut() {
            w.step(&mut self.ctl, self.tick, self.sim.now())?;
        }
        Ok(false)
    }

    /// Rounds until `stop` holds after a pass, at most `limit` of them; how many ran.
    pub async fn run(
        &mut self,
        limit: usize,
        mut stop: impl FnMut(&Controller, DateTime<Utc>) -> bool,
    ) -> Result<usize, ControllerError> {
        for k in 0..limit {
            if self.round(&mut stop).await? {
                return Ok(k + 1);
            }
        }
        Ok(limit)
    }

    /// Whether every job has ended and nothing runs (a `stop` for [`Self::run`]).
    pub fn settled(ctl: &Controller, _: DateTime<Utc>) -> bool {
        ctl.jobs().all(|j| j.state.is_final()) && ctl.instances().next().is_none()
    }
}
