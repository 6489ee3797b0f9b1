//! Bearer-token auth: which tokens a server accepts at start, how a request's
//! `Authorization` header is read (RFC 7235: the scheme is case-insensitive), and a comparison
//! whose time depends on neither the secret's content nor its length.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use super::ServeError;

/// A token a server may require: printable ASCII without spaces (what survives an HTTP header
/// unchanged: surrounding whitespace is stripped by every parser, so a token with some could
/// never match). `flag` names where it came from, for the error.
pub fn check_token(token: &str, flag: &str) -> Result<(), ServeError> {
    let refused = |reason: &str| ServeError::Token {
        flag: flag.to_string(),
        reason: reason.to_string(),
    };
    if token.trim().is_empty() {
        return Err(refused("the token is empty or only whitespace"));
    }
    if let Some(c) = token.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(refused(&format!(
            "the token holds {c:?}; expected printable ASCII without spaces"
        )));
    }
    Ok(())
}

/// The token in a file (`--token-file`): its content without the trailing newline, checked
/// like a token given on the command line.
pub fn token_from_file(path: &Path) -> Result<String, ServeError> {
    let shown = path.display().to_string();
    let text = tern_cloud::input::read_text_capped(path, tern_cloud::input::Limit::SETTINGS)
        .map_err(|e| ServeError::Token {
            flag: shown.clone(),
            reason: e.to_string(),
        })?;
    let token = text.trim_end_matches(['\n', '\r']).to_string();
    check_token(&token, &shown)?;
    Ok(token)
}

/// The credentials of an `Authorization: Bearer <token>` value; the scheme in any case.
pub fn bearer(value: &str) -> Option<&str> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| rest.trim_start_matches(' '))
}

/// Equal bytes? The loop runs over every byte of `given` whatever the secret's length or
/// content, so the time taken reveals neither a matching prefix nor how long the secret is.
pub fn constant_time_eq(given: &[u8], secret: &[u8]) -> bool {
    let n = secret.len().max(1);
    let mut diff = u64::from(given.len() != secret.len());
    for (i, x) in given.iter().enumerate() {
        let y = secret.get(i % n).copied().unwrap_or(0);
        diff |= u64::from(std::hint::black_box(x ^ y));
    }
    std::hint::black_box(diff) == 0
}

/// Middleware: refuse (401, JSON) a request without the server's bearer token.
pub async fn require_bearer(
    State(token): State<Arc<str>>,
    request: Request,
    next: Next,
) -> Response {
    let ok = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
        .is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes()));
    if !ok {
        return super::errors::json_error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token (Authorization: Bearer <token>)",
        );
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn the_scheme_is_case_insensitive() {
        for v in ["Bearer t0k", "bearer t0k", "BEARER t0k", "bEaReR  t0k"] {
            assert_eq!(bearer(v), Some("t0k"), "{v}");
        }
        assert_eq!(bearer("Basic t0k"), None);
        assert_eq!(bearer("Bearert0k"), None);
        assert_eq!(bearer("t0k"), None);
    }

    #[test]
    fn whitespace_and_control_tokens_are_refused() {
        for bad in ["", " ", "\t\n", "   \r\n", "a b", "tök", "a\u{7f}"] {
            let e = check_token(bad, "--token").expect_err(bad);
            assert!(e.to_string().starts_with("--token: "), "{e}");
        }
        check_token("s3cret-T0ken_~+/=", "--token").expect("a fine token");
    }

    #[test]
    fn a_token_file_loses_its_newline_and_is_checked() {
        let dir = tempfile::tempdir().expect("dir");
        let good = dir.path().join("good");
        std::fs::write(&good, "s3cret\n").expect("write");
        assert_eq!(token_from_file(&good).expect("token"), "s3cret");
        let blank = dir.path().join("blank");
        std::fs::write(&blank, "  \n").expect("write");
        let e = token_from_file(&blank).expect_err("blank");
        assert!(e.to_string().contains("blank"), "{e}");
        let e = token_from_file(&dir.path().join("missing")).expect_err("missing");
        assert!(e.to_string().contains("missing"), "{e}");
        // An endless file fails at the settings cap; so do a certificate and a key.
        let zero = std::path::Path::new("/dev/zero");
        let e = token_from_file(zero).expect_err("endless");
        assert!(e.to_string().contains("larger than 1 MiB"), "{e}");
        let e = crate::serve::tls::read_certs(zero).expect_err("endless");
        assert!(e.to_string().contains("larger than 1 MiB"), "{e}");
    }

    #[test]
    fn equality_is_exact() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        for other in [&b"s3cre"[..], b"s3cret!", b"s3cres", b"", b"s3crets3cret"] {
            assert!(!constant_time_eq(other, b"s3cret"), "{other:?}");
        }
    }

    /// Fastest of a few runs, to see through scheduling noise.
    fn fastest(given: &[u8], secret: &[u8]) -> Duration {
        (0..7)
            .map(|_| {
                let t0 = Instant::now();
                std::hint::black_box(constant_time_eq(given, secret));
                t0.elapsed()
            })
            .min()
            .unwrap_or_default()
    }

    #[test]
    fn a_wrong_length_takes_as_long_as_a_wrong_byte() {
        // An early exit on length answers in nanoseconds; a full pass over 4 MiB takes
        // milliseconds. The two must be of the same order.
        let secret = vec![b'a'; 4 << 20];
        let mut same_length = secret.clone();
        same_length[0] = b'b';
        let mut longer = secret.clone();
        longer.push(b'a');
        let full = fastest(&same_length, &secret);
        let mismatched = fastest(&longer, &secret);
        assert!(
            mismatched * 4 >= full,
            "wrong length took {mismatched:?}, wrong byte {full:?}"
        );
    }
}
