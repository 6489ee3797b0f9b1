//! GCP layout. Three kinds of row:
//! - a machine type (`InstanceType` set): a VM priced *without* any GPUs;
//! - a GPU row (`InstanceType` empty, `AcceleratorName` a GPU): the price of N GPUs alone;
//! - a TPU row (`AcceleratorName` = `tpu-…`): the price of a TPU slice (its host VM is free).
//!
//! A purchasable GPU offer is the host machine type plus the GPUs, in the same zone and with the
//! same capacity type; both prices must exist, or there is no offer (a missing spot price means
//! "no spot", never "free").

use std::collections::HashMap;

use tern_cloud::{Accelerator, Capacity, Cloud, InstanceType, Offer, PriceComponent, Region, Zone};

use super::{CatalogError, Columns, Row, Seen};

/// The host machine type GCP sells `count` × `gpu` on, as tern buys it.
///
/// A2/A3/A4/G2 machine types have their GPUs built in, so the type follows from the count.
/// T4, V100, P100 and P4 attach to general-purpose N1 VMs of any size; tern's default is
/// **8 vCPUs and 52 GiB per GPU** (`n1-highmem-8` per GPU, i.e. `n1-highmem-{8·count}`): enough
/// host memory and data-loader cores to keep one of these GPUs fed, and the N1 size SkyPilot
/// also defaults to for one GPU. Other shapes can be bought by naming them in a catalog row.
pub fn gcp_host_for(gpu: &str, count: u32) -> Option<String> {
    let builtin = |family: &str, counts: &[u32]| {
        counts
            .contains(&count)
            .then(|| format!("{family}-{count}g"))
    };
    match gpu {
        "A100" if count == 16 => Some("a2-megagpu-16g".into()),
        "A100" => builtin("a2-highgpu", &[1, 2, 4, 8]),
        "A100-80GB" => builtin("a2-ultragpu", &[1, 2, 4, 8]),
        "H100" => builtin("a3-highgpu", &[1, 2, 4, 8]),
        "H100-MEGA" if count == 8 => Some("a3-megagpu-8g".into()),
        "H200" if count == 8 => Some("a3-ultragpu-8g".into()),
        "B200" if count == 8 => Some("a4-highgpu-8g".into()),
        "L4" => match count {
            1 => Some("g2-standard-4".into()),
            2 => Some("g2-standard-24".into()),
            4 => Some("g2-standard-48".into()),
            8 => Some("g2-standard-96".into()),
            _ => None,
        },
        "T4" | "V100" | "P100" | "P4" if matches!(count, 1 | 2 | 4 | 8) => {
            Some(format!("n1-highmem-{}", 8 * count))
        }
        _ => None,
    }
}

/// Machine families whose GPUs are part of the machine type: their host-only rows are not
/// purchasable on their own (an `a2-highgpu-8g` always comes with 8 A100s).
fn has_builtin_accelerators(machine_type: &str) -> bool {
    ["a2-", "a3-", "a4-", "a4x-", "g2-", "g4-"]
        .iter()
        .any(|p| machine_type.starts_with(p))
}

struct Host {
    vcpus: f64,
    memory_gib: f64,
    price: [Option<f64>; 2],
}

struct GpuRow {
    region: String,
    zone: String,
    accelerator: Accelerator,
    price: [Option<f64>; 2],
}

const CAPACITIES: [Capacity; 2] = [Capacity::OnDemand, Capacity::Spot];

pub(super) fn parse(
    reader: &mut csv::Reader<&[u8]>,
    cols: &Columns<'_>,
) -> Result<(Vec<Offer>, usize), CatalogError> {
    let mut parts = Parts::default();
    let mut record = csv::StringRecord::new();
    let mut seen = Seen::default();
    let mut rows = 0;
    while reader
        .read_record(&mut record)
        .map_err(|e| cols.csv_error(e))?
    {
        rows += 1;
        let line = record.position().map_or(0, |p| p.line());
        let row = Row {
            record: &record,
            cols,
            line,
        };
        row.check_labels()?;
        seen.check(&row)?;
        parts.read(&row, cols, line)?;
    }
    let Parts {
        mut offers,
        hosts,
        gpus,
    } = parts;
    assemble(&gpus, &hosts, &mut offers);
    Ok((offers, rows))
}

/// What the rows hold so far: offers complete in one row, host machines by (zone, name), and
/// GPU rows waiting for their host.
#[derive(Default)]
struct Parts {
    offers: Vec<Offer>,
    hosts: HashMap<(String, String), Host>,
    gpus: Vec<GpuRow>,
}

impl Parts {
    /// One row: a TPU slice, a GPU row, or a machine (with or without its accelerators).
    fn read(
        &mut self,
        row: &Row<'_, '_>,
        cols: &Columns<'_>,
        line: u64,
    ) -> Result<(), CatalogError> {
        let (offers, hosts, gpus) = (&mut self.offers, &mut self.hosts, &mut self.gpus);
        let region = row.required_text(cols.region)?;
        let zone = row.required_text(cols.zone)?;
        let price = [row.price(cols.price)?, row.price(cols.spot)?];
        let machine = row.text(cols.instance_type);
        let acc_name = row.text(cols.acc_name);
        let accelerator = if acc_name.is_empty() {
            None
        } else {
            let count = row.count(cols.acc_count)?.unwrap_or(1);
            Some(Accelerator {
                name: acc_name.to_owned(),
                count,
                memory_gib: row.accelerator_memory_gib(),
            })
        };
        match (machine, accelerator) {
            ("", None) => {
                return Err(CatalogError::Row {
                    file: cols.file.to_owned(),
                    line,
                    reason: "expected an InstanceType or an AcceleratorName, found neither".into(),
                });
            }
            // A TPU slice: sold on its own; the slice name is the shape.
            ("", Some(acc)) if acc.name.starts_with("tpu-") => {
                let shape = InstanceType {
                    name: acc.name.clone(),
                    vcpus: row.quantity(cols.vcpus)?.unwrap_or(0.0),
                    memory_gib: row.quantity(cols.memory)?.unwrap_or(0.0),
                    accelerator: Some(Accelerator { count: 1, ..acc }),
                };
                push_offers(offers, region, zone, &shape, price, |p| {
                    vec![PriceComponent {
                        label: shape.name.clone(),
                        price_per_hour: p,
                    }]
                });
            }
            ("", Some(acc)) => gpus.push(GpuRow {
                region: region.to_owned(),
                zone: zone.to_owned(),
                accelerator: acc,
                price,
            }),
            (machine, accelerator) => {
                let vcpus = row.quantity(cols.vcpus)?.unwrap_or(0.0);
                let memory_gib = row.quantity(cols.memory)?.unwrap_or(0.0);
                // A row that names both a machine and its accelerators is complete as it is.
                if accelerator.is_some() || !has_builtin_accelerators(machine) {
                    let shape = InstanceType {
                        name: machine.to_owned(),
                        vcpus,
                        memory_gib,
                        accelerator,
                    };
                    push_offers(offers, region, zone, &shape, price, |p| {
                        vec![PriceComponent {
                            label: machine.to_owned(),
                            price_per_hour: p,
                        }]
                    });
                }
                hosts.insert(
                    (zone.to_owned(), machine.to_owned()),
                    Host {
                        vcpus,
                        memory_gib,
                        price,
                    },
                );
            }
        }
        Ok(())
    }
}

/// GPU rows on the host machine GCP sells them with, in the same zone and capacity.
fn assemble(gpus: &[GpuRow], hosts: &HashMap<(String, String), Host>, offers: &mut Vec<Offer>) {
    for gpu in gpus {
        let acc = &gpu.accelerator;
        let Some(host_name) = gcp_host_for(&acc.name, acc.count) else {
            continue;
        };
        let Some(host) = hosts.get(&(gpu.zone.clone(), host_name.clone())) else {
            continue;
        };
        let shape = InstanceType {
            name: host_name.clone(),
            vcpus: host.vcpus,
            memory_gib: host.memory_gib,
            accelerator: Some(acc.clone()),
        };
        for (i, capacity) in CAPACITIES.into_iter().enumerate() {
            if let (Some(h), Some(g)) = (host.price[i], gpu.price[i]) {
                offers.push(Offer {
                    cloud: Cloud::Gcp,
                    region: Region::new(gpu.region.as_str()),
                    zone: Zone::new(gpu.zone.as_str()),
                    instance_type: shape.clone(),
                    capacity,
                    price_per_hour: h + g,
                    observed_at: None,
                    breakdown: vec![
                        PriceComponent {
                            label: host_name.clone(),
                            price_per_hour: h,
                        },
                        PriceComponent {
                            label: format!("{} x {}", acc.count, acc.name),
                            price_per_hour: g,
                        },
                    ],
                    availability: Default::default(),
                });
            }
        }
    }
}

fn push_offers(
    offers: &mut Vec<Offer>,
    region: &str,
    zone: &str,
    shape: &InstanceType,
    price: [Option<f64>; 2],
    breakdown: impl Fn(f64) -> Vec<PriceComponent>,
) {
    for (i, capacity) in CAPACITIES.into_iter().enumerate() {
        if let Some(p) = price[i] {
            offers.push(Offer {
                cloud: Cloud::Gcp,
                region: Region::new(region),
                zone: Zone::new(zone),
                instance_type: shape.clone(),
                capacity,
                price_per_hour: p,
                observed_at: None,
                breakdown: breakdown(p),
                availability: Default::default(),
            });
        }
    }
}
