//! `tern agent`: the worker agent ([`tern::agent`]) from the command line.

use std::path::PathBuf;
use std::time::Duration;

use tern::agent::{AgentConfig, NoticeSource, Torchrun, torchrun};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NoticeArg {
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
    #[command(flatten)]
    server: super::submit::Server,
    /// JSON file the training script keeps up to date (see the module docs / README).
    #[arg(long, value_name = "FILE")]
    progress_file: PathBuf,
    /// Shell command that writes a checkpoint now and exits when it is safe.
    #[arg(long)]
    checkpoint_command: Option<String>,
    #[arg(long, value_enum, default_value = "aws")]
    notice: NoticeArg,
    /// Metadata server (default: the cloud's link-local address).
    #[arg(long)]
    metadata_url: Option<String>,
    /// Seconds between progress reports and notice polls (AWS suggests 5 s).
    #[arg(long, default_value_t = 5.0, value_parser = super::number::positive, allow_negative_numbers = true)]
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
    let command = if args.command.is_empty() {
        Vec::new()
    } else {
        let t = Torchrun {
            job: args.job.clone(),
            nnodes: args.nnodes.clone(),
            nproc_per_node: args.nproc_per_node,
            rdzv_endpoint: args.rdzv_endpoint.clone(),
        };
        torchrun(&t, &args.command)
    };
    let config = AgentConfig {
        job: args.job,
        progress_file: args.progress_file,
        checkpoint_command: args.checkpoint_command,
        notice,
        metadata_url: args
            .metadata_url
            .unwrap_or_else(|| notice.default_metadata_url().to_string()),
        interval: Duration::from_secs_f64(args.interval.max(0.1)),
        command,
    };
    let http = args.server.http()?;
    let client = args.server.client_with(http.clone())?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(tern::agent::run(config, client, http))?;
    Ok(())
}
