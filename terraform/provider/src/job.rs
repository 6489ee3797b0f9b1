//! `resource "tern_job"`: a training job on a tern controller. Create submits the spec,
//! read reports the job's state, progress, cost so far and running instances, delete cancels
//! it. A job cannot change in place, so a different spec (or a job cancelled outside
//! Terraform) plans a replacement. The job's name on the controller is the spec's name plus a
//! short suffix, because the controller never reuses a name, even a cancelled one's.

use rmpv::Value;
use tern::api::client::{Client, ClientError};
use tern::api::wire::costs::CostQuery;

use crate::diag::{self, Diags};
use crate::schema::{Mode, attr, schema};
use crate::spec::{self, Source};
use crate::tfplugin6::{AttributePath, Schema};
use crate::value;

pub const TYPE: &str = "tern_job";
const DIGEST: &str = "spec_sha256";

/// Attributes the controller decides, unknown until apply.
const COMPUTED: &[(&str, &str, &str)] = &[
    (
        "id",
        "\"string\"",
        "The job's name on the controller (what `terraform import` takes).",
    ),
    (
        "name",
        "\"string\"",
        "The job's name on the controller: the spec's name and a suffix.",
    ),
    (
        "state",
        "\"string\"",
        "pending, running, unplaceable, finished, failed, cancelled or over-budget.",
    ),
    (
        "reason",
        "\"string\"",
        "Why the job is in its state, when it is not running.",
    ),
    (
        "progress",
        "\"number\"",
        "Fraction of the work done, 0 to 1.",
    ),
    ("cost_usd", "\"number\"", "Dollars billed so far."),
    (
        "dollars_per_hour",
        "\"number\"",
        "What the job's instances cost now, USD/h.",
    ),
    (
        "instances",
        "[\"list\",\"string\"]",
        "The job's running instances.",
    ),
    (
        "submitted_at",
        "\"string\"",
        "When the controller admitted the job (RFC 3339).",
    ),
    (
        "deadline_at",
        "\"string\"",
        "The job's deadline (RFC 3339), if it has one.",
    ),
    (
        DIGEST,
        "\"string\"",
        "SHA-256 of the spec as the controller parsed it, its name aside.",
    ),
];

pub fn resource_schema() -> Schema {
    let mut attributes = spec::attributes();
    attributes.extend(
        COMPUTED
            .iter()
            .map(|(n, t, d)| attr(n, t, Mode::Computed, d)),
    );
    schema(0, "A training job on a tern controller.", attributes)
}

/// Every attribute present (null where unset), as Terraform's decoder wants objects whole.
fn whole(mut v: Value) -> Value {
    for name in [spec::JOB, spec::SPEC_FILE]
        .into_iter()
        .chain(COMPUTED.iter().map(|c| c.0))
    {
        if value::get(&v, name).is_none() {
            value::set(&mut v, name, Value::Nil);
        }
    }
    v
}

pub fn validate(config: &Value) -> Diags {
    match spec::resolve(config) {
        Err(d) => vec![d],
        Ok(Source::Missing) => vec![diag::error(
            Some(spec::JOB),
            "Missing job spec",
            "Set `job` (the spec as an HCL object) or `spec_file` (a TOML file).",
        )],
        Ok(_) => Vec::new(),
    }
}

/// The planned state and what forces a replacement. No controller call: plans work offline.
pub fn plan(
    prior: &Value,
    proposed: &Value,
    config: &Value,
) -> Result<(Value, Vec<AttributePath>), Diags> {
    if proposed.is_nil() {
        return Ok((Value::Nil, Vec::new()));
    }
    let resolved = match spec::resolve(config).map_err(|d| vec![d])? {
        Source::Ready(r) => Some(r),
        Source::Unknown => None,
        Source::Missing => return Err(validate(config)),
    };
    // A job about to be submitted must pass what the controller checks at admission.
    let check_new = || match &resolved {
        Some(r) => spec::check_new(r, chrono::Utc::now()).map_err(|d| vec![d]),
        None => Ok(()),
    };
    let digest = resolved.as_ref().map(|r| spec::digest(&r.spec));
    let mut planned = whole(proposed.clone());
    let digest_value = digest.as_deref().map_or_else(value::unknown, Value::from);
    if prior.is_nil() {
        check_new()?;
        set_unknown(&mut planned);
        value::set(&mut planned, DIGEST, digest_value);
        return Ok((planned, Vec::new()));
    }
    let prior_digest = value::string(prior, DIGEST).ok().flatten();
    let changed = digest.is_none() || digest != prior_digest;
    let cancelled = value::string(prior, "state").ok().flatten().as_deref() == Some("cancelled");
    if !(changed || cancelled) {
        for (name, _, _) in COMPUTED {
            value::set(
                &mut planned,
                name,
                value::get(prior, name).cloned().unwrap_or(Value::Nil),
            );
        }
        return Ok((planned, Vec::new()));
    }
    check_new()?;
    let mut replace = Vec::new();
    if changed {
        replace.push(diag::path(DIGEST));
    }
    if cancelled {
        replace.push(diag::path("state"));
    }
    set_unknown(&mut planned);
    value::set(&mut planned, DIGEST, digest_value);
    Ok((planned, replace))
}

fn set_unknown(v: &mut Value) {
    for (name, _, _) in COMPUTED {
        value::set(v, name, value::unknown());
    }
}

/// Creates, changes (in place: only the spec's wording, after an import) or deletes.
pub async fn apply(
    client: &Client,
    prior: &Value,
    planned: &Value,
    config: &Value,
) -> Result<Value, Diags> {
    if planned.is_nil() {
        let name = value::string(prior, "name")
            .ok()
            .flatten()
            .unwrap_or_default();
        return match client.cancel(&name).await {
            Ok(_) => Ok(Value::Nil),
            Err(e) if e.status() == Some(404) => Ok(Value::Nil),
            Err(e) => Err(vec![client_diag(&e, None)]),
        };
    }
    if !prior.is_nil() {
        return Ok(planned.clone());
    }
    let Source::Ready(resolved) = spec::resolve(config).map_err(|d| vec![d])? else {
        return Err(validate(config));
    };
    spec::check_new(&resolved, chrono::Utc::now()).map_err(|d| vec![d])?;
    let name = spec::controller_name(&resolved.spec.name);
    let wire = spec::renamed(&resolved.wire, &name);
    client
        .submit(&wire)
        .await
        .map_err(|e| vec![client_diag(&e, Some(resolved.attr))])?;
    let mut state = whole(planned.clone());
    for (name, _, _) in COMPUTED {
        value::set(&mut state, name, Value::Nil);
    }
    value::set(&mut state, "id", Value::from(name.as_str()));
    value::set(&mut state, "name", Value::from(name.as_str()));
    value::set(
        &mut state,
        DIGEST,
        Value::from(spec::digest(&resolved.spec)),
    );
    // The job exists now: whatever the read says, the state must name it, or a failed read
    // would leave a job Terraform does not know it owns.
    match refresh(client, state.clone()).await {
        Ok(Some(fresh)) => Ok(fresh),
        Ok(None) | Err(_) => Ok(state),
    }
}

/// The job as the controller sees it now; `None` when the controller has no such job.
pub async fn refresh(client: &Client, mut state: Value) -> Result<Option<Value>, Diags> {
    let name = value::string(&state, "name")
        .ok()
        .flatten()
        .or_else(|| value::string(&state, "id").ok().flatten())
        .unwrap_or_default();
    let status = match client.job(&name).await {
        Ok(s) => s,
        Err(e) if e.status() == Some(404) => return Ok(None),
        Err(e) => return Err(vec![client_diag(&e, None)]),
    };
    let query = CostQuery {
        job: Some(name.clone()),
        split: true,
        ..CostQuery::default()
    };
    let costs = client
        .costs(&query)
        .await
        .map_err(|e| vec![client_diag(&e, None)])?;
    let running: Vec<Value> = costs
        .segments
        .iter()
        .filter(|s| s.job == name && s.ended_at.is_none())
        .map(|s| Value::from(s.instance.as_str()))
        .collect();
    let fields = [
        ("id", Value::from(name.as_str())),
        ("name", Value::from(name.as_str())),
        ("state", Value::from(status.state.as_str())),
        ("reason", value::opt_str(status.reason.as_deref())),
        ("progress", value::num(status.progress)),
        ("cost_usd", value::num(costs.total.cost)),
        ("dollars_per_hour", value::num(status.dollars_per_hour)),
        ("instances", Value::Array(running)),
        (
            "submitted_at",
            Value::from(status.submitted_at.to_rfc3339()),
        ),
        (
            "deadline_at",
            value::opt_str(status.deadline_at.map(|d| d.to_rfc3339()).as_deref()),
        ),
    ];
    for (k, v) in fields {
        value::set(&mut state, k, v);
    }
    if value::string(&state, DIGEST).ok().flatten().is_none() {
        // Imported: fingerprint the spec the controller holds.
        let spec = client
            .job_spec(&name)
            .await
            .map_err(|e| vec![client_diag(&e, None)])?;
        value::set(&mut state, DIGEST, Value::from(spec::digest(&spec)));
    }
    Ok(Some(whole(state)))
}

/// `terraform import tern_job.x NAME`: the name is enough; read fills the rest.
pub fn import(id: &str) -> Value {
    whole(value::object([
        ("id", Value::from(id)),
        ("name", Value::from(id)),
    ]))
}

/// State from Terraform's JSON store back to MessagePack. Only `job`, a dynamic value, needs
/// care: JSON state writes it as `{"value": …, "type": …}`.
pub fn upgrade(json: &serde_json::Value) -> Value {
    let mut state = value::from_json(json);
    if let Some(serde_json::Value::Object(job)) = json.get(spec::JOB)
        && let (Some(ty), Some(v)) = (job.get("type"), job.get("value"))
    {
        let pair = Value::Array(vec![
            Value::Binary(ty.to_string().into_bytes()),
            value::from_json(v),
        ]);
        value::set(&mut state, spec::JOB, pair);
    }
    whole(state)
}

/// A controller error as a diagnostic: a refused token points at `token`, an unreachable
/// controller at `endpoint`, a refused spec at the attribute that holds it.
pub fn client_diag(
    e: &ClientError,
    spec_attr: Option<&'static str>,
) -> crate::tfplugin6::Diagnostic {
    match e {
        ClientError::Status {
            status: 401 | 403, ..
        } => diag::error(
            Some("token"),
            "The tern controller refused the token",
            format!(
                "{e}. Set `token` in the provider block or TERN_TOKEN to the controller's API token."
            ),
        ),
        ClientError::Transport { .. } | ClientError::Url(_) => diag::error(
            Some("endpoint"),
            "Cannot reach the tern controller",
            format!(
                "{e}. Is `tern controller` running there? Set `endpoint` in the provider block or TERN_SERVER."
            ),
        ),
        ClientError::Status {
            status: 400 | 409 | 422,
            ..
        } => diag::error(
            spec_attr,
            "The tern controller rejected the job",
            e.to_string(),
        ),
        _ => diag::error(None, "tern controller error", e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Value {
        let job = serde_json::json!({
            "name": "j", "team": "t", "accelerators": ["T4"], "local_batch": 8, "workers": 1,
            "work": {"steps": 10, "batch": 8},
        });
        value::object([(
            spec::JOB,
            Value::Array(vec![
                Value::Binary(b"\"dynamic\"".to_vec()),
                value::from_json(&job),
            ]),
        )])
    }

    #[test]
    fn a_new_job_plans_unknown_computed_attributes() {
        let c = whole(config());
        let (planned, replace) = plan(&Value::Nil, &c, &c).unwrap();
        assert!(replace.is_empty());
        assert!(value::is_unknown(value::get(&planned, "state").unwrap()));
        assert!(value::string(&planned, DIGEST).unwrap().is_some());
    }

    #[test]
    fn an_unchanged_job_plans_no_change_and_a_changed_one_a_replacement() {
        let c = whole(config());
        let (mut prior, _) = plan(&Value::Nil, &c, &c).unwrap();
        for (name, _, _) in COMPUTED.iter().filter(|c| c.0 != DIGEST) {
            value::set(&mut prior, name, Value::from("x"));
        }
        let (planned, replace) = plan(&prior, &c, &c).unwrap();
        assert!(replace.is_empty());
        assert_eq!(planned, prior);

        let mut cancelled = prior.clone();
        value::set(&mut cancelled, "state", Value::from("cancelled"));
        let (_, replace) = plan(&cancelled, &c, &c).unwrap();
        assert_eq!(replace, vec![diag::path("state")]);

        let mut other = config();
        let job = serde_json::json!({
            "name": "j", "team": "t", "accelerators": ["T4"], "local_batch": 8, "workers": 1,
            "work": {"steps": 20, "batch": 8},
        });
        value::set(
            &mut other,
            spec::JOB,
            Value::Array(vec![
                Value::Binary(b"\"dynamic\"".to_vec()),
                value::from_json(&job),
            ]),
        );
        let other = whole(other);
        let (_, replace) = plan(&prior, &other, &other).unwrap();
        assert_eq!(replace, vec![diag::path(DIGEST)]);
    }

    #[test]
    fn a_running_job_whose_deadline_has_passed_still_plans_clean_but_cannot_be_created() {
        let job = serde_json::json!({
            "name": "j", "team": "t", "accelerators": ["T4"], "local_batch": 8, "workers": 1,
            "deadline": "2020-01-01T00:00:00Z", "work": {"steps": 10, "batch": 8},
        });
        let c = whole(value::object([(
            spec::JOB,
            Value::Array(vec![
                Value::Binary(b"\"dynamic\"".to_vec()),
                value::from_json(&job),
            ]),
        )]));
        let err = plan(&Value::Nil, &c, &c).unwrap_err();
        assert!(err[0].detail.contains("deadline"), "{}", err[0].detail);
        let mut prior = c.clone();
        for (name, _, _) in COMPUTED {
            value::set(&mut prior, name, Value::from("x"));
        }
        let Source::Ready(r) = spec::resolve(&c).unwrap() else {
            panic!()
        };
        value::set(&mut prior, DIGEST, Value::from(spec::digest(&r.spec)));
        let (planned, replace) = plan(&prior, &c, &c).unwrap();
        assert!(replace.is_empty());
        assert_eq!(planned, prior);
    }

    #[test]
    fn json_state_keeps_the_job_type() {
        let json = serde_json::json!({"id": "j-1", "job": {"value": {"a": 1}, "type": ["object", {"a": "number"}]}});
        let v = upgrade(&json);
        let Some(Value::Array(pair)) = value::get(&v, spec::JOB) else {
            panic!()
        };
        assert_eq!(
            pair[0],
            Value::Binary(br#"["object",{"a":"number"}]"#.to_vec())
        );
        assert_eq!(value::string(&v, "id").unwrap().as_deref(), Some("j-1"));
    }
}
