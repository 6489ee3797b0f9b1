//! The fake's mutating calls: `insert`, `bulkInsert` and `delete`, each answered with an
//! operation, repeated `requestId`s answered with the first call's.

use super::*;

pub(super) fn remember(w: &mut World, query: &HashMap<String, String>, op: &str) -> Response {
    if let Some(rid) = query.get("requestId") {
        w.requests.insert(rid.clone(), op.to_owned());
    }
    ok(w.ops[op].body.clone())
}

pub(super) fn check_request_id(query: &HashMap<String, String>) -> Result<(), ApiError> {
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

pub(super) fn accelerator_of(props: &Value) -> Option<String> {
    props["guestAccelerators"][0]["acceleratorType"]
        .as_str()
        .map(|t| last(t).to_owned())
}

pub(super) fn insert(
    w: &mut World,
    zone: &str,
    query: &HashMap<String, String>,
    body: &Value,
) -> Reply {
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
    let template = query.get("sourceInstanceTemplate").map(String::as_str);
    let body = &with_template(w, template, body)?;
    let machine = last(body["machineType"].as_str().unwrap_or_default()).to_owned();
    let target = format!(
        "{BASE}/projects/{}/zones/{zone}/instances/{name}",
        w.project
    );
    let refusal = w
        .quota_room(zone, body, 1)
        .1
        .or_else(|| w.refusal(zone, &machine, accelerator_of(body).as_deref(), 1, 1));
    if refusal.is_none() {
        w.take_capacity(zone, &machine, 1);
        w.create(zone, &name, body);
    }
    let op = w.new_op(zone, "insert", &target, refusal, 1);
    Ok(remember(w, query, &op))
}

pub(super) fn bulk_insert(
    w: &mut World,
    zone: &str,
    query: &HashMap<String, String>,
    body: &Value,
) -> Reply {
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
    let template = body["sourceInstanceTemplate"].as_str();
    let props = with_template(w, template, &body["instanceProperties"])?;
    let machine = props["machineType"].as_str().unwrap_or_default().to_owned();
    let target = format!("{BASE}/projects/{}/zones/{zone}/instances", w.project);
    let (fits, over_quota) = w.quota_room(zone, &props, min);
    let refusal = over_quota.or_else(|| {
        w.refusal(
            zone,
            &machine,
            accelerator_of(&props).as_deref(),
            count,
            min,
        )
    });
    if refusal.is_none() {
        let got = w.take_capacity(zone, &machine, count.min(fits));
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

pub(super) fn delete(
    w: &mut World,
    zone: &str,
    name: &str,
    query: &HashMap<String, String>,
) -> Reply {
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
