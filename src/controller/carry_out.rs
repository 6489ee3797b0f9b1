//! Carrying out decisions. The phases gather a view and ask [`super::decide`]; what it answers
//! is done here and only here. Each step reports what was decided (its event), then writes its
//! intent to the store before the cloud is called through it ([`Controller::act`]); the store
//! is brought up to date from the cloud's answer, whose own events (`launched`, `terminated`)
//! follow.

use chrono::{DateTime, Utc};
use tern_cloud::{IntentKind, Offer};

use super::decide::{self, Decision};
use super::events::Event;
use super::{Controller, Result};

impl Controller {
    /// Carry out a decision: intents (and through them the cloud), store writes, events.
    pub(super) async fn carry_out(
        &mut self,
        name: &str,
        decision: Decision,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let mut next = Some(decision);
        while let Some(d) = next.take() {
            next = self.carry_out_one(name, d, now).await?;
        }
        Ok(())
    }

    /// One step of a decision; what follows it, if anything.
    async fn carry_out_one(
        &mut self,
        name: &str,
        decision: Decision,
        now: DateTime<Utc>,
    ) -> Result<Option<Decision>> {
        let decision = self.within_limits(name, decision);
        match decision {
            Decision::Nothing => Ok(None),
            Decision::Wait(reason) => self.wait(name, reason, now).map(|()| None),
            Decision::Launch { offers, count, .. } => {
                let kind = IntentKind::Launch { offers, count };
                self.act(name, kind, now).await.map(|()| None)
            }
            Decision::Replace {
                offers,
                missing,
                on_demand,
            } => self
                .replace_nodes(name, offers, missing, on_demand, now)
                .await
                .map(|()| None),
            Decision::Regroup {
                zone,
                release,
                anew,
                then,
            } => {
                self.regroup(name, zone, release, anew, now).await?;
                Ok(Some(*then))
            }
            Decision::Move { step, of, to } => self
                .start_move(name, of, *step, to, now)
                .await
                .map(|()| None),
            Decision::Release { ids } => {
                let kind = IntentKind::Terminate { instances: ids };
                self.act(name, kind, now).await.map(|()| None)
            }
            Decision::CancelQueued { id, offer } => self
                .cancel_queued(name, id, offer, now)
                .await
                .map(|()| None),
            Decision::Resize {
                from,
                to,
                why,
                then,
            } => {
                let job = name.to_string();
                self.emit(now, Event::Resized { job, from, to, why })?;
                self.act(name, IntentKind::Resize { count: to }, now)
                    .await?;
                Ok(Some(*then))
            }
        }
    }

    /// A replacement or a move the limits hold back becomes a wait that says which limit, so
    /// no `replace` or `migrate` event claims what will not happen. (Every launch is checked
    /// again, and counted, where its intent is written: [`Controller::admit`].)
    fn within_limits(&self, name: &str, decision: Decision) -> Decision {
        let (offers, count) = match &decision {
            Decision::Replace {
                offers, missing, ..
            } => (offers, *missing),
            Decision::Move { step, to, .. } => (to, step.movers.len() as u32),
            _ => return decision,
        };
        let Some(usage) = self.job_use(name) else {
            return decision;
        };
        match self.room.admit(&usage, offers, count) {
            Ok(_) => decision,
            Err(limit) => Decision::Wait(super::events::WaitReason::Limit { limit }),
        }
    }

    async fn replace_nodes(
        &mut self,
        name: &str,
        offers: Vec<Offer>,
        missing: u32,
        on_demand: bool,
        now: DateTime<Utc>,
    ) -> Result<()> {
        if let Some(e) = self.fleet.jobs.get_mut(name) {
            e.waiting = None;
        }
        let job = name.to_string();
        self.emit(
            now,
            Event::Replacing {
                job,
                missing,
                on_demand,
            },
        )?;
        let count = missing;
        self.act(name, IntentKind::Launch { offers, count }, now)
            .await
    }

    /// Give `release` back; `anew`: the job holds no target any more and is placed again.
    async fn regroup(
        &mut self,
        name: &str,
        zone: tern_cloud::Zone,
        release: Vec<tern_cloud::InstanceId>,
        anew: bool,
        now: DateTime<Utc>,
    ) -> Result<()> {
        if anew && let Some(e) = self.fleet.jobs.get_mut(name) {
            e.record.target_offer = None;
            e.record.target_count = 0;
            self.store.update_job(&e.record, now)?;
        }
        let job = name.to_string();
        let released = release.len();
        self.emit(
            now,
            Event::Regrouped {
                job,
                zone,
                released,
            },
        )?;
        let kind = IntentKind::Terminate { instances: release };
        self.act(name, kind, now).await
    }

    /// Cancel a queued request by a `terminate` intent (once: not while one is open).
    async fn cancel_queued(
        &mut self,
        name: &str,
        id: tern_cloud::InstanceId,
        offer: String,
        now: DateTime<Utc>,
    ) -> Result<()> {
        if self.terminating(&id) {
            return Ok(());
        }
        self.terminate_now(name, vec![id.clone()], now).await?;
        let job = name.to_string();
        self.emit(now, Event::QueueCancelled { job, id, offer })?;
        self.mark_dirty(name);
        Ok(())
    }

    /// Report a move and open its intent: launch on the first of `to` (an elastic job's list
    /// has fallbacks of the shape), then release the movers once the job has checkpointed.
    async fn start_move(
        &mut self,
        name: &str,
        of: u32,
        step: decide::MoveStep,
        to: Vec<Offer>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let k = step.movers.len() as u32;
        let Some(lead) = step.movers.first() else {
            return Ok(());
        };
        self.emit(
            now,
            Event::Migrating {
                job: name.to_string(),
                moved: k,
                of,
                from_capacity: lead.offer.capacity,
                from_price: step.from_rate / f64::from(k),
                from_zone: lead.offer.zone.clone(),
                to_capacity: step.to.capacity,
                to_price: step.to.price_per_hour,
                to_zone: step.to.zone.clone(),
                net_saving: step.net_saving,
                work_h: step.work_h,
                budget: self.config.disruption_budget,
                policy: step.policy,
            },
        )?;
        let from = step.movers.iter().map(|i| i.id.clone()).collect();
        self.act(name, IntentKind::Migrate { from, to, count: k }, now)
            .await
    }
}
