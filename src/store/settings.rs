//! Settings changed through the API that must outlive a restart: a name, its text and when it
//! was set. The quota file set by `PUT /v1/quotas` is one ([`QUOTAS`]).

use chrono::{DateTime, Utc};

use super::sql::params;
use super::{Result, Store, ms, time};

/// The quota file `PUT /v1/quotas` set (TOML), in force until the file on disk is reloaded.
pub const QUOTAS: &str = "quotas";

impl Store {
    /// Set `name` to `value` (replacing what it was).
    pub fn put_setting(&self, name: &str, value: &str, now: DateTime<Utc>) -> Result<()> {
        self.exec(
            "INSERT INTO settings (name, value, set_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (name) DO UPDATE SET value = excluded.value, set_at = excluded.set_at",
            params![name, value, ms(now)],
        )?;
        Ok(())
    }

    /// `name`'s value and when it was set, if it is set.
    pub fn setting(&self, name: &str) -> Result<Option<(String, DateTime<Utc>)>> {
        let rows = self.query(
            "SELECT value, set_at FROM settings WHERE name = ?1",
            params![name],
        )?;
        rows.first()
            .map(|r| Ok((r.text(0)?, time(r.int(1)?))))
            .transpose()
    }

    /// Unset `name`; whether it was set.
    pub fn clear_setting(&self, name: &str) -> Result<bool> {
        Ok(self.exec("DELETE FROM settings WHERE name = ?1", params![name])? > 0)
    }
}
