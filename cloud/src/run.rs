//! What a job's workers run (`[run]` in the job spec): the command, a setup step, the
//! environment, the working directory and the agent's launcher options. `tern agent` started
//! with nothing after `--` fetches it from the controller and runs it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[run]`. Options left unset take `tern agent`'s defaults (or its flags).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunSpec {
    /// The training's command line: the spec's array as written, or `["sh", "-c", TEXT]` for a
    /// string.
    pub command: Vec<String>,
    /// Shell text run once per instance (`sh -c`, or [`RunSpec::shell`]) before the training
    /// first starts there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    /// The shell that runs `setup` and a string `command` (default `sh`; SkyPilot tasks:
    /// `bash`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// Node variables the agent exports besides tern's own: `skypilot` sets
    /// `SKYPILOT_NODE_RANK`, `SKYPILOT_NODE_IPS`, `SKYPILOT_NUM_NODES` and
    /// `SKYPILOT_NUM_GPUS_PER_NODE`, as SkyPilot tasks' scripts read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_env: Option<String>,
    /// Longest the setup may take, seconds (default [`DEFAULT_SETUP_TIMEOUT_S`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_timeout_s: Option<f64>,
    /// Environment of the setup and the training. Values may be secrets: shown only to the
    /// job's team, its agents and admins, and never logged.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Where the setup and the training run, on the worker (relative: to the agent's own
    /// working directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// `torchrun` (the default) or `none` (the command as written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nproc_per_node: Option<u32>,
    /// Extra torchrun `--rdzv-conf` settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdzv_conf: Option<String>,
    /// `SIGTERM`, `SIGINT`, `SIGHUP`, `SIGQUIT`, `SIGUSR1` or `SIGUSR2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_signal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_grace_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang_timeout_s: Option<f64>,
}

/// How long a setup may take when the spec does not say: 30 minutes (package installs, a
/// dataset download).
pub const DEFAULT_SETUP_TIMEOUT_S: f64 = 1800.0;

/// What stands for an env value in views for callers that may not read it.
pub const REDACTED: &str = "<redacted>";

/// The signals `[run] checkpoint_signal` may name (as `tern agent --checkpoint-signal` takes
/// them).
pub const SIGNALS: &[&str] = &[
    "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2",
];

impl RunSpec {
    /// The same, its env values replaced by [`REDACTED`] (the names stay).
    pub fn redacted(&self) -> RunSpec {
        let mut r = self.clone();
        for v in r.env.values_mut() {
            *v = REDACTED.to_string();
        }
        r
    }
}

/// A portable environment variable name: a letter or `_`, then letters, digits and `_`.
pub fn check_env_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') && name.len() <= 256 {
        Ok(())
    } else {
        Err(format!("{name:?}"))
    }
}

/// A signal name as `[run] checkpoint_signal` takes it (`SIGUSR1`, `usr1`), in its canonical
/// spelling.
pub fn check_signal(name: &str) -> Option<&'static str> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS.iter().copied().find(|s| s[3..] == *bare)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_are_portable_shell_names() {
        assert!(check_env_name("HF_HOME").is_ok());
        assert!(check_env_name("_x1").is_ok());
        for bad in ["", "1X", "A=B", "A-B", "A B", "É"] {
            assert!(check_env_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn signals_are_read_in_any_spelling_and_unknown_ones_refused() {
        assert_eq!(check_signal("usr1"), Some("SIGUSR1"));
        assert_eq!(check_signal("SIGTERM"), Some("SIGTERM"));
        assert_eq!(check_signal("SIGKILL"), None);
        assert_eq!(check_signal("TERMINATE"), None);
    }

    #[test]
    fn a_redacted_run_keeps_the_names_and_hides_the_values() {
        let mut r = RunSpec {
            command: vec!["train".into()],
            ..RunSpec::default()
        };
        r.env.insert("WANDB_API_KEY".into(), "secret".into());
        let shown = r.redacted();
        assert_eq!(shown.env["WANDB_API_KEY"], REDACTED);
        assert_eq!(shown.command, r.command);
    }
}
