//! The simulated cloud in another process (`tern sim serve`), as a [`Provider`]: each call is
//! one HTTP request; transport failures are `Transient` (retryable) errors, so a sim restart
//! or a slow request slows the controller down without losing anything.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tern_cloud::{
    Cloud, Instance, InstanceId, Interruption, LaunchOutcome, LaunchRequest, Offer, Provider,
    ProviderError, Region,
};

use crate::api::client::request;

/// A provider answer on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Wire<T> {
    Ok(T),
    Err(WireError),
}

/// A [`ProviderError`] on the wire: its kind and message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireError {
    pub kind: String,
    pub message: String,
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
}

impl From<&ProviderError> for WireError {
    fn from(e: &ProviderError) -> Self {
        let retry_after_ms = match e {
            ProviderError::Throttled { retry_after } => retry_after.map(|d| d.as_millis() as u64),
            _ => None,
        };
        WireError {
            kind: e.kind().to_string(),
            message: e.to_string(),
            retry_after_ms,
        }
    }
}

impl From<WireError> for ProviderError {
    fn from(w: WireError) -> Self {
        match w.kind.as_str() {
            "capacity" => ProviderError::Capacity {
                offer: String::new(),
                code: "capacity".into(),
                message: w.message,
            },
            "quota" => ProviderError::Quota {
                code: "quota".into(),
                message: w.message,
            },
            "throttled" => ProviderError::Throttled {
                retry_after: w.retry_after_ms.map(Duration::from_millis),
            },
            "not_found" => ProviderError::NotFound { id: w.message },
            "unauthorized" => ProviderError::Unauthorized { message: w.message },
            "invalid_request" => ProviderError::InvalidRequest { message: w.message },
            _ => ProviderError::Transient { message: w.message },
        }
    }
}

/// [`LaunchOutcome`] on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireOutcome {
    pub instances: Vec<Instance>,
    pub errors: Vec<(String, WireError)>,
}

impl From<&LaunchOutcome> for WireOutcome {
    fn from(o: &LaunchOutcome) -> Self {
        WireOutcome {
            instances: o.instances.clone(),
            errors: o
                .errors
                .iter()
                .map(|(k, e)| (k.clone(), WireError::from(e)))
                .collect(),
        }
    }
}

/// The provider API of a `tern sim serve` process.
#[derive(Debug, Clone)]
pub struct RemoteSim {
    endpoint: String,
}

fn transient(e: impl std::fmt::Display) -> ProviderError {
    ProviderError::Transient {
        message: e.to_string(),
    }
}

impl RemoteSim {
    pub fn new(endpoint: impl Into<String>) -> RemoteSim {
        RemoteSim {
            endpoint: endpoint.into(),
        }
    }

    async fn call<T: DeserializeOwned + Send + 'static>(
        &self,
        method: &'static str,
        path: &'static str,
        body: String,
    ) -> Result<T, ProviderError> {
        let endpoint = self.endpoint.clone();
        let reply = tokio::task::spawn_blocking(move || {
            request(&endpoint, None, method, path, "application/json", &body)
        })
        .await
        .map_err(transient)?
        .map_err(transient)?;
        if reply.status != 200 {
            return Err(transient(format!(
                "sim answered {}: {}",
                reply.status, reply.body
            )));
        }
        serde_json::from_str(&reply.body).map_err(transient)
    }

    async fn provider<T: DeserializeOwned + Send + 'static>(
        &self,
        path: &'static str,
        body: serde_json::Value,
    ) -> Result<T, ProviderError> {
        match self.call::<Wire<T>>("POST", path, body.to_string()).await? {
            Wire::Ok(v) => Ok(v),
            Wire::Err(e) => Err(e.into()),
        }
    }

    /// The simulated cloud's virtual clock.
    pub async fn now(&self) -> Result<DateTime<Utc>, ProviderError> {
        self.call("GET", "/now", String::new()).await
    }

    /// Regions the simulated cloud has zones in.
    pub async fn regions(&self) -> Result<Vec<Region>, ProviderError> {
        self.call("GET", "/regions", String::new()).await
    }
}

#[async_trait]
impl Provider for RemoteSim {
    fn cloud(&self) -> Cloud {
        Cloud::Sim
    }

    async fn offers(&self, region: &Region) -> Result<Vec<Offer>, ProviderError> {
        self.provider("/provider/offers", serde_json::json!({ "region": region }))
            .await
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        let body = serde_json::to_value(request).map_err(transient)?;
        let out: WireOutcome = self.provider("/provider/launch", body).await?;
        Ok(LaunchOutcome {
            instances: out.instances,
            errors: out
                .errors
                .into_iter()
                .map(|(k, e)| {
                    let mut err = ProviderError::from(e);
                    if let ProviderError::Capacity { offer, .. } = &mut err {
                        offer.clone_from(&k);
                    }
                    (k, err)
                })
                .collect(),
        })
    }

    async fn terminate(&self, id: &InstanceId) -> Result<(), ProviderError> {
        self.provider("/provider/terminate", serde_json::json!({ "id": id }))
            .await
    }

    async fn get(&self, id: &InstanceId) -> Result<Option<Instance>, ProviderError> {
        self.provider("/provider/get", serde_json::json!({ "id": id }))
            .await
    }

    async fn list(&self, owner: &str) -> Result<Vec<Instance>, ProviderError> {
        self.provider("/provider/list", serde_json::json!({ "owner": owner }))
            .await
    }

    async fn interruptions(&self) -> Result<Vec<Interruption>, ProviderError> {
        self.provider("/provider/interruptions", serde_json::json!({}))
            .await
    }
}
