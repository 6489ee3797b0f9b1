//! A probe's start and end as decisions: [`ProbeStart`] (a first probe, or the next one moved
//! to from the first's checkpoint), [`ProbeEnd`] (its record closed, the plan made on what it
//! measured, kept or moved to), decided by the pure [`start`], [`end`] (over [`outcome`]) and
//! [`move_off`] from what the pass gathered, and carried out by `carry_out` through the
//! functions here.

use chrono::{DateTime, Utc};
use tern_cloud::{InstanceId, IntentKind, Offer};
use tern_plan::{Config, JobPlan};

use super::{Ended, ProbeBounds, probe_offer, spent};
use crate::controller::carry_out::{Aim, aim};
use crate::controller::decide::Decision;
use crate::controller::events::{Event, Placement, WaitReason};
use crate::controller::{Controller, Result, fallbacks};
use crate::store::{InstanceRecord, ProbeRecord};

/// A probe to start: `nodes` × the first of `offers` (the rest are its fallbacks), within
/// `bounds`. `from`: the job's nodes it moves from (a next probe, started from the first's
/// checkpoint, whose probing began at `since`); empty for a job that holds nothing.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::controller) struct ProbeStart {
    pub offers: Vec<Offer>,
    pub nodes: u32,
    pub bounds: ProbeBounds,
    pub why: String,
    pub from: Vec<InstanceId>,
    pub since: Option<DateTime<Utc>>,
}

/// A probe's end: the record closed with `outcome`, after the plan made on what it measured
/// (`planned`, its `plan` event) and the job's new aim when it keeps the probe's capacity
/// (`retarget`: offer key and nodes); then `then` (a move from the probe's capacity, or the
/// next probe).
#[derive(Debug, Clone, PartialEq)]
pub(in crate::controller) struct ProbeEnd {
    pub probe: ProbeRecord,
    pub why: Ended,
    pub outcome: String,
    pub planned: Option<Placement>,
    pub retarget: Option<(String, u32)>,
    pub then: Option<Decision>,
}

/// A first probe on `allowed` for a job of `accelerators` and `min_workers` (`gang`: no
/// fallbacks, its nodes stay together), or a wait when no offer can hold it.
pub(in crate::controller) fn start(
    allowed: &[Offer],
    (accelerators, min_workers, gang): (&[String], u32, bool),
    on_demand: bool,
    bounds: ProbeBounds,
    why: String,
) -> Decision {
    let Some((offer, nodes)) = probe_offer(allowed, accelerators, min_workers, on_demand) else {
        return Decision::Wait(WaitReason::NoCapacity);
    };
    Decision::Probe(Box::new(ProbeStart {
        offers: with_fallbacks(allowed, offer, gang),
        nodes,
        bounds,
        why,
        from: Vec::new(),
        since: None,
    }))
}

/// `offer` then, unless the job is a gang, the other offers of its shape and capacity.
pub(super) fn with_fallbacks(allowed: &[Offer], offer: Offer, gang: bool) -> Vec<Offer> {
    let rest: Vec<Offer> = if gang {
        Vec::new()
    } else {
        fallbacks(allowed, &offer).collect()
    };
    std::iter::once(offer).chain(rest).collect()
}

/// What a probe's end leads to, from the plan made on what it measured (`None`: no step was
/// measured), the job's live `fleet`, and `stay`: the net saving of moving when it is not
/// positive and the probe's capacity meets the deadline (asked only for a plan that leaves
/// it). The outcome its event reports, the job's new aim where it keeps the probe's capacity,
/// and the plan's choice where it moves.
pub(in crate::controller) fn outcome(
    plan: Option<&JobPlan>,
    fleet: &[InstanceRecord],
    unmeasured: bool,
    stay: Option<f64>,
) -> (String, Option<(String, u32)>, Option<Config>) {
    let (mut retarget, mut moving) = (None, None);
    let text = match plan.and_then(|jp| jp.choice.as_ref().filter(|_| jp.placed)) {
        None if unmeasured && fleet.is_empty() => {
            "no step was measured and its capacity is gone: the job is placed again".to_string()
        }
        None if unmeasured => {
            "no step was measured: the job keeps running on the probe's capacity".to_string()
        }
        None => format!(
            "no plan meets the job's constraints now ({}); it keeps the probe's capacity",
            plan.and_then(|jp| jp.reason.clone()).unwrap_or_default()
        ),
        Some(c) if keeps(fleet, c) => {
            retarget = Some((c.offer.clone(), c.nodes));
            format!(
                "the plan keeps {}× {} (expected ${:.2})",
                c.nodes, c.instance_type, c.expected_cost
            )
        }
        Some(c) if fleet.is_empty() => format!(
            "the plan wants {}× {} (expected ${:.2}); placed like any job",
            c.nodes, c.instance_type, c.expected_cost
        ),
        Some(c) if let Some(net) = stay => {
            let here = &fleet[0].offer;
            retarget = Some((here.key(), fleet.len() as u32));
            format!(
                "the plan wants {}× {} (expected ${:.2}), but moving saves nothing after \
                 the restart (net ${net:.2}): the job keeps {}× {} {} in {}",
                c.nodes,
                c.instance_type,
                c.expected_cost,
                fleet.len(),
                here.instance_type.name,
                here.capacity,
                here.zone
            )
        }
        Some(c) => {
            moving = Some(c.clone());
            format!(
                "moving to {}× {} {} (expected ${:.2}) from the probe's checkpoint",
                c.nodes, c.instance_type, c.capacity, c.expected_cost
            )
        }
    };
    // A plan made at the expected speed says so in its reason.
    let text = match plan.and_then(|jp| jp.reason.as_ref().filter(|_| jp.placed)) {
        Some(r) => format!("{text}; {r}"),
        None => text,
    };
    (text, retarget, moving)
}

/// What the pass gathered for a probe's end: the plan made on what it measured, the job's
/// live fleet, whether no step was measured, and the staying net (see [`outcome`]).
pub(in crate::controller) type Gathered<'a> =
    (Option<&'a JobPlan>, &'a [InstanceRecord], bool, Option<f64>);

/// The end of probe `p` (for `why`): [`outcome`] over what was gathered, the `plan` event's
/// placement, and, where the plan moves the job, what `move_off` makes of its choice.
pub(in crate::controller) fn end(
    (p, why): (ProbeRecord, Ended),
    gathered: Gathered<'_>,
    planned: Option<Placement>,
    move_off: impl FnOnce(&Config) -> Option<Decision>,
) -> Decision {
    let (plan, fleet, unmeasured, stay) = gathered;
    let (outcome, retarget, moving) = outcome(plan, fleet, unmeasured, stay);
    Decision::EndProbe(Box::new(ProbeEnd {
        probe: p,
        why,
        outcome,
        planned,
        retarget,
        then: moving.as_ref().and_then(move_off),
    }))
}

/// Move the whole probe `fleet` of `job` onto the plan's `choice`, whose offer is `to` (among
/// `allowed`; a gang gets no fallbacks): the new nodes come up, the job checkpoints, the
/// probe's nodes go. `work_h`: the work left at the choice's expected speed, for the move's
/// event (none without a fleet).
pub(in crate::controller) fn move_off(
    job: &str,
    fleet: &[InstanceRecord],
    (choice, to): (&Config, Offer),
    (allowed, gang): (&[Offer], bool),
    work_h: f64,
) -> Decision {
    let from_rate: f64 = fleet.iter().map(|i| i.offer.price_per_hour).sum();
    let migrating = fleet.first().map(|lead| {
        Box::new(Event::Migrating {
            job: job.to_string(),
            moved: fleet.len() as u32,
            of: fleet.len() as u32,
            from_capacity: lead.offer.capacity,
            from_price: lead.offer.price_per_hour,
            from_zone: lead.offer.zone.clone(),
            to_capacity: to.capacity,
            to_price: to.price_per_hour,
            to_zone: to.zone.clone(),
            net_saving: 0.0,
            work_h,
            budget: 1.0,
            policy: Some(format!(
                "the probe measured the job; the plan wants {}× {} instead of {:.2} $/h",
                choice.nodes, choice.instance_type, from_rate
            )),
        })
    });
    Decision::MoveFromProbe {
        from: fleet.iter().map(|i| i.id.clone()).collect(),
        to: with_fallbacks(allowed, to, gang),
        count: choice.nodes,
        migrating,
    }
}

/// Whether the plan's choice is the offer the job's probe fleet runs on.
pub(super) fn keeps(fleet: &[InstanceRecord], c: &Config) -> bool {
    fleet.first().is_some_and(|i| i.offer.key() == c.offer)
}

impl Controller {
    /// [`Decision::Probe`]: record the probe, report it, and start its capacity: a launch for
    /// a job that holds nothing (aimed at the probe), a migration from `from` for a next probe.
    pub(in crate::controller) async fn begin_probe(
        &mut self,
        name: &str,
        start: ProbeStart,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let ProbeStart {
            offers,
            nodes,
            bounds,
            why,
            from,
            since,
        } = start;
        let Some(offer) = offers.first().cloned() else {
            return Ok(());
        };
        let Some(offers) = self.admitted(name, offers, nodes, now)? else {
            return Ok(());
        };
        if from.is_empty()
            && let Some(e) = self.fleet.jobs.get_mut(name)
        {
            let offer = offer.key();
            aim(
                &mut e.record,
                Aim::At {
                    offer,
                    count: nodes,
                },
            );
            e.waiting = None;
            e.estimate_unsaved = false;
        }
        self.open_probe(name, &offer, (nodes, bounds), since, why, now)?;
        let kind = if from.is_empty() {
            IntentKind::Launch {
                offers,
                count: nodes,
            }
        } else {
            IntentKind::Migrate {
                from,
                to: offers,
                count: nodes,
            }
        };
        self.start_intent(name, kind, now).await
    }

    /// Record a probe of `nodes` × `offer` on the job (written with the job's other changes)
    /// and report it. `since`: when the job's probing began, for a next probe.
    fn open_probe(
        &mut self,
        name: &str,
        offer: &Offer,
        (nodes, bounds): (u32, ProbeBounds),
        since: Option<DateTime<Utc>>,
        why: String,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let probe = ProbeRecord {
            accelerator: offer
                .accelerator()
                .map(|a| a.name.clone())
                .unwrap_or_default(),
            instance_type: offer.instance_type.name.clone(),
            offer: offer.key(),
            nodes,
            price_per_hour: offer.price_per_hour,
            max_seconds: bounds.max_seconds,
            max_usd: bounds.max_usd,
            started_at: now,
            running_at: None,
            probing_since: since,
            ended_at: None,
            outcome: None,
        };
        if let Some(e) = self.fleet.jobs.get_mut(name) {
            e.record.probe = Some(probe);
            self.store.update_job(&e.record, now)?;
        }
        self.emit(
            now,
            Event::Probing {
                job: name.to_string(),
                nodes,
                instance_type: offer.instance_type.name.clone(),
                capacity: offer.capacity,
                zone: offer.zone.clone(),
                max_seconds: bounds.max_seconds,
                max_usd: bounds.max_usd,
                why,
            },
        )
    }

    /// [`Decision::EndProbe`]: the plan's event and estimate, the job's new aim, the probe's
    /// record closed and reported; what follows.
    pub(in crate::controller) fn finish_probe(
        &mut self,
        name: &str,
        end: ProbeEnd,
        now: DateTime<Utc>,
    ) -> Result<Option<Decision>> {
        if let Some(placement) = end.planned {
            // The plan made at the probe's end is the job's first real plan: its estimate is
            // the cost report's plan (the probe itself is billed apart), and its `plan` event
            // is what cost attribution measures the run against.
            self.remember_plan_estimate(name, placement.expected_cost);
            let job = name.to_string();
            self.emit(now, Event::Planned { job, placement })?;
        }
        if let Some((offer, nodes)) = end.retarget
            && let Some(e) = self.fleet.jobs.get_mut(name)
        {
            aim(
                &mut e.record,
                Aim::At {
                    offer,
                    count: nodes,
                },
            );
            self.store.update_job(&e.record, now)?;
        }
        self.close_probe(name, end.probe, end.why, end.outcome, now)?;
        // Acted on only once the probe's end is written: a crash in between leaves the job
        // running on the probe's capacity, planned again like any running job.
        Ok(end.then)
    }

    /// Write probe `p` ended at `now` with `outcome`, and report it.
    pub(in crate::controller) fn close_probe(
        &mut self,
        name: &str,
        mut p: ProbeRecord,
        why: Ended,
        outcome: String,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let (seconds, usd) = (p.seconds(now), spent(&p, now));
        p.ended_at = Some(now);
        p.outcome = Some(outcome.clone());
        if let Some(e) = self.fleet.jobs.get_mut(name) {
            e.record.probe = Some(p);
            e.last_migrate_check = None;
            self.store.update_job(&e.record, now)?;
        }
        self.emit(
            now,
            Event::Probed {
                job: name.to_string(),
                why: why.as_str().to_string(),
                seconds,
                usd,
                outcome,
            },
        )
    }

    /// [`Decision::MoveFromProbe`]: the move's event, then its migration intent.
    pub(in crate::controller) async fn move_from_probe(
        &mut self,
        name: &str,
        (from, to, count): (Vec<InstanceId>, Vec<Offer>, u32),
        migrating: Option<Box<Event>>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let Some(to) = self.admitted(name, to, count, now)? else {
            return Ok(());
        };
        if let Some(event) = migrating {
            self.emit(now, *event)?;
        }
        self.start_intent(name, IntentKind::Migrate { from, to, count }, now)
            .await
    }
}
