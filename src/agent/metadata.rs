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

/// Whether the cloud has announced this VM's reclaim. Metadata servers answer fast or not at
/// all, so each poll has a short timeout of its own.
pub async fn noticed(http: &reqwest::Client, source: NoticeSource, base: &str) -> bool {
    const POLL: Duration = Duration::from_secs(2);
    let base = base.trim_end_matches('/');
    match source {
        NoticeSource::None => false,
        NoticeSource::Aws => {
            let token = http
                .put(format!("{base}/latest/api/token"))
                .header("X-aws-ec2-metadata-token-ttl-seconds", "60")
                .timeout(POLL)
                .send()
                .await;
            let Ok(token) = token else { return false };
            let mut request = http
                .get(format!("{base}/latest/meta-data/spot/instance-action"))
                .timeout(POLL);
            if token.status().is_success()
                && let Ok(t) = token.text().await
            {
                request = request.header("X-aws-ec2-metadata-token", t.trim());
            }
            request
                .send()
                .await
                .is_ok_and(|r| r.status() == reqwest::StatusCode::OK)
        }
        NoticeSource::Gcp => {
            let reply = http
                .get(format!("{base}/computeMetadata/v1/instance/preempted"))
                .header("Metadata-Flavor", "Google")
                .timeout(POLL)
                .send()
                .await;
            match reply {
                Ok(r) if r.status() == reqwest::StatusCode::OK => r
                    .text()
                    .await
                    .is_ok_and(|b| b.trim().eq_ignore_ascii_case("TRUE")),
                _ => false,
            }
        }
    }
}

impl NoticeSource {
    /// How long the cloud gives between its notice and the reclaim.
    pub fn lead(self) -> Duration {
        match self {
            NoticeSource::Aws => Duration::from_secs(120),
            NoticeSource::Gcp => Duration::from_secs(30),
            NoticeSource::None => Duration::from_secs(60),
        }
    }

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

/// This instance's id as the controller knows it: the AWS instance id (IMDSv2
/// `instance-id`), or on GCE `ZONE/NAME` (the metadata's `instance/zone` and `instance/name`).
pub async fn instance_id(
    http: &reqwest::Client,
    source: NoticeSource,
    base: &str,
) -> Result<String, String> {
    const ASK: Duration = Duration::from_secs(3);
    let base = base.trim_end_matches('/');
    let text = |r: Result<reqwest::Response, reqwest::Error>, what: &str| {
        let what = what.to_string();
        async move {
            let r = r.map_err(|e| format!("{what}: {e}"))?;
            if !r.status().is_success() {
                return Err(format!("{what}: {}", r.status()));
            }
            r.text()
                .await
                .map(|t| t.trim().to_string())
                .map_err(|e| format!("{what}: {e}"))
        }
    };
    match source {
        NoticeSource::None => Err("no cloud metadata with --notice none".into()),
        NoticeSource::Aws => {
            let token_url = format!("{base}/latest/api/token");
            let token = http
                .put(&token_url)
                .header("X-aws-ec2-metadata-token-ttl-seconds", "60")
                .timeout(ASK)
                .send()
                .await;
            let token = text(token, &token_url).await?;
            let url = format!("{base}/latest/meta-data/instance-id");
            let r = http
                .get(&url)
                .header("X-aws-ec2-metadata-token", token)
                .timeout(ASK)
                .send()
                .await;
            text(r, &url).await
        }
        NoticeSource::Gcp => {
            let get = |path: &str| {
                http.get(format!("{base}/computeMetadata/v1/instance/{path}"))
                    .header("Metadata-Flavor", "Google")
                    .timeout(ASK)
                    .send()
            };
            let zone = text(get("zone").await, "instance/zone").await?;
            let name = text(get("name").await, "instance/name").await?;
            let zone = zone.rsplit('/').next().unwrap_or(&zone).to_string();
            Ok(format!("{zone}/{name}"))
        }
    }
}
