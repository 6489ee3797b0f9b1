//! The fake's Cloud Billing Catalog: SKUs built from a catalog's offers, listed by service.

use super::*;

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

/// `services.skus.list` of the Cloud Billing Catalog: `pageSize` and `pageToken` paging.
pub(super) fn list_skus(w: &World, query: &HashMap<String, String>) -> Response {
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
