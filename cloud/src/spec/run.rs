//! `[run]`: what the job's workers run ([`RunSpec`]).

use toml::Value;

use super::sections::{describe, positive_seconds, positive_u32};
use super::{Cx, Fields, SpecError};
use crate::run::{RunSpec, check_env_name, check_signal};

const RUN_FIELDS: &[&str] = &[
    "command",
    "setup",
    "shell",
    "node_env",
    "setup_timeout",
    "env",
    "workdir",
    "launcher",
    "nproc_per_node",
    "rdzv_conf",
    "checkpoint_signal",
    "checkpoint_command",
    "stop_grace",
    "max_restarts",
    "hang_timeout",
];

/// `[run]`, when the spec has one.
pub(super) fn parse_run(
    cx: &Cx<'_>,
    t: Option<&toml::Table>,
) -> Result<Option<RunSpec>, SpecError> {
    let Some(t) = t else {
        return Ok(None);
    };
    let mut f = Fields::new(cx, "run", t, RUN_FIELDS)?;
    let shell = match f.string("shell")? {
        None => None,
        Some(s) if !s.is_empty() && !s.contains(char::is_whitespace) && !s.contains('\0') => {
            Some(s)
        }
        Some(s) => {
            return Err(cx.invalid(
                "run.shell",
                "a program name or path, like \"bash\"",
                &format!("{s:?}"),
            ));
        }
    };
    let node_env = match f.string("node_env")? {
        None => None,
        Some(s) if s == "skypilot" => Some(s),
        Some(s) => return Err(cx.invalid("run.node_env", "\"skypilot\"", &format!("{s:?}"))),
    };
    let command = match f.get("command") {
        None => {
            return Err(cx.missing(
                "run.command",
                "the training's command: an array of strings, or a string run by `sh -c`",
            ));
        }
        Some((p, v)) => parse_command(cx, &p, v, shell.as_deref().unwrap_or("sh"))?,
    };
    let text = |f: &mut Fields<'_, '_>, key: &str| -> Result<Option<String>, SpecError> {
        let s = f.text(key)?;
        match s {
            Some(s) if s.contains('\0') => Err(cx.invalid(
                &format!("run.{key}"),
                "text without NUL characters",
                "a NUL character",
            )),
            other => Ok(other),
        }
    };
    let setup = text(&mut f, "setup")?.filter(|s| !s.trim().is_empty());
    let workdir = text(&mut f, "workdir")?;
    let rdzv_conf = text(&mut f, "rdzv_conf")?;
    let checkpoint_command = text(&mut f, "checkpoint_command")?;
    let launcher = match f.string("launcher")? {
        None => None,
        Some(l) if l == "torchrun" || l == "none" => Some(l),
        Some(l) => {
            return Err(cx.invalid(
                "run.launcher",
                "\"torchrun\" or \"none\"",
                &format!("{l:?}"),
            ));
        }
    };
    let nproc_per_node = match f.integer("nproc_per_node")? {
        None => None,
        Some(n) => Some(positive_u32(cx, "run.nproc_per_node", n)?),
    };
    let checkpoint_signal = match f.string("checkpoint_signal")? {
        None => None,
        Some(s) => Some(
            check_signal(&s)
                .ok_or_else(|| {
                    cx.invalid(
                        "run.checkpoint_signal",
                        "SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 or SIGUSR2",
                        &format!("{s:?}"),
                    )
                })?
                .to_string(),
        ),
    };
    let max_restarts = match f.integer("max_restarts")? {
        None => None,
        Some(n) => Some(
            u32::try_from(n)
                .map_err(|_| cx.invalid("run.max_restarts", "an integer ≥ 0", &n.to_string()))?,
        ),
    };
    let seconds = |f: &mut Fields<'_, '_>, key: &str, example: &str| match f.get(key) {
        None => Ok(None),
        Some((p, v)) => positive_seconds(cx, &p, v, example).map(Some),
    };
    Ok(Some(RunSpec {
        command,
        setup,
        shell,
        node_env,
        setup_timeout_s: seconds(&mut f, "setup_timeout", "30m")?,
        env: parse_env(cx, f.table("env")?)?,
        workdir,
        launcher,
        nproc_per_node,
        rdzv_conf,
        checkpoint_signal,
        checkpoint_command,
        stop_grace_s: seconds(&mut f, "stop_grace", "90s")?,
        max_restarts,
        hang_timeout_s: seconds(&mut f, "hang_timeout", "10m")?,
    }))
}

/// `command`: a non-empty array of strings, or one string run by `shell -c`.
fn parse_command(cx: &Cx<'_>, p: &str, v: &Value, shell: &str) -> Result<Vec<String>, SpecError> {
    let expected = "an array of strings (the command line), or a string run by `sh -c`";
    let argv: Vec<String> = match v {
        Value::String(s) if !s.trim().is_empty() => vec![shell.into(), "-c".into(), s.clone()],
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(cx.invalid(&format!("{p}[{i}]"), "a string", &describe(other))),
            })
            .collect::<Result<_, _>>()?,
        other => return Err(cx.invalid(p, expected, &describe(other))),
    };
    if argv[0].trim().is_empty() {
        return Err(cx.invalid(p, "a program name first", "an empty string"));
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(cx.invalid(p, "strings without NUL characters", "a NUL character"));
    }
    Ok(argv)
}

/// `env`: a table of strings whose names are portable shell names. Values are never echoed in
/// an error (they may be secrets).
fn parse_env(
    cx: &Cx<'_>,
    t: Option<&toml::Table>,
) -> Result<std::collections::BTreeMap<String, String>, SpecError> {
    let mut out = std::collections::BTreeMap::new();
    let Some(t) = t else {
        return Ok(out);
    };
    for (name, v) in t {
        let field = format!("run.env.{name}");
        check_env_name(name).map_err(|found| {
            cx.invalid(
                &field,
                "a variable name: a letter or `_`, then letters, digits or `_`",
                &found,
            )
        })?;
        match v {
            Value::String(s) if !s.contains('\0') => {
                out.insert(name.clone(), s.clone());
            }
            Value::String(_) => {
                return Err(cx.invalid(
                    &field,
                    "a string without NUL characters",
                    "a NUL character",
                ));
            }
            other => return Err(cx.invalid(&field, "a string", &describe(other))),
        }
    }
    Ok(out)
}
