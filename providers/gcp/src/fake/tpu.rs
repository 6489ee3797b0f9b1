//! The Cloud TPU v2 REST surface tern uses: accelerator types, nodes and queued resources, with
//! AIP-151 operations (`done`, then `response` or `error`) and AIP-193 errors.
//!
//! - `nodes.create`: CREATING, READY when its operation is done; a stockout ends the
//!   operation with RESOURCE_EXHAUSTED; a taken node id is ALREADY_EXISTS.
//! - `queuedResources.create`: ACCEPTED at once (requestId de-duplicated); the test moves it
//!   to WAITING_FOR_RESOURCES or ACTIVE (which creates its node), as capacity would.
//! - a preempted spot node is PREEMPTED and stays (holding quota) until deleted; a queued
//!   resource whose node is preempted is SUSPENDED.
//! - `queuedResources.delete` needs `force=true` while its node exists.

use std::collections::{BTreeMap, HashMap};

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::{ApiError, FakeCompute, World, lock, now, ok, status_error};

#[derive(Debug, Default)]
pub(super) struct TpuWorld {
    /// (zone, node id) → node.
    nodes: BTreeMap<(String, String), Value>,
    /// (zone, queued resource id) → queued resource.
    queued: BTreeMap<(String, String), Value>,
    /// Operation name → (operation when done, GETs left before done).
    ops: HashMap<String, (Value, u8)>,
    /// requestId → operation name.
    requests: HashMap<String, String>,
    /// (zone, slice type) → slices that can still be had; absent means unlimited.
    capacity: HashMap<(String, String), u32>,
    next: u64,
}

const NODE_TYPE: &str = "type.googleapis.com/google.cloud.tpu.v2.Node";
const QR_TYPE: &str = "type.googleapis.com/google.cloud.tpu.v2.QueuedResource";
const EMPTY_TYPE: &str = "type.googleapis.com/google.protobuf.Empty";

impl FakeCompute {
    /// Only `n` more slices of `slice_type` (`v5p-8`) in `zone`.
    pub fn set_tpu_capacity(&self, zone: &str, slice_type: &str, n: u32) {
        lock(&self.world)
            .tpu
            .capacity
            .insert((zone.to_owned(), slice_type.to_owned()), n);
    }

    /// A queued resource waits for capacity (WAITING_FOR_RESOURCES).
    pub fn wait_queued(&self, zone: &str, id: &str) -> bool {
        let mut w = lock(&self.world);
        let Some(qr) = w.tpu.queued.get_mut(&(zone.to_owned(), id.to_owned())) else {
            return false;
        };
        qr["state"] = json!({"state": "WAITING_FOR_RESOURCES"});
        true
    }

    /// Capacity arrives for a queued resource: ACTIVE, and its node exists, READY.
    pub fn provision_queued(&self, zone: &str, id: &str) -> bool {
        let mut w = lock(&self.world);
        let project = w.project.clone();
        let key = (zone.to_owned(), id.to_owned());
        let Some(qr) = w.tpu.queued.get_mut(&key) else {
            return false;
        };
        qr["state"] = json!({"state": "ACTIVE"});
        let spec = qr["tpu"]["nodeSpec"][0].clone();
        let node_id = spec["nodeId"].as_str().unwrap_or(id).to_owned();
        let mut node = spec["node"].clone();
        node["name"] = json!(format!(
            "projects/{project}/locations/{zone}/nodes/{node_id}"
        ));
        node["state"] = json!("READY");
        node["createTime"] = json!(now());
        node["queuedResource"] = json!(format!(
            "projects/{project}/locations/{zone}/queuedResources/{id}"
        ));
        w.tpu.nodes.insert((zone.to_owned(), node_id), node);
        true
    }

    /// GCP preempts a spot node: PREEMPTED (still there, holding quota); its queued resource,
    /// if any, SUSPENDED.
    pub fn preempt_node(&self, zone: &str, id: &str) -> bool {
        let mut w = lock(&self.world);
        let Some(node) = w.tpu.nodes.get_mut(&(zone.to_owned(), id.to_owned())) else {
            return false;
        };
        node["state"] = json!("PREEMPTED");
        let owner = node["queuedResource"]
            .as_str()
            .map(|q| super::last(q).to_owned());
        if let Some(q) = owner.and_then(|q| w.tpu.queued.get_mut(&(zone.to_owned(), q))) {
            q["state"] = json!({"state": "SUSPENDED"});
        }
        true
    }

    /// TPU nodes: (zone, id, state).
    pub fn tpu_nodes(&self) -> Vec<(String, String, String)> {
        lock(&self.world)
            .tpu
            .nodes
            .iter()
            .map(|((z, n), v)| {
                (
                    z.clone(),
                    n.clone(),
                    v["state"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    /// Queued resources: (zone, id, state, the node spec's node).
    pub fn queued_resources(&self) -> Vec<(String, String, String, Value)> {
        lock(&self.world)
            .tpu
            .queued
            .iter()
            .map(|((z, n), v)| {
                let state = v["state"]["state"].as_str().unwrap_or_default().to_owned();
                (z.clone(), n.clone(), state, v.clone())
            })
            .collect()
    }
}

fn not_found(what: &str) -> ApiError {
    status_error(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        &format!("Resource '{what}' was not found"),
    )
}

/// Handles `/v2/projects/{rest}`.
pub(super) fn handle(
    w: &mut World,
    method: &Method,
    rest: &str,
    query: &HashMap<String, String>,
    body: &Value,
) -> Result<Response, ApiError> {
    let parts: Vec<&str> = rest.split('/').collect();
    let project = w.project.clone();
    let [p, "locations", zone, tail @ ..] = parts.as_slice() else {
        return Err(not_found(rest));
    };
    if *p != project {
        return Err(not_found(&format!("projects/{p}")));
    }
    let zone = (*zone).to_owned();
    let tpu_types = w
        .zone(&zone)
        .map(|z| z.tpu_types.clone())
        .ok_or_else(|| not_found(&format!("projects/{project}/locations/{zone}")))?;
    let parent = format!("projects/{project}/locations/{zone}");
    let page_size = w.page_size;
    let t = &mut w.tpu;
    match (method.as_str(), tail) {
        ("GET", ["acceleratorTypes"]) => {
            let items: Vec<Value> = tpu_types
                .iter()
                .map(|t| json!({"name": format!("{parent}/acceleratorTypes/{t}"), "type": t}))
                .collect();
            Ok(page("acceleratorTypes", items, query, page_size))
        }
        ("GET", ["nodes"]) => {
            let items = t
                .nodes
                .iter()
                .filter(|((z, _), _)| *z == zone)
                .map(|(_, n)| n.clone())
                .collect();
            Ok(page("nodes", items, query, page_size))
        }
        ("GET", ["queuedResources"]) => {
            let items = t
                .queued
                .iter()
                .filter(|((z, _), _)| *z == zone)
                .map(|(_, q)| q.clone())
                .collect();
            Ok(page("queuedResources", items, query, page_size))
        }
        ("GET", ["operations", name]) => t.poll(&format!("{parent}/operations/{name}")),
        ("POST", ["nodes"]) => t.create_node(&parent, &zone, query, body, &tpu_types),
        ("POST", ["queuedResources"]) => t.create_queued(&parent, &zone, query, body),
        ("DELETE", ["nodes", id]) => {
            t.nodes
                .remove(&(zone.clone(), (*id).to_owned()))
                .ok_or_else(|| not_found(&format!("{parent}/nodes/{id}")))?;
            Ok(t.operation(&parent, json!({"@type": EMPTY_TYPE}), None, 1))
        }
        ("DELETE", ["queuedResources", id]) => t.delete_queued(&parent, &zone, id, query),
        _ => Err(not_found(rest)),
    }
}

fn page(field: &str, items: Vec<Value>, query: &HashMap<String, String>, max: usize) -> Response {
    let size = query
        .get("pageSize")
        .and_then(|m| m.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(max)
        .min(max);
    let start: usize = query
        .get("pageToken")
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let end = (start + size).min(items.len());
    let next = if end < items.len() {
        end.to_string()
    } else {
        String::new()
    };
    ok(json!({field: items.get(start..end).unwrap_or_default(), "nextPageToken": next}))
}

impl TpuWorld {
    /// A new operation that is done after `steps` polls, with `response` or `error`; the
    /// reply to the call that started it.
    fn operation(
        &mut self,
        parent: &str,
        response: Value,
        error: Option<Value>,
        steps: u8,
    ) -> Response {
        let name = self.start(parent, response, error, steps);
        ok(json!({"name": name, "done": false}))
    }

    fn start(&mut self, parent: &str, response: Value, error: Option<Value>, steps: u8) -> String {
        self.next += 1;
        let name = format!(
            "{parent}/operations/operation-{}-{}",
            self.next,
            uuid::Uuid::new_v4().simple()
        );
        let mut done = json!({"name": name, "done": true});
        match error {
            Some(e) => done["error"] = e,
            None => done["response"] = response,
        }
        self.ops.insert(name.clone(), (done, steps));
        name
    }

    fn poll(&mut self, name: &str) -> Result<Response, ApiError> {
        let (done, steps) = self.ops.get_mut(name).ok_or_else(|| not_found(name))?;
        if *steps > 0 {
            *steps -= 1;
            return Ok(ok(json!({"name": name, "done": false})));
        }
        Ok(ok(done.clone()))
    }

    fn create_node(
        &mut self,
        parent: &str,
        zone: &str,
        query: &HashMap<String, String>,
        body: &Value,
        types: &[String],
    ) -> Result<Response, ApiError> {
        let id = query.get("nodeId").cloned().unwrap_or_default();
        if id.is_empty() {
            return Err(status_error(
                StatusCode::BAD_REQUEST,
                "INVALID_ARGUMENT",
                "node_id is required",
            ));
        }
        if self.nodes.contains_key(&(zone.to_owned(), id.clone())) {
            return Err(status_error(
                StatusCode::CONFLICT,
                "ALREADY_EXISTS",
                &format!("{parent}/nodes/{id} already exists"),
            ));
        }
        let slice = body["acceleratorType"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if !types.contains(&slice) {
            return Err(status_error(
                StatusCode::BAD_REQUEST,
                "INVALID_ARGUMENT",
                &format!("accelerator type {slice:?} is not offered in {zone}"),
            ));
        }
        if !self.take(zone, &slice) {
            let error = json!({"code": 8, "message": format!("There is no more capacity in the zone \"{zone}\"; you can try in another zone where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x1]")});
            return Ok(self.operation(parent, Value::Null, Some(error), 1));
        }
        let mut node = body.clone();
        node["name"] = json!(format!("{parent}/nodes/{id}"));
        node["state"] = json!("READY");
        node["createTime"] = json!(now());
        self.nodes.insert((zone.to_owned(), id), node.clone());
        node["@type"] = json!(NODE_TYPE);
        Ok(self.operation(parent, node, None, 1))
    }

    /// Takes one slice of capacity; false on a stockout.
    fn take(&mut self, zone: &str, slice: &str) -> bool {
        match self.capacity.get_mut(&(zone.to_owned(), slice.to_owned())) {
            Some(0) => false,
            Some(n) => {
                *n -= 1;
                true
            }
            None => true,
        }
    }

    fn create_queued(
        &mut self,
        parent: &str,
        zone: &str,
        query: &HashMap<String, String>,
        body: &Value,
    ) -> Result<Response, ApiError> {
        if let Some(op) = query
            .get("requestId")
            .and_then(|r| self.requests.get(r))
            .cloned()
        {
            return Ok(ok(json!({"name": op, "done": false})));
        }
        let id = query.get("queuedResourceId").cloned().unwrap_or_default();
        if self.queued.contains_key(&(zone.to_owned(), id.clone())) {
            return Err(status_error(
                StatusCode::CONFLICT,
                "ALREADY_EXISTS",
                &format!("{parent}/queuedResources/{id} already exists"),
            ));
        }
        if body["queueingPolicy"]["validUntilDuration"]
            .as_str()
            .is_none()
        {
            return Err(status_error(
                StatusCode::BAD_REQUEST,
                "INVALID_ARGUMENT",
                "tern's fake expects queueingPolicy.validUntilDuration",
            ));
        }
        let mut qr = body.clone();
        qr["name"] = json!(format!("{parent}/queuedResources/{id}"));
        qr["state"] = json!({"state": "ACCEPTED"});
        qr["createTime"] = json!(now());
        self.queued.insert((zone.to_owned(), id), qr.clone());
        qr["@type"] = json!(QR_TYPE);
        let name = self.start(parent, qr, None, 1);
        if let Some(rid) = query.get("requestId") {
            self.requests.insert(rid.clone(), name.clone());
        }
        Ok(ok(json!({"name": name, "done": false})))
    }

    fn delete_queued(
        &mut self,
        parent: &str,
        zone: &str,
        id: &str,
        query: &HashMap<String, String>,
    ) -> Result<Response, ApiError> {
        let key = (zone.to_owned(), id.to_owned());
        if !self.queued.contains_key(&key) {
            return Err(not_found(&format!("{parent}/queuedResources/{id}")));
        }
        let qr_name = format!("{parent}/queuedResources/{id}");
        let has_node = self.nodes.values().any(|n| n["queuedResource"] == qr_name);
        if has_node && query.get("force").map(String::as_str) != Some("true") {
            return Err(status_error(
                StatusCode::BAD_REQUEST,
                "FAILED_PRECONDITION",
                "the queued resource has a node; delete it first or set force",
            ));
        }
        self.nodes.retain(|_, n| n["queuedResource"] != qr_name);
        self.queued.remove(&key);
        Ok(self.operation(parent, json!({"@type": EMPTY_TYPE}), None, 1))
    }
}
