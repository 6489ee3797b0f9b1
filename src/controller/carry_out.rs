//! Carrying out decisions. The phases gather a view and ask [`super::decide`]; what it answers
//! is done here and only here, in one order: an intent written to the store, the cloud called
//! through it ([`Controller::act`]), the store brought up to date, then the event.

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
            } => {
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
                let kind = IntentKind::Launch {
                    offers,
                    count: missing,
                };
                self.act(name, kind, now).await.map(|()| None)
            }
            Decision::Regroup {
                zone,
                release,
                anew,
                then,
            } => {
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
                self.act(name, kind, now).await?;
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
            Decision::CancelQueued { id, offer } => {
                if self.terminating(&id) {
                    return Ok(None);
                }
                self.terminate_now(name, vec![id.clone()], now).await?;
                let job = name.to_string();
                self.emit(now, Event::QueueCancelled { job, id, offer })?;
                self.mark_dirty(name);
                Ok(None)
            }
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
