//! Live prices from the Cloud Billing Catalog (`services/6F81-5844-456A/skus`, Compute
//! Engine): on-demand and spot (`Preemptible`) SKUs for GPUs and for each machine family's
//! cores and RAM. An offer's price is assembled as the catalog parser assembles it: host
//! (vCPUs × core SKU + GiB × RAM SKU) plus GPUs × GPU SKU. An offer with any part unpriced
//! keeps its bundled catalog price.

use std::collections::HashMap;

use google_cloud_billing_v1::client::CloudCatalog;
use google_cloud_billing_v1::model::Sku;
use tern_cloud::{Capacity, Offer, PriceComponent};

/// Compute Engine's service in the Cloud Billing Catalog.
pub const COMPUTE_SERVICE: &str = "services/6F81-5844-456A";

/// The SKU description's name for each catalog GPU (`Nvidia Tesla V100 GPU running in …`).
pub const GPU_SKUS: &[(&str, &str)] = &[
    ("T4", "Nvidia Tesla T4"),
    ("V100", "Nvidia Tesla V100"),
    ("P100", "Nvidia Tesla P100"),
    ("P4", "Nvidia Tesla P4"),
    ("K80", "Nvidia Tesla K80"),
    ("A100", "Nvidia Tesla A100"),
    ("A100-80GB", "Nvidia Tesla A100 80GB"),
    ("H100", "Nvidia H100 80GB"),
    ("H100-MEGA", "Nvidia H100 80GB Mega"),
    ("H200", "Nvidia H200 141GB"),
    ("B200", "Nvidia B200"),
    ("L4", "Nvidia L4"),
];

/// What one priced SKU is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Part {
    /// One GPU of this catalog name, per hour.
    Gpu(String),
    /// One vCPU of this machine family (`N1`, `A2`, …), per hour.
    Core(String),
    /// One GiB of RAM of this machine family, per hour.
    Ram(String),
    /// One chip of this TPU generation (`v5p`, `v5litepod`, `v6e`), per hour.
    TpuChip(String),
}

/// A region's SKU prices, USD per unit-hour.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SkuPrices {
    pub prices: HashMap<(Part, Capacity), f64>,
}

/// Chips in a TPU slice, for the generations the Billing Catalog prices per chip-hour: v4 and
/// v5p slices are named by TensorCores (two per chip), v5e (`v5litepod`) and v6e by chips.
/// v2 and v3 are priced per device or pod, not per chip: `None`, and they keep the catalog's.
pub fn tpu_chips(slice: &str) -> Option<(&str, u32)> {
    let (version, size) = slice.rsplit_once('-')?;
    let size: u32 = size.parse().ok()?;
    match version {
        "v4" | "v5p" => Some((version, size / 2)),
        "v5litepod" | "v6e" => Some((version, size)),
        _ => None,
    }
}

/// The TPU generation a TPU SKU's description names (`TPU v5p …`, `Tpu-v5e …`), in the TPU
/// API's spelling (`v5e` is `v5litepod`).
fn tpu_generation(description: &str) -> Option<String> {
    let lower = description.to_ascii_lowercase();
    let at = lower.find("tpu")?;
    let rest = &lower[at + 3..];
    let start = rest.find('v')?;
    let version: String = rest[start..]
        .chars()
        .enumerate()
        .take_while(|(i, c)| {
            if *i == 0 {
                *c == 'v'
            } else {
                c.is_ascii_alphanumeric()
            }
        })
        .map(|(_, c)| c)
        .collect();
    if version.len() < 2 || !version[1..].starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    Some(if version == "v5e" {
        "v5litepod".into()
    } else {
        version
    })
}

/// What a SKU's description says it prices, and for which capacity.
pub fn classify(description: &str) -> Option<(Part, Capacity)> {
    let (capacity, rest) = match description.strip_prefix("Spot Preemptible ") {
        Some(rest) => (Capacity::Spot, rest),
        None => (Capacity::OnDemand, description),
    };
    let what = rest.split(" running in ").next()?.trim();
    if let Some(gpu) = what.strip_suffix(" GPU") {
        let name = GPU_SKUS.iter().find(|(_, sku)| *sku == gpu)?.0;
        return Some((Part::Gpu(name.to_owned()), capacity));
    }
    let words: Vec<&str> = what.split_whitespace().collect();
    let part = match words.as_slice() {
        [family, "Instance", "Core"] | [family, "Predefined", "Instance", "Core"] => {
            Part::Core((*family).to_owned())
        }
        [family, "Instance", "Ram"] | [family, "Predefined", "Instance", "Ram"] => {
            Part::Ram((*family).to_owned())
        }
        _ => return None,
    };
    Some((part, capacity))
}

/// The SKU's hourly unit price: the first tier's (GCE compute SKUs have one tier), in USD.
fn unit_price(sku: &Sku) -> Option<f64> {
    let expr = sku.pricing_info.first()?.pricing_expression.as_ref()?;
    let unit = expr.usage_unit.as_str();
    if !(unit == "h" || unit == "GiBy.h") {
        return None;
    }
    let money = expr.tiered_rates.first()?.unit_price.as_ref()?;
    if !(money.currency_code.is_empty() || money.currency_code == "USD") {
        return None;
    }
    Some(money.units as f64 + f64::from(money.nanos) / 1e9)
}

impl SkuPrices {
    /// The prices of `region` among these SKUs (on-demand and spot usage only).
    pub fn from_skus(skus: &[Sku], region: &str) -> Self {
        let mut prices = HashMap::new();
        for sku in skus {
            let usage = sku.category.as_ref().map(|c| c.usage_type.as_str());
            if !matches!(usage, Some("OnDemand" | "Preemptible")) {
                continue;
            }
            if !sku.service_regions.iter().any(|r| r == region) {
                continue;
            }
            let group = sku.category.as_ref().map(|c| c.resource_group.as_str());
            let key = if group == Some("TPU") {
                let capacity = if usage == Some("Preemptible") {
                    Capacity::Spot
                } else {
                    Capacity::OnDemand
                };
                tpu_generation(&sku.description).map(|g| (Part::TpuChip(g), capacity))
            } else {
                classify(&sku.description)
            };
            if let (Some(key), Some(price)) = (key, unit_price(sku)) {
                prices.insert(key, price);
            }
        }
        Self { prices }
    }

    fn get(&self, part: Part, capacity: Capacity) -> Option<f64> {
        self.prices.get(&(part, capacity)).copied()
    }

    /// The offer at these prices, with its breakdown; `None` when a part is unpriced.
    pub fn price(&self, offer: &Offer) -> Option<Offer> {
        let shape = &offer.instance_type;
        if let Some(slice) = shape.name.strip_prefix("tpu-") {
            let (generation, chips) = tpu_chips(slice)?;
            let chip = self.get(Part::TpuChip(generation.to_owned()), offer.capacity)?;
            let mut priced = offer.clone();
            priced.price_per_hour = chip * f64::from(chips);
            priced.breakdown = vec![PriceComponent {
                label: format!("{chips} x {generation} chip"),
                price_per_hour: priced.price_per_hour,
            }];
            return Some(priced);
        }
        let family = shape.name.split('-').next()?.to_uppercase();
        let cap = offer.capacity;
        let host = shape.vcpus * self.get(Part::Core(family.clone()), cap)?
            + shape.memory_gib * self.get(Part::Ram(family), cap)?;
        let mut breakdown = vec![PriceComponent {
            label: shape.name.clone(),
            price_per_hour: host,
        }];
        if let Some(acc) = offer.accelerator() {
            let gpu = self.get(Part::Gpu(acc.name.clone()), cap)? * f64::from(acc.count);
            breakdown.push(PriceComponent {
                label: format!("{} x {}", acc.count, acc.name),
                price_per_hour: gpu,
            });
        }
        let mut priced = offer.clone();
        priced.price_per_hour = breakdown.iter().map(|p| p.price_per_hour).sum();
        priced.breakdown = breakdown;
        Some(priced)
    }
}

/// Every Compute Engine SKU, all pages, in USD.
pub async fn fetch(client: &CloudCatalog) -> Result<Vec<Sku>, google_cloud_billing_v1::Error> {
    Ok(every_page!(
        client
            .list_skus()
            .set_parent(COMPUTE_SERVICE)
            .set_currency_code("USD")
            .set_page_size(5000),
        skus
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_name_their_part_and_capacity() {
        assert_eq!(
            classify("Nvidia Tesla V100 GPU running in Americas"),
            Some((Part::Gpu("V100".into()), Capacity::OnDemand))
        );
        assert_eq!(
            classify("Spot Preemptible Nvidia Tesla A100 80GB GPU running in Belgium"),
            Some((Part::Gpu("A100-80GB".into()), Capacity::Spot))
        );
        assert_eq!(
            classify("N1 Predefined Instance Core running in Americas"),
            Some((Part::Core("N1".into()), Capacity::OnDemand))
        );
        assert_eq!(
            classify("Spot Preemptible A2 Instance Ram running in Americas"),
            Some((Part::Ram("A2".into()), Capacity::Spot))
        );
        assert_eq!(classify("Network Inter Zone Egress"), None);
        assert_eq!(
            tpu_generation("TPU v5p chip running in Americas").as_deref(),
            Some("v5p")
        );
        assert_eq!(
            tpu_generation("Tpu-v5e Preemptible chip").as_deref(),
            Some("v5litepod")
        );
        assert_eq!(tpu_generation("TPU v6e chip").as_deref(), Some("v6e"));
        assert_eq!(tpu_generation("Network egress"), None);
        assert_eq!(tpu_chips("v5p-8"), Some(("v5p", 4)));
        assert_eq!(tpu_chips("v5litepod-16"), Some(("v5litepod", 16)));
        assert_eq!(tpu_chips("v3-8"), None);
        assert_eq!(classify("Nvidia Quantum GPU running in Americas"), None);
    }
}
