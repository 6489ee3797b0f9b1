//! The cloud's instance metadata: which instance this is, and whether it will be reclaimed.

use std::time::Duration;

/// Where the cloud announces this VM's reclaim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeSource {
    /// AWS EC2 instance metadata `spot/instance-action` (IMDSv2).
    Aws,
    /// GCE metadata `instance/preempted`.
    Gcp,
    /// No cloud notice (on-premises, tests): only the controller's drain.
    None,
}

impl NoticeSource {
    /// The cloud's metadata server (link-local).
    pub fn default_metadata_url(self) -> &'static str {
        match self {
            NoticeSource::Gcp => "http://metadata.google.internal",
            _ => "http://169.254.169.254",
        }
    }
}

/// An IMDSv2 session token, or `None` when the server gives none (IMDSv1 answers without).
async fn aws_token(
    http: &reqwest::Client,
    base: &str,
    wait: Duration,
) -> Result<Option<String>, reqwest::Error> {
    let reply = http
        .put(format!("{base}/latest/api/token"))
        .header("X-aws-ec2-metadata-token-ttl-seconds", "60")
        .timeout(wait)
        .send()
        .await?;
    if !reply.status().is_success() {
        return Ok(None);
    }
    Ok(reply.text().await.ok().map(|t| t.trim().to_string()))
}

/// An AWS instance-metadata GET of `path`, with the session token when there is one.
async fn aws_get(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    wait: Duration,
) -> Result<reqwest::Response, reqwest::Error> {
    let token = aws_token(http, base, wait).await?;
    let mut request = http
        .get(format!("{base}/latest/meta-data/{path}"))
        .timeout(wait);
    if let Some(t) = token {
        request = request.header("X-aws-ec2-metadata-token", t);
    }
    request.send().await
}

/// A GCE metadata GET of `instance/{path}`.
async fn gce_get(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    wait: Duration,
) -> Result<reqwest::Response, reqwest::Error> {
    http.get(format!("{base}/computeMetadata/v1/instance/{path}"))
        .header("Metadata-Flavor", "Google")
        .timeout(wait)
        .send()
        .await
}

/// Whether the cloud has announced this VM's reclaim. Metadata servers answer fast or not at
/// all, so each poll has a short timeout of its own.
pub async fn noticed(http: &reqwest::Client, source: NoticeSource, base: &str) -> bool {
    const POLL: Duration = Duration::from_secs(2);
    let base = base.trim_end_matches('/');
    match source {
        NoticeSource::None => false,
        NoticeSource::Aws => aws_get(http, base, "spot/instance-action", POLL)
            .await
            .is_ok_and(|r| r.status() == reqwest::StatusCode::OK),
        NoticeSource::Gcp => match gce_get(http, base, "preempted", POLL).await {
            Ok(r) if r.status() == reqwest::StatusCode::OK => r
                .text()
                .await
                .is_ok_and(|b| b.trim().eq_ignore_ascii_case("TRUE")),
            _ => false,
        },
    }
}

impl NoticeSource {
    /// The default stop grace: the notice's lead less a margin for noticing it (one poll),
    /// reporting and the kill.
    pub fn default_grace(self) -> Duration {
        match self {
            NoticeSource::Aws => Duration::from_secs(100),
            NoticeSource::Gcp => Duration::from_secs(25),
            NoticeSource::None => Duration::from_secs(30),
        }
    }
}

/// The body of a metadata answer, trimmed; `Err` names `what` was asked.
async fn body(r: Result<reqwest::Response, reqwest::Error>, what: &str) -> Result<String, String> {
    let r = r.map_err(|e| format!("{what}: {e}"))?;
    if !r.status().is_success() {
        return Err(format!("{what}: {}", r.status()));
    }
    r.text()
        .await
        .map(|t| t.trim().to_string())
        .map_err(|e| format!("{what}: {e}"))
}

/// How long one metadata question may take.
const ASK: Duration = Duration::from_secs(3);

/// This VM's private address, as the other nodes of its job reach it: IMDSv2 `local-ipv4`,
/// or the GCE metadata's first network interface's `ip`. Without a cloud (`--notice none`):
/// the loopback address (every node on this machine).
pub async fn address(
    http: &reqwest::Client,
    source: NoticeSource,
    base: &str,
) -> Result<String, String> {
    let base = base.trim_end_matches('/');
    match source {
        NoticeSource::None => Ok("127.0.0.1".into()),
        NoticeSource::Aws => {
            body(
                aws_get(http, base, "local-ipv4", ASK).await,
                "meta-data/local-ipv4",
            )
            .await
        }
        NoticeSource::Gcp => {
            let r = gce_get(http, base, "network-interfaces/0/ip", ASK).await;
            body(r, "instance/network-interfaces/0/ip").await
        }
    }
}

/// This instance's id as the controller knows it: the AWS instance id (IMDSv2
/// `instance-id`), or on GCE `ZONE/NAME` (the metadata's `instance/zone` and `instance/name`).
pub async fn instance_id(
    http: &reqwest::Client,
    source: NoticeSource,
    base: &str,
) -> Result<String, String> {
    let base = base.trim_end_matches('/');
    let text = body;
    match source {
        NoticeSource::None => Err("no cloud metadata with --notice none".into()),
        NoticeSource::Aws => {
            let r = aws_get(http, base, "instance-id", ASK).await;
            text(r, "meta-data/instance-id").await
        }
        NoticeSource::Gcp => {
            let zone = text(gce_get(http, base, "zone", ASK).await, "instance/zone").await?;
            let name = text(gce_get(http, base, "name", ASK).await, "instance/name").await?;
            let zone = zone.rsplit('/').next().unwrap_or(&zone).to_string();
            Ok(format!("{zone}/{name}"))
        }
    }
}
