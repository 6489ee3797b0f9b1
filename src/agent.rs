//! `tern agent`: runs on each training VM beside the training script.
//!
//! - Starts the training command under torchrun with elastic rendezvous settings
//!   (`--nnodes MIN:MAX --rdzv-backend c10d --rdzv-id JOB --rdzv-endpoint HOST:PORT`).
//! - Every `--interval` reads the progress file the script writes and reports it to the
//!   controller; the controller's answer says whether to drain (checkpoint now).
//! - Watches the cloud's notice: AWS instance metadata `spot/instance-action` (IMDSv2) or GCP
//!   metadata `instance/preempted`.
//! - On drain or notice: runs the job's checkpoint command, reports the checkpoint, stops the
//!   training process and exits.
//!
//! Progress file (JSON, rewritten by the training script, e.g. after each logging step):
//! `{"samples": 123456, "checkpoint_samples": 120000}`; optional `"step_seconds"`,
//! `"accelerator"`, `"gpus"`, `"nodes"`, `"local_batch"` make an observation that refits the
//! forecast.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use serde::Deserialize;

use crate::api::client::{Client, ClientError};
use crate::api::wire::{Progress, ProgressReply};

/// Where the cloud announces this VM's reclaim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeSource {
    /// AWS EC2 instance metadata `spot/instance-action` (IMDSv2).
    Aws,
    /// GCE metadata `instance/preempted`.
    Gcp,
    /// No cloud notice (on-premises, tests): only the controller's drain.
    None,
}

impl NoticeSource {
    /// The cloud's metadata server (link-local).
    pub fn default_metadata_url(self) -> &'static str {
        match self {
            NoticeSource::Gcp => "http://metadata.google.internal",
            _ => "http://169.254.169.254",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
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
    #[error("training exited with {0}")]
    TrainingFailed(std::process::ExitStatus),
    #[error(transparent)]
    Report(#[from] ClientError),
}

/// What one agent does.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The job this VM works for.
    pub job: String,
    /// JSON file the training script keeps up to date (see the module docs).
    pub progress_file: PathBuf,
    /// Shell command that writes a checkpoint now and exits when it is safe.
    pub checkpoint_command: Option<String>,
    pub notice: NoticeSource,
    /// Metadata server base URL.
    pub metadata_url: String,
    /// Between progress reports and notice polls.
    pub interval: Duration,
    /// The training command line (already wrapped by [`torchrun`]), if any.
    pub command: Vec<String>,
}

/// The torchrun elastic launcher's settings.
#[derive(Debug, Clone)]
pub struct Torchrun {
    pub job: String,
    /// Elastic node range, `MIN:MAX`.
    pub nnodes: String,
    pub nproc_per_node: u32,
    /// Rendezvous endpoint `HOST:PORT` (c10d store on one of the nodes).
    pub rdzv_endpoint: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ProgressFile {
    samples: f64,
    #[serde(default)]
    checkpoint_samples: f64,
    step_seconds: Option<f64>,
    accelerator: Option<String>,
    gpus: Option<u32>,
    nodes: Option<u32>,
    local_batch: Option<u32>,
}

/// The torchrun command line for `command`.
pub fn torchrun(t: &Torchrun, command: &[String]) -> Vec<String> {
    let mut v = vec![
        "torchrun".to_string(),
        format!("--nnodes={}", t.nnodes),
        format!("--nproc-per-node={}", t.nproc_per_node),
        "--rdzv-backend=c10d".to_string(),
        format!("--rdzv-id={}", t.job),
    ];
    if let Some(e) = &t.rdzv_endpoint {
        v.push(format!("--rdzv-endpoint={e}"));
    }
    v.push("--max-restarts=100".to_string());
    v.extend(command.iter().cloned());
    v
}

/// Whether the cloud has announced this VM's reclaim. Metadata servers answer fast or not at
/// all, so each poll has a short timeout of its own.
async fn noticed(http: &reqwest::Client, source: NoticeSource, base: &str) -> bool {
    const POLL: Duration = Duration::from_secs(2);
    let base = base.trim_end_matches('/');
    match source {
        NoticeSource::None => false,
        NoticeSource::Aws => {
            let token = http
                .put(format!("{base}/latest/api/token"))
                .header("X-aws-ec2-metadata-token-ttl-seconds", "60")
                .timeout(POLL)
                .send()
                .await;
            let Ok(token) = token else { return false };
            let mut request = http
                .get(format!("{base}/latest/meta-data/spot/instance-action"))
                .timeout(POLL);
            if token.status().is_success()
                && let Ok(t) = token.text().await
            {
                request = request.header("X-aws-ec2-metadata-token", t.trim());
            }
            request
                .send()
                .await
                .is_ok_and(|r| r.status() == reqwest::StatusCode::OK)
        }
        NoticeSource::Gcp => {
            let reply = http
                .get(format!("{base}/computeMetadata/v1/instance/preempted"))
                .header("Metadata-Flavor", "Google")
                .timeout(POLL)
                .send()
                .await;
            match reply {
                Ok(r) if r.status() == reqwest::StatusCode::OK => r
                    .text()
                    .await
                    .is_ok_and(|b| b.trim().eq_ignore_ascii_case("TRUE")),
                _ => false,
            }
        }
    }
}

async fn report(
    client: &Client,
    job: &str,
    file: &ProgressFile,
    checkpointed: bool,
) -> Result<ProgressReply, ClientError> {
    let observation = file.observation(job);
    let progress = Progress {
        done_samples: file.samples,
        checkpoint_samples: file.checkpoint_samples,
        checkpointed,
        observation,
    };
    client.progress(job, &progress).await
}

/// The progress file, checked: `Ok(None)` while the training script has not written it yet;
/// an error that names the file, the line and column or the field, and what was expected.
fn read_progress(path: &Path) -> Result<Option<ProgressFile>, String> {
    use tern_cloud::input::{Limit, ReadError, read_text_capped};
    let shown = path.display();
    let text = match read_text_capped(path, Limit::SETTINGS) {
        Ok(t) => t,
        Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    let f: ProgressFile = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{shown}:{}:{}: {e}; expected {{\"samples\": N, \"checkpoint_samples\": N, ...}}",
            e.line(),
            e.column()
        )
    })?;
    f.check().map_err(|why| format!("{shown}: {why}"))?;
    Ok(Some(f))
}

impl ProgressFile {
    /// The numbers must be progress, and an observation needs its shape.
    fn check(&self) -> Result<(), String> {
        for (field, v) in [
            ("samples", Some(self.samples)),
            ("checkpoint_samples", Some(self.checkpoint_samples)),
            ("step_seconds", self.step_seconds),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(format!("{field}: expected a finite number >= 0, got {v}"));
            }
        }
        if self.checkpoint_samples > self.samples {
            return Err(format!(
                "checkpoint_samples: expected at most samples = {}, got {}",
                self.samples, self.checkpoint_samples
            ));
        }
        if self.step_seconds.is_some() {
            for (field, present) in [
                ("accelerator", self.accelerator.is_some()),
                ("local_batch", self.local_batch.is_some()),
            ] {
                if !present {
                    return Err(format!(
                        "{field}: required with step_seconds (an observation)"
                    ));
                }
            }
        }
        match self.observation("") {
            Some(o) => o.check(),
            None => Ok(()),
        }
    }

    /// The measured step in the file, when it has one (`step_seconds`, `accelerator` and
    /// `local_batch`; one GPU on one node unless it says otherwise).
    fn observation(&self, job: &str) -> Option<tern_cloud::Observation> {
        Some(tern_cloud::Observation {
            job: job.to_string(),
            accelerator: self.accelerator.clone()?,
            gpus: self.gpus.unwrap_or(1),
            nodes: self.nodes.unwrap_or(1),
            local_batch: self.local_batch?,
            step_seconds: self.step_seconds?,
            sync_seconds: None,
            at: chrono::Utc::now(),
        })
    }
}

/// Says what is wrong with the progress file once per distinct problem, not every interval.
#[derive(Debug, Default)]
struct Complaints {
    last: Option<String>,
}

impl Complaints {
    fn read(&mut self, path: &Path) -> Option<ProgressFile> {
        match read_progress(path) {
            Ok(f) => {
                self.last = None;
                f
            }
            Err(why) => {
                if self.last.as_deref() != Some(why.as_str()) {
                    eprintln!("tern agent: progress file not reported: {why}");
                    self.last = Some(why);
                }
                None
            }
        }
    }

    /// Print what the controller clamped, once per distinct answer.
    fn clamped(&mut self, notes: &[String]) {
        if notes.is_empty() {
            return;
        }
        let said = notes.join("; ");
        if self.last.as_deref() != Some(said.as_str()) {
            eprintln!("tern agent: the controller adjusted the report: {said}");
            self.last = Some(said);
        }
    }
}

fn stop(child: &mut Option<Child>) {
    if let Some(c) = child.as_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

fn start(command: &[String]) -> Result<Option<Child>, AgentError> {
    let Some((program, args)) = command.split_first() else {
        return Ok(None);
    };
    eprintln!("tern agent: starting {}", command.join(" "));
    Command::new(program)
        .args(args)
        .spawn()
        .map(Some)
        .map_err(|source| AgentError::Start {
            program: program.clone(),
            source,
        })
}

/// Checkpoint (the job's command), stop training, and report the checkpoint.
async fn drain(
    config: &AgentConfig,
    client: &Client,
    child: &mut Option<Child>,
    why: &str,
) -> Result<(), AgentError> {
    eprintln!("tern agent: {why}: checkpointing and stopping");
    if let Some(cmd) = &config.checkpoint_command {
        let status = Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .status()
            .map_err(|source| AgentError::Checkpoint {
                command: cmd.clone(),
                source,
            })?;
        if !status.success() {
            eprintln!("tern agent: checkpoint command failed: {status}");
        }
    }
    stop(child);
    if let Some(f) = Complaints::default().read(&config.progress_file) {
        report(client, &config.job, &f, true).await?;
    }
    Ok(())
}

/// Run the agent until training ends, the controller asks for a drain, or the cloud gives
/// notice.
pub async fn run(
    config: AgentConfig,
    client: Client,
    http: reqwest::Client,
) -> Result<(), AgentError> {
    let mut child = start(&config.command)?;
    let mut complaints = Complaints::default();
    loop {
        let drain_by_controller = match complaints.read(&config.progress_file) {
            Some(f) => match report(&client, &config.job, &f, false).await {
                Ok(r) => {
                    complaints.clamped(&r.clamped);
                    r.drain || r.state == "cancelled"
                }
                Err(e) => {
                    eprintln!("tern agent: progress report failed: {e}");
                    false
                }
            },
            None => false,
        };
        let notice = noticed(&http, config.notice, &config.metadata_url).await;
        if drain_by_controller || notice {
            let why = if notice {
                "interruption notice"
            } else {
                "drain requested"
            };
            return drain(&config, &client, &mut child, why).await;
        }
        if let Some(c) = child.as_mut()
            && let Some(status) = c.try_wait().map_err(AgentError::Wait)?
        {
            if let Some(f) = complaints.read(&config.progress_file) {
                report(&client, &config.job, &f, false).await?;
            }
            if status.success() {
                return Ok(());
            }
            return Err(AgentError::TrainingFailed(status));
        }
        tokio::time::sleep(config.interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_file_is_checked_and_its_faults_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("progress.json");
        assert_eq!(
            read_progress(&path).map(|f| f.is_some()),
            Ok(false),
            "not yet written"
        );
        let cases = [
            (
                "{\"samples\": 10,\n \"checkpoint_samples\": }",
                "progress.json:2:",
            ),
            ("{\"sample\": 10}", "missing field `samples`"),
            (
                "{\"samples\": -5}",
                "samples: expected a finite number >= 0",
            ),
            (
                "{\"samples\": 5, \"checkpoint_samples\": 9}",
                "checkpoint_samples: expected at most samples",
            ),
            (
                "{\"samples\": 5, \"step_seconds\": 0.2, \"local_batch\": 8}",
                "accelerator: required with step_seconds",
            ),
            (
                "{\"samples\": 5, \"step_seconds\": 0.2, \"local_batch\": 8, \
                 \"accelerator\": \"A100\", \"gpus\": 0}",
                "observation.gpus: expected an integer >= 1",
            ),
        ];
        for (text, want) in cases {
            std::fs::write(&path, text).expect("write");
            let err = read_progress(&path).expect_err(text);
            assert!(err.contains(want), "{text}: {err}");
            assert!(err.contains("progress.json"), "{err}");
        }
        std::fs::write(&path, vec![b' '; 2 << 20]).expect("write");
        assert!(
            read_progress(&path)
                .expect_err("big")
                .contains("larger than")
        );
        std::fs::write(
            &path,
            "{\"samples\": 5, \"checkpoint_samples\": 4, \"step_seconds\": 0.2, \
             \"local_batch\": 8, \"accelerator\": \"A100\", \"gpus\": 8, \"nodes\": 2}",
        )
        .expect("write");
        let f = read_progress(&path).expect("valid").expect("present");
        let o = f.observation("j").expect("an observation");
        assert_eq!((o.gpus, o.nodes, o.local_batch), (8, 2, 8));
    }

    #[test]
    fn torchrun_gets_the_elastic_rendezvous_settings() {
        let t = Torchrun {
            job: "bert".into(),
            nnodes: "2:8".into(),
            nproc_per_node: 4,
            rdzv_endpoint: Some("10.0.0.5:29400".into()),
        };
        let train: Vec<String> = ["python", "train.py", "--lr", "0.1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let cmd = torchrun(&t, &train);
        assert_eq!(cmd[0], "torchrun");
        assert!(cmd.contains(&"--nnodes=2:8".to_string()));
        assert!(cmd.contains(&"--rdzv-id=bert".to_string()));
        assert!(cmd.contains(&"--rdzv-endpoint=10.0.0.5:29400".to_string()));
        assert!(cmd.contains(&"--nproc-per-node=4".to_string()));
        assert_eq!(&cmd[cmd.len() - 4..], ["python", "train.py", "--lr", "0.1"]);
    }
}
