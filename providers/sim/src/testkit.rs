//! A trace builder for tests (feature `test-util`, and this crate's own tests).

use std::path::PathBuf;

use tern_cloud::Cloud;

use crate::Trace;
use crate::trace::{DEFAULT_ON_DEMAND, DEFAULT_SPOT_FRACTION};

/// An AWS trace of `zone` with `available` spot instances per 5-minute tick, at the default
/// prices (p3.2xlarge on-demand, spot at the default fraction of it). Set any field after.
pub fn trace(zone: &str, available: Vec<u32>) -> Trace {
    Trace {
        source: PathBuf::from(format!("{zone}.json")),
        cloud: Cloud::Aws,
        region: crate::trace::region_of(zone),
        zone: zone.into(),
        gap_seconds: 300,
        available,
        prices: None,
        spot_price: Some(DEFAULT_ON_DEMAND * DEFAULT_SPOT_FRACTION),
        on_demand_price: Some(DEFAULT_ON_DEMAND),
    }
}
