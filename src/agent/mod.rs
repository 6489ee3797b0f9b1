//! `tern agent`: runs on each training VM, owns the training's processes, and speaks for them
//! to the controller.
//!
//! - Learns which instance it runs on (`--instance-id`, or the cloud's metadata) and asks the
//!   controller to start the job's workers there (`POST /v1/jobs/NAME/start`): the answer is
//!   an incarnation, and the agent waits while the previous one is not fenced.
//! - Starts the training ([`launch`]) as a process tree it owns ([`tree`]), with the `TERN_*`
//!   environment, and reports the progress file ([`progress`]) every `--interval`, with its
//!   instance and incarnation. A refused report (409) says what to do: kill the workers now
//!   (stale), or stop and exit (the job is over here).
//! - Watches the cloud's notice ([`metadata`]). On a notice, a drain the controller asks for,
//!   or SIGTERM/SIGINT to the agent: runs `--checkpoint-command` if given, sends the checkpoint
//!   signal, waits up to `--stop-grace` for the tree to exit, kills what is left, and only
//!   then reports the checkpoint (`checkpointed`, `stopped`).
//! - When the training exits by itself: done when the job is; otherwise restarts it as a new
//!   incarnation, at most `--max-restarts` times in a row without progress, with backoff; then
//!   the job fails, its reason naming the exit status and the last lines of stderr. A training
//!   that exits 0 before the job's work is done is restarted at most `--max-restarts` times in
//!   a row whatever it did meanwhile (its own step limit would otherwise restart it forever).
//! - When the training stops making progress (`samples` unchanged for `--hang-timeout`): the
//!   same stop as a drain, a report that says it hung, and a restart from the checkpoint that
//!   counts toward the restart bound.
//! - When the job ends while it runs (a cancel, a stop): checkpoint and stop, and a last report
//!   that the controller records, so the checkpoint saved on the way out is the job's.

pub mod contract;
pub mod launch;
pub mod log;
pub mod metadata;
pub mod progress;
mod restarts;
pub mod setup;
mod start;
mod step;
mod stop;
pub mod tree;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use tracing::Instrument;

use contract::Why;
pub use launch::{LaunchError, Launcher, Torchrun, command_line};
pub use metadata::NoticeSource;
use progress::{Complaints, ProgressFile};
pub use restarts::hang_limit;
use restarts::{Ended, Exited, Restarts};
use start::{Signals, give_up, resolve_address, resolve_instance, spawn_training, start};
use step::{Seen, State, Step, next};
use tree::Tree;

use crate::api::client::{Client, ClientError};
use crate::api::wire::{Action, Progress, ProgressReply, StartReply};

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error("starting {program}: {source}")]
    Start {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("running checkpoint command {command}: {source}")]
    Checkpoint {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("watching the training process: {0}")]
    Wait(#[source] std::io::Error),
    #[error("training failed: {0}")]
    TrainingFailed(String),
    #[error("the job's setup failed: {0}")]
    Setup(String),
    #[error("the controller refused to start workers here: {0}")]
    Refused(String),
    #[error(
        "cannot tell which instance this is ({0}); pass --instance-id (the simulated cloud, tests)"
    )]
    NoInstance(String),
    #[error("cannot tell this VM's address for the job's other nodes ({0}); pass --address")]
    NoAddress(String),
    #[error(transparent)]
    Report(#[from] ClientError),
}

/// What one agent does.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The job this VM works for.
    pub job: String,
    /// JSON file the training keeps up to date (see [`progress`]).
    pub progress_file: PathBuf,
    /// Shell command that writes a checkpoint now and exits when it is durable.
    pub checkpoint_command: Option<String>,
    /// Sent to the training to make it save and exit.
    pub checkpoint_signal: Signal,
    /// From the checkpoint signal to SIGKILL.
    pub stop_grace: Duration,
    pub notice: NoticeSource,
    /// Metadata server base URL.
    pub metadata_url: String,
    /// This instance's id; read from the metadata server when not given.
    pub instance_id: Option<String>,
    /// Between progress reports and notice polls.
    pub interval: Duration,
    /// The training's command line, as [`command_line`] built it.
    pub argv: Vec<String>,
    /// What `argv` starts (torchrun lingers at its exit barrier; see [`Run::stop`]).
    pub launcher: Launcher,
    /// Restarts in a row without progress before the job fails.
    pub max_restarts: u32,
    /// No progress for this long means the training hangs; `None`: [`hang_limit`]'s default.
    pub hang_timeout: Option<Duration>,
    /// The `tern` binary, for the watchdog that stops the tree if the agent dies.
    pub watchdog_exe: Option<PathBuf>,
    /// The job's `[run] env`: added to the setup's and the training's environment (the
    /// `TERN_*` contract variables win over a name it repeats). Never logged.
    pub env: Vec<(String, String)>,
    /// Where the setup and the training run (`[run] workdir`); `None`: the agent's own.
    pub workdir: Option<PathBuf>,
    /// `[run] setup`, run once per instance before the training first starts there.
    pub setup: Option<setup::Setup>,
    /// `[run] node_env = "skypilot"`: export the `SKYPILOT_*` node variables, and give the
    /// controller this node's address so the others learn it.
    pub skypilot_env: bool,
    /// This node's address (`--address`); `None`: from the cloud's metadata.
    pub address: Option<String>,
}

/// How one run of the training ended.
#[derive(Debug)]
enum End {
    /// Stopped on purpose; `again`: ask to start a new incarnation.
    Stopped { again: bool },
    /// The training exited by itself.
    Exited {
        status: std::process::ExitStatus,
        progressed: bool,
        tail: String,
    },
    /// The training made no progress for `quiet`; it was stopped and reported.
    Hung { quiet: Duration, samples: f64 },
}

/// When the training's progress last moved, by the agent's clock.
#[derive(Debug, Clone, Copy)]
struct Moved {
    samples: f64,
    at: Instant,
}

/// One incarnation's workers on this instance, and what they last reported.
struct Run<'a> {
    config: &'a AgentConfig,
    client: &'a Client,
    http: &'a reqwest::Client,
    instance: &'a str,
    incarnation: u64,
    tree: Tree,
    complaints: Complaints,
    last: Option<ProgressFile>,
    moved: Moved,
    /// The restarts in a row when this incarnation started.
    restarts: Restarts,
}

impl Run<'_> {
    /// The progress file, unless it was written by an older incarnation.
    fn read(&mut self) -> Option<ProgressFile> {
        let f = self.complaints.read(&self.config.progress_file)?;
        if f.incarnation.is_some_and(|k| k < self.incarnation) {
            return None;
        }
        if f.samples != self.moved.samples {
            self.moved = Moved {
                samples: f.samples,
                at: Instant::now(),
            };
        }
        self.last = Some(f.clone());
        Some(f)
    }

    /// How long the training has made no progress, once that is past the hang limit.
    fn hung_for(&self) -> Option<Duration> {
        let step = self.last.as_ref().and_then(|f| f.step_seconds);
        let quiet = self.moved.at.elapsed();
        (quiet >= hang_limit(self.config.hang_timeout, step)).then_some(quiet)
    }

    async fn report(
        &mut self,
        checkpointed: bool,
        stopped: bool,
        failure: Option<String>,
    ) -> Result<ProgressReply, ClientError> {
        self.report_as(checkpointed, stopped, failure, None).await
    }

    async fn report_as(
        &mut self,
        checkpointed: bool,
        stopped: bool,
        failure: Option<String>,
        ended: Option<Ended>,
    ) -> Result<ProgressReply, ClientError> {
        let f = self.read().or_else(|| self.last.clone());
        let progress = Progress {
            done_samples: f.as_ref().map_or(0.0, |f| f.samples),
            checkpoint_samples: f.as_ref().map_or(0.0, |f| f.checkpoint_samples),
            checkpointed,
            observation: f.as_ref().and_then(|f| f.observation(&self.config.job)),
            incarnation: Some(self.incarnation),
            instance: Some(self.instance.to_string()),
            stopped,
            failure,
            hung: ended == Some(Ended::Hung),
            crashed: ended == Some(Ended::Crashed),
        };
        let reply = self.client.progress(&self.config.job, &progress).await?;
        if f.is_some() {
            self.complaints.clamped(&reply.clamped);
        }
        Ok(reply)
    }

    fn checkpoint_now(&mut self) -> f64 {
        self.read()
            .or_else(|| self.last.clone())
            .map_or(0.0, |f| f.checkpoint_samples)
    }

    /// Report until the training ends, the controller or the cloud says to stop, or the
    /// agent is signalled.
    async fn supervise(&mut self, signals: &mut Signals) -> Result<End, AgentError> {
        let start_samples = self.read().map_or(0.0, |f| f.samples);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.config.interval) => {}
                _ = signals.next() => {
                    if let Step::Stop { why, again } = next(&self.state(), Seen::Signal) {
                        return self.drain(why, again).await;
                    }
                }
            }
            if let Some(status) = self.tree.exited().map_err(AgentError::Wait)? {
                // torchrun is gone; anything it left behind goes too.
                self.tree.signal(Signal::TERM);
                self.tree.kill_all(Duration::from_secs(10));
                let progressed = self.read().is_some_and(|f| f.samples > start_samples);
                let tail = self.tree.stderr_tail(10);
                return Ok(End::Exited {
                    status,
                    progressed,
                    tail,
                });
            }
            let (event, refusal) = match self.report(false, false, None).await {
                Ok(r) => (
                    Seen::Answered {
                        drain: r.drain,
                        stop: r.stop,
                    },
                    None,
                ),
                Err(e) => (self.refused(&e).await, Some(e)),
            };
            if let Some(end) = self.take(next(&self.state(), event), refusal).await? {
                return Ok(end);
            }
            if metadata::noticed(self.http, self.config.notice, &self.config.metadata_url).await
                && let Step::Stop { why, again } = next(&self.state(), Seen::Notice)
            {
                return self.drain(why, again).await;
            }
            if let Some(quiet) = self.hung_for()
                && next(&self.state(), Seen::Hung) == Step::StopHung
            {
                return self.hang(quiet).await;
            }
        }
    }

    /// What the agent knows while its workers run.
    fn state(&self) -> State {
        State {
            trained_here: true,
            asking_for: Duration::ZERO,
            restarts: self.restarts,
        }
    }

    /// A report the controller did not take, as an event: a refusal's action (on `Done`, with
    /// whether the job's work is finished), or no answer.
    async fn refused(&self, e: &ClientError) -> Seen {
        match e.action() {
            Some(Action::Done) => Seen::Refused {
                action: Action::Done,
                finished: job_over(self.client, &self.config.job, &["finished"]).await,
            },
            Some(action) => Seen::Refused {
                action,
                finished: false,
            },
            None => Seen::Unanswered,
        }
    }

    /// Carry out a step chosen while the workers run; `Some` ends the supervision. `refusal`:
    /// the report's error, if it was not taken.
    async fn take(
        &mut self,
        step: Step,
        refusal: Option<ClientError>,
    ) -> Result<Option<End>, AgentError> {
        let e = refusal.map_or_else(String::new, |e| e.to_string());
        match step {
            Step::Stop { why, again } => {
                if why == Why::Restart {
                    tracing::info!(
                        why = why.as_str(),
                        "another node of this incarnation stopped: restarting"
                    );
                }
                self.drain(why, again).await.map(Some)
            }
            Step::Kill => {
                tracing::warn!(refusal = %e, "{e}: killing the workers now");
                self.tree.kill_all(Duration::from_secs(10));
                Ok(Some(End::Stopped { again: true }))
            }
            Step::Finish { wait_exit } => {
                // A job whose work is done: its training is saving its last checkpoint and
                // exiting; let it, within the grace, before stopping what is left.
                if wait_exit {
                    tracing::info!(refusal = %e, "{e}: waiting for the training to exit");
                    self.exit_within(self.config.stop_grace).await;
                } else {
                    tracing::info!(refusal = %e, "{e}: stopping");
                }
                // The job ended while these workers ran: their last report keeps the
                // checkpoint they saved on the way out.
                self.drain(Why::Over, false).await.map(Some)
            }
            Step::Leave => {
                self.stop(Why::Over).await?;
                Err(AgentError::Refused(e))
            }
            // `Continue`: the only other step a report's event takes.
            _ => {
                if !e.is_empty() {
                    tracing::warn!(error = %e, "progress report failed: {e}");
                }
                Ok(None)
            }
        }
    }
}

/// Run the agent until the job is done here, the instance leaves, or the agent is stopped.
/// Its events carry the job and the instance (the `agent` span), and while workers run, the
/// incarnation (`incarnation`).
pub async fn run(
    config: AgentConfig,
    client: Client,
    http: reqwest::Client,
) -> Result<(), AgentError> {
    let mut signals = Signals::new().map_err(AgentError::Wait)?;
    let instance = resolve_instance(&config, &http).await?;
    let address = resolve_address(&config, &http).await?;
    let here = Here {
        config: &config,
        client: &client,
        http: &http,
        instance: &instance,
    };
    let span = tracing::info_span!("agent", job = %config.job, instance = %instance);
    here.serve(address.as_deref(), &mut signals)
        .instrument(span)
        .await
}

/// What every incarnation on this instance shares.
#[derive(Clone, Copy)]
struct Here<'a> {
    config: &'a AgentConfig,
    client: &'a Client,
    http: &'a reqwest::Client,
    instance: &'a str,
}

impl Here<'_> {
    /// Ask to start, run the incarnation, and again while the controller wants workers here.
    async fn serve(self, address: Option<&str>, signals: &mut Signals) -> Result<(), AgentError> {
        let config = self.config;
        tree::outlast_predecessor(&config.job, self.instance, config.stop_grace).await;
        let mut restarts = Restarts {
            max: config.max_restarts,
            used: 0,
            early: 0,
        };
        let mut trained_here = false;
        loop {
            let asked = start(
                config,
                self.client,
                self.http,
                (self.instance, address),
                signals,
                State {
                    trained_here,
                    asking_for: Duration::ZERO,
                    restarts,
                },
            );
            let Some(started) = asked.await? else {
                return Ok(());
            };
            trained_here = true;
            let span = tracing::info_span!("incarnation", k = started.incarnation);
            let again = self
                .incarnation(&started, &mut restarts, signals)
                .instrument(span)
                .await?;
            if !again {
                return Ok(());
            }
        }
    }

    /// One incarnation's workers here, from the setup to their end; whether to ask again.
    async fn incarnation(
        self,
        started: &StartReply,
        restarts: &mut Restarts,
        signals: &mut Signals,
    ) -> Result<bool, AgentError> {
        let (config, instance) = (self.config, self.instance);
        tracing::info!(
            command = %config.argv.join(" "),
            "incarnation {} on {instance}: starting {}",
            started.incarnation,
            config.argv.join(" ")
        );
        setup::before_start(config, self.client, instance, started.incarnation).await?;
        let tree = spawn_training(config, self.client, instance, started).await?;
        let mut run = Run {
            config,
            client: self.client,
            http: self.http,
            instance,
            incarnation: started.incarnation,
            tree,
            complaints: Complaints::default(),
            last: None,
            moved: Moved {
                samples: -1.0,
                at: Instant::now(),
            },
            restarts: *restarts,
        };
        match run.supervise(signals).await? {
            End::Stopped { again } => {
                restarts.reset();
                Ok(again)
            }
            End::Hung { quiet, samples } => run.after_hang(quiet, samples, restarts, signals).await,
            End::Exited {
                status,
                progressed,
                tail,
            } => {
                let exited = Exited {
                    status,
                    progressed,
                    tail,
                };
                run.after_exit(exited, restarts, signals).await
            }
        }
    }
}

/// Whether the controller counts the job's work as done, or the job as in one of `over`.
async fn job_over(client: &Client, job: &str, over: &[&str]) -> bool {
    client
        .job(job)
        .await
        .is_ok_and(|s| s.done_samples >= s.total_samples || over.contains(&s.state.as_str()))
}
