//! Scoped API credentials: tokens an admin created (kept only as the SHA-256 of their secret)
//! and job-scoped agent tokens derived from a key the store holds, so a controller can hand a
//! worker VM a token for its own job without storing one per launch, and a restart (or a
//! standby taking over) keeps every such token valid.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use ring::{digest, hmac, rand::SecureRandom};

use super::sql::{Row, Value, params};
use super::{Result, Store, StoreError, ms, time};

/// Every token tern issues starts with this, so one found in a log or a file is recognisable.
pub const TOKEN_PREFIX: &str = "tern_";

/// Prefix of a derived agent token: `tern_agent_<job>.<HMAC-SHA256(key, job), base64url>`.
pub const AGENT_PREFIX: &str = "tern_agent_";

/// The launch tag that carries a worker's derived agent token to its VM (AWS instance tag,
/// read through IMDS; on GCP the exact tags in the VM's description).
pub const AGENT_TOKEN_TAG: &str = "tern:agent-token";

/// What a token may do (README "Tokens and audit" lists the routes of each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Everything, as the controller's `--token` always could.
    Admin,
    /// The jobs of one team: submit, cancel, status, spec, events, costs.
    Team,
    /// One job's agent: start workers and report progress.
    Agent,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Team => "team",
            Role::Agent => "agent",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Role, String> {
        match s {
            "admin" => Ok(Role::Admin),
            "team" => Ok(Role::Team),
            "agent" => Ok(Role::Agent),
            other => Err(format!(
                "unknown role {}; expected admin, team or agent",
                tern_cloud::name::shown(other)
            )),
        }
    }
}

/// Whether a role's binding is complete and nothing more: a team token names one team, an
/// agent token one job, an admin token neither. `Err` says what to give, in flag terms.
pub fn check_scope(
    role: Role,
    team: Option<&str>,
    job: Option<&str>,
) -> std::result::Result<(), String> {
    let named = |what: &str, v: &str| {
        tern_cloud::name::check_name(v).map_err(|found| {
            format!(
                "--{what}: expected {}, found {found}",
                tern_cloud::name::NAME_RULE
            )
        })
    };
    match (role, team, job) {
        (Role::Admin, None, None) => Ok(()),
        (Role::Admin, ..) => Err("an admin token takes neither --team nor --job".into()),
        (Role::Team, Some(t), None) => named("team", t),
        (Role::Team, None, _) => Err("a team token needs --team TEAM".into()),
        (Role::Team, Some(_), Some(_)) => Err("a team token takes --team, not --job".into()),
        (Role::Agent, None, Some(j)) => named("job", j),
        (Role::Agent, _, None) => Err("an agent token needs --job NAME".into()),
        (Role::Agent, Some(_), Some(_)) => Err("an agent token takes --job, not --team".into()),
    }
}

/// The key agent tokens are derived with; never printed.
pub(super) struct AgentKey(pub(super) String);

impl fmt::Debug for AgentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AgentKey(…)")
    }
}

/// A token as the store keeps it: never its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    pub id: String,
    pub role: Role,
    pub team: Option<String>,
    pub job: Option<String>,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A token just created: its record and the secret, shown to its creator once.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub record: TokenRecord,
    pub secret: String,
}

/// `n` random bytes from the OS.
fn random(n: usize) -> Result<Vec<u8>> {
    let mut out = vec![0u8; n];
    ring::rand::SystemRandom::new()
        .fill(&mut out)
        .map_err(|_| StoreError::Invalid("the OS gave no random bytes".into()))?;
    Ok(out)
}

/// Unpadded base64url (RFC 4648 §5): URL- and header-safe, no `.`, so it ends a derived
/// token unambiguously.
pub fn base64url(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// What the store keeps of a secret: its SHA-256, in hex.
pub fn hash_secret(secret: &str) -> String {
    digest::digest(&digest::SHA256, secret.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Equal strings, in time that depends only on `given`'s length.
fn same(given: &str, expected: &str) -> bool {
    let (g, e) = (given.as_bytes(), expected.as_bytes());
    let mut diff = u8::from(g.len() != e.len());
    for (i, x) in g.iter().enumerate() {
        diff |= x ^ e.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(diff) == 0
}

fn token_from_row(r: &Row) -> Result<TokenRecord> {
    Ok(TokenRecord {
        id: r.text(0)?,
        role: r.text(1)?.parse().map_err(StoreError::Invalid)?,
        team: r.opt_text(2)?,
        job: r.opt_text(3)?,
        created_at: time(r.int(4)?),
        revoked_at: r.opt_int(5)?.map(time),
    })
}

const TOKEN_SELECT: &str = "SELECT id, role, team, job, created_at, revoked_at FROM tokens";

impl Store {
    /// Create a token for `role` (its binding checked by [`check_scope`]); only its hash is
    /// written.
    pub fn create_token(
        &self,
        role: Role,
        team: Option<&str>,
        job: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<NewToken> {
        check_scope(role, team, job).map_err(StoreError::Invalid)?;
        let id = format!("tok_{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
        let secret = format!("{TOKEN_PREFIX}{}", base64url(&random(32)?));
        self.exec(
            "INSERT INTO tokens (id, hash, role, team, job, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                id.clone(),
                hash_secret(&secret),
                role.as_str(),
                team,
                job,
                ms(now)
            ],
        )?;
        let record = TokenRecord {
            id,
            role,
            team: team.map(str::to_string),
            job: job.map(str::to_string),
            created_at: time(ms(now)),
            revoked_at: None,
        };
        Ok(NewToken { record, secret })
    }

    /// The live (not revoked) token whose secret this is: looked up by the secret's hash.
    pub fn token_by_secret(&self, secret: &str) -> Result<Option<TokenRecord>> {
        let rows = self.query(
            &format!("{TOKEN_SELECT} WHERE hash = ?1 AND revoked_at IS NULL"),
            params![hash_secret(secret)],
        )?;
        rows.first().map(token_from_row).transpose()
    }

    /// Revoke a token from now on; `false` when no token has this id. Revoking twice keeps
    /// the first time.
    pub fn revoke_token(&self, id: &str, now: DateTime<Utc>) -> Result<bool> {
        let n = self.exec(
            "UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?2) WHERE id = ?1",
            params![id, ms(now)],
        )?;
        Ok(n > 0)
    }

    /// Every created token, revoked ones included, oldest first.
    pub fn tokens(&self) -> Result<Vec<TokenRecord>> {
        self.query(&format!("{TOKEN_SELECT} ORDER BY created_at, id"), vec![])?
            .iter()
            .map(token_from_row)
            .collect()
    }

    /// Write the agent-token key if the store has none yet (a new store), and read it back.
    pub(super) fn ensure_agent_key(&self) -> Result<String> {
        let fresh = base64url(&random(32)?);
        self.exec(
            "INSERT INTO secrets (name, value) VALUES ('agent_key', ?1)
             ON CONFLICT (name) DO NOTHING",
            vec![Value::from(fresh)],
        )?;
        let rows = self.query("SELECT value FROM secrets WHERE name = 'agent_key'", vec![])?;
        rows.first()
            .map(|r| r.text(0))
            .transpose()?
            .ok_or_else(|| StoreError::Invalid("the store has no agent key".into()))
    }

    fn agent_mac(&self, job: &str) -> String {
        let key = hmac::Key::new(hmac::HMAC_SHA256, self.agent_key.0.as_bytes());
        base64url(hmac::sign(&key, job.as_bytes()).as_ref())
    }

    /// The agent token of `job`: valid for that job's agent routes only, for as long as the
    /// store keeps its key.
    pub fn agent_token(&self, job: &str) -> String {
        format!("{AGENT_PREFIX}{job}.{}", self.agent_mac(job))
    }

    /// The job a derived agent token is bound to, if `token` is one this store derived.
    pub fn agent_job(&self, token: &str) -> Option<String> {
        let (job, mac) = token.strip_prefix(AGENT_PREFIX)?.rsplit_once('.')?;
        tern_cloud::name::check_name(job).ok()?;
        same(mac, &self.agent_mac(job)).then(|| job.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_matches_rfc_4648_vectors() {
        for (raw, enc) in [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64url(raw.as_bytes()), enc, "{raw}");
        }
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
        assert_eq!(base64url(&[0u8; 32]).len(), 43);
    }

    #[test]
    fn secrets_are_stored_as_sha256() {
        assert_eq!(
            hash_secret("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn scopes_are_checked() {
        assert!(check_scope(Role::Admin, None, None).is_ok());
        assert!(check_scope(Role::Team, Some("nlp"), None).is_ok());
        assert!(check_scope(Role::Agent, None, Some("bert")).is_ok());
        for (role, team, job, says) in [
            (Role::Admin, Some("a"), None, "neither"),
            (Role::Team, None, None, "needs --team"),
            (Role::Team, Some("a"), Some("j"), "not --job"),
            (Role::Agent, None, None, "needs --job"),
            (Role::Agent, Some("a"), Some("j"), "not --team"),
            (Role::Team, Some("a b"), None, "--team: expected"),
        ] {
            let why = check_scope(role, team, job).expect_err(says);
            assert!(why.contains(says), "{why}");
        }
        assert_eq!("team".parse::<Role>(), Ok(Role::Team));
        assert!("root".parse::<Role>().is_err());
    }

    #[test]
    fn derived_agent_tokens_bind_their_job_and_key() {
        let a = Store::in_memory().expect("store");
        let b = Store::in_memory().expect("store");
        let token = a.agent_token("job-1");
        assert_eq!(a.agent_job(&token).as_deref(), Some("job-1"));
        assert_eq!(b.agent_job(&token), None, "another store's key");
        assert_eq!(a.agent_job(&token.replace("job-1", "job-2")), None);
        assert_eq!(a.agent_job(&format!("{token}x")), None);
        assert_eq!(a.agent_job("tern_agent_job-1"), None);
        assert!(
            !format!("{:?}", a).contains(&a.agent_key.0),
            "the key is never printed"
        );
    }
}
