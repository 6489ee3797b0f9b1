//! The job spec a `tern_job` or `tern_plan` block names: either `job`, the TOML spec written
//! as an HCL object (the same keys and tables), or `spec_file`, a TOML file. Both go through
//! tern's own spec parser, so an invalid spec fails at `terraform plan` with the parser's
//! message (field and expectation) on the attribute that holds it.

use std::path::Path;

use chrono::{DateTime, Utc};
use rmpv::Value;
use sha2::{Digest, Sha256};
use tern_cloud::JobSpec;

use crate::diag;
use crate::schema::{Mode, attr};
use crate::tfplugin6::Diagnostic;
use crate::tfplugin6::schema::Attribute;
use crate::value;

pub const JOB: &str = "job";
pub const SPEC_FILE: &str = "spec_file";

/// The two ways a block gives its spec (`tern_job`, `tern_plan`).
pub fn attributes() -> Vec<Attribute> {
    vec![
        attr(
            JOB,
            "\"dynamic\"",
            Mode::Optional,
            "The job spec as an HCL object: the keys and tables of a TOML job spec.",
        ),
        attr(
            SPEC_FILE,
            "\"string\"",
            Mode::Optional,
            "Path to a TOML job spec (instead of `job`).",
        ),
    ]
}

/// A spec read from configuration, ready to submit.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The attribute it came from (for diagnostics).
    pub attr: &'static str,
    /// TOML as the controller receives it (profile CSVs inlined).
    pub wire: String,
    pub spec: JobSpec,
}

/// What configuration says about the spec.
pub enum Source {
    /// Neither attribute is set.
    Missing,
    /// Part of it is known only after apply (e.g. it depends on another resource).
    Unknown,
    Ready(Box<Resolved>),
}

/// Reads the spec from `config`; errors name the attribute they are about.
/// Only the spec's own rules are checked here; [`check_new`] adds what a new submission must
/// also satisfy.
pub fn resolve(config: &Value) -> Result<Source, Diagnostic> {
    let job = value::dynamic_json(config, JOB);
    let file = value::string(config, SPEC_FILE);
    let (job, file) = match (job, file) {
        (Err(_), _) | (_, Err(_)) => return Ok(Source::Unknown),
        (Ok(j), Ok(f)) => (j, f),
    };
    let resolved = match (job, file) {
        (Some(_), Some(_)) => {
            return Err(diag::error(
                Some(JOB),
                "Conflicting job spec",
                "Set either `job` (the spec as an HCL object) or `spec_file` (a TOML file), not both.",
            ));
        }
        (None, None) => return Ok(Source::Missing),
        (Some(json), None) => from_object(&json)?,
        (None, Some(path)) => from_file(&path)?,
    };
    Ok(Source::Ready(Box::new(resolved)))
}

/// What the controller checks when it admits a job (known accelerators, a deadline in the
/// future): for a new job and a plan, never for a job that already runs, whose absolute
/// deadline may have passed since.
pub fn check_new(resolved: &Resolved, now: DateTime<Utc>) -> Result<(), Diagnostic> {
    tern::jobs::check_new(&resolved.spec, now, resolved.attr)
        .map_err(|e| invalid(resolved.attr, e.to_string()))
}

fn invalid(attr: &'static str, detail: String) -> Diagnostic {
    diag::error(Some(attr), "Invalid job spec", detail)
}

fn from_object(json: &serde_json::Value) -> Result<Resolved, Diagnostic> {
    let table = toml::Value::try_from(without_nulls(json))
        .map_err(|e| invalid(JOB, format!("`job` cannot be written as TOML: {e}")))?;
    let text = toml::to_string(&table)
        .map_err(|e| invalid(JOB, format!("`job` cannot be written as TOML: {e}")))?;
    finish(JOB, &text, "job", Path::new("."))
}

fn from_file(path: &str) -> Result<Resolved, Diagnostic> {
    let p = Path::new(path);
    let text = tern::jobs::read_spec(p).map_err(|e| invalid(SPEC_FILE, e.to_string()))?;
    finish(SPEC_FILE, &text, path, tern::jobs::spec_folder(p))
}

fn finish(
    attr: &'static str,
    text: &str,
    shown: &str,
    base: &Path,
) -> Result<Resolved, Diagnostic> {
    let spec = tern_cloud::parse_job_spec(text, shown).map_err(|e| invalid(attr, e.to_string()))?;
    let wire =
        tern::jobs::wire_spec(text, &spec, base).map_err(|e| invalid(attr, e.to_string()))?;
    // The controller parses what is sent, so the digest is of the wire text's parse; that
    // differs from the first only when a profile was inlined.
    let spec = if wire == text {
        spec
    } else {
        tern_cloud::parse_job_spec(&wire, shown).map_err(|e| invalid(attr, e.to_string()))?
    };
    Ok(Resolved { attr, wire, spec })
}

/// HCL objects may hold nulls (an optional left out); TOML has no null.
fn without_nulls(j: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match j {
        J::Object(map) => J::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        J::Array(items) => J::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// The wire spec with the job's name on the controller in place of the one written.
pub fn renamed(wire: &str, name: &str) -> String {
    let mut root: toml::Table = toml::from_str(wire).expect("the wire spec was parsed before");
    root.insert("name".into(), toml::Value::String(name.into()));
    toml::to_string(&root).expect("a parsed table serialises")
}

/// A fingerprint of what a spec asks for, its name aside (the name on the controller gets a
/// suffix): equal digests mean the controller's job is the one configuration describes.
pub fn digest(spec: &JobSpec) -> String {
    let mut json = serde_json::to_value(spec).expect("a spec serialises");
    if let Some(map) = json.as_object_mut() {
        map.remove("name");
    }
    let canonical = canonical(&json);
    let hash = Sha256::digest(canonical.as_bytes());
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

/// JSON with object keys sorted, whatever the map type serde_json was built with.
fn canonical(j: &serde_json::Value) -> String {
    use serde_json::Value as J;
    match j {
        J::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", J::from(k.as_str()), canonical(&map[k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        J::Array(items) => {
            let parts: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", parts.join(","))
        }
        other => other.to_string(),
    }
}

/// The name a new job gets on the controller: the spec's name and a random suffix, so a
/// replacement never collides with the cancelled job it replaces (names are never reused).
pub fn controller_name(spec_name: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let suffix = &id[..6];
    let keep = spec_name.len().min(tern_cloud::name::MAX_NAME - 7);
    format!("{}-{suffix}", &spec_name[..keep])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(job: serde_json::Value) -> Value {
        value::object([(
            JOB,
            Value::Array(vec![
                Value::Binary(b"\"dynamic\"".to_vec()),
                value::from_json(&job),
            ]),
        )])
    }

    fn small() -> serde_json::Value {
        serde_json::json!({
            "name": "bert", "team": "nlp", "accelerators": ["T4"], "local_batch": 8,
            "deadline": "30h", "workers": {"min": 1, "max": 2},
            "work": {"steps": 100, "batch": 8}, "unused": null,
        })
    }

    #[test]
    fn an_hcl_object_is_the_toml_spec() {
        let Source::Ready(r) = resolve(&config(small())).unwrap() else {
            panic!("expected a spec")
        };
        assert_eq!(r.spec.name, "bert");
        assert_eq!(r.spec.accelerators, vec!["T4".to_string()]);
        let renamed = renamed(&r.wire, "bert-abc123");
        let again = tern_cloud::parse_job_spec(&renamed, "x").unwrap();
        assert_eq!(again.name, "bert-abc123");
        assert_eq!(
            digest(&again),
            digest(&r.spec),
            "the name is not part of the digest"
        );
    }

    #[test]
    fn errors_name_the_attribute_and_the_field() {
        let mut bad = small();
        bad["workers"] = serde_json::json!({"min": 0, "max": 2});
        let err = resolve(&config(bad)).err().expect("invalid");
        let attr = err.attribute.unwrap().steps[0].selector.clone().unwrap();
        assert_eq!(
            attr,
            crate::tfplugin6::attribute_path::step::Selector::AttributeName("job".into())
        );
        assert!(err.detail.contains("workers"), "{}", err.detail);
    }

    #[test]
    fn both_sources_at_once_is_an_error() {
        let mut c = config(small());
        value::set(&mut c, SPEC_FILE, Value::from("x.toml"));
        let err = resolve(&c).err().expect("conflict");
        assert_eq!(err.summary, "Conflicting job spec");
    }

    #[test]
    fn a_missing_file_names_it() {
        let c = value::object([(SPEC_FILE, Value::from("/no/such/job.toml"))]);
        let err = resolve(&c).err().expect("missing file");
        assert!(err.detail.contains("/no/such/job.toml"), "{}", err.detail);
    }

    #[test]
    fn controller_names_keep_the_name_rule() {
        let long = "a".repeat(63);
        let n = controller_name(&long);
        assert!(tern_cloud::name::check_name(&n).is_ok(), "{n}");
        assert_ne!(controller_name("x"), controller_name("x"));
    }
}
