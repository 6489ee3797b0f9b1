//! `data "tern_plan"`: a job spec becomes the planner's choice (type, zone, capacity, count),
//! its expected cost and finish, and the runner-up configurations with why each lost: the
//! same `tern_plan::plan` call `tern plan` makes, on the bundled catalog or catalog files.

use chrono::Utc;
use rmpv::Value;
use tern_plan::{Config, PlanOptions};

use crate::diag::{self, Diags};
use crate::schema::{Mode, attr, list_of_objects, schema};
use crate::spec::{self, Source};
use crate::tfplugin6::Schema;
use crate::value;

pub const TYPE: &str = "tern_plan";
const DEFAULT_ALTERNATIVES: f64 = 3.0;

const CHOICE: &[(&str, &str)] = &[
    ("cloud", "string"),
    ("region", "string"),
    ("zone", "string"),
    ("instance_type", "string"),
    ("capacity", "string"),
    ("accelerator", "string"),
    ("nodes", "number"),
    ("workers", "number"),
    ("price_per_hour", "number"),
    ("expected_cost_usd", "number"),
    ("expected_finish_hours", "number"),
];

/// The computed attributes, one per field of the choice, and the rest.
pub fn data_schema() -> Schema {
    let mut alt_fields = CHOICE.to_vec();
    alt_fields.push(("why_not", "string"));
    let mut attributes = spec::attributes();
    attributes.extend([
        attr(
            "catalog",
            "[\"list\",\"string\"]",
            Mode::Optional,
            "SkyPilot v8 catalog CSV files to use instead of the bundled snapshot.",
        ),
        attr(
            "max_alternatives",
            "\"number\"",
            Mode::Optional,
            "How many runner-up configurations to list (default 3).",
        ),
        attr(
            "placed",
            "\"bool\"",
            Mode::Computed,
            "Whether the planner found a configuration that meets the deadline and budget.",
        ),
        attr(
            "reason",
            "\"string\"",
            Mode::Computed,
            "Why the job cannot be placed, when it cannot.",
        ),
        attr(
            "deadline_hours",
            "\"number\"",
            Mode::Computed,
            "Hours from now to the deadline, if the spec has one.",
        ),
        attr(
            "solver",
            "\"string\"",
            Mode::Computed,
            "milp (proved optimal), milp-time-limit or greedy.",
        ),
        attr(
            "alternatives",
            &list_of_objects(&alt_fields),
            Mode::Computed,
            "Runner-up configurations, best first, with why each lost.",
        ),
    ]);
    for (name, ty) in CHOICE {
        attributes.push(attr(
            name,
            &format!("\"{ty}\""),
            Mode::Computed,
            "Of the chosen configuration (null when not placed).",
        ));
    }
    schema(
        0,
        "The planner's choice for a job spec, with its expected cost and finish.",
        attributes,
    )
}

pub fn read(config: &Value) -> Result<Value, Diags> {
    let now = Utc::now();
    let resolved = match spec::resolve(config).map_err(|d| vec![d])? {
        Source::Ready(r) => r,
        Source::Missing => {
            return Err(vec![diag::error(
                Some(spec::JOB),
                "Missing job spec",
                "Set `job` or `spec_file`.",
            )]);
        }
        Source::Unknown => {
            return Err(vec![diag::error(
                Some(spec::JOB),
                "Job spec not known yet",
                "`tern_plan` needs its spec at plan time.",
            )]);
        }
    };
    spec::check_new(&resolved, now).map_err(|d| vec![d])?;
    let catalog = crate::offers::load_catalog(config)?;
    let job = tern::jobs::LoadedJob::from_spec(resolved.spec.clone(), None, resolved.attr, now)
        .map_err(|e| {
            vec![diag::error(
                Some(resolved.attr),
                "Invalid job spec",
                e.to_string(),
            )]
        })?;
    let samples = job.spec.work.samples() as f64;
    let alternatives = value::number(config, "max_alternatives")
        .ok()
        .flatten()
        .unwrap_or(DEFAULT_ALTERNATIVES);
    let options = PlanOptions {
        alternatives: alternatives.max(0.0) as usize,
        ..PlanOptions::default()
    };
    let report = tern_plan::plan(
        &[job.plan_job(now, now, samples)],
        &catalog.offers,
        &options,
    );
    let jp = &report.jobs[0];
    let mut out = config.clone();
    value::set(&mut out, "placed", Value::Boolean(jp.placed));
    value::set(&mut out, "reason", value::opt_str(jp.reason.as_deref()));
    value::set(
        &mut out,
        "deadline_hours",
        jp.deadline_h.map_or(Value::Nil, value::num),
    );
    let solver = serde_json::to_value(report.solver)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string));
    value::set(&mut out, "solver", value::opt_str(solver.as_deref()));
    for (name, v) in choice_fields(jp.choice.as_ref()) {
        value::set(&mut out, name, v);
    }
    let alts = jp
        .alternatives
        .iter()
        .map(|a| {
            let mut o = value::object(choice_fields(Some(&a.config)));
            value::set(&mut o, "why_not", Value::from(a.why_not.as_str()));
            o
        })
        .collect();
    value::set(&mut out, "alternatives", Value::Array(alts));
    Ok(out)
}

fn choice_fields(c: Option<&Config>) -> Vec<(&'static str, Value)> {
    let Some(c) = c else {
        return CHOICE.iter().map(|(n, _)| (*n, Value::Nil)).collect();
    };
    vec![
        ("cloud", Value::from(c.cloud.as_str())),
        ("region", Value::from(c.region.as_str())),
        ("zone", Value::from(c.zone.as_str())),
        ("instance_type", Value::from(c.instance_type.as_str())),
        ("capacity", Value::from(c.capacity.as_str())),
        ("accelerator", Value::from(c.accelerator.as_str())),
        ("nodes", value::num(f64::from(c.nodes))),
        ("workers", value::num(f64::from(c.workers))),
        ("price_per_hour", value::num(c.hourly)),
        ("expected_cost_usd", value::num(c.expected_cost)),
        ("expected_finish_hours", value::num(c.finish_h)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_file_is_planned_like_tern_plan_plans_it() {
        let file = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/jobs/small-t4-job.toml"
        );
        let config = value::object([
            (spec::SPEC_FILE, Value::from(file)),
            ("max_alternatives", value::num(2.0)),
        ]);
        let out = read(&config).unwrap();
        assert_eq!(value::get(&out, "placed"), Some(&Value::Boolean(true)));
        assert_eq!(
            value::string(&out, "accelerator").unwrap().as_deref(),
            Some("T4:1")
        );
        let cost = value::number(&out, "expected_cost_usd").unwrap().unwrap();
        assert!(cost > 0.0);
        let Some(Value::Array(alts)) = value::get(&out, "alternatives") else {
            panic!()
        };
        assert!(alts.len() <= 2);
        for a in alts {
            assert!(value::number(a, "expected_cost_usd").unwrap().unwrap() >= cost - 1e-9);
        }
    }
}
