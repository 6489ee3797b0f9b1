//! Every AWS error code tern reacts to, mapped onto [`ProviderError`] in this one place.
//!
//! Both kinds of failure land here: whole-call errors from the SDK (`SdkError`) and the
//! per-override entries CreateFleet reports in its `Errors` list, which carry only a code and
//! a message.

use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use tern_cloud::ProviderError;

/// No capacity for this instance type in this zone now; another offer may have some.
const CAPACITY: &[&str] = &[
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "UnfulfillableCapacity",
    "SpotMaxPriceTooLow",
];

/// Account limits: retrying does not help until usage or the quota changes.
const QUOTA: &[&str] = &[
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "InstanceLimitExceeded",
    "MaxSpotFleetRequestCountExceeded",
    "MaxFleetCountExceeded",
    "ResourceLimitExceeded",
];

const THROTTLED: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "SlowDown",
];

const NOT_FOUND: &[&str] = &[
    "InvalidInstanceID.NotFound",
    "InvalidFleetId.NotFound",
    "AWS.SimpleQueueService.NonExistentQueue",
    "QueueDoesNotExist",
];

const UNAUTHORIZED: &[&str] = &[
    "UnauthorizedOperation",
    "AuthFailure",
    "AccessDenied",
    "AccessDeniedException",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "RequestExpired",
    "OptInRequired",
];

const TRANSIENT: &[&str] = &[
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
    "ServerInternal",
    "ServiceException",
];

/// Classify one AWS error code. `offer` names the offer (by [`tern_cloud::Offer::key`]) the
/// error belongs to, when there is one; capacity errors carry it.
pub fn classify(code: &str, message: &str, offer: Option<&str>) -> ProviderError {
    let has = |list: &[&str]| list.contains(&code);
    if has(CAPACITY) {
        ProviderError::Capacity {
            offer: offer.unwrap_or("unknown").to_owned(),
            code: code.to_owned(),
            message: message.to_owned(),
        }
    } else if has(QUOTA) {
        ProviderError::Quota {
            code: code.to_owned(),
            message: message.to_owned(),
        }
    } else if has(THROTTLED) {
        ProviderError::Throttled { retry_after: None }
    } else if has(NOT_FOUND) {
        ProviderError::NotFound {
            id: id_in(message).unwrap_or_else(|| message.to_owned()),
        }
    } else if has(UNAUTHORIZED) {
        ProviderError::Unauthorized {
            message: format!("{code}: {message}"),
        }
    } else if has(TRANSIENT) {
        ProviderError::Transient {
            message: format!("{code}: {message}"),
        }
    } else {
        // Unknown codes are treated as the request's fault: not retrying an unknown failure
        // is safer than hammering the API with it.
        ProviderError::InvalidRequest {
            message: format!("{code}: {message}"),
        }
    }
}

/// The first `i-…` instance id mentioned in an AWS message, e.g. "The instance ID
/// 'i-0abc' does not exist".
fn id_in(message: &str) -> Option<String> {
    message
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|w| w.starts_with("i-") && w.len() > 2)
        .map(str::to_owned)
}

/// Classify a whole-call SDK failure (after the SDK's own retries gave up).
pub fn from_sdk<E, R>(err: SdkError<E, R>) -> ProviderError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match &err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            let code = e.code().unwrap_or("Unknown");
            let message = e.message().unwrap_or_default();
            classify(code, message, None)
        }
        SdkError::ConstructionFailure(_) => ProviderError::InvalidRequest {
            message: describe(&err),
        },
        // Timeouts, connection failures and unparseable responses may pass.
        _ => ProviderError::Transient {
            message: describe(&err),
        },
    }
}

/// The error with its sources, which the SDK's `Display` leaves out.
fn describe(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The SDK error's code, if the service sent one. Used where one code means success (an
/// instance that is already gone).
pub fn code_of<E, R>(err: &SdkError<E, R>) -> Option<&str>
where
    E: ProvideErrorMetadata,
{
    match err {
        SdkError::ServiceError(service) => service.err().code(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_the_issue_names_map_as_documented() {
        let offer = Some("aws/use1-az4/p3.2xlarge/spot");
        let e = classify("InsufficientInstanceCapacity", "none left", offer);
        assert!(e.is_capacity());
        assert!(
            matches!(e, ProviderError::Capacity { ref offer, .. } if offer == "aws/use1-az4/p3.2xlarge/spot")
        );
        assert!(classify("UnfulfillableCapacity", "", offer).is_capacity());
        assert!(classify("MaxSpotInstanceCountExceeded", "", offer).is_quota());
        assert!(classify("VcpuLimitExceeded", "", None).is_quota());
        let t = classify("RequestLimitExceeded", "Request limit exceeded.", None);
        assert!(t.is_throttled() && t.is_retryable());
        let nf = classify(
            "InvalidInstanceID.NotFound",
            "The instance ID 'i-0123456789abcdef0' does not exist",
            None,
        );
        assert_eq!(
            nf,
            ProviderError::NotFound {
                id: "i-0123456789abcdef0".into()
            }
        );
    }

    #[test]
    fn unknown_codes_are_not_retried_and_server_faults_are() {
        let e = classify(
            "InvalidLaunchTemplateName.NotFoundException",
            "no such",
            None,
        );
        assert_eq!(e.kind(), "invalid_request");
        assert!(!e.is_retryable());
        assert!(classify("InternalError", "", None).is_retryable());
        assert_eq!(
            classify("UnauthorizedOperation", "", None).kind(),
            "unauthorized"
        );
    }
}
