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
}

/// A region's SKU prices, USD per unit-hour.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SkuPrices {
    pub prices: HashMap<(Part, Capacity), f64>,
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
            if let (Some(key), Some(price)) = (classify(&sku.description), unit_price(sku)) {
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
        assert_eq!(classify("Nvidia Quantum GPU running in Americas"), None);
    }
}
