//! What the training learns from its environment: the `TERN_*` contract (README, "Contract for
//! training scripts"), torchrun's signal settings, and the job's own `[run] env` under them.

use std::path::PathBuf;

use super::AgentConfig;
use super::tree;
use crate::api::wire::StartReply;

/// Where the agent writes the stop file: beside the progress file.
pub(super) fn stop_file(progress: &std::path::Path) -> PathBuf {
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
        ("TERN_JOB".into(), config.job.clone()),
        (
            "TERN_PROGRESS_FILE".into(),
            config.progress_file.display().to_string(),
        ),
        ("TERN_INCARNATION".into(), started.incarnation.to_string()),
        ("TERN_INSTANCE".into(), instance.to_string()),
        ("TERN_CHECKPOINT_SIGNAL".into(), sig.to_string()),
        (
            "TERN_STOP_GRACE_SECONDS".into(),
            format!("{}", config.stop_grace.as_secs_f64()),
        ),
        (
            "TERN_STOP_FILE".into(),
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
        env.push(("TERN_ACCELERATOR".into(), a.clone()));
    }
    if let Some(g) = started.gpus_per_node {
        env.push(("TERN_GPUS_PER_NODE".into(), g.to_string()));
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rustix::process::Signal;

    use super::*;
    use crate::agent::{Launcher, NoticeSource};

    #[test]
    fn the_training_learns_the_contract_from_its_environment() {
        let config = AgentConfig {
            job: "bert".into(),
            progress_file: PathBuf::from("/run/tern/progress.json"),
            checkpoint_command: None,
            checkpoint_signal: Signal::USR1,
            stop_grace: Duration::from_secs_f64(99.5),
            notice: NoticeSource::Aws,
            metadata_url: String::new(),
            instance_id: None,
            interval: Duration::from_secs(5),
            argv: vec!["train.py".into()],
            launcher: Launcher::Torchrun,
            max_restarts: 3,
            hang_timeout: None,
            watchdog_exe: None,
            env: vec![
                ("HF_HOME".into(), "/data/hf".into()),
                ("TERN_JOB".into(), "not-this".into()),
            ],
            workdir: None,
            setup: None,
            skypilot_env: false,
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
        let env: std::collections::BTreeMap<String, String> =
            training_env(&config, "i-0abc", &started)
                .into_iter()
                .collect();
        let get = |k: &str| env.get(k).map(String::as_str);
        // The job's own env is there, and the contract's names win over it.
        assert_eq!(get("HF_HOME"), Some("/data/hf"));
        assert_eq!(get("TERN_JOB"), Some("bert"));
        assert_eq!(get("TERN_INCARNATION"), Some("3"));
        assert_eq!(get("TERN_INSTANCE"), Some("i-0abc"));
        assert_eq!(get("TERN_CHECKPOINT_SIGNAL"), Some("SIGUSR1"));
        assert_eq!(get("TERN_STOP_GRACE_SECONDS"), Some("99.5"));
        assert_eq!(get("TERN_STOP_FILE"), Some("/run/tern/progress.json.stop"));
        assert_eq!(get("TERN_ACCELERATOR"), Some("A100"));
        assert_eq!(get("TERN_GPUS_PER_NODE"), Some("8"));
        assert_eq!(
            get("SKYPILOT_NODE_RANK"),
            None,
            "only for node_env = \"skypilot\""
        );
        let sky = AgentConfig {
            skypilot_env: true,
            ..config
        };
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
    fn the_stop_file_sits_beside_the_progress_file() {
        assert_eq!(
            stop_file(std::path::Path::new("/run/tern/progress.json")),
            PathBuf::from("/run/tern/progress.json.stop")
        );
    }
}
