//! `tern audit`: the controller's audit log of mutating API calls and refusals.

use chrono::{DateTime, Utc};
use tern::api::wire::access::{AuditQuery, AuditView};

use super::submit::{Server, call};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Rows at or after: RFC 3339 (`2026-11-01T00:00:00Z`), a date (`2026-11-01`) or a
    /// duration before now (`1h`, `7d`).
    #[arg(long, value_name = "T", value_parser = super::cost_report::parse_time)]
    since: Option<DateTime<Utc>>,
    /// Only this team's rows (a team token sees only its own team's anyway).
    #[arg(long, value_name = "TEAM")]
    team: Option<String>,
    /// One JSON object as the last line: {"audit": [ … ]}.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let query = AuditQuery {
        since: args.since,
        team: args.team.clone(),
    };
    let rows: Vec<AuditView> = call(&args.server, async |c| c.audit(&query).await)?;
    if args.json {
        return super::output::print_json_line(&serde_json::json!({ "audit": rows }));
    }
    let mut t = super::output::table(&["AT", "TOKEN", "ROLE", "CALL", "JOB", "TEAM", "STATUS"]);
    for r in &rows {
        t.add_row(vec![
            r.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            r.token.clone(),
            r.role.clone(),
            format!("{} {}", r.method, r.path),
            r.job.clone().unwrap_or_default(),
            r.team.clone().unwrap_or_default(),
            r.status.to_string(),
        ]);
    }
    say!("{t}");
    Ok(())
}
