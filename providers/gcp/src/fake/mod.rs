//! A fake of the Compute Engine REST surface tern uses, for tests that drive the real
//! google-cloud-rust clients (feature `fake`). No emulator exists for Compute Engine, so this
//! follows the public API reference where tern depends on it:
//!
//! - mutating calls return an operation that goes PENDING → RUNNING → DONE, one step per
//!   `GET …/operations/{name}`;
//! - launch failures (stockouts, quota) arrive *inside* a DONE operation, with
//!   `httpErrorStatusCode`, as GCE reports them; the call itself succeeds;
//! - a rate limit is an HTTP 403 whose body has `errors[].reason = "rateLimitExceeded"`;
//! - a repeated `requestId` returns the first call's operation and changes nothing;
//! - instance names are unique per zone (409 `alreadyExists`);
//! - `bulkInsert` honours `count`, `minCount` (all or nothing below it) and `namePattern`;
//! - `list` filters on labels (`labels.KEY = "VALUE"`) and pages with `maxResults`/`pageToken`;
//! - a preempted spot VM leaves a `compute.instances.preempted` zone operation and is STOPPING
//!   (the guest's 30 s soft-off) until the test reclaims it: deleted, or TERMINATED;
//! - `$alt`, `$apiVersion` and other client parameters are ignored.
//!
//! Tests script it through [`FakeCompute`]: capacity per zone and machine type, quota errors,
//! rate limits, preemptions; and read back every mutating call it received.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

mod tpu;

/// One zone's shapes: machine types (name, vCPUs, memory MiB) and accelerator type names.
#[derive(Debug, Clone, Default)]
pub struct FakeZone {
    pub name: String,
    pub region: String,
    pub machine_types: Vec<(String, i32, i32)>,
    pub accelerators: Vec<String>,
    /// TPU slice types (`v5p-8`, …) the zone sells.
    pub tpu_types: Vec<String>,
}

#[derive(Debug, Clone)]
struct Op {
    zone: String,
    body: Value,
    /// GETs left before DONE (RUNNING after the first).
    steps: u8,
}

#[derive(Debug, Default)]
struct World {
    project: String,
    zones: Vec<FakeZone>,
    /// (zone, name) → instance resource.
    instances: BTreeMap<(String, String), Value>,
    ops: HashMap<String, Op>,
    /// requestId → operation name.
    requests: HashMap<String, String>,
    /// (zone, machine type) → VMs that can still be had; absent means unlimited.
    capacity: HashMap<(String, String), u32>,
    /// Accelerator or machine type → the quota metric a launch of it exceeds.
    quota: HashMap<String, String>,
    /// The next this-many mutating calls get a 403 rateLimitExceeded.
    rate_limited: u32,
    /// Every mutating call received: (method, path, requestId).
    calls: Vec<(String, String, Option<String>)>,
    /// Cloud TPU: nodes, queued resources, operations and capacity.
    tpu: tpu::TpuWorld,
    /// Cloud Billing Catalog SKUs served at `/v1/services/{id}/skus`.
    skus: Vec<Value>,
    /// The Billing Catalog answers 503.
    billing_down: bool,
    /// The Cloud TPU API is disabled in the project (403 on every TPU call).
    tpu_disabled: bool,
    /// Operation polls answered (`GET …/operations/{name}`).
    polls: u32,
    /// Items per list page.
    page_size: usize,
    next_id: u64,
}

/// A handle on a running fake: script it and inspect it.
#[derive(Debug, Clone)]
pub struct FakeCompute {
    world: Arc<Mutex<World>>,
    pub endpoint: String,
}

fn lock(w: &Mutex<World>) -> MutexGuard<'_, World> {
    w.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

const BASE: &str = "https://www.googleapis.com/compute/v1";

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl FakeCompute {
    /// Serve a fake project with these zones on 127.0.0.1 (a free port).
    pub async fn start(project: &str, zones: Vec<FakeZone>) -> std::io::Result<Self> {
        let world = Arc::new(Mutex::new(World {
            project: project.to_owned(),
            zones,
            page_size: 500,
            next_id: 1000,
            ..World::default()
        }));
        let app = Router::new().fallback(handle).with_state(world.clone());
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { world, endpoint })
    }

    /// Only `n` more VMs of `machine_type` in `zone` (0: a stockout).
    pub fn set_capacity(&self, zone: &str, machine_type: &str, n: u32) {
        lock(&self.world)
            .capacity
            .insert((zone.to_owned(), machine_type.to_owned()), n);
    }

    /// Launches of this machine or accelerator type exceed the quota `metric`.
    pub fn set_quota_exceeded(&self, type_name: &str, metric: &str) {
        lock(&self.world)
            .quota
            .insert(type_name.to_owned(), metric.to_owned());
    }

    /// The next `n` mutating calls are rate limited.
    pub fn rate_limit(&self, n: u32) {
        lock(&self.world).rate_limited = n;
    }

    /// Serve these Cloud Billing Catalog SKUs (JSON as the API sends them).
    pub fn set_skus(&self, skus: Vec<Value>) {
        lock(&self.world).skus = skus;
    }

    /// Disable (or enable) the Cloud TPU API in the fake project.
    pub fn set_tpu_disabled(&self, disabled: bool) {
        lock(&self.world).tpu_disabled = disabled;
    }

    /// Make the Billing Catalog unreachable (503) or reachable again.
    pub fn set_billing_down(&self, down: bool) {
        lock(&self.world).billing_down = down;
    }

    pub fn set_page_size(&self, n: usize) {
        lock(&self.world).page_size = n.max(1);
    }

    /// Create an instance directly (someone else's VM, or one of tern's from a lost store).
    pub fn put_instance(&self, zone: &str, name: &str, labels: &[(&str, &str)]) {
        let mut w = lock(&self.world);
        let id = w.next_id;
        w.next_id += 1;
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        let project = w.project.clone();
        w.instances.insert(
            (zone.to_owned(), name.to_owned()),
            json!({
                "kind": "compute#instance",
                "id": id.to_string(),
                "name": name,
                "zone": format!("{BASE}/projects/{project}/zones/{zone}"),
                "machineType": format!("{BASE}/projects/{project}/zones/{zone}/machineTypes/n1-standard-8"),
                "status": "RUNNING",
                "labels": labels,
                "creationTimestamp": now(),
            }),
        );
    }

    /// GCE preempts a spot VM: a `compute.instances.preempted` operation appears in its zone
    /// and the VM is STOPPING (the guest's 30 s ACPI soft-off) until [`Self::reclaim`].
    pub fn preempt(&self, zone: &str, name: &str) -> bool {
        let mut w = lock(&self.world);
        let key = (zone.to_owned(), name.to_owned());
        let Some(inst) = w.instances.get_mut(&key) else {
            return false;
        };
        inst["status"] = json!("STOPPING");
        let target = format!(
            "{BASE}/projects/{}/zones/{zone}/instances/{name}",
            w.project
        );
        let op = w.new_op(zone, "compute.instances.preempted", &target, None, 0);
        if let Some(o) = w.ops.get_mut(&op) {
            o.body["status"] = json!("DONE");
        }
        true
    }

    /// The end of a preemption's 30 s: the VM is deleted (`instanceTerminationAction =
    /// DELETE`) or TERMINATED (STOP).
    pub fn reclaim(&self, zone: &str, name: &str) -> bool {
        let mut w = lock(&self.world);
        let key = (zone.to_owned(), name.to_owned());
        let Some(inst) = w.instances.get(&key).cloned() else {
            return false;
        };
        if inst["scheduling"]["instanceTerminationAction"] == "DELETE" {
            w.instances.remove(&key);
        } else if let Some(i) = w.instances.get_mut(&key) {
            i["status"] = json!("TERMINATED");
        }
        true
    }

    /// Live instances: (zone, name, labels, spot).
    pub fn instances(&self) -> Vec<(String, String, BTreeMap<String, String>, bool)> {
        lock(&self.world)
            .instances
            .iter()
            .filter(|(_, i)| i["status"] != "TERMINATED")
            .map(|((z, n), i)| {
                let labels = i["labels"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                            .collect()
                    })
                    .unwrap_or_default();
                let spot = i["scheduling"]["provisioningModel"] == "SPOT";
                (z.clone(), n.clone(), labels, spot)
            })
            .collect()
    }

    /// The full resource of one instance, as `instances.get` returns it.
    pub fn instance(&self, zone: &str, name: &str) -> Option<Value> {
        lock(&self.world)
            .instances
            .get(&(zone.to_owned(), name.to_owned()))
            .cloned()
    }

    /// How many times clients polled an operation.
    pub fn polls(&self) -> u32 {
        lock(&self.world).polls
    }

    /// Every mutating call received: (method, path, requestId).
    pub fn calls(&self) -> Vec<(String, String, Option<String>)> {
        lock(&self.world).calls.clone()
    }
}

impl World {
    fn new_op(
        &mut self,
        zone: &str,
        kind: &str,
        target: &str,
        error: Option<(Value, u16)>,
        steps: u8,
    ) -> String {
        let id = self.next_id;
        self.next_id += 1;
        let name = format!("operation-{id}-{}", uuid::Uuid::new_v4().simple());
        let mut body = json!({
            "kind": "compute#operation",
            "id": id.to_string(),
            "name": name,
            "zone": format!("{BASE}/projects/{}/zones/{zone}", self.project),
            "operationType": kind,
            "targetLink": target,
            "status": "PENDING",
            "progress": 0,
            "insertTime": now(),
            "selfLink": format!("{BASE}/projects/{}/zones/{zone}/operations/{name}", self.project),
        });
        if let Some((error, status)) = error {
            body["error"] = error;
            body["httpErrorStatusCode"] = json!(status);
            body["httpErrorMessage"] = json!(if status == 503 {
                "SERVICE UNAVAILABLE"
            } else {
                "FORBIDDEN"
            });
        }
        self.ops.insert(
            name.clone(),
            Op {
                zone: zone.to_owned(),
                body,
                steps,
            },
        );
        name
    }

    fn zone(&self, name: &str) -> Option<&FakeZone> {
        self.zones.iter().find(|z| z.name == name)
    }

    /// Why a launch of `count` VMs of this shape fails, as an operation error.
    fn refusal(
        &self,
        zone: &str,
        machine: &str,
        accelerator: Option<&str>,
        count: u32,
        min: u32,
    ) -> Option<(Value, u16)> {
        for t in [Some(machine), accelerator].into_iter().flatten() {
            if let Some(metric) = self.quota.get(t) {
                let region = self
                    .zone(zone)
                    .map(|z| z.region.clone())
                    .unwrap_or_default();
                return Some((
                    json!({"errors": [{
                        "code": "QUOTA_EXCEEDED",
                        "message": format!("Quota '{metric}' exceeded.  Limit: 0.0 in region {region}."),
                        "errorDetails": [{"quotaInfo": {
                            "metricName": format!("compute.googleapis.com/{}", metric.to_lowercase()),
                            "limitName": format!("{metric}-per-project-region"),
                            "dimensions": {"region": region},
                            "limit": 0
                        }}]
                    }]}),
                    403,
                ));
            }
        }
        let left = self
            .capacity
            .get(&(zone.to_owned(), machine.to_owned()))
            .copied()
            .unwrap_or(u32::MAX);
        if left < min.max(1) || (left < count && min >= count) {
            return Some((
                json!({"errors": [{
                    "code": "ZONE_RESOURCE_POOL_EXHAUSTED",
                    "message": format!("The zone 'projects/{}/zones/{zone}' does not have enough resources available to fulfill the request.  Try a different zone, or try again later.", self.project)
                }]}),
                503,
            ));
        }
        None
    }

    fn take_capacity(&mut self, zone: &str, machine: &str, n: u32) -> u32 {
        match self
            .capacity
            .get_mut(&(zone.to_owned(), machine.to_owned()))
        {
            Some(left) => {
                let got = n.min(*left);
                *left -= got;
                got
            }
            None => n,
        }
    }

    /// A new instance resource from insert properties.
    fn create(&mut self, zone: &str, name: &str, props: &Value) {
        let id = self.next_id;
        self.next_id += 1;
        let mut inst = props.clone();
        let machine = last(props["machineType"].as_str().unwrap_or_default());
        inst["kind"] = json!("compute#instance");
        inst["id"] = json!(id.to_string());
        inst["name"] = json!(name);
        inst["zone"] = json!(format!("{BASE}/projects/{}/zones/{zone}", self.project));
        inst["machineType"] = json!(format!(
            "{BASE}/projects/{}/zones/{zone}/machineTypes/{machine}",
            self.project
        ));
        inst["status"] = json!("RUNNING");
        inst["creationTimestamp"] = json!(now());
        inst["selfLink"] = json!(format!(
            "{BASE}/projects/{}/zones/{zone}/instances/{name}",
            self.project
        ));
        self.instances
            .insert((zone.to_owned(), name.to_owned()), inst);
    }
}

/// One Cloud Billing Catalog SKU as the API sends it: USD per `unit` (`h`, `GiBy.h`).
pub fn sku(description: &str, usage: &str, unit: &str, price: f64, region: &str) -> Value {
    let units = price.trunc();
    let nanos = ((price - units) * 1e9).round();
    json!({
        "name": format!("services/6F81-5844-456A/skus/{:016x}", description.len() as u64 * 7919 + units as u64),
        "skuId": format!("{:04X}-{:04X}-{:04X}", description.len(), nanos as u64 % 65536, usage.len()),
        "description": description,
        "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": "Compute",
                     "resourceGroup": "GPU", "usageType": usage},
        "serviceRegions": [region],
        "pricingInfo": [{"pricingExpression": {"usageUnit": unit, "displayQuantity": 1,
            "tieredRates": [{"startUsageAmount": 0,
                "unitPrice": {"currencyCode": "USD", "units": format!("{units}"), "nanos": nanos}}]}}],
        "serviceProviderName": "Google",
    })
}

/// SKUs that reproduce a catalog's N1 + GPU prices in `zone`: N1 core and RAM prices solved
/// from its n1-standard-8 and n1-highmem-8 rows, each GPU's price from its one-GPU N1 offer,
/// and per-chip TPU prices from its v4/v5p/v5e/v6e slices. What a "Billing Catalog that answers with catalog prices" looks like.
pub fn skus_from_catalog(catalog: &[tern_cloud::Offer], zone: &str) -> Vec<Value> {
    use tern_cloud::Capacity;
    let find = |name: &str, gpu: Option<&str>, cap: Capacity| {
        catalog.iter().find(|o| {
            o.zone.0 == zone
                && o.capacity == cap
                && o.instance_type.name == name
                && o.accelerator().map(|a| (a.name.as_str(), a.count)) == gpu.map(|g| (g, 1))
        })
    };
    let mut out = Vec::new();
    for (cap, usage, prefix) in [
        (Capacity::OnDemand, "OnDemand", ""),
        (Capacity::Spot, "Preemptible", "Spot Preemptible "),
    ] {
        let (Some(std8), Some(hm8)) = (
            find("n1-standard-8", None, cap),
            find("n1-highmem-8", None, cap),
        ) else {
            continue;
        };
        let region = hm8.region.0.as_str();
        let ram = (hm8.price_per_hour - std8.price_per_hour) / 22.0;
        let core = (std8.price_per_hour - 30.0 * ram) / 8.0;
        out.push(sku(
            &format!("{prefix}N1 Predefined Instance Core running in Americas"),
            usage,
            "h",
            core,
            region,
        ));
        out.push(sku(
            &format!("{prefix}N1 Predefined Instance Ram running in Americas"),
            usage,
            "GiBy.h",
            ram,
            region,
        ));
        for o in catalog
            .iter()
            .filter(|o| o.zone.0 == zone && o.capacity == cap)
        {
            let slice = o
                .instance_type
                .name
                .strip_prefix("tpu-")
                .unwrap_or_default();
            if let Some((generation, chips)) = crate::billing::tpu_chips(slice) {
                let description = format!("{prefix}TPU {generation} chip running in Americas");
                let mut s = sku(
                    &description,
                    usage,
                    "h",
                    o.price_per_hour / f64::from(chips),
                    region,
                );
                s["category"]["resourceGroup"] = json!("TPU");
                if !out.iter().any(|x| x["description"] == s["description"]) {
                    out.push(s);
                }
            }
        }
        for (gpu, description) in crate::billing::GPU_SKUS {
            if let Some(o) = find("n1-highmem-8", Some(gpu), cap) {
                let price = o.price_per_hour - hm8.price_per_hour;
                out.push(sku(
                    &format!("{prefix}{description} GPU running in Americas"),
                    usage,
                    "h",
                    price,
                    region,
                ));
            }
        }
    }
    out
}

fn last(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

/// A Compute error reply: the HTTP status and the legacy `errors[]` body GCE sends.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    reason: String,
    message: String,
    /// AIP-193 status name (`ALREADY_EXISTS`): the body shape of APIs newer than Compute.
    code_name: Option<&'static str>,
}

fn error(status: StatusCode, reason: &str, message: &str) -> ApiError {
    ApiError {
        status,
        reason: reason.to_owned(),
        message: message.to_owned(),
        code_name: None,
    }
}

/// An error as AIP-193 APIs (Cloud TPU) send it: `{"error": {code, message, status}}`.
fn status_error(status: StatusCode, code_name: &'static str, message: &str) -> ApiError {
    ApiError {
        code_name: Some(code_name),
        ..error(status, "", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let domain = if self.reason == "rateLimitExceeded" {
            "usageLimits"
        } else {
            "global"
        };
        let body = match self.code_name {
            Some(name) => json!({"error": {
                "code": self.status.as_u16(),
                "message": self.message,
                "status": name,
            }}),
            None => json!({"error": {
                "code": self.status.as_u16(),
                "message": self.message,
                "errors": [{"message": self.message, "domain": domain, "reason": self.reason}]
            }}),
        };
        (self.status, axum::Json(body)).into_response()
    }
}

fn ok(v: Value) -> Response {
    (StatusCode::OK, axum::Json(v)).into_response()
}

async fn handle(
    State(world): State<Arc<Mutex<World>>>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    if method == Method::GET && path.starts_with("/v1/services/") && path.ends_with("/skus") {
        return list_skus(&lock(&world), &query);
    }
    if let Some(rest) = path.strip_prefix("/v2/projects/") {
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let mut w = lock(&world);
        if method != Method::GET {
            w.calls.push((
                method.to_string(),
                path.clone(),
                query.get("requestId").cloned(),
            ));
        }
        if w.tpu_disabled {
            let message = format!(
                "Cloud TPU API has not been used in project {} before or it is disabled.",
                w.project
            );
            return status_error(StatusCode::FORBIDDEN, "PERMISSION_DENIED", &message)
                .into_response();
        }
        return tpu::handle(&mut w, &method, rest, &query, &body)
            .unwrap_or_else(IntoResponse::into_response);
    }
    let Some(rest) = path.strip_prefix("/compute/v1/projects/") else {
        return error(
            StatusCode::NOT_FOUND,
            "notFound",
            &format!("no route {path}"),
        )
        .into_response();
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let mut w = lock(&world);
    if parts.first() != Some(&w.project.as_str()) {
        return error(
            StatusCode::NOT_FOUND,
            "notFound",
            &format!(
                "The resource 'projects/{}' was not found",
                parts.first().unwrap_or(&"")
            ),
        )
        .into_response();
    }
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return error(StatusCode::BAD_REQUEST, "parseError", &e.to_string())
                    .into_response();
            }
        }
    };
    let mutating = method != Method::GET;
    if mutating {
        w.calls.push((
            method.to_string(),
            path.clone(),
            query.get("requestId").cloned(),
        ));
        if w.rate_limited > 0 {
            w.rate_limited -= 1;
            return error(
                StatusCode::FORBIDDEN,
                "rateLimitExceeded",
                "Rate Limit Exceeded",
            )
            .into_response();
        }
        if let Some(op) = query
            .get("requestId")
            .and_then(|rid| w.requests.get(rid))
            .and_then(|n| w.ops.get(n))
        {
            return ok(op.body.clone());
        }
    }
    let resp = match (method.as_str(), &parts[1..]) {
        ("GET", ["zones"]) => list_zones(&w, &query),
        ("GET", ["zones", zone, "machineTypes"]) => list_machine_types(&w, zone, &query),
        ("GET", ["zones", zone, "acceleratorTypes"]) => list_accelerators(&w, zone, &query),
        ("GET", ["zones", zone, "instances"]) => list_instances(&w, zone, &query),
        ("GET", ["zones", zone, "instances", name]) => get_instance(&w, zone, name),
        ("GET", ["zones", zone, "operations"]) => list_operations(&w, zone, &query),
        ("GET", ["zones", _, "operations", name]) => get_operation(&mut w, name),
        ("POST", ["zones", zone, "instances"]) => insert(&mut w, zone, &query, &body),
        ("POST", ["zones", zone, "instances", "bulkInsert"]) => {
            bulk_insert(&mut w, zone, &query, &body)
        }
        ("DELETE", ["zones", zone, "instances", name]) => delete(&mut w, zone, name, &query),
        _ => {
            return error(
                StatusCode::NOT_FOUND,
                "notFound",
                &format!("no route {method} {path}"),
            )
            .into_response();
        }
    };
    resp.unwrap_or_else(IntoResponse::into_response)
}

type Reply = Result<Response, ApiError>;

/// `services.skus.list` of the Cloud Billing Catalog: `pageSize` and `pageToken` paging.
fn list_skus(w: &World, query: &HashMap<String, String>) -> Response {
    if w.billing_down {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "backendError",
            "The service is currently unavailable.",
        )
        .into_response();
    }
    let size = query
        .get("pageSize")
        .and_then(|m| m.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(5000)
        .min(w.page_size);
    let start: usize = query
        .get("pageToken")
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let end = (start + size).min(w.skus.len());
    let next = if end < w.skus.len() {
        end.to_string()
    } else {
        String::new()
    };
    ok(json!({"skus": w.skus.get(start..end).unwrap_or_default(), "nextPageToken": next}))
}

fn known_zone<'a>(w: &'a World, zone: &str) -> Result<&'a FakeZone, ApiError> {
    w.zone(zone).ok_or_else(|| {
        error(
            StatusCode::NOT_FOUND,
            "notFound",
            &format!(
                "The resource 'projects/{}/zones/{zone}' was not found",
                w.project
            ),
        )
    })
}

/// One page of `items`, with `nextPageToken` when more follow.
fn page(w: &World, kind: &str, items: Vec<Value>, query: &HashMap<String, String>) -> Response {
    let size = query
        .get("maxResults")
        .and_then(|m| m.parse::<usize>().ok())
        .unwrap_or(w.page_size)
        .min(w.page_size);
    let start: usize = query
        .get("pageToken")
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let end = (start + size).min(items.len());
    let mut out = json!({"kind": kind, "items": items.get(start..end).unwrap_or_default()});
    if end < items.len() {
        out["nextPageToken"] = json!(end.to_string());
    }
    ok(out)
}

fn list_zones(w: &World, query: &HashMap<String, String>) -> Reply {
    let items = w
        .zones
        .iter()
        .map(|z| {
            json!({"kind": "compute#zone", "name": z.name, "status": "UP",
                   "region": format!("{BASE}/projects/{}/regions/{}", w.project, z.region)})
        })
        .collect();
    Ok(page(w, "compute#zoneList", items, query))
}

fn list_machine_types(w: &World, zone: &str, query: &HashMap<String, String>) -> Reply {
    let z = known_zone(w, zone)?;
    let items = z
        .machine_types
        .iter()
        .map(|(name, cpus, mem)| {
            json!({"kind": "compute#machineType", "name": name, "guestCpus": cpus,
                   "memoryMb": mem, "zone": zone})
        })
        .collect();
    Ok(page(w, "compute#machineTypeList", items, query))
}

fn list_accelerators(w: &World, zone: &str, query: &HashMap<String, String>) -> Reply {
    let z = known_zone(w, zone)?;
    let items = z
        .accelerators
        .iter()
        .map(|name| {
            json!({"kind": "compute#acceleratorType", "name": name, "zone": zone,
                   "maximumCardsPerInstance": 8})
        })
        .collect();
    Ok(page(w, "compute#acceleratorTypeList", items, query))
}

/// A list filter tern sends: `FIELD = "VALUE"` terms joined by `AND` (or spaces), where
/// FIELD is `labels.KEY` or a top-level string field. Anything else is a 400, as on GCE.
fn matches(filter: &str, item: &Value) -> Result<bool, ApiError> {
    let filter = filter.trim();
    if filter.is_empty() {
        return Ok(true);
    }
    for term in filter.split(" AND ") {
        let Some((field, value)) = term.split_once('=') else {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "invalid",
                &format!("Invalid value for field 'filter': '{filter}'"),
            ));
        };
        let field = field.trim().trim_matches(|c| c == '(' || c == ')');
        let value = value
            .trim()
            .trim_matches(|c| c == '(' || c == ')')
            .trim_matches('"');
        let actual = match field.strip_prefix("labels.") {
            Some(key) => item["labels"][key].as_str(),
            None => item[field].as_str(),
        };
        if actual != Some(value) {
            return Ok(false);
        }
    }
    Ok(true)
}

fn filtered(
    items: impl Iterator<Item = Value>,
    query: &HashMap<String, String>,
) -> Result<Vec<Value>, ApiError> {
    let filter = query.get("filter").map(String::as_str).unwrap_or_default();
    let mut out = Vec::new();
    for i in items {
        if matches(filter, &i)? {
            out.push(i);
        }
    }
    Ok(out)
}

fn list_instances(w: &World, zone: &str, query: &HashMap<String, String>) -> Reply {
    known_zone(w, zone)?;
    let items = w
        .instances
        .iter()
        .filter(|((z, _), _)| z == zone)
        .map(|(_, i)| i.clone());
    let items = filtered(items, query)?;
    Ok(page(w, "compute#instanceList", items, query))
}

fn get_instance(w: &World, zone: &str, name: &str) -> Reply {
    w.instances
        .get(&(zone.to_owned(), name.to_owned()))
        .map(|i| ok(i.clone()))
        .ok_or_else(|| {
            error(
                StatusCode::NOT_FOUND,
                "notFound",
                &format!(
                    "The resource 'projects/{}/zones/{zone}/instances/{name}' was not found",
                    w.project
                ),
            )
        })
}

fn list_operations(w: &World, zone: &str, query: &HashMap<String, String>) -> Reply {
    known_zone(w, zone)?;
    let mut ops: Vec<&Op> = w.ops.values().filter(|o| o.zone == zone).collect();
    ops.sort_by(|a, b| a.body["id"].as_str().cmp(&b.body["id"].as_str()));
    let items = filtered(ops.into_iter().map(|o| o.body.clone()), query)?;
    Ok(page(w, "compute#operationList", items, query))
}

fn get_operation(w: &mut World, name: &str) -> Reply {
    w.polls += 1;
    let project = w.project.clone();
    let op = w.ops.get_mut(name).ok_or_else(|| {
        error(
            StatusCode::NOT_FOUND,
            "notFound",
            &format!("The resource 'projects/{project}/zones/-/operations/{name}' was not found"),
        )
    })?;
    if op.body["status"] != "DONE" {
        if op.steps == 0 {
            op.body["status"] = json!("DONE");
            op.body["progress"] = json!(100);
            op.body["endTime"] = json!(now());
        } else {
            op.steps -= 1;
            op.body["status"] = json!("RUNNING");
        }
    }
    Ok(ok(op.body.clone()))
}

fn remember(w: &mut World, query: &HashMap<String, String>, op: &str) -> Response {
    if let Some(rid) = query.get("requestId") {
        w.requests.insert(rid.clone(), op.to_owned());
    }
    ok(w.ops[op].body.clone())
}

fn check_request_id(query: &HashMap<String, String>) -> Result<(), ApiError> {
    match query.get("requestId") {
        Some(rid) => match uuid::Uuid::parse_str(rid) {
            Ok(u) if !u.is_nil() => Ok(()),
            _ => Err(error(
                StatusCode::BAD_REQUEST,
                "invalid",
                &format!(
                    "Invalid value for field 'requestId': '{rid}'. Must be a valid UUID (and not all zeros)."
                ),
            )),
        },
        None => Ok(()),
    }
}

fn accelerator_of(props: &Value) -> Option<String> {
    props["guestAccelerators"][0]["acceleratorType"]
        .as_str()
        .map(|t| last(t).to_owned())
}

fn insert(w: &mut World, zone: &str, query: &HashMap<String, String>, body: &Value) -> Reply {
    known_zone(w, zone)?;
    check_request_id(query)?;
    let name = body["name"].as_str().unwrap_or_default().to_owned();
    if name.is_empty() {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "required",
            "Required field 'resource.name' not specified",
        ));
    }
    if w.instances.contains_key(&(zone.to_owned(), name.clone())) {
        return Err(error(
            StatusCode::CONFLICT,
            "alreadyExists",
            &format!(
                "The resource 'projects/{}/zones/{zone}/instances/{name}' already exists",
                w.project
            ),
        ));
    }
    let machine = last(body["machineType"].as_str().unwrap_or_default()).to_owned();
    let target = format!(
        "{BASE}/projects/{}/zones/{zone}/instances/{name}",
        w.project
    );
    let refusal = w.refusal(zone, &machine, accelerator_of(body).as_deref(), 1, 1);
    if refusal.is_none() {
        w.take_capacity(zone, &machine, 1);
        w.create(zone, &name, body);
    }
    let op = w.new_op(zone, "insert", &target, refusal, 1);
    Ok(remember(w, query, &op))
}

fn bulk_insert(w: &mut World, zone: &str, query: &HashMap<String, String>, body: &Value) -> Reply {
    known_zone(w, zone)?;
    check_request_id(query)?;
    let num = |v: &Value| {
        v.as_str()
            .and_then(|s| s.parse::<u32>().ok())
            .or_else(|| v.as_u64().and_then(|n| u32::try_from(n).ok()))
    };
    let count = num(&body["count"]).unwrap_or(0);
    let min = num(&body["minCount"]).unwrap_or(count);
    let pattern = body["namePattern"].as_str().unwrap_or_default().to_owned();
    let hashes = pattern.chars().filter(|c| *c == '#').count();
    if count == 0 || min > count || hashes == 0 {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "bulkInsert needs count ≥ minCount ≥ 1 and a namePattern with #",
        ));
    }
    let props = body["instanceProperties"].clone();
    let machine = props["machineType"].as_str().unwrap_or_default().to_owned();
    let target = format!("{BASE}/projects/{}/zones/{zone}/instances", w.project);
    let refusal = w.refusal(
        zone,
        &machine,
        accelerator_of(&props).as_deref(),
        count,
        min,
    );
    if refusal.is_none() {
        let got = w.take_capacity(zone, &machine, count);
        let mut n = 0;
        let mut made = 0;
        while made < got {
            n += 1;
            let name = pattern.replace(&"#".repeat(hashes), &format!("{n:0hashes$}"));
            if w.instances.contains_key(&(zone.to_owned(), name.clone())) {
                continue;
            }
            w.create(zone, &name, &props);
            made += 1;
        }
    }
    let op = w.new_op(zone, "bulkInsert", &target, refusal, 1);
    Ok(remember(w, query, &op))
}

fn delete(w: &mut World, zone: &str, name: &str, query: &HashMap<String, String>) -> Reply {
    check_request_id(query)?;
    get_instance(w, zone, name)?;
    w.instances.remove(&(zone.to_owned(), name.to_owned()));
    let target = format!(
        "{BASE}/projects/{}/zones/{zone}/instances/{name}",
        w.project
    );
    let op = w.new_op(zone, "delete", &target, None, 1);
    Ok(remember(w, query, &op))
}
