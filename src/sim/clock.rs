//! The simulated cloud's virtual time as the controller's [`Clock`]: in this process (wall time
//! × speed from the cloud's start, advancing the cloud as it is read), or in a `tern sim serve`
//! process (asked over HTTP, the last answer kept for API handlers).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use tern_cloud::ProviderError;
use tern_sim::SimCloud;

use super::RemoteSim;
use crate::controller::service::Clock;

/// A [`SimCloud`] in this process, its clock running `speed` times faster than wall time.
#[derive(Debug, Clone)]
pub struct LocalSimClock {
    sim: Arc<SimCloud>,
    start: DateTime<Utc>,
    wall0: Instant,
    speed: f64,
}

impl LocalSimClock {
    pub fn new(sim: Arc<SimCloud>, speed: f64) -> LocalSimClock {
        LocalSimClock {
            start: sim.now(),
            sim,
            wall0: Instant::now(),
            speed,
        }
    }
}

#[async_trait]
impl Clock for LocalSimClock {
    /// Also moves the simulated cloud up to now.
    async fn read(&self) -> Result<DateTime<Utc>, ProviderError> {
        let now = self.last();
        if let Ok(d) = (now - self.sim.now()).to_std() {
            self.sim.advance(d);
        }
        Ok(now)
    }

    fn last(&self) -> DateTime<Utc> {
        self.start
            + TimeDelta::milliseconds(
                (self.wall0.elapsed().as_secs_f64() * self.speed * 1000.0) as i64,
            )
    }
}

/// The clock of a `tern sim serve` process.
#[derive(Debug, Clone)]
pub struct RemoteSimClock {
    remote: RemoteSim,
    last: Arc<Mutex<DateTime<Utc>>>,
}

impl RemoteSimClock {
    /// Reads the remote clock once, so [`Clock::last`] has a value from the start.
    pub async fn new(remote: RemoteSim) -> Result<RemoteSimClock, ProviderError> {
        let now = remote.now().await?;
        Ok(RemoteSimClock {
            remote,
            last: Arc::new(Mutex::new(now)),
        })
    }
}

#[async_trait]
impl Clock for RemoteSimClock {
    async fn read(&self) -> Result<DateTime<Utc>, ProviderError> {
        let now = self.remote.now().await?;
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = now;
        Ok(now)
    }

    fn last(&self) -> DateTime<Utc> {
        *self.last.lock().unwrap_or_else(|e| e.into_inner())
    }
}
