//! `tern token create|list|revoke`: scoped API tokens, made and revoked through the
//! controller's admin API, so the secret is generated where it is hashed and shown only here.

use tern::api::wire::access::{TokenRequest, TokenView};
use tern::store::{Role, check_scope};

use super::submit::{Server, call};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create a token (needs an admin token); its secret is printed once.
    Create(CreateArgs),
    /// List created tokens, revoked ones included (never their secrets).
    List(ListArgs),
    /// Revoke a token by id: it is refused (401) from now on.
    Revoke(RevokeArgs),
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// admin (everything), team (one team's jobs: --team) or agent (one job's workers: --job).
    #[arg(long, value_parser = parse_role)]
    role: Role,
    /// The team a team token acts for.
    #[arg(long, value_name = "TEAM")]
    team: Option<String>,
    /// The job an agent token acts for.
    #[arg(long, value_name = "NAME")]
    job: Option<String>,
    /// Print one JSON object as the last line: {"id", "token", "role", "team"?, "job"?}.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

#[derive(Debug, clap::Args)]
pub struct RevokeArgs {
    /// The token's id (`tok_…`, as `create` printed it).
    id: String,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

fn parse_role(s: &str) -> Result<Role, String> {
    s.parse()
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Create(args) => create(args),
        Command::List(args) => list(args),
        Command::Revoke(args) => revoke(args),
    }
}

fn create(args: CreateArgs) -> anyhow::Result<()> {
    check_scope(args.role, args.team.as_deref(), args.job.as_deref())
        .map_err(|why| anyhow::anyhow!("{why}"))?;
    let request = TokenRequest {
        role: args.role.as_str().to_string(),
        team: args.team,
        job: args.job,
    };
    let made = call(&args.server, async |c| c.create_token(&request).await)?;
    let secret = made.token.clone().unwrap_or_default();
    if args.json {
        let mut out = serde_json::json!({ "id": made.id, "token": secret, "role": made.role });
        if let Some(t) = &made.team {
            out["team"] = t.clone().into();
        }
        if let Some(j) = &made.job {
            out["job"] = j.clone().into();
        }
        return super::output::print_json_line(&out);
    }
    say!("created {} token {}{}", made.role, made.id, scope(&made));
    say!("{secret}");
    say_err!(
        "The token is shown only now; revoke it with `tern token revoke {}`.",
        made.id
    );
    Ok(())
}

/// ` for team T` / ` for job J`, or nothing.
fn scope(t: &TokenView) -> String {
    match (&t.team, &t.job) {
        (Some(team), _) => format!(" for team {team}"),
        (_, Some(job)) => format!(" for job {job}"),
        _ => String::new(),
    }
}

fn list(args: ListArgs) -> anyhow::Result<()> {
    let all: Vec<TokenView> = call(&args.server, async |c| c.tokens().await)?;
    if args.json {
        return super::output::print_json_line(&serde_json::json!({ "tokens": all }));
    }
    let mut t = super::output::table(&["ID", "ROLE", "SCOPE", "CREATED", "REVOKED"]);
    for v in &all {
        t.add_row(vec![
            v.id.clone(),
            v.role.clone(),
            v.team.clone().or_else(|| v.job.clone()).unwrap_or_default(),
            v.created_at.to_rfc3339(),
            v.revoked_at.map(|r| r.to_rfc3339()).unwrap_or_default(),
        ]);
    }
    say!("{t}");
    Ok(())
}

fn revoke(args: RevokeArgs) -> anyhow::Result<()> {
    let done = call(&args.server, async |c| c.revoke_token(&args.id).await)?;
    if args.json {
        return super::output::print_json_line(&done);
    }
    say!("revoked {}", done.id);
    Ok(())
}
