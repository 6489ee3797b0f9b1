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

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::api::client::{request, request_with};
use crate::api::{Progress, ProgressReply};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NoticeSource {
    /// AWS EC2 instance metadata `spot/instance-action` (IMDSv2).
    Aws,
    /// GCE metadata `instance/preempted`.
    Gcp,
    /// No cloud notice (on-premises, tests): only the controller's drain.
    None,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job this VM works for.
    #[arg(long)]
    job: String,
    #[arg(long, env = "TERN_SERVER", default_value = "http://127.0.0.1:8470")]
    server: String,
    #[arg(long, env = "TERN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// JSON file the training script keeps up to date (see the module docs / README).
    #[arg(long, value_name = "FILE")]
    progress_file: PathBuf,
    /// Shell command that writes a checkpoint now and exits when it is safe.
    #[arg(long)]
    checkpoint_command: Option<String>,
    #[arg(long, value_enum, default_value = "aws")]
    notice: NoticeSource,
    /// Metadata server (default: the cloud's link-local address).
    #[arg(long)]
    metadata_url: Option<String>,
    /// Seconds between progress reports and notice polls (AWS suggests 5 s).
    #[arg(long, default_value_t = 5.0)]
    interval: f64,
    /// Elastic node range for torchrun, `MIN:MAX`.
    #[arg(long, default_value = "1:1")]
    nnodes: String,
    /// Rendezvous endpoint `HOST:PORT` (c10d store on one of the nodes).
    #[arg(long)]
    rdzv_endpoint: Option<String>,
    #[arg(long, default_value_t = 1)]
    nproc_per_node: u32,
    /// The training command, after `--`; run under torchrun.
    #[arg(last = true)]
    command: Vec<String>,
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

/// The torchrun command line for `args.command`.
fn torchrun(args: &Args) -> Vec<String> {
    let mut v = vec![
        "torchrun".to_string(),
        format!("--nnodes={}", args.nnodes),
        format!("--nproc-per-node={}", args.nproc_per_node),
        "--rdzv-backend=c10d".to_string(),
        format!("--rdzv-id={}", args.job),
    ];
    if let Some(e) = &args.rdzv_endpoint {
        v.push(format!("--rdzv-endpoint={e}"));
    }
    v.push("--max-restarts=100".to_string());
    v.extend(args.command.iter().cloned());
    v
}

/// Whether the cloud has announced this VM's reclaim.
fn noticed(source: NoticeSource, url: &str) -> bool {
    match source {
        NoticeSource::None => false,
        NoticeSource::Aws => {
            let token = request_with(
                url,
                &[("X-aws-ec2-metadata-token-ttl-seconds", "60")],
                "PUT",
                "/latest/api/token",
                "text/plain",
                "",
            );
            let Ok(token) = token else { return false };
            let mut headers = Vec::new();
            if token.status == 200 {
                headers.push(("X-aws-ec2-metadata-token", token.body.trim()));
            }
            request_with(
                url,
                &headers,
                "GET",
                "/latest/meta-data/spot/instance-action",
                "text/plain",
                "",
            )
            .is_ok_and(|r| r.status == 200)
        }
        NoticeSource::Gcp => request_with(
            url,
            &[("Metadata-Flavor", "Google")],
            "GET",
            "/computeMetadata/v1/instance/preempted",
            "text/plain",
            "",
        )
        .is_ok_and(|r| r.status == 200 && r.body.trim().eq_ignore_ascii_case("TRUE")),
    }
}

fn report(args: &Args, file: &ProgressFile, checkpointed: bool) -> anyhow::Result<ProgressReply> {
    let observation = match (file.step_seconds, &file.accelerator, file.local_batch) {
        (Some(step), Some(acc), Some(lb)) if step > 0.0 => Some(tern_cloud::Observation {
            job: args.job.clone(),
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
    let body = serde_json::to_string(&Progress {
        done_samples: file.samples,
        checkpoint_samples: file.checkpoint_samples,
        checkpointed,
        observation,
    })?;
    let reply = request(
        &args.server,
        args.token.as_deref(),
        "POST",
        &format!("/v1/jobs/{}/progress", args.job),
        "application/json",
        &body,
    )?;
    if reply.status != 200 {
        bail!(
            "controller answered {}: {}",
            reply.status,
            reply.body.trim()
        );
    }
    Ok(serde_json::from_str(&reply.body)?)
}

fn read_progress(path: &PathBuf) -> Option<ProgressFile> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

fn stop(child: &mut Option<Child>) {
    if let Some(c) = child.as_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let metadata = args
        .metadata_url
        .clone()
        .unwrap_or_else(|| match args.notice {
            NoticeSource::Gcp => "http://metadata.google.internal".into(),
            _ => "http://169.254.169.254".into(),
        });
    let mut child = if args.command.is_empty() {
        None
    } else {
        let cmd = torchrun(&args);
        eprintln!("tern agent: starting {}", cmd.join(" "));
        Some(
            Command::new(&cmd[0])
                .args(&cmd[1..])
                .spawn()
                .with_context(|| format!("starting {}", cmd[0]))?,
        )
    };
    let interval = Duration::from_secs_f64(args.interval.max(0.1));
    loop {
        let file = read_progress(&args.progress_file);
        let drain_by_controller = match &file {
            Some(f) => match report(&args, f, false) {
                Ok(r) => r.drain || r.state == "cancelled",
                Err(e) => {
                    eprintln!("tern agent: progress report failed: {e:#}");
                    false
                }
            },
            None => false,
        };
        let notice = noticed(args.notice, &metadata);
        if drain_by_controller || notice {
            eprintln!(
                "tern agent: {}: checkpointing and stopping",
                if notice {
                    "interruption notice"
                } else {
                    "drain requested"
                }
            );
            if let Some(cmd) = &args.checkpoint_command {
                let status = Command::new("sh")
                    .arg("-c")
                    .arg(cmd)
                    .status()
                    .with_context(|| format!("running checkpoint command {cmd}"))?;
                if !status.success() {
                    eprintln!("tern agent: checkpoint command failed: {status}");
                }
            }
            stop(&mut child);
            if let Some(f) = read_progress(&args.progress_file) {
                report(&args, &f, true)?;
            }
            return Ok(());
        }
        if let Some(c) = child.as_mut()
            && let Some(status) = c.try_wait()?
        {
            if let Some(f) = read_progress(&args.progress_file) {
                report(&args, &f, false)?;
            }
            if status.success() {
                return Ok(());
            }
            bail!("training exited with {status}");
        }
        std::thread::sleep(interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn torchrun_gets_the_elastic_rendezvous_settings() {
        let cli = Cli::parse_from([
            "agent",
            "--job",
            "bert",
            "--progress-file",
            "/tmp/p.json",
            "--nnodes",
            "2:8",
            "--rdzv-endpoint",
            "10.0.0.5:29400",
            "--nproc-per-node",
            "4",
            "--",
            "python",
            "train.py",
            "--lr",
            "0.1",
        ]);
        let cmd = torchrun(&cli.args);
        assert_eq!(cmd[0], "torchrun");
        assert!(cmd.contains(&"--nnodes=2:8".to_string()));
        assert!(cmd.contains(&"--rdzv-id=bert".to_string()));
        assert!(cmd.contains(&"--rdzv-endpoint=10.0.0.5:29400".to_string()));
        assert!(cmd.contains(&"--nproc-per-node=4".to_string()));
        assert_eq!(&cmd[cmd.len() - 4..], ["python", "train.py", "--lr", "0.1"]);
    }
}
