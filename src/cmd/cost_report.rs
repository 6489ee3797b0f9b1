//! `tern cost-report`: what jobs cost, from the controller's store or a running controller's
//! `GET /v1/costs`, as a table, CSV, JSON, an HTML page or an SVG chart.

use std::path::PathBuf;

use anyhow::Context;
use chrono::{DateTime, NaiveDate, Utc};
use tern::api::wire::decisions::Timeline;
use tern::report::{self, CostQuery, CostReport, GroupBy, Ledger};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
    Html,
    Svg,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    // The store (`--state`) or the controller (`--server`: `GET /v1/costs`).
    #[command(flatten)]
    source: super::reading::SourceArgs,
    /// Start of the window: RFC 3339 (`2026-11-01T00:00:00Z`), a date (`2026-11-01`, UTC
    /// midnight) or a duration before now (`7d`, `12h`).
    #[arg(long, value_name = "T", value_parser = parse_time)]
    since: Option<DateTime<Utc>>,
    /// End of the window (same forms); default now.
    #[arg(long, value_name = "T", value_parser = parse_time)]
    until: Option<DateTime<Utc>>,
    /// One row per job, team, UTC day, cloud, capacity type or instance type.
    #[arg(long, default_value = "job", value_parser = parse_by)]
    by: GroupBy,
    /// Only this job.
    #[arg(long, value_name = "NAME")]
    job: Option<String>,
    /// Only this team's jobs.
    #[arg(long, value_name = "NAME")]
    team: Option<String>,
    /// Hide jobs that never launched an instance.
    #[arg(long)]
    launched_only: bool,
    /// Also list every instance: each job's segments across interruptions, moves and resizes.
    #[arg(long)]
    split: bool,
    /// Quota and budget file (examples/quota.toml): team budgets to report against.
    #[arg(long, value_name = "FILE", conflicts_with = "server")]
    quota: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Same as `--format json`.
    #[arg(long, conflicts_with = "format")]
    json: bool,
    /// Write here instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
}

fn parse_by(s: &str) -> Result<GroupBy, String> {
    s.parse()
}

/// RFC 3339, a UTC date, or a duration before now.
pub(super) fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return d
            .and_hms_opt(0, 0, 0)
            .map(|t| t.and_utc())
            .ok_or_else(|| format!("'{s}' is not a valid date"));
    }
    match tern_cloud::parse_duration(s) {
        Some(secs) => Ok(Utc::now() - chrono::TimeDelta::seconds(secs as i64)),
        None => Err(format!(
            "'{s}' is not a time: expected RFC 3339 (2026-11-01T00:00:00Z), a date (2026-11-01) or a duration before now (7d, 12h)"
        )),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let query = CostQuery {
        since: args.since,
        until: args.until,
        by: args.by,
        job: args.job.clone(),
        team: args.team.clone(),
        launched_only: args.launched_only,
        split: args.split,
    };
    if let (Some(s), Some(u)) = (query.since, query.until) {
        anyhow::ensure!(s <= u, "--since {s} is after --until {u}");
    }
    let format = if args.json { Format::Json } else { args.format };
    let (report, decisions) = match &args.source.server() {
        Some(url) => from_server(&args, url, &query, format == Format::Html)?,
        None => from_store(&args, &query)?,
    };
    let text = match format {
        Format::Html => report::html::page(&report, &decisions)?,
        _ => render(&report, format)?,
    };
    match &args.output {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
            say_err!("wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}

/// The report in `format`; SVG is the chart that fits the grouping (cost per bucket by day,
/// spend against budget by team, actual vs on-demand vs plan otherwise).
pub fn render(report: &CostReport, format: Format) -> anyhow::Result<String> {
    Ok(match format {
        Format::Table => tern::terminal::safe(&report::render::table_text(report)).into_owned(),
        Format::Csv => report::render::csv_text(report)?,
        Format::Json => format!("{}\n", serde_json::to_string(report)?),
        Format::Html => report::html::page(report, &[])?,
        Format::Svg => match report.by {
            GroupBy::Day => report::chart::daily(report)?,
            GroupBy::Team => report::chart::cumulative(report)?,
            _ => report::chart::rows(report)?,
        },
    })
}

/// The report, and the decision timeline of each job row (the HTML page's last section).
type WithDecisions = (CostReport, Vec<Timeline>);

fn from_store(args: &Args, query: &CostQuery) -> anyhow::Result<WithDecisions> {
    let store = args.source.store()?;
    let budgets = match &args.quota {
        Some(p) => tern::limits::Limits::load(p)?.budgets(),
        None => Default::default(),
    };
    let ledger = Ledger::load(&store, budgets).context("reading usage and prices")?;
    let now = Utc::now();
    let report = report::build(&ledger, query, now)?;
    let decisions = job_rows(&report)
        .map(|job| tern::controller::explain::timeline(job, &ledger.events, ledger.bills(), now))
        .collect();
    Ok((report, decisions))
}

/// The job names of a report by job (none for other groupings).
fn job_rows(report: &CostReport) -> impl Iterator<Item = &str> {
    report
        .rows
        .iter()
        .filter(|_| report.by == GroupBy::Job)
        .map(|r| r.key.as_str())
}

/// The report from a controller; with `decisions`, each job row's timeline too.
fn from_server(
    args: &Args,
    url: &str,
    query: &CostQuery,
    decisions: bool,
) -> anyhow::Result<WithDecisions> {
    let client = args.source.client(url)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let hint = |e| match e {
        e @ tern::api::client::ClientError::Transport { .. } => {
            anyhow::anyhow!("{e} (is `tern controller` running there?)")
        }
        e => anyhow::Error::from(e),
    };
    let report = runtime.block_on(client.costs(query)).map_err(hint)?;
    let mut timelines = Vec::new();
    if decisions {
        for job in job_rows(&report) {
            timelines.push(runtime.block_on(client.decisions(job)).map_err(hint)?);
        }
    }
    Ok((report, timelines))
}
