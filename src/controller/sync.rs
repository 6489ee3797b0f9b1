//! Phase 2: the cloud's list of our instances against the store's. Adopts instances of open
//! intents (a crash between the cloud call and the store write), ends what the cloud no longer
//! lists, terminates launches that never came up, and collects leaks.

use chrono::{DateTime, Utc};
use tern_cloud::{Capacity, Instance, InstanceId, InstanceState, IntentId, Offer};

use super::decide;
use super::events::Event;
use super::instances::IdSet;
use super::{Controller, Result, delta};
use crate::store::InstanceRecord;
use std::time::Duration;
use tern_policies::capacity;

impl Controller {
    /// Returns false when the cloud could not be listed (then nothing else is done this pass).
    pub(super) async fn sync_fleet(&mut self, now: DateTime<Utc>) -> Result<bool> {
        let cloud = match self.provider.list(&self.config.owner).await {
            Ok(c) => c,
            Err(e) => {
                self.cloud_error(&e);
                return Ok(false);
            }
        };
        // Each pass lists the whole fleet (100,000 instances at scale): known instances are
        // matched without a copy, and the listed ids are gathered into a set only when some
        // known instance was not listed.
        let known = self.fleet.instances.len();
        let mut matched = 0;
        let mut new = IdSet::default();
        for inst in &cloud {
            if self.sync_known(inst)? {
                matched += 1;
            } else {
                new.insert(&inst.id);
                self.sync_new(inst.clone(), now).await?;
            }
        }
        self.cloud.unaccounted.retain(|id, _| new.contains(id));
        self.cloud.foreign.retain(|id, _| new.contains(id));
        if matched < known {
            let listed: IdSet = cloud.iter().map(|i| &i.id).collect();
            self.end_gone(&listed, now)?;
        }
        self.time_out_launches(now).await?;
        self.cancel_late_queues(now).await?;
        Ok(true)
    }

    /// An instance the cloud lists that this controller tracks: its state is brought up to
    /// date. Whether it was one.
    fn sync_known(&mut self, inst: &Instance) -> Result<bool> {
        let Some(known) = self.fleet.instances.get(&inst.id) else {
            return Ok(false);
        };
        if known.state != inst.state {
            self.set_instance(&inst.id, inst.state, known.draining)?;
        }
        Ok(true)
    }

    /// Set a tracked instance's state and draining mark, in the fleet and in the store.
    pub(super) fn set_instance(
        &mut self,
        id: &InstanceId,
        state: InstanceState,
        draining: bool,
    ) -> Result<()> {
        if self.fleet.instances.set(id, state, draining) {
            self.store.set_instance_state(id, state, draining)?;
        }
        Ok(())
    }

    /// An instance the cloud lists that this controller does not track: an adoption (a crash
    /// between the launch call and the store write), another store's instance, or a leak.
    async fn sync_new(&mut self, inst: Instance, now: DateTime<Utc>) -> Result<()> {
        if let Some(intent) = inst
            .intent_id()
            .filter(|id| self.fleet.intents.contains_key(id))
        {
            let od = self.on_demand_price(&inst.offer);
            let job = inst.job().unwrap_or_default().to_string();
            self.store.record_instances(
                intent,
                &job,
                std::slice::from_ref(&inst),
                od,
                false,
                now,
            )?;
            self.adopt(intent, inst);
            return Ok(());
        }
        if inst.cluster() != Some(self.store.cluster_id()) && !self.config.adopt_foreign {
            return self.report_foreign(inst, now);
        }
        self.collect_leak(inst, now).await
    }

    /// An instance with our owner tag that another state store launched: a lost, emptied or
    /// swapped store, or a second controller given the same owner. Terminating it could wipe
    /// a fleet that another store still accounts for, so it is reported (once) and left alone;
    /// `--adopt` makes this controller collect such instances as its own leaks.
    fn report_foreign(&mut self, inst: Instance, now: DateTime<Utc>) -> Result<()> {
        if self.cloud.foreign.contains_key(&inst.id) {
            return Ok(());
        }
        let cluster = inst.cluster().map(String::from);
        self.cloud.foreign.insert(inst.id.clone(), cluster.clone());
        self.emit(
            now,
            Event::ForeignInstance {
                job: inst.job().map(String::from),
                id: inst.id,
                cluster,
            },
        )
    }

    /// An owned instance that no open intent or live record accounts for is terminated once it
    /// has stayed so for the grace period.
    async fn collect_leak(&mut self, inst: Instance, now: DateTime<Utc>) -> Result<()> {
        let first = *self.cloud.unaccounted.entry(inst.id.clone()).or_insert(now);
        let seen = (first, now, self.config.leak_grace);
        let decision = decide::leak(&inst.id, seen, self.terminating(&inst.id));
        self.carry_out(inst.job().unwrap_or_default(), decision, now)
            .await
    }

    /// Tracked instances the cloud no longer lists are gone (preempted, terminated).
    fn end_gone(&mut self, seen: &IdSet, now: DateTime<Utc>) -> Result<()> {
        let gone: Vec<InstanceId> = self
            .fleet
            .instances
            .keys()
            .filter(|id| !seen.contains(id))
            .cloned()
            .collect();
        for id in gone {
            self.store.end_instance(&id, now)?;
            if let Some(i) = self.fleet.instances.remove(&id) {
                self.mark_dirty(&i.job);
            }
        }
        Ok(())
    }

    /// Launches not running after the timeout are terminated (by intent) and their offer
    /// avoided.
    async fn time_out_launches(&mut self, now: DateTime<Utc>) -> Result<()> {
        let mut pending: Vec<InstanceRecord> = self
            .fleet
            .instances
            .values()
            .filter(|i| i.state == InstanceState::Pending)
            .cloned()
            .collect();
        pending.sort_by(|a, b| a.id.cmp(&b.id));
        for i in pending {
            let timeout = (now, self.config.launch_timeout);
            let decision = decide::timed_out(&i, timeout, self.terminating(&i.id));
            self.carry_out(&i.job, decision, now).await?;
        }
        Ok(())
    }

    /// A spot request still waiting in the cloud's queue (a TPU queued resource) once its
    /// job's deadline needs on-demand now: waiting on is no longer a plan that meets the
    /// deadline, so the request is cancelled and the job planned again. (Queued requests have
    /// no launch timeout; this is what ends them early.)
    async fn cancel_late_queues(&mut self, now: DateTime<Utc>) -> Result<()> {
        let mut queued: Vec<InstanceRecord> = self
            .fleet
            .instances
            .values()
            .filter(|i| i.state == InstanceState::Queued && i.offer.capacity == Capacity::Spot)
            .cloned()
            .collect();
        queued.sort_by(|a, b| a.id.cmp(&b.id));
        for i in queued {
            let outlook = self.outlook(&i.job, &i.offer, now);
            let on_demand =
                self.fleet.jobs.get(&i.job).is_none_or(|e| {
                    (e.record.spec.constraints.capacity).allows(Capacity::OnDemand)
                });
            let decision =
                decide::queued(&i, outlook.policy.as_ref(), outlook.spot_wait, on_demand);
            self.carry_out(&i.job, decision, now).await?;
        }
        Ok(())
    }

    pub(super) fn adopt(&mut self, intent: IntentId, inst: Instance) {
        let job = inst.job().unwrap_or_default().to_string();
        self.fleet.instances.insert(InstanceRecord {
            id: inst.id,
            job,
            intent,
            offer: inst.offer,
            state: inst.state,
            draining: false,
            launched_at: inst.launched_at,
            ended_at: None,
        });
    }

    pub(super) fn on_demand_price(&self, offer: &Offer) -> Option<f64> {
        if offer.capacity == Capacity::OnDemand {
            return Some(offer.price_per_hour);
        }
        self.cloud
            .on_demand
            .get(&offer.instance_type.name)?
            .get(offer.zone.as_str())
            .copied()
    }

    /// A strike against an offer's pool (a capacity error, a notice, a launch timeout): avoid
    /// it for a backoff that doubles with each strike in a row. Returns how long.
    pub(super) fn avoid(&mut self, offer_key: String, now: DateTime<Utc>) -> Duration {
        let (strikes, last) = self.cloud.strikes.get(&offer_key).copied().unzip();
        let since = last.and_then(|l| (now - l).to_std().ok());
        let strikes = capacity::next_strikes(strikes.unwrap_or(0), since);
        self.cloud.strikes.insert(offer_key.clone(), (strikes, now));
        let avoid = capacity::backoff(strikes, self.config.capacity_memory);
        let until = now + delta(avoid);
        let entry = self.cloud.capacity_errors.entry(offer_key).or_insert(until);
        *entry = (*entry).max(until);
        avoid
    }

    /// Reconcile this job in the current pass, not at its next period.
    pub(super) fn mark_dirty(&mut self, job: &str) {
        if let Some(e) = self.fleet.jobs.get_mut(job) {
            e.dirty = true;
        }
    }
}
