//! What the training learns from its environment: the `TERN_*` contract (README, "Contract for
//! training scripts"), torchrun's signal settings, and the job's own `[run] env` under them;
//! the stop file the agent writes before the checkpoint signal; and [`document`], the whole
//! contract as data, which `python/tests/contract.json` copies for the Python helper's tests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::AgentConfig;
use super::progress::ProgressFile;
use super::tree;
use crate::api::wire::StartReply;

/// The names of the variables the training reads.
pub mod var {
    pub const JOB: &str = "TERN_JOB";
    pub const PROGRESS_FILE: &str = "TERN_PROGRESS_FILE";
    pub const INCARNATION: &str = "TERN_INCARNATION";
    pub const INSTANCE: &str = "TERN_INSTANCE";
    pub const CHECKPOINT_SIGNAL: &str = "TERN_CHECKPOINT_SIGNAL";
    pub const STOP_GRACE_SECONDS: &str = "TERN_STOP_GRACE_SECONDS";
    pub const STOP_FILE: &str = "TERN_STOP_FILE";
    pub const ACCELERATOR: &str = "TERN_ACCELERATOR";
    pub const GPUS_PER_NODE: &str = "TERN_GPUS_PER_NODE";
}

/// Why the agent stops the training: the stop file's `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Why {
    Notice,
    Drain,
    /// SIGTERM or SIGINT to the agent.
    Signal,
    /// Another worker of the incarnation stopped: restart as a new one.
    Restart,
    /// The job ended or left this instance.
    Over,
    /// No progress for the hang timeout.
    Hung,
}

impl Why {
    pub const ALL: [Why; 6] = [
        Why::Notice,
        Why::Drain,
        Why::Signal,
        Why::Restart,
        Why::Over,
        Why::Hung,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Why::Notice => "notice",
            Why::Drain => "drain",
            Why::Signal => "signal",
            Why::Restart => "restart",
            Why::Over => "over",
            Why::Hung => "hung",
        }
    }
}

/// The stop file: why the training is stopped, and by when (Unix seconds) it must have saved.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StopFile {
    pub reason: Why,
    pub save_by_unix: f64,
}

impl StopFile {
    /// A stop now, with `grace` to save.
    pub fn now(reason: Why, grace: Duration) -> StopFile {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        StopFile {
            reason,
            save_by_unix: (now + grace).as_secs_f64(),
        }
    }

    /// Written whole or not at all (a temporary file renamed over it); best effort: the
    /// signal still carries the stop when the file cannot be written.
    pub fn write(&self, progress: &Path) {
        let path = stop_file(progress);
        let tmp = path.with_extension("tmp");
        let Ok(body) = serde_json::to_string(self) else {
            return;
        };
        if std::fs::write(&tmp, body).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
}

/// Where the agent writes the stop file: beside the progress file.
pub(super) fn stop_file(progress: &Path) -> PathBuf {
    let mut name = progress.file_name().unwrap_or_default().to_os_string();
    name.push(".stop");
    progress.with_file_name(name)
}

/// The environment of the training's processes.
pub(super) fn training_env(
    config: &AgentConfig,
    instance: &str,
    started: &StartReply,
) -> Vec<(String, String)> {
    let sig = tree::signal_name(config.checkpoint_signal);
    let mut handled = vec!["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"];
    if !handled.contains(&sig) {
        handled.push(sig);
    }
    let mut env = config.env.clone();
    env.extend([
        (var::JOB.into(), config.job.clone()),
        (
            var::PROGRESS_FILE.into(),
            config.progress_file.display().to_string(),
        ),
        (var::INCARNATION.into(), started.incarnation.to_string()),
        (var::INSTANCE.into(), instance.to_string()),
        (var::CHECKPOINT_SIGNAL.into(), sig.to_string()),
        (
            var::STOP_GRACE_SECONDS.into(),
            format!("{}", config.stop_grace.as_secs_f64()),
        ),
        (
            var::STOP_FILE.into(),
            stop_file(&config.progress_file).display().to_string(),
        ),
        // torchrun forwards these to its workers: `PET_*` sets its `--signals-to-handle`
        // (it overwrites TORCHELASTIC_SIGNALS_TO_HANDLE with that), which older versions
        // lack and read TORCHELASTIC_SIGNALS_TO_HANDLE instead.
        ("PET_SIGNALS_TO_HANDLE".into(), handled.join(",")),
        ("TORCHELASTIC_SIGNALS_TO_HANDLE".into(), handled.join(",")),
        // torchrun's own wait between forwarding a signal and SIGKILL (30 s by default):
        // as long as the agent's grace, so the workers get all of it.
        (
            "TORCH_ELASTIC_SHUTDOWN_TIMEOUT".into(),
            config.stop_grace.as_secs_f64().ceil().to_string(),
        ),
    ]);
    if let Some(a) = &started.accelerator {
        env.push((var::ACCELERATOR.into(), a.clone()));
    }
    if let Some(g) = started.gpus_per_node {
        env.push((var::GPUS_PER_NODE.into(), g.to_string()));
    }
    if config.skypilot_env {
        env.extend(skypilot_env(started));
    }
    env
}

/// The node variables a SkyPilot task's scripts read. `SKYPILOT_NODE_IPS` lists the nodes
/// started so far, one per line in rank order: every node sees rank 0's address first, the
/// master address SkyPilot's multi-node examples take from it.
fn skypilot_env(started: &StartReply) -> Vec<(String, String)> {
    vec![
        ("SKYPILOT_NODE_RANK".into(), started.node_rank.to_string()),
        (
            "SKYPILOT_NODE_IPS".into(),
            started.node_addresses.join("\n"),
        ),
        (
            "SKYPILOT_NUM_NODES".into(),
            started.nodes.unwrap_or(1).to_string(),
        ),
        (
            "SKYPILOT_NUM_GPUS_PER_NODE".into(),
            started.gpus_per_node.unwrap_or(0).to_string(),
        ),
    ]
}

/// The contract as data, the one place the Python helper's tests read it from (a copy in
/// `python/tests/contract.json` that a test here keeps equal): each variable the training is
/// given, with who reads it and its value for a sample two-node job; the stop file's reasons
/// and an example; the progress file's fields, which of them are required, and an example.
pub fn document() -> serde_json::Value {
    let (config, started) = sample();
    let env: Vec<serde_json::Value> = training_env(&config, "i-0abc", &started)
        .into_iter()
        .map(|(name, value)| {
            let reader = if name.starts_with("TERN_") {
                "tern_train"
            } else if name.starts_with("SKYPILOT_") {
                "skypilot"
            } else {
                "torchrun"
            };
            serde_json::json!({"name": name, "value": value, "read_by": reader})
        })
        .collect();
    serde_json::json!({
        "env": env,
        "stop_file": {
            "reasons": Why::ALL,
            "example": StopFile { reason: Why::Drain, save_by_unix: 1893456000.25 },
        },
        "progress_file": {
            "required": ["samples"],
            "required_with_step_seconds": ["accelerator", "local_batch"],
            "example": ProgressFile::example(),
        },
    })
}

/// A two-node SkyPilot-style job on 8 A100s a node, as node 1 of incarnation 3 sees it.
fn sample() -> (AgentConfig, StartReply) {
    let config = AgentConfig {
        job: "bert".into(),
        progress_file: PathBuf::from("/run/tern/progress.json"),
        checkpoint_command: None,
        checkpoint_signal: rustix::process::Signal::USR1,
        stop_grace: Duration::from_secs_f64(99.5),
        notice: super::NoticeSource::Aws,
        metadata_url: String::new(),
        instance_id: None,
        interval: Duration::from_secs(5),
        argv: vec!["train.py".into()],
        launcher: super::Launcher::Torchrun,
        max_restarts: 3,
        hang_timeout: None,
        watchdog_exe: None,
        env: Vec::new(),
        workdir: None,
        setup: None,
        skypilot_env: true,
        address: None,
    };
    let started = StartReply {
        incarnation: 3,
        accelerator: Some("A100".into()),
        gpus_per_node: Some(8),
        node_rank: 1,
        nodes: Some(2),
        node_addresses: vec!["10.0.0.7".into(), "10.0.0.9".into()],
    };
    (config, started)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_training_learns_the_contract_from_its_environment() {
        let (sky, started) = sample();
        let config = AgentConfig {
            env: vec![
                ("HF_HOME".into(), "/data/hf".into()),
                ("TERN_JOB".into(), "not-this".into()),
            ],
            skypilot_env: false,
            ..sky.clone()
        };
        let env: std::collections::BTreeMap<String, String> =
            training_env(&config, "i-0abc", &started)
                .into_iter()
                .collect();
        let get = |k: &str| env.get(k).map(String::as_str);
        // The job's own env is there, and the contract's names win over it.
        assert_eq!(get("HF_HOME"), Some("/data/hf"));
        assert_eq!(get(var::JOB), Some("bert"));
        assert_eq!(get(var::INCARNATION), Some("3"));
        assert_eq!(get(var::INSTANCE), Some("i-0abc"));
        assert_eq!(get(var::CHECKPOINT_SIGNAL), Some("SIGUSR1"));
        assert_eq!(get(var::STOP_GRACE_SECONDS), Some("99.5"));
        assert_eq!(get(var::STOP_FILE), Some("/run/tern/progress.json.stop"));
        assert_eq!(get(var::ACCELERATOR), Some("A100"));
        assert_eq!(get(var::GPUS_PER_NODE), Some("8"));
        assert_eq!(
            get("SKYPILOT_NODE_RANK"),
            None,
            "only for node_env = \"skypilot\""
        );
        let env: std::collections::BTreeMap<String, String> =
            training_env(&sky, "i-0abc", &started).into_iter().collect();
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(get("SKYPILOT_NODE_RANK"), Some("1"));
        assert_eq!(get("SKYPILOT_NUM_NODES"), Some("2"));
        assert_eq!(get("SKYPILOT_NUM_GPUS_PER_NODE"), Some("8"));
        assert_eq!(get("SKYPILOT_NODE_IPS"), Some("10.0.0.7\n10.0.0.9"));
        // torchrun forwards SIGUSR1 too, and waits the whole grace before its SIGKILL.
        assert_eq!(
            get("PET_SIGNALS_TO_HANDLE"),
            Some("SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1")
        );
        assert_eq!(get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT"), Some("100"));
    }

    #[test]
    fn the_stop_file_sits_beside_the_progress_file_and_says_why_and_by_when() {
        let dir = tempfile::tempdir().unwrap();
        let progress = dir.path().join("progress.json");
        assert_eq!(stop_file(&progress), dir.path().join("progress.json.stop"));
        let before = StopFile::now(Why::Hung, Duration::ZERO).save_by_unix;
        StopFile::now(Why::Hung, Duration::from_secs(30)).write(&progress);
        let text = std::fs::read_to_string(stop_file(&progress)).unwrap();
        let read: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(read["reason"], "hung");
        let by = read["save_by_unix"].as_f64().unwrap();
        assert!(
            (before + 30.0..before + 40.0).contains(&by),
            "{by} vs {before}"
        );
        assert!(!stop_file(&progress).with_extension("tmp").exists());
    }

    /// The Python helper's tests read `python/tests/contract.json`; it must be this contract.
    /// `TERN_WRITE_CONTRACT=1 cargo test --lib the_python_helpers_contract` writes it.
    #[test]
    fn the_python_helpers_contract_is_this_one() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/python/tests/contract.json");
        let want = serde_json::to_string_pretty(&document()).unwrap() + "\n";
        if std::env::var_os("TERN_WRITE_CONTRACT").is_some() {
            std::fs::write(path, &want).unwrap();
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            have == want,
            "{path} is not the agent's contract; write it with TERN_WRITE_CONTRACT=1 \
             cargo test --lib the_python_helpers_contract, and check the helper reads it:\n{want}"
        );
        // Every variable the agent sets is in it, and its examples are what the agent reads.
        let doc = document();
        let names: Vec<&str> = doc["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        for name in [
            var::JOB,
            var::STOP_FILE,
            "SKYPILOT_NODE_IPS",
            "PET_SIGNALS_TO_HANDLE",
        ] {
            assert!(names.contains(&name), "{name} in {names:?}");
        }
        assert_eq!(doc["stop_file"]["reasons"].as_array().unwrap().len(), 6);
        let dir = tempfile::tempdir().unwrap();
        let example = dir.path().join("progress.json");
        std::fs::write(&example, doc["progress_file"]["example"].to_string()).unwrap();
        let read = super::super::progress::read_progress(&example)
            .unwrap()
            .unwrap();
        assert!(read.observation("bert").is_some(), "{read:?}");
    }
}
