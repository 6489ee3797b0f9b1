//! Where a command that only reads gets its data: the controller's state store, opened
//! read-only, or a running controller's API (`tern cost-report`, `tern explain`).

use std::path::PathBuf;

use anyhow::Context;
use tern::api::client::Client;
use tern::store::{Store, StoreError, StoreUrl};

#[derive(Debug, clap::Args)]
pub struct SourceArgs {
    /// The controller's state store: a SQLite file (`sqlite:PATH` or a path) or a PostgreSQL
    /// URL. Default: <data dir>/tern/controller.db.
    #[arg(
        long,
        env = "TERN_STATE",
        hide_env_values = true,
        conflicts_with = "server"
    )]
    pub state: Option<String>,
    /// Ask a running controller (bearer auth) instead of reading a store; `TERN_SERVER` when
    /// neither this nor `--state` / `TERN_STATE` is given.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    #[command(flatten)]
    pub token: super::token::TokenArgs,
    /// PEM CA certificate to trust for an `https://` controller.
    #[arg(long, env = "TERN_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,
}

impl SourceArgs {
    /// The controller to ask, if any: `--server`, else `TERN_SERVER` (not empty) unless a
    /// store was named. The environment never turns a `--state` call into an error.
    pub fn server(&self) -> Option<String> {
        self.server.clone().or_else(|| {
            self.state.is_none().then(|| {
                std::env::var("TERN_SERVER")
                    .ok()
                    .filter(|s| !s.trim().is_empty())
            })?
        })
    }

    /// The store `--state` names (or the default one), read-only: no store created where none
    /// was, no migration, no write lock.
    pub fn store(&self) -> anyhow::Result<Store> {
        let url = match &self.state {
            Some(s) => StoreUrl::parse(s),
            None => StoreUrl::Sqlite(
                dirs::data_dir()
                    .context("no data directory; pass --state PATH")?
                    .join("tern/controller.db"),
            ),
        };
        Store::read_only(&url).map_err(|e| match e {
            e @ StoreError::Missing(_) => {
                anyhow::anyhow!("{e} (pass --state PATH or postgres://…, or --server URL)")
            }
            e => anyhow::Error::new(e).context(format!("opening {}", describe(&url))),
        })
    }

    /// A client of the controller at `url`, with the token and CA given.
    pub fn client(&self, url: &str) -> anyhow::Result<Client> {
        let http = tern::http::client_with_ca(self.ca.as_deref())?;
        Ok(Client::new(url, self.token.get()?, http)?)
    }
}

/// A store for messages: its file, or no URL (it may carry a password).
fn describe(url: &StoreUrl) -> String {
    match url {
        StoreUrl::Sqlite(p) => p.display().to_string(),
        StoreUrl::Postgres(_) => "the PostgreSQL state store".into(),
    }
}
