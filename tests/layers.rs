//! The layering ARCHITECTURE.md promises, checked: a forbidden dependency fails this test.
//!
//! - Inside the `tern` library, each module may import only the modules below it (read from
//!   its `use crate::…` and `crate::…` paths); nothing imports the binary's `cmd`, and `anyhow`
//!   stays in the binary.
//! - Between crates (from `cargo metadata`): policies never depend on providers or pricing
//!   crates, and only provider crates depend on cloud SDKs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Library module → the `crate::` modules it must not use.
const FORBIDDEN: &[(&str, &[&str])] = &[
    (
        "http",
        &["agent", "api", "controller", "jobs", "sim", "store"],
    ),
    (
        "serve",
        &["agent", "api", "controller", "http", "jobs", "sim", "store"],
    ),
    (
        "jobs",
        &["agent", "api", "controller", "http", "sim", "store"],
    ),
    (
        "store",
        &["agent", "api", "controller", "http", "jobs", "sim"],
    ),
    (
        "api/wire",
        &[
            "agent",
            "api",
            "controller",
            "http",
            "jobs",
            "report",
            "sim",
            "store",
        ],
    ),
    (
        "report",
        &[
            "agent",
            "api::client",
            "api::router",
            "controller",
            "http",
            "jobs",
            "sim",
        ],
    ),
    (
        "api/client.rs",
        &["agent", "controller", "jobs", "sim", "store"],
    ),
    (
        "controller",
        &["agent", "api::client", "api::router", "http", "sim"],
    ),
    ("api/mod.rs", &["agent", "sim", "http"]),
    ("sim", &["agent", "api::router", "api::ApiState"]),
    ("agent", &["controller", "jobs", "sim", "store"]),
    (
        "scratch",
        &[
            "agent",
            "api",
            "controller",
            "http",
            "jobs",
            "serve",
            "sim",
            "store",
        ],
    ),
];

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

fn module_of(rel: &str) -> Vec<&'static str> {
    FORBIDDEN
        .iter()
        .filter(|(m, _)| rel == *m || rel.starts_with(&format!("{m}/")) || rel == format!("{m}.rs"))
        .flat_map(|(_, f)| f.iter().copied())
        .collect()
}

#[test]
fn library_modules_import_only_the_layers_below_them() {
    let mut broken = Vec::new();
    for (rel, text) in library() {
        for path in crate_paths(&text) {
            if path == "cmd" || path.starts_with("cmd::") {
                broken.push(format!("{rel}: imports the binary's {path}"));
            }
            for forbidden in module_of(&rel) {
                if path == forbidden || path.starts_with(&format!("{forbidden}::")) {
                    broken.push(format!("{rel}: uses crate::{path}"));
                }
            }
        }
        if text.contains("anyhow::") || text.contains("use anyhow") {
            broken.push(format!("{rel}: uses anyhow (the binary's error type)"));
        }
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
    assert!(module_of("controller/service.rs").contains(&"sim"));
    assert!(module_of("api/wire.rs").contains(&"controller"));
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
fn crates_depend_only_downward_and_only_providers_import_cloud_sdks() {
    let deps = workspace_deps();
    let mut broken = Vec::new();
    for pure in ["tern-policies", "tern-plan"] {
        for d in deps.get(pure).expect(pure) {
            if d.starts_with("tern-") && !["tern-cloud", "tern-policies"].contains(&d.as_str()) {
                broken.push(format!("{pure} depends on {d}"));
            }
        }
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
