//! The build profile's promises (Cargo.toml, `.cargo/config.toml`, ARCHITECTURE.md "Build
//! profile"), checked: the dependencies built below opt-level 3 exist and are none of the
//! crates with hot loops; with thin-local LTO off, the workspace crates with hot loops are built
//! as one codegen unit; and the CMake toolchain file that builds HiGHS at -O2 is where the cargo
//! configuration points.

use std::collections::BTreeSet;

/// Dependencies whose own (non-generic) code runs on a hot path: parsing catalogs, traces and
/// the store's JSON, the store itself, the async runtime, the solver, the forecaster's fit,
/// the simulated cloud's random draws. None may be built below opt-level 2.
const HOT: &[&str] = &[
    "serde_json",
    "csv",
    "csv-core",
    "memchr",
    "flate2",
    "miniz_oxide",
    "rusqlite",
    "libsqlite3-sys",
    "tokio",
    "hashbrown",
    "foldhash",
    "highs",
    "highs-sys",
    "argmin",
    "argmin-math",
    "rand",
    "rand_chacha",
    "rand_xoshiro",
];

/// Workspace crates with hot loops (planner, forecaster and deadline DP, the replay, catalog
/// parsing, the simulated cloud, the vocabulary they share).
const HOT_MEMBERS: &[&str] = &[
    "tern-plan",
    "tern-policies",
    "tern-replay",
    "tern-pricing",
    "tern-sim",
    "tern-cloud",
];

fn read_toml(name: &str) -> toml::Table {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    let text = std::fs::read_to_string(&path).expect("read the file");
    text.parse().expect("parse it as TOML")
}

fn locked_packages() -> BTreeSet<String> {
    let lock = read_toml("Cargo.lock");
    lock["package"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect()
}

fn release() -> toml::Table {
    let root = read_toml("Cargo.toml");
    root["profile"]["release"]
        .as_table()
        .expect("[profile.release]")
        .clone()
}

#[test]
fn only_cold_dependencies_are_built_below_opt_level_3() {
    let locked = locked_packages();
    let members: Vec<&str> = HOT_MEMBERS.iter().copied().chain(["tern"]).collect();
    let release = release();
    let packages = release["package"].as_table().expect("package overrides");
    let mut broken = Vec::new();
    let mut lowered = 0;
    for (name, table) in packages {
        let Some(level) = table.get("opt-level").and_then(toml::Value::as_integer) else {
            continue;
        };
        if level >= 3 {
            continue;
        }
        lowered += 1;
        if name == "*" {
            broken.push("`*` also outranks build-override (proc macros, build scripts)".into());
        } else if !locked.contains(name) {
            broken.push(format!("{name}: not in Cargo.lock, the entry is stale"));
        } else if members.contains(&name.as_str()) {
            broken.push(format!("{name}: a workspace crate at opt-level {level}"));
        } else if HOT.contains(&name.as_str()) && level < 2 {
            broken.push(format!("{name}: on a hot path, at opt-level {level}"));
        }
    }
    assert!(lowered > 0, "the profile lowers nothing: update this test");
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn without_lto_the_hot_workspace_crates_are_one_codegen_unit() {
    let release = release();
    if release.get("lto").and_then(toml::Value::as_str) != Some("off") {
        return;
    }
    let packages = release["package"].as_table().expect("package overrides");
    let broken: Vec<_> = HOT_MEMBERS
        .iter()
        .filter(|m| {
            packages
                .get(**m)
                .and_then(|t| t.get("codegen-units"))
                .and_then(toml::Value::as_integer)
                != Some(1)
        })
        .collect();
    assert!(
        broken.is_empty(),
        "lto = \"off\" but these hot crates are split into several codegen units: {broken:?}"
    );
}

#[test]
fn the_highs_toolchain_file_is_where_the_cargo_config_points() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = read_toml(".cargo/config.toml");
    let entry = &config["env"]["CMAKE_TOOLCHAIN_FILE"];
    assert_eq!(entry["relative"].as_bool(), Some(true), "{entry}");
    let file = root.join(entry["value"].as_str().expect("value"));
    let text = std::fs::read_to_string(&file).expect("the toolchain file exists");
    for lang in ["C", "CXX"] {
        let line = format!("set(CMAKE_{lang}_FLAGS_RELEASE \"-O2 -DNDEBUG\" CACHE STRING");
        assert!(text.contains(&line), "{} lacks {line}", file.display());
    }
}
