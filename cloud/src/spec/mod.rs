//! Job spec files (TOML) → validated [`JobSpec`].
//!
//! The parser takes the text and the file's path (for messages) and does no IO. Every error
//! names the file, the field and what was expected, with the line when it can be located.
//! Unknown fields are errors, so a typo cannot silently drop a constraint.
//!
//! ```toml
//! name = "resnet50"            # required
//! team = "vision"              # required
//! accelerators = ["V100", "A100"]
//! deadline = "3d 4h"           # after submission, or RFC 3339 ("2026-12-01T00:00:00Z")
//! gang = true                  # default false
//! priority = 5                 # default 0
//! local_batch = 64
//! workers = { min = 4, max = 16 }   # or workers = 8
//! [work]                       # samples = N, or steps = N and batch = N
//! samples = 128_000_000
//! [checkpoint]                 # all optional: interval (duration or s), size_gb, save/restore_seconds
//! [budget]                     # total_usd and/or per_hour_usd
//! [[observation]]              # accelerator, gpus, nodes (default 1), local_batch, step_seconds[, sync_seconds]
//! [hint]                       # flops_per_sample, or params and tokens_per_sample[, params]
//! [probe]                      # max_duration, max_usd, enabled (a job nobody has measured)
//! [profile]                    # path (relative to the spec file) or placements/scalability
//!                              # (the CSV text inline, as `tern submit` sends it), accelerator[, node_type]
//! instance_types = ["p3.*"]   # per-VM shape, all optional: instance type globs,
//! cpus = "8+"                  # vCPUs ("8+" at least, 8 exactly), memory (GiB, likewise),
//! gpus_per_node = 4            # accelerators per VM, exactly
//! [[any_of]]                   # alternatives: clouds, regions, zones, exclude, capacity,
//!                              # max_price_per_hour, the shape fields, accelerators (of the job's)
//! [run]                        # command (array, or a string run by `sh -c`)[, setup, setup_timeout,
//!                              # env, workdir, launcher, nproc_per_node, rdzv_conf, checkpoint_signal,
//!                              # checkpoint_command, stop_grace, max_restarts, hang_timeout]
//! ```
//!
//! Names (`name`, `team`) follow [`crate::name::NAME_RULE`]; labels (accelerators, node types)
//! may hold no control characters; a relative deadline is at most [`MAX_DEADLINE_S`] away.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use toml::Value;
use toml::de::{DeTable, DeValue};

use crate::job::{
    Budget, CheckpointSpec, Deadline, JobSpec, ModelHint, ObservedStep, ProbeSpec, ProfileRef,
    Work, WorkerRange,
};
use crate::name::{NAME_RULE, check_label, check_name};

mod placement;
mod run;
mod sections;
pub use sections::parse_duration;
use sections::*;

/// The furthest deadline a spec may set: ten years (365-day years). Later ones are typos, and
/// would otherwise be clamped silently to the end of representable time.
pub const MAX_DEADLINE_S: u64 = 10 * 365 * 86_400;

/// Where an error is: `file` or `file:line`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Location {
    pub file: String,
    pub line: Option<usize>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{l}", self.file),
            None => f.write_str(&self.file),
        }
    }
}

/// Why a job spec was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("{at}: not valid TOML: {msg}")]
    Syntax { at: Location, msg: String },
    #[error("{at}: `{field}`: expected {expected}, found {found}")]
    Invalid {
        at: Location,
        field: String,
        expected: String,
        found: String,
    },
    #[error("{at}: missing field `{field}`: expected {expected}")]
    Missing {
        at: Location,
        field: String,
        expected: String,
    },
    #[error("{at}: unknown field `{field}` (allowed here: {allowed})")]
    Unknown {
        at: Location,
        field: String,
        allowed: String,
    },
    /// A field tern knows but cannot honour (a SkyPilot task's `ports`, `image_id: docker:…`).
    #[error("{at}: `{field}` is not supported: {why}")]
    Unsupported {
        at: Location,
        field: String,
        why: String,
    },
}

/// Parses and validates a job spec. `path` is only used in messages.
pub fn parse_job_spec(text: &str, path: &str) -> Result<JobSpec, SpecError> {
    let root: toml::Table = toml::from_str(text).map_err(|e| SpecError::Syntax {
        at: Location {
            file: path.to_string(),
            line: e.span().map(|s| line_at(text, s.start)),
        },
        msg: e.message().trim().to_string(),
    })?;
    let lines = key_lines(text);
    let cx = Cx {
        file: path,
        lines: &lines,
    };
    let mut top = Fields::new(&cx, "", &root, TOP_FIELDS)?;
    let name = top
        .string("name")?
        .ok_or_else(|| cx.missing("name", "a job name"))?;
    check_name(&name).map_err(|found| cx.invalid("name", NAME_RULE, &found))?;
    let team = top
        .string("team")?
        .ok_or_else(|| cx.missing("team", "a team name"))?;
    check_name(&team).map_err(|found| cx.invalid("team", NAME_RULE, &found))?;
    let work = parse_work(&cx, top.table("work")?)?;
    let deadline = match top.get("deadline") {
        None => None,
        Some(v) => Some(parse_deadline(&cx, v)?),
    };
    let accelerators = parse_accelerators(&cx, top.get("accelerators"))?;
    let workers = parse_workers(&cx, top.get("workers"))?;
    let gang = top.bool("gang")?.unwrap_or(false);
    let checkpoint = parse_checkpoint(&cx, top.table("checkpoint")?)?;
    let budget = parse_budget(&cx, top.table("budget")?)?;
    let priority = match top.integer("priority")? {
        None => 0,
        Some(p) => i32::try_from(p)
            .map_err(|_| cx.invalid("priority", "an integer in i32 range", &p.to_string()))?,
    };
    let local_batch = match top.integer("local_batch")? {
        None => None,
        Some(b) => Some(positive_u32(&cx, "local_batch", b)?),
    };
    let observations = parse_observations(&cx, top.get("observation"))?;
    let profile = match top.table("profile")? {
        None => None,
        Some(t) => Some(parse_profile(&cx, t)?),
    };
    let hint = parse_hint(&cx, top.table("hint")?)?;
    let probe = parse_probe(&cx, top.table("probe")?)?;
    let constraints = placement::parse_constraints(&cx, &mut top, &accelerators)?;
    let run = run::parse_run(&cx, top.table("run")?)?;
    let disk_gb = match top.integer("disk_gb")? {
        None => None,
        Some(d) if (1..=i64::from(MAX_DISK_GB)).contains(&d) => Some(d as u32),
        Some(d) => {
            let expected = format!("an integer from 1 to {MAX_DISK_GB} (GB)");
            return Err(cx.invalid("disk_gb", &expected, &d.to_string()));
        }
    };
    Ok(JobSpec {
        name,
        team,
        work,
        deadline,
        accelerators,
        workers,
        gang,
        checkpoint,
        budget,
        priority,
        local_batch,
        observations,
        profile,
        hint,
        probe,
        constraints,
        run,
        disk_gb,
    })
}

/// The largest boot disk either cloud makes (GCE's persistent disks; EBS stops at 16 TiB and
/// refuses more at launch).
pub const MAX_DISK_GB: u32 = 65_536;

const TOP_FIELDS: &[&str] = &[
    "name",
    "team",
    "work",
    "deadline",
    "accelerators",
    "workers",
    "gang",
    "checkpoint",
    "budget",
    "priority",
    "local_batch",
    "observation",
    "profile",
    "hint",
    "probe",
    "clouds",
    "regions",
    "zones",
    "exclude",
    "data",
    "max_price_per_hour",
    "capacity",
    "instance_types",
    "cpus",
    "memory",
    "gpus_per_node",
    "any_of",
    "run",
    "disk_gb",
];

/// File name and the line of every key path, for messages.
struct Cx<'a> {
    file: &'a str,
    lines: &'a BTreeMap<String, usize>,
}

impl Cx<'_> {
    fn at(&self, field: &str) -> Location {
        // Fall back to the enclosing table when the field itself is absent.
        let mut key = field.to_string();
        let line = loop {
            if let Some(l) = self.lines.get(&key) {
                break Some(*l);
            }
            match key.rfind(['.', '[']) {
                Some(i) => key.truncate(i),
                None => break None,
            }
        };
        Location {
            file: self.file.to_string(),
            line,
        }
    }
    fn invalid(&self, field: &str, expected: &str, found: &str) -> SpecError {
        SpecError::Invalid {
            at: self.at(field),
            field: field.to_string(),
            expected: expected.to_string(),
            found: found.to_string(),
        }
    }
    fn missing(&self, field: &str, expected: &str) -> SpecError {
        SpecError::Missing {
            at: self.at(field),
            field: field.to_string(),
            expected: expected.to_string(),
        }
    }
}

/// A table whose keys are checked against an allow-list.
struct Fields<'a, 'c> {
    cx: &'c Cx<'c>,
    prefix: String,
    table: &'a toml::Table,
}

impl<'a, 'c> Fields<'a, 'c> {
    fn new(
        cx: &'c Cx<'c>,
        prefix: &str,
        table: &'a toml::Table,
        allowed: &[&str],
    ) -> Result<Self, SpecError> {
        let f = Self {
            cx,
            prefix: prefix.to_string(),
            table,
        };
        if let Some(k) = table.keys().find(|k| !allowed.contains(&k.as_str())) {
            let field = f.path(k);
            return Err(SpecError::Unknown {
                at: cx.at(&field),
                field,
                allowed: allowed.join(", "),
            });
        }
        Ok(f)
    }

    fn path(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.prefix)
        }
    }

    fn get(&mut self, key: &str) -> Option<(String, &'a Value)> {
        self.table.get(key).map(|v| (self.path(key), v))
    }

    fn string(&mut self, key: &str) -> Result<Option<String>, SpecError> {
        match self.get(key) {
            None => Ok(None),
            Some((_, Value::String(s))) => Ok(Some(s.trim().to_string())),
            Some((p, v)) => Err(self.cx.invalid(&p, "a string", &describe(v))),
        }
    }

    /// A string kept as written (CSV text).
    fn text(&mut self, key: &str) -> Result<Option<String>, SpecError> {
        match self.get(key) {
            None => Ok(None),
            Some((_, Value::String(s))) => Ok(Some(s.clone())),
            Some((p, v)) => Err(self.cx.invalid(&p, "a string", &describe(v))),
        }
    }

    /// A string checked by [`check_label`]: no control characters, not too long.
    fn label(&mut self, key: &str) -> Result<Option<String>, SpecError> {
        let Some(s) = self.string(key)? else {
            return Ok(None);
        };
        check_label(&s).map_err(|found| {
            self.cx
                .invalid(&self.path(key), "a name without control characters", &found)
        })?;
        Ok(Some(s))
    }

    fn bool(&mut self, key: &str) -> Result<Option<bool>, SpecError> {
        match self.get(key) {
            None => Ok(None),
            Some((_, Value::Boolean(b))) => Ok(Some(*b)),
            Some((p, v)) => Err(self.cx.invalid(&p, "true or false", &describe(v))),
        }
    }

    fn integer(&mut self, key: &str) -> Result<Option<i64>, SpecError> {
        match self.get(key) {
            None => Ok(None),
            Some((_, Value::Integer(i))) => Ok(Some(*i)),
            Some((p, v)) => Err(self.cx.invalid(&p, "an integer", &describe(v))),
        }
    }

    /// A finite number ≥ 0 (integers accepted).
    fn number(&mut self, key: &str) -> Result<Option<f64>, SpecError> {
        let (p, x) = match self.get(key) {
            None => return Ok(None),
            Some((p, Value::Integer(i))) => (p, *i as f64),
            Some((p, Value::Float(x))) => (p, *x),
            Some((p, v)) => return Err(self.cx.invalid(&p, "a number", &describe(v))),
        };
        if !x.is_finite() || x < 0.0 {
            return Err(self.cx.invalid(&p, "a finite number ≥ 0", &x.to_string()));
        }
        Ok(Some(x))
    }

    fn table(&mut self, key: &str) -> Result<Option<&'a toml::Table>, SpecError> {
        match self.get(key) {
            None => Ok(None),
            Some((_, Value::Table(t))) => Ok(Some(t)),
            Some((p, v)) => Err(self.cx.invalid(&p, "a table", &describe(v))),
        }
    }
}

/// 1-based line of a byte offset.
fn line_at(text: &str, offset: usize) -> usize {
    LineIndex::new(text).line(offset)
}

/// Byte offsets where lines start, so finding a line is a binary search, not a scan: specs with
/// tens of thousands of keys stay linear to parse.
struct LineIndex(Vec<usize>);

impl LineIndex {
    fn new(text: &str) -> LineIndex {
        let starts = std::iter::once(0)
            .chain(
                text.bytes()
                    .enumerate()
                    .filter(|(_, b)| *b == b'\n')
                    .map(|(i, _)| i + 1),
            )
            .collect();
        LineIndex(starts)
    }

    /// 1-based line of `offset`.
    fn line(&self, offset: usize) -> usize {
        self.0.partition_point(|&start| start <= offset).max(1)
    }
}

/// Line of every key path (`work.samples`, `observation[1].gpus`), from the spanned parser.
fn key_lines(text: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    if let Ok(t) = DeTable::parse(text) {
        walk(&LineIndex::new(text), "", t.get_ref(), &mut out);
    }
    out
}

fn walk(lines: &LineIndex, prefix: &str, t: &DeTable<'_>, out: &mut BTreeMap<String, usize>) {
    for (k, v) in t {
        let path = if prefix.is_empty() {
            k.get_ref().to_string()
        } else {
            format!("{prefix}.{}", k.get_ref())
        };
        out.insert(path.clone(), lines.line(k.span().start));
        match v.get_ref() {
            DeValue::Table(inner) => walk(lines, &path, inner, out),
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    out.insert(p.clone(), lines.line(item.span().start));
                    if let DeValue::Table(inner) = item.get_ref() {
                        walk(lines, &p, inner, out);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
