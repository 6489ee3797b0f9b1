//! The simulated cloud in another process (`tern sim serve`), as a [`Provider`]: each call is
//! one HTTP request on the process's shared client; transport failures are `Transient`
//! (retryable) errors, so a sim restart or a slow request slows the controller down without
//! losing anything.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use tern_cloud::{
    Cloud, CloudQuota, Instance, InstanceId, Interruption, LaunchOutcome, LaunchRequest, Offer,
    Provider, ProviderError, Region,
};

use super::wire::{Wire, WireOutcome};

/// The provider API of a `tern sim serve` process.
#[derive(Debug, Clone)]
pub struct RemoteSim {
    endpoint: String,
    client: reqwest::Client,
    token: Option<String>,
}

fn transient(e: impl std::fmt::Display) -> ProviderError {
    ProviderError::Transient {
        message: e.to_string(),
    }
}

impl RemoteSim {
    pub fn new(endpoint: impl Into<String>, client: reqwest::Client) -> RemoteSim {
        RemoteSim {
            endpoint: endpoint.into().trim_end_matches('/').to_string(),
            client,
            token: None,
        }
    }

    /// Send `token` as a bearer token (the server's `tern sim serve --token`).
    pub fn with_token(mut self, token: Option<String>) -> RemoteSim {
        self.token = token;
        self
    }

    async fn call<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
        path: &str,
    ) -> Result<T, ProviderError> {
        let url = format!("{}{path}", self.endpoint);
        let failed = |e: reqwest::Error| transient(format!("{url}: {e}"));
        let request = match &self.token {
            Some(t) => request.bearer_auth(t),
            None => request,
        };
        let reply = request.send().await.map_err(failed)?;
        let status = reply.status();
        let body = reply.text().await.map_err(failed)?;
        if !status.is_success() {
            return Err(transient(format!("{url} answered {status}: {body}")));
        }
        serde_json::from_str(&body).map_err(|e| transient(format!("{url}: {e}")))
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ProviderError> {
        let request = self.client.get(format!("{}{path}", self.endpoint));
        self.call(request, path).await
    }

    async fn provider<T: DeserializeOwned>(
        &self,
        path: &str,
        body: serde_json::Value,
    ) -> Result<T, ProviderError> {
        let request = self
            .client
            .post(format!("{}{path}", self.endpoint))
            .json(&body);
        match self.call::<Wire<T>>(request, path).await? {
            Wire::Ok(v) => Ok(v),
            Wire::Err(e) => Err(e.into()),
        }
    }

    /// The simulated cloud's virtual clock.
    pub async fn now(&self) -> Result<DateTime<Utc>, ProviderError> {
        self.get("/now").await
    }

    /// Regions the simulated cloud has zones in.
    pub async fn regions(&self) -> Result<Vec<Region>, ProviderError> {
        self.get("/regions").await
    }

    /// What the simulated cloud holds and has billed for `owner`'s instances.
    pub async fn report(&self, owner: &str) -> Result<super::server::Report, ProviderError> {
        let request = self
            .client
            .get(format!("{}/report", self.endpoint))
            .query(&[("owner", owner)]);
        match self.call::<Wire<_>>(request, "/report").await? {
            Wire::Ok(v) => Ok(v),
            Wire::Err(e) => Err(e.into()),
        }
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

    async fn list(&self, owner: &str) -> Result<Vec<Instance>, ProviderError> {
        self.provider("/provider/list", serde_json::json!({ "owner": owner }))
            .await
    }

    async fn interruptions(&self) -> Result<Vec<Interruption>, ProviderError> {
        self.provider("/provider/interruptions", serde_json::json!({}))
            .await
    }

    async fn quotas(&self, region: &Region) -> Result<Vec<CloudQuota>, ProviderError> {
        self.provider("/provider/quotas", serde_json::json!({ "region": region }))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tern_cloud::{Capacity, Region};
    use tern_sim::cloud::SimConfig;
    use tern_sim::{SimCloud, SimQuota, Trace};

    use super::*;

    /// The quotas `tern sim serve --quota` configures reach a controller across HTTP.
    #[tokio::test]
    async fn quotas_come_through_the_sim_server() {
        let trace = Trace {
            source: "us-east-1a.json".into(),
            cloud: Cloud::Aws,
            region: "us-east-1".into(),
            zone: "us-east-1a".into(),
            gap_seconds: 600,
            available: vec![4; 4],
            prices: None,
            spot_price: Some(0.9),
            on_demand_price: Some(3.06),
        };
        let quota = SimQuota::new("us-east-1", "V100", Some(Capacity::Spot), 2);
        let sim = SimCloud::new(vec![trace], SimConfig::default()).with_quota(quota.clone());
        let router = super::super::server::router(Arc::new(sim), Vec::new(), None);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        let remote = RemoteSim::new(endpoint, crate::http::client().unwrap());
        let read = remote.quotas(&Region::new("us-east-1")).await.unwrap();
        assert_eq!(read, [quota.cloud_quota(Some(0))]);
    }
}
