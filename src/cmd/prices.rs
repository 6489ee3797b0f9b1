//! `tern prices import|history|snapshots`: the price history in SQLite.

use std::path::PathBuf;

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use tern_cloud::Capacity;
use tern_pricing::{Catalog, PriceHistory};

use super::output::{money, print_json_line, table};

/// Where the price history lives: `--db`, else `$TERN_DB`, else the user's data dir.
#[derive(Debug, Clone, clap::Args)]
pub struct DbArgs {
    /// SQLite file for the price history [default: <data dir>/tern/tern.db]
    #[arg(long, env = "TERN_DB", value_name = "PATH")]
    pub db: Option<PathBuf>,
}

impl DbArgs {
    pub fn path(&self) -> anyhow::Result<PathBuf> {
        match &self.db {
            Some(p) => Ok(p.clone()),
            None => Ok(dirs::data_dir()
                .context("no user data directory on this system; pass --db PATH or set TERN_DB")?
                .join("tern")
                .join("tern.db")),
        }
    }

    pub fn open(&self) -> anyhow::Result<PriceHistory> {
        Ok(PriceHistory::open(&self.path()?)?)
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Record the prices of catalog files (SkyPilot v8 CSV, optionally .gz) as a snapshot.
    Import {
        /// Catalog files to import.
        #[arg(value_name = "FILE", required_unless_present = "bundled")]
        files: Vec<PathBuf>,
        /// Import the snapshot bundled into tern instead of files.
        #[arg(long, conflicts_with = "files")]
        bundled: bool,
        /// When the prices were observed (RFC 3339) [default: now].
        #[arg(long, value_name = "TIME")]
        at: Option<DateTime<Utc>>,
        #[command(flatten)]
        db: DbArgs,
        #[arg(long)]
        json: bool,
    },
    /// Show recorded prices of one instance type over time.
    History {
        #[arg(long, value_name = "TYPE")]
        instance_type: String,
        /// Only this zone (or region).
        #[arg(long)]
        zone: Option<String>,
        /// Only spot or on-demand.
        #[arg(long)]
        capacity: Option<Capacity>,
        #[command(flatten)]
        db: DbArgs,
        #[arg(long)]
        json: bool,
    },
    /// List the snapshots imported so far.
    Snapshots {
        #[command(flatten)]
        db: DbArgs,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Import {
            files,
            bundled,
            at,
            db,
            json,
        } => import(&files, bundled, at, &db, json),
        Command::History {
            instance_type,
            zone,
            capacity,
            db,
            json,
        } => history(&instance_type, zone.as_deref(), capacity, &db, json),
        Command::Snapshots { db, json } => snapshots(&db, json),
    }
}

/// `tern prices import`: every catalog parsed first, so one bad file imports nothing.
fn import(
    files: &[PathBuf],
    bundled: bool,
    at: Option<DateTime<Utc>>,
    db: &DbArgs,
    json: bool,
) -> anyhow::Result<()> {
    let at = at.unwrap_or_else(Utc::now);
    let mut history = db.open()?;
    let catalogs: Vec<(String, Catalog)> = if bundled {
        vec![("bundled".into(), tern_pricing::bundled()?)]
    } else {
        files
            .iter()
            .map(|f| Ok((f.display().to_string(), Catalog::load(f)?)))
            .collect::<anyhow::Result<_>>()?
    };
    let mut summaries = Vec::new();
    for (source, catalog) in &catalogs {
        summaries.push(history.record(&catalog.offers, at, source)?);
    }
    if json {
        return print_json_line(&serde_json::json!({
            "db": db.path()?,
            "snapshots": summaries,
        }));
    }
    for s in &summaries {
        say!(
            "imported {}: {} offers at {}, {} new or changed prices (snapshot {})",
            s.source,
            s.offers,
            s.taken_at.to_rfc3339(),
            s.changed,
            s.id
        );
    }
    say!("price history: {}", db.path()?.display());
    Ok(())
}

/// `tern prices history`.
fn history(
    instance_type: &str,
    zone: Option<&str>,
    capacity: Option<Capacity>,
    db: &DbArgs,
    json: bool,
) -> anyhow::Result<()> {
    let path = db.path()?;
    if !path.exists() {
        bail!(
            "no price history at {}; record one with `tern prices import FILE` (or --bundled)",
            path.display()
        );
    }
    let points = db.open()?.history(instance_type, zone, capacity)?;
    if json {
        return print_json_line(&serde_json::json!({
            "instance_type": instance_type,
            "points": points,
        }));
    }
    if points.is_empty() {
        say_err!(
            "no recorded prices for {instance_type}{}{} in {}",
            zone.map(|z| format!(" in {z}")).unwrap_or_default(),
            capacity.map(|c| format!(" ({c})")).unwrap_or_default(),
            path.display()
        );
        return Ok(());
    }
    let mut t = table(&[
        "OBSERVED AT",
        "CLOUD",
        "REGION",
        "ZONE",
        "CAPACITY",
        "$/h",
        "SOURCE",
    ]);
    for p in &points {
        t.add_row(vec![
            p.observed_at.format("%Y-%m-%d %H:%M:%S").to_string(),
            p.cloud.clone(),
            p.region.clone(),
            p.zone.clone(),
            p.capacity.clone(),
            money(Some(p.price_per_hour)),
            p.source.clone(),
        ]);
    }
    say!("{t}");
    say!(
        "{} price points (a price holds until the next point for its zone and capacity)",
        points.len()
    );
    Ok(())
}

/// `tern prices snapshots`.
fn snapshots(db: &DbArgs, json: bool) -> anyhow::Result<()> {
    let snapshots = db.open()?.snapshots()?;
    if json {
        return print_json_line(&serde_json::json!({ "snapshots": snapshots }));
    }
    let mut t = table(&["ID", "TAKEN AT", "OFFERS", "CHANGED", "SOURCE"]);
    for s in &snapshots {
        t.add_row(vec![
            s.id.to_string(),
            s.taken_at.to_rfc3339(),
            s.offers.to_string(),
            s.changed.to_string(),
            s.source.clone(),
        ]);
    }
    say!("{t}");
    Ok(())
}
