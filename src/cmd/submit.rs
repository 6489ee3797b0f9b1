//! `tern submit`, `tern status` and `tern cancel`: the controller's API from the command line.

use std::path::PathBuf;

use anyhow::{Context, bail};

use crate::api::JobStatus;
use crate::api::client::{Reply, request};

/// Where the controller is and how to authenticate.
#[derive(Debug, clap::Args)]
pub struct Server {
    /// Controller base URL.
    #[arg(long, env = "TERN_SERVER", default_value = "http://127.0.0.1:8470")]
    server: String,
    /// Bearer token (the controller's `--token`).
    #[arg(long, env = "TERN_TOKEN", hide_env_values = true)]
    token: Option<String>,
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

fn call(server: &Server, method: &str, path: &str, body: &str) -> anyhow::Result<Reply> {
    let reply = match request(
        &server.server,
        server.token.as_deref(),
        method,
        path,
        "application/toml",
        body,
    ) {
        Ok(r) => r,
        Err(e) if e.is_retryable() => {
            bail!("{e} (is `tern controller` running there? set --server or TERN_SERVER)")
        }
        Err(e) => return Err(e.into()),
    };
    if !(200..300).contains(&reply.status) {
        let message = serde_json::from_str::<serde_json::Value>(&reply.body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(String::from))
            .unwrap_or_else(|| reply.body.clone());
        bail!("controller answered {}: {message}", reply.status);
    }
    Ok(reply)
}

pub fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.job)
        .with_context(|| format!("reading {}", args.job.display()))?;
    // Validate locally first: errors name the file, not "request body".
    let spec = tern_cloud::parse_job_spec(&text, &args.job.display().to_string())?;
    call(&args.server, "POST", "/v1/jobs", &text)?;
    println!("submitted {}", spec.name);
    Ok(())
}

pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    let jobs: Vec<JobStatus> = match &args.name {
        Some(n) => vec![serde_json::from_str(
            &call(&args.server, "GET", &format!("/v1/jobs/{n}"), "")?.body,
        )?],
        None => serde_json::from_str(&call(&args.server, "GET", "/v1/jobs", "")?.body)?,
    };
    if args.json {
        return crate::cmd::output::print_json_line(&serde_json::json!({ "jobs": jobs }));
    }
    let mut t = crate::cmd::output::table(&[
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
    call(
        &args.server,
        "DELETE",
        &format!("/v1/jobs/{}", args.name),
        "",
    )?;
    println!("cancelled {}", args.name);
    Ok(())
}
