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

mod contract;
pub mod launch;
pub mod metadata;
pub mod progress;
mod restarts;
pub mod setup;
mod step;
pub mod tree;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use contract::{stop_file, training_env};
pub use launch::{LaunchError, Launcher, Torchrun, command_line};
pub use metadata::NoticeSource;
use progress::{Complaints, ProgressFile};
pub use restarts::hang_limit;
use restarts::{Ended, Exited, Restarts};
use step::{Event, State, Step, next};
use tree::{Spawn, Tree};

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

/// Why the agent stops the training.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
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
    fn as_str(self) -> &'static str {
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

/// How long torchrun may linger once its workers are gone before it is killed.
const LAUNCHER_ALONE: Duration = Duration::from_secs(5);

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

    /// Write the stop file the training reads on the signal: why, and by when to have saved.
    fn write_stop_file(&self, why: Why) {
        let save_by = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            + self.config.stop_grace;
        let body = serde_json::json!({
            "reason": why.as_str(),
            "save_by_unix": save_by.as_secs_f64(),
        });
        let path = stop_file(&self.config.progress_file);
        let tmp = path.with_extension("tmp");
        if std::fs::write(&tmp, body.to_string()).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }

    /// Checkpoint and stop the whole tree: the checkpoint command if any, the checkpoint
    /// signal, up to the grace for the tree to exit (a non-SIGTERM signal is followed by
    /// SIGTERM once the checkpoint advanced), then SIGKILL. True when the checkpoint is
    /// durable: `checkpoint_samples` advanced, the training exited 0, or the command succeeded.
    async fn stop(&mut self, why: Why) -> Result<bool, AgentError> {
        let started = Instant::now();
        let before = self.checkpoint_now();
        let mut durable = false;
        if let Some(cmd) = &self.config.checkpoint_command {
            eprintln!(
                "tern agent: {}: running the checkpoint command",
                why.as_str()
            );
            let status = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .status();
            match tokio::time::timeout(self.config.stop_grace, status).await {
                Ok(Ok(s)) if s.success() => durable = true,
                Ok(Ok(s)) => eprintln!("tern agent: checkpoint command failed: {s}"),
                Ok(Err(source)) => {
                    return Err(AgentError::Checkpoint {
                        command: cmd.clone(),
                        source,
                    });
                }
                Err(_) => eprintln!("tern agent: checkpoint command still running at the grace"),
            }
        }
        self.write_stop_file(why);
        let sig = self.config.checkpoint_signal;
        eprintln!(
            "tern agent: {}: sending {} to the training (grace {:.0} s)",
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
            eprintln!("tern agent: {left} training process(es) left at the grace: killing them");
        }
        if !self.tree.kill_all(Duration::from_secs(10)) {
            eprintln!("tern agent: some training processes would not die");
        }
        let exited_ok = self
            .tree
            .exited()
            .map_err(AgentError::Wait)?
            .is_some_and(|s| s.success());
        let after = self.checkpoint_now();
        eprintln!(
            "tern agent: no training process left {:.1} s after the stop began (checkpoint {before} -> {after})",
            started.elapsed().as_secs_f64()
        );
        Ok(durable || exited_ok || after > before)
    }

    /// Report until the training ends, the controller or the cloud says to stop, or the
    /// agent is signalled.
    async fn supervise(&mut self, signals: &mut Signals) -> Result<End, AgentError> {
        let start_samples = self.read().map_or(0.0, |f| f.samples);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.config.interval) => {}
                _ = signals.next() => {
                    if let Step::Stop { why, again } = next(&self.state(), Event::Signal) {
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
                    Event::Answered {
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
                && let Step::Stop { why, again } = next(&self.state(), Event::Notice)
            {
                return self.drain(why, again).await;
            }
            if let Some(quiet) = self.hung_for()
                && next(&self.state(), Event::Hung) == Step::StopHung
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
    async fn refused(&self, e: &ClientError) -> Event {
        match e.action() {
            Some(Action::Done) => Event::Refused {
                action: Action::Done,
                finished: job_over(self.client, &self.config.job, &["finished"]).await,
            },
            Some(action) => Event::Refused {
                action,
                finished: false,
            },
            None => Event::Unanswered,
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
                    eprintln!("tern agent: another node of this incarnation stopped: restarting");
                }
                self.drain(why, again).await.map(Some)
            }
            Step::Kill => {
                eprintln!("tern agent: {e}: killing the workers now");
                self.tree.kill_all(Duration::from_secs(10));
                Ok(Some(End::Stopped { again: true }))
            }
            Step::Finish { wait_exit } => {
                // A job whose work is done: its training is saving its last checkpoint and
                // exiting; let it, within the grace, before stopping what is left.
                if wait_exit {
                    eprintln!("tern agent: {e}: waiting for the training to exit");
                    self.exit_within(self.config.stop_grace).await;
                } else {
                    eprintln!("tern agent: {e}: stopping");
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
                    eprintln!("tern agent: progress report failed: {e}");
                }
                Ok(None)
            }
        }
    }

    /// No progress for `quiet`: stop the tree as for a drain (a wedged process ignores the
    /// signal and is killed at the grace), and say so in the workers' last report.
    async fn hang(&mut self, quiet: Duration) -> Result<End, AgentError> {
        eprintln!(
            "tern agent: no progress for {:.0} s (samples {}): the training hangs; stopping it",
            quiet.as_secs_f64(),
            self.moved.samples
        );
        let durable = self.stop(Why::Hung).await?;
        if let Err(e) = self.report_as(durable, true, None, Some(Ended::Hung)).await {
            eprintln!("tern agent: last report not taken: {e}");
        }
        Ok(End::Hung {
            quiet,
            samples: self.moved.samples,
        })
    }

    /// Wait up to `within` for the training to exit by itself.
    async fn exit_within(&mut self, within: Duration) {
        let until = Instant::now() + within;
        while Instant::now() < until && !self.tree.members().is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Checkpoint, stop and report: this instance is leaving (or the agent is stopped). After
    /// the controller's drain the agent asks to start again: it is told to wait while the
    /// instance drains, and starts the workers again if the drain is called off (a move whose
    /// new capacity was lost); the instance's end, or the job's, ends it.
    async fn drain(&mut self, why: Why, again: bool) -> Result<End, AgentError> {
        let durable = self.stop(why).await?;
        self.final_report(durable).await;
        Ok(End::Stopped { again })
    }

    /// The workers are gone: their last report. Refused when they were fenced meanwhile.
    async fn final_report(&mut self, checkpointed: bool) {
        self.final_report_as(checkpointed, None).await;
    }
}

/// SIGTERM and SIGINT to the agent, as one stream.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// This instance's id: the flag, or the cloud's metadata.
async fn resolve_instance(
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
async fn resolve_address(
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
async fn start(
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
        let event = Event::StartRefused {
            action: e.action(),
            retryable: e.is_retryable(),
        };
        match next(&state, event) {
            Step::AskAgain => {}
            Step::NothingToStart => {
                eprintln!("tern agent: nothing to start here: {e}");
                return Ok(None);
            }
            // The job's workers ran here, and the instance is no longer the job's: the
            // controller released it (after a drain).
            Step::LeftTheJob => {
                eprintln!("tern agent: this instance left the job: {e}");
                return Ok(None);
            }
            Step::Refuse => return Err(AgentError::Refused(e.to_string())),
            // `Fail`, the one other step a refused start takes.
            _ => return Err(e.into()),
        }
        let why = e.to_string();
        if why != said {
            eprintln!("tern agent: waiting to start: {why}");
            said = why;
        }
        tokio::select! {
            _ = tokio::time::sleep(config.interval) => {}
            _ = signals.next() => return Ok(None),
        }
        if metadata::noticed(http, config.notice, &config.metadata_url).await {
            eprintln!("tern agent: interruption notice before the workers started");
            return Ok(None);
        }
    }
}

/// Run the agent until the job is done here, the instance leaves, or the agent is stopped.
pub async fn run(
    config: AgentConfig,
    client: Client,
    http: reqwest::Client,
) -> Result<(), AgentError> {
    let mut signals = Signals::new().map_err(AgentError::Wait)?;
    let instance = resolve_instance(&config, &http).await?;
    let address = resolve_address(&config, &http).await?;
    tree::outlast_predecessor(&config.job, &instance, config.stop_grace).await;
    let mut restarts = Restarts {
        max: config.max_restarts,
        used: 0,
        early: 0,
    };
    let mut trained_here = false;
    loop {
        let asked = start(
            &config,
            &client,
            &http,
            (&instance, address.as_deref()),
            &mut signals,
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
        eprintln!(
            "tern agent: incarnation {} on {instance}: starting {}",
            started.incarnation,
            config.argv.join(" ")
        );
        setup::before_start(&config, &client, &instance, started.incarnation).await?;
        let tree = spawn_training(&config, &client, &instance, &started).await?;
        let mut run = Run {
            config: &config,
            client: &client,
            http: &http,
            instance: &instance,
            incarnation: started.incarnation,
            tree,
            complaints: Complaints::default(),
            last: None,
            moved: Moved {
                samples: -1.0,
                at: Instant::now(),
            },
            restarts,
        };
        let again = match run.supervise(&mut signals).await? {
            End::Stopped { again } => {
                restarts.reset();
                again
            }
            End::Hung { quiet, samples } => {
                run.after_hang(quiet, samples, &mut restarts, &mut signals)
                    .await?
            }
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
                run.after_exit(exited, &mut restarts, &mut signals).await?
            }
        };
        if !again {
            return Ok(());
        }
    }
}

/// Start the training's process tree for an incarnation; a command that cannot start fails
/// the job at once (reported to the controller) rather than being restarted.
async fn spawn_training(
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

/// Whether the controller counts the job's work as done, or the job as in one of `over`.
async fn job_over(client: &Client, job: &str, over: &[&str]) -> bool {
    client
        .job(job)
        .await
        .is_ok_and(|s| s.done_samples >= s.total_samples || over.contains(&s.state.as_str()))
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
        eprintln!("tern agent: could not report the failure: {e}");
    }
}
