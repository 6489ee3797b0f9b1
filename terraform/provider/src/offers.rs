//! `data "tern_offers"`: the cheapest offers for an accelerator, from the bundled catalog,
//! catalog files, or a running controller (the offers its last pass read from its cloud, at
//! the prices it sees), filtered as `tern offers` filters. Users feed the chosen type and zone into
//! their own `aws_instance` or `google_compute_instance`.

use rmpv::Value;
use tern_cloud::{Capacity, Cloud, Offer};
use tern_pricing::{AcceleratorFilter, Catalog, OfferQuery};

use crate::diag::{self, Diags};
use crate::schema::{Mode, attr, list_of_objects, object_of, schema};
use crate::tfplugin6::Schema;
use crate::value;

pub const TYPE: &str = "tern_offers";
const DEFAULT_LIMIT: f64 = 10.0;

const OFFER_FIELDS: &[(&str, &str)] = &[
    ("cloud", "string"),
    ("region", "string"),
    ("zone", "string"),
    ("instance_type", "string"),
    ("accelerator", "string"),
    ("accelerator_count", "number"),
    ("vcpus", "number"),
    ("memory_gib", "number"),
    ("capacity", "string"),
    ("price_per_hour", "number"),
];

pub fn data_schema() -> Schema {
    let offers = list_of_objects(OFFER_FIELDS);
    let one = object_of(OFFER_FIELDS);
    schema(
        0,
        "The cheapest offers for an accelerator, cheapest first.",
        vec![
            attr(
                "accelerator",
                "\"string\"",
                Mode::Required,
                "Accelerator name, or NAME:COUNT per VM (A100, A100:8, tpu-v5p-8).",
            ),
            attr("cloud", "\"string\"", Mode::Optional, "aws or gcp."),
            attr("region", "\"string\"", Mode::Optional, "Only this region."),
            attr(
                "capacity",
                "\"string\"",
                Mode::Optional,
                "spot or on-demand; both when unset.",
            ),
            attr(
                "max_price",
                "\"number\"",
                Mode::Optional,
                "Upper bound on the price of one VM, USD/h.",
            ),
            attr(
                "limit",
                "\"number\"",
                Mode::Optional,
                "How many offers to return (default 10; 0 for all).",
            ),
            attr(
                "catalog",
                "[\"list\",\"string\"]",
                Mode::Optional,
                "SkyPilot v8 catalog CSV files to use instead of the bundled snapshot.",
            ),
            attr(
                "source",
                "\"string\"",
                Mode::Optional,
                "catalog (default: the bundled snapshot, or `catalog`) or controller (the offers \
                 the configured controller last read from its cloud, at the prices it sees).",
            ),
            attr(
                "offers",
                &offers,
                Mode::Computed,
                "Matching offers, cheapest first.",
            ),
            attr(
                "cheapest",
                &one,
                Mode::Computed,
                "The first of `offers`, or null when none match.",
            ),
        ],
    )
}

/// Where the offers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Catalog,
    Controller,
}

pub fn origin(config: &Value) -> Result<Origin, Diags> {
    match value::string(config, "source").ok().flatten().as_deref() {
        None | Some("catalog") => Ok(Origin::Catalog),
        Some("controller") => Ok(Origin::Controller),
        Some(other) => Err(vec![diag::error(
            Some("source"),
            "Invalid source",
            format!("expected \"catalog\" or \"controller\", got {other:?}"),
        )]),
    }
}

/// Reads the data source: `config` in, the full object out. `catalog` is what `source` names
/// (the caller fetched a controller's offers); `None` loads the bundled or listed catalog.
pub fn read(config: &Value, catalog: Option<Catalog>) -> Result<Value, Diags> {
    let query = query(config)?;
    let catalog = match catalog {
        Some(c) => c,
        None => load_catalog(config)?,
    };
    let query = query.resolve(&catalog).map_err(|e| {
        vec![diag::error(
            Some(field_of(&e)),
            "No such offer filter",
            e.to_string(),
        )]
    })?;
    let limit = value::number(config, "limit")
        .ok()
        .flatten()
        .unwrap_or(DEFAULT_LIMIT);
    let selected = query.select(&catalog);
    let take = if limit <= 0.0 {
        selected.len()
    } else {
        limit as usize
    };
    let offers: Vec<Value> = selected.into_iter().take(take).map(offer_value).collect();
    let mut out = config.clone();
    value::set(
        &mut out,
        "cheapest",
        offers.first().cloned().unwrap_or(Value::Nil),
    );
    value::set(&mut out, "offers", Value::Array(offers));
    Ok(out)
}

fn field_of(e: &tern_pricing::QueryError) -> &'static str {
    use tern_pricing::QueryError as Q;
    match e {
        Q::UnknownRegion { .. } => "region",
        Q::InvalidFilter(_) => "max_price",
        _ => "accelerator",
    }
}

fn query(config: &Value) -> Result<OfferQuery, Diags> {
    let text = |name: &str| value::string(config, name).ok().flatten();
    let accelerator: AcceleratorFilter = text("accelerator").unwrap_or_default().parse().map_err(
        |e: tern_pricing::QueryError| {
            vec![diag::error(
                Some("accelerator"),
                "Invalid accelerator",
                e.to_string(),
            )]
        },
    )?;
    let cloud = match text("cloud") {
        None => None,
        Some(c) => Some(
            c.parse::<Cloud>()
                .map_err(|e| vec![diag::error(Some("cloud"), "Invalid cloud", e.to_string())])?,
        ),
    };
    let capacity = match text("capacity").as_deref() {
        None | Some("any") => None,
        Some(c) => match c.parse::<Capacity>() {
            Ok(cap @ (Capacity::Spot | Capacity::OnDemand)) => Some(cap),
            _ => {
                return Err(vec![diag::error(
                    Some("capacity"),
                    "Invalid capacity",
                    format!("expected \"spot\", \"on-demand\" or \"any\", got {c:?}"),
                )]);
            }
        },
    };
    Ok(OfferQuery {
        accelerator: Some(accelerator),
        cloud,
        region: text("region"),
        capacity,
        max_price: value::number(config, "max_price").ok().flatten(),
        ..OfferQuery::default()
    })
}

/// The bundled snapshot, or the files `catalog` names (merged).
pub fn load_catalog(config: &Value) -> Result<Catalog, Diags> {
    let files: Vec<String> = match value::get(config, "catalog") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    let fail = |e: String| vec![diag::error(Some("catalog"), "Cannot load the catalog", e)];
    if files.is_empty() {
        return tern_pricing::bundled().map_err(|e| fail(e.to_string()));
    }
    let mut catalog = Catalog::default();
    for f in files {
        catalog.merge(Catalog::load(std::path::Path::new(&f)).map_err(|e| fail(e.to_string()))?);
    }
    Ok(catalog)
}

fn offer_value(o: &Offer) -> Value {
    let acc = o.accelerator();
    value::object([
        ("cloud", Value::from(o.cloud.to_string())),
        ("region", Value::from(o.region.as_str())),
        ("zone", Value::from(o.zone.as_str())),
        ("instance_type", Value::from(o.instance_type.name.as_str())),
        ("accelerator", value::opt_str(acc.map(|a| a.name.as_str()))),
        (
            "accelerator_count",
            value::num(f64::from(o.accelerator_units())),
        ),
        ("vcpus", value::num(o.instance_type.vcpus)),
        ("memory_gib", value::num(o.instance_type.memory_gib)),
        ("capacity", Value::from(o.capacity.as_str())),
        ("price_per_hour", value::num(o.price_per_hour)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cheapest_offer_comes_first_and_matches_the_filters() {
        let config = value::object([
            ("accelerator", Value::from("V100")),
            ("cloud", Value::from("aws")),
            ("capacity", Value::from("spot")),
            ("limit", value::num(3.0)),
        ]);
        let out = read(&config, None).unwrap();
        let Some(Value::Array(offers)) = value::get(&out, "offers") else {
            panic!()
        };
        assert!(!offers.is_empty() && offers.len() <= 3);
        let prices: Vec<f64> = offers
            .iter()
            .map(|o| value::number(o, "price_per_hour").unwrap().unwrap())
            .collect();
        assert!(prices.windows(2).all(|w| w[0] <= w[1]), "{prices:?}");
        for o in offers {
            assert_eq!(
                value::string(o, "capacity").unwrap().as_deref(),
                Some("spot")
            );
            assert_eq!(
                value::string(o, "accelerator").unwrap().as_deref(),
                Some("V100")
            );
        }
        assert_eq!(value::get(&out, "cheapest"), offers.first());
    }

    #[test]
    fn a_typo_gets_the_close_names_on_its_attribute() {
        let config = value::object([("accelerator", Value::from("V10O"))]);
        let diags = read(&config, None).unwrap_err();
        assert!(diags[0].detail.contains("V100"), "{}", diags[0].detail);
        let config = value::object([
            ("accelerator", Value::from("V100")),
            ("capacity", Value::from("cheap")),
        ]);
        assert_eq!(
            read(&config, None).unwrap_err()[0].summary,
            "Invalid capacity"
        );
    }
}
