//! The controller's API from the outside: `tern submit/status/cancel`, `tern token`, `tern audit`,
//! `tern agent` and the Terraform provider. One [`reqwest::Client`] (from [`crate::http`]) per process, so
//! connections are reused; every error names the URL it is about.

use serde::de::DeserializeOwned;

use super::wire::access::{AuditQuery, AuditView, TokenRequest, TokenView};
use super::wire::costs::{CostQuery, CostReport};
use super::wire::decisions::Timeline;
use super::wire::{
    Action, ErrorBody, EventView, JobStatus, Progress, ProgressReply, StartReply, StartRequest,
};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("server URL {0} is not of the form http(s)://HOST[:PORT]")]
    Url(String),
    /// `reason` is the whole chain of causes (a TLS failure names the certificate problem).
    #[error("cannot reach the controller at {url}: {reason}")]
    Transport { url: String, reason: String },
    #[error("controller answered {status}: {message}")]
    Status {
        url: String,
        status: u16,
        message: String,
        /// What an agent must do, on a refused start or progress report.
        action: Option<Action>,
    },
    #[error("unexpected answer from {url}: {reason}")]
    Decode { url: String, reason: String },
}

impl ClientError {
    /// The controller may answer later: it was unreachable, or failed on its side.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Transport { .. } => true,
            ClientError::Status { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }

    /// The HTTP status the controller answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The controller's instruction to an agent with a refusal (409 on start or progress).
    pub fn action(&self) -> Option<Action> {
        match self {
            ClientError::Status { action, .. } => *action,
            _ => None,
        }
    }
}

/// A controller's `/v1` API.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// `base` is the controller's URL (`http://127.0.0.1:8470` or `https://…`).
    pub fn new(
        base: &str,
        token: Option<String>,
        http: reqwest::Client,
    ) -> Result<Client, ClientError> {
        let trimmed = base.trim_end_matches('/');
        let ok = reqwest::Url::parse(trimmed).is_ok_and(|u| {
            matches!(u.scheme(), "http" | "https") && u.has_host() && u.path() == "/"
        });
        if !ok {
            return Err(ClientError::Url(base.to_string()));
        }
        Ok(Client {
            base: trimmed.to_string(),
            token,
            http,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn send<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
        url: String,
    ) -> Result<T, ClientError> {
        let request = match &self.token {
            Some(t) => request.bearer_auth(t),
            None => request,
        };
        let transport = |e: reqwest::Error| ClientError::Transport {
            url: url.clone(),
            reason: causes(&e),
        };
        let reply = request.send().await.map_err(transport)?;
        let status = reply.status();
        let body = reply.text().await.map_err(transport)?;
        if !status.is_success() {
            let (message, action) = match serde_json::from_str::<ErrorBody>(&body) {
                Ok(e) => (e.error, e.action),
                Err(_) => (body.trim().to_string(), None),
            };
            return Err(ClientError::Status {
                url,
                status: status.as_u16(),
                message,
                action,
            });
        }
        serde_json::from_str(&body).map_err(|e| ClientError::Decode {
            url,
            reason: e.to_string(),
        })
    }

    /// Submit a job spec (TOML text); the controller answers with the job's name.
    pub async fn submit(&self, spec_toml: &str) -> Result<String, ClientError> {
        #[derive(serde::Deserialize)]
        struct Created {
            name: String,
        }
        let url = self.url("/v1/jobs");
        let request = self
            .http
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/toml")
            .body(spec_toml.to_string());
        let created: Created = self.send(request, url).await?;
        Ok(created.name)
    }

    pub async fn jobs(&self) -> Result<Vec<JobStatus>, ClientError> {
        let url = self.url("/v1/jobs");
        self.send(self.http.get(&url), url).await
    }

    pub async fn job(&self, name: &str) -> Result<JobStatus, ClientError> {
        let url = self.url(&format!("/v1/jobs/{}", path_segment(name)));
        self.send(self.http.get(&url), url).await
    }

    /// The offers the controller last read from its cloud (`GET /v1/offers`).
    pub async fn offers(&self) -> Result<Vec<tern_cloud::Offer>, ClientError> {
        let url = self.url("/v1/offers");
        self.send(self.http.get(&url), url).await
    }

    /// What the job's workers run (`GET /v1/jobs/{name}/run`): its spec's `[run]`.
    pub async fn job_run(&self, name: &str) -> Result<tern_cloud::run::RunSpec, ClientError> {
        let url = self.url(&format!("/v1/jobs/{}/run", path_segment(name)));
        self.send(self.http.get(&url), url).await
    }

    /// The spec the job was admitted with (`GET /v1/jobs/{name}/spec`).
    pub async fn job_spec(&self, name: &str) -> Result<tern_cloud::JobSpec, ClientError> {
        let url = self.url(&format!("/v1/jobs/{}/spec", path_segment(name)));
        self.send(self.http.get(&url), url).await
    }

    /// The job's decision timeline (`GET /v1/jobs/{name}/decisions`).
    pub async fn decisions(&self, name: &str) -> Result<Timeline, ClientError> {
        let url = self.url(&format!("/v1/jobs/{}/decisions", path_segment(name)));
        self.send(self.http.get(&url), url).await
    }

    /// Cancel a job; the answer is its status after the cancel.
    pub async fn cancel(&self, name: &str) -> Result<Option<JobStatus>, ClientError> {
        let url = self.url(&format!("/v1/jobs/{}", path_segment(name)));
        self.send(self.http.delete(&url), url).await
    }

    /// A worker's progress report; the answer says whether to checkpoint now.
    pub async fn progress(
        &self,
        name: &str,
        progress: &Progress,
    ) -> Result<ProgressReply, ClientError> {
        let url = self.url(&format!("/v1/jobs/{}/progress", path_segment(name)));
        self.send(self.http.post(&url).json(progress), url).await
    }

    /// Ask to start the job's workers on `instance` (at `address`, when the job's nodes must
    /// find each other): the incarnation they run as, and the node's rank.
    pub async fn start(
        &self,
        name: &str,
        instance: &str,
        address: Option<&str>,
    ) -> Result<StartReply, ClientError> {
        let url = self.url(&format!("/v1/jobs/{}/start", path_segment(name)));
        let body = StartRequest {
            instance: instance.to_string(),
            address: address.map(str::to_string),
        };
        self.send(self.http.post(&url).json(&body), url).await
    }

    /// The cost report for `query` (`GET /v1/costs`).
    pub async fn costs(&self, query: &CostQuery) -> Result<CostReport, ClientError> {
        let url = self.url("/v1/costs");
        self.send(self.http.get(&url).query(query), url).await
    }

    /// Events after id `after`, of one job or all.
    pub async fn events(
        &self,
        after: i64,
        job: Option<&str>,
    ) -> Result<Vec<EventView>, ClientError> {
        let url = self.url("/v1/events");
        let mut query = vec![("after", after.to_string())];
        if let Some(j) = job {
            query.push(("job", j.to_string()));
        }
        self.send(self.http.get(&url).query(&query), url).await
    }
}

impl Client {
    /// Create a scoped token (`POST /v1/tokens`, admin): the answer holds its secret.
    pub async fn create_token(&self, request: &TokenRequest) -> Result<TokenView, ClientError> {
        let url = self.url("/v1/tokens");
        self.send(self.http.post(&url).json(request), url).await
    }

    /// Created tokens, without secrets (`GET /v1/tokens`, admin).
    pub async fn tokens(&self) -> Result<Vec<TokenView>, ClientError> {
        let url = self.url("/v1/tokens");
        self.send(self.http.get(&url), url).await
    }

    /// Revoke a token by id (`DELETE /v1/tokens/{id}`, admin).
    pub async fn revoke_token(&self, id: &str) -> Result<TokenView, ClientError> {
        let url = self.url(&format!("/v1/tokens/{}", path_segment(id)));
        self.send(self.http.delete(&url), url).await
    }

    /// The audit log (`GET /v1/audit`), oldest first.
    pub async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditView>, ClientError> {
        let url = self.url("/v1/audit");
        self.send(self.http.get(&url).query(query), url).await
    }
}

/// An error and its causes, `a: b: c` (reqwest's own message leaves them out).
fn causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

/// A job name as one URL path segment (names are validated on submit, but a name typed on the
/// command line may hold anything).
fn path_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b));
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_names_escaped() {
        let http = crate::http::client().expect("client");
        assert!(Client::new("http://127.0.0.1:8470/", None, http.clone()).is_ok());
        assert!(Client::new("https://tern.example:443", None, http.clone()).is_ok());
        for bad in ["127.0.0.1:8470", "ftp://x", "http://x/api", ""] {
            assert!(
                matches!(
                    Client::new(bad, None, http.clone()),
                    Err(ClientError::Url(_))
                ),
                "{bad}"
            );
        }
        assert_eq!(path_segment("bert-v100_2"), "bert-v100_2");
        assert_eq!(path_segment("a/b c"), "a%2Fb%20c");
    }

    #[tokio::test]
    async fn an_unreachable_controller_names_its_url() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let base = format!("http://127.0.0.1:{port}");
        let c = Client::new(&base, None, crate::http::client().expect("client")).expect("url");
        let err = c.jobs().await.expect_err("nothing listens");
        assert!(err.is_retryable());
        assert!(err.to_string().contains(&base), "{err}");
    }
}
