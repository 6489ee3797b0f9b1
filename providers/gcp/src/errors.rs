//! Every GCP error tern reacts to, mapped onto [`ProviderError`] in this one place.
//!
//! Two kinds arrive: whole-call errors (an HTTP status with a Google error body, whose legacy
//! `errors[].reason` the client turns into `ErrorInfo.reason`), and errors inside an operation
//! that ended DONE. The client's `until_done()` returns the second kind as `Ok`, so
//! [`from_operation`] must be called on every finished operation.

use google_cloud_compute_v1::model::Operation;
use google_cloud_gax::error::Error as GaxError;
use google_cloud_gax::error::rpc::StatusDetails;
use tern_cloud::ProviderError;

/// No capacity for this machine type (or its GPUs) in this zone now; another offer may have
/// some.
const CAPACITY: &[&str] = &[
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "REGION_RESOURCE_POOL_EXHAUSTED",
    "RESOURCE_POOL_EXHAUSTED",
    "STOCKOUT",
    "resourcePoolExhausted",
];

/// Project or region limits (`QUOTA_EXCEEDED` names the metric, e.g. `NVIDIA_A100_GPUS`).
const QUOTA: &[&str] = &["QUOTA_EXCEEDED", "quotaExceeded", "QUOTA_LIMIT_EXCEEDED"];

const THROTTLED: &[&str] = &[
    "rateLimitExceeded",
    "userRateLimitExceeded",
    "RATE_LIMIT_EXCEEDED",
];

const NOT_FOUND: &[&str] = &["notFound", "RESOURCE_NOT_FOUND", "NOT_FOUND"];

const ALREADY_EXISTS: &[&str] = &["alreadyExists", "RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"];

const UNAUTHORIZED: &[&str] = &[
    "forbidden",
    "insufficientPermissions",
    "PERMISSION_DENIED",
    "authError",
    "accessNotConfigured",
    "SERVICE_DISABLED",
];

const TRANSIENT: &[&str] = &["backendError", "internalError", "INTERNAL", "UNAVAILABLE"];

/// Classify one GCP error code (an operation's `errors[].code` or a call's `reason`), with the
/// HTTP status when there is one. `offer` names the offer a capacity error belongs to.
pub fn classify(
    code: &str,
    http: Option<u16>,
    message: &str,
    offer: Option<&str>,
) -> ProviderError {
    let has = |list: &[&str]| list.contains(&code);
    // Cloud TPU reports both stockouts and quota as RESOURCE_EXHAUSTED; the message tells.
    if code == "RESOURCE_EXHAUSTED" {
        return if message.to_ascii_lowercase().contains("quota") {
            ProviderError::Quota {
                code: code.to_owned(),
                message: message.to_owned(),
            }
        } else {
            ProviderError::Capacity {
                offer: offer.unwrap_or("unknown").to_owned(),
                code: code.to_owned(),
                message: message.to_owned(),
            }
        };
    }
    if has(CAPACITY) || code.starts_with("ZONE_RESOURCE_POOL_EXHAUSTED") {
        ProviderError::Capacity {
            offer: offer.unwrap_or("unknown").to_owned(),
            code: code.to_owned(),
            message: message.to_owned(),
        }
    } else if has(QUOTA) {
        ProviderError::Quota {
            code: quota_metric(message).map_or_else(|| code.to_owned(), |m| format!("{code}:{m}")),
            message: message.to_owned(),
        }
    } else if has(THROTTLED) || http == Some(429) {
        ProviderError::Throttled { retry_after: None }
    } else if has(NOT_FOUND) || http == Some(404) {
        ProviderError::NotFound {
            id: message.to_owned(),
        }
    } else if has(UNAUTHORIZED) || matches!(http, Some(401 | 403)) {
        ProviderError::Unauthorized {
            message: format!("{code}: {message}"),
        }
    } else if has(TRANSIENT) || http.is_some_and(|s| s >= 500) {
        ProviderError::Transient {
            message: format!("{code}: {message}"),
        }
    } else {
        ProviderError::InvalidRequest {
            message: format!("{code}: {message}"),
        }
    }
}

/// The metric a `QUOTA_EXCEEDED` message names: `Quota 'NVIDIA_A100_GPUS' exceeded. …`.
fn quota_metric(message: &str) -> Option<&str> {
    let rest = message.split_once("Quota '")?.1;
    Some(rest.split_once('\'')?.0)
}

/// The reason of a call's error (`ErrorInfo.reason`, from the body's `errors[].reason`).
fn reason(e: &GaxError) -> Option<String> {
    e.status()?.details.iter().find_map(|d| match d {
        StatusDetails::ErrorInfo(info) if !info.reason.is_empty() => Some(info.reason.clone()),
        _ => None,
    })
}

/// Whether a call failed because the resource exists already (an instance name taken).
pub fn is_already_exists(e: &GaxError) -> bool {
    e.http_status_code() == Some(409)
        || reason(e).is_some_and(|r| ALREADY_EXISTS.contains(&r.as_str()))
}

/// A whole-call failure.
pub fn from_call(e: &GaxError, offer: Option<&str>) -> ProviderError {
    if e.is_timeout() || e.is_io() || e.is_connect() || e.is_transport() || e.is_exhausted() {
        return ProviderError::Transient {
            message: e.to_string(),
        };
    }
    if e.is_authentication() {
        return ProviderError::Unauthorized {
            message: e.to_string(),
        };
    }
    let http = e.http_status_code();
    let message = e
        .status()
        .map_or_else(|| e.to_string(), |s| s.message.clone());
    let code = reason(e)
        .or_else(|| e.status().map(|s| s.code.name().to_owned()))
        .unwrap_or_default();
    classify(&code, http, &message, offer)
}

/// The error inside a finished operation, if any (the first one: GCE lists the cause first).
pub fn from_operation(op: &Operation, offer: Option<&str>) -> Option<ProviderError> {
    let first = op.error.as_ref()?.errors.first()?;
    let code = first.code.clone().unwrap_or_default();
    let mut message = first.message.clone().unwrap_or_default();
    let metric = first
        .error_details
        .iter()
        .find_map(|d| d.quota_info.as_ref()?.metric_name.clone());
    if let Some(m) = metric
        && quota_metric(&message).is_none()
    {
        message = format!("Quota '{m}' exceeded. {message}");
    }
    let http = op
        .http_error_status_code
        .and_then(|s| u16::try_from(s).ok());
    Some(classify(&code, http, &message, offer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_kinds() {
        let e = classify(
            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
            Some(503),
            "no a2",
            Some("gcp/x"),
        );
        assert!(e.is_capacity(), "{e:?}");
        let q = classify(
            "QUOTA_EXCEEDED",
            Some(403),
            "Quota 'NVIDIA_A100_GPUS' exceeded. Limit: 0.0 in region us-central1.",
            None,
        );
        assert!(q.is_quota());
        assert!(q.to_string().contains("NVIDIA_A100_GPUS"), "{q}");
        assert!(classify("rateLimitExceeded", Some(403), "slow", None).is_throttled());
        assert!(classify("", Some(429), "", None).is_throttled());
        assert!(classify("notFound", Some(404), "gone", None).is_not_found());
        assert!(matches!(
            classify("forbidden", Some(403), "no", None),
            ProviderError::Unauthorized { .. }
        ));
        assert!(classify("backendError", Some(503), "", None).is_retryable());
        assert!(
            classify(
                "RESOURCE_EXHAUSTED",
                Some(429),
                "There is no more capacity in the zone",
                None
            )
            .is_capacity()
        );
        assert!(
            classify(
                "RESOURCE_EXHAUSTED",
                Some(429),
                "Quota limit 'TPUV5sPodPerProjectPerZoneForTPUAPI' has been exceeded",
                None
            )
            .is_quota()
        );
        assert!(matches!(
            classify("invalid", Some(400), "bad", None),
            ProviderError::InvalidRequest { .. }
        ));
    }
}
