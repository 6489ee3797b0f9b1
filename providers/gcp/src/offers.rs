//! What can be bought in a zone: the catalog's GCP offers (host + GPUs assembled by the
//! catalog parser, priced on demand and spot) kept only where the Compute API says the zone
//! has the machine type and, for N1 hosts, the GPU type.

use std::collections::HashSet;

use google_cloud_compute_v1::model::MachineType;
use tern_cloud::{Accelerator, Offer};

/// The Compute accelerator type of a catalog GPU name.
pub fn gce_accelerator(gpu: &str) -> Option<&'static str> {
    Some(match gpu {
        "T4" => "nvidia-tesla-t4",
        "V100" => "nvidia-tesla-v100",
        "P100" => "nvidia-tesla-p100",
        "P4" => "nvidia-tesla-p4",
        "K80" => "nvidia-tesla-k80",
        "A100" => "nvidia-tesla-a100",
        "A100-80GB" => "nvidia-a100-80gb",
        "H100" => "nvidia-h100-80gb",
        "H100-MEGA" => "nvidia-h100-mega-80gb",
        "H200" => "nvidia-h200-141gb",
        "B200" => "nvidia-b200",
        "L4" => "nvidia-l4",
        _ => return None,
    })
}

/// N1 hosts take their GPUs as `guestAccelerators`; A2/A3/A4/G2 types have them built in.
pub fn attaches_gpus(machine_type: &str) -> bool {
    machine_type.starts_with("n1-")
}

/// The GPUs to attach to an offer's VM, as (accelerator type, count); `None` for built-in
/// GPUs or a CPU-only shape.
pub fn guest_accelerator(offer: &Offer) -> Option<(&'static str, u32)> {
    let acc: &Accelerator = offer.accelerator()?;
    if !attaches_gpus(&offer.instance_type.name) {
        return None;
    }
    Some((gce_accelerator(&acc.name)?, acc.count))
}

/// One zone's shapes, as the Compute API lists them.
#[derive(Debug, Clone, Default)]
pub struct ZoneShapes {
    pub machine_types: HashSet<String>,
    pub accelerators: HashSet<String>,
}

impl ZoneShapes {
    pub fn new(machine_types: &[MachineType], accelerators: Vec<String>) -> Self {
        Self {
            machine_types: machine_types
                .iter()
                .filter_map(|m| m.name.clone())
                .collect(),
            accelerators: accelerators.into_iter().collect(),
        }
    }

    /// Whether the zone sells this offer's shape.
    pub fn sells(&self, offer: &Offer) -> bool {
        if !self.machine_types.contains(&offer.instance_type.name) {
            return false;
        }
        match offer.accelerator() {
            Some(acc) if attaches_gpus(&offer.instance_type.name) => {
                gce_accelerator(&acc.name).is_some_and(|a| self.accelerators.contains(a))
            }
            _ => true,
        }
    }
}

/// The catalog's GPU offers of `zone` that it sells, restricted to `machine_types` when given.
/// TPU slices are not Compute machine types and are left out.
pub fn in_zone(
    catalog: &[Offer],
    zone: &str,
    shapes: &ZoneShapes,
    machine_types: &[String],
) -> Vec<Offer> {
    catalog
        .iter()
        .filter(|o| o.zone.0 == zone && o.accelerator().is_some())
        .filter(|o| machine_types.is_empty() || machine_types.contains(&o.instance_type.name))
        .filter(|o| shapes.sells(o))
        .cloned()
        .collect()
}
