//! Before the training runs: which instance and address this is, asking the controller to
//! start workers here until it says yes, and starting the process tree.

use std::time::Instant;

use super::contract::{stop_file, training_env};
use super::step::{Seen, State, Step, next};
use super::tree::{Spawn, Tree};
use super::{AgentConfig, AgentError, metadata};
use crate::api::client::Client;
use crate::api::wire::{Progress, StartReply};

/// SIGTERM and SIGINT to the agent, as one stream.
pub(super) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    pub(super) fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    pub(super) async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// This instance's id: the flag, or the cloud's metadata.
pub(super) async fn resolve_instance(
    config: &AgentConfig,
    http: &reqwest::Client,
) -> Result<String, AgentError> {
    if let Some(id) = &config.instance_id {
        return Ok(id.clone());
    }
    metadata::instance_id(http, config.notice, &config.metadata_url)
        .await
        .map_err(AgentError::NoInstance)
}

/// This node's address, when the job's nodes must find each other.
pub(super) async fn resolve_address(
    config: &AgentConfig,
    http: &reqwest::Client,
) -> Result<Option<String>, AgentError> {
    if !config.skypilot_env {
        return Ok(None);
    }
    if let Some(a) = &config.address {
        return Ok(Some(a.clone()));
    }
    metadata::address(http, config.notice, &config.metadata_url)
        .await
        .map(Some)
        .map_err(AgentError::NoAddress)
}

/// Ask to start workers here until the controller says yes; `None` when the agent was
/// signalled or noticed while waiting.
pub(super) async fn start(
    config: &AgentConfig,
    client: &Client,
    http: &reqwest::Client,
    (instance, address): (&str, Option<&str>),
    signals: &mut Signals,
    mut state: State,
) -> Result<Option<StartReply>, AgentError> {
    let asked = Instant::now();
    let mut said = String::new();
    loop {
        let e = match client.start(&config.job, instance, address).await {
            Ok(r) => return Ok(Some(r)),
            Err(e) => e,
        };
        state.asking_for = asked.elapsed();
        let event = Seen::StartRefused {
            action: e.action(),
            retryable: e.is_retryable(),
        };
        match next(&state, event) {
            Step::AskAgain => {}
            Step::NothingToStart => {
                tracing::info!(refusal = %e, "nothing to start here: {e}");
                return Ok(None);
            }
            // The job's workers ran here, and the instance is no longer the job's: the
            // controller released it (after a drain).
            Step::LeftTheJob => {
                tracing::info!(refusal = %e, "this instance left the job: {e}");
                return Ok(None);
            }
            Step::Refuse => return Err(AgentError::Refused(e.to_string())),
            // `Fail`, the one other step a refused start takes.
            _ => return Err(e.into()),
        }
        let why = e.to_string();
        if why != said {
            tracing::info!(refusal = %why, "waiting to start: {why}");
            said = why;
        }
        tokio::select! {
            _ = tokio::time::sleep(config.interval) => {}
            _ = signals.next() => return Ok(None),
        }
        if metadata::noticed(http, config.notice, &config.metadata_url).await {
            tracing::warn!("interruption notice before the workers started");
            return Ok(None);
        }
    }
}

/// Start the training's process tree for an incarnation; a command that cannot start fails
/// the job at once (reported to the controller) rather than being restarted.
pub(super) async fn spawn_training(
    config: &AgentConfig,
    client: &Client,
    instance: &str,
    started: &StartReply,
) -> Result<Tree, AgentError> {
    let _ = std::fs::remove_file(stop_file(&config.progress_file));
    let env = training_env(config, instance, started);
    let spawned = Tree::spawn(&Spawn {
        argv: &config.argv,
        env: &env,
        dir: config.workdir.as_deref(),
        watchdog: config
            .watchdog_exe
            .clone()
            .map(|exe| (exe, config.stop_grace)),
    });
    match spawned {
        Ok(tree) => Ok(tree),
        Err(source) => {
            let e = AgentError::Start {
                program: config.argv.first().cloned().unwrap_or_default(),
                source,
            };
            give_up(
                config,
                client,
                instance,
                started.incarnation,
                &e.to_string(),
            )
            .await;
            Err(e)
        }
    }
}

/// The command could not be started at all: the job fails with why.
pub(super) async fn give_up(
    config: &AgentConfig,
    client: &Client,
    instance: &str,
    k: u64,
    why: &str,
) {
    let progress = Progress {
        done_samples: 0.0,
        checkpoint_samples: 0.0,
        checkpointed: false,
        observation: None,
        incarnation: Some(k),
        instance: Some(instance.to_string()),
        stopped: true,
        failure: Some(why.to_string()),
        hung: false,
        crashed: false,
    };
    if let Err(e) = client.progress(&config.job, &progress).await {
        tracing::error!(error = %e, "could not report the failure: {e}");
    }
}
