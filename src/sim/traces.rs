//! The spot availability a simulated cloud replays (`tern demo`, `tern controller --provider
//! sim`, `tern sim serve`): real traces from the shared data folder when they are there, seeded
//! synthetic ones when not, priced from the bundled catalog.

use std::path::{Path, PathBuf};

use tern_cloud::{Capacity, InstanceType, Region};
use tern_sim::{Trace, TraceError};

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("reading {dir} (set TERN_DATA or pass --trace FILE): {source}")]
    NoTraces {
        dir: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no trace files in {0}")]
    EmptyTraceDir(String),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("loading the bundled catalog: {0}")]
    Catalog(#[from] tern_pricing::CatalogError),
}

/// Traces used when `--trace` is not given: AWS V100 availability, 16 nodes, three zones.
const DEFAULT_TRACES: &str = "catalog/aws/spot-traces/availability/16-node/aws-08-27-2023";

fn data_root() -> PathBuf {
    if let Some(d) = std::env::var_os("TERN_DATA") {
        return PathBuf::from(d);
    }
    let local = PathBuf::from("../shared/data");
    if local.is_dir() {
        return local;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data")
}

pub fn default_traces() -> Result<Vec<PathBuf>, SetupError> {
    let dir = data_root().join(DEFAULT_TRACES);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|source| SetupError::NoTraces {
            dir: dir.display().to_string(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(SetupError::EmptyTraceDir(dir.display().to_string()));
    }
    Ok(files)
}

/// The traces a simulated cloud replays, and why they are synthetic when they are.
#[derive(Debug, Clone)]
pub struct SimTraces {
    pub traces: Vec<Trace>,
    /// Set when the real traces could not be read and seeded synthetic ones stand in.
    pub synthetic_because: Option<String>,
}

/// The spot traces a simulated cloud replays: `files`; else the default real traces; else
/// seeded synthetic ones (saying why). Priced from the bundled catalog for `instance_type`.
pub fn sim_traces(
    files: &[PathBuf],
    seed: u64,
    instance_type: &str,
) -> Result<SimTraces, SetupError> {
    let mut synthetic_because = None;
    let files = if files.is_empty() {
        match default_traces() {
            Ok(files) => files,
            Err(e) => {
                synthetic_because = Some(e.to_string());
                Vec::new()
            }
        }
    } else {
        files.to_vec()
    };
    let mut traces = if files.is_empty() {
        synthetic_traces(seed)?
    } else {
        files
            .iter()
            .map(|f| Trace::load(f))
            .collect::<Result<Vec<_>, _>>()?
    };
    price_traces(&mut traces, instance_type)?;
    Ok(SimTraces {
        traces,
        synthetic_because,
    })
}

/// The distinct regions of `traces`, sorted.
pub fn regions_of(traces: &[Trace]) -> Vec<Region> {
    let mut regions: Vec<Region> = traces.iter().map(|t| Region::new(&t.region)).collect();
    regions.sort();
    regions.dedup();
    regions
}

/// Three zones of 16-instance spot availability from a seeded up/down process, for machines
/// without the real traces (they are not shipped in the binary: their upstream has no licence).
/// Capacity stays for about 50 ticks of 5 minutes and is gone for about 10.
fn synthetic_traces(seed: u64) -> Result<Vec<Trace>, SetupError> {
    let mut next = rng(seed);
    ["us-east-2b", "us-west-2a", "us-west-2c"]
        .iter()
        .map(|zone| synthetic(zone, "v100", 16, &mut next))
        .collect()
}

/// A seeded uniform draw in [0, 1) (xorshift).
fn rng(seed: u64) -> impl FnMut() -> f64 {
    let mut state = seed ^ 0x9e37_79b9_7f4a_7c15;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// 4,000 ticks of 5 minutes of a seeded up/down process: up for about 50 ticks with
/// `max` − 25 % … `max` instances, down for about 10.
fn synthetic(
    zone: &str,
    label: &str,
    max: u32,
    next: &mut impl FnMut() -> f64,
) -> Result<Trace, SetupError> {
    let mut up = true;
    let data: Vec<String> = (0..4000)
        .map(|_| {
            up = if up { next() > 0.02 } else { next() > 0.9 };
            let spread = (f64::from(max) / 4.0).max(1.0);
            let count = if up {
                max - ((next() * spread) as u32).min(max - 1)
            } else {
                0
            };
            count.to_string()
        })
        .collect();
    let json = format!(
        "{{\"metadata\": {{\"gap_seconds\": 300, \"zone\": \"{zone}\"}}, \"data\": [{}]}}",
        data.join(",")
    );
    Trace::parse(
        Path::new(&format!("synthetic/{zone}_{label}.json")),
        json.as_bytes(),
    )
    .map_err(SetupError::from)
}

/// Shapes the demo's cloud sells beside the V100 traces, so every example job has capacity:
/// (instance type, zones, most spot instances at once). No public trace exists for them, so
/// their availability is synthetic (seeded) and says so.
const DEMO_SHAPES: [(&str, &[&str], u32); 4] = [
    ("g4dn.xlarge", &["us-east-2b", "us-west-2a"], 8),
    ("p4d.24xlarge", &["us-east-2b", "us-west-2c"], 4),
    ("p4de.24xlarge", &["us-west-2a"], 4),
    ("p5.48xlarge", &["us-east-2b", "us-west-2c"], 4),
];

/// The demo's simulated cloud: the V100 `base` pools (p3.2xlarge) and synthetic pools of the
/// other shapes the example jobs ask for, each priced from the bundled catalog for its
/// region; with a line per pool saying whether it is real or synthetic.
#[derive(Debug, Clone)]
pub struct DemoPools {
    pub traces: Vec<Trace>,
    pub types: Vec<InstanceType>,
    pub notes: Vec<String>,
}

pub fn demo_pools(
    base: SimTraces,
    seed: u64,
    base_type: &InstanceType,
) -> Result<DemoPools, SetupError> {
    let catalog = tern_pricing::bundled()?;
    let real = base.synthetic_because.is_none();
    let mut notes: Vec<String> = base
        .traces
        .iter()
        .map(|t| {
            let from = if real {
                format!("real trace {}", t.source.display())
            } else {
                "synthetic (seeded)".to_string()
            };
            format!("{} {}: {from}", t.zone, base_type.name)
        })
        .collect();
    let mut types = vec![base_type.clone(); base.traces.len()];
    let mut traces = base.traces;
    let mut next = rng(seed ^ 0x5eed);
    for (name, zones, max) in DEMO_SHAPES {
        let Some(shape) = catalog
            .offers
            .iter()
            .find(|o| o.instance_type.name == name)
            .map(|o| o.instance_type.clone())
        else {
            continue;
        };
        for zone in zones {
            let mut t = synthetic(zone, name, max, &mut next)?;
            price_traces(std::slice::from_mut(&mut t), name)?;
            if t.on_demand_price.is_none() {
                continue;
            }
            notes.push(format!(
                "{zone} {name}: synthetic (seeded), up to {max} spot instances"
            ));
            traces.push(t);
            types.push(shape.clone());
        }
    }
    Ok(DemoPools {
        traces,
        types,
        notes,
    })
}

/// Price the simulated zones from the bundled catalog: on-demand and mean spot $/h of the
/// instance type in each trace's region.
fn price_traces(traces: &mut [Trace], instance_type: &str) -> Result<(), SetupError> {
    let catalog = tern_pricing::bundled()?;
    for t in traces.iter_mut() {
        let in_region = |c: Capacity| -> Vec<f64> {
            catalog
                .offers
                .iter()
                .filter(|o| {
                    o.instance_type.name == instance_type
                        && o.region.as_str() == t.region
                        && o.capacity == c
                })
                .map(|o| o.price_per_hour)
                .collect()
        };
        let od = in_region(Capacity::OnDemand);
        let spot = in_region(Capacity::Spot);
        if let Some(p) = od.first() {
            t.on_demand_price.get_or_insert(*p);
        }
        if !spot.is_empty() && t.prices.is_none() {
            t.spot_price
                .get_or_insert(spot.iter().sum::<f64>() / spot.len() as f64);
        }
    }
    Ok(())
}
