//! The controller's API from the outside: `tern submit/status/cancel`, `tern token`, `tern audit`,
//! `tern agent` and the Terraform provider. One [`reqwest::Client`] (from [`crate::http`]) per process, so
//! connections are reused; every error names the URL it is about.

use std::sync::{Arc, PoisonError, RwLock};

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
        /// The leader's URL, on a 503 from a controller that does not lead.
        leader: Option<String>,
        /// The answer's `Retry-After`, in seconds.
        retry_after: Option<u64>,
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
///
/// A controller that does not lead (deposed, or a standby) answers 503 with the leader's URL;
/// the client sends the request there instead, with the same token and CA, at most
/// [`MAX_FOLLOWS`] times per request, says so on stderr, and keeps the new address for later
/// requests (clones share it). It never follows from `https` to `http`: the token would cross
/// the network in the clear. When a leader it followed stops answering, it goes back to the
/// address it was given (a restarted controller there leads, or names who does).
#[derive(Debug, Clone)]
pub struct Client {
    /// The address the client was given.
    origin: String,
    base: Arc<RwLock<String>>,
    token: Option<String>,
    http: reqwest::Client,
}

/// Leaders followed for one request: two controllers naming each other stop here.
pub const MAX_FOLLOWS: usize = 3;

/// Waits for one request on a 503 that names no leader but says when to come back (a
/// controller taking its lease at start-up, a takeover under way, a full connection cap), of
/// at most [`LONGEST_WAIT_S`] each.
pub const MAX_WAITS: usize = 5;
const LONGEST_WAIT_S: u64 = 5;

/// A controller's URL, `http(s)://HOST[:PORT]` without a trailing slash, or `None`.
fn base_url(url: &str) -> Option<String> {
    let trimmed = url.trim_end_matches('/');
    reqwest::Url::parse(trimmed)
        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host() && u.path() == "/")
        .then(|| trimmed.to_string())
}

impl Client {
    /// `base` is the controller's URL (`http://127.0.0.1:8470` or `https://…`).
    pub fn new(
        base: &str,
        token: Option<String>,
        http: reqwest::Client,
    ) -> Result<Client, ClientError> {
        let base = base_url(base).ok_or_else(|| ClientError::Url(base.to_string()))?;
        Ok(Client {
            origin: base.clone(),
            base: Arc::new(RwLock::new(base)),
            token,
            http,
        })
    }

    /// The controller's URL: the one given, or the leader it was last sent to.
    pub fn base(&self) -> String {
        self.base
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Send the request `build` makes for the URL of `path`, following a non-leader's 503 to
    /// the leader it names.
    async fn call<T: DeserializeOwned>(
        &self,
        path: &str,
        build: impl Fn(&reqwest::Client, &str) -> reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        let (mut follows, mut waits) = (0, 0);
        loop {
            let base = self.base();
            let url = format!("{base}{path}");
            match self.once(build(&self.http, &url), url).await {
                Err(ClientError::Status {
                    status: 503,
                    leader: Some(leader),
                    ..
                }) if follows < MAX_FOLLOWS && self.follow(&base, &leader) => follows += 1,
                Err(ClientError::Transport { .. })
                    if follows < MAX_FOLLOWS && self.fall_back(&base) =>
                {
                    follows += 1;
                }
                Err(ClientError::Status {
                    status: 503,
                    leader: None,
                    retry_after: Some(secs),
                    ..
                }) if waits < MAX_WAITS && secs <= LONGEST_WAIT_S => {
                    waits += 1;
                    tokio::time::sleep(std::time::Duration::from_secs(secs.max(1))).await;
                }
                answer => return answer,
            }
        }
    }

    /// Point this client (and its clones) at `leader`, named by a 503 from `from`; false when
    /// it may not be followed: not a controller URL, the same address, or TLS given up.
    fn follow(&self, from: &str, leader: &str) -> bool {
        let Some(to) = base_url(leader) else {
            return false;
        };
        if to == from || (from.starts_with("https://") && !to.starts_with("https://")) {
            return false;
        }
        eprintln!(
            "tern: {} does not lead; sending to the leader at {}",
            crate::terminal::safe(from),
            crate::terminal::safe(&to)
        );
        *self.base.write().unwrap_or_else(PoisonError::into_inner) = to;
        true
    }

    /// The followed leader at `from` does not answer: back to the given address, if `from`
    /// was not it.
    fn fall_back(&self, from: &str) -> bool {
        if from == self.origin {
            return false;
        }
        eprintln!(
            "tern: the leader at {} does not answer; back to {}",
            crate::terminal::safe(from),
            crate::terminal::safe(&self.origin)
        );
        *self.base.write().unwrap_or_else(PoisonError::into_inner) = self.origin.clone();
        true
    }

    async fn once<T: DeserializeOwned>(
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
        let retry_after = reply
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.trim().parse().ok());
        let body = reply.text().await.map_err(transport)?;
        if !status.is_success() {
            let (message, action, leader) = match serde_json::from_str::<ErrorBody>(&body) {
                Ok(e) => (e.error, e.action, e.leader),
                Err(_) => (body.trim().to_string(), None, None),
            };
            return Err(ClientError::Status {
                url,
                status: status.as_u16(),
                message,
                action,
                leader,
                retry_after,
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
        let created: Created = self
            .call("/v1/jobs", |h, u| {
                h.post(u)
                    .header(reqwest::header::CONTENT_TYPE, "application/toml")
                    .body(spec_toml.to_string())
            })
            .await?;
        Ok(created.name)
    }

    pub async fn jobs(&self) -> Result<Vec<JobStatus>, ClientError> {
        self.call("/v1/jobs", |h, u| h.get(u)).await
    }

    pub async fn job(&self, name: &str) -> Result<JobStatus, ClientError> {
        let path = format!("/v1/jobs/{}", path_segment(name));
        self.call(&path, |h, u| h.get(u)).await
    }

    /// The offers the controller last read from its cloud (`GET /v1/offers`).
    pub async fn offers(&self) -> Result<Vec<tern_cloud::Offer>, ClientError> {
        self.call("/v1/offers", |h, u| h.get(u)).await
    }

    /// What the job's workers run (`GET /v1/jobs/{name}/run`): its spec's `[run]`.
    pub async fn job_run(&self, name: &str) -> Result<tern_cloud::run::RunSpec, ClientError> {
        let path = format!("/v1/jobs/{}/run", path_segment(name));
        self.call(&path, |h, u| h.get(u)).await
    }

    /// The spec the job was admitted with (`GET /v1/jobs/{name}/spec`).
    pub async fn job_spec(&self, name: &str) -> Result<tern_cloud::JobSpec, ClientError> {
        let path = format!("/v1/jobs/{}/spec", path_segment(name));
        self.call(&path, |h, u| h.get(u)).await
    }

    /// The job's decision timeline (`GET /v1/jobs/{name}/decisions`).
    pub async fn decisions(&self, name: &str) -> Result<Timeline, ClientError> {
        let path = format!("/v1/jobs/{}/decisions", path_segment(name));
        self.call(&path, |h, u| h.get(u)).await
    }

    /// Cancel a job; the answer is its status after the cancel.
    pub async fn cancel(&self, name: &str) -> Result<Option<JobStatus>, ClientError> {
        let path = format!("/v1/jobs/{}", path_segment(name));
        self.call(&path, |h, u| h.delete(u)).await
    }

    /// A worker's progress report; the answer says whether to checkpoint now.
    pub async fn progress(
        &self,
        name: &str,
        progress: &Progress,
    ) -> Result<ProgressReply, ClientError> {
        let path = format!("/v1/jobs/{}/progress", path_segment(name));
        self.call(&path, |h, u| h.post(u).json(progress)).await
    }

    /// Ask to start the job's workers on `instance` (at `address`, when the job's nodes must
    /// find each other): the incarnation they run as, and the node's rank.
    pub async fn start(
        &self,
        name: &str,
        instance: &str,
        address: Option<&str>,
    ) -> Result<StartReply, ClientError> {
        let path = format!("/v1/jobs/{}/start", path_segment(name));
        let body = StartRequest {
            instance: instance.to_string(),
            address: address.map(str::to_string),
        };
        self.call(&path, |h, u| h.post(u).json(&body)).await
    }

    /// The cost report for `query` (`GET /v1/costs`).
    pub async fn costs(&self, query: &CostQuery) -> Result<CostReport, ClientError> {
        self.call("/v1/costs", |h, u| h.get(u).query(query)).await
    }

    /// Events after id `after`, of one job or all.
    pub async fn events(
        &self,
        after: i64,
        job: Option<&str>,
    ) -> Result<Vec<EventView>, ClientError> {
        let mut query = vec![("after", after.to_string())];
        if let Some(j) = job {
            query.push(("job", j.to_string()));
        }
        self.call("/v1/events", |h, u| h.get(u).query(&query)).await
    }
}

impl Client {
    /// Create a scoped token (`POST /v1/tokens`, admin): the answer holds its secret.
    pub async fn create_token(&self, request: &TokenRequest) -> Result<TokenView, ClientError> {
        self.call("/v1/tokens", |h, u| h.post(u).json(request))
            .await
    }

    /// Created tokens, without secrets (`GET /v1/tokens`, admin).
    pub async fn tokens(&self) -> Result<Vec<TokenView>, ClientError> {
        self.call("/v1/tokens", |h, u| h.get(u)).await
    }

    /// Revoke a token by id (`DELETE /v1/tokens/{id}`, admin).
    pub async fn revoke_token(&self, id: &str) -> Result<TokenView, ClientError> {
        let path = format!("/v1/tokens/{}", path_segment(id));
        self.call(&path, |h, u| h.delete(u)).await
    }

    /// The audit log (`GET /v1/audit`), oldest first.
    pub async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditView>, ClientError> {
        self.call("/v1/audit", |h, u| h.get(u).query(query)).await
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

    /// A server that answers every request with what `answer` gives (status, body), and counts
    /// them.
    async fn answering(
        answer: impl Fn() -> (u16, String) + Send + Sync + 'static,
    ) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (seen, answer) = (hits.clone(), Arc::new(answer));
        let app = axum::Router::new().fallback(move || {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (status, body) = answer();
            async move {
                let status = axum::http::StatusCode::from_u16(status).expect("status");
                (status, body)
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        (base, hits)
    }

    fn not_leader(leader: &str) -> String {
        serde_json::json!({ "error": "this controller is on standby", "leader": leader })
            .to_string()
    }

    #[tokio::test]
    async fn a_non_leaders_503_is_followed_to_the_leader_and_kept() {
        let (leader, at_leader) = answering(|| (200, "[]".into())).await;
        let named = leader.clone();
        let (standby, at_standby) = answering(move || (503, not_leader(&named))).await;
        let http = crate::http::client().expect("client");
        let c = Client::new(&standby, Some("t".into()), http).expect("url");
        let other = c.clone();
        assert!(c.jobs().await.expect("followed").is_empty());
        assert_eq!(c.base(), leader);
        assert_eq!(other.base(), leader, "clones follow too");
        other.jobs().await.expect("at the leader");
        assert_eq!(at_standby.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(at_leader.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_followed_leader_that_stops_answering_sends_the_client_back_where_it_began() {
        let gone = format!(
            "http://127.0.0.1:{}",
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("port")
                .port()
        );
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (count, named) = (asked.clone(), gone.clone());
        // The first answer names a leader that is gone; later ones come from a new leader.
        let (origin, _) =
            answering(
                move || match count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                    0 => (503, not_leader(&named)),
                    _ => (200, "[]".into()),
                },
            )
            .await;
        let http = crate::http::client().expect("client");
        let c = Client::new(&origin, None, http).expect("url");
        assert!(c.jobs().await.expect("back at the origin").is_empty());
        assert_eq!(c.base(), origin);
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    /// A controller taking its lease at start-up answers 503 with no leader and `Retry-After`:
    /// the client waits and asks again, a bounded number of times.
    #[tokio::test]
    async fn a_leaderless_503_with_retry_after_is_asked_again_a_bounded_number_of_times() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = hits.clone();
        let app = axum::Router::new().fallback(move || {
            let n = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                let mut answer = axum::response::IntoResponse::into_response((
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    serde_json::json!({ "error": "no leader is known yet", "leader": null })
                        .to_string(),
                ));
                if n == 1 {
                    return axum::response::IntoResponse::into_response("[]");
                }
                answer.headers_mut().insert(
                    axum::http::header::RETRY_AFTER,
                    axum::http::HeaderValue::from_static("1"),
                );
                answer
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        let http = crate::http::client().expect("client");
        let c = Client::new(&base, None, http).expect("url");
        assert!(c.jobs().await.expect("asked again").is_empty());
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 2);
        // Never a leader: the waits run out and the 503 is the answer.
        let t0 = std::time::Instant::now();
        let err = c.jobs().await.expect_err("503");
        assert_eq!(err.status(), Some(503));
        assert_eq!(
            hits.load(std::sync::atomic::Ordering::SeqCst),
            3 + MAX_WAITS
        );
        assert!(t0.elapsed() >= std::time::Duration::from_secs(MAX_WAITS as u64));
    }

    #[tokio::test]
    async fn two_controllers_naming_each_other_are_followed_a_bounded_number_of_times() {
        let other = Arc::new(std::sync::Mutex::new(String::new()));
        let named = other.clone();
        let (a, at_a) = answering(move || (503, not_leader(&named.lock().expect("b")))).await;
        let named = a.clone();
        let (b, at_b) = answering(move || (503, not_leader(&named))).await;
        *other.lock().expect("b") = b;
        let http = crate::http::client().expect("client");
        let err = Client::new(&a, None, http)
            .expect("url")
            .jobs()
            .await
            .expect_err("nobody leads");
        assert_eq!(err.status(), Some(503), "{err}");
        let asked = at_a.load(std::sync::atomic::Ordering::SeqCst)
            + at_b.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(asked, MAX_FOLLOWS + 1);
    }

    #[tokio::test]
    async fn a_leader_that_is_no_url_or_gives_up_tls_is_not_followed() {
        let (standby, _) = answering(|| (503, not_leader("http://evil\u{1b}]0;x\u{7}:1"))).await;
        let http = crate::http::client().expect("client");
        let c = Client::new(&standby, None, http).expect("url");
        let err = c.jobs().await.expect_err("503");
        assert_eq!(err.status(), Some(503));
        assert_eq!(c.base(), standby);
        assert!(!c.follow("https://a.example:1", "http://b.example:2"));
        assert!(!c.follow(&standby, &format!("{standby}/")));
        assert!(!c.follow(&standby, "ftp://b.example"));
        assert!(c.follow("http://a.example:1", "https://b.example:2"));
        assert_eq!(c.base(), "https://b.example:2");
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
