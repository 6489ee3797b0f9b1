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
    let observation = match (file.step_seconds, &file.accelerator, file.local_batch) {
        (Some(step), Some(acc), Some(lb)) if step > 0.0 => Some(tern_cloud::Observation {
            job: job.to_string(),
            accelerator: acc.clone(),
            gpus: file.gpus.unwrap_or(1),
            nodes: file.nodes.unwrap_or(1),
            local_batch: lb,
            step_seconds: step,
            sync_seconds: None,
            at: chrono::Utc::now(),
        }),
        _ => None,
    };
    let progress = Progress {
        done_samples: file.samples,
        checkpoint_samples: file.checkpoint_samples,
        checkpointed,
        observation,
    };
    client.progress(job, &progress).await
}

fn read_progress(path: &Path) -> Option<ProgressFile> {
    let bytes = tern_cloud::input::read_capped(path, tern_cloud::input::Limit::SETTINGS).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    serde_json::from_str(&text).ok()
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
    if let Some(f) = read_progress(&config.progress_file) {
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
    loop {
        let drain_by_controller = match read_progress(&config.progress_file) {
            Some(f) => match report(&client, &config.job, &f, false).await {
                Ok(r) => r.drain || r.state == "cancelled",
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
            if let Some(f) = read_progress(&config.progress_file) {
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
