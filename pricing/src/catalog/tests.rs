use std::path::PathBuf;

use proptest::prelude::*;
use tern_cloud::{AcceleratorKind, Capacity, Cloud};

use super::*;
use crate::{OfferQuery, QueryError};

fn shared(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/catalog")
        .join(rel)
}

const AWS_HEADER: &str = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone,Arch\n";
const GCP_HEADER: &str = "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice\n";

/// Reads the raw CSV independently of the parser under test, as (column name → value) maps.
fn raw_rows(path: &std::path::Path) -> Vec<std::collections::HashMap<String, String>> {
    let mut r = csv::Reader::from_path(path).unwrap();
    let header: Vec<String> = r.headers().unwrap().iter().map(str::to_owned).collect();
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            header
                .iter()
                .cloned()
                .zip(rec.iter().map(str::to_owned))
                .collect()
        })
        .collect()
}

#[test]
fn full_gcp_catalog_and_aws_excerpt_load() {
    let gcp = Catalog::load(&shared("gcp/vms.csv")).unwrap();
    assert_eq!(gcp.sources[0].1, Layout::Gcp);
    assert_eq!(gcp.sources[0].2, 30_510);
    let aws = Catalog::load(&shared("aws/vms.excerpt.csv")).unwrap();
    assert_eq!(aws.sources[0].1, Layout::Aws);
    assert_eq!(aws.sources[0].2, 600);
    // 600 rows, minus 8 without on-demand and 39 without spot price.
    assert_eq!(aws.offers.len(), 600 * 2 - 8 - 39);

    let bundled = crate::bundled().unwrap();
    assert_eq!(bundled.offers.len(), gcp.offers.len() + aws.offers.len());
    assert!(
        bundled
            .offers
            .iter()
            .all(|o| o.price_per_hour.is_finite() && o.price_per_hour >= 0.0)
    );
}

#[test]
fn cheapest_on_demand_single_t4_on_aws_is_g4dn_xlarge() {
    let catalog = crate::bundled().unwrap();
    let query = OfferQuery {
        accelerator: Some("T4:1".parse().unwrap()),
        cloud: Some(Cloud::Aws),
        capacity: Some(Capacity::OnDemand),
        ..Default::default()
    }
    .resolve(&catalog)
    .unwrap();
    let best = query.select(&catalog)[0];
    assert_eq!(best.instance_type.name, "g4dn.xlarge");
    assert!((best.price_per_hour - 0.526).abs() < 1e-9);
}

#[test]
fn cheapest_spot_single_t4_across_aws_zones_matches_the_raw_data() {
    let expected = raw_rows(&shared("aws/vms.excerpt.csv"))
        .into_iter()
        .filter(|r| {
            r["AcceleratorName"] == "T4" && r["AcceleratorCount"].parse::<f64>().unwrap() == 1.0
        })
        .filter(|r| !r["SpotPrice"].is_empty())
        .map(|r| {
            (
                r["SpotPrice"].parse::<f64>().unwrap(),
                r["AvailabilityZone"].clone(),
            )
        })
        .min_by(|a, b| a.0.partial_cmp(&b.0).unwrap())
        .unwrap();
    let catalog = crate::bundled().unwrap();
    let query = OfferQuery {
        accelerator: Some("t4:1".parse().unwrap()),
        cloud: Some(Cloud::Aws),
        capacity: Some(Capacity::Spot),
        ..Default::default()
    }
    .resolve(&catalog)
    .unwrap();
    let best = query.select(&catalog)[0];
    assert_eq!(best.price_per_hour, expected.0);
    assert_eq!(best.zone.as_str(), expected.1);
    assert_eq!(best.capacity, Capacity::Spot);
}

#[test]
fn gcp_a100x8_is_host_plus_eight_gpus_in_the_same_zone() {
    let raw = raw_rows(&shared("gcp/vms.csv"));
    let catalog = Catalog::load(&shared("gcp/vms.csv")).unwrap();
    let offers: Vec<_> = catalog
        .offers
        .iter()
        .filter(|o| {
            o.accelerator()
                .is_some_and(|a| a.name == "A100" && a.count == 8)
        })
        .collect();
    assert!(!offers.is_empty());
    let mut checked = [0; 2];
    for offer in offers {
        assert_eq!(offer.instance_type.name, "a2-highgpu-8g");
        let column = match offer.capacity {
            Capacity::Spot => "SpotPrice",
            _ => "Price",
        };
        let zone = offer.zone.as_str();
        let host = raw
            .iter()
            .find(|r| r["InstanceType"] == "a2-highgpu-8g" && r["AvailabilityZone"] == zone)
            .unwrap();
        let gpu = raw
            .iter()
            .find(|r| {
                r["InstanceType"].is_empty()
                    && r["AcceleratorName"] == "A100"
                    && r["AcceleratorCount"] == "8"
                    && r["AvailabilityZone"] == zone
            })
            .unwrap();
        let want = host[column].parse::<f64>().unwrap() + gpu[column].parse::<f64>().unwrap();
        assert!(
            (offer.price_per_hour - want).abs() < 1e-9,
            "{zone} {}",
            offer.capacity
        );
        assert_eq!(offer.breakdown.len(), 2);
        assert_eq!(offer.instance_type.vcpus, 96.0);
        checked[usize::from(offer.capacity == Capacity::Spot)] += 1;
    }
    assert!(
        checked[0] > 0 && checked[1] > 0,
        "both capacities are covered: {checked:?}"
    );
}

#[test]
fn gcp_tpu_rows_become_tpu_offers_and_builtin_hosts_are_not_sold_alone() {
    let catalog = Catalog::load(&shared("gcp/vms.csv")).unwrap();
    let tpu = catalog
        .offers
        .iter()
        .find(|o| o.instance_type.name == "tpu-v5p-8")
        .unwrap();
    let acc = tpu.accelerator().unwrap();
    assert_eq!(acc.kind(), AcceleratorKind::Tpu);
    assert_eq!(tpu.accelerator_units(), 8);
    // a2-highgpu-8g appears only with its GPUs attached.
    assert!(
        catalog
            .offers
            .iter()
            .filter(|o| o.instance_type.name.starts_with("a2-"))
            .all(|o| o.accelerator().is_some())
    );
    // n1 VMs are sold on their own too (CPU-only).
    assert!(
        catalog
            .offers
            .iter()
            .any(|o| o.instance_type.name == "n1-standard-8" && o.accelerator().is_none())
    );
}

#[test]
fn missing_spot_price_means_no_spot_offer() {
    let text =
        format!("{AWS_HEADER}p3.2xlarge,V100,1.0,8.0,61.0,,3.06,,us-east-1,use1-az1,x86_64\n");
    let c = Catalog::parse(text.as_bytes(), "t.csv").unwrap();
    assert_eq!(c.offers.len(), 1);
    assert_eq!(c.offers[0].capacity, Capacity::OnDemand);

    // GCP: a GPU row without spot price yields no spot GPU offer even if the host has one.
    let text = format!(
        "{GCP_HEADER}n1-highmem-8,8.0,52.0,,,,us-central1,us-central1-a,0.47,0.1\n,,,T4,1,,us-central1,us-central1-a,0.35,\n"
    );
    let c = Catalog::parse(text.as_bytes(), "g.csv").unwrap();
    let t4: Vec<_> = c
        .offers
        .iter()
        .filter(|o| o.accelerator().is_some())
        .collect();
    assert_eq!(t4.len(), 1);
    assert_eq!(t4[0].capacity, Capacity::OnDemand);
    assert!((t4[0].price_per_hour - 0.82).abs() < 1e-9);
}

#[test]
fn malformed_rows_name_file_line_and_column() {
    let text = format!(
        "{AWS_HEADER}g4dn.xlarge,T4,1.0,4.0,16.0,,0.526,0.2,us-east-1,use1-az1,x86_64\ng4dn.xlarge,T4,1.0,4.0,16.0,,abc,0.2,us-east-1,use1-az2,x86_64\n"
    );
    let err = Catalog::parse(text.as_bytes(), "prices.csv").unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.line(), Some(3), "{msg}");
    assert!(msg.starts_with("prices.csv:3: column 7 (Price)"), "{msg}");
    assert!(msg.contains("'abc'"), "{msg}");

    let text =
        format!("{AWS_HEADER}g4dn.xlarge,T4,1.0,4.0,16.0,,-0.5,,us-east-1,use1-az1,x86_64\n");
    let msg = Catalog::parse(text.as_bytes(), "neg.csv")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("neg.csv:2: column 7 (Price)") && msg.contains("non-negative"),
        "{msg}"
    );

    let text = format!("{GCP_HEADER},,,T4,1,,us-central1,us-central1-a,0.35,NaN\n");
    let msg = Catalog::parse(text.as_bytes(), "nan.csv")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("nan.csv:2: column 10 (SpotPrice)"), "{msg}");

    let text = format!("{AWS_HEADER}g4dn.xlarge,T4,1.0\n");
    let msg = Catalog::parse(text.as_bytes(), "short.csv")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("short.csv:2") && msg.contains("expected 11 fields, found 3"),
        "{msg}"
    );

    let msg = Catalog::parse(b"a,b,c\n1,2,3\n", "other.csv")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("other.csv: not a SkyPilot v8 catalog") && msg.contains("InstanceType"),
        "{msg}"
    );

    let msg = Catalog::parse(AWS_HEADER.as_bytes(), "empty.csv")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("no rows"), "{msg}");
}

#[test]
fn unknown_accelerator_lists_the_closest_known_names() {
    let catalog = crate::bundled().unwrap();
    let err = OfferQuery {
        accelerator: Some("A10:1".parse().unwrap()),
        ..Default::default()
    }
    .resolve(&catalog)
    .unwrap_err();
    match &err {
        QueryError::UnknownAccelerator { suggestions, .. } => {
            assert!(suggestions.iter().any(|s| s == "A100"), "{suggestions:?}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("closest known"));
}

fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[0-9]{1,4}(\\.[0-9]{1,3})?",
        "-?[0-9]\\.[0-9]",
        "[A-Za-z0-9 _.-]{0,12}",
        Just("tpu-v5p-8".to_owned()),
        Just("NaN".to_owned()),
        Just("\"quoted, with comma\"".to_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parser_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = Catalog::parse(&bytes, "fuzz.csv");
        let mut with_header = AWS_HEADER.as_bytes().to_vec();
        with_header.extend_from_slice(&bytes);
        let _ = Catalog::parse(&with_header, "fuzz.csv");
    }

    #[test]
    fn rows_of_random_fields_parse_or_fail_with_a_line(
        gcp in any::<bool>(),
        rows in proptest::collection::vec(proptest::collection::vec(field(), 9..12), 1..8),
    ) {
        let mut text = String::from(if gcp { GCP_HEADER } else { AWS_HEADER });
        for r in &rows {
            text.push_str(&r.join(","));
            text.push('\n');
        }
        match Catalog::parse(text.as_bytes(), "p.csv") {
            Ok(c) => {
                for o in &c.offers {
                    prop_assert!(o.price_per_hour.is_finite() && o.price_per_hour >= 0.0);
                }
            }
            Err(e) => {
                let line = e.line().unwrap_or(0);
                prop_assert!(line >= 2 || matches!(e, CatalogError::Layout { .. }), "{}", e);
                prop_assert!(e.to_string().starts_with("p.csv"));
            }
        }
    }
}

#[test]
fn conflicting_duplicate_rows_are_refused_naming_both_lines() {
    let row = "g4dn.xlarge,T4,1.0,4.0,16.0,,0.526,0.2,us-east-1,use1-az1,x86_64\n";
    let cheaper = "g4dn.xlarge,T4,1.0,4.0,16.0,,0.400,0.2,us-east-1,use1-az1,x86_64\n";
    let text = format!("{AWS_HEADER}{row}{cheaper}");
    let msg = Catalog::parse(text.as_bytes(), "dup.csv")
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with("dup.csv:3:") && msg.contains("line 2") && msg.contains("Price"),
        "{msg}"
    );
    // The same row twice describes one thing: accepted, as before.
    let text = format!("{AWS_HEADER}{row}{row}");
    assert!(Catalog::parse(text.as_bytes(), "same.csv").is_ok());
    // GCP: a host row repeated with another spot price.
    let text = format!(
        "{GCP_HEADER}n1-highmem-8,8.0,52.0,,,,us-central1,us-central1-a,0.47,0.1\nn1-highmem-8,8.0,52.0,,,,us-central1,us-central1-a,0.47,0.2\n"
    );
    let msg = Catalog::parse(text.as_bytes(), "g.csv")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("g.csv:3") && msg.contains("SpotPrice"),
        "{msg}"
    );
}

#[test]
fn names_with_control_characters_are_refused() {
    let text = format!(
        "{AWS_HEADER}g4dn.xlarge\u{1b}[2J,T4,1.0,4.0,16.0,,0.526,0.2,us-east-1,use1-az1,x86_64\n"
    );
    let msg = Catalog::parse(text.as_bytes(), "esc.csv")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("esc.csv:2: column 1 (InstanceType)"), "{msg}");
    assert!(!msg.contains('\u{1b}'), "{msg}");
}

#[test]
fn a_gzip_bomb_stops_at_the_catalog_limit() {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        gz.write_all(&zeros).unwrap();
    }
    let bomb = gz.finish().unwrap();
    assert!(bomb.len() < 1 << 20, "{} bytes compressed", bomb.len());
    let limit = Limit::new("a catalog", 8 << 20);
    let msg = gunzip_within(&bomb, "bomb.csv.gz", limit)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("bomb.csv.gz: cannot read: larger than 8 MiB, the limit for a catalog"),
        "{msg}"
    );
    // The bundled catalogs are far below the real limit.
    assert!(crate::bundled().is_ok());
}
