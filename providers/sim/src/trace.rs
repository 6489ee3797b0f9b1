//! Spot availability traces in the Can't Be Late JSON layout.
//!
//! `{"metadata": {"gap_seconds": N, ...}, "data": [available count per tick]}`, optionally with
//! `"prices": [spot $/h per tick]` and `metadata.price_info = {"price": spot, "on_demand_price": od}`.
//! Optional `metadata.zone`, `metadata.region` and `metadata.cloud` override what the file name
//! implies (`us-east-1a_v100_1.json` → zone `us-east-1a`, region `us-east-1`, cloud from the path).

use std::path::{Path, PathBuf};

use serde_json::Value;
use tern_cloud::Cloud;
use tern_cloud::input::{Limit, ReadError, read_capped};
use tern_cloud::name::check_label;

/// Why a trace file was rejected. Always names the file, so a bad file among forty is obvious.
/// p3.2xlarge on-demand in us-east-1 (the V100 traces' instance type), from the bundled catalog.
pub const DEFAULT_ON_DEMAND: f64 = 3.06;
/// Spot as a fraction of on-demand when nothing better is known: 0.30, i.e. $0.92/h for
/// p3.2xlarge, the low end of the measured $0.92–1.85/h (DESIGN.md §5) and the Can't Be Late
/// paper's setting. Pass `--spot-price` for anything else.
pub const DEFAULT_SPOT_FRACTION: f64 = 0.30;

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: PathBuf,
        #[source]
        source: ReadError,
    },
    #[error("{file}: not valid JSON: {reason}")]
    Json { file: PathBuf, reason: String },
    #[error("{file}: {reason}")]
    Invalid { file: PathBuf, reason: String },
}

impl TraceError {
    pub fn file(&self) -> &Path {
        match self {
            TraceError::Read { file, .. }
            | TraceError::Json { file, .. }
            | TraceError::Invalid { file, .. } => file,
        }
    }

    /// Whether the file exists but its content is wrong (as opposed to an IO failure).
    pub fn is_format(&self) -> bool {
        !matches!(self, TraceError::Read { .. })
    }
}

/// One zone's replayable history: how many spot instances could be had at each tick.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub source: PathBuf,
    pub cloud: Cloud,
    pub region: String,
    pub zone: String,
    pub gap_seconds: u32,
    /// Available spot instances per tick (0/1 for one-node traces, 0..K for K-node traces).
    pub available: Vec<u32>,
    /// Spot $/h per tick, when the trace carries a price series.
    pub prices: Option<Vec<f64>>,
    /// `metadata.price_info.price`: a flat spot price for the whole trace.
    pub spot_price: Option<f64>,
    /// `metadata.price_info.on_demand_price`.
    pub on_demand_price: Option<f64>,
}

impl Trace {
    pub fn load(path: &Path) -> Result<Trace, TraceError> {
        let bytes = read_capped(path, Limit::TRACE).map_err(|source| TraceError::Read {
            file: path.to_path_buf(),
            source,
        })?;
        Trace::parse(path, &bytes)
    }

    /// Parse `bytes` as if read from `path` (the path gives the zone name and appears in errors).
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Trace, TraceError> {
        let file = path.to_path_buf();
        let invalid = |reason: String| TraceError::Invalid {
            file: file.clone(),
            reason,
        };
        let root: Value = serde_json::from_slice(bytes).map_err(|e| TraceError::Json {
            file: file.clone(),
            reason: e.to_string(),
        })?;
        let obj = root.as_object().ok_or_else(|| {
            invalid("top level must be an object with \"metadata\" and \"data\"".into())
        })?;
        let meta = obj
            .get("metadata")
            .and_then(Value::as_object)
            .ok_or_else(|| invalid("missing object \"metadata\"".into()))?;
        let gap = meta
            .get("gap_seconds")
            .ok_or_else(|| invalid("missing \"metadata.gap_seconds\"".into()))?;
        let gap_seconds = gap
            .as_u64()
            .or_else(|| gap.as_f64().filter(|g| g.fract() == 0.0 && *g >= 0.0).map(|g| g as u64))
            .filter(|g| (1..=86_400).contains(g))
            .ok_or_else(|| {
                invalid(format!(
                    "\"metadata.gap_seconds\" must be a whole number of seconds in 1..=86400, got {gap}"
                ))
            })? as u32;
        let data = obj
            .get("data")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid("missing array \"data\"".into()))?;
        let available = counts(data).map_err(invalid)?;
        let prices = price_series(obj.get("prices"), available.len()).map_err(invalid)?;
        let (spot_price, on_demand_price) = price_info(meta.get("price_info")).map_err(invalid)?;
        let text = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_owned);
        let zone = text("zone").unwrap_or_else(|| zone_from_path(path));
        let region = text("region").unwrap_or_else(|| region_of(&zone));
        for (what, label) in [("zone", &zone), ("region", &region)] {
            check_label(label).map_err(|found| {
                invalid(format!(
                    "the {what} (\"metadata.{what}\" or the file name) must be a name without \
                     control characters, got {found}"
                ))
            })?;
        }
        let cloud = match text("cloud") {
            Some(c) => c
                .parse::<Cloud>()
                .map_err(|e| invalid(format!("\"metadata.cloud\": {e}")))?,
            None => cloud_from_path(path),
        };
        Ok(Trace {
            source: file,
            cloud,
            region,
            zone,
            gap_seconds,
            available,
            prices,
            spot_price,
            on_demand_price,
        })
    }

    /// The trace from tick `first` on (the ticks before it dropped): a simulated cloud that
    /// starts at a chosen moment of a recording. `None` when the trace has no tick `first`.
    pub fn from_tick(mut self, first: usize) -> Option<Trace> {
        if first >= self.available.len() {
            return None;
        }
        self.available.drain(..first);
        if let Some(p) = &mut self.prices {
            p.drain(..first);
        }
        Some(self)
    }

    pub fn ticks(&self) -> usize {
        self.available.len()
    }

    pub fn hours(&self) -> f64 {
        self.ticks() as f64 * f64::from(self.gap_seconds) / 3600.0
    }

    /// Fraction of ticks with at least `nodes` spot instances available.
    pub fn availability(&self, nodes: u32) -> f64 {
        let up = self.available.iter().filter(|&&n| n >= nodes).count();
        up as f64 / self.ticks() as f64
    }

    /// Lead time of an interruption notice on this trace's cloud (AWS 2 min, GCP 30 s).
    pub fn notice_seconds(&self) -> u32 {
        notice_seconds(self.cloud)
    }
}

/// `data`: a non-negative whole count of available instances per tick.
fn counts(data: &[Value]) -> Result<Vec<u32>, String> {
    if data.is_empty() {
        return Err("\"data\" is empty".into());
    }
    data.iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_u64()
                .or_else(|| v.as_f64().filter(|x| x.fract() == 0.0 && *x >= 0.0).map(|x| x as u64))
                .filter(|n| *n <= u64::from(u32::MAX))
                .map(|n| n as u32)
                .ok_or_else(|| {
                    format!(
                        "\"data[{i}]\" must be a non-negative whole count of available instances, got {v}"
                    )
                })
        })
        .collect()
}

/// `prices`: absent, or one finite $/h ≥ 0 per tick of `data`.
fn price_series(prices: Option<&Value>, ticks: usize) -> Result<Option<Vec<f64>>, String> {
    match prices {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(ps)) => {
            if ps.len() != ticks {
                return Err(format!(
                    "\"prices\" has {} entries but \"data\" has {ticks}",
                    ps.len()
                ));
            }
            ps.iter()
                .enumerate()
                .map(|(i, p)| {
                    price(p)
                        .ok_or_else(|| format!("\"prices[{i}]\" must be a finite $/h ≥ 0, got {p}"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some)
        }
        Some(other) => Err(format!("\"prices\" must be an array, got {other}")),
    }
}

/// `metadata.price_info`: (spot, on-demand), each a positive $/h where given.
fn price_info(info: Option<&Value>) -> Result<(Option<f64>, Option<f64>), String> {
    let info = match info {
        None | Some(Value::Null) => return Ok((None, None)),
        Some(Value::Object(info)) => info,
        Some(other) => {
            return Err(format!(
                "\"metadata.price_info\" must be an object, got {other}"
            ));
        }
    };
    let field = |k: &str| -> Result<Option<f64>, String> {
        match info.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => price(v).filter(|p| *p > 0.0).map(Some).ok_or_else(|| {
                format!("\"metadata.price_info.{k}\" must be a positive $/h, got {v}")
            }),
        }
    };
    Ok((field("price")?, field("on_demand_price")?))
}

/// Interruption notice lead time per cloud (DESIGN.md §5). The simulated cloud uses AWS's.
pub fn notice_seconds(cloud: Cloud) -> u32 {
    match cloud {
        Cloud::Gcp => 30,
        Cloud::Aws | Cloud::Sim => 120,
    }
}

fn price(v: &Value) -> Option<f64> {
    v.as_f64().filter(|p| p.is_finite() && *p >= 0.0)
}

/// `us-east-1a_v100_1.json` → `us-east-1a`.
fn zone_from_path(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    stem.split('_').next().unwrap_or_default().to_owned()
}

/// AWS `us-east-1a` → `us-east-1`; GCP `us-central1-a` → `us-central1`; otherwise the zone itself.
pub fn region_of(zone: &str) -> String {
    if let Some((region, suffix)) = zone.rsplit_once('-')
        && suffix.len() == 1
        && suffix.chars().all(|c| c.is_ascii_lowercase())
        && region.chars().any(|c| c.is_ascii_digit())
    {
        return region.to_owned();
    }
    let trimmed = zone.trim_end_matches(|c: char| c.is_ascii_lowercase());
    if trimmed.len() + 1 == zone.len() && trimmed.ends_with(|c: char| c.is_ascii_digit()) {
        return trimmed.to_owned();
    }
    zone.to_owned()
}

fn cloud_from_path(path: &Path) -> Cloud {
    for part in path.components().rev() {
        let s = part.as_os_str().to_string_lossy().to_ascii_lowercase();
        if s == "gcp" || s.starts_with("gcp-") {
            return Cloud::Gcp;
        }
        if s == "aws" || s.starts_with("aws-") {
            return Cloud::Aws;
        }
    }
    Cloud::Sim
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn parses_the_upstream_layout_and_names_the_zone() {
        let t = Trace::parse(
            &p("aws/spot-traces/x/aws-02-15-2023/us-east-1a_v100_1.json"),
            br#"{"metadata": {"gap_seconds": 195}, "data": [0, 1, 1]}"#,
        )
        .unwrap();
        assert_eq!(t.zone, "us-east-1a");
        assert_eq!(t.region, "us-east-1");
        assert_eq!(t.cloud, Cloud::Aws);
        assert_eq!(t.available, vec![0, 1, 1]);
        assert_eq!(t.notice_seconds(), 120);
        let g = Trace::parse(
            &p("gcp/spot-traces/preemption/1-node/gcp-04-30-2023/us-central1-a_c3-88.json"),
            br#"{"metadata": {"gap_seconds": 30}, "data": [1]}"#,
        )
        .unwrap();
        assert_eq!((g.region.as_str(), g.cloud), ("us-central1", Cloud::Gcp));
        assert_eq!(g.notice_seconds(), 30);
    }

    #[test]
    fn reads_prices_and_price_info() {
        let t = Trace::parse(
            &p("z.json"),
            br#"{"metadata": {"gap_seconds": 60, "price_info": {"price": 0.9, "on_demand_price": 3.06}, "zone": "a1", "region": "r"},
                "data": [1, 0], "prices": [0.9, 1.1]}"#,
        )
        .unwrap();
        assert_eq!(t.prices, Some(vec![0.9, 1.1]));
        assert_eq!((t.spot_price, t.on_demand_price), (Some(0.9), Some(3.06)));
        assert_eq!((t.zone.as_str(), t.region.as_str()), ("a1", "r"));
    }

    #[test]
    fn zone_names_with_control_characters_are_refused() {
        let e = Trace::parse(
            &p("z.json"),
            br#"{"metadata": {"gap_seconds": 60, "zone": "a\u001b[2Jb"}, "data": [1]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("z.json: the zone"), "{e}");
        assert!(!e.contains('\u{1b}'), "{e}");
    }

    #[test]
    fn endless_files_stop_at_the_trace_limit() {
        let e = Trace::load(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(
            e.contains("/dev/zero: cannot read: larger than 64 MiB"),
            "{e}"
        );
    }

    #[test]
    fn rejects_bad_files_with_file_and_reason() {
        let cases: [(&[u8], &str); 6] = [
            (b"{", "not valid JSON"),
            (br#"{"data": [1]}"#, "metadata"),
            (
                br#"{"metadata": {"gap_seconds": 0}, "data": [1]}"#,
                "gap_seconds",
            ),
            (br#"{"metadata": {"gap_seconds": 5}, "data": []}"#, "empty"),
            (
                br#"{"metadata": {"gap_seconds": 5}, "data": [1, -1]}"#,
                "data[1]",
            ),
            (
                br#"{"metadata": {"gap_seconds": 5}, "data": [1], "prices": [1, 2]}"#,
                "prices",
            ),
        ];
        for (bytes, want) in cases {
            let err = Trace::parse(&p("bad/file.json"), bytes).unwrap_err();
            let msg = err.to_string();
            assert!(msg.starts_with("bad/file.json: "), "{msg}");
            assert!(msg.contains(want), "{msg} should mention {want}");
            assert!(err.is_format());
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Trace::parse(&p("fuzz.json"), &bytes);
        }

        #[test]
        fn arbitrary_json_shapes_never_panic(
            gap in proptest::num::f64::ANY,
            data in proptest::collection::vec(proptest::num::f64::ANY, 0..8),
            prices in proptest::option::of(proptest::collection::vec(proptest::num::f64::ANY, 0..8)),
        ) {
            let body = serde_json::json!({"metadata": {"gap_seconds": gap}, "data": data, "prices": prices});
            let _ = Trace::parse(&p("fuzz.json"), body.to_string().as_bytes());
        }
    }
}
