//! EventBridge events that warn tern about an instance, as they arrive in the SQS queue.
//!
//! An EventBridge rule delivers the event JSON itself as the SQS message body. Four kinds
//! matter: the spot interruption warning (two minutes' notice), the rebalance
//! recommendation (elevated risk, no deadline), the instance state change (the instance is
//! going or gone) and the AWS Health scheduled change (retirement or maintenance).
//! [`EVENT_SHAPES`] lists them once: the parser accepts exactly these, and the Terraform
//! module's EventBridge rules match exactly these (a test compares them).

use chrono::{DateTime, Duration, Utc};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tern_cloud::{InstanceId, Interruption, InterruptionKind};

/// AWS stops a spot instance two minutes after the warning.
const SPOT_NOTICE: Duration = Duration::minutes(2);

/// What tern makes of one kind of event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A spot instance is stopped two minutes after the event.
    SpotWarning,
    /// Elevated risk of a spot interruption, no deadline.
    Rebalance,
    /// The instance is going or gone.
    StateChange,
    /// A scheduled retirement or maintenance of one or more instances.
    Health,
}

/// One EventBridge event shape tern consumes: a `source`, a `detail-type`, and the `detail`
/// field values tern acts on. Events of the shape with other detail values are well formed
/// but need nothing (an instance starting, a health issue that is not a scheduled change);
/// the EventBridge rule does not forward them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventShape {
    pub kind: EventKind,
    pub source: &'static str,
    pub detail_type: &'static str,
    /// `detail` fields and the values that matter; an event matches when each field holds
    /// one of its values.
    pub detail: &'static [(&'static str, &'static [&'static str])],
}

/// Every event shape tern consumes: what the parser accepts and what the EventBridge rules of
/// `terraform/modules/aws-controller` match.
pub const EVENT_SHAPES: [EventShape; 4] = [
    EventShape {
        kind: EventKind::SpotWarning,
        source: "aws.ec2",
        detail_type: "EC2 Spot Instance Interruption Warning",
        detail: &[],
    },
    EventShape {
        kind: EventKind::Rebalance,
        source: "aws.ec2",
        detail_type: "EC2 Instance Rebalance Recommendation",
        detail: &[],
    },
    EventShape {
        kind: EventKind::StateChange,
        source: "aws.ec2",
        detail_type: "EC2 Instance State-change Notification",
        // pending and running: nothing is being taken away.
        detail: &[(
            "state",
            &["shutting-down", "terminated", "stopping", "stopped"],
        )],
    },
    EventShape {
        kind: EventKind::Health,
        source: "aws.health",
        detail_type: "AWS Health Event",
        detail: &[
            ("service", &["EC2"]),
            ("eventTypeCategory", &["scheduledChange"]),
        ],
    },
];

impl EventShape {
    /// The shape of an event with this source and detail-type, if tern consumes it.
    pub fn find(source: &str, detail_type: &str) -> Option<&'static EventShape> {
        EVENT_SHAPES
            .iter()
            .find(|s| s.source == source && s.detail_type == detail_type)
    }

    /// The EventBridge event pattern (a rule's `event_pattern`) matching this shape.
    pub fn pattern(&self) -> Value {
        let mut pattern = json!({
            "source": [self.source],
            "detail-type": [self.detail_type],
        });
        if !self.detail.is_empty() {
            let detail: Map<String, Value> = self
                .detail
                .iter()
                .map(|(field, values)| ((*field).to_owned(), json!(values)))
                .collect();
            pattern["detail"] = Value::Object(detail);
        }
        pattern
    }

    /// Whether an event's detail holds one of the listed values in each listed field.
    fn wants(&self, detail: &Value) -> bool {
        self.detail.iter().all(|(field, values)| {
            detail
                .get(field)
                .and_then(Value::as_str)
                .is_some_and(|v| values.contains(&v))
        })
    }
}

/// Why a message body is not an event tern understands.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EventError {
    #[error("not an EventBridge event: {0}")]
    Json(String),
    #[error("unhandled event type '{detail_type}' from '{origin}'")]
    UnknownType { origin: String, detail_type: String },
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
    detail: Value,
}

/// Parse one message body. `Ok(vec![])` means a well-formed event that needs no action (an
/// instance starting up, a health event about something other than instances).
pub fn parse(body: &str, received_at: DateTime<Utc>) -> Result<Vec<Interruption>, EventError> {
    let event: Envelope =
        serde_json::from_str(body).map_err(|e| EventError::Json(e.to_string()))?;
    let shape = EventShape::find(&event.source, &event.detail_type).ok_or_else(|| {
        EventError::UnknownType {
            origin: event.source.clone(),
            detail_type: event.detail_type.clone(),
        }
    })?;
    if !shape.wants(&event.detail) {
        return Ok(Vec::new());
    }
    let sent = event.time.unwrap_or(received_at);
    let one = |kind, deadline| -> Result<Vec<Interruption>, EventError> {
        let id = detail_instance(&event.detail)
            .or_else(|| event.resources.iter().find_map(|r| instance_in_arn(r)))
            .ok_or_else(|| EventError::NoInstance(event.detail_type.clone()))?;
        Ok(vec![Interruption {
            instance: InstanceId::new(id),
            kind,
            deadline,
            received_at,
        }])
    };
    match shape.kind {
        EventKind::SpotWarning => one(InterruptionKind::SpotNotice, Some(sent + SPOT_NOTICE)),
        EventKind::Rebalance => one(InterruptionKind::Rebalance, None),
        EventKind::StateChange => one(InterruptionKind::Preempted, Some(sent)),
        EventKind::Health => Ok(health(&event, received_at)),
    }
}

/// A scheduled change (instance retirement, system maintenance) for each affected instance.
fn health(event: &Envelope, received_at: DateTime<Utc>) -> Vec<Interruption> {
    let d = &event.detail;
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
            instance: InstanceId::new(id),
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
        assert_eq!(got[0].instance.as_str(), "i-0abcdef1234567890");
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
        assert_eq!(gone[0].instance.as_str(), "i-abcd1111");
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
        let ids: Vec<_> = got.iter().map(|i| i.instance.as_str()).collect();
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
            Err(EventError::UnknownType {
                origin: "aws.ec2".into(),
                detail_type: "EC2 AMI State Change".into()
            })
        );
        // A known detail-type from another source is not the event tern knows.
        let forged = r#"{"detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "my.app", "detail": {"instance-id": "i-1"}}"#;
        assert!(matches!(
            parse(forged, now()),
            Err(EventError::UnknownType { .. })
        ));
        let nameless = r#"{"detail-type": "EC2 Instance Rebalance Recommendation",
            "source": "aws.ec2", "detail": {}}"#;
        assert!(matches!(
            parse(nameless, now()),
            Err(EventError::NoInstance(_))
        ));
    }

    /// An event of `shape` whose detail holds the first wanted value of each field.
    fn event_of(shape: &EventShape) -> String {
        let mut detail = json!({"instance-id": "i-0shape"});
        for (field, values) in shape.detail {
            detail[*field] = json!(values[0]);
        }
        detail["affectedEntities"] = json!([{"entityValue": "i-0shape"}]);
        json!({
            "source": shape.source,
            "detail-type": shape.detail_type,
            "time": "2026-11-22T10:00:00Z",
            "detail": detail,
        })
        .to_string()
    }

    #[test]
    fn every_listed_shape_is_parsed_into_an_interruption() {
        for shape in &EVENT_SHAPES {
            let got = parse(&event_of(shape), now()).unwrap();
            assert_eq!(got.len(), 1, "{shape:?}");
            assert_eq!(got[0].instance.as_str(), "i-0shape", "{shape:?}");
        }
    }

    #[test]
    fn shapes_are_distinct_and_their_patterns_name_source_and_detail_type() {
        for (n, a) in EVENT_SHAPES.iter().enumerate() {
            for b in &EVENT_SHAPES[n + 1..] {
                assert!((a.source, a.detail_type) != (b.source, b.detail_type));
            }
        }
        let state = EVENT_SHAPES[2].pattern();
        assert_eq!(
            state,
            json!({
                "source": ["aws.ec2"],
                "detail-type": ["EC2 Instance State-change Notification"],
                "detail": {"state": ["shutting-down", "terminated", "stopping", "stopped"]},
            })
        );
        assert!(EVENT_SHAPES[0].pattern().get("detail").is_none());
    }

    #[test]
    fn a_health_event_about_another_service_needs_nothing() {
        let body = r#"{"detail-type": "AWS Health Event", "source": "aws.health",
            "resources": ["i-abcd1111"],
            "detail": {"service": "RDS", "eventTypeCategory": "scheduledChange"}}"#;
        assert!(parse(body, now()).unwrap().is_empty());
    }
}
