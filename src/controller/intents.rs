//! Phase 3, and the one way anything is done: intents. Each action is an [`Intent`] written to
//! the store before the cloud is called; a launch carries the key derived from it. Open
//! intents are resumed at every pass, so a crash anywhere repeats the same requests.

use chrono::{DateTime, Utc};
use tern_cloud::{
    InstanceId, InstanceState, Intent, IntentId, IntentKind, IntentState, LaunchRequest, Offer,
    Tags, tag,
};

use tern_policies::capacity;

use super::carry_out::{Aim, aim};
use super::events::{Event, WaitReason};
use super::{Controller, Requeue, Result};
use crate::store::{AGENT_TOKEN_TAG, JobState};

/// Come back this soon when an intent must be retried (throttled, or waiting on the cloud).
const RETRY: std::time::Duration = std::time::Duration::from_secs(2);

impl Controller {
    /// Resume every open intent, oldest first, ties by job: intent ids are random, so their
    /// order must not decide which job gets scarce capacity first (runs with the same seed stay
    /// identical).
    pub(super) async fn resume_intents(&mut self, now: DateTime<Utc>) -> Result<Requeue> {
        let mut open: Vec<Intent> = self.fleet.intents.values().cloned().collect();
        open.sort_by(|a, b| (a.created_at, &a.job).cmp(&(b.created_at, &b.job)));
        let mut requeue = Requeue::Periodic;
        for intent in open {
            let job = intent.job.clone();
            let r = self.execute(intent, now).await;
            if self.contain(&job, r)? != Some(true) {
                requeue = Requeue::After(RETRY);
            }
        }
        Ok(requeue)
    }

    pub(super) fn new_intent(
        &mut self,
        job: &str,
        kind: IntentKind,
        now: DateTime<Utc>,
    ) -> Result<Intent> {
        self.ids.seq += 1;
        let name = format!(
            "{}/{job}/{}/{}/{}",
            self.config.owner,
            now.timestamp_millis(),
            self.ids.salt,
            self.ids.seq
        );
        let intent = Intent {
            id: IntentId::from_uuid(uuid::Uuid::new_v5(
                &uuid::Uuid::NAMESPACE_OID,
                name.as_bytes(),
            )),
            job: job.to_string(),
            kind,
            state: IntentState::Pending,
            attempt: 0,
            created_at: now,
        };
        // Persisted before anything is asked of the cloud: the crash-safety anchor.
        self.store.insert_intent(&intent)?;
        self.fleet.intents.insert(intent.id, intent.clone());
        Ok(intent)
    }

    /// Write a new intent and carry it out at once. A launch beyond the job's hourly launch
    /// budget is not written: the job waits (flapping capacity cannot make it launch without
    /// bound).
    pub(super) async fn act(
        &mut self,
        job: &str,
        kind: IntentKind,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let kind = match kind {
            IntentKind::Launch { offers, count } => match self.admitted(job, offers, count, now)? {
                Some(offers) => IntentKind::Launch { offers, count },
                None => return Ok(()),
            },
            IntentKind::Migrate { from, to, count } => match self.admitted(job, to, count, now)? {
                Some(to) => IntentKind::Migrate { from, to, count },
                None => return Ok(()),
            },
            other => other,
        };
        self.start_intent(job, kind, now).await
    }

    /// Write a new intent, already admitted, and carry it out at once.
    pub(super) async fn start_intent(
        &mut self,
        job: &str,
        kind: IntentKind,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let intent = self.new_intent(job, kind, now)?;
        self.execute(intent, now).await?;
        Ok(())
    }

    /// The one check of a start of capacity, asked before anything about it is said or
    /// written: the job's hourly launch budget, then the limits (quotas, team budgets and
    /// $/h), whose room is taken for it. The offers that fit, or `None` once the job's wait
    /// is reported.
    pub(super) fn admitted(
        &mut self,
        job: &str,
        offers: Vec<Offer>,
        count: u32,
        now: DateTime<Utc>,
    ) -> Result<Option<Vec<Offer>>> {
        if count > 0 && !self.within_launch_budget(job, count, now)? {
            return Ok(None);
        }
        self.admit(job, offers, count, now)
    }

    /// Whether `job` may launch `count` more instances now; says why not when it may not.
    fn within_launch_budget(&mut self, job: &str, count: u32, now: DateTime<Utc>) -> Result<bool> {
        let Some(e) = self.fleet.jobs.get(job) else {
            return Ok(true);
        };
        let max_workers = e.record.spec.workers.max;
        let launched = self
            .store
            .launched_since(job, now - chrono::TimeDelta::hours(1))?;
        if capacity::launches_allowed(count, launched, max_workers) >= count {
            return Ok(true);
        }
        let budget = capacity::launch_budget(max_workers);
        self.wait(job, WaitReason::LaunchBudget { launched, budget }, now)?;
        Ok(false)
    }

    fn close_intent(
        &mut self,
        id: IntentId,
        state: IntentState,
        reason: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        self.store.set_intent_state(id, state, reason, now)?;
        self.fleet.intents.remove(&id);
        Ok(())
    }

    /// Carry out (or resume) one open intent. Returns false when it must be retried later.
    async fn execute(&mut self, intent: Intent, now: DateTime<Utc>) -> Result<bool> {
        let job_live = self
            .fleet
            .jobs
            .get(&intent.job)
            .is_some_and(|e| !e.record.state.is_final() && !e.record.work_done());
        let starts_capacity = matches!(
            intent.kind,
            IntentKind::Launch { .. } | IntentKind::Migrate { .. }
        );
        if starts_capacity && !job_live {
            // Re-validation: the job ended while the launch or move was open. Anything it may
            // have started is collected as a leak.
            self.close_intent(
                intent.id,
                IntentState::Cancelled,
                Some("job no longer active"),
                now,
            )?;
            return Ok(true);
        }
        match intent.kind.clone() {
            IntentKind::Launch { offers, count } => {
                self.launch(&intent, offers, count, true, now).await
            }
            IntentKind::Migrate { from, to, count } => {
                self.migrate(&intent, &from, to, count, now).await
            }
            IntentKind::Terminate { instances } => {
                let done = self.terminate_all(&intent, &instances, now).await?;
                if done {
                    self.close_intent(intent.id, IntentState::Done, None, now)?;
                }
                Ok(done)
            }
            IntentKind::Resize { count } => {
                // The fleet size the job aims for; launches and terminations follow from it
                // (`replace` tops a job up to its target). Repeating it after a crash is harmless.
                if let Some(e) = self.fleet.jobs.get_mut(&intent.job) {
                    aim(&mut e.record, Aim::Size(count));
                    self.store.update_job(&e.record, now)?;
                }
                self.close_intent(intent.id, IntentState::Done, None, now)?;
                Ok(true)
            }
        }
    }

    /// A migration in steps, one per pass: launch the new nodes; once they run, drain the old
    /// ones (the job checkpoints); once the checkpoint is reported, release the old nodes.
    async fn migrate(
        &mut self,
        intent: &Intent,
        from: &[InstanceId],
        to: Vec<Offer>,
        count: u32,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let launched: Vec<InstanceState> = self
            .fleet
            .instances
            .values()
            .filter(|i| i.intent == intent.id)
            .map(|i| i.state)
            .collect();
        if launched.is_empty() {
            // The new nodes came and went (reclaimed before the move finished): the move is
            // off. Launching again would get the same, gone, instances back (same key).
            if self.store.instances_of_intent(intent.id)? > 0 {
                // The nodes it was leaving stay the job's: no longer draining, so they count
                // again and nothing replaces them beside themselves.
                self.undrain(&intent.job, from, now)?;
                self.close_intent(
                    intent.id,
                    IntentState::Cancelled,
                    Some("the new capacity was lost before the move finished"),
                    now,
                )?;
                return Ok(true);
            }
            return self.launch(intent, to, count, false, now).await;
        }
        if launched.iter().any(|s| *s != InstanceState::Running) {
            return Ok(true);
        }
        if self.drain_leaving(&intent.job, from, now)? {
            return Ok(true);
        }
        let Some(entry) = self.fleet.jobs.get_mut(&intent.job) else {
            return Ok(true);
        };
        if entry.record.drain_requested {
            return Ok(true);
        }
        entry.record.last_move_at = Some(now);
        // A move of the whole fleet onto another shape or size (a probe's job moving to its
        // plan) aims the job at what it moved to.
        let landed = self
            .fleet
            .instances
            .values()
            .find(|i| i.intent == intent.id)
            .map(|i| i.offer.clone());
        if let Some(o) = landed
            && from.len() as u32 >= entry.record.target_count
            && (count != entry.record.target_count
                || entry
                    .record
                    .target_offer
                    .as_deref()
                    .is_none_or(|t| !same_type(t, &o)))
        {
            let offer = o.key();
            aim(&mut entry.record, Aim::At { offer, count });
        }
        self.store.update_job(&entry.record, now)?;
        if !self.terminate_all(intent, from, now).await? {
            return Ok(false);
        }
        self.close_intent(intent.id, IntentState::Done, None, now)?;
        self.emit(
            now,
            Event::Migrated {
                job: intent.job.clone(),
                released: from.len(),
            },
        )?;
        Ok(true)
    }

    /// New nodes are up: mark the old ones draining and ask the job to checkpoint. Returns
    /// true when it did so now (the next step waits for the checkpoint).
    fn drain_leaving(
        &mut self,
        job: &str,
        from: &[InstanceId],
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let leaving: Vec<InstanceId> = from
            .iter()
            .filter(|id| self.fleet.instances.get(*id).is_some_and(|i| !i.draining))
            .cloned()
            .collect();
        if leaving.is_empty() {
            return Ok(false);
        }
        if let Some(entry) = self.fleet.jobs.get_mut(job) {
            entry.record.drain_requested = true;
            self.store.set_drain(job, true, now)?;
        }
        for id in &leaving {
            if let Some(state) = self.fleet.instances.get(id).map(|i| i.state) {
                self.set_instance(id, state, true)?;
            }
        }
        Ok(true)
    }

    /// A move is off: the nodes it drained are the job's again, and a drain it asked for
    /// and nobody answered is withdrawn.
    fn undrain(&mut self, job: &str, from: &[InstanceId], now: DateTime<Utc>) -> Result<()> {
        let mut any = false;
        for id in from {
            if let Some(i) = self.fleet.instances.get(id)
                && i.draining
            {
                any = true;
                self.set_instance(id, i.state, false)?;
            }
        }
        if any
            && let Some(e) = self.fleet.jobs.get_mut(job)
            && e.record.drain_requested
        {
            e.record.drain_requested = false;
            self.store.set_drain(job, false, now)?;
        }
        Ok(())
    }

    /// Terminate the instances of `ids` this store accounts for: tracked ones, and leaks the
    /// collector listed this process (an untracked id resumed after a restart is skipped; the
    /// collector lists it again and writes a new intent). False when the cloud refused some.
    /// Every call is on behalf of an open intent, written before this is called.
    pub(super) async fn terminate_all(
        &mut self,
        intent: &Intent,
        ids: &[InstanceId],
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let mut all = true;
        let mut ended = Vec::new();
        for id in ids {
            let tracked = self.fleet.instances.contains_key(id);
            if !tracked && !self.cloud.unaccounted.contains_key(id) {
                continue;
            }
            match self.provider.terminate(id).await {
                Ok(()) => ended.push(id.clone()),
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    self.cloud_error(&e);
                    all = false;
                    continue;
                }
            }
            self.cloud.unaccounted.remove(id);
            if tracked {
                self.store.end_instance(id, now)?;
                self.fleet.instances.remove(id);
            }
        }
        if !ended.is_empty() {
            let job = Some(intent.job.clone()).filter(|j| !j.is_empty());
            self.emit(
                now,
                Event::Terminated {
                    job,
                    ids: ended,
                    intent: intent.id,
                },
            )?;
        }
        Ok(all)
    }

    /// Write a `terminate` intent for `ids` and carry it out at once (the collector, launch
    /// timeouts and late queues end instances this way, like every other termination).
    /// Whether the cloud ended them all; if not, the intent stays open and is resumed.
    pub(super) async fn terminate_now(
        &mut self,
        job: &str,
        ids: Vec<InstanceId>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let intent = self.new_intent(job, IntentKind::Terminate { instances: ids }, now)?;
        self.execute(intent, now).await
    }

    /// Whether an open intent already asks to terminate `id` (so a pass does not write a
    /// second one while the first waits on the cloud).
    pub(super) fn terminating(&self, id: &InstanceId) -> bool {
        self.fleet.intents.values().any(|i| match &i.kind {
            IntentKind::Terminate { instances } => instances.contains(id),
            _ => false,
        })
    }

    fn tags(&self, intent: IntentId, job: &str) -> Tags {
        let mut tags = Tags::new();
        tags.insert(tag::OWNER.into(), self.config.owner.clone());
        tags.insert(tag::INTENT.into(), intent.to_string());
        tags.insert(tag::JOB.into(), job.to_string());
        tags.insert(tag::CLUSTER.into(), self.store.cluster_id().to_string());
        // The worker's credential: its own job's agent token, nothing more (threat model).
        tags.insert(AGENT_TOKEN_TAG.into(), self.store.agent_token(job));
        tags
    }

    /// Send the launch of `intent`. `close` marks the intent done with its instances (a plain
    /// launch); a migration stays open until the old nodes are released.
    async fn launch(
        &mut self,
        intent: &Intent,
        offers: Vec<Offer>,
        count: u32,
        close: bool,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let spec = self.fleet.jobs.get(&intent.job).map(|e| &e.record.spec);
        let gang = spec.is_some_and(|s| s.gang);
        let disk_gb = spec.and_then(|s| s.disk_gb);
        let request = LaunchRequest {
            key: intent.idempotency_key(),
            intent: intent.id,
            job: intent.job.clone(),
            offers,
            count,
            min_count: if gang { count } else { 1 },
            single_zone: gang,
            tags: self.tags(intent.id, &intent.job),
            template: None,
            disk_gb,
        };
        let outcome = match self.provider.launch(&request).await {
            Ok(o) => o,
            Err(e) => {
                if e.is_quota()
                    && let Some(offer) = request.offers.first()
                {
                    self.note_refused_quota(offer, &e, now);
                }
                return self.launch_refused(intent, &e, now);
            }
        };
        for (key, err) in &outcome.errors {
            self.cloud_error(err);
            if err.is_quota()
                && let Some(offer) = request.offers.iter().find(|o| &o.key() == key)
            {
                self.note_refused_quota(offer, err, now);
            }
            if err.is_capacity() || err.is_quota() {
                let avoided = self.avoid(key.clone(), now);
                self.emit(
                    now,
                    Event::CapacityError {
                        job: intent.job.clone(),
                        offer: key.clone(),
                        error: err.to_string(),
                        avoided,
                    },
                )?;
            }
        }
        if outcome.instances.is_empty() {
            self.close_intent(
                intent.id,
                IntentState::Failed,
                Some("no offer had capacity"),
                now,
            )?;
            self.mark_dirty(&intent.job);
            return Ok(true);
        }
        self.launched(intent, outcome.instances, count, close, now)?;
        Ok(true)
    }

    /// The whole launch call failed: retry the same key later, or give the intent up.
    fn launch_refused(
        &mut self,
        intent: &Intent,
        e: &tern_cloud::ProviderError,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        self.cloud_error(e);
        if e.is_retryable() {
            // Same intent, same attempt, same key next time.
            return Ok(false);
        }
        self.close_intent(intent.id, IntentState::Failed, Some(&e.to_string()), now)?;
        self.emit(
            now,
            Event::LaunchFailed {
                job: intent.job.clone(),
                error: e.to_string(),
            },
        )?;
        self.mark_dirty(&intent.job);
        Ok(true)
    }

    /// Record what a launch started, in one transaction with the intent's state.
    fn launched(
        &mut self,
        intent: &Intent,
        instances: Vec<tern_cloud::Instance>,
        count: u32,
        close: bool,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let od = instances
            .first()
            .and_then(|i| self.on_demand_price(&i.offer));
        self.store
            .record_instances(intent.id, &intent.job, &instances, od, close, now)?;
        if close {
            self.fleet.intents.remove(&intent.id);
        }
        let first = instances[0].offer.clone();
        self.emit(
            now,
            Event::Launched {
                job: intent.job.clone(),
                count: instances.len(),
                instance_type: first.instance_type.name.clone(),
                capacity: first.capacity,
                zone: first.zone.clone(),
                price: first.price_per_hour,
            },
        )?;
        for inst in instances {
            // A replayed launch returns instances we may already track (and may have marked
            // as draining since): keep what we know.
            if !self.fleet.instances.contains_key(&inst.id) {
                self.adopt(intent.id, inst);
            }
        }
        self.start_running(&intent.job, &first, count, now)
    }

    /// A job's first launch makes it running; an intent resumed after a crash that came before
    /// its plan was recorded makes what it launched the fleet to keep.
    fn start_running(
        &mut self,
        job: &str,
        first: &Offer,
        count: u32,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let Some(e) = self.fleet.jobs.get_mut(job) else {
            return Ok(());
        };
        let mut changed = false;
        if e.record.state == JobState::Pending {
            e.record.state = JobState::Running;
            e.record.reason = None;
            changed = true;
        }
        if e.record.target_offer.is_none() {
            let offer = first.key();
            aim(&mut e.record, Aim::At { offer, count });
            changed = true;
        }
        if changed {
            self.store.update_job(&e.record, now)?;
        }
        Ok(())
    }
}

/// Whether offer key `key` names the instance type of `offer`.
fn same_type(key: &str, offer: &Offer) -> bool {
    tern_cloud::OfferKey::parse(key).is_some_and(|k| k.instance_type == offer.instance_type.name)
}
