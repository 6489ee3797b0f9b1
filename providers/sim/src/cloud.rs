//! [`SimCloud`]: a [`Provider`] on a virtual clock, driven by real spot traces.
//!
//! Each trace is one zone. Spot capacity in a zone at a moment is the trace's count at that tick
//! minus the spot instances already running there; on-demand is unlimited (up to the quota).
//! When the trace says capacity shrinks below what runs, the newest spot instances get a
//! [`InterruptionKind::SpotNotice`] the cloud's lead time before (AWS 120 s, GCP 30 s) and are
//! gone at the tick itself. Faults come from a seeded schedule, so a failing run replays exactly.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use tern_cloud::{
    Accelerator, Availability, Capacity, Cloud, CloudQuota, IdempotencyKey, Instance, InstanceId,
    InstanceState, InstanceType, Interruption, LaunchOutcome, LaunchRequest, Offer, PriceComponent,
    PriceSteps, Provider, ProviderError, Region, Zone, tag,
};

use crate::Trace;

#[path = "quota.rs"]
mod quota;
pub use quota::SimQuota;
#[path = "egress.rs"]
mod egress;

#[path = "clock.rs"]
mod clock;
pub use egress::Transfer;

/// Which faults to inject and how often. Rates are per call (throttle, transient) or per offer
/// tried (capacity, quota); `scripted` forces an error on the n-th call (0-based), whatever the
/// rates say. The same seed gives the same faults on the same call sequence.
#[derive(Debug, Clone, Default)]
pub struct FaultSchedule {
    pub seed: u64,
    pub throttle: f64,
    pub transient: f64,
    /// Extra capacity errors on top of what the traces say (e.g. a pool exhausted briefly).
    pub capacity: f64,
    pub quota: f64,
    pub scripted: BTreeMap<u64, ProviderError>,
    /// Fraction of reclaims that come with no notice and no preemption event: the instance
    /// just vanishes from listings (a lost EventBridge message, a missed metadata poll).
    pub lost_notices: f64,
    /// Fraction of notices delivered late, a quarter of their lead time before the reclaim.
    pub late_notices: f64,
}

/// How the simulated cloud is set up.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Virtual time of tick 0 of every trace.
    pub start: DateTime<Utc>,
    pub instance_type: InstanceType,
    pub on_demand_price: f64,
    /// Spot $/h when a trace has no price series or `price_info`.
    pub spot_price: f64,
    /// Time from launch to `Running`.
    pub boot: Duration,
    /// Most instances (all zones, both capacities) alive at once; `None`: unlimited.
    pub quota: Option<u32>,
    pub faults: FaultSchedule,
    /// What a checkpoint crossing regions costs, USD per GB ([`SimCloud::transfer`]).
    pub egress_per_gb: f64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            start: DateTime::UNIX_EPOCH,
            instance_type: InstanceType {
                name: "p3.2xlarge".into(),
                vcpus: 8.0,
                memory_gib: 61.0,
                accelerator: Some(Accelerator::new("V100", 1)),
            },
            on_demand_price: crate::trace::DEFAULT_ON_DEMAND,
            spot_price: crate::trace::DEFAULT_ON_DEMAND * crate::trace::DEFAULT_SPOT_FRACTION,
            boot: Duration::from_secs(60),
            quota: None,
            faults: FaultSchedule::default(),
            egress_per_gb: tern_cloud::EGRESS_DOLLARS_PER_GB,
        }
    }
}

/// One recorded provider call, readable with [`SimCloud::calls`].
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub at: DateTime<Utc>,
    /// `offers`, `launch`, `terminate`, `get`, `list`, `interruptions` or `quotas`.
    pub op: &'static str,
    /// The argument that identifies the call (region, idempotency key, instance id, owner).
    pub target: String,
    /// `ok`, or the error kind ([`ProviderError::kind`]).
    pub result: &'static str,
}

#[derive(Debug)]
struct SimInstance {
    instance: Instance,
    zone: usize,
    /// Its owner tag, by number in [`World::owners`]: `list` compares numbers, not strings.
    owner: Option<usize>,
    ready_at: DateTime<Utc>,
    /// When a notice said it will be reclaimed.
    reclaim_at: Option<DateTime<Utc>>,
    /// Its notice was lost: its reclaim sends no interruption either.
    quiet: bool,
    /// When the instance's own metadata shows the notice (what its agent polls): when the
    /// notice is delivered, late or not; never when it is lost.
    notice_seen: Option<DateTime<Utc>>,
}

/// A reclaim notice as the agent on the instance sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentNotice {
    pub seen_at: DateTime<Utc>,
    pub reclaim_at: DateTime<Utc>,
}

#[derive(Debug)]
struct World {
    now: DateTime<Utc>,
    instances: BTreeMap<InstanceId, SimInstance>,
    launches: HashMap<IdempotencyKey, Vec<InstanceId>>,
    pending: Vec<Interruption>,
    /// Late notices, with when they are delivered.
    delayed: Vec<(DateTime<Utc>, Interruption)>,
    calls: Vec<Call>,
    rng: u64,
    next_id: u64,
    /// Instances not terminated, in all and on spot per zone: kept as instances start and end,
    /// so a launch does not count 100,000 instances to learn what room is left.
    alive: u32,
    spot_alive: Vec<u32>,
    /// No pending instance is ready, and no noticed one reclaimed, before these (`None`: none
    /// waits). They may be early, never late: a pass over the instances that finds nothing due
    /// sets them again, so the clock's many small steps do not each walk 100,000 instances.
    next_ready: Option<DateTime<Utc>>,
    next_reclaim: Option<DateTime<Utc>>,
    /// Every owner tag launched with, numbered on first sight (a handful).
    owners: Vec<String>,
}

impl World {
    /// The number of owner tag `owner`, if any instance was launched with it.
    fn owner_of(&self, owner: &str) -> Option<usize> {
        self.owners.iter().position(|o| o == owner)
    }

    /// The number of owner tag `owner`, given on first sight.
    fn owner_number(&mut self, owner: &str) -> usize {
        if let Some(n) = self.owner_of(owner) {
            return n;
        }
        self.owners.push(owner.to_owned());
        self.owners.len() - 1
    }
}

impl World {
    /// Account for an instance leaving every state but `Terminated`.
    fn ended(&mut self, zone: usize, capacity: Capacity) {
        self.alive -= 1;
        if capacity == Capacity::Spot {
            self.spot_alive[zone] -= 1;
        }
    }
}

/// The simulated cloud. Cheap to share (`Arc<SimCloud>`); every method takes `&self`.
#[derive(Debug)]
pub struct SimCloud {
    /// Spot pools: a zone's availability trace, each with the instance type it sells
    /// (`types[i]`; one zone may hold several pools of different types).
    zones: Vec<Trace>,
    types: Vec<InstanceType>,
    config: SimConfig,
    /// Accelerator quotas enforced on launch ([`SimCloud::with_quota`]).
    quotas: Vec<SimQuota>,
    world: Mutex<World>,
    /// Checkpoints billed for crossing regions ([`egress`]).
    transfers: Mutex<Vec<Transfer>>,
}

impl SimCloud {
    /// One pool per trace, all of `config.instance_type`.
    pub fn new(zones: Vec<Trace>, config: SimConfig) -> SimCloud {
        let types = vec![config.instance_type.clone(); zones.len()];
        SimCloud::with_types(zones, types, config)
    }

    /// One pool per trace, trace `i` selling `types[i]` (missing entries: `config`'s type).
    pub fn with_types(
        zones: Vec<Trace>,
        mut types: Vec<InstanceType>,
        config: SimConfig,
    ) -> SimCloud {
        types.resize(zones.len(), config.instance_type.clone());
        let world = World {
            now: config.start,
            instances: BTreeMap::new(),
            launches: HashMap::new(),
            pending: Vec::new(),
            delayed: Vec::new(),
            calls: Vec::new(),
            rng: config.faults.seed ^ 0x9e37_79b9_7f4a_7c15,
            next_id: 0,
            alive: 0,
            spot_alive: vec![0; zones.len()],
            next_ready: None,
            next_reclaim: None,
            owners: Vec::new(),
        };
        SimCloud {
            zones,
            types,
            config,
            quotas: Vec::new(),
            world: Mutex::new(world),
            transfers: Mutex::default(),
        }
    }

    fn egress(&self) -> MutexGuard<'_, Vec<Transfer>> {
        self.transfers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn world(&self) -> MutexGuard<'_, World> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.world().now
    }

    pub fn elapsed(&self) -> Duration {
        (self.now() - self.config.start)
            .to_std()
            .unwrap_or_default()
    }

    /// Move the virtual clock forward, delivering notices and preemptions on the way.
    pub fn advance(&self, dt: Duration) {
        let mut w = self.world();
        let end = w.now + TimeDelta::from_std(dt).unwrap_or(TimeDelta::MAX);
        let step = self
            .zones
            .iter()
            .map(|z| i64::from(z.gap_seconds).min(z.notice_seconds().into()))
            .min()
            .unwrap_or(60)
            .max(1);
        while w.now < end {
            let next = (w.now + TimeDelta::seconds(step)).min(end);
            w.now = next;
            self.reconcile(&mut w);
        }
        self.reconcile(&mut w);
    }

    /// The reclaim notice instance `id`'s metadata shows by now, if any: the agent on it sees
    /// this on its own, whenever the controller's next pass comes.
    pub fn agent_notice(&self, id: &InstanceId) -> Option<AgentNotice> {
        let w = self.world();
        let i = w.instances.get(id)?;
        let seen_at = i.notice_seen.filter(|t| *t <= w.now)?;
        Some(AgentNotice {
            seen_at,
            reclaim_at: i.reclaim_at?,
        })
    }

    /// Every instance, ended ones too, as the machines themselves are: what the hosts of
    /// `tern controller --local-agents` follow. Not an API call: never faulted, never recorded.
    pub fn machines(&self) -> Vec<Instance> {
        self.world()
            .instances
            .values()
            .map(|i| i.instance.clone())
            .collect()
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.world().calls.clone()
    }

    fn tick_of(&self, zone: usize, at: DateTime<Utc>) -> usize {
        let z = &self.zones[zone];
        let secs = (at - self.config.start).num_seconds().max(0) as u64;
        let tick = (secs / u64::from(z.gap_seconds)) as usize;
        tick.min(z.ticks().saturating_sub(1))
    }

    fn tick_start(&self, zone: usize, tick: usize) -> DateTime<Utc> {
        let gap = i64::from(self.zones[zone].gap_seconds);
        self.config.start + TimeDelta::seconds(gap * tick as i64)
    }

    fn available(&self, zone: usize, at: DateTime<Utc>) -> u32 {
        self.zones[zone].available[self.tick_of(zone, at)]
    }

    fn spot_price(&self, zone: usize, at: DateTime<Utc>) -> f64 {
        let z = &self.zones[zone];
        match &z.prices {
            Some(p) => p[self.tick_of(zone, at)],
            None => z.spot_price.unwrap_or(self.config.spot_price),
        }
    }

    /// The price of `offer`'s pool over the whole trace, as steps (each change at the start of
    /// its tick): what the simulated cloud's ledger bills running instances at. On-demand
    /// prices do not move, so their steps are empty (the launch price holds).
    pub fn price_steps(&self, offer: &Offer) -> PriceSteps {
        let Some(zone) = self
            .zone_of(offer)
            .filter(|_| offer.capacity == Capacity::Spot)
        else {
            return PriceSteps::default();
        };
        let Some(prices) = &self.zones[zone].prices else {
            return PriceSteps::default();
        };
        let mut points = Vec::new();
        let mut last = None;
        for (tick, p) in prices.iter().enumerate() {
            if last != Some(*p) {
                points.push((self.tick_start(zone, tick), *p));
                last = Some(*p);
            }
        }
        PriceSteps::new(points)
    }

    fn offer(&self, zone: usize, capacity: Capacity, at: DateTime<Utc>, used: u32) -> Offer {
        let z = &self.zones[zone];
        let price = match capacity {
            Capacity::Spot => self.spot_price(zone, at),
            _ => z.on_demand_price.unwrap_or(self.config.on_demand_price),
        };
        let availability = match capacity {
            Capacity::Spot => match self.available(zone, at).saturating_sub(used) {
                0 => Availability::Unavailable,
                n => Availability::Available(Some(n)),
            },
            _ => Availability::Available(None),
        };
        Offer {
            cloud: Cloud::Sim,
            region: Region::new(z.region.clone()),
            zone: Zone::new(z.zone.clone()),
            instance_type: self.types[zone].clone(),
            capacity,
            price_per_hour: price,
            observed_at: Some(at),
            breakdown: vec![PriceComponent {
                label: self.types[zone].name.clone(),
                price_per_hour: price,
            }],
            availability,
        }
    }

    fn spot_in_use(w: &World, zone: usize) -> u32 {
        #[cfg(test)]
        assert_eq!(
            w.spot_alive[zone] as usize,
            w.instances
                .values()
                .filter(|i| {
                    i.zone == zone
                        && i.instance.offer.capacity == Capacity::Spot
                        && i.instance.state != InstanceState::Terminated
                })
                .count(),
            "the spot count of zone {zone} drifted from the instances"
        );
        w.spot_alive[zone]
    }

    fn alive(w: &World) -> u32 {
        #[cfg(test)]
        assert_eq!(
            w.alive as usize,
            w.instances
                .values()
                .filter(|i| i.instance.state != InstanceState::Terminated)
                .count(),
            "the count of live instances drifted from the instances"
        );
        w.alive
    }

    /// Next number from the seeded generator (splitmix64), as a fraction in [0, 1).
    fn draw(w: &mut World) -> f64 {
        w.rng = w.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = w.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Record the call, and fail it if the schedule says so.
    fn enter(&self, w: &mut World, op: &'static str, target: String) -> Result<(), ProviderError> {
        let n = w.calls.len() as u64;
        let f = &self.config.faults;
        let err = if let Some(e) = f.scripted.get(&n) {
            Some(e.clone())
        } else if Self::draw(w) < f.throttle {
            Some(ProviderError::Throttled {
                retry_after: Some(Duration::from_secs(1)),
            })
        } else if Self::draw(w) < f.transient {
            Some(ProviderError::Transient {
                message: "simulated 503 Service Unavailable".into(),
            })
        } else {
            None
        };
        w.calls.push(Call {
            at: w.now,
            op,
            target,
            result: err.as_ref().map_or("ok", ProviderError::kind),
        });
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The pool that sells `offer`: its zone and instance type.
    fn zone_of(&self, offer: &Offer) -> Option<usize> {
        self.zones
            .iter()
            .zip(&self.types)
            .position(|(z, t)| z.zone == offer.zone.as_str() && t.name == offer.instance_type.name)
    }

    fn capacity_code(&self, zone: usize) -> &'static str {
        match self.zones[zone].cloud {
            Cloud::Gcp => "ZONE_RESOURCE_POOL_EXHAUSTED",
            _ => "InsufficientInstanceCapacity",
        }
    }

    fn do_launch(
        &self,
        w: &mut World,
        req: &LaunchRequest,
    ) -> Result<LaunchOutcome, ProviderError> {
        if req.offers.is_empty() || req.count == 0 {
            return Err(ProviderError::InvalidRequest {
                message: "a launch needs at least one offer and a count > 0".into(),
            });
        }
        let mut out = LaunchOutcome::default();
        let mut ids = Vec::new();
        let mut left = req.count;
        for offer in &req.offers {
            if left == 0 {
                break;
            }
            let key = offer.key();
            let (zone, room) = match self.room(w, offer) {
                Ok(zr) => zr,
                Err(e) => {
                    out.errors.push((key, e));
                    continue;
                }
            };
            // A quota refuses what it cuts short, even when the rest fits.
            let (quota_room, quota) = self.quota_room(w, offer, left);
            let quota = quota.filter(|_| quota_room < room);
            let take = left.min(room).min(quota_room);
            if take == 0 || (req.single_zone && take < left) {
                let error = quota.unwrap_or_else(|| ProviderError::Capacity {
                    offer: key.clone(),
                    code: self.capacity_code(zone).into(),
                    message: format!("{} available, {left} asked", room.min(left)),
                });
                out.errors.push((key, error));
                continue;
            }
            for instance in self.start(w, req, offer, zone, take) {
                ids.push(instance.id.clone());
                out.instances.push(instance);
            }
            if let Some(error) = quota {
                out.errors.push((key, error));
            }
            left -= take;
        }
        if (out.instances.len() as u32) < req.min_count.max(1) {
            // Below the acceptable minimum: give back what was started, report why.
            for i in &out.instances {
                if let Some(s) = w.instances.get_mut(&i.id)
                    && s.instance.state != InstanceState::Terminated
                {
                    s.instance.state = InstanceState::Terminated;
                    let (zone, capacity) = (s.zone, s.instance.offer.capacity);
                    w.ended(zone, capacity);
                }
            }
            out.instances.clear();
            ids.clear();
        }
        w.launches.insert(req.key, ids);
        Ok(out)
    }

    /// The zone of `offer` and how many instances it can start now (capacity and quota
    /// faults drawn from the schedule), or why none.
    fn room(&self, w: &mut World, offer: &Offer) -> Result<(usize, u32), ProviderError> {
        let Some(zone) = self.zone_of(offer) else {
            return Err(ProviderError::InvalidRequest {
                message: format!("zone {} is not simulated", offer.zone),
            });
        };
        let mut room = match offer.capacity {
            Capacity::Spot => self
                .available(zone, w.now)
                .saturating_sub(Self::spot_in_use(w, zone)),
            _ => u32::MAX,
        };
        if Self::draw(w) < self.config.faults.capacity {
            room = 0;
        }
        if let Some(q) = self.config.quota {
            let quota_room = q.saturating_sub(Self::alive(w));
            if quota_room == 0 || Self::draw(w) < self.config.faults.quota {
                return Err(ProviderError::Quota {
                    code: "VcpuLimitExceeded".into(),
                    message: format!("at most {q} instances"),
                });
            }
            room = room.min(quota_room);
        } else if Self::draw(w) < self.config.faults.quota {
            return Err(ProviderError::Quota {
                code: "MaxSpotInstanceCountExceeded".into(),
                message: "simulated quota".into(),
            });
        }
        Ok((zone, room))
    }

    /// Start `take` instances of `offer` in `zone` for `req`, booting until the configured
    /// boot time has passed.
    fn start(
        &self,
        w: &mut World,
        req: &LaunchRequest,
        offer: &Offer,
        zone: usize,
        take: u32,
    ) -> Vec<Instance> {
        let now = w.now;
        let bought = Arc::new(self.offer(zone, offer.capacity, now, 0));
        let owner = req.tags.get(tag::OWNER).map(|o| w.owner_number(o));
        let tags = Arc::new(req.tags.clone());
        let ready_at = now + TimeDelta::from_std(self.config.boot).unwrap_or_default();
        let mut started = Vec::new();
        for _ in 0..take {
            w.next_id += 1;
            let id = InstanceId::new(format!("sim-{:08x}", w.next_id));
            let instance = Instance {
                id: id.clone(),
                offer: bought.clone(),
                state: InstanceState::Pending,
                tags: tags.clone(),
                launched_at: now,
            };
            let sim = SimInstance {
                instance: instance.clone(),
                zone,
                owner,
                ready_at,
                reclaim_at: None,
                quiet: false,
                notice_seen: None,
            };
            w.instances.insert(id, sim);
            w.next_ready = clock::earliest(w.next_ready, ready_at);
            w.alive += 1;
            if offer.capacity == Capacity::Spot {
                w.spot_alive[zone] += 1;
            }
            started.push(instance);
        }
        started
    }
}

impl SimCloud {
    /// One instance by id, as the cloud sees it (goes through the fault schedule like any call).
    pub async fn get(&self, id: &InstanceId) -> Result<Option<Instance>, ProviderError> {
        let mut w = self.world();
        self.enter(&mut w, "get", id.to_string())?;
        Ok(w.instances.get(id).map(|i| i.instance.clone()))
    }
}

#[async_trait]
impl Provider for SimCloud {
    fn cloud(&self) -> Cloud {
        Cloud::Sim
    }

    async fn offers(&self, region: &Region) -> Result<Vec<Offer>, ProviderError> {
        let mut w = self.world();
        self.enter(&mut w, "offers", region.to_string())?;
        let now = w.now;
        let mut out = Vec::new();
        for (zone, z) in self.zones.iter().enumerate() {
            if z.region == region.as_str() {
                let used = Self::spot_in_use(&w, zone);
                out.push(self.offer(zone, Capacity::Spot, now, used));
                out.push(self.offer(zone, Capacity::OnDemand, now, 0));
            }
        }
        Ok(out)
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        let mut w = self.world();
        self.enter(&mut w, "launch", request.key.to_string())?;
        if let Some(ids) = w.launches.get(&request.key) {
            // Same key, same instances: a retried intent never launches twice.
            let instances = ids
                .iter()
                .filter_map(|id| w.instances.get(id).map(|i| i.instance.clone()))
                .collect();
            return Ok(LaunchOutcome {
                instances,
                errors: Vec::new(),
            });
        }
        self.do_launch(&mut w, request)
    }

    async fn terminate(&self, id: &InstanceId) -> Result<(), ProviderError> {
        let mut w = self.world();
        self.enter(&mut w, "terminate", id.to_string())?;
        if let Some(i) = w.instances.get_mut(id)
            && i.instance.state != InstanceState::Terminated
        {
            i.instance.state = InstanceState::Terminated;
            let (zone, capacity) = (i.zone, i.instance.offer.capacity);
            w.ended(zone, capacity);
        }
        Ok(())
    }

    async fn list(&self, owner: &str) -> Result<Vec<Instance>, ProviderError> {
        let mut w = self.world();
        self.enter(&mut w, "list", owner.to_owned())?;
        let Some(owner) = w.owner_of(owner) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(w.alive as usize);
        out.extend(
            w.instances
                .values()
                .filter(|i| i.owner == Some(owner) && i.instance.state != InstanceState::Terminated)
                .map(|i| i.instance.clone()),
        );
        Ok(out)
    }

    async fn interruptions(&self) -> Result<Vec<Interruption>, ProviderError> {
        let mut w = self.world();
        self.enter(&mut w, "interruptions", String::new())?;
        Ok(std::mem::take(&mut w.pending))
    }

    async fn quotas(&self, region: &Region) -> Result<Vec<CloudQuota>, ProviderError> {
        let mut w = self.world();
        self.enter(&mut w, "quotas", region.to_string())?;
        Ok(self.quotas_in(&w, region.as_str()))
    }
}

#[cfg(test)]
#[path = "cloud_tests.rs"]
mod tests;
