//! `tern agent`: the worker agent ([`tern::agent`]) from the command line.

use std::path::PathBuf;
use std::time::Duration;

use tern::agent::{AgentConfig, Launcher, NoticeSource, Torchrun, command_line, tree};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NoticeArg {
    /// AWS EC2 instance metadata `spot/instance-action` (IMDSv2).
    Aws,
    /// GCE metadata `instance/preempted`.
    Gcp,
    /// No cloud notice (on-premises, tests): only the controller's drain.
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LauncherArg {
    /// torchrun's elastic agent starts `--nproc-per-node` workers (PyTorch jobs).
    Torchrun,
    /// The command as written: a single-process or non-PyTorch job.
    None,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job this VM works for.
    #[arg(long)]
    job: String,
    #[command(flatten)]
    server: super::submit::Server,
    /// JSON file the training keeps up to date (README, "Contract for training scripts").
    #[arg(long, value_name = "FILE")]
    progress_file: PathBuf,
    /// Shell command that writes a checkpoint now and exits once it is durable; run before
    /// the checkpoint signal.
    #[arg(long)]
    checkpoint_command: Option<String>,
    /// Signal that makes the training save and exit (SIGTERM: NeMo's preemption callback,
    /// a plain loop; SIGUSR1: Lightning's SLURM handling). torchrun forwards it. Default:
    /// the job's `[run]`, else SIGTERM.
    #[arg(long, value_parser = parse_signal)]
    checkpoint_signal: Option<rustix::process::Signal>,
    /// Seconds from the checkpoint signal to SIGKILL (default: the cloud's notice lead less
    /// a margin: 100 on AWS, 25 on GCP, 30 with --notice none).
    #[arg(long, value_parser = super::number::positive, allow_negative_numbers = true)]
    stop_grace: Option<f64>,
    /// Where the cloud announces a reclaim (and says which instance this is).
    #[arg(long, env = "TERN_NOTICE", value_enum, default_value = "aws")]
    notice: NoticeArg,
    /// Metadata server (default: the cloud's link-local address).
    #[arg(long, env = "TERN_METADATA_URL")]
    metadata_url: Option<String>,
    /// This VM's instance id as the controller knows it (default: from the cloud's metadata:
    /// the AWS instance id, or ZONE/NAME on GCE). Needed on the simulated cloud.
    #[arg(long, env = "TERN_INSTANCE_ID")]
    instance_id: Option<String>,
    /// Seconds between progress reports and notice polls (AWS suggests 5 s).
    #[arg(long, env = "TERN_AGENT_INTERVAL", default_value_t = 5.0, value_parser = super::number::positive, allow_negative_numbers = true)]
    interval: f64,
    /// How the training is started (default: the job's `[run]`, else torchrun).
    #[arg(long, value_enum)]
    launcher: Option<LauncherArg>,
    /// Elastic node range for torchrun, `MIN:MAX` (or N).
    #[arg(long, default_value = "1")]
    nnodes: String,
    /// Rendezvous endpoint `HOST:PORT` (torchrun's c10d store on one of the nodes); needed
    /// with more than one node.
    #[arg(long)]
    rdzv_endpoint: Option<String>,
    /// Extra torchrun `--rdzv-conf` settings, e.g. `last_call_timeout=5`.
    #[arg(long)]
    rdzv_conf: Option<String>,
    /// This VM's address as the job's other nodes reach it, for `[run] node_env = "skypilot"`
    /// jobs (default: the cloud's metadata: its private IP; 127.0.0.1 with --notice none).
    #[arg(long, env = "TERN_NODE_ADDRESS")]
    address: Option<String>,
    /// Worker processes per node (usually the node's GPUs; default: the job's `[run]`, else 1).
    #[arg(long)]
    nproc_per_node: Option<u32>,
    /// Restarts in a row without progress (with backoff 1, 2, 4 … s) before the job fails
    /// (default: the job's `[run]`, else 3).
    #[arg(long)]
    max_restarts: Option<u32>,
    /// Seconds without progress (`samples` unchanged in the progress file) after which the
    /// training is taken as hung: stopped as for a drain (the checkpoint signal, the grace,
    /// SIGKILL), reported, and restarted from its checkpoint, counting toward
    /// --max-restarts (default: the larger of 600 and 20 of its measured steps).
    #[arg(long, value_parser = super::number::positive, allow_negative_numbers = true)]
    hang_timeout: Option<f64>,
    /// The training command, after `--`: `train.py ARGS`, `python[3] [-u] train.py ARGS`,
    /// `python -m MODULE ARGS`, or any executable. Nothing after `--`: the job's `[run]`,
    /// fetched from the controller (its command, setup, env, workdir and options; a flag given
    /// here wins over the option it repeats).
    #[arg(last = true)]
    command: Vec<String>,
    /// Log one JSON object per line on stderr (with the job, the instance, the incarnation and
    /// each event's fields) instead of `tern agent: …` lines.
    #[arg(long)]
    log_json: bool,
}

fn parse_signal(s: &str) -> Result<rustix::process::Signal, String> {
    tree::parse_signal(s)
}

impl From<NoticeArg> for NoticeSource {
    fn from(a: NoticeArg) -> Self {
        match a {
            NoticeArg::Aws => NoticeSource::Aws,
            NoticeArg::Gcp => NoticeSource::Gcp,
            NoticeArg::None => NoticeSource::None,
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    tern::agent::log::init(args.log_json);
    let http = args.server.http()?;
    let client = args.server.client_with(http.clone())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let job_run = match args.command.is_empty() {
        true => {
            let r = rt.block_on(fetch_run(&client, &args.job))?;
            tracing::info!(
                job = %args.job,
                "running job {}'s [run]: {}",
                args.job,
                r.command.join(" ")
            );
            Some(r)
        }
        false => {
            tracing::info!(job = %args.job, "running the command given after `--`");
            None
        }
    };
    let config = config_of(args, job_run.unwrap_or_default())?;
    rt.block_on(tern::agent::run(config, client, http))?;
    Ok(())
}

/// The job's `[run]`, asked of the controller until it answers (it may still be starting when
/// a VM boots): a job without one is an error that says what to do.
async fn fetch_run(
    client: &tern::api::client::Client,
    job: &str,
) -> anyhow::Result<tern_cloud::run::RunSpec> {
    let until = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        match client.job_run(job).await {
            Ok(r) => return Ok(r),
            Err(e) if e.is_retryable() && std::time::Instant::now() < until => {
                tracing::warn!(error = %e, "asking for job {job}'s [run]: {e}; trying again");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => anyhow::bail!(
                "nothing to run: no command after `--`, and job {job}'s [run] could not be \
                 read: {e}"
            ),
        }
    }
}

/// The agent's settings: each flag given, else the job's `[run]` option, else the default.
fn config_of(args: Args, r: tern_cloud::run::RunSpec) -> anyhow::Result<AgentConfig> {
    let notice = NoticeSource::from(args.notice);
    let launcher = match args.launcher {
        Some(LauncherArg::Torchrun) => Launcher::Torchrun,
        Some(LauncherArg::None) => Launcher::None,
        None if r.launcher.as_deref() == Some("none") => Launcher::None,
        None => Launcher::Torchrun,
    };
    let t = Torchrun {
        job: args.job.clone(),
        nnodes: args.nnodes.clone(),
        nproc_per_node: args.nproc_per_node.or(r.nproc_per_node).unwrap_or(1),
        rdzv_endpoint: args.rdzv_endpoint.clone(),
        rdzv_conf: args.rdzv_conf.clone().or(r.rdzv_conf.clone()),
    };
    let command = match args.command.is_empty() {
        true => r.command.clone(),
        false => args.command.clone(),
    };
    let argv = command_line(launcher, &t, &command)?;
    let signal = match (args.checkpoint_signal, &r.checkpoint_signal) {
        (Some(s), _) => s,
        (None, Some(name)) => tree::parse_signal(name).map_err(anyhow::Error::msg)?,
        (None, None) => rustix::process::Signal::TERM,
    };
    let seconds = |flag: Option<f64>, run: Option<f64>| flag.or(run).map(Duration::from_secs_f64);
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let workdir = r
        .workdir
        .as_deref()
        .map(|w| match (w.strip_prefix("~/"), &home) {
            (Some(rest), Some(h)) => h.join(rest),
            _ => PathBuf::from(w),
        });
    if let Some(w) = &workdir {
        std::fs::create_dir_all(w)
            .map_err(|e| anyhow::anyhow!("[run] workdir {}: {e}", w.display()))?;
    }
    Ok(AgentConfig {
        job: args.job,
        progress_file: std::path::absolute(&args.progress_file)?,
        checkpoint_command: args.checkpoint_command.or(r.checkpoint_command),
        checkpoint_signal: signal,
        stop_grace: seconds(args.stop_grace, r.stop_grace_s)
            .unwrap_or_else(|| notice.default_grace()),
        notice,
        metadata_url: args
            .metadata_url
            .unwrap_or_else(|| notice.default_metadata_url().to_string()),
        instance_id: args.instance_id,
        interval: Duration::from_secs_f64(args.interval.max(0.1)),
        argv,
        launcher,
        max_restarts: args.max_restarts.or(r.max_restarts).unwrap_or(3),
        hang_timeout: seconds(args.hang_timeout, r.hang_timeout_s),
        watchdog_exe: std::env::current_exe().ok(),
        env: r.env.into_iter().collect(),
        workdir,
        skypilot_env: r.node_env.as_deref() == Some("skypilot"),
        address: args.address,
        setup: r.setup.map(|script| tern::agent::setup::Setup {
            shell: r.shell.clone().unwrap_or_else(|| "sh".into()),
            script,
            timeout: Duration::from_secs_f64(
                r.setup_timeout_s
                    .unwrap_or(tern_cloud::run::DEFAULT_SETUP_TIMEOUT_S),
            ),
        }),
    })
}

#[derive(Debug, clap::Args)]
pub struct WatchdogArgs {
    /// The tree's mark (`TERN_TREE`).
    #[arg(long)]
    tree: String,
    /// Seconds between SIGTERM and SIGKILL.
    #[arg(long, default_value_t = 10.0)]
    grace: f64,
}

pub fn watchdog(args: WatchdogArgs) -> anyhow::Result<()> {
    tree::watch(
        &args.tree,
        Duration::from_secs_f64(args.grace.clamp(0.0, 3600.0)),
    );
    Ok(())
}
