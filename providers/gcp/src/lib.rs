//! tern's GCP provider: Compute Engine GPU VMs through google-cloud-rust (`instances.insert`,
//! `bulkInsert` for gangs, spot scheduling), offers from the zones' machine and accelerator
//! types priced by the Cloud Billing Catalog (the bundled catalog when it is unreachable), and
//! spot preemptions read from `zoneOperations`.
//!
//! The only crate that imports google-cloud-rust. Everything it does goes through
//! [`tern_cloud::Provider`]; its error codes are mapped in [`errors`], its label syntax in
//! [`labels`], and the IAM permissions it needs are listed in [`permissions`].

/// Builds one google-cloud-rust client with the config's credentials and polling backoff, at
/// `endpoint` when set (a fake).
macro_rules! client {
    ($ty:ty, $config:expr, $endpoint:expr) => {{
        let config: &$crate::GcpConfig = $config;
        let endpoint: &Option<String> = $endpoint;
        let mut builder = <$ty>::builder();
        if let Some(url) = endpoint {
            builder = builder.with_endpoint(url.clone());
        }
        if config.anonymous {
            builder = builder.with_credentials(
                ::google_cloud_auth::credentials::anonymous::Builder::new().build(),
            );
        }
        let backoff = google_cloud_gax::exponential_backoff::ExponentialBackoffBuilder::new()
            .with_initial_delay(config.poll_interval)
            .with_maximum_delay(std::time::Duration::from_secs(10).max(config.poll_interval))
            .build()
            .map_err(|e| $crate::compute::invalid(format!("polling backoff: {e}")))?;
        // Idempotent calls (gets, lists, polls) are retried on transient errors a few times,
        // quickly; a longer outage is the reconcile loop's to ride out, not one call's.
        let retry = {
            use google_cloud_gax::retry_policy::RetryPolicyExt;
            google_cloud_gax::retry_policy::Aip194Strict
                .with_attempt_limit(3)
                .with_time_limit(std::time::Duration::from_secs(20))
        };
        let retry_backoff = google_cloud_gax::exponential_backoff::ExponentialBackoffBuilder::new()
            .with_initial_delay(config.poll_interval.min(std::time::Duration::from_secs(1)))
            .with_maximum_delay(std::time::Duration::from_secs(5))
            .build()
            .map_err(|e| $crate::compute::invalid(format!("retry backoff: {e}")))?;
        builder
            .with_retry_policy(retry)
            .with_backoff_policy(retry_backoff)
            .with_polling_backoff_policy(backoff)
            .build()
            .await
            .map_err(|e| tern_cloud::ProviderError::Unauthorized {
                message: format!("building a Google Cloud client: {e}"),
            })?
    }};
}

/// Every item of a paged list call: `$call` is the request builder without its page token,
/// `$items` the response's item field. Compute's `nextPageToken` is optional, TPU's and
/// Billing's a plain string; both end the loop when empty.
macro_rules! every_page {
    ($call:expr, $items:ident) => {{
        let mut out = Vec::new();
        let mut token = String::new();
        loop {
            let page = $call.set_page_token(&token).send().await?;
            out.extend(page.$items);
            let next: Option<String> = page.next_page_token.into();
            match next {
                Some(t) if !t.is_empty() => token = t,
                _ => break,
            }
        }
        out
    }};
}

pub mod billing;
mod compute;
mod config;
pub mod errors;
pub mod labels;
mod offers;
pub mod permissions;
mod provider;
mod quotas;
mod tpu;

#[cfg(feature = "fake")]
pub mod fake;

pub use config::GcpConfig;
pub use provider::GcpProvider;
