use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use google_cloud_billing_v1::client::CloudCatalog;
use google_cloud_compute_v1::model::Instance as GceInstance;
use tern_cloud::{
    Availability, Capacity, Cloud, CloudQuota, Instance, InstanceId, InstanceState, Interruption,
    InterruptionKind, LaunchOutcome, LaunchRequest, Offer, Provider, ProviderError, Region, tag,
};
use tern_pricing::PriceHistory;
use tracing::{debug, info, warn};
use uuid_like::request_id;

mod disks;
mod slices;
mod vms;

use self::slices::{Target, target};
use self::vms::is_tpu;
use crate::billing::{self, SkuPrices};
use crate::compute::Compute;
use crate::errors::{from_call, from_operation};
use crate::offers::{self, ZoneShapes};
use crate::tpu::Tpus;
use crate::{GcpConfig, labels, quotas};

/// A spot VM gets an ACPI soft-off and 30 s before it is stopped.
const PREEMPTION_LEAD: Duration = Duration::from_secs(30);

/// The zone operation GCE records when it preempts a spot VM.
const PREEMPTED: &str = "compute.instances.preempted";

/// States in which an instance still costs money or may still run.
const LIVE: [&str; 7] = [
    "PROVISIONING",
    "STAGING",
    "RUNNING",
    "STOPPING",
    "SUSPENDING",
    "REPAIRING",
    "PENDING",
];

#[derive(Debug, Default)]
struct Cache {
    zones: Option<(Instant, Vec<String>)>,
    shapes: HashMap<String, (Instant, ZoneShapes)>,
    /// TPU slice types per zone.
    tpu_types: HashMap<String, (Instant, Vec<String>)>,
    /// The last Billing Catalog refresh: when it was tried, and the last good prices.
    prices: Option<(Instant, Option<Arc<SkuPrices>>)>,
}

/// tern's [`Provider`] for Compute Engine GPU VMs.
pub struct GcpProvider {
    config: GcpConfig,
    compute: Compute,
    billing: Option<CloudCatalog>,
    tpus: Option<Tpus>,
    history: Option<Arc<Mutex<PriceHistory>>>,
    /// The catalog's GPU offers of the region, by [`Offer::key`].
    catalog: Arc<Vec<Offer>>,
    /// One N1 host type carries several GPU models, so a key may name several offers.
    by_key: HashMap<String, Vec<Offer>>,
    cache: Mutex<Cache>,
    /// Offer key → when it last hit a stockout.
    capacity_errors: Mutex<HashMap<String, Instant>>,
    /// Preemption operations already reported, by operation name.
    seen_preemptions: Mutex<HashSet<String>>,
    /// Preemptions older than this were before tern started and are not news.
    started: DateTime<Utc>,
}

impl std::fmt::Debug for GcpProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcpProvider")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these maps leaves plain data behind; keep using it.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Request ids: UUIDs derived from the launch's idempotency key, so a retry of the same
/// persisted intent sends the same ids.
mod uuid_like {
    use tern_cloud::IdempotencyKey;

    /// The `requestId` for one call of a launch (`part` names the offer it tries).
    pub fn request_id(key: &IdempotencyKey, part: &str) -> String {
        key.part(part).gce_request_id()
    }
}

/// `zone/name`: GCE names are unique per zone, and every call needs both.
fn instance_id(zone: &str, name: &str) -> InstanceId {
    InstanceId::new(format!("{zone}/{name}"))
}

/// The last path segment of a GCE URL (`…/zones/us-central1-a` → `us-central1-a`).
fn last_segment(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

impl GcpProvider {
    /// Clients from Application Default Credentials (or none, for a fake), and the bundled
    /// catalog's GCP offers for prices and shapes.
    pub async fn connect(config: GcpConfig) -> Result<Self, ProviderError> {
        let catalog = tern_pricing::bundled().map_err(|e| ProviderError::InvalidRequest {
            message: format!("bundled price catalog: {e}"),
        })?;
        Self::with_catalog(config, &catalog.offers).await
    }

    /// As [`Self::connect`], with prices and shapes from these offers.
    pub async fn with_catalog(config: GcpConfig, catalog: &[Offer]) -> Result<Self, ProviderError> {
        let compute = Compute::connect(&config).await?;
        let tpus = if config.tpus {
            Some(Tpus::connect(&config).await?)
        } else {
            None
        };
        let billing = if config.live_prices {
            Some(client!(CloudCatalog, &config, &config.billing_endpoint))
        } else {
            None
        };
        let mine: Vec<Offer> = catalog
            .iter()
            .filter(|o| o.cloud == Cloud::Gcp && o.region.0 == config.region)
            .cloned()
            .collect();
        let mut by_key = HashMap::new();
        for o in mine.iter().filter(|o| o.accelerator().is_some()) {
            by_key
                .entry(o.key())
                .or_insert_with(Vec::new)
                .push(o.clone());
        }
        Ok(Self {
            config,
            compute,
            billing,
            tpus,
            history: None,
            catalog: Arc::new(mine),
            by_key,
            cache: Mutex::default(),
            capacity_errors: Mutex::default(),
            seen_preemptions: Mutex::default(),
            started: Utc::now(),
        })
    }

    /// Record every Billing Catalog refresh's offers into this history.
    pub fn with_price_history(mut self, history: Arc<Mutex<PriceHistory>>) -> Self {
        self.history = Some(history);
        self
    }

    /// The Billing Catalog's prices for the region (refreshed per TTL) and whether they were
    /// fetched just now; `None` when off or never reached. A failure keeps the last good
    /// prices, logs once, and is retried after a tenth of the TTL.
    async fn sku_prices(&self) -> (Option<Arc<SkuPrices>>, bool) {
        let Some(client) = &self.billing else {
            return (None, false);
        };
        let cached = lock(&self.cache).prices.clone();
        let last = cached.as_ref().and_then(|c| c.1.clone());
        if let Some((at, good)) = &cached {
            let wait = if good.is_some() {
                self.config.prices_ttl
            } else {
                self.config.prices_ttl / 10
            };
            if at.elapsed() < wait {
                return (last, false);
            }
        }
        match billing::fetch(client).await {
            Ok(skus) => {
                let prices = Arc::new(SkuPrices::from_skus(&skus, &self.config.region));
                debug!(
                    skus = skus.len(),
                    priced = prices.prices.len(),
                    "Billing Catalog prices"
                );
                lock(&self.cache).prices = Some((Instant::now(), Some(prices.clone())));
                (Some(prices), true)
            }
            Err(e) => {
                warn!(error = %from_call(&e, None), "Cloud Billing Catalog unreachable; keeping the last good prices (or the bundled catalog's)");
                lock(&self.cache).prices = Some((Instant::now(), last.clone()));
                (last, false)
            }
        }
    }

    pub fn config(&self) -> &GcpConfig {
        &self.config
    }

    pub fn regions(&self) -> Vec<Region> {
        vec![Region::new(self.config.region.as_str())]
    }

    /// The zones tern works in: the configured ones, else the region's UP zones (cached).
    async fn zones(&self) -> Result<Vec<String>, ProviderError> {
        if !self.config.zones.is_empty() {
            return Ok(self.config.zones.clone());
        }
        let cached = lock(&self.cache).zones.clone();
        if let Some((at, zones)) = &cached
            && at.elapsed() < self.config.shapes_ttl
        {
            return Ok(zones.clone());
        }
        match self.compute.zones(&self.config.region).await {
            Ok(zones) => {
                lock(&self.cache).zones = Some((Instant::now(), zones.clone()));
                Ok(zones)
            }
            Err(e) => stale(cached.map(|c| c.1), from_call(&e, None), "zones"),
        }
    }

    async fn shapes(&self, zone: &str) -> Result<ZoneShapes, ProviderError> {
        let cached = lock(&self.cache).shapes.get(zone).cloned();
        if let Some((at, shapes)) = &cached
            && at.elapsed() < self.config.shapes_ttl
        {
            return Ok(shapes.clone());
        }
        let fresh = async {
            let machines = self.compute.machine_types(zone).await?;
            let gpus = self.compute.accelerator_types(zone).await?;
            Ok::<_, google_cloud_compute_v1::Error>(ZoneShapes::new(&machines, gpus))
        };
        match fresh.await {
            Ok(shapes) => {
                lock(&self.cache)
                    .shapes
                    .insert(zone.to_owned(), (Instant::now(), shapes.clone()));
                Ok(shapes)
            }
            Err(e) => stale(cached.map(|c| c.1), from_call(&e, None), "machine types"),
        }
    }

    fn recently_short(&self, key: &str) -> bool {
        lock(&self.capacity_errors)
            .get(key)
            .is_some_and(|at| at.elapsed() < self.config.capacity_memory)
    }

    /// Instances an earlier attempt of this launch made (found by the intent label), in the
    /// zones its offers name.
    async fn launched_before(
        &self,
        request: &LaunchRequest,
    ) -> Result<Vec<Instance>, ProviderError> {
        let filter = labels::filter(tag::INTENT, &request.intent.to_string());
        let mut zones: Vec<&str> = request.offers.iter().map(|o| o.zone.0.as_str()).collect();
        zones.sort_unstable();
        zones.dedup();
        let mut out = Vec::new();
        let intent = request.intent.to_string();
        let tpu = request
            .offers
            .iter()
            .any(|o| o.instance_type.name.starts_with("tpu-"));
        for zone in zones {
            out.extend(self.listed(zone, &filter).await?);
            if !tpu {
                continue;
            }
            let slices = self.slices(zone).await?;
            out.extend(
                slices
                    .into_iter()
                    .filter(|i| i.tags.get(tag::INTENT) == Some(&intent)),
            );
        }
        Ok(out)
    }

    /// Live instances of `zone` matching `filter`, as tern instances.
    async fn listed(&self, zone: &str, filter: &str) -> Result<Vec<Instance>, ProviderError> {
        let found = self
            .compute
            .list(zone, filter)
            .await
            .map_err(|e| from_call(&e, None))?;
        Ok(found
            .iter()
            .filter(|i| {
                i.status
                    .as_ref()
                    .and_then(|s| s.name())
                    .is_some_and(|s| LIVE.contains(&s))
            })
            .filter_map(|i| self.to_instance(zone, i))
            .collect())
    }

    fn to_instance(&self, zone: &str, i: &GceInstance) -> Option<Instance> {
        let name = i.name.clone()?;
        let type_name = i
            .machine_type
            .as_deref()
            .map(last_segment)
            .unwrap_or_default();
        let spot = i.scheduling.as_ref().is_some_and(|s| {
            s.provisioning_model
                .as_ref()
                .is_some_and(|m| m.name() == Some("SPOT"))
                || s.preemptible == Some(true)
        });
        let capacity = if spot {
            Capacity::Spot
        } else {
            Capacity::OnDemand
        };
        let gpu = i
            .guest_accelerators
            .first()
            .and_then(|a| a.accelerator_type.as_deref())
            .map(last_segment);
        let state = match i.status.as_ref().and_then(|s| s.name()) {
            Some("PROVISIONING" | "STAGING" | "PENDING") => InstanceState::Pending,
            Some("RUNNING") => InstanceState::Running,
            Some("TERMINATED") => InstanceState::Terminated,
            _ => InstanceState::Stopping,
        };
        let label_map: BTreeMap<String, String> = i
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let tags = labels::to_tags(&label_map, i.description.as_deref());
        let launched_at = i
            .creation_timestamp
            .as_deref()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map_or_else(Utc::now, |t| t.with_timezone(&Utc));
        Some(Instance {
            id: instance_id(zone, &name),
            offer: self.offer_for(zone, type_name, capacity, gpu).into(),
            state,
            tags: tags.into(),
            launched_at,
        })
    }

    /// The offer an instance was bought as: the catalog's offer of that key whose GPU is the
    /// one attached (`gpu`, a Compute accelerator type), else the bare machine type at no known
    /// price.
    fn offer_for(
        &self,
        zone: &str,
        type_name: &str,
        capacity: Capacity,
        gpu: Option<&str>,
    ) -> Offer {
        let key = format!("{}/{zone}/{type_name}/{capacity}", Cloud::Gcp);
        let same = self.by_key.get(&key).and_then(|list| {
            list.iter()
                .find(|o| {
                    let attached = o
                        .accelerator()
                        .and_then(|a| offers::gce_accelerator(&a.name));
                    gpu.is_none_or(|g| attached == Some(g))
                })
                .or_else(|| list.first())
        });
        same.cloned().unwrap_or_else(|| Offer {
            cloud: Cloud::Gcp,
            region: Region::new(self.config.region.as_str()),
            zone: tern_cloud::Zone::new(zone),
            instance_type: tern_cloud::InstanceType {
                name: type_name.to_owned(),
                vcpus: 0.0,
                memory_gib: 0.0,
                accelerator: None,
            },
            capacity,
            price_per_hour: 0.0,
            observed_at: None,
            breakdown: Vec::new(),
            availability: Availability::Unknown,
        })
    }
}

/// Keep using the last good answer when a refresh fails; fail only if there never was one.
fn stale<T>(last: Option<T>, e: ProviderError, what: &str) -> Result<T, ProviderError> {
    match last {
        Some(v) => {
            warn!(error = %e, "refreshing {what} failed; using the last good answer");
            Ok(v)
        }
        None => Err(e),
    }
}

#[async_trait]
impl Provider for GcpProvider {
    fn cloud(&self) -> Cloud {
        Cloud::Gcp
    }

    async fn offers(&self, region: &Region) -> Result<Vec<Offer>, ProviderError> {
        if region.0 != self.config.region {
            return Ok(Vec::new());
        }
        let (prices, fresh) = self.sku_prices().await;
        let now = Utc::now();
        let mut out = Vec::new();
        for zone in self.zones().await? {
            let shapes = self.shapes(&zone).await?;
            let mut here =
                offers::in_zone(&self.catalog, &zone, &shapes, &self.config.machine_types);
            here.extend(self.tpu_offers(&zone).await);
            for o in here {
                let mut o = match prices.as_ref().and_then(|p| p.price(&o)) {
                    Some(live) => Offer {
                        observed_at: Some(now),
                        ..live
                    },
                    None => o,
                };
                if self.recently_short(&o.key()) {
                    o.availability = Availability::Unavailable;
                }
                out.push(o);
            }
        }
        if fresh && let Some(history) = &self.history {
            let live: Vec<Offer> = out
                .iter()
                .filter(|o| o.observed_at.is_some())
                .cloned()
                .collect();
            if let Err(e) = lock(history).record(&live, now, "gcp:cloudbilling:skus") {
                warn!(error = %e, "could not record Billing Catalog prices in the price history");
            }
        }
        Ok(out)
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        if request.count == 0 || request.offers.is_empty() {
            return Ok(LaunchOutcome::default());
        }
        if let Some(o) = request
            .offers
            .iter()
            .find(|o| o.cloud != Cloud::Gcp || o.region.0 != self.config.region)
        {
            return Err(ProviderError::InvalidRequest {
                message: format!(
                    "this GCP provider launches in {}; offer {} is elsewhere",
                    self.config.region,
                    o.key()
                ),
            });
        }
        // The requestIds guard a retry within GCE's retention window; the intent label also
        // covers a crash after the call when that window has passed.
        let before = self.launched_before(request).await?;
        if !before.is_empty() {
            info!(intent = %request.intent, instances = before.len(), "launch already made; returning its instances");
            return Ok(LaunchOutcome {
                instances: before,
                errors: Vec::new(),
            });
        }
        let vms = request.offers.iter().any(|o| !is_tpu(o));
        let disks = if vms {
            self.disks(request).await?
        } else {
            None
        };
        if request.disk_gb.is_some() && request.offers.iter().any(is_tpu) {
            warn!(job = %request.job, "disk_gb does not apply to TPU VMs: their boot disk is the runtime's");
        }
        let mut outcome = LaunchOutcome::default();
        let filter = labels::filter(tag::INTENT, &request.intent.to_string());
        for (n, offer) in request.offers.iter().enumerate() {
            let have = outcome.instances.len() as u32;
            if have >= request.count {
                break;
            }
            let count = request.count - have;
            let min_count = request.min_count.saturating_sub(have).min(count);
            if is_tpu(offer) {
                match self.launch_slices(request, n, offer, count).await {
                    Ok(made) => outcome.instances.extend(made),
                    Err(e) if e.is_throttled() => return Err(e),
                    Err(e) => {
                        if e.is_capacity() {
                            lock(&self.capacity_errors).insert(offer.key(), Instant::now());
                        }
                        outcome.errors.push((offer.key(), e));
                    }
                }
                continue;
            }
            let sent = self.launch_offer(request, n, offer, count, min_count, disks.as_deref());
            match sent.await {
                Ok(()) if self.config.dry_run => {}
                Ok(()) => {
                    let mut made = self.listed(&offer.zone.0, &filter).await?;
                    made.retain(|i| !outcome.instances.iter().any(|m| m.id == i.id));
                    for i in &mut made {
                        i.offer = offer.clone().into();
                    }
                    outcome.instances.extend(made);
                }
                Err(e) if e.is_throttled() || matches!(e, ProviderError::Unauthorized { .. }) => {
                    return Err(e);
                }
                Err(e) => {
                    if e.is_capacity() {
                        lock(&self.capacity_errors).insert(offer.key(), Instant::now());
                    }
                    outcome.errors.push((offer.key(), e));
                }
            }
        }
        Ok(outcome)
    }

    async fn terminate(&self, id: &InstanceId) -> Result<(), ProviderError> {
        let (zone, name) = match target(id)? {
            Target::Vm { zone, name } => (zone, name),
            Target::Node { .. } | Target::Queued { .. } => return self.terminate_slice(id).await,
        };
        let instance = match self.compute.get(zone, name).await {
            Ok(i) => i,
            Err(e) => {
                let err = from_call(&e, None);
                return if err.is_not_found() { Ok(()) } else { Err(err) };
            }
        };
        if !self.owns_labels(&instance.labels) {
            return Err(ProviderError::InvalidRequest {
                message: format!(
                    "instance {id} does not carry this controller's {} label; tern deletes \
                     only its own instances",
                    labels::key(tag::OWNER)
                ),
            });
        }
        if self.config.dry_run {
            info!(call = "instances.delete", %zone, instance = %name, "dry run: not sent");
            return Ok(());
        }
        let rid =
            tern_cloud::IdempotencyKey::for_name(&format!("delete/{}", id.0)).gce_request_id();
        match self.compute.delete(zone, name, &rid).await {
            Ok(op) => match from_operation(&op, None) {
                Some(e) if !e.is_not_found() => Err(e),
                _ => Ok(()),
            },
            Err(e) => {
                let err = from_call(&e, None);
                if err.is_not_found() { Ok(()) } else { Err(err) }
            }
        }
    }

    async fn list(&self, owner: &str) -> Result<Vec<Instance>, ProviderError> {
        let filter = labels::filter(tag::OWNER, owner);
        let mut out = Vec::new();
        for zone in self.zones().await? {
            let mut found = self.listed(&zone, &filter).await?;
            let wanted = labels::value(owner);
            found.extend(self.slices(&zone).await?.into_iter().filter(|i| {
                i.tags.get(tag::OWNER).map(|o| labels::value(o)) == Some(wanted.clone())
            }));
            // Labels are lowercase; the owner tag reads back as the controller wrote it.
            for i in &mut found {
                Arc::make_mut(&mut i.tags).insert(tag::OWNER.into(), owner.to_owned());
            }
            out.extend(found);
        }
        Ok(out)
    }

    async fn interruptions(&self) -> Result<Vec<Interruption>, ProviderError> {
        let filter = format!("operationType = \"{PREEMPTED}\"");
        let mut found = Vec::new();
        for zone in self.zones().await? {
            found.extend(self.slice_interruptions(&zone).await?);
            let ops = self
                .compute
                .operations(&zone, &filter)
                .await
                .map_err(|e| from_call(&e, None))?;
            for op in ops {
                if op.operation_type.as_deref() != Some(PREEMPTED) {
                    continue;
                }
                let (Some(name), Some(target)) = (op.name.clone(), op.target_link.as_deref())
                else {
                    continue;
                };
                let at = op
                    .insert_time
                    .as_deref()
                    .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                    .map(|t| t.with_timezone(&Utc));
                if at.is_some_and(|t| t < self.started - chrono::Duration::minutes(5)) {
                    continue;
                }
                if !lock(&self.seen_preemptions).insert(name) {
                    continue;
                }
                let now = Utc::now();
                let start = at.unwrap_or(now);
                found.push(Interruption {
                    instance: instance_id(&zone, last_segment(target)),
                    kind: InterruptionKind::SpotNotice,
                    deadline: Some(
                        start + chrono::Duration::from_std(PREEMPTION_LEAD).unwrap_or_default(),
                    ),
                    received_at: now,
                });
            }
        }
        Ok(found)
    }

    async fn quotas(&self, region: &Region) -> Result<Vec<CloudQuota>, ProviderError> {
        quotas::read(&self.compute, &self.config, region).await
    }
}
