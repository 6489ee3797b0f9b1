//! The fleet's live instances, by id and by job. A pass asks "which instances does this job
//! hold" for every job; a scan of the whole fleet per job grew with jobs × instances
//! (10,000 × 100,000), so the job index is kept as instances come and go.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Deref;

use tern_cloud::{Capacity, InstanceId, InstanceState, Offer};

use crate::store::InstanceRecord;

/// Maps keyed by the cloud's ids, with a fast hasher: every pass looks up each listed
/// instance, and SipHash (the std default, built against hash flooding) was a tenth of a pass
/// at 100,000 instances. The ids come from the cloud, not from users.
pub(super) type IdMap<V> = HashMap<InstanceId, V, foldhash::fast::RandomState>;
pub(super) type IdSet<'a> = HashSet<&'a InstanceId, foldhash::fast::RandomState>;
/// Maps keyed by job names or offer keys, looked up for every job on every pass; the names
/// come from the store, which took them from admitted specs.
type NameMap<V> = HashMap<String, V, foldhash::fast::RandomState>;

#[derive(Debug, Default)]
pub(super) struct Instances {
    by_id: IdMap<InstanceRecord>,
    /// Job → its instances' ids, in id order. An instance's job never changes.
    by_job: NameMap<BTreeSet<InstanceId>>,
    /// Job → $/h of its instances at their launch prices.
    hourly: NameMap<f64>,
    /// Offers by key, numbered on first sight, with the VMs on each now: quotas and the spend
    /// are counted per offer, so a pass reads tens of offers, not 100,000 instance records.
    pools: NameMap<usize>,
    pool_offers: Vec<Offer>,
    pool_counts: Vec<u32>,
    /// Of those, the live (queued, pending, running) spot VMs: what a spot pool holds of ours.
    pool_live_spot: Vec<u32>,
    /// The draining instances, in id order: few, and asked for on every pass.
    draining: BTreeSet<InstanceId>,
    /// Job → (offer number → VMs).
    job_pools: NameMap<Vec<(usize, u32)>>,
    /// Instances inserted since [`Instances::take_fresh`]: the spend counts them from their
    /// launch, not from the last pass.
    fresh: Vec<Fresh>,
    /// Job → the region of its newest instance, kept after that instance ends: where the job
    /// last ran, so where its last checkpoint was written, as far as this controller saw.
    last_region: NameMap<tern_cloud::Region>,
}

/// An instance inserted since the spend was last kept.
#[derive(Debug, Clone)]
pub(super) struct Fresh {
    pub job: String,
    pub pool: usize,
    pub launched: chrono::DateTime<chrono::Utc>,
    id: InstanceId,
}

/// One VM more (`up`) or fewer on offer number `pool` in a job's list; an offer with none
/// leaves the list.
fn bump(pools: &mut Vec<(usize, u32)>, pool: usize, up: bool) {
    match pools.iter().position(|(p, _)| *p == pool) {
        Some(k) if up => pools[k].1 += 1,
        Some(k) => {
            pools[k].1 = pools[k].1.saturating_sub(1);
            if pools[k].1 == 0 {
                pools.swap_remove(k);
            }
        }
        None if up => pools.push((pool, 1)),
        None => {}
    }
}

/// The counts an instance's state and draining mark feed, borrowed apart from the records.
struct StateCounts<'a> {
    pool: Option<usize>,
    live_spot: &'a mut [u32],
    draining: &'a mut BTreeSet<InstanceId>,
}

impl StateCounts<'_> {
    fn count(&mut self, r: &InstanceRecord, up: bool) {
        let live = matches!(
            r.state,
            InstanceState::Queued | InstanceState::Pending | InstanceState::Running
        );
        if let Some(pool) = self.pool
            && live
            && r.offer.capacity == Capacity::Spot
        {
            let n = &mut self.live_spot[pool];
            *n = if up { *n + 1 } else { n.saturating_sub(1) };
        }
        if r.draining && up {
            self.draining.insert(r.id.clone());
        } else if r.draining {
            self.draining.remove(&r.id);
        }
    }
}

/// Reads go straight to the map; writes go through [`Instances`], which keeps the index.
impl Deref for Instances {
    type Target = IdMap<InstanceRecord>;

    fn deref(&self) -> &Self::Target {
        &self.by_id
    }
}

impl FromIterator<InstanceRecord> for Instances {
    fn from_iter<I: IntoIterator<Item = InstanceRecord>>(records: I) -> Instances {
        let mut out = Instances::default();
        for r in records {
            out.insert(r);
        }
        out
    }
}

impl Instances {
    /// The region of job `job`'s newest instance, live or ended ([`Instances::insert`]).
    pub(super) fn last_region(&self, job: &str) -> Option<&tern_cloud::Region> {
        self.last_region.get(job)
    }

    pub(super) fn insert(&mut self, record: InstanceRecord) -> Option<InstanceRecord> {
        let old = self.remove(&record.id);
        self.by_job
            .entry(record.job.clone())
            .or_default()
            .insert(record.id.clone());
        *self.hourly.entry(record.job.clone()).or_default() += record.offer.price_per_hour;
        let pool = self.pool_of(&record.offer);
        self.pool_counts[pool] += 1;
        self.count_state(pool, &record, true);
        bump(
            self.job_pools.entry(record.job.clone()).or_default(),
            pool,
            true,
        );
        self.last_region
            .insert(record.job.clone(), record.offer.region.clone());
        self.fresh.push(Fresh {
            job: record.job.clone(),
            pool,
            launched: record.launched_at,
            id: record.id.clone(),
        });
        self.by_id.insert(record.id.clone(), record);
        old
    }

    pub(super) fn remove(&mut self, id: &InstanceId) -> Option<InstanceRecord> {
        let record = self.by_id.remove(id)?;
        if let Some(ids) = self.by_job.get_mut(&record.job) {
            ids.remove(id);
            if ids.is_empty() {
                self.by_job.remove(&record.job);
                self.hourly.remove(&record.job);
            } else if let Some(h) = self.hourly.get_mut(&record.job) {
                *h -= record.offer.price_per_hour;
            }
        }
        let pool = self.pool_of(&record.offer);
        self.pool_counts[pool] = self.pool_counts[pool].saturating_sub(1);
        self.count_state(pool, &record, false);
        if let Some(pools) = self.job_pools.get_mut(&record.job) {
            bump(pools, pool, false);
            if pools.is_empty() {
                self.job_pools.remove(&record.job);
            }
        }
        self.fresh.retain(|f| f.id != *id);
        Some(record)
    }

    /// Set an instance's state and draining mark (its id, job and offer stay as they are),
    /// keeping the counts that depend on them. Whether it is known.
    pub(super) fn set(&mut self, id: &InstanceId, state: InstanceState, draining: bool) -> bool {
        let Instances {
            by_id,
            pools,
            pool_live_spot,
            draining: drained,
            ..
        } = self;
        let Some(r) = by_id.get_mut(id) else {
            return false;
        };
        if (r.state, r.draining) != (state, draining) {
            // Inserted with its offer, so its offer has a number.
            let pool = pools.get(&r.offer.key()).copied();
            let mut counts = StateCounts {
                pool,
                live_spot: pool_live_spot,
                draining: drained,
            };
            counts.count(r, false);
            (r.state, r.draining) = (state, draining);
            counts.count(r, true);
        }
        true
    }

    /// Add (`up`) or take away what `r`'s state and draining mark count for.
    fn count_state(&mut self, pool: usize, r: &InstanceRecord, up: bool) {
        StateCounts {
            pool: Some(pool),
            live_spot: &mut self.pool_live_spot,
            draining: &mut self.draining,
        }
        .count(r, up);
    }

    /// The draining instances, in id order.
    pub(super) fn draining(&self) -> impl Iterator<Item = &InstanceRecord> {
        self.draining.iter().filter_map(|id| self.by_id.get(id))
    }

    /// The offers live spot VMs are held on now, each with how many.
    pub(super) fn live_spot(&self) -> impl Iterator<Item = (&Offer, u32)> {
        self.pool_offers
            .iter()
            .zip(&self.pool_live_spot)
            .filter(|(_, n)| **n > 0)
            .map(|(o, n)| (o, *n))
    }

    /// How many instances `job` holds, draining or not.
    pub(super) fn count_of(&self, job: &str) -> usize {
        self.by_job.get(job).map_or(0, BTreeSet::len)
    }

    /// The offers VMs are held on now, each with how many.
    pub(super) fn held(&self) -> impl Iterator<Item = (&Offer, u32)> {
        self.pool_offers
            .iter()
            .zip(&self.pool_counts)
            .filter(|(_, n)| **n > 0)
            .map(|(o, n)| (o, *n))
    }

    /// What the VMs held now use of something counted per VM (`units` of one VM of an offer).
    pub(super) fn units_held(&self, units: impl Fn(&Offer) -> u32) -> u32 {
        self.held().map(|(o, n)| units(o) * n).sum()
    }

    /// The number of `offer`'s key, given on first sight.
    fn pool_of(&mut self, offer: &Offer) -> usize {
        let key = offer.key();
        if let Some(&n) = self.pools.get(&key) {
            return n;
        }
        self.pool_offers.push(offer.clone());
        self.pool_counts.push(0);
        self.pool_live_spot.push(0);
        self.pools.insert(key, self.pool_offers.len() - 1);
        self.pool_offers.len() - 1
    }

    /// Every offer an instance was ever on, by number.
    pub(super) fn pool_offers(&self) -> &[Offer] {
        &self.pool_offers
    }

    /// Each job holding instances, with its VMs per offer number.
    pub(super) fn job_pools(&self) -> impl Iterator<Item = (&str, &[(usize, u32)])> {
        self.job_pools.iter().map(|(j, p)| (j.as_str(), &p[..]))
    }

    /// The instances inserted since the last call.
    pub(super) fn take_fresh(&mut self) -> Vec<Fresh> {
        std::mem::take(&mut self.fresh)
    }

    /// $/h of `job`'s instances at their launch prices.
    pub(super) fn hourly_of(&self, job: &str) -> f64 {
        self.hourly.get(job).copied().unwrap_or(0.0).max(0.0)
    }

    /// The instances of `job`, draining or not, in id order.
    pub(super) fn of_job<'a>(&'a self, job: &str) -> impl Iterator<Item = &'a InstanceRecord> {
        self.by_job
            .get(job)
            .into_iter()
            .flatten()
            .filter_map(|id| self.by_id.get(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use tern_cloud::{Capacity, InstanceState, IntentId};

    fn record(id: &str, job: &str) -> InstanceRecord {
        let offer = tern_pricing::bundled()
            .expect("bundled catalog")
            .offers
            .into_iter()
            .find(|o| o.capacity == Capacity::Spot)
            .expect("a spot offer");
        InstanceRecord {
            id: InstanceId::new(id),
            job: job.into(),
            intent: IntentId::from_uuid(uuid::Uuid::nil()),
            offer: offer.into(),
            state: InstanceState::Running,
            draining: false,
            launched_at: Utc::now(),
            ended_at: None,
        }
    }

    #[test]
    fn the_job_index_follows_inserts_and_removes() {
        let mut all: Instances = [record("i-2", "a"), record("i-1", "a"), record("i-3", "b")]
            .into_iter()
            .collect();
        let ids = |all: &Instances, job: &str| -> Vec<String> {
            all.of_job(job).map(|i| i.id.to_string()).collect()
        };
        assert_eq!(ids(&all, "a"), ["i-1", "i-2"]);
        all.remove(&InstanceId::new("i-1"));
        assert_eq!(ids(&all, "a"), ["i-2"]);
        // Re-inserting an id under another job moves it.
        all.insert(record("i-2", "b"));
        assert_eq!(ids(&all, "a"), Vec::<String>::new());
        assert_eq!(ids(&all, "b"), ["i-2", "i-3"]);
        assert_eq!((all.count_of("a"), all.count_of("b")), (0, 2));
        assert_eq!(all.len(), 2);
        assert!(all.of_job("nobody").next().is_none());
    }

    #[test]
    fn live_spot_and_draining_follow_every_change() {
        let mut all: Instances = [record("i-1", "a"), record("i-2", "a"), record("i-3", "b")]
            .into_iter()
            .collect();
        let live = |all: &Instances| all.live_spot().map(|(_, n)| n).sum::<u32>();
        let draining =
            |all: &Instances| -> Vec<String> { all.draining().map(|i| i.id.to_string()).collect() };
        assert_eq!((live(&all), draining(&all)), (3, vec![]));
        let i2 = InstanceId::new("i-2");
        all.set(&i2, InstanceState::Running, true);
        all.set(&InstanceId::new("i-3"), InstanceState::Terminated, false);
        // A draining node still holds its room; an ended one does not.
        assert_eq!((live(&all), draining(&all)), (2, vec!["i-2".to_string()]));
        all.set(&i2, InstanceState::Running, false);
        assert_eq!((live(&all), draining(&all)), (2, vec![]));
        all.set(&i2, InstanceState::Pending, true);
        all.remove(&i2);
        assert_eq!((live(&all), draining(&all)), (1, vec![]));
        assert!(!all.set(&i2, InstanceState::Running, false));
        // The counts agree with a count over the records.
        let counted = all
            .values()
            .filter(|i| i.state == InstanceState::Running && i.offer.capacity == Capacity::Spot)
            .count();
        assert_eq!(live(&all) as usize, counted);
    }
}
