//! `tern submit`, `tern status` and `tern cancel`: the controller's API from the command line.

use std::path::PathBuf;

use anyhow::Context;
use tern::api::client::{Client, ClientError};
use tern::api::wire::JobStatus;

/// Where the controller is and how to authenticate.
#[derive(Debug, clap::Args)]
pub struct Server {
    /// Controller base URL (`http://…` or `https://…`).
    #[arg(long, env = "TERN_SERVER", default_value = "http://127.0.0.1:8470")]
    server: String,
    #[command(flatten)]
    token: super::token::TokenArgs,
    /// PEM CA certificate to trust for an `https://` controller (beside the system's roots).
    #[arg(long, env = "TERN_CA", value_name = "FILE")]
    ca: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// Job spec (TOML; see examples/jobs/).
    job: PathBuf,
    #[command(flatten)]
    server: Server,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// One job; all jobs when absent.
    name: Option<String>,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    name: String,
    #[command(flatten)]
    server: Server,
}

impl Server {
    fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::new(
            &self.server,
            self.token.get()?,
            tern::http::client_with_ca(self.ca.as_deref())?,
        )?)
    }
}

/// Run one API call on a small runtime; an unreachable controller gets a hint.
fn call<T>(
    server: &Server,
    f: impl AsyncFnOnce(&Client) -> Result<T, ClientError>,
) -> anyhow::Result<T> {
    let client = server.client()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match runtime.block_on(f(&client)) {
        Ok(v) => Ok(v),
        Err(e @ ClientError::Transport { .. }) => {
            let tls = if server.server.starts_with("https://") {
                " Over TLS, --ca or TERN_CA must name the CA of its certificate."
            } else {
                ""
            };
            Err(anyhow::anyhow!(
                "{e} (is `tern controller` running there? set --server or TERN_SERVER.{tls})"
            ))
        }
        Err(e) => Err(e.into()),
    }
}

pub fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.job)
        .with_context(|| format!("reading {}", args.job.display()))?;
    // Validate locally first: errors name the file, not "request body".
    let spec = tern_cloud::parse_job_spec(&text, &args.job.display().to_string())?;
    let name = call(&args.server, async |c| c.submit(&text).await)?;
    debug_assert_eq!(name, spec.name);
    println!("submitted {name}");
    Ok(())
}

pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    let jobs: Vec<JobStatus> = match &args.name {
        Some(n) => vec![call(&args.server, async |c| c.job(n).await)?],
        None => call(&args.server, async |c| c.jobs().await)?,
    };
    if args.json {
        return super::output::print_json_line(&serde_json::json!({ "jobs": jobs }));
    }
    let mut t = super::output::table(&[
        "JOB",
        "STATE",
        "PROGRESS",
        "INSTANCES",
        "SPOT",
        "$/h",
        "REASON",
    ]);
    for j in &jobs {
        t.add_row(vec![
            j.name.clone(),
            j.state.clone(),
            format!("{:.1} %", j.progress * 100.0),
            j.instances.to_string(),
            j.spot_instances.to_string(),
            format!("{:.2}", j.dollars_per_hour),
            j.reason.clone().unwrap_or_default(),
        ]);
    }
    println!("{t}");
    Ok(())
}

pub fn cancel(args: CancelArgs) -> anyhow::Result<()> {
    call(&args.server, async |c| c.cancel(&args.name).await)?;
    println!("cancelled {}", args.name);
    Ok(())
}
