//! A small blocking HTTP/1.1 client for `tern submit/status/cancel`: one request per
//! connection, plain `http://` only (put TLS in front of the controller with a proxy).
//! Enough for the CLI without pulling a full HTTP client stack into the binary.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("server URL {0} is not of the form http://HOST:PORT")]
    Url(String),
    #[error("cannot reach the controller at {url}: {source}")]
    Io {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("malformed HTTP response from {0}")]
    Response(String),
}

impl ClientError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, ClientError::Io { .. })
    }
}

/// A response: status code and body text.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: String,
}

/// `method` `path` on `server` (e.g. `http://127.0.0.1:8470`) with a bearer token.
pub fn request(
    server: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> Result<Reply, ClientError> {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("Authorization", a)])
        .unwrap_or_default();
    request_with(server, &headers, method, path, content_type, body)
}

/// Like [`request`], with arbitrary extra headers (cloud metadata servers want their own).
pub fn request_with(
    server: &str,
    headers: &[(&str, &str)],
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> Result<Reply, ClientError> {
    let host = server
        .strip_prefix("http://")
        .map(|h| h.trim_end_matches('/'))
        .filter(|h| !h.is_empty() && !h.contains('/'))
        .ok_or_else(|| ClientError::Url(server.to_string()))?;
    let io = |source| ClientError::Io {
        url: server.to_string(),
        source,
    };
    let mut stream = TcpStream::connect(host).map_err(io)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(io)?;
    let auth: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).map_err(io)?;
    stream.write_all(body.as_bytes()).map_err(io)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(io)?;
    let text = String::from_utf8_lossy(&raw);
    let bad = || ClientError::Response(server.to_string());
    let (head, rest) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(rest).ok_or_else(bad)?
    } else {
        rest.to_string()
    };
    Ok(Reply { status, body })
}

fn dechunk(mut s: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n")?;
        let n = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if n == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..n)?);
        s = rest.get(n + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_are_joined_and_bad_urls_rejected() {
        assert_eq!(
            dechunk("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n").as_deref(),
            Some("hello world")
        );
        assert!(dechunk("zz\r\n").is_none());
        assert!(matches!(
            request("https://x:1", None, "GET", "/", "text/plain", ""),
            Err(ClientError::Url(_))
        ));
    }
}
