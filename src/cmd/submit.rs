//! `tern submit`, `tern status` and `tern cancel`: the controller's API from the command line.

use std::path::PathBuf;

use tern::api::client::{Client, ClientError};
use tern::api::wire::JobStatus;
use tern::jobs::{check_new, check_regions, read_spec, spec_folder, wire_spec};

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
    /// Job spec (TOML; see examples/jobs/), or a SkyPilot task (`.yaml`/`.yml`, with the flags
    /// below; `tern convert skypilot` shows the spec it becomes).
    job: PathBuf,
    #[command(flatten)]
    task: super::convert::TaskFlags,
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
    /// The process's HTTP client, trusting `--ca` too.
    pub(super) fn http(&self) -> anyhow::Result<reqwest::Client> {
        Ok(tern::http::client_with_ca(self.ca.as_deref())?)
    }

    /// The controller's API client over `http`.
    pub(super) fn client_with(&self, http: reqwest::Client) -> anyhow::Result<Client> {
        Ok(Client::new(&self.server, self.token.get()?, http)?)
    }

    fn client(&self) -> anyhow::Result<Client> {
        self.client_with(self.http()?)
    }
}

/// Run one API call on a small runtime; an unreachable controller gets a hint.
pub(super) fn call<T>(
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
    let shown = args.job.display().to_string();
    let text = if super::convert::is_task(&args.job) {
        let c = super::convert::convert(&args.job, &args.task)?;
        for w in &c.warnings {
            say_err!("warning: {w}");
        }
        c.spec
    } else if args.task.any() {
        anyhow::bail!(
            "--name, --deadline, --samples, --steps and --batch are for SkyPilot tasks (.yaml):              {shown} is a tern spec, which says them itself"
        );
    } else {
        read_spec(&args.job)?
    };
    // Validate locally first: errors name the file, not "request body".
    let spec = tern_cloud::parse_job_spec(&text, &shown)?;
    check_new(&spec, chrono::Utc::now(), &shown)?;
    let c = &spec.constraints;
    if !c.regions.is_empty() || c.data.is_some() || c.any_of.iter().any(|a| !a.regions.is_empty()) {
        let catalog = tern_pricing::bundled()?;
        let regions: std::collections::BTreeSet<&str> =
            catalog.offers.iter().map(|o| o.region.as_str()).collect();
        check_regions(&spec, regions.iter().copied(), &shown)?;
    }
    let body = wire_spec(&text, &spec, spec_folder(&args.job))?;
    let name = call(&args.server, async |c| c.submit(&body).await)?;
    debug_assert_eq!(name, spec.name);
    say!("submitted {name}");
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
        "FORECAST",
        "FINISH",
        "REASON",
    ]);
    for j in &jobs {
        let (forecast, finish) = forecast_cells(j);
        t.add_row(vec![
            j.name.clone(),
            j.state.clone(),
            format!("{:.1} %", j.progress * 100.0),
            j.instances.to_string(),
            j.spot_instances.to_string(),
            format!("{:.2}", j.dollars_per_hour),
            forecast,
            finish,
            reason_cell(j, chrono::Utc::now()),
        ]);
    }
    say!("{t}");
    if let [j] = jobs.as_slice()
        && let Some(r) = &j.run
    {
        say!("{}", run_line(r));
    }
    Ok(())
}

/// Why the job ended as it did, else why it waits and for how long.
fn reason_cell(j: &JobStatus, now: chrono::DateTime<chrono::Utc>) -> String {
    if let Some(r) = &j.reason {
        return r.clone();
    }
    let Some(w) = &j.waiting else {
        return String::new();
    };
    let m = (now - w.since).num_minutes().max(0);
    let age = if m < 60 {
        format!("{m}m")
    } else {
        format!("{}h{:02}m", m / 60, m % 60)
    };
    format!("waiting {age}: {}", w.reason)
}

/// A job's `[run]` in one line: the command, whether it has a setup, its env names (never the
/// values).
fn run_line(r: &tern_cloud::run::RunSpec) -> String {
    let mut line = format!("run: {}", shell_words(&r.command));
    if r.setup.is_some() {
        line.push_str("; setup first");
    }
    if let Some(w) = &r.workdir {
        line.push_str(&format!("; in {w}"));
    }
    if !r.env.is_empty() {
        let names: Vec<&str> = r.env.keys().map(String::as_str).collect();
        line.push_str(&format!("; env {}", names.join(", ")));
    }
    line
}

/// An argv as a shell would read it back (arguments with spaces or quotes single-quoted).
fn shell_words(argv: &[String]) -> String {
    let plain = |a: &str| {
        !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
    };
    argv.iter()
        .map(|a| match plain(a) {
            true => a.clone(),
            false => format!("'{}'", a.replace('\'', "'\\''")),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The table's forecast cells: what the step time stands on, and when the remaining work ends
/// at that speed (while the job is still open).
fn forecast_cells(j: &JobStatus) -> (String, String) {
    let Some(f) = &j.forecast else {
        return ("-".into(), "-".into());
    };
    let step = f
        .step_seconds
        .map_or_else(String::new, |s| format!(" {s:.3} s/step"));
    let shown = format!("{}{step} on {}× {}", f.basis, f.gpus, f.accelerator);
    let finish = match f.samples_per_second.filter(|s| *s > 0.0) {
        Some(sps) => {
            let left = (j.total_samples - j.done_samples).max(0.0);
            finish_in(left / sps)
        }
        None => "-".into(),
    };
    (shown, finish)
}

/// How soon the remaining work ends: minutes under an hour (`in 0.0 h` said nothing).
fn finish_in(seconds: f64) -> String {
    if seconds < 3600.0 {
        format!("in {:.0} min", (seconds / 60.0).ceil())
    } else {
        format!("in {:.1} h", seconds / 3600.0)
    }
}

/// Cancel a job. A job that had already ended (finished, failed, over budget) stays as it
/// was, and the line says so: the cancel is answered either way.
pub fn cancel(args: CancelArgs) -> anyhow::Result<()> {
    let status = call(&args.server, async |c| c.cancel(&args.name).await)?;
    match status.as_ref().map(|s| s.state.as_str()) {
        Some(state @ ("finished" | "failed" | "over-budget")) => say!(
            "{} had already ended ({state}): nothing to cancel",
            args.name
        ),
        _ => say!("cancelled {}", args.name),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_line_names_the_env_and_never_shows_a_value() {
        let mut r = tern_cloud::run::RunSpec {
            command: vec!["sh".into(), "-c".into(), "python train.py --lr 3e-4".into()],
            setup: Some("pip install -r requirements.txt".into()),
            ..Default::default()
        };
        r.env.insert("WANDB_API_KEY".into(), "s3cr3t".into());
        let line = run_line(&r);
        assert_eq!(
            line,
            "run: sh -c 'python train.py --lr 3e-4'; setup first; env WANDB_API_KEY"
        );
        assert_eq!(shell_words(&["it's".to_string()]), "'it'\\''s'");
    }

    #[test]
    fn a_finish_under_an_hour_shows_minutes() {
        assert_eq!(finish_in(90.0), "in 2 min");
        assert_eq!(finish_in(3599.0), "in 60 min");
        assert_eq!(finish_in(5400.0), "in 1.5 h");
    }
}
