//! The layering ARCHITECTURE.md shows, checked as an allowlist read from its two tables (between
//! the `layers:crates` and `layers:modules` markers): an edge that is not listed fails, and so
//! does a crate or library module with no row, so a new one cannot go unchecked.
//!
//! - Inside the `tern` library, a module's edges are its `use crate::…` and `crate::…` paths;
//!   nothing imports the binary's `cmd`, and `anyhow` stays in the binary.
//! - Between crates (from `cargo metadata`): every `tern*` dependency of every workspace
//!   package; and only provider crates depend on cloud SDKs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The rows of the table after `<!-- layers:NAME -->` in ARCHITECTURE.md: the first cell's
/// name → the names in the second cell (`—` for none).
fn allowlist(name: &str) -> BTreeMap<String, BTreeSet<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    let text = std::fs::read_to_string(path).expect("ARCHITECTURE.md");
    let marker = format!("<!-- layers:{name} -->");
    let start = text.find(&marker).unwrap_or_else(|| panic!("no {marker}"));
    let mut rows = BTreeMap::new();
    let names = |cell: &str| -> BTreeSet<String> {
        cell.split(',')
            .map(|c| c.trim().trim_matches('`').to_string())
            .filter(|c| !c.is_empty() && c != "—")
            .collect()
    };
    for line in text[start + marker.len()..]
        .lines()
        .skip_while(|l| l.trim().is_empty())
    {
        let Some(row) = line.trim().strip_prefix('|') else {
            break;
        };
        let cells: Vec<&str> = row.split('|').collect();
        let key = cells[0].trim().trim_matches('`');
        if cells.len() < 2 || key.starts_with("---") || key == "crate" || key == "module" {
            continue;
        }
        rows.insert(key.to_string(), names(cells[1]));
    }
    assert!(!rows.is_empty(), "the {marker} table is empty");
    rows
}

/// The library unit a file under `src/` belongs to: its top-level module, with `api`'s wire
/// types and client apart (they sit below the controller; the server above it).
fn unit_of(rel: &str) -> String {
    if rel.starts_with("api/wire") {
        return "api::wire".into();
    }
    if rel == "api/client.rs" {
        return "api::client".into();
    }
    let top = rel.split('/').next().unwrap_or(rel);
    top.trim_end_matches(".rs").to_string()
}

/// The unit a `crate::` path names.
fn target_of(path: &str) -> String {
    let mut parts = path.split("::");
    let top = parts.next().unwrap_or_default();
    match (top, parts.next()) {
        ("api", Some(sub @ ("wire" | "client"))) => format!("api::{sub}"),
        _ => top.to_string(),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Library source files by path relative to `src/` (the binary's `main.rs` and `cmd/` left out).
fn library() -> BTreeMap<String, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .filter_map(|p| {
            let rel = p
                .strip_prefix(&src)
                .ok()?
                .to_string_lossy()
                .replace('\\', "/");
            if rel == "main.rs" || rel.starts_with("cmd/") {
                return None;
            }
            Some((rel, std::fs::read_to_string(&p).expect("read")))
        })
        .collect()
}

/// `crate::a::b` paths a file names, including grouped `use crate::{a, b::c}` imports.
fn crate_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        if text[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `tern_crate::`
        }
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            out.extend(inner.split(',').map(|p| p.trim().to_string()));
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            out.push(rest[..end].trim_end_matches(':').to_string());
        }
    }
    out
}

#[test]
fn library_modules_use_only_what_the_table_allows() {
    let allowed = allowlist("modules");
    let mut broken = Vec::new();
    let mut units = BTreeSet::new();
    for (rel, text) in library() {
        if rel == "lib.rs" {
            continue;
        }
        let unit = unit_of(&rel);
        units.insert(unit.clone());
        let Some(may) = allowed.get(&unit) else {
            broken.push(format!("{rel}: module `{unit}` has no row in the table"));
            continue;
        };
        for path in crate_paths(&text) {
            let to = target_of(&path);
            if to == "cmd" {
                broken.push(format!("{rel}: imports the binary's {path}"));
            } else if to != unit && !may.contains(&to) {
                broken.push(format!("{rel} ({unit}): uses crate::{path}, not allowed"));
            }
        }
        if text.contains("anyhow::") || text.contains("use anyhow") {
            broken.push(format!("{rel}: uses anyhow (the binary's error type)"));
        }
    }
    for stale in allowed.keys().filter(|k| !units.contains(*k)) {
        broken.push(format!(
            "the table names `{stale}`, which is not a library module"
        ));
    }
    assert!(broken.is_empty(), "layering broken:\n{}", broken.join("\n"));
}

#[test]
fn the_layer_check_sees_grouped_and_nested_imports() {
    let paths = crate_paths(
        "use crate::{store::Store, api::client};\nlet x = crate::sim::RemoteSim::new();",
    );
    assert_eq!(
        paths,
        ["store::Store", "api::client", "sim::RemoteSim::new"]
    );
    assert_eq!(target_of("api::wire::JobView"), "api::wire");
    assert_eq!(target_of("api::ApiState"), "api");
    assert_eq!(unit_of("api/wire/costs.rs"), "api::wire");
    assert_eq!(unit_of("controller/probe/mod.rs"), "controller");
    assert_eq!(unit_of("http.rs"), "http");
    let modules = allowlist("modules");
    assert!(!modules["controller"].contains("api"));
    assert!(!modules["agent"].contains("controller"));
}

/// Direct dependencies of every workspace package, from `cargo metadata`.
fn workspace_deps() -> BTreeMap<String, Vec<String>> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata json");
    v["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("deps")
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap_or_default().to_string())
                .collect();
            (p["name"].as_str().unwrap_or_default().to_string(), deps)
        })
        .collect()
}

#[test]
fn crates_depend_only_as_the_table_allows_and_only_providers_import_cloud_sdks() {
    let deps = workspace_deps();
    let allowed = allowlist("crates");
    let mut broken = Vec::new();
    for (pkg, list) in &deps {
        let Some(may) = allowed.get(pkg) else {
            broken.push(format!("crate {pkg} has no row in the table"));
            continue;
        };
        for d in list.iter().filter(|d| d.starts_with("tern")) {
            if !may.contains(d) {
                broken.push(format!("{pkg} depends on {d}, not allowed"));
            }
        }
    }
    for stale in allowed.keys().filter(|k| !deps.contains_key(*k)) {
        broken.push(format!(
            "the table names {stale}, which is not a workspace crate"
        ));
    }
    let sdk = |d: &str| d.starts_with("aws-sdk-") || d.starts_with("google-cloud-");
    let providers = ["tern-aws", "tern-gcp"];
    for (pkg, list) in &deps {
        if providers.contains(&pkg.as_str()) {
            continue;
        }
        for d in list.iter().filter(|d| sdk(d)) {
            broken.push(format!("{pkg} imports the cloud SDK {d}"));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
