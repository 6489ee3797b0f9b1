//! The scaffolding of the controller's scenario tests, in one place: a simulated cloud on a
//! fixed start, a store, a controller whose config a test adjusts, its jobs, and the
//! [`SimWorld`] that drives them. A test says what differs (traces, limits, a hook in front of
//! the cloud, workers), not how a controller is put together.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use tern_cloud::{JobSpec, Provider, Region};
use tern_sim::cloud::SimConfig;
use tern_sim::{SimCloud, Trace};

use super::world::SimWorld;
use super::{Controller, ControllerConfig};
use crate::store::Store;

/// When every scenario's simulated cloud starts.
pub(super) fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0)
        .single()
        .expect("time")
}

/// A simulated cloud of `zones` from [`start`], booting instances in a minute.
pub(super) fn sim(zones: Vec<Trace>) -> Arc<SimCloud> {
    Arc::new(SimCloud::new(
        zones,
        SimConfig {
            start: start(),
            boot: Duration::from_secs(60),
            ..SimConfig::default()
        },
    ))
}

/// A controller to be opened on a simulated cloud: see the module docs.
pub(super) struct Scenario {
    sim: Arc<SimCloud>,
    /// What the controller calls, when not the simulated cloud itself (a hook in front of it).
    provider: Option<Arc<dyn Provider>>,
    store: Arc<Store>,
    config: ControllerConfig,
    jobs: Vec<JobSpec>,
}

impl Scenario {
    /// A controller with owner tag `owner` in us-west-2 on `sim`, with an empty in-memory store.
    pub(super) fn on(sim: &Arc<SimCloud>, owner: &str) -> Scenario {
        Scenario {
            sim: sim.clone(),
            provider: None,
            store: Arc::new(Store::in_memory().expect("store")),
            config: ControllerConfig::new(owner, vec![Region::new("us-west-2")]),
            jobs: Vec::new(),
        }
    }

    pub(super) fn config(mut self, adjust: impl FnOnce(&mut ControllerConfig)) -> Scenario {
        adjust(&mut self.config);
        self
    }

    /// This config in place of the default one.
    pub(super) fn configured(mut self, config: ControllerConfig) -> Scenario {
        self.config = config;
        self
    }

    /// The store the controller will open (for a hook that reads it, before it opens).
    pub(super) fn the_store(&self) -> Arc<Store> {
        self.store.clone()
    }

    /// Open on this store (a restart, or a store the test reads too).
    pub(super) fn store(mut self, store: Arc<Store>) -> Scenario {
        self.store = store;
        self
    }

    /// Call this provider (a hook wrapping the simulated cloud) instead of the cloud itself.
    pub(super) fn provider(mut self, provider: Arc<dyn Provider>) -> Scenario {
        self.provider = Some(provider);
        self
    }

    /// Submit these jobs, in order, at the cloud's time when the controller opens.
    pub(super) fn jobs(mut self, specs: impl IntoIterator<Item = JobSpec>) -> Scenario {
        self.jobs.extend(specs);
        self
    }

    /// The controller, opened with the jobs submitted, and its store.
    pub(super) fn controller(self) -> (Arc<Store>, Controller) {
        let provider = self.provider.unwrap_or_else(|| self.sim.clone());
        let mut ctl = Controller::open(self.store.clone(), provider, self.config).expect("open");
        for j in self.jobs {
            ctl.submit(j, self.sim.now()).expect("submit");
        }
        (self.store, ctl)
    }

    /// The controller in a [`SimWorld`] with a pass every `tick` and workers that watch the
    /// cloud's notices (replace them with [`SimWorld::with_workers`]).
    pub(super) fn world(self, tick: Duration) -> SimWorld {
        let sim = self.sim.clone();
        let (_, ctl) = self.controller();
        SimWorld::new(sim, ctl, tick)
    }
}
