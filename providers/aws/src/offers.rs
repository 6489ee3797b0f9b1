//! What can be bought in a region: instance types, where they are offered, and prices.
//!
//! EC2 knows the shapes, the zones and the spot prices; it has no on-demand price API. On-demand
//! prices come from the bundled catalog, overridden per region by what the AWS Pricing API last
//! said (see [`crate::pricing_api`]; it is slow and served from us-east-1, so it is refreshed
//! rarely).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_ec2::Client;
use aws_sdk_ec2::types::{InstanceTypeInfo, LocationType};
use chrono::{DateTime, Utc};
use tern_cloud::{
    Accelerator, Availability, Capacity, Cloud, InstanceType, Offer, PriceComponent, ProviderError,
    Region, Zone,
};
use tern_pricing::Catalog;

use crate::errors::from_sdk;

/// The spot product tern launches: Linux on shared tenancy.
const PRODUCT: &str = "Linux/UNIX";

/// Zone names as this account sees them (`us-east-1a`) → AZ ids (`use1-az4`), which are the
/// same for every account and which tern's [`Zone`] holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ZoneMap {
    by_name: BTreeMap<String, String>,
}

impl ZoneMap {
    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            by_name: pairs.into_iter().collect(),
        }
    }

    pub fn id(&self, name: &str) -> Option<&str> {
        self.by_name.get(name).map(String::as_str)
    }

    pub fn name(&self, id: &str) -> Option<&str> {
        self.by_name
            .iter()
            .find(|(_, v)| v.as_str() == id)
            .map(|(k, _)| k.as_str())
    }

    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.by_name.values().map(String::as_str)
    }
}

/// The slow-changing part of a region: shapes and where they are offered.
#[derive(Debug, Clone)]
pub struct Shapes {
    pub types: BTreeMap<String, InstanceType>,
    /// (instance type, AZ id) pairs EC2 offers.
    pub offered: BTreeSet<(String, String)>,
}

/// Latest spot price per (instance type, AZ id), with the time AWS set it.
pub type SpotPrices = BTreeMap<(String, String), (f64, DateTime<Utc>)>;

pub async fn fetch_zones(client: &Client) -> Result<ZoneMap, ProviderError> {
    let out = client
        .describe_availability_zones()
        .send()
        .await
        .map_err(from_sdk)?;
    Ok(ZoneMap::from_pairs(
        out.availability_zones()
            .iter()
            .filter_map(|z| Some((z.zone_name()?.to_owned(), z.zone_id()?.to_owned()))),
    ))
}

/// Instance types with their accelerators. With `wanted` empty, every type that has GPUs or
/// Neuron devices; CPU-only types do not train models. All types are listed and filtered
/// here: naming a type the region lacks in the request would fail the whole call.
pub async fn fetch_shapes(
    client: &Client,
    wanted: &[String],
    zones: &ZoneMap,
    catalog: &OnDemandPrices,
) -> Result<Shapes, ProviderError> {
    let mut types = BTreeMap::new();
    let mut pages = client.describe_instance_types().into_paginator().send();
    while let Some(page) = pages.next().await {
        for info in page.map_err(from_sdk)?.instance_types() {
            let Some(shape) = shape_of(info, catalog) else {
                continue;
            };
            let keep = if wanted.is_empty() {
                shape.accelerator.is_some()
            } else {
                wanted.contains(&shape.name)
            };
            if keep {
                types.insert(shape.name.clone(), shape);
            }
        }
    }
    let mut offered = BTreeSet::new();
    let mut pages = client
        .describe_instance_type_offerings()
        .location_type(LocationType::AvailabilityZone)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        for o in page.map_err(from_sdk)?.instance_type_offerings() {
            let (Some(t), Some(az)) = (o.instance_type(), o.location()) else {
                continue;
            };
            if let (true, Some(id)) = (types.contains_key(t.as_str()), zones.id(az)) {
                offered.insert((t.as_str().to_owned(), id.to_owned()));
            }
        }
    }
    Ok(Shapes { types, offered })
}

/// The catalog's accelerator naming wins (the planner matches on it); EC2's GPU info fills in
/// types the catalog does not list and the GPU memory.
fn shape_of(info: &InstanceTypeInfo, catalog: &OnDemandPrices) -> Option<InstanceType> {
    let name = info.instance_type()?.as_str().to_owned();
    let from_ec2 = info
        .gpu_info()
        .and_then(|g| g.gpus().first())
        .map(|g| Accelerator {
            name: g.name().unwrap_or("GPU").to_owned(),
            count: g.count().unwrap_or(0).max(0) as u32,
            memory_gib: g
                .memory_info()
                .and_then(|m| m.size_in_mib())
                .map(|mib| f64::from(mib) / 1024.0),
        })
        .or_else(|| {
            let n = info.neuron_info()?.neuron_devices().first()?;
            Some(Accelerator {
                name: n.name().unwrap_or("Neuron").to_owned(),
                count: n.count().unwrap_or(0).max(0) as u32,
                memory_gib: n
                    .memory_info()
                    .and_then(|m| m.size_in_mib())
                    .map(|mib| f64::from(mib) / 1024.0),
            })
        });
    let accelerator = match (
        catalog.shape(&name).and_then(|s| s.accelerator.clone()),
        from_ec2,
    ) {
        (Some(mut c), ec2) => {
            if c.memory_gib.is_none() {
                c.memory_gib = ec2.and_then(|e| e.memory_gib);
            }
            Some(c)
        }
        (None, ec2) => ec2,
    };
    Some(InstanceType {
        vcpus: info
            .v_cpu_info()
            .and_then(|v| v.default_v_cpus())
            .map_or(0.0, f64::from),
        memory_gib: info
            .memory_info()
            .and_then(|m| m.size_in_mib())
            .map_or(0.0, |mib| mib as f64 / 1024.0),
        name,
        accelerator,
    })
}

/// Current spot prices. Asking from "now" makes AWS return the price in force now for each
/// pool; older points are not needed for planning.
pub async fn fetch_spot_prices(
    client: &Client,
    types: &BTreeSet<String>,
    zones: &ZoneMap,
) -> Result<SpotPrices, ProviderError> {
    let mut prices = SpotPrices::new();
    if types.is_empty() {
        return Ok(prices);
    }
    let now = aws_smithy_types::DateTime::from_secs(Utc::now().timestamp());
    let mut pages = client
        .describe_spot_price_history()
        .set_instance_types(Some(types.iter().map(|t| t.as_str().into()).collect()))
        .product_descriptions(PRODUCT)
        .start_time(now)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        for p in page.map_err(from_sdk)?.spot_price_history() {
            let (Some(t), Some(price), Some(at)) = (
                p.instance_type(),
                p.spot_price().and_then(|s| s.parse::<f64>().ok()),
                p.timestamp()
                    .and_then(|t| DateTime::from_timestamp(t.secs(), t.subsec_nanos())),
            ) else {
                continue;
            };
            let Some(zone) = p
                .availability_zone_id()
                .or_else(|| p.availability_zone().and_then(|n| zones.id(n)))
            else {
                continue;
            };
            let key = (t.as_str().to_owned(), zone.to_owned());
            if prices.get(&key).is_none_or(|(_, seen)| *seen < at) {
                prices.insert(key, (price, at));
            }
        }
    }
    Ok(prices)
}

/// On-demand prices and shapes from a catalog, indexed for lookups by region and type.
#[derive(Debug, Clone, Default)]
pub struct OnDemandPrices {
    prices: HashMap<(String, String), f64>,
    shapes: HashMap<String, InstanceType>,
    /// (region, AZ id, type) rows, to flag catalog offers EC2 no longer has.
    rows: BTreeSet<(String, String, String)>,
}

impl OnDemandPrices {
    pub fn from_catalog(catalog: &Catalog) -> Self {
        let mut this = Self::default();
        for o in catalog.offers.iter().filter(|o| o.cloud == Cloud::Aws) {
            this.shapes
                .entry(o.instance_type.name.clone())
                .or_insert_with(|| o.instance_type.clone());
            this.rows.insert((
                o.region.0.clone(),
                o.zone.0.clone(),
                o.instance_type.name.clone(),
            ));
            if o.capacity == Capacity::OnDemand {
                this.prices.insert(
                    (o.region.0.clone(), o.instance_type.name.clone()),
                    o.price_per_hour,
                );
            }
        }
        this
    }

    pub fn price(&self, region: &str, instance_type: &str) -> Option<f64> {
        self.prices
            .get(&(region.to_owned(), instance_type.to_owned()))
            .copied()
    }

    pub fn shape(&self, instance_type: &str) -> Option<&InstanceType> {
        self.shapes.get(instance_type)
    }
}

/// Turn what EC2 said into offers. `fresh` holds this region's on-demand prices from the
/// Pricing API by type; they win over the catalog's. `unavailable` holds offer keys with a
/// recent capacity error. Catalog rows for this region's zones that EC2 does not offer are
/// kept, flagged unavailable, so the planner sees why a known shape is missing.
pub fn build(
    region: &Region,
    shapes: &Shapes,
    spot: &SpotPrices,
    catalog: &OnDemandPrices,
    fresh: &BTreeMap<String, f64>,
    zones: &ZoneMap,
    unavailable: &dyn Fn(&str) -> bool,
) -> Vec<Offer> {
    let on_demand = |name: &str| {
        fresh
            .get(name)
            .copied()
            .or_else(|| catalog.price(region.as_str(), name))
    };
    let mut out = Vec::new();
    let offer = |shape: &InstanceType, zone: &str, capacity, price: f64, at| {
        let mut o = Offer {
            cloud: Cloud::Aws,
            region: region.clone(),
            zone: Zone::new(zone),
            instance_type: shape.clone(),
            capacity,
            price_per_hour: price,
            observed_at: at,
            breakdown: vec![PriceComponent {
                label: shape.name.clone(),
                price_per_hour: price,
            }],
            availability: Availability::Available(None),
        };
        if unavailable(&o.key()) {
            o.availability = Availability::Unavailable;
        }
        o
    };
    for (name, zone) in &shapes.offered {
        let Some(shape) = shapes.types.get(name) else {
            continue;
        };
        if let Some(price) = on_demand(name) {
            out.push(offer(shape, zone, Capacity::OnDemand, price, None));
        }
        if let Some((price, at)) = spot.get(&(name.clone(), zone.clone())) {
            out.push(offer(shape, zone, Capacity::Spot, *price, Some(*at)));
        }
    }
    let known_zones: BTreeSet<&str> = zones.ids().collect();
    for (r, zone, name) in &catalog.rows {
        if r != region.as_str()
            || !known_zones.contains(zone.as_str())
            || !shapes.types.contains_key(name)
            || shapes.offered.contains(&(name.clone(), zone.clone()))
        {
            continue;
        }
        let (Some(shape), Some(price)) = (shapes.types.get(name), on_demand(name)) else {
            continue;
        };
        let mut o = offer(shape, zone, Capacity::OnDemand, price, None);
        o.availability = Availability::Unavailable;
        out.push(o);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(name: &str) -> InstanceType {
        InstanceType {
            name: name.into(),
            vcpus: 8.0,
            memory_gib: 61.0,
            accelerator: Some(Accelerator::new("V100", 1)),
        }
    }

    #[test]
    fn offers_pair_zone_offerings_with_prices_and_flag_the_rest() {
        let zones = ZoneMap::from_pairs([
            ("us-east-1a".to_owned(), "use1-az4".to_owned()),
            ("us-east-1b".to_owned(), "use1-az6".to_owned()),
        ]);
        assert_eq!(zones.name("use1-az6"), Some("us-east-1b"));
        let shapes = Shapes {
            types: [("p3.2xlarge".to_owned(), shape("p3.2xlarge"))].into(),
            offered: [("p3.2xlarge".to_owned(), "use1-az4".to_owned())].into(),
        };
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let spot: SpotPrices =
            [(("p3.2xlarge".to_owned(), "use1-az4".to_owned()), (0.9, at))].into();
        let mut catalog = OnDemandPrices::default();
        catalog
            .prices
            .insert(("us-east-1".into(), "p3.2xlarge".into()), 3.06);
        catalog
            .rows
            .insert(("us-east-1".into(), "use1-az6".into(), "p3.2xlarge".into()));
        let region = Region::new("us-east-1");
        let spot_key = "aws/use1-az4/p3.2xlarge/spot";
        let none = BTreeMap::new();
        let offers = build(&region, &shapes, &spot, &catalog, &none, &zones, &|k| {
            k == spot_key
        });
        assert_eq!(offers.len(), 3, "{offers:#?}");
        let od = offers
            .iter()
            .find(|o| o.key() == "aws/use1-az4/p3.2xlarge/on-demand")
            .unwrap();
        assert_eq!(od.price_per_hour, 3.06);
        assert_eq!(od.availability, Availability::Available(None));
        let sp = offers.iter().find(|o| o.key() == spot_key).unwrap();
        assert_eq!((sp.price_per_hour, sp.observed_at), (0.9, Some(at)));
        assert_eq!(
            sp.availability,
            Availability::Unavailable,
            "recent capacity error"
        );
        let gone = offers
            .iter()
            .find(|o| o.zone.as_str() == "use1-az6")
            .unwrap();
        assert_eq!(
            gone.availability,
            Availability::Unavailable,
            "not offered by EC2"
        );

        // A Pricing API price replaces the catalog's, for offered and flagged rows alike.
        let fresh: BTreeMap<String, f64> = [("p3.2xlarge".to_owned(), 3.2)].into();
        let offers = build(&region, &shapes, &spot, &catalog, &fresh, &zones, &|_| {
            false
        });
        let on_demand: Vec<f64> = offers
            .iter()
            .filter(|o| o.capacity == Capacity::OnDemand)
            .map(|o| o.price_per_hour)
            .collect();
        assert_eq!(on_demand, [3.2, 3.2]);
    }
}
