//! The `intents` and `instances` tables (and the usage interval each instance opens): what
//! the controller means to do, written before the cloud is called, and what it launched.

use super::*;

impl Store {
    /// Persist an intent. Called before the cloud is asked to do anything for it.
    pub fn insert_intent(&self, intent: &Intent) -> Result<()> {
        let body = json("intent", &intent.kind)?;
        self.exec(
            "INSERT INTO intents (id, job, kind, body, state, attempt, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
            params![
                intent.id.to_string(),
                &intent.job,
                intent.kind.name(),
                body,
                intent_state_str(intent.state),
                intent.attempt,
                ms(intent.created_at),
            ],
        )?;
        Ok(())
    }

    pub fn set_intent_state(
        &self,
        id: IntentId,
        state: IntentState,
        reason: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        self.exec(
            "UPDATE intents SET state = ?2, reason = ?3, updated_at = ?4 WHERE id = ?1",
            params![id.to_string(), intent_state_str(state), reason, ms(now)],
        )?;
        Ok(())
    }

    /// State of any intent, open or closed (the leak collector asks about instance tags).
    pub fn intent_state(&self, id: IntentId) -> Result<Option<IntentState>> {
        self.query(
            "SELECT state FROM intents WHERE id = ?1",
            params![id.to_string()],
        )?
        .first()
        .map(|r| intent_state(&r.text(0)?))
        .transpose()
    }

    /// One intent, open or closed.
    pub fn intent(&self, id: IntentId) -> Result<Option<Intent>> {
        self.query(
            "SELECT id, job, body, state, attempt, created_at FROM intents WHERE id = ?1",
            params![id.to_string()],
        )?
        .first()
        .map(intent_from_row)
        .transpose()
    }

    /// Record launched instances and open their usage intervals, atomically. `done` also closes
    /// the intent in the same transaction (a launch intent is done once its instances are known).
    pub fn record_instances(
        &self,
        intent: IntentId,
        job: &str,
        instances: &[Instance],
        on_demand_per_hour: Option<f64>,
        done: bool,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let mut batch = Vec::with_capacity(2 * instances.len() + 1);
        for i in instances {
            let offer = json("offer", &i.offer)?;
            batch.push(Stmt::exec(
                "INSERT INTO instances (id, job, intent, offer, offer_key, capacity,
                    state, draining, launched_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8)
                 ON CONFLICT (id) DO NOTHING",
                params![
                    i.id.as_str(),
                    job,
                    intent.to_string(),
                    offer,
                    i.offer.key(),
                    i.offer.capacity.as_str(),
                    instance_state_str(i.state),
                    ms(i.launched_at),
                ],
            ));
            batch.push(Stmt::exec(
                "INSERT INTO usage (instance, job, offer_key, capacity, price_per_hour,
                    on_demand_per_hour, started_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (instance) DO NOTHING",
                params![
                    i.id.as_str(),
                    job,
                    i.offer.key(),
                    i.offer.capacity.as_str(),
                    i.offer.price_per_hour,
                    on_demand_per_hour,
                    ms(i.launched_at),
                ],
            ));
        }
        if done {
            batch.push(Stmt::exec(
                "UPDATE intents SET state = 'done', updated_at = ?2 WHERE id = ?1",
                params![intent.to_string(), ms(now)],
            ));
        }
        if !batch.is_empty() {
            self.run(batch)?;
        }
        Ok(())
    }

    pub fn set_instance_state(
        &self,
        id: &InstanceId,
        state: InstanceState,
        draining: bool,
    ) -> Result<()> {
        self.exec(
            "UPDATE instances SET state = ?2, draining = ?3 WHERE id = ?1",
            params![id.as_str(), instance_state_str(state), draining],
        )?;
        Ok(())
    }

    /// The instance is gone: mark it terminated, close its usage interval and fence its
    /// workers (no report from it counts from now on, before any view shows it gone),
    /// atomically.
    pub fn end_instance(&self, id: &InstanceId, at: DateTime<Utc>) -> Result<()> {
        self.run(vec![
            Stmt::exec(
                "UPDATE instances SET state = 'terminated', ended_at = ?2
                 WHERE id = ?1 AND ended_at IS NULL",
                params![id.as_str(), ms(at)],
            ),
            Stmt::exec(
                "UPDATE usage SET ended_at = ?2 WHERE instance = ?1 AND ended_at IS NULL",
                params![id.as_str(), ms(at)],
            ),
            Stmt::exec(
                "UPDATE workers SET running = 0, stopped_at = ?2
                 WHERE instance = ?1 AND running <> 0",
                params![id.as_str(), ms(at)],
            ),
        ])?;
        Ok(())
    }
}

/// Columns: id, job, body, state, attempt, created_at.
pub(super) fn intent_from_row(r: &Row) -> Result<Intent> {
    Ok(Intent {
        id: intent_id(&r.text(0)?)?,
        job: r.text(1)?,
        kind: parse::<IntentKind>("intent", &r.text(2)?)?,
        state: intent_state(&r.text(3)?)?,
        attempt: r.u32(4)?,
        created_at: time(r.int(5)?),
    })
}
