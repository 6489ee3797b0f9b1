use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_sdk_ec2::types::{Filter, InstanceLifecycleType, InstanceStateName};
use chrono::{DateTime, Utc};
use tern_cloud::{
    Capacity, Cloud, CloudQuota, Instance, InstanceId, InstanceState, InstanceType, Interruption,
    LaunchOutcome, LaunchRequest, Offer, PriceComponent, Provider, ProviderError, Region, Tags,
    Zone, tag,
};
use tern_pricing::{Catalog, PriceHistory};
use tracing::{debug, info, warn};

use crate::config::AwsConfig;
use crate::disk;
use crate::errors::{code_of, from_sdk};
use crate::events;
use crate::fleet::{FleetCall, LAUNCH_TAG, Template};
use crate::offers::{self, OnDemandPrices, Shapes, SpotPrices, ZoneMap};
use crate::pricing_api;
use crate::quotas::{self, QuotaReader};

/// A failed Pricing API refresh is retried after this long (or `on_demand_ttl`, if shorter).
const PRICING_RETRY: Duration = Duration::from_secs(3600);

/// States in which an instance still costs money or may still run.
const LIVE_STATES: [&str; 5] = ["pending", "running", "shutting-down", "stopping", "stopped"];

/// What tern last learned about one region, with when, so a failed refresh can fall back.
#[derive(Debug, Default)]
struct RegionCache {
    zones: Option<(Instant, ZoneMap)>,
    shapes: Option<(Instant, Arc<Shapes>)>,
    spot: Option<(Instant, Arc<SpotPrices>)>,
    /// On-demand prices from the Pricing API.
    on_demand: Option<OnDemandRefresh>,
    /// The last offers built, by key, to describe instances found later.
    offers: HashMap<String, Offer>,
}

/// The last Pricing API refresh of one region: when it was tried, for which types, whether it
/// worked, and the last good prices by type (empty until one worked).
#[derive(Debug, Clone)]
struct OnDemandRefresh {
    tried: Instant,
    ok: bool,
    types: BTreeSet<String>,
    prices: Arc<BTreeMap<String, f64>>,
}

/// tern's [`Provider`] for AWS EC2, with spot interruption notices from an SQS queue.
pub struct AwsProvider {
    config: AwsConfig,
    ec2: aws_sdk_ec2::Client,
    sqs: Option<aws_sdk_sqs::Client>,
    pricing: Option<aws_sdk_pricing::Client>,
    on_demand: OnDemandPrices,
    history: Option<Arc<Mutex<PriceHistory>>>,
    clients: Mutex<HashMap<String, aws_sdk_ec2::Client>>,
    cache: Mutex<HashMap<String, RegionCache>>,
    /// Offer key → when it last hit a capacity error.
    capacity_errors: Mutex<HashMap<String, Instant>>,
    /// Service Quotas, when set ([`Self::with_quotas_client`]).
    pub(crate) quotas: Option<QuotaReader>,
}

impl std::fmt::Debug for AwsProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsProvider")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these maps leaves plain data behind; keep using it.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl AwsProvider {
    /// Build clients from the standard credential chain, with the SDK's standard retry mode
    /// (which resends a CreateFleet with the same ClientToken, so retries never launch twice).
    pub async fn connect(config: AwsConfig) -> Result<Self, ProviderError> {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(aws_config::Region::new(config.region.clone()))
            .retry_config(RetryConfig::standard());
        if let Some(url) = &config.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        if let Some(profile) = &config.profile {
            loader = loader.profile_name(profile);
        }
        let shared = loader.load().await;
        let ec2 = aws_sdk_ec2::Client::new(&shared);
        let sqs = config
            .queue_url
            .as_ref()
            .map(|_| aws_sdk_sqs::Client::new(&shared));
        // The Pricing API lives in a few regions only; an endpoint override still applies.
        let pricing = config.pricing_api.then(|| {
            let conf = aws_sdk_pricing::config::Builder::from(&shared)
                .region(aws_sdk_pricing::config::Region::new(
                    pricing_api::ENDPOINT_REGION,
                ))
                .build();
            aws_sdk_pricing::Client::from_conf(conf)
        });
        let quotas = aws_sdk_servicequotas::Client::new(&shared);
        let this = Self::from_clients(config, ec2, sqs)?.with_quotas_client(quotas);
        Ok(match pricing {
            Some(client) => this.with_pricing_client(client),
            None => this,
        })
    }

    /// Use ready-made clients (tests point them at moto or at `aws-smithy-mocks` rules). The
    /// EC2 client's own region is replaced per call by the region an offer or the config names.
    /// No Pricing API client: on-demand prices come from the catalog unless
    /// [`Self::with_pricing_client`] adds one.
    pub fn from_clients(
        config: AwsConfig,
        ec2: aws_sdk_ec2::Client,
        sqs: Option<aws_sdk_sqs::Client>,
    ) -> Result<Self, ProviderError> {
        let catalog = tern_pricing::bundled().map_err(|e| ProviderError::InvalidRequest {
            message: format!("bundled price catalog: {e}"),
        })?;
        Ok(Self {
            on_demand: OnDemandPrices::from_catalog(&catalog),
            config,
            ec2,
            sqs,
            pricing: None,
            history: None,
            clients: Mutex::default(),
            cache: Mutex::default(),
            capacity_errors: Mutex::default(),
            quotas: None,
        })
    }

    /// Take on-demand prices and shapes from this catalog instead of the bundled one.
    pub fn with_catalog(mut self, catalog: &Catalog) -> Self {
        self.on_demand = OnDemandPrices::from_catalog(catalog);
        self
    }

    /// Refresh on-demand prices with this Pricing API client (it must be set up for a region
    /// that serves the API, such as us-east-1). Ignored when `AwsConfig::pricing_api` is off.
    pub fn with_pricing_client(mut self, client: aws_sdk_pricing::Client) -> Self {
        self.pricing = Some(client);
        self
    }

    /// Record every fresh spot price reading into this history.
    pub fn with_price_history(mut self, history: Arc<Mutex<PriceHistory>>) -> Self {
        self.history = Some(history);
        self
    }

    pub fn config(&self) -> &AwsConfig {
        &self.config
    }

    /// The regions this provider works in: the home region first.
    pub fn regions(&self) -> Vec<Region> {
        self.config.regions().into_iter().map(Region).collect()
    }

    fn client(&self, region: &str) -> aws_sdk_ec2::Client {
        if region == self.config.region {
            return self.ec2.clone();
        }
        lock(&self.clients)
            .entry(region.to_owned())
            .or_insert_with(|| {
                let conf = self
                    .ec2
                    .config()
                    .to_builder()
                    .region(aws_sdk_ec2::config::Region::new(region.to_owned()))
                    .build();
                aws_sdk_ec2::Client::from_conf(conf)
            })
            .clone()
    }

    async fn zones(&self, region: &str) -> Result<ZoneMap, ProviderError> {
        let cached = lock(&self.cache).get(region).and_then(|c| c.zones.clone());
        if let Some((at, zones)) = &cached
            && at.elapsed() < self.config.shapes_ttl
        {
            return Ok(zones.clone());
        }
        match offers::fetch_zones(&self.client(region)).await {
            Ok(zones) => {
                lock(&self.cache)
                    .entry(region.to_owned())
                    .or_default()
                    .zones = Some((Instant::now(), zones.clone()));
                Ok(zones)
            }
            Err(e) => stale(cached.map(|c| c.1), e, "availability zones", region),
        }
    }

    async fn shapes(&self, region: &str, zones: &ZoneMap) -> Result<Arc<Shapes>, ProviderError> {
        let cached = lock(&self.cache).get(region).and_then(|c| c.shapes.clone());
        if let Some((at, shapes)) = &cached
            && at.elapsed() < self.config.shapes_ttl
        {
            return Ok(shapes.clone());
        }
        let client = self.client(region);
        match offers::fetch_shapes(&client, &self.config.instance_types, zones, &self.on_demand)
            .await
        {
            Ok(shapes) => {
                let shapes = Arc::new(shapes);
                lock(&self.cache)
                    .entry(region.to_owned())
                    .or_default()
                    .shapes = Some((Instant::now(), shapes.clone()));
                Ok(shapes)
            }
            Err(e) => stale(cached.map(|c| c.1), e, "instance types", region),
        }
    }

    async fn spot_prices(
        &self,
        region: &str,
        shapes: &Shapes,
        zones: &ZoneMap,
    ) -> Result<(Arc<SpotPrices>, bool), ProviderError> {
        let cached = lock(&self.cache).get(region).and_then(|c| c.spot.clone());
        if let Some((at, prices)) = &cached
            && at.elapsed() < self.config.prices_ttl
        {
            return Ok((prices.clone(), false));
        }
        let types = shapes.types.keys().cloned().collect();
        match offers::fetch_spot_prices(&self.client(region), &types, zones).await {
            Ok(prices) => {
                let prices = Arc::new(prices);
                lock(&self.cache).entry(region.to_owned()).or_default().spot =
                    Some((Instant::now(), prices.clone()));
                Ok((prices, true))
            }
            Err(e) => stale(cached.map(|c| c.1), e, "spot prices", region).map(|p| (p, false)),
        }
    }

    /// This region's on-demand prices from the Pricing API, by type, for the types it offers;
    /// empty when the API is off or has never answered. A refresh runs when `on_demand_ttl`
    /// has passed (an hour at most after a failure) or the region offers types the last one
    /// did not ask about. A failure never fails the caller: it logs one warning and keeps the
    /// last good prices.
    /// The Pricing API's on-demand prices for the region's offered types (refreshed per TTL),
    /// and whether they were fetched just now.
    async fn on_demand_prices(
        &self,
        region: &str,
        shapes: &Shapes,
    ) -> (Arc<BTreeMap<String, f64>>, bool) {
        let Some(client) = self.pricing.as_ref().filter(|_| self.config.pricing_api) else {
            return (Arc::default(), false);
        };
        let types: BTreeSet<String> = shapes.offered.iter().map(|(t, _)| t.clone()).collect();
        let cached = lock(&self.cache)
            .get(region)
            .and_then(|c| c.on_demand.clone());
        let last_good = cached
            .as_ref()
            .map(|c| c.prices.clone())
            .unwrap_or_default();
        if let Some(c) = &cached {
            let wait = if c.ok {
                self.config.on_demand_ttl
            } else {
                self.config.on_demand_ttl.min(PRICING_RETRY)
            };
            if c.tried.elapsed() < wait && types.is_subset(&c.types) {
                return (last_good, false);
            }
        }
        if types.is_empty() {
            return (last_good, false);
        }
        let (ok, prices) = match pricing_api::fetch_on_demand(client, region, &types).await {
            Ok(prices) => {
                debug!(%region, types = types.len(), priced = prices.len(), "on-demand prices from the Pricing API");
                (true, Arc::new(prices))
            }
            Err(e) => {
                warn!(%region, error = %e, "Pricing API refresh failed; keeping the last good on-demand prices");
                (false, last_good)
            }
        };
        lock(&self.cache)
            .entry(region.to_owned())
            .or_default()
            .on_demand = Some(OnDemandRefresh {
            tried: Instant::now(),
            ok,
            types,
            prices: prices.clone(),
        });
        (prices, ok)
    }

    fn recently_short(&self, key: &str) -> bool {
        lock(&self.capacity_errors)
            .get(key)
            .is_some_and(|at| at.elapsed() < self.config.capacity_memory)
    }

    fn remember_capacity_errors(&self, errors: &[(String, ProviderError)]) {
        let mut memory = lock(&self.capacity_errors);
        for (key, e) in errors {
            if e.is_capacity() {
                memory.insert(key.clone(), Instant::now());
            }
        }
    }

    /// Instances an earlier attempt of this launch already made (found by its token tag).
    async fn launched_before(
        &self,
        client: &aws_sdk_ec2::Client,
        region: &str,
        token: &str,
    ) -> Result<Vec<Instance>, ProviderError> {
        let filter = Filter::builder()
            .name(format!("tag:{LAUNCH_TAG}"))
            .values(token)
            .build();
        self.describe(client, region, vec![filter]).await
    }

    /// DescribeInstances with filters, every page, as tern instances.
    async fn describe(
        &self,
        client: &aws_sdk_ec2::Client,
        region: &str,
        filters: Vec<Filter>,
    ) -> Result<Vec<Instance>, ProviderError> {
        let zones = self.zones(region).await?;
        let mut pages = client
            .describe_instances()
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            for r in page.map_err(from_sdk)?.reservations() {
                for i in r.instances() {
                    out.extend(self.to_instance(region, &zones, i));
                }
            }
        }
        Ok(out)
    }

    fn to_instance(
        &self,
        region: &str,
        zones: &ZoneMap,
        i: &aws_sdk_ec2::types::Instance,
    ) -> Option<Instance> {
        let id = i.instance_id()?.to_owned();
        let type_name = i
            .instance_type()
            .map(|t| t.as_str().to_owned())
            .unwrap_or_default();
        let zone_name = i
            .placement()
            .and_then(|p| p.availability_zone())
            .unwrap_or_default();
        let zone = zones.id(zone_name).unwrap_or(zone_name).to_owned();
        let capacity = match i.instance_lifecycle() {
            Some(InstanceLifecycleType::Spot) => Capacity::Spot,
            _ => Capacity::OnDemand,
        };
        let state = match i.state().and_then(|s| s.name()) {
            Some(InstanceStateName::Pending) => InstanceState::Pending,
            Some(InstanceStateName::Running) => InstanceState::Running,
            Some(InstanceStateName::Terminated) => InstanceState::Terminated,
            _ => InstanceState::Stopping,
        };
        let tags: Tags = i
            .tags()
            .iter()
            .filter_map(|t| {
                Some((
                    t.key()?.to_owned(),
                    t.value().unwrap_or_default().to_owned(),
                ))
            })
            .collect();
        let launched_at = i
            .launch_time()
            .and_then(|t| DateTime::from_timestamp(t.secs(), t.subsec_nanos()))
            .unwrap_or_else(Utc::now);
        Some(Instance {
            id: InstanceId::new(id),
            offer: self.offer_for(region, &zone, &type_name, capacity).into(),
            state,
            tags: tags.into(),
            launched_at,
        })
    }

    /// The offer an existing instance was bought as: the last one built for that key, else
    /// the shape and price tern knows, else the bare type name.
    fn offer_for(&self, region: &str, zone: &str, type_name: &str, capacity: Capacity) -> Offer {
        let key = format!("{}/{zone}/{type_name}/{capacity}", Cloud::Aws);
        let cache = lock(&self.cache);
        let known = cache.get(region);
        if let Some(o) = known.and_then(|c| c.offers.get(&key)) {
            return o.clone();
        }
        let shape = known
            .and_then(|c| c.shapes.as_ref())
            .and_then(|(_, s)| s.types.get(type_name).cloned())
            .or_else(|| self.on_demand.shape(type_name).cloned())
            .unwrap_or_else(|| InstanceType {
                name: type_name.to_owned(),
                vcpus: 0.0,
                memory_gib: 0.0,
                accelerator: None,
            });
        let price = known
            .and_then(|c| c.on_demand.as_ref())
            .and_then(|r| r.prices.get(type_name).copied())
            .or_else(|| self.on_demand.price(region, type_name))
            .unwrap_or(0.0);
        Offer {
            cloud: Cloud::Aws,
            region: Region::new(region),
            zone: Zone::new(zone),
            instance_type: shape,
            capacity,
            price_per_hour: price,
            observed_at: None,
            breakdown: vec![PriceComponent {
                label: type_name.to_owned(),
                price_per_hour: price,
            }],
            availability: Default::default(),
        }
    }

    /// The instance and its region, looking in every configured region; `None` if no region
    /// knows it.
    async fn find(&self, id: &InstanceId) -> Result<Option<(String, Instance)>, ProviderError> {
        for region in self.config.regions() {
            let client = self.client(&region);
            let out = client
                .describe_instances()
                .instance_ids(id.as_str())
                .send()
                .await;
            let out = match out {
                Ok(out) => out,
                Err(e) if code_of(&e) == Some("InvalidInstanceID.NotFound") => continue,
                Err(e) => return Err(from_sdk(e)),
            };
            let zones = self.zones(&region).await?;
            let found = out
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .find_map(|i| self.to_instance(&region, &zones, i));
            if let Some(i) = found {
                return Ok(Some((region, i)));
            }
        }
        Ok(None)
    }

    fn owns(&self, instance: &Instance) -> bool {
        match (instance.owner(), &self.config.owner) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(have), Some(want)) => have == want,
        }
    }
}

/// A refresh failed: fall back to the last good data if there is any.
fn stale<T>(
    cached: Option<T>,
    err: ProviderError,
    what: &str,
    region: &str,
) -> Result<T, ProviderError> {
    match cached {
        Some(old) => {
            warn!(%region, error = %err, "refreshing {what} failed; using the last good data");
            Ok(old)
        }
        None => Err(err),
    }
}

impl AwsProvider {
    /// One instance by id, or `None` when EC2 does not know it.
    pub async fn get(&self, id: &InstanceId) -> Result<Option<Instance>, ProviderError> {
        Ok(self.find(id).await?.map(|(_, i)| i))
    }
}

#[async_trait]
impl Provider for AwsProvider {
    fn cloud(&self) -> Cloud {
        Cloud::Aws
    }

    async fn offers(&self, region: &Region) -> Result<Vec<Offer>, ProviderError> {
        let r = region.as_str();
        let zones = self.zones(r).await?;
        let shapes = self.shapes(r, &zones).await?;
        let (spot, fresh) = self.spot_prices(r, &shapes, &zones).await?;
        let (on_demand, on_demand_fresh) = self.on_demand_prices(r, &shapes).await;
        let offers = offers::build(
            region,
            &shapes,
            &spot,
            &self.on_demand,
            &on_demand,
            &zones,
            &|k: &str| self.recently_short(k),
        );
        if fresh && let Some(history) = &self.history {
            let spot_offers: Vec<Offer> = offers
                .iter()
                .filter(|o| o.capacity == Capacity::Spot)
                .cloned()
                .collect();
            let result =
                lock(history).record(&spot_offers, Utc::now(), "aws:DescribeSpotPriceHistory");
            if let Err(e) = result {
                warn!(error = %e, "could not record spot prices in the price history");
            }
        }
        if on_demand_fresh && let Some(history) = &self.history {
            let refreshed: Vec<Offer> = offers
                .iter()
                .filter(|o| {
                    o.capacity == Capacity::OnDemand
                        && on_demand.contains_key(&o.instance_type.name)
                })
                .cloned()
                .collect();
            let result = lock(history).record(&refreshed, Utc::now(), "aws:pricing:GetProducts");
            if let Err(e) = result {
                warn!(error = %e, "could not record on-demand prices in the price history");
            }
        }
        lock(&self.cache).entry(r.to_owned()).or_default().offers =
            offers.iter().map(|o| (o.key(), o.clone())).collect();
        Ok(offers)
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        let Some(first) = request.offers.first() else {
            return Ok(LaunchOutcome::default());
        };
        if request.count == 0 {
            return Ok(LaunchOutcome::default());
        }
        if let Some(o) = request
            .offers
            .iter()
            .find(|o| o.cloud != Cloud::Aws || o.region != first.region)
        {
            return Err(ProviderError::InvalidRequest {
                message: format!(
                    "one launch must stay in one AWS region; offer {} is not in {}",
                    o.key(),
                    first.region
                ),
            });
        }
        let region = first.region.as_str();
        let client = self.client(region);
        let template = Template::of(request, &self.config)?;
        let token = request.key.aws_client_token();

        // CreateFleet remembers its ClientToken, but the tag check also covers a crash after
        // the call when the token has expired or the endpoint ignores tokens.
        let before = self.launched_before(&client, region, &token).await?;
        if !before.is_empty() {
            info!(%token, instances = before.len(), "launch already made; returning its instances");
            return Ok(LaunchOutcome {
                instances: before,
                errors: Vec::new(),
            });
        }

        let root_disk = disk::root_disk(&client, &template, request.disk_gb).await?;
        let zones = self.zones(region).await?;
        let groups = by_capacity(&request.offers);
        let mut outcome = LaunchOutcome::default();
        for (n, (capacity, offers)) in groups.into_iter().enumerate() {
            let launched = outcome.instances.len() as u32;
            if launched >= request.count {
                break;
            }
            let call = FleetCall {
                // Each fleet of one launch has its own token, derived from the launch's.
                token: if n == 0 {
                    token.clone()
                } else {
                    format!("{token}-{n}")
                },
                launch: token.clone(),
                capacity,
                offers,
                count: request.count - launched,
                min_count: request.min_count.saturating_sub(launched),
                single_zone: request.single_zone,
                tags: request.tags.clone(),
                template: template.clone(),
                root_disk: root_disk.clone(),
                subnets: &self.config.subnets,
            };
            let builder = call.request(&client, &zones)?;
            if self.config.dry_run {
                info!(call = "CreateFleet", %region, input = ?builder.as_input(), "dry run: not sent");
                continue;
            }
            let out = builder.send().await.map_err(from_sdk)?;
            let (instances, errors) = call.outcome(&out, &zones, Utc::now());
            debug!(fleet = ?out.fleet_id(), launched = instances.len(), errors = errors.len(), "CreateFleet");
            self.remember_capacity_errors(&errors);
            outcome.instances.extend(instances);
            outcome.errors.extend(errors);
        }
        Ok(outcome)
    }

    async fn terminate(&self, id: &InstanceId) -> Result<(), ProviderError> {
        let Some((region, instance)) = self.find(id).await? else {
            return Ok(());
        };
        if instance.state == InstanceState::Terminated {
            return Ok(());
        }
        if !self.owns(&instance) {
            return Err(ProviderError::InvalidRequest {
                message: format!(
                    "instance {id} does not carry this controller's {} tag; tern terminates only \
                     its own instances",
                    tag::OWNER
                ),
            });
        }
        if self.config.dry_run {
            info!(call = "TerminateInstances", %region, instance_ids = ?[id.as_str()], "dry run: not sent");
            return Ok(());
        }
        let result = self
            .client(&region)
            .terminate_instances()
            .instance_ids(id.as_str())
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if code_of(&e) == Some("InvalidInstanceID.NotFound") => Ok(()),
            Err(e) => Err(from_sdk(e)),
        }
    }

    async fn list(&self, owner: &str) -> Result<Vec<Instance>, ProviderError> {
        let mut out = Vec::new();
        for region in self.config.regions() {
            let filters = vec![
                Filter::builder()
                    .name(format!("tag:{}", tag::OWNER))
                    .values(owner)
                    .build(),
                Filter::builder()
                    .name("instance-state-name")
                    .set_values(Some(LIVE_STATES.iter().map(|s| (*s).to_owned()).collect()))
                    .build(),
            ];
            let client = self.client(&region);
            out.extend(self.describe(&client, &region, filters).await?);
        }
        Ok(out)
    }

    async fn interruptions(&self) -> Result<Vec<Interruption>, ProviderError> {
        let (Some(sqs), Some(queue)) = (&self.sqs, &self.config.queue_url) else {
            return Ok(Vec::new());
        };
        let mut found = Vec::new();
        // A few batches per call: enough to drain a burst, bounded so one call stays short.
        for _ in 0..10 {
            let out = sqs
                .receive_message()
                .queue_url(queue)
                .max_number_of_messages(10)
                .wait_time_seconds(0)
                .send()
                .await
                .map_err(from_sdk)?;
            let messages = out.messages();
            if messages.is_empty() {
                break;
            }
            let now = Utc::now();
            let mut handled = Vec::new();
            for (n, m) in messages.iter().enumerate() {
                match events::parse(m.body().unwrap_or_default(), now) {
                    Ok(list) => found.extend(list),
                    Err(e) => warn!(
                        message_id = m.message_id().unwrap_or_default(),
                        error = %e,
                        "dropping an interruption queue message tern cannot use"
                    ),
                }
                if let Some(handle) = m.receipt_handle() {
                    handled.push(
                        aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                            .id(n.to_string())
                            .receipt_handle(handle)
                            .build()
                            .map_err(|e| ProviderError::InvalidRequest {
                                message: e.to_string(),
                            })?,
                    );
                }
            }
            if self.config.dry_run {
                info!(call = "DeleteMessageBatch", queue_url = %queue, entries = handled.len(), "dry run: not sent");
                break;
            }
            if !handled.is_empty() {
                let out = sqs
                    .delete_message_batch()
                    .queue_url(queue)
                    .set_entries(Some(handled))
                    .send()
                    .await
                    .map_err(from_sdk)?;
                for f in out.failed() {
                    warn!(
                        id = f.id(),
                        code = f.code(),
                        "could not delete an interruption message"
                    );
                }
            }
        }
        Ok(found)
    }

    async fn quotas(&self, region: &Region) -> Result<Vec<CloudQuota>, ProviderError> {
        quotas::read(self, region).await
    }
}

/// One fleet per capacity type, in the order the plan ranks them.
fn by_capacity(offers: &[Offer]) -> Vec<(Capacity, Vec<&Offer>)> {
    let mut groups: Vec<(Capacity, Vec<&Offer>)> = Vec::new();
    for o in offers {
        let capacity = if o.capacity == Capacity::Spot {
            Capacity::Spot
        } else {
            Capacity::OnDemand
        };
        match groups.iter_mut().find(|(c, _)| *c == capacity) {
            Some((_, list)) => list.push(o),
            None => groups.push((capacity, vec![o])),
        }
    }
    groups
}
