//! Price history in SQLite: timestamped prices per (cloud, zone, instance type, capacity).
//!
//! Only changes are stored: a point equal to the price already in force at that time adds
//! nothing to the step function "price at time t", and skipping it keeps repeated imports of a
//! 60,000-offer catalog from growing the file. Each import is still recorded as a snapshot.

use std::path::Path;

use chrono::{DateTime, TimeZone, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use tern_cloud::{Capacity, Cloud, Offer};

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("price history {path}: {source}")]
    Sqlite {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("price history {path}: cannot create its folder: {source}")]
    Folder {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "price history {path}: schema version {found} is newer than this tern understands ({supported}); upgrade tern"
    )]
    NewerSchema {
        path: String,
        found: i64,
        supported: i64,
    },
}

impl HistoryError {
    /// A locked database (another writer) may free up; anything else will not.
    pub fn is_retryable(&self) -> bool {
        matches!(self, HistoryError::Sqlite { source: rusqlite::Error::SqliteFailure(e, _), .. }
            if matches!(e.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
    }
}

/// One price that held from `observed_at` until the next point for the same key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PricePoint {
    pub cloud: String,
    pub region: String,
    pub zone: String,
    pub instance_type: String,
    pub capacity: String,
    pub price_per_hour: f64,
    pub observed_at: DateTime<Utc>,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SnapshotSummary {
    pub id: i64,
    pub taken_at: DateTime<Utc>,
    pub source: String,
    /// Offers in the snapshot.
    pub offers: usize,
    /// Of those, prices that were new or changed (the rest were already in force).
    pub changed: usize,
}

const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS snapshots (
    id        INTEGER PRIMARY KEY,
    taken_at  INTEGER NOT NULL,   -- unix milliseconds
    source    TEXT    NOT NULL,
    offers    INTEGER NOT NULL,
    changed   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS prices (
    cloud         TEXT    NOT NULL,
    zone          TEXT    NOT NULL,
    instance_type TEXT    NOT NULL,
    capacity      TEXT    NOT NULL,
    observed_at   INTEGER NOT NULL,   -- unix milliseconds
    region        TEXT    NOT NULL,
    price         REAL    NOT NULL,
    snapshot_id   INTEGER NOT NULL REFERENCES snapshots(id),
    PRIMARY KEY (cloud, zone, instance_type, capacity, observed_at)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS prices_by_type ON prices (instance_type, observed_at);
";

#[derive(Debug)]
pub struct PriceHistory {
    conn: Connection,
    path: String,
}

impl PriceHistory {
    /// Open (creating if needed) the history database at `path`.
    pub fn open(path: &Path) -> Result<Self, HistoryError> {
        let name = path.display().to_string();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| HistoryError::Folder {
                path: name.clone(),
                source,
            })?;
        }
        let conn = Connection::open(path).map_err(|source| HistoryError::Sqlite {
            path: name.clone(),
            source,
        })?;
        Self::init(conn, name)
    }

    pub fn open_in_memory() -> Result<Self, HistoryError> {
        let conn = Connection::open_in_memory().map_err(|source| HistoryError::Sqlite {
            path: ":memory:".into(),
            source,
        })?;
        Self::init(conn, ":memory:".into())
    }

    fn init(conn: Connection, path: String) -> Result<Self, HistoryError> {
        let this = Self { conn, path };
        let version: i64 = this
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| this.err(e))?;
        if version > SCHEMA_VERSION {
            return Err(HistoryError::NewerSchema {
                path: this.path.clone(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        this.conn
            .execute_batch(&format!(
                "PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION};"
            ))
            .map_err(|e| this.err(e))?;
        Ok(this)
    }

    fn err(&self, source: rusqlite::Error) -> HistoryError {
        HistoryError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// Record a snapshot. Each offer's own `observed_at` wins over `taken_at` when set. The
    /// whole snapshot is one transaction: a crash leaves either all of it or none.
    pub fn record(
        &mut self,
        offers: &[Offer],
        taken_at: DateTime<Utc>,
        source: &str,
    ) -> Result<SnapshotSummary, HistoryError> {
        let path = self.path.clone();
        let err = |source| HistoryError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(err)?;
        tx.execute(
            "INSERT INTO snapshots (taken_at, source, offers, changed) VALUES (?1, ?2, ?3, 0)",
            params![taken_at.timestamp_millis(), source, offers.len() as i64],
        )
        .map_err(err)?;
        let id = tx.last_insert_rowid();
        let mut changed = 0usize;
        {
            let mut in_force = tx
                .prepare_cached(
                    "SELECT price FROM prices WHERE cloud = ?1 AND zone = ?2 AND instance_type = ?3
                     AND capacity = ?4 AND observed_at <= ?5 ORDER BY observed_at DESC LIMIT 1",
                )
                .map_err(err)?;
            let mut insert = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO prices
                     (cloud, zone, instance_type, capacity, observed_at, region, price, snapshot_id)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .map_err(err)?;
            for offer in offers {
                let at = offer.observed_at.unwrap_or(taken_at).timestamp_millis();
                let key = (
                    offer.cloud.as_str(),
                    offer.zone.as_str(),
                    offer.instance_type.name.as_str(),
                    offer.capacity.as_str(),
                );
                let current: Option<f64> = in_force
                    .query_row(params![key.0, key.1, key.2, key.3, at], |r| r.get(0))
                    .optional()
                    .map_err(err)?;
                if current == Some(offer.price_per_hour) {
                    continue;
                }
                insert
                    .execute(params![
                        key.0,
                        key.1,
                        key.2,
                        key.3,
                        at,
                        offer.region.as_str(),
                        offer.price_per_hour,
                        id
                    ])
                    .map_err(err)?;
                changed += 1;
            }
        }
        tx.execute(
            "UPDATE snapshots SET changed = ?1 WHERE id = ?2",
            params![changed as i64, id],
        )
        .map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(SnapshotSummary {
            id,
            taken_at,
            source: source.to_owned(),
            offers: offers.len(),
            changed,
        })
    }

    /// Every recorded price of `instance_type`, oldest first, optionally in one zone (or
    /// region: a zone filter that matches no zone is tried as a region) and capacity.
    pub fn history(
        &self,
        instance_type: &str,
        zone: Option<&str>,
        capacity: Option<Capacity>,
    ) -> Result<Vec<PricePoint>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT p.cloud, p.region, p.zone, p.instance_type, p.capacity, p.price, p.observed_at, s.source
                 FROM prices p JOIN snapshots s ON s.id = p.snapshot_id
                 WHERE p.instance_type = ?1
                   AND (?2 IS NULL OR p.zone = ?2 OR p.region = ?2)
                   AND (?3 IS NULL OR p.capacity = ?3)
                 ORDER BY p.observed_at, p.cloud, p.zone, p.capacity",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(
                params![instance_type, zone, capacity.map(Capacity::as_str)],
                |r| {
                    Ok(PricePoint {
                        cloud: r.get(0)?,
                        region: r.get(1)?,
                        zone: r.get(2)?,
                        instance_type: r.get(3)?,
                        capacity: r.get(4)?,
                        price_per_hour: r.get(5)?,
                        observed_at: from_millis(r.get(6)?),
                        source: r.get(7)?,
                    })
                },
            )
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// The price in force at `at` (the latest point at or before it), for pricing past usage.
    pub fn price_at(
        &self,
        cloud: Cloud,
        zone: &str,
        instance_type: &str,
        capacity: Capacity,
        at: DateTime<Utc>,
    ) -> Result<Option<f64>, HistoryError> {
        self.conn
            .query_row(
                "SELECT price FROM prices WHERE cloud = ?1 AND zone = ?2 AND instance_type = ?3
                 AND capacity = ?4 AND observed_at <= ?5 ORDER BY observed_at DESC LIMIT 1",
                params![
                    cloud.as_str(),
                    zone,
                    instance_type,
                    capacity.as_str(),
                    at.timestamp_millis()
                ],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    pub fn snapshots(&self) -> Result<Vec<SnapshotSummary>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, taken_at, source, offers, changed FROM snapshots ORDER BY taken_at, id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(SnapshotSummary {
                    id: r.get(0)?,
                    taken_at: from_millis(r.get(1)?),
                    source: r.get(2)?,
                    offers: r.get::<_, i64>(3)? as usize,
                    changed: r.get::<_, i64>(4)? as usize,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }
}

fn from_millis(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;

    fn offer(zone: &str, capacity: Capacity, price: f64) -> Offer {
        tern_cloud::testkit::offer("p3.2xlarge", zone, capacity)
            .cloud(Cloud::Aws)
            .region("us-east-1")
            .cpu_only()
            .price(price)
            .itemised()
            .availability(Default::default())
            .build()
    }

    #[test]
    fn records_changes_and_answers_price_at_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/prices.db");
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let t1 = t0 + Duration::hours(6);
        {
            let mut h = PriceHistory::open(&path).unwrap();
            let s = h
                .record(
                    &[
                        offer("use1-az1", Capacity::Spot, 0.92),
                        offer("use1-az1", Capacity::OnDemand, 3.06),
                    ],
                    t0,
                    "first",
                )
                .unwrap();
            assert_eq!((s.offers, s.changed), (2, 2));
            // Same on-demand price again: nothing new; spot changed: one new point.
            let s = h
                .record(
                    &[
                        offer("use1-az1", Capacity::Spot, 1.85),
                        offer("use1-az1", Capacity::OnDemand, 3.06),
                    ],
                    t1,
                    "second",
                )
                .unwrap();
            assert_eq!((s.offers, s.changed), (2, 1));
        }
        // Reopen: the data survived.
        let h = PriceHistory::open(&path).unwrap();
        let spot = h
            .history("p3.2xlarge", Some("use1-az1"), Some(Capacity::Spot))
            .unwrap();
        assert_eq!(
            spot.iter().map(|p| p.price_per_hour).collect::<Vec<_>>(),
            vec![0.92, 1.85]
        );
        assert_eq!(spot[1].source, "second");
        assert_eq!(
            h.history("p3.2xlarge", Some("us-east-1"), None)
                .unwrap()
                .len(),
            3
        );
        assert!(
            h.history("p3.2xlarge", Some("use1-az9"), None)
                .unwrap()
                .is_empty()
        );

        let at = |t| {
            h.price_at(Cloud::Aws, "use1-az1", "p3.2xlarge", Capacity::Spot, t)
                .unwrap()
        };
        assert_eq!(at(t0 - Duration::seconds(1)), None);
        assert_eq!(at(t0), Some(0.92));
        assert_eq!(at(t1 - Duration::seconds(1)), Some(0.92));
        assert_eq!(at(t1 + Duration::days(30)), Some(1.85));
        assert_eq!(h.snapshots().unwrap().len(), 2);
    }

    #[test]
    fn refuses_a_database_from_a_newer_tern() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch("PRAGMA user_version = 99;")
            .unwrap();
        let err = PriceHistory::open(&path).unwrap_err();
        assert!(err.to_string().contains("schema version 99"), "{err}");
        assert!(!err.is_retryable());
    }
}
