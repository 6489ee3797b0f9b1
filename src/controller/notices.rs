//! Phase 1: interruption notices. A spot notice (or maintenance) starts the job's drain
//! (checkpoint now) in this very pass and takes the node out of the job's fleet, so its
//! replacement is requested in the same pass; a preemption ends the instance.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use tern_cloud::{Interruption, InterruptionKind};

use super::events::Event;
use super::{Controller, Result};

/// Notices of one pass, grouped so one reclaimed pool is one line in the event log.
#[derive(Debug, Default)]
struct Noticed {
    /// (job, pool) → instance ids and seconds of lead time.
    draining: BTreeMap<(String, String), (Vec<String>, Option<i64>)>,
    /// job → instance ids already gone, and the samples done since its last checkpoint.
    lost: BTreeMap<String, (Vec<String>, f64)>,
}

impl Controller {
    pub(super) async fn take_notices(&mut self, now: DateTime<Utc>) -> Result<()> {
        let notices = match self.provider.interruptions().await {
            Ok(n) => n,
            Err(e) => {
                self.cloud_error(&e);
                return Ok(());
            }
        };
        let mut seen = Noticed::default();
        for n in notices {
            match n.kind {
                InterruptionKind::SpotNotice | InterruptionKind::Maintenance => {
                    self.drain_node(&n, now, &mut seen)?;
                }
                InterruptionKind::Preempted => self.lose_node(&n, now, &mut seen)?,
                InterruptionKind::Rebalance => {}
            }
        }
        for ((job, pool), (ids, lead_s)) in seen.draining {
            self.emit(
                now,
                Event::Notice {
                    job,
                    pool,
                    ids,
                    lead_s,
                },
            )?;
        }
        for (job, (ids, lost_samples)) in seen.lost {
            self.emit(
                now,
                Event::Preempted {
                    job,
                    ids,
                    lost_samples,
                },
            )?;
        }
        Ok(())
    }

    /// The node will be reclaimed: drain it, ask its job to checkpoint, avoid its pool.
    fn drain_node(
        &mut self,
        n: &Interruption,
        now: DateTime<Utc>,
        seen: &mut Noticed,
    ) -> Result<()> {
        let Some(inst) = self.fleet.instances.get(&n.instance) else {
            return Ok(());
        };
        if inst.draining {
            return Ok(());
        }
        let job = inst.job.clone();
        let pool = inst.offer.key();
        let shown = format!("{} {}", inst.offer.capacity, inst.offer.zone);
        self.set_instance(&n.instance, inst.state, true)?;
        // A notice means the pool is being drained: a strike, like a capacity error.
        self.avoid(pool, now);
        let entry = seen.draining.entry((job.clone(), shown)).or_default();
        entry.0.push(n.instance.to_string());
        entry.1 = n.deadline.map(|d| (d - now).num_seconds().max(0));
        if let Some(e) = self.fleet.jobs.get_mut(&job) {
            e.record.drain_requested = true;
            e.dirty = true;
            self.store.set_drain(&job, true, now)?;
        }
        Ok(())
    }

    /// The node is gone already: end it; its job is reconciled in this pass.
    fn lose_node(
        &mut self,
        n: &Interruption,
        now: DateTime<Utc>,
        seen: &mut Noticed,
    ) -> Result<()> {
        let Some(inst) = self.fleet.instances.remove(&n.instance) else {
            return Ok(());
        };
        self.store
            .end_instance(&inst.id, n.deadline.unwrap_or(now).min(now))?;
        let entry = seen.lost.entry(inst.job.clone()).or_default();
        if let Some(e) = self.fleet.jobs.get_mut(&inst.job) {
            e.dirty = true;
            // The whole job resumes from its checkpoint, once however many nodes went.
            entry.1 = (e.record.done_samples - e.record.checkpoint_samples).max(0.0);
        }
        entry.0.push(inst.id.to_string());
        Ok(())
    }
}
