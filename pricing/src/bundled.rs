//! The catalog snapshot compiled into the binary (see `pricing/data/README.md`).

use crate::catalog::gunzip;
use crate::{Catalog, CatalogError};

const AWS: &[u8] = include_bytes!("../data/aws-vms.excerpt.csv.gz");
const GCP: &[u8] = include_bytes!("../data/gcp-vms.csv.gz");

/// The bundled AWS + GCP catalog. Decompresses and parses on every call (≈ tens of ms in
/// release; see `tern bench catalog`), so callers should keep the result.
pub fn bundled() -> Result<Catalog, CatalogError> {
    let mut catalog = Catalog::parse(
        &gunzip(AWS, "bundled:aws-vms.excerpt.csv.gz")?,
        "bundled:aws-vms.excerpt.csv",
    )?;
    catalog.merge(Catalog::parse(
        &gunzip(GCP, "bundled:gcp-vms.csv.gz")?,
        "bundled:gcp-vms.csv",
    )?);
    Ok(catalog)
}
