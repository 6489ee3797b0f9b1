//! What the agent does when the training ends by itself or hangs: restart it as a new
//! incarnation after a backoff, or fail the job saying why, once the restarts in a row run out.

use std::time::Duration;

use super::step::{Seen, State, Step, next};
use super::{AgentError, Run, Signals, give_up};

/// Restarts in a row, with exponential backoff: `used` counts failures without progress and
/// hangs; `early` counts exits with status 0 before the job's work was done, whatever each
/// start did (a script whose own step limit is below the job's work makes a little progress
/// every time, and would otherwise restart forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Restarts {
    pub(super) max: u32,
    pub(super) used: u32,
    pub(super) early: u32,
}

impl Restarts {
    fn backoff(n: u32) -> Duration {
        Duration::from_secs(1 << n.saturating_sub(1).min(5))
    }

    /// A failure without progress, or a hang: the delay before the next start, or `None`
    /// when the restarts have run out.
    pub(super) fn delay(&mut self) -> Option<Duration> {
        if self.used >= self.max {
            return None;
        }
        self.used += 1;
        Some(Self::backoff(self.used))
    }

    /// An exit 0 with work left: the delay before the next start, or `None` once that has
    /// happened `max` times in a row.
    pub(super) fn early_exit(&mut self) -> Option<Duration> {
        if self.early >= self.max {
            return None;
        }
        self.early += 1;
        Some(Self::backoff(self.early))
    }

    /// The training ran until it was asked to stop: nothing in a row any more.
    pub(super) fn reset(&mut self) {
        self.used = 0;
        self.early = 0;
    }
}

/// How long without progress means the training hangs: the flag, else the larger of ten
/// minutes and 20 of the training's own measured steps (a slow step is not a hang).
pub fn hang_limit(flag: Option<Duration>, step_seconds: Option<f64>) -> Duration {
    flag.unwrap_or_else(|| {
        let steps = step_seconds
            .filter(|s| s.is_finite() && *s > 0.0)
            .map_or(Duration::ZERO, |s| {
                Duration::from_secs_f64((20.0 * s).min(1e7))
            });
        steps.max(Duration::from_secs(600))
    })
}

/// How the workers ended by themselves, as the last report says it (`hung`, `crashed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    Crashed,
    Hung,
}

/// How the training exited by itself.
pub(super) struct Exited {
    pub(super) status: std::process::ExitStatus,
    pub(super) progressed: bool,
    pub(super) tail: String,
}

impl Run<'_> {
    /// The last report, saying how the workers ended when they ended by themselves.
    pub(super) async fn final_report_as(&mut self, checkpointed: bool, ended: Option<Ended>) {
        match self.report_as(checkpointed, true, None, ended).await {
            Ok(_) => tracing::info!(
                checkpoint_samples = self.checkpoint_now(),
                durable = checkpointed,
                "reported the workers stopped (checkpoint {}, {})",
                self.checkpoint_now(),
                if checkpointed {
                    "durable"
                } else {
                    "not confirmed"
                }
            ),
            Err(e) => tracing::warn!(error = %e, "last report not taken: {e}"),
        }
    }

    /// The training exited by itself: done if the controller says the job is over; else
    /// restarted after a backoff (true), until the restarts run out (the job fails).
    pub(super) async fn after_exit(
        &mut self,
        exited: Exited,
        restarts: &mut Restarts,
        signals: &mut Signals,
    ) -> Result<bool, AgentError> {
        let Exited {
            status,
            progressed,
            tail,
        } = exited;
        // The last progress first, so the controller counts it before the check.
        let _ = self.report(false, false, None).await;
        let job = self.client.job(&self.config.job).await.ok();
        let over = job.as_ref().is_some_and(|s| {
            s.done_samples >= s.total_samples
                || ["finished", "cancelled"].contains(&s.state.as_str())
        });
        let event = Seen::Exited {
            success: status.success(),
            progressed,
            over,
        };
        let (delay, crashed) = match next(&after(restarts), event) {
            Step::Restart {
                delay,
                restarts: counted,
                crashed,
            } => {
                *restarts = counted;
                (delay, crashed)
            }
            Step::GiveUp { restarts: counted } => {
                *restarts = counted;
                let failure = match (status.success(), &job) {
                    (true, Some(j)) => early_text(restarts.max, j.done_samples, j.total_samples),
                    (true, None) => early_text(restarts.max, self.moved.samples.max(0.0), f64::NAN),
                    (false, _) => failure_text(status, restarts.max, &tail),
                };
                let _ = self.report(false, true, Some(failure.clone())).await;
                return Err(AgentError::TrainingFailed(failure));
            }
            // `Finished`, the one other step an exit takes.
            _ => {
                self.final_report(true).await;
                tracing::info!("training finished");
                return Ok(false);
            }
        };
        self.final_report_as(status.success(), crashed.then_some(Ended::Crashed))
            .await;
        let (n, what) = match status.success() {
            true => (restarts.early, "exited 0 with the job's work not done"),
            false => (restarts.used, "exited"),
        };
        tracing::warn!(
            status = %status,
            restart = n,
            max_restarts = restarts.max,
            delay_s = delay.as_secs(),
            "training {what} ({status}); restart {n} of {} in {} s",
            restarts.max,
            delay.as_secs()
        );
        tokio::select! {
            _ = tokio::time::sleep(delay) => Ok(true),
            _ = signals.next() => Ok(false),
        }
    }

    /// The training hung and was stopped: restarted from the checkpoint after a backoff
    /// (true), until the restarts run out (the job fails, saying it hung).
    pub(super) async fn after_hang(
        &mut self,
        quiet: Duration,
        samples: f64,
        restarts: &mut Restarts,
        signals: &mut Signals,
    ) -> Result<bool, AgentError> {
        let delay = match next(&after(restarts), Seen::StoppedHung) {
            Step::Restart {
                delay,
                restarts: counted,
                ..
            } => {
                *restarts = counted;
                Some(delay)
            }
            _ => None,
        };
        let Some(delay) = delay else {
            let failure = format!(
                "the training hung: no progress for {:.0} s at {samples} samples, after {} \
                 restart(s) in a row that hung or made no progress",
                quiet.as_secs_f64(),
                restarts.max
            );
            give_up(
                self.config,
                self.client,
                self.instance,
                self.incarnation,
                &failure,
            )
            .await;
            return Err(AgentError::TrainingFailed(failure));
        };
        tracing::warn!(
            restart = restarts.used,
            max_restarts = restarts.max,
            delay_s = delay.as_secs(),
            "restarting the hung training from its checkpoint: restart {} of {} in {} s",
            restarts.used,
            restarts.max,
            delay.as_secs()
        );
        tokio::select! {
            _ = tokio::time::sleep(delay) => Ok(true),
            _ = signals.next() => Ok(false),
        }
    }
}

/// What the agent knows once its workers ended: their restarts in a row.
fn after(restarts: &Restarts) -> State {
    State {
        trained_here: true,
        asking_for: std::time::Duration::ZERO,
        restarts: *restarts,
    }
}

/// The job's reason when its training kept exiting 0 before the job's work was done.
fn early_text(max: u32, done: f64, total: f64) -> String {
    let of = match total.is_finite() {
        true => format!("{done:.0} of {total:.0}"),
        false => format!("{done:.0} of the job's"),
    };
    format!(
        "the training exited 0 at {of} samples, {} times in a row: it stops before the job's \
         work is done (check its own step, epoch or sample limit against the job's [work])",
        max + 1
    )
}

/// The job's reason when its training failed for good.
fn failure_text(status: std::process::ExitStatus, max: u32, tail: &str) -> String {
    let mut s = format!("exited with {status} after {max} restart(s) without progress");
    if !tail.is_empty() {
        s.push_str("; last lines of stderr:\n");
        s.push_str(tail);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn early_exits_run_out_whatever_each_start_did() {
        let mut r = Restarts {
            max: 2,
            used: 0,
            early: 0,
        };
        // Progress between early exits resets only the failure count, never this one.
        assert_eq!(r.early_exit(), Some(Duration::from_secs(1)));
        r.used = 0;
        assert_eq!(r.early_exit(), Some(Duration::from_secs(2)));
        assert_eq!(r.early_exit(), None);
        // A run that was asked to stop ends the streak.
        r.reset();
        assert!(r.early_exit().is_some());
        let text = early_text(2, 1234.0, 5000.0);
        assert!(
            text.contains("exited 0 at 1234 of 5000 samples, 3 times"),
            "{text}"
        );
    }

    #[test]
    fn a_hang_is_ten_minutes_or_twenty_steps_unless_told() {
        let min = Duration::from_secs(600);
        assert_eq!(hang_limit(None, None), min);
        assert_eq!(hang_limit(None, Some(2.0)), min);
        assert_eq!(hang_limit(None, Some(60.0)), Duration::from_secs(1200));
        assert_eq!(hang_limit(None, Some(f64::NAN)), min);
        let told = Duration::from_secs(5);
        assert_eq!(hang_limit(Some(told), Some(60.0)), told);
    }

    #[test]
    fn restarts_back_off_and_run_out() {
        let mut r = Restarts {
            max: 3,
            used: 0,
            early: 0,
        };
        let delays: Vec<u64> = std::iter::from_fn(|| r.delay().map(|d| d.as_secs())).collect();
        assert_eq!(delays, [1, 2, 4]);
        r.used = 0;
        assert_eq!(r.delay(), Some(Duration::from_secs(1)));
    }
}
