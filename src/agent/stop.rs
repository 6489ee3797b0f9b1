//! The stop protocol: checkpoint, signal, grace, kill, and the workers' last report.
//!
//! Every way the training is stopped on purpose (a notice, a drain, a signal to the agent, a
//! restart of every node, the job's end, a hang) goes through [`Run::stop`]: the checkpoint
//! command if any, the stop file ([`StopFile`]), the checkpoint signal, up to the grace for
//! the tree to exit, then SIGKILL for what is left; and only then the report that says
//! whether the checkpoint is durable.

use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::contract::{StopFile, Why};
use super::restarts::Ended;
use super::{AgentError, End, Launcher, Run, tree};

/// How long torchrun may linger once its workers are gone before it is killed.
const LAUNCHER_ALONE: Duration = Duration::from_secs(5);

impl Run<'_> {
    /// Checkpoint and stop the whole tree: the checkpoint command if any, the checkpoint
    /// signal, up to the grace for the tree to exit (a non-SIGTERM signal is followed by
    /// SIGTERM once the checkpoint advanced), then SIGKILL. True when the checkpoint is
    /// durable: `checkpoint_samples` advanced, the training exited 0, or the command succeeded.
    pub(super) async fn stop(&mut self, why: Why) -> Result<bool, AgentError> {
        let started = Instant::now();
        let before = self.checkpoint_now();
        let mut durable = false;
        if let Some(cmd) = &self.config.checkpoint_command {
            tracing::info!(
                why = why.as_str(),
                "{}: running the checkpoint command",
                why.as_str()
            );
            let status = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .status();
            match tokio::time::timeout(self.config.stop_grace, status).await {
                Ok(Ok(s)) if s.success() => durable = true,
                Ok(Ok(s)) => tracing::warn!(status = %s, "checkpoint command failed: {s}"),
                Ok(Err(source)) => {
                    return Err(AgentError::Checkpoint {
                        command: cmd.clone(),
                        source,
                    });
                }
                Err(_) => tracing::warn!("checkpoint command still running at the grace"),
            }
        }
        StopFile::now(why, self.config.stop_grace).write(&self.config.progress_file);
        let sig = self.config.checkpoint_signal;
        tracing::info!(
            why = why.as_str(),
            signal = tree::signal_name(sig),
            grace_s = self.config.stop_grace.as_secs_f64(),
            "{}: sending {} to the training (grace {:.0} s)",
            why.as_str(),
            tree::signal_name(sig),
            self.config.stop_grace.as_secs_f64()
        );
        self.tree.signal(sig);
        let mut termed = sig == Signal::TERM;
        let until = started + self.config.stop_grace;
        let mut alone_since: Option<Instant> = None;
        while Instant::now() < until {
            let members = self.tree.members();
            if members.is_empty() {
                break;
            }
            if !termed && self.checkpoint_now() > before {
                self.tree.signal(Signal::TERM);
                termed = true;
            }
            // torchrun whose workers are all gone waits at its exit barrier for the other
            // nodes (300 s), deaf to signals: once it is alone for a while, it is done.
            let alone = self.config.launcher == Launcher::Torchrun
                && members.len() == 1
                && members.contains(&(self.tree.pid() as i32));
            match (alone, alone_since) {
                (true, None) => alone_since = Some(Instant::now()),
                (true, Some(t)) if t.elapsed() >= LAUNCHER_ALONE => break,
                (false, _) => alone_since = None,
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let left = self.tree.members().len();
        if left > 0 {
            tracing::warn!(
                left,
                "{left} training process(es) left at the grace: killing them"
            );
        }
        if !self.tree.kill_all(Duration::from_secs(10)) {
            tracing::error!("some training processes would not die");
        }
        let exited_ok = self
            .tree
            .exited()
            .map_err(AgentError::Wait)?
            .is_some_and(|s| s.success());
        let after = self.checkpoint_now();
        tracing::info!(
            stop_s = started.elapsed().as_secs_f64(),
            checkpoint_before = before,
            checkpoint_after = after,
            "no training process left {:.1} s after the stop began (checkpoint {before} -> {after})",
            started.elapsed().as_secs_f64()
        );
        Ok(durable || exited_ok || after > before)
    }

    /// No progress for `quiet`: stop the tree as for a drain (a wedged process ignores the
    /// signal and is killed at the grace), and say so in the workers' last report.
    pub(super) async fn hang(&mut self, quiet: Duration) -> Result<End, AgentError> {
        tracing::warn!(
            quiet_s = quiet.as_secs_f64(),
            samples = self.moved.samples,
            "no progress for {:.0} s (samples {}): the training hangs; stopping it",
            quiet.as_secs_f64(),
            self.moved.samples
        );
        let durable = self.stop(Why::Hung).await?;
        if let Err(e) = self.report_as(durable, true, None, Some(Ended::Hung)).await {
            tracing::warn!(error = %e, "last report not taken: {e}");
        }
        Ok(End::Hung {
            quiet,
            samples: self.moved.samples,
        })
    }

    /// Wait up to `within` for the training to exit by itself.
    pub(super) async fn exit_within(&mut self, within: Duration) {
        let until = Instant::now() + within;
        while Instant::now() < until && !self.tree.members().is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Checkpoint, stop and report: this instance is leaving (or the agent is stopped). After
    /// the controller's drain the agent asks to start again: it is told to wait while the
    /// instance drains, and starts the workers again if the drain is called off (a move whose
    /// new capacity was lost); the instance's end, or the job's, ends it.
    pub(super) async fn drain(&mut self, why: Why, again: bool) -> Result<End, AgentError> {
        let durable = self.stop(why).await?;
        self.final_report(durable).await;
        Ok(End::Stopped { again })
    }

    /// The workers are gone: their last report. Refused when they were fenced meanwhile.
    pub(super) async fn final_report(&mut self, checkpointed: bool) {
        self.final_report_as(checkpointed, None).await;
    }
}
