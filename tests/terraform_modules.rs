//! The Terraform modules (`terraform/modules/…`) against the code they deploy, so drift
//! between the two fails CI. No provider registry is reachable here, so `terraform validate`
//! cannot run; instead these tests run the real `terraform` for what needs no provider
//! (`fmt -check`, rendering the user-data templates in `terraform console`) and parse the
//! modules' HCL with hcl-rs to compare them with the lists in the code:
//!
//! - the AWS policy's Allow statements hold exactly `tern_aws::permissions::ACTIONS`, and
//!   terminate only under the `tern:owner` condition;
//! - the EventBridge rules' patterns are exactly `tern_aws::events::EVENT_SHAPES`;
//! - the GCP custom roles hold exactly `tern_gcp::permissions::PERMISSIONS`;
//! - the rendered scripts are valid bash and pass `tern controller` / `tern agent` only flags
//!   their `--help` lists;
//! - every variable and output is in its module's README, and the examples call the modules
//!   with real variables and outputs.

#![cfg(all(feature = "aws", feature = "gcp"))]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use hcl::{Block, Body, Expression, ObjectKey};
use serde_json::Value;

mod common;
/// READMEs and examples.
#[path = "terraform_modules/docs.rs"]
mod docs;
/// The AWS policy and rules, the GCP roles.
#[path = "terraform_modules/iam.rs"]
mod iam;
/// The rendered scripts.
#[path = "terraform_modules/templates.rs"]
mod templates;
/// The rendered worker scripts start agents that run each job's own `[run]`.
#[path = "terraform_modules/workers.rs"]
mod workers;

// ---------------------------------------------------------------------------------------------
// Reading the modules

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn module(name: &str) -> PathBuf {
    repo().join("terraform/modules").join(name)
}

/// One parsed `.tf` file, with its path relative to the repository for messages.
struct TfFile {
    path: String,
    body: Body,
}

/// Every `.tf` file of a directory (not its subdirectories), parsed.
fn tf_files(dir: &Path) -> Vec<TfFile> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tf"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "{}: no .tf files", dir.display());
    paths.iter().map(|p| parse_tf(p)).collect()
}

fn parse_tf(path: &Path) -> TfFile {
    let shown = path
        .strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{shown}: {e}"));
    let body = hcl::parse(&text).unwrap_or_else(|e| panic!("{shown}: not valid HCL: {e}"));
    TfFile { path: shown, body }
}

fn labels(block: &Block) -> Vec<&str> {
    block.labels().iter().map(|l| l.as_str()).collect()
}

/// Top-level blocks of `kind` (`resource`, `data`, `variable`…) whose labels start with
/// `prefix`, with the file each is in.
fn blocks<'a>(files: &'a [TfFile], kind: &str, prefix: &[&str]) -> Vec<(&'a str, &'a Block)> {
    files
        .iter()
        .flat_map(|f| f.body.blocks().map(move |b| (f.path.as_str(), b)))
        .filter(|(_, b)| b.identifier() == kind && labels(b).starts_with(prefix))
        .collect()
}

/// The one block `kind "a" "b"`; panics naming the module when it is missing or repeated.
fn the_block<'a>(files: &'a [TfFile], kind: &str, names: &[&str]) -> (&'a str, &'a Block) {
    let found = blocks(files, kind, names);
    assert_eq!(
        found.len(),
        1,
        "expected one {kind} {names:?} in {}",
        files.first().map(|f| f.path.as_str()).unwrap_or("?")
    );
    found[0]
}

fn attr<'a>(block: &'a Block, key: &str) -> Option<&'a Expression> {
    block
        .body()
        .attributes()
        .find(|a| a.key() == key)
        .map(|a| a.expr())
}

fn sub_blocks<'a>(block: &'a Block, kind: &'a str) -> impl Iterator<Item = &'a Block> {
    block
        .body()
        .blocks()
        .filter(move |b| b.identifier() == kind)
}

/// An expression as HCL text without whitespace, to look for references in it.
fn text(expr: &Expression) -> String {
    expr.to_string()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

/// A literal list of strings. `what` names the place in failure messages.
fn string_list(expr: &Expression, what: &str) -> Vec<String> {
    let Expression::Array(items) = expr else {
        panic!("{what}: expected a literal list, found {expr}");
    };
    items
        .iter()
        .map(|e| match e {
            Expression::String(s) => s.clone(),
            other => panic!("{what}: expected literal strings, found {other}"),
        })
        .collect()
}

/// A literal HCL value (what `jsonencode` is given) as JSON.
fn literal_json(expr: &Expression, what: &str) -> Value {
    match expr {
        Expression::Null => Value::Null,
        Expression::Bool(b) => Value::Bool(*b),
        Expression::Number(n) => serde_json::from_str(&n.to_string()).unwrap_or(Value::Null),
        Expression::String(s) => Value::String(s.clone()),
        Expression::Array(items) => items.iter().map(|e| literal_json(e, what)).collect(),
        Expression::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (object_key(k, what), literal_json(v, what)))
                .collect(),
        ),
        other => panic!("{what}: expected a literal value, found {other}"),
    }
}

fn object_key(key: &ObjectKey, what: &str) -> String {
    match key {
        ObjectKey::Identifier(id) => id.as_str().to_owned(),
        ObjectKey::Expression(Expression::String(s)) => s.clone(),
        ObjectKey::Expression(other) => panic!("{what}: expected a literal key, found {other}"),
        _ => panic!("{what}: unexpected object key"),
    }
}

/// `what` set against `want`: a failure names the file, the missing and the extra items.
fn assert_same_set(file: &str, what: &str, got: &BTreeSet<String>, want: &BTreeSet<String>) {
    let missing: Vec<&String> = want.difference(got).collect();
    let extra: Vec<&String> = got.difference(want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{file}: {what} differ\n  missing: {missing:?}\n  extra:   {extra:?}"
    );
}

fn owned(items: impl IntoIterator<Item = impl Into<String>>) -> BTreeSet<String> {
    items.into_iter().map(Into::into).collect()
}

// ---------------------------------------------------------------------------------------------
// The real terraform binary

fn terraform() -> Command {
    let probe = Command::new("terraform").arg("version").output();
    match probe {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "`terraform version` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!(
            "terraform is not on PATH ({e}): these tests run the real binary (1.0.3 or later; \
             scripts/setup --test installs one)"
        ),
    }
    let mut cmd = Command::new("terraform");
    cmd.current_dir(repo()).env("TF_IN_AUTOMATION", "1");
    cmd
}

#[test]
fn modules_and_examples_are_terraform_fmt_clean() {
    // One directory per call: Terraform before 1.6 (scripts/setup may install 1.0.3) takes
    // one target only.
    for dir in ["terraform/modules", "terraform/examples"] {
        let out = terraform()
            .args(["fmt", "-check", "-recursive", "-diff", dir])
            .output()
            .expect("run terraform fmt");
        assert!(
            out.status.success(),
            "terraform fmt -check found unformatted files in {dir} (run `terraform fmt \
             -recursive {dir}`):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
