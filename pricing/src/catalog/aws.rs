//! AWS layout: one row per (instance type, AZ); on-demand and spot prices side by side.

use tern_cloud::{Accelerator, Capacity, Cloud, InstanceType, Offer, PriceComponent, Region, Zone};

use super::{CatalogError, Columns, Row, Seen};

pub(super) fn parse(
    reader: &mut csv::Reader<&[u8]>,
    cols: &Columns<'_>,
) -> Result<(Vec<Offer>, usize), CatalogError> {
    let mut offers = Vec::new();
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
        let name = row.required_text(cols.instance_type)?;
        let region = row.required_text(cols.region)?;
        let zone = row.required_text(cols.zone)?;
        let accelerator = match row.text(cols.acc_name) {
            "" => None,
            acc => {
                let count = row.count(cols.acc_count)?.ok_or_else(|| {
                    cols.field_error(
                        line,
                        cols.acc_count,
                        format!("expected a count for accelerator '{acc}', found an empty field"),
                    )
                })?;
                Some(Accelerator {
                    name: acc.to_owned(),
                    count,
                    memory_gib: row.accelerator_memory_gib(),
                })
            }
        };
        let shape = InstanceType {
            name: name.to_owned(),
            vcpus: row.quantity(cols.vcpus)?.unwrap_or(0.0),
            memory_gib: row.quantity(cols.memory)?.unwrap_or(0.0),
            accelerator,
        };
        for (capacity, column) in [
            (Capacity::OnDemand, cols.price),
            (Capacity::Spot, cols.spot),
        ] {
            if let Some(price) = row.price(column)? {
                offers.push(Offer {
                    cloud: Cloud::Aws,
                    region: Region::new(region),
                    zone: Zone::new(zone),
                    instance_type: shape.clone(),
                    capacity,
                    price_per_hour: price,
                    observed_at: None,
                    breakdown: vec![PriceComponent {
                        label: name.to_owned(),
                        price_per_hour: price,
                    }],
                    availability: Default::default(),
                });
            }
        }
    }
    Ok((offers, rows))
}
