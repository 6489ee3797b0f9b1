use std::time::Duration;

/// A cloud API failure, classified so callers can decide without knowing the cloud.
///
/// Each provider maps its own error codes onto these variants in one file (e.g. AWS
/// `InsufficientInstanceCapacity` → [`ProviderError::Capacity`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    /// The cloud has no capacity for this offer now (AWS `InsufficientInstanceCapacity`,
    /// GCE `ZONE_RESOURCE_POOL_EXHAUSTED`). Try another offer, remember it for a while.
    #[error("no capacity for {offer}: {code}: {message}")]
    Capacity {
        offer: String,
        code: String,
        message: String,
    },
    /// An account limit (AWS `VcpuLimitExceeded`, `MaxSpotInstanceCountExceeded`, GCE
    /// `QUOTA_EXCEEDED`). Retrying will not help until the quota changes or usage drops.
    #[error("quota exceeded: {code}: {message}")]
    Quota { code: String, message: String },
    /// The API asked us to slow down (AWS `RequestLimitExceeded`, HTTP 429).
    #[error("throttled by the cloud API{}", .retry_after.map(|d| format!(" (retry after {d:?})")).unwrap_or_default())]
    Throttled { retry_after: Option<Duration> },
    /// The instance (or other resource) does not exist. Terminating it counts as done.
    #[error("not found: {id}")]
    NotFound { id: String },
    /// Credentials are missing or not allowed to do this.
    #[error("not authorised: {message}")]
    Unauthorized { message: String },
    /// The request itself is wrong; retrying the same request cannot succeed.
    #[error("invalid request: {message}")]
    InvalidRequest { message: String },
    /// A network or server-side failure (timeouts, 5xx) that may pass.
    #[error("transient cloud API failure: {message}")]
    Transient { message: String },
}

impl ProviderError {
    pub fn is_capacity(&self) -> bool {
        matches!(self, ProviderError::Capacity { .. })
    }

    pub fn is_quota(&self) -> bool {
        matches!(self, ProviderError::Quota { .. })
    }

    pub fn is_throttled(&self) -> bool {
        matches!(self, ProviderError::Throttled { .. })
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, ProviderError::NotFound { .. })
    }

    /// Whether the *same* request may succeed later. Capacity errors are not: the caller should
    /// move to another offer instead of hammering this one.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ProviderError::Throttled { .. } | ProviderError::Transient { .. }
        )
    }

    /// A short label for metrics (`cloud_api_errors_total{kind=...}`).
    pub fn kind(&self) -> &'static str {
        match self {
            ProviderError::Capacity { .. } => "capacity",
            ProviderError::Quota { .. } => "quota",
            ProviderError::Throttled { .. } => "throttled",
            ProviderError::NotFound { .. } => "not_found",
            ProviderError::Unauthorized { .. } => "unauthorized",
            ProviderError::InvalidRequest { .. } => "invalid_request",
            ProviderError::Transient { .. } => "transient",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifiers_are_exclusive_where_they_should_be() {
        let cap = ProviderError::Capacity {
            offer: "aws/use1-az4/p3.2xlarge/spot".into(),
            code: "InsufficientInstanceCapacity".into(),
            message: "none left".into(),
        };
        assert!(cap.is_capacity() && !cap.is_retryable() && !cap.is_quota());
        let thr = ProviderError::Throttled {
            retry_after: Some(Duration::from_secs(2)),
        };
        assert!(thr.is_throttled() && thr.is_retryable());
        assert!(thr.to_string().contains("retry after"));
        let nf = ProviderError::NotFound { id: "i-1".into() };
        assert!(nf.is_not_found() && !nf.is_retryable());
        let q = ProviderError::Quota {
            code: "VcpuLimitExceeded".into(),
            message: String::new(),
        };
        assert!(q.is_quota() && !q.is_capacity() && !q.is_retryable());
        assert_eq!(q.kind(), "quota");
        assert!(
            ProviderError::Transient {
                message: "503".into()
            }
            .is_retryable()
        );
    }
}
