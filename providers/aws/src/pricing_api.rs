//! On-demand prices from the AWS Price List Query API (`pricing:GetProducts`).
//!
//! The bundled catalog is the baseline; when the Pricing API answers, its prices replace the
//! catalog's for the instance types a region offers. The API is served from a few regions
//! only, so its client always talks to [`ENDPOINT_REGION`], whatever tern's home region is.
//!
//! Each `PriceList` entry is a JSON document (one product with its terms). The on-demand
//! hourly price sits under `terms.OnDemand.<term>.priceDimensions.<dimension>.pricePerUnit.USD`
//! for a dimension whose `unit` is `Hrs`.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_pricing::Client;
use aws_sdk_pricing::types::{Filter, FilterType};
use serde_json::Value;
use tern_cloud::ProviderError;
use tracing::{debug, warn};

use crate::errors::from_sdk;

/// Where the Pricing API is served from (it also runs in eu-central-1 and ap-south-1).
pub const ENDPOINT_REGION: &str = "us-east-1";

const SERVICE_CODE: &str = "AmazonEC2";

/// The product tern launches: Linux, shared tenancy, no pre-installed software, a plain
/// on-demand instance (not a reservation's unused capacity).
const PRODUCT_FILTERS: [(&str, &str); 4] = [
    ("operatingSystem", "Linux"),
    ("tenancy", "Shared"),
    ("preInstalledSw", "NA"),
    ("capacitystatus", "Used"),
];

/// On-demand $/h by (instance type, region code).
pub type Quotes = BTreeMap<(String, String), f64>;

/// One product's (instance type, region code) and on-demand $/h.
type Quote = ((String, String), f64);

/// Parse `PriceList` entries. Entries that are not JSON or lack the instance type or region
/// are logged and skipped; entries without a positive hourly USD price are skipped. When two
/// entries price the same (type, region), the lower price wins.
pub fn parse_price_list<S: AsRef<str>>(entries: &[S]) -> Quotes {
    let mut quotes = Quotes::new();
    for entry in entries {
        match parse_entry(entry.as_ref()) {
            Ok(Some((key, price))) => {
                quotes
                    .entry(key)
                    .and_modify(|p| *p = p.min(price))
                    .or_insert(price);
            }
            Ok(None) => {}
            Err(e) => warn!(error = %e, "skipping a Pricing API product tern cannot read"),
        }
    }
    quotes
}

/// One product: `Ok(None)` when it is readable but has no usable on-demand hourly price.
fn parse_entry(text: &str) -> Result<Option<Quote>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let attributes = doc
        .pointer("/product/attributes")
        .ok_or("no product.attributes")?;
    let attribute = |name: &str| attributes.get(name).and_then(Value::as_str);
    let instance_type = attribute("instanceType").ok_or("no instanceType attribute")?;
    let region = attribute("regionCode").ok_or("no regionCode attribute")?;
    // Capacity Blocks and other market options are priced differently from on-demand.
    if attribute("marketoption").is_some_and(|m| m != "OnDemand") {
        return Ok(None);
    }
    let Some(terms) = doc.pointer("/terms/OnDemand").and_then(Value::as_object) else {
        return Ok(None);
    };
    let hourly = terms
        .values()
        .filter_map(|term| term.get("priceDimensions").and_then(Value::as_object))
        .flat_map(|dims| dims.values())
        .filter(|dim| dim.get("unit").and_then(Value::as_str) == Some("Hrs"))
        .filter_map(|dim| {
            dim.pointer("/pricePerUnit/USD")
                .and_then(Value::as_str)
                .and_then(|usd| usd.trim().parse::<f64>().ok())
        })
        .filter(|p| p.is_finite() && *p > 0.0)
        .reduce(f64::min);
    Ok(hourly.map(|p| ((instance_type.to_owned(), region.to_owned()), p)))
}

fn term_match(field: &str, value: &str) -> Result<Filter, ProviderError> {
    Filter::builder()
        .r#type(FilterType::TermMatch)
        .field(field)
        .value(value)
        .build()
        .map_err(|e| ProviderError::InvalidRequest {
            message: format!("Pricing API filter {field}: {e}"),
        })
}

/// The on-demand Linux price of each of `types` in `region`, by type. One GetProducts query
/// (all its pages) per type; any failed call fails the whole refresh, so the caller keeps its
/// last good prices rather than mixing old and new. Types the API does not price are absent.
pub async fn fetch_on_demand(
    client: &Client,
    region: &str,
    types: &BTreeSet<String>,
) -> Result<BTreeMap<String, f64>, ProviderError> {
    let mut out = BTreeMap::new();
    for instance_type in types {
        let mut filters = vec![
            term_match("instanceType", instance_type)?,
            term_match("regionCode", region)?,
        ];
        for (field, value) in PRODUCT_FILTERS {
            filters.push(term_match(field, value)?);
        }
        let mut pages = client
            .get_products()
            .service_code(SERVICE_CODE)
            .format_version("aws_v1")
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        let mut entries = Vec::new();
        while let Some(page) = pages.next().await {
            entries.extend(page.map_err(from_sdk)?.price_list().iter().cloned());
        }
        let quotes = parse_price_list(&entries);
        match quotes.get(&(instance_type.clone(), region.to_owned())) {
            Some(price) => {
                out.insert(instance_type.clone(), *price);
            }
            None => debug!(%region, %instance_type, "the Pricing API has no on-demand price"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A product as GetProducts returns it (trimmed to the fields tern reads plus a few
    /// neighbours), with one on-demand dimension and a reserved term that must be ignored.
    fn product(instance_type: &str, region: &str, unit: &str, usd: &str) -> String {
        serde_json::json!({
            "product": {
                "productFamily": "Compute Instance",
                "sku": "8QZ9EXAMPLE",
                "attributes": {
                    "instanceType": instance_type,
                    "regionCode": region,
                    "location": "US East (N. Virginia)",
                    "operatingSystem": "Linux",
                    "tenancy": "Shared",
                    "preInstalledSw": "NA",
                    "capacitystatus": "Used",
                    "marketoption": "OnDemand",
                    "gpu": "1",
                    "servicecode": "AmazonEC2"
                }
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    "8QZ9EXAMPLE.JRTCKXETXF": {
                        "offerTermCode": "JRTCKXETXF",
                        "sku": "8QZ9EXAMPLE",
                        "effectiveDate": "2025-06-01T00:00:00Z",
                        "termAttributes": {},
                        "priceDimensions": {
                            "8QZ9EXAMPLE.JRTCKXETXF.6YS6EN2CT7": {
                                "rateCode": "8QZ9EXAMPLE.JRTCKXETXF.6YS6EN2CT7",
                                "description": "On Demand Linux instance hour",
                                "beginRange": "0",
                                "endRange": "Inf",
                                "unit": unit,
                                "appliesTo": [],
                                "pricePerUnit": { "USD": usd }
                            }
                        }
                    }
                },
                "Reserved": {
                    "8QZ9EXAMPLE.4NA7Y494T4": {
                        "priceDimensions": {
                            "8QZ9EXAMPLE.4NA7Y494T4.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "pricePerUnit": { "USD": "0.1000000000" }
                            }
                        }
                    }
                }
            },
            "version": "20250601000000",
            "publicationDate": "2025-06-01T00:00:00Z"
        })
        .to_string()
    }

    fn key(t: &str, r: &str) -> (String, String) {
        (t.to_owned(), r.to_owned())
    }

    #[test]
    fn reads_the_on_demand_hourly_usd_price_and_ignores_reserved_terms() {
        let quotes = parse_price_list(&[
            product("g4dn.xlarge", "us-east-1", "Hrs", "0.5260000000"),
            product("p3.2xlarge", "eu-west-1", "Hrs", "3.3740000000"),
        ]);
        assert_eq!(quotes.len(), 2);
        assert_eq!(quotes[&key("g4dn.xlarge", "us-east-1")], 0.526);
        assert_eq!(quotes[&key("p3.2xlarge", "eu-west-1")], 3.374);
    }

    #[test]
    fn skips_other_units_zero_and_non_numeric_prices() {
        let quotes = parse_price_list(&[
            product("g4dn.xlarge", "us-east-1", "Quantity", "0.5260000000"),
            product("g5.xlarge", "us-east-1", "Hrs", "0.0000000000"),
            product("g6.xlarge", "us-east-1", "Hrs", "n/a"),
        ]);
        assert!(quotes.is_empty(), "{quotes:?}");
    }

    #[test]
    fn skips_unparseable_entries_and_keeps_the_rest() {
        let no_type = product("g4dn.xlarge", "us-east-1", "Hrs", "0.526")
            .replace("\"instanceType\":\"g4dn.xlarge\",", "");
        assert!(!no_type.contains("instanceType"));
        let quotes = parse_price_list(&[
            "{not json".to_owned(),
            "[]".to_owned(),
            no_type,
            product("g5.xlarge", "us-east-1", "Hrs", "1.006"),
        ]);
        assert_eq!(quotes.len(), 1);
        assert_eq!(quotes[&key("g5.xlarge", "us-east-1")], 1.006);
    }

    #[test]
    fn other_market_options_are_ignored_and_duplicates_keep_the_lower_price() {
        let block = product("p5.48xlarge", "us-east-1", "Hrs", "31.464").replace(
            "\"marketoption\":\"OnDemand\"",
            "\"marketoption\":\"CapacityBlock\"",
        );
        assert!(block.contains("CapacityBlock"));
        let quotes = parse_price_list(&[
            block,
            product("g5.xlarge", "us-east-1", "Hrs", "1.2"),
            product("g5.xlarge", "us-east-1", "Hrs", "1.006"),
        ]);
        assert_eq!(quotes.len(), 1, "{quotes:?}");
        assert_eq!(quotes[&key("g5.xlarge", "us-east-1")], 1.006);
    }

    #[test]
    fn a_product_without_on_demand_terms_has_no_price() {
        let doc = serde_json::json!({
            "product": { "attributes": { "instanceType": "g5.xlarge", "regionCode": "us-east-1" } },
            "terms": { "Reserved": {} }
        })
        .to_string();
        assert!(parse_price_list(&[doc]).is_empty());
    }
}
