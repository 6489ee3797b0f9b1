//! `tern explain JOB`: the job's decision timeline (plan, launch, wait, move, resize, fallback,
//! notice…) with the reasons and the numbers compared, from the controller's store or a
//! running controller's `GET /v1/jobs/NAME/decisions`, as text or JSON.

use std::path::PathBuf;

use anyhow::Context;
use tern::api::client::{Client, ClientError};
use tern::api::wire::decisions::Timeline;
use tern::controller::explain;
use tern::store::{Store, StoreError, StoreUrl};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job.
    job: String,
    /// The controller's state store: a SQLite file (`sqlite:PATH` or a path) or a PostgreSQL
    /// URL. Default: <data dir>/tern/controller.db.
    #[arg(
        long,
        env = "TERN_STATE",
        hide_env_values = true,
        conflicts_with = "server"
    )]
    state: Option<String>,
    /// Ask a running controller (`GET /v1/jobs/NAME/decisions`, bearer auth) instead.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    #[command(flatten)]
    token: super::token::TokenArgs,
    /// PEM CA certificate to trust for an `https://` controller.
    #[arg(long, env = "TERN_CA", value_name = "FILE")]
    ca: Option<PathBuf>,
    /// One JSON object: `{"job", "decisions": [{"at", "kind", "reason", "numbers",
    /// "expected_saving", "realised_saving"}]}`.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let timeline = match &args.server {
        Some(url) => from_server(&args, url)?,
        None => from_store(&args)?,
    };
    if args.json {
        println!("{}", serde_json::to_string(&timeline)?);
    } else {
        print!("{}", explain::text(&timeline));
    }
    Ok(())
}

fn from_store(args: &Args) -> anyhow::Result<Timeline> {
    let url = match &args.state {
        Some(s) => StoreUrl::parse(s),
        None => StoreUrl::Sqlite(
            dirs::data_dir()
                .context("no data directory; pass --state PATH")?
                .join("tern/controller.db"),
        ),
    };
    // Reading only: no store created where none was, no migration, no write lock.
    let store = Store::read_only(&url).map_err(|e| match e {
        e @ StoreError::Missing(_) => {
            anyhow::anyhow!("{e} (pass --state PATH or postgres://…, or --server URL)")
        }
        e => anyhow::Error::new(e).context("opening the state store"),
    })?;
    Ok(explain::load(&store, &args.job)?)
}

fn from_server(args: &Args, url: &str) -> anyhow::Result<Timeline> {
    let http = tern::http::client_with_ca(args.ca.as_deref())?;
    let client = Client::new(url, args.token.get()?, http)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match client.decisions(&args.job).await {
            Ok(t) => Ok(t),
            Err(e @ ClientError::Transport { .. }) => {
                Err(anyhow::anyhow!("{e} (is `tern controller` running there?)"))
            }
            Err(e) if e.status() == Some(404) => {
                // Name the jobs this caller may see, as a store read does.
                let known: Vec<String> = match client.jobs().await {
                    Ok(jobs) => jobs.into_iter().map(|j| j.name).collect(),
                    Err(_) => return Err(e.into()),
                };
                let known = if known.is_empty() {
                    "it has no jobs".to_string()
                } else {
                    format!("known: {}", known.join(", "))
                };
                Err(anyhow::anyhow!(
                    "no job named '{}' on the controller at {url} ({known})",
                    args.job
                ))
            }
            Err(e) => Err(e.into()),
        }
    })
}
