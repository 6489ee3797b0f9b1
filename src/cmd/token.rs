//! Bearer tokens from the command line, the environment or a file (`--token-file`, so the
//! secret stays out of `ps` and shell history), checked before anything starts.

use std::path::{Path, PathBuf};

use tern::serve::auth::{check_token, token_from_file};

/// The controller's API token, for the controller and its clients.
#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    /// Bearer token of the controller's `/v1` API.
    #[arg(long, env = "TERN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the bearer token from this file (its trailing newline dropped) instead.
    #[arg(long, env = "TERN_TOKEN_FILE", value_name = "FILE")]
    token_file: Option<PathBuf>,
}

impl TokenArgs {
    /// The token, if one was given; a blank or malformed one is an error.
    pub fn get(&self) -> anyhow::Result<Option<String>> {
        resolve(self.token.as_deref(), self.token_file.as_deref(), "--token")
    }
}

/// The token from `value` (named `flag` in errors) or from `file`; both at once is an error.
pub fn resolve(
    value: Option<&str>,
    file: Option<&Path>,
    flag: &str,
) -> anyhow::Result<Option<String>> {
    // An empty value (`TERN_TOKEN=` left in a shell or a unit file) counts as unset.
    let value = value.filter(|v| !v.is_empty());
    let file = file.filter(|f| !f.as_os_str().is_empty());
    match (value, file) {
        (Some(_), Some(_)) => {
            anyhow::bail!("give {flag} or {flag}-file, not both (check the environment too)")
        }
        (Some(t), None) => {
            check_token(t, flag)?;
            Ok(Some(t.to_string()))
        }
        (None, Some(path)) => Ok(Some(token_from_file(path)?)),
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_token_counts_as_unset() {
        let none = resolve(Some(""), None, "--token").expect("unset");
        assert_eq!(none, None);
        // Not "both given" either, with an empty file variable beside it.
        let none = resolve(Some(""), Some(Path::new("")), "--token").expect("unset");
        assert_eq!(none, None);
        let set = resolve(Some("a-real-token-123"), Some(Path::new("")), "--token");
        assert_eq!(set.expect("set").as_deref(), Some("a-real-token-123"));
    }
}
