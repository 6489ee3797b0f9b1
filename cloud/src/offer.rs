use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{Accelerator, Cloud, Region, Zone};

/// How capacity is bought. Spot is cheap and can be reclaimed; on-demand is not reclaimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Capacity {
    Spot,
    OnDemand,
    Reserved,
}

impl Capacity {
    pub fn as_str(self) -> &'static str {
        match self {
            Capacity::Spot => "spot",
            Capacity::OnDemand => "on-demand",
            Capacity::Reserved => "reserved",
        }
    }

    /// Whether the cloud may take this capacity back with a short notice.
    pub fn is_preemptible(self) -> bool {
        matches!(self, Capacity::Spot)
    }
}

impl fmt::Display for Capacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Capacity {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "spot" | "preemptible" => Ok(Capacity::Spot),
            "on-demand" | "ondemand" | "on_demand" | "od" => Ok(Capacity::OnDemand),
            "reserved" => Ok(Capacity::Reserved),
            other => Err(format!(
                "unknown capacity '{other}' (expected spot, on-demand or reserved)"
            )),
        }
    }
}

/// A VM shape, without a price.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceType {
    /// Provider name: `p3.2xlarge`, `a2-highgpu-8g`, or the TPU slice name for TPU VMs.
    pub name: String,
    pub vcpus: f64,
    pub memory_gib: f64,
    pub accelerator: Option<Accelerator>,
}

/// One priced part of an offer. A GCP GPU offer is the host VM plus its GPUs, priced apart in
/// the catalog; keeping the parts lets reports and tests show where a price comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PriceComponent {
    pub label: String,
    pub price_per_hour: f64,
}

/// What the provider knows about whether an offer can be bought right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state", content = "limit")]
pub enum Availability {
    /// Nothing known: a catalog price, not a live reading.
    #[default]
    Unknown,
    /// Offered, optionally with a known cap on how many can be had.
    Available(Option<u32>),
    /// Listed but not purchasable now (e.g. a recent capacity error, or not offered in the zone).
    Unavailable,
}

/// One thing that can be bought now: a shape, in a zone, with a capacity type and a price.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offer {
    pub cloud: Cloud,
    pub region: Region,
    pub zone: Zone,
    pub instance_type: InstanceType,
    pub capacity: Capacity,
    /// Total USD per hour for one VM of this shape, accelerators included.
    pub price_per_hour: f64,
    /// When the price was observed; `None` for a catalog snapshot of unknown date.
    pub observed_at: Option<DateTime<Utc>>,
    /// The priced parts that add up to `price_per_hour` (one part for most clouds).
    pub breakdown: Vec<PriceComponent>,
    #[serde(default)]
    pub availability: Availability,
}

impl Offer {
    pub fn accelerator(&self) -> Option<&Accelerator> {
        self.instance_type.accelerator.as_ref()
    }

    /// Accelerators per VM (GPUs, or TPU chips); 0 for a CPU-only shape.
    pub fn accelerator_units(&self) -> u32 {
        self.accelerator().map_or(0, Accelerator::chips)
    }

    /// Price of one accelerator-hour (GPU-hour or TPU-chip-hour), the number SkyPilot sorts by.
    pub fn price_per_accelerator_hour(&self) -> Option<f64> {
        let units = self.accelerator_units();
        (units > 0).then(|| self.price_per_hour / f64::from(units))
    }

    /// A stable key: `cloud/zone/type/capacity` ([`OfferKey`]). Unique within a catalog.
    pub fn key(&self) -> String {
        let (cloud, capacity) = (self.cloud.to_string(), self.capacity.to_string());
        OfferKey {
            cloud: &cloud,
            zone: self.zone.as_str(),
            instance_type: &self.instance_type.name,
            capacity: &capacity,
        }
        .to_string()
    }
}

/// The parts of an offer key as stored (usage, prices, intents): the one place that knows
/// its layout, `cloud/zone/type/capacity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OfferKey<'a> {
    pub cloud: &'a str,
    pub zone: &'a str,
    pub instance_type: &'a str,
    pub capacity: &'a str,
}

impl<'a> OfferKey<'a> {
    /// The parts of `key`; `None` unless it has all four, none empty.
    pub fn parse(key: &'a str) -> Option<OfferKey<'a>> {
        let mut parts = key.splitn(4, '/');
        let mut next = || parts.next().filter(|p| !p.is_empty());
        Some(OfferKey {
            cloud: next()?,
            zone: next()?,
            instance_type: next()?,
            capacity: next()?,
        })
    }

    /// The capacity type, when the key's last part names one.
    pub fn capacity(&self) -> Option<Capacity> {
        self.capacity.parse().ok()
    }
}

impl std::fmt::Display for OfferKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}",
            self.cloud, self.zone, self.instance_type, self.capacity
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offer_key_reads_back_as_its_parts() {
        let offer = crate::testkit::offer("p3.2xlarge", "us-west-2a", Capacity::Spot).build();
        let key = offer.key();
        assert_eq!(key, "sim/us-west-2a/p3.2xlarge/spot");
        let parts = OfferKey::parse(&key).expect("four parts");
        assert_eq!(parts.zone, "us-west-2a");
        assert_eq!(parts.instance_type, "p3.2xlarge");
        assert_eq!(parts.capacity(), Some(Capacity::Spot));
        assert_eq!(parts.to_string(), key);
        for bad in [
            "",
            "aws/us-west-2a/p3.2xlarge",
            "aws//p3.2xlarge/spot",
            "a/b/c/",
        ] {
            assert_eq!(OfferKey::parse(bad), None, "{bad}");
        }
        assert_eq!(
            OfferKey::parse("a/b/c/nope").and_then(|k| k.capacity()),
            None
        );
    }
}
