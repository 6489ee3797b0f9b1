//! Where commands get offers from: the bundled snapshot, or catalogs the user names.

use std::path::PathBuf;

use anyhow::Context;
use tern_pricing::Catalog;

/// `--catalog FILE` (repeatable) replaces the bundled snapshot.
#[derive(Debug, Clone, clap::Args)]
pub struct CatalogArgs {
    /// SkyPilot v8 catalog CSV (AWS or GCP layout, optionally .gz) to use instead of the
    /// bundled snapshot. Repeat for several files.
    #[arg(long = "catalog", value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

impl CatalogArgs {
    pub fn load(&self) -> anyhow::Result<Catalog> {
        if self.files.is_empty() {
            return tern_pricing::bundled().context("loading the bundled catalog");
        }
        let mut catalog = Catalog::default();
        for file in &self.files {
            catalog.merge(Catalog::load(file)?);
        }
        Ok(catalog)
    }

    pub fn describe(&self) -> String {
        if self.files.is_empty() {
            "bundled catalog snapshot".into()
        } else {
            self.files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    }
}
