//! The simulated cloud's HTTP protocol between `tern sim serve` and [`super::RemoteSim`]:
//! provider answers and errors as JSON.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tern_cloud::{Instance, LaunchOutcome, ProviderError};

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
