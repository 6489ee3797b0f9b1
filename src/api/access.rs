//! Who is calling `/v1`, and may they. A bearer token is the controller's `--token` (admin), a
//! derived agent token ([`Store::agent_job`]), or a token an admin created (looked up by the
//! hash of its secret); anything else is refused 401. Each route then needs a role: the table
//! in [`need`] is the rule, and a route it does not name needs admin, so a route added later
//! is closed to team and agent tokens until it is listed. Handlers that show several teams'
//! data (the job list, events, costs, the audit log, the per-job metrics) narrow it to a team
//! token's own team.

use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;

use super::ApiState;
use crate::serve::auth::{bearer, constant_time_eq};
use crate::store::{AGENT_PREFIX, Role, Store, TOKEN_PREFIX};

/// The caller of a request, once its token is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// What the audit log records: a created token's id, `admin`, or `agent:<job>`.
    pub id: String,
    pub role: Role,
    /// The team a team token is bound to.
    pub team: Option<String>,
    /// The job an agent token is bound to.
    pub job: Option<String>,
}

impl Principal {
    fn admin() -> Principal {
        Principal {
            id: "admin".into(),
            role: Role::Admin,
            team: None,
            job: None,
        }
    }

    /// The team whose data alone this caller sees; `None` for admin (everything).
    pub fn team_scope(&self) -> Option<&str> {
        match self.role {
            Role::Admin => None,
            _ => Some(self.team.as_deref().unwrap_or("")),
        }
    }

    /// May this caller act on `team`'s jobs as a team does?
    pub fn may_team(&self, team: &str) -> bool {
        match self.role {
            Role::Admin => true,
            Role::Team => self.team.as_deref() == Some(team),
            Role::Agent => false,
        }
    }

    fn described(&self) -> String {
        match (self.role, &self.team, &self.job) {
            (Role::Team, Some(t), _) => format!("this team token is scoped to team {t}"),
            (Role::Agent, _, Some(j)) => format!("this agent token is scoped to job {j}"),
            _ => format!("this is a {} token", self.role),
        }
    }
}

/// The token in the request, as a caller; `None` refuses it (401).
pub async fn identify(state: &ApiState, headers: &HeaderMap) -> Option<Principal> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)?
        .to_string();
    if constant_time_eq(token.as_bytes(), state.token.as_bytes()) {
        return Some(Principal::admin());
    }
    if token.starts_with(AGENT_PREFIX)
        && let Some(job) = state.store.agent_job(&token)
    {
        return Some(Principal {
            id: format!("agent:{job}"),
            role: Role::Agent,
            team: None,
            job: Some(job),
        });
    }
    if !token.starts_with(TOKEN_PREFIX) {
        return None;
    }
    let store = state.store.clone();
    let found = tokio::task::spawn_blocking(move || lookup(&store, &token)).await;
    found.ok().flatten()
}

fn lookup(store: &Store, secret: &str) -> Option<Principal> {
    match store.token_by_secret(secret) {
        Ok(found) => found.map(|t| Principal {
            id: t.id,
            role: t.role,
            team: t.team,
            job: t.job,
        }),
        Err(e) => {
            tracing::warn!("token lookup failed: {e}");
            None
        }
    }
}

/// What a route needs of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Admin,
    /// An admin or any team token (the handler narrows what it shows or accepts to the team).
    AnyTeam,
    /// An admin, or the team token of the job in the path.
    TeamOfJob,
    /// An admin, the team token of the job in the path, or that job's agent.
    ReadJob,
    /// An admin, or the agent token of the job in the path.
    AgentOfJob,
}

/// The route table: what each `/v1` route needs (`path` without `/v1`), and the job it names.
pub fn need<'a>(method: &Method, path: &'a str) -> (Need, Option<&'a str>) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let get = method == Method::GET;
    // A segment that is not a job name (percent-escaped, say) could name a job once the
    // handler decodes it: only an admin may send one.
    if let ["jobs", job, ..] = parts.as_slice()
        && tern_cloud::name::check_name(job).is_err()
    {
        return (Need::Admin, None);
    }
    match (parts.as_slice(), method.as_str()) {
        (["jobs"], "GET" | "POST")
        | (["offers" | "events" | "costs" | "audit" | "metrics"], "GET") => (Need::AnyTeam, None),
        (["jobs", job] | ["jobs", job, "run"], "GET") => (Need::ReadJob, Some(job)),
        (["jobs", job], "DELETE") => (Need::TeamOfJob, Some(job)),
        (["jobs", job, "spec" | "decisions"], _) if get => (Need::TeamOfJob, Some(job)),
        (["jobs", job, "start" | "progress"], "POST") => (Need::AgentOfJob, Some(job)),
        (["jobs", job, ..], _) => (Need::Admin, Some(job)),
        _ => (Need::Admin, None),
    }
}

/// Whether `who` may make a call that needs `need` on `job` of `team` (the job's team when it
/// is known); `Err` is the 403's message, naming the role or scope needed.
pub fn permit(
    who: &Principal,
    need: Need,
    job: Option<&str>,
    team: Option<&str>,
) -> Result<(), String> {
    if who.role == Role::Admin {
        return Ok(());
    }
    let own_team = || team.is_none_or(|t| who.may_team(t));
    let own_job = || who.role == Role::Agent && job.is_some() && who.job.as_deref() == job;
    let ok = match need {
        Need::Admin => false,
        Need::AnyTeam => who.role == Role::Team,
        Need::TeamOfJob => who.role == Role::Team && own_team(),
        Need::ReadJob => (who.role == Role::Team && own_team()) || own_job(),
        Need::AgentOfJob => own_job(),
    };
    if ok {
        return Ok(());
    }
    let wanted = match need {
        Need::Admin => "an admin token".to_string(),
        Need::AnyTeam => "an admin or team token".to_string(),
        Need::TeamOfJob | Need::ReadJob => format!(
            "an admin token or a team token of team {}",
            team.unwrap_or("?")
        ),
        Need::AgentOfJob => format!(
            "an admin token or the agent token of job {}",
            job.unwrap_or("?")
        ),
    };
    Err(format!(
        "forbidden: this call needs {wanted}; {}",
        who.described()
    ))
}

/// The 403 message for a team-scoped call that names `team` outside `who`'s scope.
pub fn other_team(who: &Principal, team: &str) -> String {
    format!(
        "forbidden: this call needs an admin token or a team token of team {team}; {}",
        who.described()
    )
}

/// A 403 with `why`.
pub fn forbidden(why: impl Into<String>) -> Response {
    crate::serve::errors::json_error(StatusCode::FORBIDDEN, why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn team(t: &str) -> Principal {
        Principal {
            id: "tok_1".into(),
            role: Role::Team,
            team: Some(t.into()),
            job: None,
        }
    }

    fn agent(j: &str) -> Principal {
        Principal {
            id: format!("agent:{j}"),
            role: Role::Agent,
            team: None,
            job: Some(j.into()),
        }
    }

    fn may(who: &Principal, method: Method, path: &str, team: Option<&str>) -> bool {
        let (n, job) = need(&method, path);
        permit(who, n, job, team).is_ok()
    }

    #[test]
    fn a_team_token_acts_on_its_own_team_only() {
        let a = team("a");
        assert!(may(&a, Method::POST, "/jobs", None));
        assert!(may(&a, Method::GET, "/jobs/j", Some("a")));
        assert!(may(&a, Method::DELETE, "/jobs/j", Some("a")));
        assert!(may(&a, Method::GET, "/jobs/j/spec", Some("a")));
        assert!(may(&a, Method::GET, "/jobs/j/decisions", Some("a")));
        assert!(may(&a, Method::GET, "/offers", None));
        for path in ["/jobs/j", "/jobs/j/spec", "/jobs/j/decisions"] {
            assert!(!may(&a, Method::GET, path, Some("b")), "{path}");
        }
        assert!(!may(&a, Method::DELETE, "/jobs/j", Some("b")));
        assert!(!may(&a, Method::POST, "/jobs/j/progress", Some("a")));
        assert!(!may(&a, Method::POST, "/tokens", None));
        assert!(
            !may(&a, Method::PUT, "/quotas", None),
            "unlisted routes need admin"
        );
        assert!(
            !may(&a, Method::GET, "/jobs/%62", None),
            "an escaped name needs admin"
        );
        let why = permit(&a, Need::TeamOfJob, Some("j"), Some("b")).expect_err("refused");
        assert!(
            why.contains("team b") && why.contains("scoped to team a"),
            "{why}"
        );
    }

    #[test]
    fn an_agent_token_reaches_its_own_job_only() {
        let x = agent("x");
        for path in ["/jobs/x/start", "/jobs/x/progress"] {
            assert!(may(&x, Method::POST, path, Some("a")), "{path}");
            assert!(!may(&x, Method::POST, &path.replace('x', "y"), Some("a")));
        }
        assert!(may(&x, Method::GET, "/jobs/x", Some("a")), "its own status");
        for (m, path) in [
            (Method::GET, "/jobs"),
            (Method::POST, "/jobs"),
            (Method::DELETE, "/jobs/x"),
            (Method::GET, "/jobs/x/spec"),
            (Method::GET, "/events"),
            (Method::GET, "/offers"),
            (Method::POST, "/tokens"),
        ] {
            assert!(!may(&x, m.clone(), path, Some("a")), "{m} {path}");
        }
    }

    #[test]
    fn admin_reaches_everything() {
        let admin = Principal::admin();
        for (m, path) in [
            (Method::POST, "/tokens"),
            (Method::DELETE, "/tokens/tok_1"),
            (Method::PUT, "/quotas"),
            (Method::POST, "/jobs/x/progress"),
        ] {
            assert!(may(&admin, m, path, Some("b")), "{path}");
        }
    }
}
