//! A slow cloud: any [`Provider`] with a fixed delay added to every call, so benchmarks and
//! tests can show what the controller does while cloud calls take real time (a cold AWS
//! CreateFleet or a GCE operation poll takes hundreds of milliseconds).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tern_cloud::{
    Cloud, CloudQuota, Instance, InstanceId, Interruption, LaunchOutcome, LaunchRequest, Offer,
    Provider, ProviderError, Region,
};

/// Wraps a provider; every call first sleeps for the current delay (adjustable while running,
/// so a benchmark can set a fleet up fast and then measure with a slow cloud).
#[derive(Clone)]
pub struct Delayed {
    inner: Arc<dyn Provider>,
    delay_us: Arc<AtomicU64>,
}

impl std::fmt::Debug for Delayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delayed")
            .field("delay", &self.delay())
            .finish_non_exhaustive()
    }
}

impl Delayed {
    pub fn new(inner: Arc<dyn Provider>, delay: Duration) -> Delayed {
        let d = Delayed {
            inner,
            delay_us: Arc::new(AtomicU64::new(0)),
        };
        d.set_delay(delay);
        d
    }

    pub fn set_delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.delay_us.store(us, Ordering::Relaxed);
    }

    pub fn delay(&self) -> Duration {
        Duration::from_micros(self.delay_us.load(Ordering::Relaxed))
    }

    async fn wait(&self) {
        let d = self.delay();
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
    }
}

#[async_trait]
impl Provider for Delayed {
    fn cloud(&self) -> Cloud {
        self.inner.cloud()
    }

    async fn offers(&self, region: &Region) -> Result<Vec<Offer>, ProviderError> {
        self.wait().await;
        self.inner.offers(region).await
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        self.wait().await;
        self.inner.launch(request).await
    }

    async fn terminate(&self, id: &InstanceId) -> Result<(), ProviderError> {
        self.wait().await;
        self.inner.terminate(id).await
    }

    async fn list(&self, owner: &str) -> Result<Vec<Instance>, ProviderError> {
        self.wait().await;
        self.inner.list(owner).await
    }

    async fn interruptions(&self) -> Result<Vec<Interruption>, ProviderError> {
        self.wait().await;
        self.inner.interruptions().await
    }

    async fn quotas(&self, region: &Region) -> Result<Vec<CloudQuota>, ProviderError> {
        self.wait().await;
        self.inner.quotas(region).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SimCloud, cloud::SimConfig};

    #[tokio::test(start_paused = true)]
    async fn every_call_waits_for_the_delay() {
        let sim = Arc::new(SimCloud::new(Vec::new(), SimConfig::default()));
        let slow = Delayed::new(sim, Duration::from_millis(200));
        let t0 = tokio::time::Instant::now();
        slow.list("tern").await.expect("list");
        slow.interruptions().await.expect("notices");
        assert_eq!(t0.elapsed(), Duration::from_millis(400));
        slow.set_delay(Duration::ZERO);
        let t1 = tokio::time::Instant::now();
        slow.list("tern").await.expect("list");
        assert_eq!(t1.elapsed(), Duration::ZERO);
    }
}
