//! End-to-end tests of `tern offers`, `tern prices` and `tern bench catalog`, run as a user would.

// Test helpers may panic on broken fixtures; that is a test failure, as intended.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

use crate::common::{last_json, tern_output};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn shared(rel: &str) -> String {
    format!(
        "{}/../shared/data/catalog/{rel}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn offers_json_finds_the_cheapest_on_demand_t4_on_aws() {
    let o = tern_output(&[
        "offers",
        "-a",
        "T4:1",
        "--cloud",
        "aws",
        "--on-demand",
        "--json",
        "--limit",
        "3",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = last_json(&o);
    let first = &v["offers"][0];
    assert_eq!(first["instance_type"], "g4dn.xlarge");
    assert_eq!(first["on_demand_per_hour"], 0.526);
    assert!(first["spot_per_hour"].is_null(), "--on-demand hides spot");
    assert_eq!(v["rows"], 3);
    assert!(v["matching_rows"].as_u64().unwrap() > 3);
}

#[test]
fn offers_table_shows_spot_and_on_demand_side_by_side_sorted_by_price() {
    let o = tern_output(&[
        "offers", "-a", "A100:8", "--cloud", "gcp", "--limit", "0", "--json",
    ]);
    assert!(o.status.success());
    let v = last_json(&o);
    let rows = v["offers"].as_array().unwrap();
    assert!(rows.len() > 5);
    let both = rows
        .iter()
        .filter(|r| r["spot_per_hour"].is_number() && r["on_demand_per_hour"].is_number())
        .count();
    assert!(both > 0);
    // Sorted by each row's cheapest price.
    let cheapest: Vec<f64> = rows
        .iter()
        .map(|r| {
            [&r["spot_per_hour"], &r["on_demand_per_hour"]]
                .iter()
                .filter_map(|x| x.as_f64())
                .fold(f64::INFINITY, f64::min)
        })
        .collect();
    assert!(cheapest.windows(2).all(|w| w[0] <= w[1]), "{cheapest:?}");
    // GCP A100:8 = host + GPUs, with the parts listed.
    assert_eq!(rows[0]["on_demand_breakdown"].as_array().unwrap().len(), 2);
    assert_eq!(rows[0]["instance_type"], "a2-highgpu-8g");
    // per accelerator-hour = per hour / 8
    let od = rows[0]["on_demand_per_hour"].as_f64().unwrap();
    let per = rows[0]["on_demand_per_accelerator_hour"].as_f64().unwrap();
    assert!((od / 8.0 - per).abs() < 1e-9);

    let o = tern_output(&["offers", "-a", "A100:8", "--cloud", "gcp", "--limit", "2"]);
    let text = stdout(&o);
    assert!(
        text.contains("ON-DEMAND $/h")
            && text.contains("SPOT $/h")
            && text.contains("a2-highgpu-8g"),
        "{text}"
    );
    assert!(text.contains("2 of "), "{text}");
}

#[test]
fn offers_filters_apply() {
    let o = tern_output(&[
        "offers",
        "--cloud",
        "aws",
        "--region",
        "US-EAST-1",
        "--min-vcpus",
        "32",
        "--min-memory",
        "200",
        "--max-price",
        "10",
        "--spot",
        "--limit",
        "0",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = last_json(&o);
    let rows = v["offers"].as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        assert_eq!(r["region"], "us-east-1");
        assert!(r["vcpus"].as_f64().unwrap() >= 32.0);
        assert!(r["memory_gib"].as_f64().unwrap() >= 200.0);
        assert!(r["spot_per_hour"].as_f64().unwrap() <= 10.0);
        assert!(r["on_demand_per_hour"].is_null());
    }
}

#[test]
fn bad_input_gets_a_clear_error_and_no_panic() {
    let o = tern_output(&["offers", "-a", "H10:8"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unknown accelerator 'H10'") && err.contains("H100"),
        "{err}"
    );
    assert!(!err.contains("panicked"));

    let o = tern_output(&["offers", "--region", "us-est-1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("us-east-1"), "{err}");

    let o = tern_output(&["offers", "--max-price", "-3"]);
    assert!(!o.status.success());

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.csv");
    let mut text = std::fs::read_to_string(shared("aws/vms.excerpt.csv")).unwrap();
    text = text.replacen(",0.526,", ",-0.526,", 1);
    std::fs::write(&bad, text).unwrap();
    let o = tern_output(&["offers", "--catalog", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("bad.csv:")
            && err.contains("column 7 (Price)")
            && err.contains("non-negative"),
        "{err}"
    );
}

#[test]
fn prices_import_and_history_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tern.db");
    let db = db.to_str().unwrap();
    let aws = shared("aws/vms.excerpt.csv");
    let o = tern_output(&[
        "prices",
        "import",
        &aws,
        "--db",
        db,
        "--at",
        "2026-01-01T00:00:00Z",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(last_json(&o)["snapshots"][0]["offers"], 600 * 2 - 8 - 39);

    // A later snapshot where one price changed.
    let changed = dir.path().join("later.csv");
    let text = std::fs::read_to_string(&aws).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("p3.2xlarge,") && l.contains("us-east-1,"))
        .unwrap();
    let fields: Vec<&str> = line.rsplitn(6, ',').collect(); // arch, zone, region, spot, price, rest
    let new_line = line.replacen(
        &format!(",{},{},{},", fields[4], fields[3], fields[2]),
        &format!(",{},9.99,{},", fields[4], fields[2]),
        1,
    );
    assert_ne!(new_line, line);
    std::fs::write(&changed, text.replacen(line, &new_line, 1)).unwrap();
    let o = tern_output(&[
        "prices",
        "import",
        changed.to_str().unwrap(),
        "--db",
        db,
        "--at",
        "2026-02-01T00:00:00Z",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(last_json(&o)["snapshots"][0]["changed"], 1);

    let zone = fields[1];
    let o = tern_output(&[
        "prices",
        "history",
        "--instance-type",
        "p3.2xlarge",
        "--zone",
        zone,
        "--capacity",
        "spot",
        "--db",
        db,
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let points = last_json(&o)["points"].as_array().unwrap().clone();
    assert_eq!(points.len(), 2, "{points:?}");
    assert_eq!(points[1]["price_per_hour"], 9.99);
    assert!(
        points[0]["observed_at"]
            .as_str()
            .unwrap()
            .starts_with("2026-01-01")
    );

    let o = tern_output(&[
        "prices",
        "history",
        "--instance-type",
        "p3.2xlarge",
        "--db",
        db,
    ]);
    let text = stdout(&o);
    assert!(
        text.contains("OBSERVED AT") && text.contains("9.99"),
        "{text}"
    );

    let missing = dir.path().join("none.db");
    let o = tern_output(&[
        "prices",
        "history",
        "--instance-type",
        "x",
        "--db",
        missing.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("tern prices import"));
}

#[test]
fn bench_catalog_prints_a_json_summary() {
    let o = tern_output(&["bench", "catalog", "--iterations", "1", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = last_json(&o);
    assert_eq!(v["rows"], 30_510 + 600);
    assert!(v["p50_ms"].as_f64().unwrap() > 0.0);
}

#[test]
fn each_gpu_on_one_gcp_host_type_is_its_own_row() {
    // n1-highmem-8 is sold bare and with one T4, P4 or V100 in us-central1-a: four rows, each
    // with its own accelerator and price (they were once merged into one row).
    let out = tern_output(&[
        "offers",
        "--cloud",
        "gcp",
        "--region",
        "us-central1",
        "--json",
        "--limit",
        "0",
    ]);
    assert!(out.status.success());
    let v = last_json(&out);
    let rows: Vec<&serde_json::Value> = v["offers"]
        .as_array()
        .expect("offers")
        .iter()
        .filter(|r| r["zone"] == "us-central1-a" && r["instance_type"] == "n1-highmem-8")
        .collect();
    let mut gpus: Vec<String> = rows
        .iter()
        .map(|r| r["accelerator"]["name"].as_str().unwrap_or("-").to_owned())
        .collect();
    gpus.sort();
    assert_eq!(gpus, ["-", "P4", "T4", "V100"], "{rows:?}");
    for r in rows {
        let parts: f64 = r["on_demand_breakdown"]
            .as_array()
            .expect("breakdown")
            .iter()
            .map(|p| p["price_per_hour"].as_f64().unwrap_or(0.0))
            .sum();
        let total = r["on_demand_per_hour"].as_f64().expect("price");
        assert!((parts - total).abs() < 1e-9, "{r}");
    }
}

/// A reader that stops early (`tern offers | head -1`) ends tern quietly, as a shell expects
/// (exit 141, no panic on stderr), not with a "failed printing to stdout" backtrace.
#[test]
fn a_closed_pipe_ends_the_listing_quietly() {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["offers", "--limit", "0"])
        .env_remove("TERN_DB")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tern");
    let mut first = [0u8; 16];
    child
        .stdout
        .take()
        .expect("stdout")
        .read_exact(&mut first)
        .expect("some output");
    // The read end is dropped here: tern's next writes hit a closed pipe.
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
}
