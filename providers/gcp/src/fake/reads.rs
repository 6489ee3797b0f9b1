//! The fake's read calls: zones, machine and accelerator types, instances and operations,
//! with label filters and pages as Compute Engine serves them.

use super::*;

pub(super) fn known_zone<'a>(w: &'a World, zone: &str) -> Result<&'a FakeZone, ApiError> {
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
pub(super) fn page(
    w: &World,
    kind: &str,
    items: Vec<Value>,
    query: &HashMap<String, String>,
) -> Response {
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

pub(super) fn list_zones(w: &World, query: &HashMap<String, String>) -> Reply {
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

pub(super) fn list_machine_types(w: &World, zone: &str, query: &HashMap<String, String>) -> Reply {
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

pub(super) fn list_accelerators(w: &World, zone: &str, query: &HashMap<String, String>) -> Reply {
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
pub(super) fn matches(filter: &str, item: &Value) -> Result<bool, ApiError> {
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

pub(super) fn filtered(
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

pub(super) fn list_instances(w: &World, zone: &str, query: &HashMap<String, String>) -> Reply {
    known_zone(w, zone)?;
    let items = w
        .instances
        .iter()
        .filter(|((z, _), _)| z == zone)
        .map(|(_, i)| i.clone());
    let items = filtered(items, query)?;
    Ok(page(w, "compute#instanceList", items, query))
}

pub(super) fn get_instance(w: &World, zone: &str, name: &str) -> Reply {
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

pub(super) fn list_operations(w: &World, zone: &str, query: &HashMap<String, String>) -> Reply {
    known_zone(w, zone)?;
    let mut ops: Vec<&Op> = w.ops.values().filter(|o| o.zone == zone).collect();
    ops.sort_by(|a, b| a.body["id"].as_str().cmp(&b.body["id"].as_str()));
    let items = filtered(ops.into_iter().map(|o| o.body.clone()), query)?;
    Ok(page(w, "compute#operationList", items, query))
}

pub(super) fn get_operation(w: &mut World, name: &str) -> Reply {
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
