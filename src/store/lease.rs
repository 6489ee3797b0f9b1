//! The `leases` table: the leader lease HA controllers share, by the database's clock.

use super::*;

impl Store {
    /// Take or renew the lease `name` for `holder` for `ttl`, by the database's clock.
    /// True while `holder` leads: the row was free, expired, or already `holder`'s.
    pub fn acquire_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let now = self.db_now_ms()?;
        let until = now + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2);
        let n = self.exec(
            "INSERT INTO leases (name, holder, expires_at, renewed_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (name) DO UPDATE
                SET holder = excluded.holder, expires_at = excluded.expires_at,
                    renewed_at = excluded.renewed_at
                WHERE leases.holder = excluded.holder OR leases.expires_at < ?4",
            params![name, holder, until, now],
        )?;
        Ok(n == 1)
    }

    /// Give the lease up at once (a clean shutdown), so a standby need not wait for expiry.
    pub fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        self.exec(
            "DELETE FROM leases WHERE name = ?1 AND holder = ?2",
            params![name, holder],
        )?;
        Ok(())
    }

    /// Who holds the lease `name`, if anyone ever took it.
    pub fn lease_holder(&self, name: &str) -> Result<Option<LeaseHolder>> {
        let now = self.db_now_ms()?;
        let rows = self.query(
            "SELECT holder, expires_at FROM leases WHERE name = ?1",
            params![name],
        )?;
        rows.first()
            .map(|r| {
                Ok(LeaseHolder {
                    holder: r.text(0)?,
                    expires_in_ms: r.int(1)? - now,
                })
            })
            .transpose()
    }

    /// The database's clock: leases of controllers on different hosts must not depend on
    /// their clocks agreeing.
    pub(super) fn db_now_ms(&self) -> Result<i64> {
        let sql = match &self.backend {
            Backend::Sqlite(_) => {
                "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
            }
            Backend::Postgres(_) => {
                "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
            }
        };
        self.query(sql, vec![])?
            .first()
            .ok_or_else(|| StoreError::Invalid("the database did not tell its time".into()))?
            .int(0)
    }
}
