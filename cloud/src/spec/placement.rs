//! Where a job may run ([`Constraints`]): clouds, regions, zones, exclusions, the data's
//! region, a price cap, the capacity rule, the per-VM shape (instance types, vCPUs, memory,
//! accelerators per VM) and `[[any_of]]` alternatives.

use toml::Value;

use super::sections::{describe, positive_u32, string_list};
use super::{Cx, Fields, SpecError};
use crate::{Amount, CapacityRule, Cloud, Constraints, DataLocation};

/// What an `[[any_of]]` entry may say: a placement, without the job-wide `data` and nested
/// alternatives, plus which of the job's accelerators it takes.
const ANY_OF_FIELDS: &[&str] = &[
    "clouds",
    "regions",
    "zones",
    "exclude",
    "max_price_per_hour",
    "capacity",
    "instance_types",
    "cpus",
    "memory",
    "gpus_per_node",
    "accelerators",
];

/// The placement fields of the top level. Region and zone names are checked against the
/// catalog where one is known (admission, `tern plan`); here only their form.
pub(super) fn parse_constraints(
    cx: &Cx<'_>,
    top: &mut Fields<'_, '_>,
    accelerators: &[String],
) -> Result<Constraints, SpecError> {
    let mut c = parse_placement(cx, top)?;
    if let Some(t) = top.table("data")? {
        let mut f = Fields::new(cx, "data", t, &["region", "size_gb"])?;
        let region = f
            .label("region")?
            .ok_or_else(|| cx.missing("data.region", "the region the data lives in"))?;
        let size_gb = f
            .number("size_gb")?
            .ok_or_else(|| cx.missing("data.size_gb", "the data's size in GB"))?;
        c.data = Some(DataLocation { region, size_gb });
    }
    if let Some((p, v)) = top.get("any_of") {
        c.any_of = parse_any_of(cx, &p, v, accelerators)?;
    }
    Ok(c)
}

/// `[[any_of]]`: each entry a placement; the job may run where one of them allows.
fn parse_any_of(
    cx: &Cx<'_>,
    p: &str,
    v: &Value,
    accelerators: &[String],
) -> Result<Vec<Constraints>, SpecError> {
    let items = match v {
        Value::Array(a) if !a.is_empty() => a,
        other => {
            return Err(cx.invalid(
                p,
                "a non-empty array of [[any_of]] tables",
                &describe(other),
            ));
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let prefix = format!("{p}[{i}]");
        let Value::Table(t) = item else {
            return Err(cx.invalid(&prefix, "a table", &describe(item)));
        };
        let mut f = Fields::new(cx, &prefix, t, ANY_OF_FIELDS)?;
        let mut c = parse_placement(cx, &mut f)?;
        if let Some((p, v)) = f.get("accelerators") {
            for (field, name) in string_list(cx, &p, v, "accelerator names")? {
                if !accelerators.iter().any(|a| a.eq_ignore_ascii_case(&name)) {
                    let expected = format!(
                        "one of the job's accelerators ({})",
                        accelerators.join(", ")
                    );
                    return Err(cx.invalid(&field, &expected, &format!("{name:?}")));
                }
                c.accelerators.push(name);
            }
        }
        out.push(c);
    }
    Ok(out)
}

/// The fields a top level and an `[[any_of]]` entry share.
fn parse_placement(cx: &Cx<'_>, f: &mut Fields<'_, '_>) -> Result<Constraints, SpecError> {
    let mut c = Constraints::default();
    if let Some((p, v)) = f.get("clouds") {
        for (field, name) in string_list(cx, &p, v, "cloud names")? {
            let cloud = match name.as_str() {
                "aws" => Cloud::Aws,
                "gcp" => Cloud::Gcp,
                other => {
                    let expected = "a cloud tern runs on: \"aws\" or \"gcp\"";
                    return Err(cx.invalid(&field, expected, &format!("{other:?}")));
                }
            };
            if !c.clouds.contains(&cloud) {
                c.clouds.push(cloud);
            }
        }
    }
    for (key, out) in [
        ("regions", &mut c.regions),
        ("zones", &mut c.zones),
        ("exclude", &mut c.exclude),
        ("instance_types", &mut c.instance_types),
    ] {
        if let Some((p, v)) = f.get(key) {
            for (field, g) in string_list(cx, &p, v, "name patterns")? {
                let ok = !g.is_empty()
                    && g.chars()
                        .all(|ch| ch.is_ascii_alphanumeric() || "-._*?".contains(ch));
                if !ok {
                    return Err(cx.invalid(
                        &field,
                        "a name or glob of letters, digits, `-`, `.`, `_`, `*` and `?`",
                        &format!("{g:?}"),
                    ));
                }
                out.push(g);
            }
        }
    }
    c.max_price_per_hour = f.number("max_price_per_hour")?;
    if c.max_price_per_hour == Some(0.0) {
        return Err(cx.invalid(&f.path("max_price_per_hour"), "an amount > 0", "0"));
    }
    if let Some(rule) = f.string("capacity")? {
        c.capacity = CapacityRule::ALL
            .into_iter()
            .find(|r| r.as_str() == rule)
            .ok_or_else(|| {
                cx.invalid(
                    &f.path("capacity"),
                    "\"spot-only\", \"on-demand-only\" or \"any\"",
                    &format!("{rule:?}"),
                )
            })?;
    }
    c.cpus = amount(cx, f, "cpus")?;
    c.memory_gib = amount(cx, f, "memory")?;
    if let Some(n) = f.integer("gpus_per_node")? {
        c.gpus_per_node = Some(positive_u32(cx, &f.path("gpus_per_node"), n)?);
    }
    Ok(c)
}

/// `cpus = 8` (exactly), `cpus = "8+"` (at least) or `"8"`; `memory` likewise, in GiB.
fn amount(cx: &Cx<'_>, f: &mut Fields<'_, '_>, key: &str) -> Result<Option<Amount>, SpecError> {
    let expected = "a number > 0 (exactly), or a string like \"8+\" (at least)";
    let Some((p, v)) = f.get(key) else {
        return Ok(None);
    };
    let a = match v {
        Value::Integer(i) => Some(Amount {
            value: *i as f64,
            at_least: false,
        }),
        Value::Float(x) => Some(Amount {
            value: *x,
            at_least: false,
        }),
        Value::String(s) => parse_amount(s),
        _ => None,
    };
    match a {
        Some(a) if a.value.is_finite() && a.value > 0.0 => Ok(Some(a)),
        _ => Err(cx.invalid(&p, expected, &describe(v))),
    }
}

/// `"8"` or `"8+"`.
pub(crate) fn parse_amount(s: &str) -> Option<Amount> {
    let s = s.trim();
    let (num, at_least) = match s.strip_suffix('+') {
        Some(n) => (n.trim_end(), true),
        None => (s, false),
    };
    let value: f64 = num.parse().ok()?;
    Some(Amount { value, at_least })
}
