//! The README's examples are checked against the real parsers, so the docs cannot drift.

// Test helpers may panic on broken fixtures; that is a test failure, as intended.
#![allow(clippy::unwrap_used)]

use std::process::Command;

fn readme_block(after: &str) -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = &readme[readme
        .find(after)
        .unwrap_or_else(|| panic!("README has no '{after}'"))..];
    let start = section.find("```toml\n").unwrap() + "```toml\n".len();
    section[start..start + section[start..].find("```").unwrap()].to_owned()
}

#[test]
fn readme_job_spec_and_quota_examples_are_valid() {
    let dir = tempfile::tempdir().unwrap();
    // The profile table points at a folder the reader would have; the rest stands alone.
    let spec = readme_block("### Job specs");
    let spec = &spec[..spec.find("[profile]").unwrap()];
    let spec_path = dir.path().join("job.toml");
    std::fs::write(&spec_path, spec).unwrap();
    let quota_path = dir.path().join("quota.toml");
    std::fs::write(&quota_path, readme_block("The `--quota` file")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args([
            "plan",
            spec_path.to_str().unwrap(),
            "--quota",
            quota_path.to_str().unwrap(),
            "--json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(v["jobs"][0]["job"], "resnet50-imagenet");
}
