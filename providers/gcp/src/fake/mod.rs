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
//! - an insert naming an instance template (`sourceInstanceTemplate`) takes the template's
//!   properties under its own fields, and fails 404 when the template does not exist;
//! - `$alt`, `$apiVersion` and other client parameters are ignored.
//!
//! Tests script it through [`FakeCompute`]: capacity per zone and machine type, quota errors
//! and regional GPU quotas (`regions.get`, enforced on inserts),
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

mod billing;
mod quotas;
mod reads;
mod templates;
mod tpu;
mod writes;

use billing::list_skus;
pub use billing::{sku, skus_from_catalog};
use quotas::get_region;
use reads::*;
use templates::{get_template, with_template};
use writes::*;

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
    /// (region of a regional template, name) → instance template resource.
    templates: BTreeMap<(Option<String>, String), Value>,
    ops: HashMap<String, Op>,
    /// requestId → operation name.
    requests: HashMap<String, String>,
    /// (zone, machine type) → VMs that can still be had; absent means unlimited.
    capacity: HashMap<(String, String), u32>,
    /// Accelerator or machine type → the quota metric a launch of it exceeds.
    quota: HashMap<String, String>,
    /// (region, metric) → the project's limit, listed by `regions.get` and enforced.
    region_quotas: BTreeMap<(String, String), f64>,
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
        return tpu_call(&mut lock(&world), &method, &path, rest, &query, &body);
    }
    let Some(rest) = path.strip_prefix("/compute/v1/projects/") else {
        let message = format!("no route {path}");
        return error(StatusCode::NOT_FOUND, "notFound", &message).into_response();
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let mut w = lock(&world);
    compute_call(&mut w, &method, &path, &parts, &query, &body)
        .unwrap_or_else(IntoResponse::into_response)
}

/// A Cloud TPU call: recorded when it mutates, refused while the API is disabled.
fn tpu_call(
    w: &mut World,
    method: &Method,
    path: &str,
    rest: &str,
    query: &HashMap<String, String>,
    body: &Value,
) -> Response {
    if method != Method::GET {
        let id = query.get("requestId").cloned();
        w.calls.push((method.to_string(), path.to_owned(), id));
    }
    if w.tpu_disabled {
        let message = format!(
            "Cloud TPU API has not been used in project {} before or it is disabled.",
            w.project
        );
        return status_error(StatusCode::FORBIDDEN, "PERMISSION_DENIED", &message).into_response();
    }
    tpu::handle(w, method, rest, query, body).unwrap_or_else(IntoResponse::into_response)
}

/// A Compute Engine call on `parts` (the path after `/compute/v1/projects/`): the project
/// checked, the body parsed, a mutating call recorded, rate-limited or answered from its
/// `requestId`, then routed.
fn compute_call(
    w: &mut World,
    method: &Method,
    path: &str,
    parts: &[&str],
    query: &HashMap<String, String>,
    body: &Bytes,
) -> Reply {
    if parts.first() != Some(&w.project.as_str()) {
        let message = format!(
            "The resource 'projects/{}' was not found",
            parts.first().unwrap_or(&"")
        );
        return Err(error(StatusCode::NOT_FOUND, "notFound", &message));
    }
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(body)
            .map_err(|e| error(StatusCode::BAD_REQUEST, "parseError", &e.to_string()))?
    };
    if method != Method::GET {
        let id = query.get("requestId").cloned();
        w.calls.push((method.to_string(), path.to_owned(), id));
        if w.rate_limited > 0 {
            w.rate_limited -= 1;
            return Err(error(
                StatusCode::FORBIDDEN,
                "rateLimitExceeded",
                "Rate Limit Exceeded",
            ));
        }
        if let Some(op) = query
            .get("requestId")
            .and_then(|rid| w.requests.get(rid))
            .and_then(|n| w.ops.get(n))
        {
            return Ok(ok(op.body.clone()));
        }
    }
    route(w, method, path, &parts[1..], query, &body)
}

fn route(
    w: &mut World,
    method: &Method,
    path: &str,
    parts: &[&str],
    query: &HashMap<String, String>,
    body: &Value,
) -> Reply {
    match (method.as_str(), parts) {
        ("GET", ["zones"]) => list_zones(w, query),
        ("GET", ["regions", region]) => get_region(w, region),
        ("GET", ["global", "instanceTemplates", name]) => get_template(w, None, name),
        ("GET", ["regions", region, "instanceTemplates", name]) => {
            get_template(w, Some(region), name)
        }
        ("GET", ["zones", zone, "machineTypes"]) => list_machine_types(w, zone, query),
        ("GET", ["zones", zone, "acceleratorTypes"]) => list_accelerators(w, zone, query),
        ("GET", ["zones", zone, "instances"]) => list_instances(w, zone, query),
        ("GET", ["zones", zone, "instances", name]) => get_instance(w, zone, name),
        ("GET", ["zones", zone, "operations"]) => list_operations(w, zone, query),
        ("GET", ["zones", _, "operations", name]) => get_operation(w, name),
        ("POST", ["zones", zone, "instances"]) => insert(w, zone, query, body),
        ("POST", ["zones", zone, "instances", "bulkInsert"]) => bulk_insert(w, zone, query, body),
        ("DELETE", ["zones", zone, "instances", name]) => delete(w, zone, name, query),
        _ => Err(error(
            StatusCode::NOT_FOUND,
            "notFound",
            &format!("no route {method} {path}"),
        )),
    }
}

type Reply = Result<Response, ApiError>;
