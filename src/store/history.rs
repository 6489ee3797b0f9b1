//! What the store accumulates: observations, events, pool samples, usage intervals and the
//! prices recorded for them (the cost reports' and the deadline policy's inputs).

use super::*;

impl Store {
    pub fn add_observation(&self, o: &Observation) -> Result<()> {
        let body = json("observation", o)?;
        self.exec(
            "INSERT INTO observations (job, at, body) VALUES (?1, ?2, ?3)",
            params![&o.job, ms(o.at), body],
        )?;
        Ok(())
    }

    pub fn observations(&self, job: &str) -> Result<Vec<Observation>> {
        self.query(
            "SELECT body FROM observations WHERE job = ?1 ORDER BY id",
            params![job],
        )?
        .iter()
        .map(|r| parse("observation", &r.text(0)?))
        .collect()
    }

    pub fn add_event(
        &self,
        at: DateTime<Utc>,
        job: Option<&str>,
        kind: &str,
        message: &str,
        fields: Option<&str>,
    ) -> Result<i64> {
        self.query(
            "INSERT INTO events (at, job, kind, message, fields) VALUES (?1, ?2, ?3, ?4, ?5)
             RETURNING id",
            params![ms(at), job, kind, message, fields],
        )?
        .first()
        .ok_or_else(|| StoreError::Invalid("the event insert returned no id".into()))?
        .int(0)
    }

    /// Events with id > `after`, oldest first; `job` filters to one job.
    pub fn events(&self, after: i64, job: Option<&str>) -> Result<Vec<StoredEvent>> {
        self.query(
            "SELECT id, at, job, kind, message, fields FROM events
             WHERE id > ?1 AND (CAST(?2 AS TEXT) IS NULL OR job = ?2) ORDER BY id",
            params![after, job],
        )?
        .iter()
        .map(|r| {
            Ok(StoredEvent {
                id: r.int(0)?,
                at: time(r.int(1)?),
                job: r.opt_text(2)?,
                kind: r.text(3)?,
                message: r.text(4)?,
                fields: r.opt_text(5)?.and_then(|f| serde_json::from_str(&f).ok()),
            })
        })
        .collect()
    }

    /// Events with id > `after` of `team`'s jobs only (a team token's view of the log).
    pub fn team_events(
        &self,
        after: i64,
        job: Option<&str>,
        team: &str,
    ) -> Result<Vec<StoredEvent>> {
        let all = self.events(after, job)?;
        let mine: std::collections::BTreeSet<String> = self
            .query("SELECT name FROM jobs WHERE team = ?1", params![team])?
            .iter()
            .map(|r| r.text(0))
            .collect::<Result<_>>()?;
        Ok(all
            .into_iter()
            .filter(|e| e.job.as_ref().is_some_and(|j| mine.contains(j)))
            .collect())
    }

    /// Instances ever recorded for `intent`, ended ones included.
    pub fn instances_of_intent(&self, intent: IntentId) -> Result<u32> {
        self.count(
            "SELECT COUNT(*) FROM instances WHERE intent = ?1",
            params![intent.to_string()],
        )
    }

    /// The single number a `SELECT COUNT(*)` returns.
    pub(super) fn count(&self, sql: &str, params: Vec<sql::Value>) -> Result<u32> {
        let rows = self.query(sql, params)?;
        let n = rows.first().map(|r| r.int(0)).transpose()?.unwrap_or(0);
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// Instances the job started at or after `since` (the launch budget's count).
    pub fn launched_since(&self, job: &str, since: DateTime<Utc>) -> Result<u32> {
        self.count(
            "SELECT COUNT(*) FROM usage WHERE job = ?1 AND started_at >= ?2",
            params![job, ms(since)],
        )
    }

    /// Record spot pool samples (one per pool and policy tick; a later view of a tick wins),
    /// and drop those older than a lookback of 8 days before the newest.
    pub fn record_pool_samples(&self, samples: &[PoolSample]) -> Result<()> {
        let mut batch = Vec::with_capacity(samples.len() + 1);
        for s in samples {
            batch.push(Stmt::exec(
                "INSERT INTO pool_samples (pool, instance_type, zone, region, tick, available,
                    spot_price)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (pool, tick) DO UPDATE SET available = excluded.available,
                    spot_price = excluded.spot_price",
                params![
                    &s.pool,
                    &s.instance_type,
                    &s.zone,
                    &s.region,
                    s.tick,
                    i64::from(s.available),
                    s.spot_price,
                ],
            ));
        }
        if let Some(newest) = samples.iter().map(|s| s.tick).max()
            && newest % 64 == 0
        {
            batch.push(Stmt::exec(
                "DELETE FROM pool_samples WHERE tick < ?1",
                params![newest - POOL_SAMPLE_TICKS],
            ));
        }
        if !batch.is_empty() {
            self.run(batch)?;
        }
        Ok(())
    }

    /// Pool samples at or after `tick`, oldest first.
    pub fn pool_samples_since(&self, tick: i64) -> Result<Vec<PoolSample>> {
        self.query(
            "SELECT pool, instance_type, zone, region, tick, available, spot_price
             FROM pool_samples WHERE tick >= ?1 ORDER BY tick, pool",
            params![tick],
        )?
        .iter()
        .map(|r| {
            Ok(PoolSample {
                pool: r.text(0)?,
                instance_type: r.text(1)?,
                zone: r.text(2)?,
                region: r.text(3)?,
                tick: r.int(4)?,
                available: u32::try_from(r.int(5)?.max(0)).unwrap_or(u32::MAX),
                spot_price: r.real(6)?,
            })
        })
        .collect()
    }

    pub fn usage(&self) -> Result<Vec<Usage>> {
        self.query(
            "SELECT instance, job, offer_key, capacity, price_per_hour, on_demand_per_hour,
                started_at, ended_at FROM usage ORDER BY id",
            vec![],
        )?
        .iter()
        .map(usage_from_row)
        .collect()
    }

    /// Usage intervals still open, or ended at or after `since` (all of them without it).
    pub fn usage_open_or_ended_since(&self, since: Option<DateTime<Utc>>) -> Result<Vec<Usage>> {
        self.query(
            "SELECT instance, job, offer_key, capacity, price_per_hour, on_demand_per_hour,
                started_at, ended_at FROM usage
             WHERE ended_at IS NULL OR ended_at >= ?1 ORDER BY id",
            params![since.map_or(i64::MIN, ms)],
        )?
        .iter()
        .map(usage_from_row)
        .collect()
    }

    /// Every usage interval with the offer its instance ran on (for cost reports).
    pub fn usage_with_offers(&self) -> Result<Vec<(Usage, Option<Offer>)>> {
        self.usage_with_offers_where("", vec![])
    }

    /// [`Store::usage_with_offers`] of one job (what `tern explain` bills a move from).
    pub fn job_usage_with_offers(&self, job: &str) -> Result<Vec<(Usage, Option<Offer>)>> {
        self.usage_with_offers_where("WHERE u.job = ?1", params![job])
    }

    fn usage_with_offers_where(
        &self,
        filter: &str,
        params: Vec<sql::Value>,
    ) -> Result<Vec<(Usage, Option<Offer>)>> {
        let sql = format!(
            "SELECT u.instance, u.job, u.offer_key, u.capacity, u.price_per_hour,
                u.on_demand_per_hour, u.started_at, u.ended_at, i.offer
             FROM usage u LEFT JOIN instances i ON i.id = u.instance {filter} ORDER BY u.id"
        );
        self.query(&sql, params)?
            .iter()
            .map(|r| {
                let usage = usage_from_row(r)?;
                let offer = r.opt_text(8)?.map(|o| parse("offer", &o)).transpose()?;
                Ok((usage, offer))
            })
            .collect()
    }

    /// Record prices seen at `at` (offer key, $/h). Callers pass changes only; a second write
    /// of one key at one time keeps the first.
    pub fn record_prices(&self, at: DateTime<Utc>, prices: &[(String, f64)]) -> Result<()> {
        let batch: Vec<Stmt> = prices
            .iter()
            .map(|(key, price)| {
                Stmt::exec(
                    "INSERT INTO prices (offer_key, at, price_per_hour) VALUES (?1, ?2, ?3)
                     ON CONFLICT (offer_key, at) DO NOTHING",
                    params![key, ms(at), *price],
                )
            })
            .collect();
        if !batch.is_empty() {
            self.run(batch)?;
        }
        Ok(())
    }

    /// Every recorded price, per offer key, oldest first.
    pub fn prices(&self) -> Result<PriceLog> {
        self.prices_where("", vec![])
    }

    /// The recorded prices of the offers `job` ran on.
    pub fn job_prices(&self, job: &str) -> Result<PriceLog> {
        self.prices_where(
            "WHERE offer_key IN (SELECT offer_key FROM usage WHERE job = ?1)",
            params![job],
        )
    }

    fn prices_where(&self, filter: &str, params: Vec<sql::Value>) -> Result<PriceLog> {
        let mut out = PriceLog::new();
        let sql = format!(
            "SELECT offer_key, at, price_per_hour FROM prices {filter} ORDER BY offer_key, at"
        );
        for r in self.query(&sql, params)? {
            out.entry(r.text(0)?)
                .or_default()
                .push((time(r.int(1)?), r.real(2)?));
        }
        Ok(out)
    }

    /// The newest recorded price of each offer key (what a restarted controller compares
    /// fresh offers with).
    pub fn latest_prices(&self) -> Result<BTreeMap<String, f64>> {
        Ok(self
            .prices()?
            .into_iter()
            .filter_map(|(k, v)| v.last().map(|p| (k, p.1)))
            .collect())
    }
}

/// Columns: instance, job, offer_key, capacity, price_per_hour, on_demand_per_hour,
/// started_at, ended_at.
pub(super) fn usage_from_row(r: &Row) -> Result<Usage> {
    Ok(Usage {
        instance: r.text(0)?,
        job: r.text(1)?,
        offer_key: r.text(2)?,
        capacity: r.text(3)?.parse().map_err(StoreError::Invalid)?,
        price_per_hour: r.real(4)?,
        on_demand_per_hour: r.opt_real(5)?,
        started_at: time(r.int(6)?),
        ended_at: r.opt_int(7)?.map(time),
    })
}
