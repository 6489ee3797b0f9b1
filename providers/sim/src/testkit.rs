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

/// A seeded stream of numbers for tests that need traces of many shapes (a 64-bit linear
/// congruential generator, its high bits): the same seed gives the same numbers everywhere.
#[derive(Debug, Clone)]
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Lcg {
        Lcg(lcg_step(seed))
    }

    pub fn next_u32(&mut self) -> u32 {
        self.0 = lcg_step(self.0);
        (self.0 >> 33) as u32
    }
}

fn lcg_step(x: u64) -> u64 {
    x.wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
}
