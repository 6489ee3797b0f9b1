//! EventBridge events that warn tern about an instance, as they arrive in the SQS queue.
//!
//! An EventBridge rule delivers the event JSON itself as the SQS message body. Four kinds
//! matter: the spot interruption warning (two minutes' notice), the rebalance
//! recommendation (elevated risk, no deadline), the instance state change (the instance is
//! going or gone) and the AWS Health scheduled change (retirement or maintenance).

use chrono::{DateTime, Duration, Utc};
use serde::Deserialize;
use tern_cloud::{InstanceId, Interruption, InterruptionKind};

/// AWS stops a spot instance two minutes after the warning.
const SPOT_NOTICE: Duration = Duration::minutes(2);

/// Why a message body is not an event tern understands.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EventError {
    #[error("not an EventBridge event: {0}")]
    Json(String),
    #[error("unhandled event type '{0}'")]
    UnknownType(String),
    #[error("event '{0}' names no instance")]
    NoInstance(String),
}

#[derive(Debug, Deserialize)]
struct Envelope {
    #[serde(rename = "detail-type")]
    detail_type: String,
    #[serde(default)]
    source: String,
    time: Option<DateTime<Utc>>,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    detail: serde_json::Value,
}

/// Parse one message body. `Ok(vec![])` means a well-formed event that needs no action (an
/// instance starting up, a health event about something other than instances).
pub fn parse(body: &str, received_at: DateTime<Utc>) -> Result<Vec<Interruption>, EventError> {
    let event: Envelope =
        serde_json::from_str(body).map_err(|e| EventError::Json(e.to_string()))?;
    let sent = event.time.unwrap_or(received_at);
    let one = |kind, deadline| -> Result<Vec<Interruption>, EventError> {
        let id = detail_instance(&event.detail)
            .or_else(|| event.resources.iter().find_map(|r| instance_in_arn(r)))
            .ok_or_else(|| EventError::NoInstance(event.detail_type.clone()))?;
        Ok(vec![Interruption {
            instance: InstanceId(id),
            kind,
            deadline,
            received_at,
        }])
    };
    match event.detail_type.as_str() {
        "EC2 Spot Instance Interruption Warning" => {
            one(InterruptionKind::SpotNotice, Some(sent + SPOT_NOTICE))
        }
        "EC2 Instance Rebalance Recommendation" => one(InterruptionKind::Rebalance, None),
        "EC2 Instance State-change Notification" => {
            let state = event.detail.get("state").and_then(|s| s.as_str());
            match state {
                Some("shutting-down" | "terminated" | "stopping" | "stopped") => {
                    one(InterruptionKind::Preempted, Some(sent))
                }
                // pending, running: nothing is being taken away.
                _ => Ok(Vec::new()),
            }
        }
        "AWS Health Event" if event.source == "aws.health" => Ok(health(&event, received_at)),
        other => Err(EventError::UnknownType(other.to_owned())),
    }
}

/// A scheduled change (instance retirement, system maintenance) for each affected instance.
fn health(event: &Envelope, received_at: DateTime<Utc>) -> Vec<Interruption> {
    let d = &event.detail;
    let category = d.get("eventTypeCategory").and_then(|v| v.as_str());
    let service = d.get("service").and_then(|v| v.as_str());
    if category != Some("scheduledChange") || service.is_some_and(|s| s != "EC2") {
        return Vec::new();
    }
    let deadline = d
        .get("startTime")
        .and_then(|v| v.as_str())
        .and_then(parse_time);
    let mut ids: Vec<String> = d
        .get("affectedEntities")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .filter_map(|e| e.get("entityValue").and_then(|v| v.as_str()))
        .filter(|v| v.starts_with("i-"))
        .map(str::to_owned)
        .collect();
    if ids.is_empty() {
        ids = event
            .resources
            .iter()
            .filter_map(|r| instance_in_arn(r).or_else(|| r.starts_with("i-").then(|| r.clone())))
            .collect();
    }
    ids.dedup();
    ids.into_iter()
        .map(|id| Interruption {
            instance: InstanceId(id),
            kind: InterruptionKind::Maintenance,
            deadline,
            received_at,
        })
        .collect()
}

fn detail_instance(detail: &serde_json::Value) -> Option<String> {
    detail
        .get("instance-id")
        .and_then(|v| v.as_str())
        .map(str::to_owned)
}

/// `arn:aws:ec2:us-east-2a:instance/i-0abc` → `i-0abc`.
fn instance_in_arn(arn: &str) -> Option<String> {
    arn.rsplit_once(":instance/").map(|(_, id)| id.to_owned())
}

/// Health events write times as RFC 2822 ("Wed, 31 Jan 2024 02:00:00 GMT"); accept RFC 3339
/// too.
fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc2822(s)
        .or_else(|_| DateTime::parse_from_rfc3339(s))
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-22T10:00:05Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default()
    }

    // The event shapes below follow the AWS EC2 and AWS Health user guides' examples.
    const SPOT_WARNING: &str = r#"{
        "version": "0",
        "id": "12345678-1234-1234-1234-123456789012",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": "2026-11-22T10:00:00Z",
        "region": "us-east-2",
        "resources": ["arn:aws:ec2:us-east-2a:instance/i-1234567890abcdef0"],
        "detail": {"instance-id": "i-1234567890abcdef0", "instance-action": "terminate"}
    }"#;

    #[test]
    fn spot_warning_has_a_two_minute_deadline_from_the_event_time() {
        let got = parse(SPOT_WARNING, now()).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].instance, InstanceId::from("i-1234567890abcdef0"));
        assert_eq!(got[0].kind, InterruptionKind::SpotNotice);
        assert_eq!(
            got[0].deadline.map(|d| d.to_rfc3339()),
            Some("2026-11-22T10:02:00+00:00".to_owned())
        );
        assert_eq!(got[0].received_at, now());
    }

    #[test]
    fn rebalance_recommendation_has_no_deadline() {
        let body = r#"{
            "version": "0", "id": "6fe5a1b8-3ab1-4d3b-9b7e-2f9a3c1d0e11",
            "detail-type": "EC2 Instance Rebalance Recommendation",
            "source": "aws.ec2", "account": "123456789012",
            "time": "2026-11-22T09:58:00Z", "region": "us-east-2",
            "resources": ["arn:aws:ec2:us-east-2:123456789012:instance/i-0abcdef1234567890"],
            "detail": {"instance-id": "i-0abcdef1234567890"}
        }"#;
        let got = parse(body, now()).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].kind, InterruptionKind::Rebalance);
        assert_eq!(got[0].deadline, None);
        assert_eq!(got[0].instance.0, "i-0abcdef1234567890");
    }

    #[test]
    fn state_change_reports_only_instances_going_away() {
        let body = |state: &str| {
            format!(
                r#"{{"version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602",
                "detail-type": "EC2 Instance State-change Notification",
                "source": "aws.ec2", "account": "123456789012",
                "time": "2026-11-22T09:59:00Z", "region": "us-east-1",
                "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111"],
                "detail": {{"instance-id": "i-abcd1111", "state": "{state}"}}}}"#
            )
        };
        let gone = parse(&body("terminated"), now()).unwrap();
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].kind, InterruptionKind::Preempted);
        assert_eq!(gone[0].instance.0, "i-abcd1111");
        assert!(parse(&body("running"), now()).unwrap().is_empty());
        assert!(parse(&body("pending"), now()).unwrap().is_empty());
        assert_eq!(parse(&body("stopped"), now()).unwrap().len(), 1);
    }

    #[test]
    fn health_scheduled_change_names_each_affected_instance() {
        let body = r#"{
            "version": "0", "id": "121345678-1234-1234-1234-123456789012",
            "detail-type": "AWS Health Event", "source": "aws.health",
            "account": "123456789012", "time": "2026-11-22T09:00:00Z",
            "region": "us-east-1",
            "resources": ["i-abcd1111", "i-abcd2222"],
            "detail": {
                "eventArn": "arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED_ABC123",
                "service": "EC2",
                "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                "eventTypeCategory": "scheduledChange",
                "eventScopeCode": "ACCOUNT_SPECIFIC",
                "startTime": "Tue, 24 Nov 2026 02:00:00 GMT",
                "endTime": "Tue, 24 Nov 2026 04:00:00 GMT",
                "eventRegion": "us-east-1",
                "eventDescription": [{"language": "en_US", "latestDescription": "Instance retirement"}],
                "affectedEntities": [
                    {"entityValue": "i-abcd1111", "status": "PENDING"},
                    {"entityValue": "i-abcd2222", "status": "PENDING"}
                ]
            }
        }"#;
        let got = parse(body, now()).unwrap();
        let ids: Vec<_> = got.iter().map(|i| i.instance.0.as_str()).collect();
        assert_eq!(ids, ["i-abcd1111", "i-abcd2222"]);
        assert!(got.iter().all(|i| i.kind == InterruptionKind::Maintenance));
        assert_eq!(
            got[0].deadline.map(|d| d.to_rfc3339()),
            Some("2026-11-24T02:00:00+00:00".to_owned())
        );
    }

    #[test]
    fn health_issue_events_are_not_interruptions() {
        let body = r#"{"version": "0", "id": "x", "detail-type": "AWS Health Event",
            "source": "aws.health", "account": "1", "time": "2026-11-22T09:00:00Z",
            "region": "us-east-1", "resources": [],
            "detail": {"service": "EC2", "eventTypeCategory": "issue",
                       "eventTypeCode": "AWS_EC2_OPERATIONAL_ISSUE"}}"#;
        assert!(parse(body, now()).unwrap().is_empty());
    }

    #[test]
    fn junk_and_unknown_events_are_errors() {
        assert!(matches!(parse("not json", now()), Err(EventError::Json(_))));
        let other = r#"{"detail-type": "EC2 AMI State Change", "source": "aws.ec2", "detail": {}}"#;
        assert_eq!(
            parse(other, now()),
            Err(EventError::UnknownType("EC2 AMI State Change".into()))
        );
        let nameless = r#"{"detail-type": "EC2 Instance Rebalance Recommendation", "detail": {}}"#;
        assert!(matches!(
            parse(nameless, now()),
            Err(EventError::NoInstance(_))
        ));
    }
}
