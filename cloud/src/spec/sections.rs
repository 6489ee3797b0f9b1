//! One parser per section of a job spec (`[work]`, `[checkpoint]`, `[hint]`, `[probe]`,
//! `[budget]`, `[profile]`, `[[observation]]`; the placement constraints are in `placement.rs`)
//! and the typed field readers they share; `mod.rs` walks the top level and calls them.

use super::*;

pub(super) fn describe(v: &Value) -> String {
    match v {
        Value::String(s) => format!("the string {s:?}"),
        Value::Integer(i) => format!("the integer {i}"),
        Value::Float(x) => format!("the number {x}"),
        Value::Boolean(b) => format!("{b}"),
        Value::Datetime(d) => format!("the datetime {d}"),
        Value::Array(_) => "an array".to_string(),
        Value::Table(_) => "a table".to_string(),
    }
}

pub(super) fn positive_u32(cx: &Cx<'_>, field: &str, v: i64) -> Result<u32, SpecError> {
    u32::try_from(v)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| cx.invalid(field, "an integer ≥ 1", &v.to_string()))
}

pub(super) fn positive_u64(cx: &Cx<'_>, field: &str, v: i64) -> Result<u64, SpecError> {
    u64::try_from(v)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| cx.invalid(field, "an integer ≥ 1", &v.to_string()))
}

pub(super) fn parse_profile(cx: &Cx<'_>, t: &toml::Table) -> Result<ProfileRef, SpecError> {
    const EXPECTED: &str = "`path` (a profile folder) or the CSV text in `placements` and/or \
                            `scalability`";
    let mut f = Fields::new(
        cx,
        "profile",
        t,
        &[
            "path",
            "placements",
            "scalability",
            "accelerator",
            "node_type",
        ],
    )?;
    let path = f.string("path")?;
    let placements = f.text("placements")?;
    let scalability = f.text("scalability")?;
    let inline = placements.is_some() || scalability.is_some();
    match (&path, inline) {
        (None, false) => return Err(cx.missing("profile.path", EXPECTED)),
        (Some(_), true) => {
            return Err(cx.invalid("profile.path", EXPECTED, "both a path and inline CSV"));
        }
        _ => {}
    }
    let accelerator = f
        .label("accelerator")?
        .ok_or_else(|| cx.missing("profile.accelerator", "the accelerator it was measured on"))?;
    let node_type = f.label("node_type")?;
    Ok(ProfileRef {
        path,
        placements,
        scalability,
        accelerator,
        node_type,
    })
}

pub(super) fn parse_work(cx: &Cx<'_>, t: Option<&toml::Table>) -> Result<Work, SpecError> {
    const EXPECTED: &str = "`samples = N`, or `steps = N` and `batch = N` (global batch)";
    let t = t.ok_or_else(|| cx.missing("work", &format!("a [work] table with {EXPECTED}")))?;
    let mut f = Fields::new(cx, "work", t, &["samples", "steps", "batch"])?;
    match (
        f.integer("samples")?,
        f.integer("steps")?,
        f.integer("batch")?,
    ) {
        (Some(s), None, None) => Ok(Work::Samples(positive_u64(cx, "work.samples", s)?)),
        (None, Some(steps), Some(batch)) => Ok(Work::Steps {
            steps: positive_u64(cx, "work.steps", steps)?,
            batch: positive_u64(cx, "work.batch", batch)?,
        }),
        (None, Some(_), None) => Err(cx.missing("work.batch", "the global batch size per step")),
        (None, None, Some(_)) => Err(cx.missing("work.steps", "the number of optimiser steps")),
        (None, None, None) => Err(cx.missing("work.samples", EXPECTED)),
        _ => Err(cx.invalid("work", EXPECTED, "both `samples` and `steps`/`batch`")),
    }
}

pub(super) fn parse_deadline(cx: &Cx<'_>, (p, v): (String, &Value)) -> Result<Deadline, SpecError> {
    const EXPECTED: &str =
        "a duration after submission like \"52h\" or \"3d 4h\", or an RFC 3339 time";
    let text = match v {
        Value::String(s) => s.trim().to_string(),
        Value::Datetime(d) => d.to_string(),
        other => return Err(cx.invalid(&p, EXPECTED, &describe(other))),
    };
    if let Ok(t) = DateTime::parse_from_rfc3339(&text) {
        return Ok(Deadline::At(t.with_timezone(&Utc)));
    }
    match parse_duration(&text) {
        Some(0) => Err(cx.invalid(&p, "a duration > 0", &format!("{text:?}"))),
        Some(s) if s > MAX_DEADLINE_S => Err(cx.invalid(
            &p,
            "a duration of at most 10 years (3650d)",
            &format!("{text:?}"),
        )),
        Some(s) => Ok(Deadline::AfterSeconds(s)),
        None => Err(cx.invalid(&p, EXPECTED, &format!("{text:?}"))),
    }
}

/// `"3d 4h"`, `"52h"`, `"90m"`, `"1w"`, `"1h30m"`, `"45s"` → seconds. `None` if malformed.
pub fn parse_duration(text: &str) -> Option<u64> {
    let mut total: u64 = 0;
    let mut num = String::new();
    let mut any = false;
    for c in text.chars().filter(|c| !c.is_whitespace()) {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let unit: u64 = match c {
            'w' => 7 * 86_400,
            'd' => 86_400,
            'h' => 3_600,
            'm' => 60,
            's' => 1,
            _ => return None,
        };
        let n: u64 = num.parse().ok()?;
        total = total.checked_add(n.checked_mul(unit)?)?;
        num.clear();
        any = true;
    }
    (any && num.is_empty()).then_some(total)
}

pub(super) fn parse_accelerators(
    cx: &Cx<'_>,
    v: Option<(String, &Value)>,
) -> Result<Vec<String>, SpecError> {
    const EXPECTED: &str = "a non-empty array of accelerator names like [\"A100\", \"T4\"]";
    let (p, v) = v.ok_or_else(|| cx.missing("accelerators", EXPECTED))?;
    let items = match v {
        Value::Array(a) if !a.is_empty() => a,
        other => return Err(cx.invalid(&p, EXPECTED, &describe(other))),
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let field = format!("{p}[{i}]");
        match item {
            Value::String(s)
                if check_label(s).is_ok()
                    && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') =>
            {
                if out.contains(s) {
                    return Err(cx.invalid(&field, "no duplicates", &format!("{s:?} twice")));
                }
                out.push(s.clone());
            }
            other => {
                return Err(cx.invalid(
                    &field,
                    "an accelerator name of letters, digits and `-` (\"A100-80GB\", \"tpu-v5p-8\")",
                    &describe(other),
                ));
            }
        }
    }
    Ok(out)
}

pub(super) fn parse_workers(
    cx: &Cx<'_>,
    v: Option<(String, &Value)>,
) -> Result<WorkerRange, SpecError> {
    const EXPECTED: &str = "`workers = N` or `workers = { min = N, max = M }` with 1 ≤ N ≤ M";
    let (p, v) = v.ok_or_else(|| cx.missing("workers", EXPECTED))?;
    let range = match v {
        Value::Integer(n) => {
            let n = positive_u32(cx, &p, *n)?;
            WorkerRange { min: n, max: n }
        }
        Value::Table(t) => {
            let mut f = Fields::new(cx, &p, t, &["min", "max"])?;
            let min = f
                .integer("min")?
                .ok_or_else(|| cx.missing("workers.min", EXPECTED))?;
            let max = f
                .integer("max")?
                .ok_or_else(|| cx.missing("workers.max", EXPECTED))?;
            WorkerRange {
                min: positive_u32(cx, "workers.min", min)?,
                max: positive_u32(cx, "workers.max", max)?,
            }
        }
        other => return Err(cx.invalid(&p, EXPECTED, &describe(other))),
    };
    if range.min > range.max {
        return Err(cx.invalid(
            &p,
            "min ≤ max",
            &format!("min = {}, max = {}", range.min, range.max),
        ));
    }
    Ok(range)
}

pub(super) fn parse_checkpoint(
    cx: &Cx<'_>,
    t: Option<&toml::Table>,
) -> Result<CheckpointSpec, SpecError> {
    let mut c = CheckpointSpec::default();
    let Some(t) = t else { return Ok(c) };
    let mut f = Fields::new(
        cx,
        "checkpoint",
        t,
        &["interval", "size_gb", "save_seconds", "restore_seconds"],
    )?;
    if let Some((p, v)) = f.get("interval") {
        c.interval_s = positive_seconds(cx, &p, v, "30m")?;
    }
    if let Some(x) = f.number("size_gb")? {
        c.size_gb = x;
    }
    if let Some(x) = f.number("save_seconds")? {
        c.save_s = x;
    }
    if let Some(x) = f.number("restore_seconds")? {
        c.restore_s = x;
    }
    Ok(c)
}

/// `[hint]`: `flops_per_sample`, or `params` with `tokens_per_sample` (6 · params · tokens,
/// the usual transformer count); `params` alone sizes the all-reduce.
pub(super) fn parse_hint(
    cx: &Cx<'_>,
    t: Option<&toml::Table>,
) -> Result<Option<ModelHint>, SpecError> {
    let Some(t) = t else { return Ok(None) };
    let mut f = Fields::new(
        cx,
        "hint",
        t,
        &["flops_per_sample", "params", "tokens_per_sample"],
    )?;
    let flops = f.number("flops_per_sample")?;
    let params = f.number("params")?;
    let tokens = f.number("tokens_per_sample")?;
    for (name, v) in [
        ("hint.flops_per_sample", flops),
        ("hint.params", params),
        ("hint.tokens_per_sample", tokens),
    ] {
        if v == Some(0.0) {
            return Err(cx.invalid(name, "a number > 0", "0"));
        }
    }
    let flops_per_sample = match (flops, params, tokens) {
        (Some(f), _, None) => f,
        (None, Some(p), Some(t)) => 6.0 * p * t,
        (Some(_), _, Some(_)) => {
            return Err(cx.invalid(
                "hint.tokens_per_sample",
                "either `flops_per_sample` or `params` with `tokens_per_sample`, not both",
                "both",
            ));
        }
        (None, _, _) => {
            return Err(cx.missing(
                "hint.flops_per_sample",
                "`flops_per_sample`, or `params` and `tokens_per_sample`",
            ));
        }
    };
    Ok(Some(ModelHint {
        flops_per_sample,
        params,
    }))
}

/// `[probe]`: `max_duration` (a duration or seconds), `max_usd`, `enabled`.
pub(super) fn parse_probe(cx: &Cx<'_>, t: Option<&toml::Table>) -> Result<ProbeSpec, SpecError> {
    let Some(t) = t else {
        return Ok(ProbeSpec::default());
    };
    let mut f = Fields::new(cx, "probe", t, &["max_duration", "max_usd", "enabled"])?;
    let max_seconds = match f.get("max_duration") {
        None => None,
        Some((p, v)) => Some(positive_seconds(cx, &p, v, "10m")?),
    };
    let max_usd = f.number("max_usd")?;
    if max_usd == Some(0.0) {
        return Err(cx.invalid("probe.max_usd", "an amount > 0", "0"));
    }
    Ok(ProbeSpec {
        max_seconds,
        max_usd,
        enabled: f.bool("enabled")?,
    })
}

/// A duration > 0 in seconds: a string like `example` (`"30m"`, `"1h 30m"`) or a number.
pub(super) fn positive_seconds(
    cx: &Cx<'_>,
    p: &str,
    v: &Value,
    example: &str,
) -> Result<f64, SpecError> {
    let expected = |what: &str| format!("a duration like \"{example}\" or seconds{what}");
    match v {
        Value::String(s) => parse_duration(s)
            .filter(|s| *s > 0)
            .map(|s| s as f64)
            .ok_or_else(|| cx.invalid(p, &expected(""), &describe(v))),
        Value::Integer(i) if *i > 0 => Ok(*i as f64),
        Value::Float(x) if x.is_finite() && *x > 0.0 => Ok(*x),
        other => Err(cx.invalid(p, &expected(" > 0"), &describe(other))),
    }
}

pub(super) fn parse_budget(cx: &Cx<'_>, t: Option<&toml::Table>) -> Result<Budget, SpecError> {
    let Some(t) = t else {
        return Ok(Budget::default());
    };
    let mut f = Fields::new(cx, "budget", t, &["total_usd", "per_hour_usd"])?;
    let b = Budget {
        total_usd: f.number("total_usd")?,
        per_hour_usd: f.number("per_hour_usd")?,
    };
    for (name, v) in [
        ("budget.total_usd", b.total_usd),
        ("budget.per_hour_usd", b.per_hour_usd),
    ] {
        if v == Some(0.0) {
            return Err(cx.invalid(name, "an amount > 0", "0"));
        }
    }
    if b.total_usd.is_none() && b.per_hour_usd.is_none() {
        return Err(cx.missing("budget.total_usd", "`total_usd` and/or `per_hour_usd`"));
    }
    Ok(b)
}

/// A non-empty array of strings, each with its field path.
pub(super) fn string_list(
    cx: &Cx<'_>,
    path: &str,
    v: &Value,
    what: &str,
) -> Result<Vec<(String, String)>, SpecError> {
    let expected = format!("a non-empty array of {what}");
    let items = match v {
        Value::Array(a) if !a.is_empty() => a,
        other => return Err(cx.invalid(path, &expected, &describe(other))),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let field = format!("{path}[{i}]");
            match item {
                Value::String(s) => Ok((field, s.trim().to_string())),
                other => Err(cx.invalid(&field, "a string", &describe(other))),
            }
        })
        .collect()
}

pub(super) fn parse_observations(
    cx: &Cx<'_>,
    v: Option<(String, &Value)>,
) -> Result<Vec<ObservedStep>, SpecError> {
    let Some((p, v)) = v else {
        return Ok(Vec::new());
    };
    let items = match v {
        Value::Array(a) => a,
        other => {
            return Err(cx.invalid(&p, "[[observation]] tables", &describe(other)));
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let prefix = format!("observation[{i}]");
        let Value::Table(t) = item else {
            return Err(cx.invalid(&prefix, "a table", &describe(item)));
        };
        let mut f = Fields::new(
            cx,
            &prefix,
            t,
            &[
                "accelerator",
                "gpus",
                "nodes",
                "local_batch",
                "step_seconds",
                "sync_seconds",
            ],
        )?;
        let field = |k: &str| format!("{prefix}.{k}");
        let accelerator = f
            .label("accelerator")?
            .ok_or_else(|| cx.missing(&field("accelerator"), "an accelerator name"))?;
        let gpus = f
            .integer("gpus")?
            .ok_or_else(|| cx.missing(&field("gpus"), "the number of GPUs (replicas)"))?;
        let gpus = positive_u32(cx, &field("gpus"), gpus)?;
        let nodes = match f.integer("nodes")? {
            None => 1,
            Some(n) => positive_u32(cx, &field("nodes"), n)?,
        };
        if nodes > gpus {
            return Err(cx.invalid(
                &field("nodes"),
                &format!("at most gpus = {gpus}"),
                &nodes.to_string(),
            ));
        }
        let lb = f
            .integer("local_batch")?
            .ok_or_else(|| cx.missing(&field("local_batch"), "the per-GPU batch size"))?;
        let local_batch = positive_u32(cx, &field("local_batch"), lb)?;
        let step_seconds = f
            .number("step_seconds")?
            .ok_or_else(|| cx.missing(&field("step_seconds"), "seconds per step"))?;
        if step_seconds <= 0.0 {
            return Err(cx.invalid(&field("step_seconds"), "seconds > 0", "0"));
        }
        let sync_seconds = f.number("sync_seconds")?;
        out.push(ObservedStep {
            accelerator,
            gpus,
            nodes,
            local_batch,
            step_seconds,
            sync_seconds,
        });
    }
    Ok(out)
}
