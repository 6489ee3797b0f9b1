//! `tern explain JOB`: the job's decision timeline (plan, launch, wait, move, resize, fallback,
//! notice…) with the reasons and the numbers compared, from the controller's store or a
//! running controller's `GET /v1/jobs/NAME/decisions`, as text or JSON.

use tern::api::client::ClientError;
use tern::api::wire::decisions::Timeline;
use tern::controller::explain;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job.
    job: String,
    // The store (`--state`) or the controller (`--server`: `GET /v1/jobs/NAME/decisions`).
    #[command(flatten)]
    source: super::reading::SourceArgs,
    /// One JSON object: `{"job", "decisions": [{"at", "kind", "reason", "numbers",
    /// "expected_saving", "realised_saving"}]}`.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let timeline = match &args.source.server() {
        Some(url) => from_server(&args, url)?,
        None => from_store(&args)?,
    };
    if args.json {
        println!("{}", serde_json::to_string(&timeline)?);
    } else {
        print!("{}", tern::terminal::safe(&explain::text(&timeline)));
    }
    Ok(())
}

fn from_store(args: &Args) -> anyhow::Result<Timeline> {
    let store = args.source.store()?;
    // Open usage is billed to now, as `tern cost-report` bills it.
    Ok(explain::load(&store, &args.job, chrono::Utc::now())?)
}

fn from_server(args: &Args, url: &str) -> anyhow::Result<Timeline> {
    let client = args.source.client(url)?;
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
