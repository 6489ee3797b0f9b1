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
    /// a plain loop; SIGUSR1: Lightning's SLURM handling). torchrun forwards it.
    #[arg(long, default_value = "SIGTERM", value_parser = parse_signal)]
    checkpoint_signal: rustix::process::Signal,
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
    /// How the training is started.
    #[arg(long, value_enum, default_value = "torchrun")]
    launcher: LauncherArg,
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
    /// Worker processes per node (usually the node's GPUs).
    #[arg(long, default_value_t = 1)]
    nproc_per_node: u32,
    /// Restarts in a row without progress (with backoff 1, 2, 4 … s) before the job fails.
    #[arg(long, default_value_t = 3)]
    max_restarts: u32,
    /// Seconds without progress (`samples` unchanged in the progress file) after which the
    /// training is taken as hung: stopped as for a drain (the checkpoint signal, the grace,
    /// SIGKILL), reported, and restarted from its checkpoint, counting toward
    /// --max-restarts (default: the larger of 600 and 20 of its measured steps).
    #[arg(long, value_parser = super::number::positive, allow_negative_numbers = true)]
    hang_timeout: Option<f64>,
    /// The training command, after `--`: `train.py ARGS`, `python[3] [-u] train.py ARGS`,
    /// `python -m MODULE ARGS`, or any executable.
    #[arg(last = true, required = true)]
    command: Vec<String>,
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
    let notice = NoticeSource::from(args.notice);
    let launcher = match args.launcher {
        LauncherArg::Torchrun => Launcher::Torchrun,
        LauncherArg::None => Launcher::None,
    };
    let t = Torchrun {
        job: args.job.clone(),
        nnodes: args.nnodes.clone(),
        nproc_per_node: args.nproc_per_node,
        rdzv_endpoint: args.rdzv_endpoint.clone(),
        rdzv_conf: args.rdzv_conf.clone(),
    };
    let argv = command_line(launcher, &t, &args.command)?;
    let config = AgentConfig {
        job: args.job,
        progress_file: std::path::absolute(&args.progress_file)?,
        checkpoint_command: args.checkpoint_command,
        checkpoint_signal: args.checkpoint_signal,
        stop_grace: args
            .stop_grace
            .map_or_else(|| notice.default_grace(), Duration::from_secs_f64),
        notice,
        metadata_url: args
            .metadata_url
            .unwrap_or_else(|| notice.default_metadata_url().to_string()),
        instance_id: args.instance_id,
        interval: Duration::from_secs_f64(args.interval.max(0.1)),
        argv,
        launcher,
        max_restarts: args.max_restarts,
        hang_timeout: args.hang_timeout.map(Duration::from_secs_f64),
        watchdog_exe: std::env::current_exe().ok(),
    };
    let http = args.server.http()?;
    let client = args.server.client_with(http.clone())?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(tern::agent::run(config, client, http))?;
    Ok(())
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
