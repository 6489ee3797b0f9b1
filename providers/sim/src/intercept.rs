//! One scriptable [`Provider`] in front of another: tests and chaos drills decide, per call,
//! whether it reaches the cloud, fails before it, or goes through with its answer lost (a
//! process killed between the cloud acting and the store write), and may rewrite what the
//! cloud says of instances. It can also pose as another cloud (whose notice lead the
//! controller then assumes).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use tern_cloud::{
    Cloud, CloudQuota, Instance, InstanceId, Interruption, LaunchOutcome, LaunchRequest, Offer,
    Provider, ProviderError, Region,
};

/// A call about to be made, as the hook sees it.
#[derive(Debug, Clone, Copy)]
pub enum Asked<'a> {
    Offers(&'a Region),
    Launch(&'a LaunchRequest),
    Terminate(&'a InstanceId),
    List(&'a str),
    Interruptions,
}

/// What the hook says of a call.
#[derive(Debug)]
pub enum Verdict {
    /// Made as asked.
    Forward,
    /// Failed with this error before it reaches the cloud.
    Refuse(ProviderError),
    /// Made, and then answered with this error: the cloud acted but the caller never knows.
    Lose(ProviderError),
}

type Hook = dyn Fn(Asked<'_>) -> Verdict + Send + Sync;
type Rewrite = dyn Fn(&mut Instance) + Send + Sync;

/// The intercepting provider (see the module docs).
pub struct Intercepted {
    inner: Arc<dyn Provider>,
    cloud: Option<Cloud>,
    hook: Box<Hook>,
    rewrite: Option<Box<Rewrite>>,
}

impl fmt::Debug for Intercepted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Intercepted")
            .field("cloud", &self.cloud())
            .finish_non_exhaustive()
    }
}

impl Intercepted {
    /// Forwards every call until told otherwise.
    pub fn new(inner: Arc<dyn Provider>) -> Intercepted {
        Intercepted {
            inner,
            cloud: None,
            hook: Box::new(|_| Verdict::Forward),
            rewrite: None,
        }
    }

    /// Present the inner provider as `cloud`.
    pub fn posing_as(mut self, cloud: Cloud) -> Intercepted {
        self.cloud = Some(cloud);
        self
    }

    /// Decide each call with `hook`.
    pub fn on_call(mut self, hook: impl Fn(Asked<'_>) -> Verdict + Send + Sync + 'static) -> Self {
        self.hook = Box::new(hook);
        self
    }

    /// Rewrite every instance a launch or a list returns.
    pub fn rewriting(mut self, rewrite: impl Fn(&mut Instance) + Send + Sync + 'static) -> Self {
        self.rewrite = Some(Box::new(rewrite));
        self
    }

    /// Run `call` as the hook says of `asked`.
    async fn through<T>(
        &self,
        asked: Asked<'_>,
        call: impl std::future::Future<Output = Result<T, ProviderError>>,
    ) -> Result<T, ProviderError> {
        match (self.hook)(asked) {
            Verdict::Forward => call.await,
            Verdict::Refuse(e) => Err(e),
            Verdict::Lose(e) => {
                let _ = call.await;
                Err(e)
            }
        }
    }

    fn rewritten(&self, mut instances: Vec<Instance>) -> Vec<Instance> {
        if let Some(rewrite) = &self.rewrite {
            instances.iter_mut().for_each(rewrite);
        }
        instances
    }
}

#[async_trait]
impl Provider for Intercepted {
    fn cloud(&self) -> Cloud {
        self.cloud.unwrap_or_else(|| self.inner.cloud())
    }

    async fn offers(&self, region: &Region) -> Result<Vec<Offer>, ProviderError> {
        self.through(Asked::Offers(region), self.inner.offers(region))
            .await
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        let mut out = self
            .through(Asked::Launch(request), self.inner.launch(request))
            .await?;
        out.instances = self.rewritten(out.instances);
        Ok(out)
    }

    async fn terminate(&self, id: &InstanceId) -> Result<(), ProviderError> {
        self.through(Asked::Terminate(id), self.inner.terminate(id))
            .await
    }

    async fn list(&self, owner: &str) -> Result<Vec<Instance>, ProviderError> {
        let listed = self
            .through(Asked::List(owner), self.inner.list(owner))
            .await?;
        Ok(self.rewritten(listed))
    }

    async fn interruptions(&self) -> Result<Vec<Interruption>, ProviderError> {
        self.through(Asked::Interruptions, self.inner.interruptions())
            .await
    }

    /// Straight through, past the hook: a quota read changes nothing in the cloud, and no
    /// drill scripts one yet.
    async fn quotas(&self, region: &Region) -> Result<Vec<CloudQuota>, ProviderError> {
        self.inner.quotas(region).await
    }
}
