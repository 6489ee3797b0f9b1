//! Instance templates: `instanceTemplates.get` (global and regional), and what an insert takes
//! from the template it names. As in GCE, a field the request sets replaces the template's
//! whole (so disks sent with a request replace all of the template's disks).

use super::*;

/// (region for a regional template, name) of a `…/instanceTemplates/NAME` reference.
fn key_of(reference: &str) -> Option<(Option<String>, String)> {
    let parts: Vec<&str> = reference.split('/').collect();
    let after = |key: &str| {
        let i = parts.iter().position(|p| *p == key)?;
        parts
            .get(i + 1)
            .filter(|s| !s.is_empty())
            .map(|s| (*s).to_owned())
    };
    Some((after("regions"), after("instanceTemplates")?))
}

fn not_found(w: &World, region: Option<&str>, name: &str) -> ApiError {
    let scope = region.map_or("global".to_owned(), |r| format!("regions/{r}"));
    error(
        StatusCode::NOT_FOUND,
        "notFound",
        &format!(
            "The resource 'projects/{}/{scope}/instanceTemplates/{name}' was not found",
            w.project
        ),
    )
}

pub(super) fn get_template(w: &World, region: Option<&str>, name: &str) -> Reply {
    w.templates
        .get(&(region.map(str::to_owned), name.to_owned()))
        .map(|t| ok(t.clone()))
        .ok_or_else(|| not_found(w, region, name))
}

/// The properties an insert makes its instance from: the named template's, with the
/// request's own fields over them; the request's alone when it names none.
pub(super) fn with_template(
    w: &World,
    reference: Option<&str>,
    props: &Value,
) -> Result<Value, ApiError> {
    let Some(reference) = reference else {
        return Ok(props.clone());
    };
    let (region, name) = key_of(reference).ok_or_else(|| {
        error(
            StatusCode::BAD_REQUEST,
            "invalid",
            &format!("Invalid value for field 'sourceInstanceTemplate': '{reference}'"),
        )
    })?;
    let template = w
        .templates
        .get(&(region.clone(), name.clone()))
        .ok_or_else(|| not_found(w, region.as_deref(), &name))?;
    let mut merged = match &template["properties"] {
        Value::Object(o) => o.clone(),
        _ => serde_json::Map::new(),
    };
    if let Value::Object(own) = props {
        for (k, v) in own {
            merged.insert(k.clone(), v.clone());
        }
    }
    Ok(Value::Object(merged))
}

impl FakeCompute {
    /// An instance template with these `properties` (as `instanceTemplates.get` shows them):
    /// global, or of `region`.
    pub fn put_template(&self, region: Option<&str>, name: &str, properties: Value) {
        let mut w = lock(&self.world);
        let scope = region.map_or("global".to_owned(), |r| format!("regions/{r}"));
        let resource = json!({
            "kind": "compute#instanceTemplate",
            "name": name,
            "selfLink": format!("{BASE}/projects/{}/{scope}/instanceTemplates/{name}", w.project),
            "properties": properties,
        });
        w.templates
            .insert((region.map(str::to_owned), name.to_owned()), resource);
    }
}
