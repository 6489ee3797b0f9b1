//! How time passes on the simulated cloud: instances boot, spot pools that shrink notice
//! their newest instances, and noticed instances are reclaimed when their time comes.

use chrono::{DateTime, TimeDelta, Utc};
use tern_cloud::{Capacity, InstanceState, Interruption, InterruptionKind};

use super::{SimCloud, SimInstance, World};

/// The earlier of `a` and `t`.
pub(super) fn earliest(a: Option<DateTime<Utc>>, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    Some(a.map_or(t, |a| a.min(t)))
}

impl SimCloud {
    /// Send a notice now, late (at `late_at`), or never, as the fault schedule draws.
    fn deliver(&self, w: &mut World, notice: Interruption, late_at: DateTime<Utc>) {
        let f = &self.config.faults;
        let roll = Self::draw(w);
        let lost = roll < f.lost_notices;
        let late = !lost && roll < f.lost_notices + f.late_notices;
        if let Some(i) = w.instances.get_mut(&notice.instance) {
            i.quiet = lost;
            i.notice_seen = match (lost, late) {
                (true, _) => None,
                (false, true) => Some(late_at),
                (false, false) => Some(notice.received_at),
            };
        }
        if late {
            w.delayed.push((late_at, notice));
        } else if !lost {
            w.pending.push(notice);
        }
    }

    /// Boot finished instances, send notices for capacity about to vanish, reclaim on time.
    pub(super) fn reconcile(&self, w: &mut World) {
        let now = w.now;
        Self::boot(w);
        let mut notices = Vec::new();
        for zone in 0..self.zones.len() {
            self.notice_zone(w, zone, &mut notices);
        }
        for (notice, late_at) in notices {
            self.deliver(w, notice, late_at);
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut w.delayed)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        w.delayed = later;
        w.pending.extend(due.into_iter().map(|(_, n)| n));
        Self::reclaim(w);
    }

    /// Pending instances whose boot time has come run.
    fn boot(w: &mut World) {
        let now = w.now;
        if w.next_ready.is_none_or(|t| t > now) {
            return;
        }
        let mut next = None;
        for i in w.instances.values_mut() {
            if i.instance.state == InstanceState::Pending {
                if i.ready_at <= now {
                    i.instance.state = InstanceState::Running;
                } else {
                    next = earliest(next, i.ready_at);
                }
            }
        }
        w.next_ready = next;
    }

    /// Notices for the spot instances of `zone` its trace will not hold over the notice lead
    /// (newest first), each with when it may arrive late.
    fn notice_zone(
        &self,
        w: &mut World,
        zone: usize,
        notices: &mut Vec<(Interruption, DateTime<Utc>)>,
    ) {
        let now = w.now;
        let lead = TimeDelta::seconds(self.zones[zone].notice_seconds().into());
        // Capacity over the next `lead`: the smallest count any tick in it shows.
        let (from, to) = (self.tick_of(zone, now), self.tick_of(zone, now + lead));
        let Some((tick, low)) = (from..=to)
            .map(|t| (t, self.zones[zone].available[t]))
            .min_by_key(|&(t, n)| (n, t))
        else {
            return;
        };
        // Room for every live spot instance: nothing to notice, without a walk.
        if Self::spot_in_use(w, zone) <= low {
            return;
        }
        let mut doomed: Vec<&mut SimInstance> = w
            .instances
            .values_mut()
            .filter(|i| {
                i.zone == zone
                    && i.instance.offer.capacity == Capacity::Spot
                    && i.instance.state != InstanceState::Terminated
            })
            .collect();
        let keep = low as usize;
        let noticed = doomed.iter().filter(|i| i.reclaim_at.is_some()).count();
        if doomed.len() > keep + noticed {
            let gone_at = self.tick_start(zone, tick).max(now);
            // Newest first: the cloud reclaims what it gave last.
            doomed.sort_by_key(|i| {
                std::cmp::Reverse((i.instance.launched_at, i.instance.id.clone()))
            });
            let extra = doomed.len() - keep - noticed;
            for i in doomed
                .iter_mut()
                .filter(|i| i.reclaim_at.is_none())
                .take(extra)
            {
                i.reclaim_at = Some(gone_at);
                w.next_reclaim = earliest(w.next_reclaim, gone_at);
                notices.push((
                    Interruption {
                        instance: i.instance.id.clone(),
                        kind: InterruptionKind::SpotNotice,
                        deadline: Some(gone_at),
                        received_at: (gone_at - lead).max(i.instance.launched_at),
                    },
                    gone_at - lead / 4,
                ));
            }
        }
    }

    /// Spot instances whose reclaim time has come end, with a preemption event unless quiet.
    fn reclaim(w: &mut World) {
        let now = w.now;
        if w.next_reclaim.is_none_or(|t| t > now) {
            return;
        }
        let mut preempted = Vec::new();
        let mut ended = Vec::new();
        let mut next = None;
        for i in w.instances.values_mut() {
            if i.instance.state == InstanceState::Terminated {
                continue;
            }
            if let Some(t) = i.reclaim_at.filter(|t| *t > now) {
                next = earliest(next, t);
            }
            if i.reclaim_at.is_some_and(|t| t <= now) {
                i.instance.state = InstanceState::Terminated;
                ended.push((i.zone, i.instance.offer.capacity));
                if i.quiet {
                    continue;
                }
                preempted.push(Interruption {
                    instance: i.instance.id.clone(),
                    kind: InterruptionKind::Preempted,
                    deadline: i.reclaim_at,
                    received_at: now,
                });
            }
        }
        w.next_reclaim = next;
        for (zone, capacity) in ended {
            w.ended(zone, capacity);
        }
        w.pending.extend(preempted);
    }
}
