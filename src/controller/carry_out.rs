//! Carrying out decisions. The phases gather a view and ask [`super::decide`]; what it answers
//! is done here and only here. Each step reports what was decided (its event), then writes its
//! intent to the store before the cloud is called through it ([`Controller::act`]); the store
//! is brought up to date from the cloud's answer, whose own events (`launched`, `terminated`)
//! follow.

use chrono::{DateTime, Utc};
use tern_cloud::{IntentKind, Offer};

use super::decide::{self, Decision};
use super::events::{Event, Placement, WaitReason};
use super::{Controller, Result};
use crate::store::{JobRecord, JobState};

/// Where a job aims its fleet from now on: the one way a job's target changes, written only
/// by [`aim`] (a repository check holds it).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Aim {
    /// `count` nodes of offer `offer` (a key), the plan's size too: a placement, a probe's
    /// end, a move onto another shape.
    At { offer: String, count: u32 },
    /// `count` nodes of the offer it aims at (an elastic resize; the plan keeps its size).
    Size(u32),
    /// No offer until it is placed again, its size kept: a budget stop that holds the job.
    Hold,
    /// Nothing: the job is placed anew (a regroup that gave back what it held).
    Anew,
}

/// Job `r` aiming at `aim`; the caller writes the record.
pub(super) fn aim(r: &mut JobRecord, aim: Aim) {
    match aim {
        Aim::At { offer, count } => {
            r.target_offer = Some(offer);
            r.target_count = count;
            r.planned_count = count;
        }
        Aim::Size(count) => r.target_count = count,
        Aim::Hold => r.target_offer = None,
        Aim::Anew => {
            r.target_offer = None;
            r.target_count = 0;
        }
    }
}

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

    /// Carry out, between passes, a decision that needs no cloud call: what the inbox decides
    /// (a quarantine). Any other decision is made and carried out in a pass.
    pub(super) fn carry_out_now(
        &mut self,
        name: &str,
        decision: Decision,
        now: DateTime<Utc>,
    ) -> Result<()> {
        match decision {
            Decision::Nothing => Ok(()),
            Decision::Quarantine { id, reason } => self.isolate(name, &id, reason, now),
            other => Err(super::ControllerError::Job {
                job: name.to_string(),
                reason: format!("{other:?} is carried out in a pass, not between passes"),
            }),
        }
    }

    /// [`Decision::Quarantine`]: the node drains (its agent is told to checkpoint and stop),
    /// the job is looked at next pass (a release once its workers stopped, a replacement).
    fn isolate(
        &mut self,
        name: &str,
        id: &tern_cloud::InstanceId,
        reason: String,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let Some(state) = self.fleet.instances.get(id).map(|i| i.state) else {
            return Ok(());
        };
        self.set_instance(id, state, true)?;
        if let Some(e) = self.fleet.jobs.get_mut(name) {
            e.dirty = true;
        }
        let event = Event::Quarantined {
            job: name.to_string(),
            instance: id.to_string(),
            reason,
        };
        self.emit(now, event)
    }

    /// One step of a decision; what follows it, if anything.
    async fn carry_out_one(
        &mut self,
        name: &str,
        decision: Decision,
        now: DateTime<Utc>,
    ) -> Result<Option<Decision>> {
        match decision {
            Decision::Nothing => Ok(None),
            Decision::Quarantine { id, reason } => {
                self.isolate(name, &id, reason, now).map(|()| None)
            }
            Decision::Wait(reason) => self.wait(name, reason, now).map(|()| None),
            Decision::Launch {
                offers,
                count,
                planned,
                ..
            } => self
                .launch_planned(name, (offers, count), planned, now)
                .await
                .map(|()| None),
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
            Decision::WarnBudget {
                scope,
                budget,
                spent,
                limit,
            } => self
                .warn_budget(scope, budget, (spent, limit), now)
                .map(|()| None),
            Decision::StopForBudget { stop, spent, drain } => self
                .stop_for_budget(name, stop, (spent, drain), now)
                .map(|()| None),
            Decision::EndForBudget {
                stop,
                spent,
                release,
                closed,
            } => self.end_for_budget(name, (stop, spent), (release, closed), now),
            Decision::EndOverBudget { reason, limit } => self
                .end_over_budget(name, reason, limit, now)
                .map(|()| None),
            Decision::Finish {
                late_h,
                took_h,
                then,
            } => self
                .finish(name, (late_h, took_h), now)
                .map(|()| Some(*then)),
            Decision::TimeOut { id, offer, after } => self
                .time_out(name, id, (offer, after), now)
                .await
                .map(|()| None),
            Decision::CollectLeak { id } => self.collect(name, id, now).await.map(|()| None),
            Decision::PlanCold { why } => self.plan_cold(name, why, now).map(|()| None),
            Decision::Unplaceable { reason } => {
                self.mark_unplaceable(name, &reason, now).map(|()| None)
            }
            Decision::Probe(start) => self.begin_probe(name, *start, now).await.map(|()| None),
            Decision::EndProbe(end) => self.finish_probe(name, *end, now),
            Decision::MoveFromProbe {
                from,
                to,
                count,
                migrating,
            } => self
                .move_from_probe(name, (from, to, count), migrating, now)
                .await
                .map(|()| None),
        }
    }

    /// [`Decision::TimeOut`]: decided once; the intent is resumed until the cloud ends the
    /// launch, and the offer is avoided from now.
    async fn time_out(
        &mut self,
        name: &str,
        id: tern_cloud::InstanceId,
        (offer, after): (String, std::time::Duration),
        now: DateTime<Utc>,
    ) -> Result<()> {
        self.terminate_now(name, vec![id.clone()], now).await?;
        let avoided = self.avoid(offer.clone(), now);
        let job = name.to_string();
        let event = Event::LaunchTimedOut {
            job,
            id,
            after,
            offer,
            avoided,
        };
        self.emit(now, event)?;
        self.mark_dirty(name);
        Ok(())
    }

    /// [`Decision::CollectLeak`]: its termination, and once the cloud ends it, its event.
    async fn collect(
        &mut self,
        name: &str,
        id: tern_cloud::InstanceId,
        now: DateTime<Utc>,
    ) -> Result<()> {
        if !self.terminate_now(name, vec![id.clone()], now).await? {
            return Ok(());
        }
        let job = (!name.is_empty()).then(|| name.to_string());
        self.emit(now, Event::LeakCollected { job, id })
    }

    /// [`Decision::PlanCold`]: noted on the job (its plans' events say it) and said.
    fn plan_cold(&mut self, name: &str, why: String, now: DateTime<Utc>) -> Result<()> {
        let Some(e) = self.fleet.jobs.get_mut(name) else {
            return Ok(());
        };
        e.cold_plan = Some(why.clone());
        let job = name.to_string();
        self.emit(now, Event::ColdStart { job, why })
    }

    /// [`Decision::Finish`]: the job is finished, late by `late_h` hours if it is, and says so.
    fn finish(
        &mut self,
        name: &str,
        (late_h, took_h): (Option<f64>, f64),
        now: DateTime<Utc>,
    ) -> Result<()> {
        let Some(e) = self.fleet.jobs.get_mut(name) else {
            return Ok(());
        };
        e.record.state = crate::store::JobState::Finished;
        e.record.finished_at = Some(now);
        e.record.reason = late_h.map(|h| format!("finished {h:.1} h after its deadline"));
        self.store.update_job(&e.record, now)?;
        let job = name.to_string();
        self.emit(
            now,
            Event::Finished {
                job,
                late_h,
                took_h,
            },
        )
    }

    /// A placed job's launch: admitted (the launch budget, the limits), then the job's aim
    /// and the plan's event, then its intent; a launch the limits hold back is a wait that
    /// says which, and no `plan` event claims what will not happen.
    async fn launch_planned(
        &mut self,
        name: &str,
        (offers, count): (Vec<Offer>, u32),
        planned: Option<Box<Placement>>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let Some(first) = offers.first().map(Offer::key) else {
            return Ok(());
        };
        let Some(offers) = self.admitted(name, offers, count, now)? else {
            return Ok(());
        };
        if let Some(placement) = planned {
            if let Some(e) = self.fleet.jobs.get_mut(name) {
                aim(
                    &mut e.record,
                    Aim::At {
                        offer: first,
                        count,
                    },
                );
                e.waiting = None;
                e.estimate_unsaved = false;
                self.store.update_job(&e.record, now)?;
            }
            let job = name.to_string();
            let placement = *placement;
            self.emit(now, Event::Planned { job, placement })?;
        }
        let kind = IntentKind::Launch { offers, count };
        self.start_intent(name, kind, now).await
    }

    async fn replace_nodes(
        &mut self,
        name: &str,
        offers: Vec<Offer>,
        missing: u32,
        on_demand: bool,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let count = missing;
        let Some(offers) = self.admitted(name, offers, count, now)? else {
            return Ok(());
        };
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
        self.start_intent(name, IntentKind::Launch { offers, count }, now)
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
            aim(&mut e.record, Aim::Anew);
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
        let Some(to) = self.admitted(name, to, k, now)? else {
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
        self.start_intent(name, IntentKind::Migrate { from, to, count: k }, now)
            .await
    }
}

impl Controller {
    /// [`Decision::Unplaceable`].
    pub(super) fn mark_unplaceable(
        &mut self,
        name: &str,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let Some(e) = self.fleet.jobs.get_mut(name) else {
            return Ok(());
        };
        if e.record.state == JobState::Unplaceable && e.record.reason.as_deref() == Some(reason) {
            return Ok(());
        }
        e.record.state = JobState::Unplaceable;
        e.record.reason = Some(reason.to_string());
        self.store.update_job(&e.record, now)?;
        self.emit(
            now,
            Event::Unplaceable {
                job: name.to_string(),
                reason: reason.to_string(),
            },
        )
    }

    /// Report that a job waits, once per distinct reason (not at every pass).
    pub(super) fn wait(
        &mut self,
        name: &str,
        reason: WaitReason,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let Some(e) = self.fleet.jobs.get_mut(name) else {
            return Ok(());
        };
        if std::mem::take(&mut e.estimate_unsaved) {
            self.store.update_job(&e.record, now)?;
        }
        // The policy's reasons carry costs that move every pass: one event while it waits, the
        // text kept current.
        let key = match &reason {
            WaitReason::Policy { .. } => "policy".to_string(),
            r => r.to_string(),
        };
        if let Some(w) = e.waiting.as_mut().filter(|w| w.key == key) {
            w.reason = reason.to_string();
            return Ok(());
        }
        e.waiting = Some(super::events::Current {
            key,
            reason: reason.to_string(),
            since: now,
        });
        self.emit(
            now,
            Event::Waiting {
                job: name.to_string(),
                reason,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{Aim, aim};
    use crate::store::JobRecord;

    /// Every way a target changes, from one aiming at 4 nodes of `a` planned at 6.
    #[test]
    fn every_aim_is_a_row() {
        let at = |offer: &str, count| Aim::At {
            offer: offer.into(),
            count,
        };
        let rows: [(Aim, Option<&str>, u32, u32); 4] = [
            (at("b", 2), Some("b"), 2, 2),
            (Aim::Size(3), Some("a"), 3, 6),
            (Aim::Hold, None, 4, 6),
            (Aim::Anew, None, 0, 6),
        ];
        let t0 = chrono::DateTime::UNIX_EPOCH;
        for (a, offer, count, planned) in rows {
            let mut r = JobRecord::new(tern_cloud::testkit::spec("j").build(), t0);
            (r.target_offer, r.target_count, r.planned_count) = (Some("a".into()), 4, 6);
            aim(&mut r, a.clone());
            let got = (r.target_offer.as_deref(), r.target_count, r.planned_count);
            assert_eq!(got, (offer, count, planned), "{a:?}");
        }
    }
}
