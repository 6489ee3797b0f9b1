//! ARCHITECTURE.md's code map against the tree: every `.rs` file under `src/`, `cloud/`, `providers/`,
//! `policies/` and `pricing/` is named (in backticks) under the heading of its own folder, and
//! every file a folder's section names exists. A new file, a moved one or a removed one fails
//! here until the map says so.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const ROOTS: &[&str] = &["src", "cloud", "providers", "policies", "pricing"];

fn rust_files(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(root, &path, out);
            }
        } else if name.ends_with(".rs") {
            let rel = path.strip_prefix(root).expect("under root");
            out.insert(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// Folder (`a/b/`) → the backticked names in its section (from its heading to the next one).
fn sections(map: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in map.lines() {
        if line.starts_with('#') {
            current = backticked(line)
                .into_iter()
                .find(|p| p.ends_with('/'))
                .filter(|_| line.trim_start_matches('#').trim().starts_with('`'));
            if let Some(dir) = &current {
                out.entry(dir.clone()).or_default();
            }
            continue;
        }
        if let Some(dir) = &current {
            out.get_mut(dir).expect("section").extend(backticked(line));
        }
    }
    out
}

fn backticked(line: &str) -> Vec<String> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_code_map_names_every_source_file_under_its_folder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let sections = sections(&map);
    let mut files = BTreeSet::new();
    for r in ROOTS {
        rust_files(root, &root.join(r), &mut files);
    }
    let mut missing = Vec::new();
    for f in &files {
        let (dir, name) = f.rsplit_once('/').map_or(("", f.as_str()), |(d, n)| (d, n));
        let dir = format!("{dir}/");
        match sections.get(&dir) {
            Some(names) if names.contains(name) => {}
            Some(_) => missing.push(format!("{f}: not named under `{dir}`")),
            None => missing.push(format!("{f}: ARCHITECTURE.md has no `{dir}` heading")),
        }
    }
    let mut stale = Vec::new();
    for (dir, names) in &sections {
        for n in names
            .iter()
            .filter(|n| n.ends_with(".rs") && !n.contains('/'))
        {
            if !files.contains(&format!("{dir}{n}")) {
                stale.push(format!("`{dir}` names `{n}`, which does not exist"));
            }
        }
    }
    assert!(
        missing.is_empty() && stale.is_empty(),
        "the code map is out of date:\n{}",
        [missing, stale].concat().join("\n")
    );
    assert!(files.len() > 100, "found only {} files", files.len());
}

#[test]
fn a_section_is_the_text_under_its_folder_heading() {
    let map = "## Code map\n### `src/`\n- `lib.rs`: x\n#### `src/cmd/`\n- `mod.rs`, `a.rs`\n## Other\n- `b.rs`\n";
    let s = sections(map);
    assert_eq!(s["src/"], ["lib.rs".to_string()].into());
    assert_eq!(
        s["src/cmd/"],
        ["a.rs".to_string(), "mod.rs".to_string()].into()
    );
    assert_eq!(s.len(), 2, "`b.rs` falls under no folder: {s:?}");
}
