//! Promises the repository makes about itself, as checks: no source file over 800 lines but
//! the few named here with their reason, and every function, type and test name that
//! ARCHITECTURE.md or docs/design-decisions.md puts in backticks still exists in the tree.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const LIMIT: usize = 800;

/// Files allowed past the limit, and why. Each must still be past it: a file split below the
/// limit is taken off this list.
const LONG_FILES: &[(&str, &str)] = &[];

/// Every file under the source roots whose name ends with one of `exts`.
fn files(exts: &[&str]) -> Vec<PathBuf> {
    fn walk(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') && name != "node_modules" {
                    walk(&path, exts, out);
                }
            } else if exts.iter().any(|x| name.ends_with(x)) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    for root in [
        "src",
        "cloud",
        "providers",
        "policies",
        "pricing",
        "tests",
        "terraform",
        "python",
        "scripts",
        "examples",
    ] {
        walk(&Path::new(REPO).join(root), exts, &mut out);
    }
    out
}

fn relative(p: &Path) -> String {
    p.strip_prefix(REPO)
        .expect("under the repo")
        .to_string_lossy()
        .replace('\\', "/")
}

#[test]
fn no_rust_file_is_over_800_lines_but_the_named_exceptions() {
    let mut over = Vec::new();
    let mut long = BTreeSet::new();
    for path in files(&[".rs"]) {
        let rel = relative(&path);
        let lines = std::fs::read_to_string(&path)
            .expect("read")
            .lines()
            .count();
        if lines > LIMIT {
            long.insert(rel.clone());
            if !LONG_FILES.iter().any(|(f, _)| *f == rel) {
                over.push(format!("{rel}: {lines} lines"));
            }
        }
    }
    assert!(
        over.is_empty(),
        "files over {LIMIT} lines (split them by concept, or name them in LONG_FILES with a reason): {over:?}"
    );
    let stale: Vec<&str> = LONG_FILES
        .iter()
        .map(|(f, _)| *f)
        .filter(|f| !long.contains(*f))
        .collect();
    assert!(
        stale.is_empty(),
        "LONG_FILES names files that are no longer over {LIMIT} lines: {stale:?}"
    );
}

/// The documents whose code names are checked: the map and the rationale moved out of it.
const NAMING_DOCS: [&str; 2] = ["ARCHITECTURE.md", "docs/design-decisions.md"];

/// The identifiers the documents put in backticks that name code: a path (`a::b`), a
/// snake_case name of three words or more (functions, tests, fields), or a CamelCase type.
fn named_in_architecture() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for doc in NAMING_DOCS {
        let text = std::fs::read_to_string(Path::new(REPO).join(doc)).expect("read");
        out.extend(code_names(&text));
    }
    out
}

/// The code names in backticks in `text`.
fn code_names(text: &str) -> BTreeSet<String> {
    let ident = |s: &str| {
        !s.is_empty()
            && !s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let mut out = BTreeSet::new();
    for (i, piece) in text.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        let t = piece.trim().trim_end_matches("()");
        let parts: Vec<&str> = t.split("::").collect();
        if !parts.iter().all(|p| ident(p)) {
            continue;
        }
        let last = parts.last().expect("one part");
        let snake = last.matches('_').count() >= 2 && !last.contains(char::is_uppercase);
        let camel = last.starts_with(|c: char| c.is_ascii_uppercase())
            && last.chars().any(|c| c.is_ascii_lowercase())
            && last[1..].contains(|c: char| c.is_ascii_uppercase());
        if parts.len() > 1 || snake || camel {
            out.insert(last.to_string());
        }
    }
    out
}

#[test]
fn every_function_type_and_test_architecture_names_exists() {
    let named = named_in_architecture();
    assert!(
        named.len() > 100,
        "the reader found too few names: {}",
        named.len()
    );
    let mut words = BTreeSet::new();
    let exts = [".rs", ".py", ".toml", ".sql", ".sh", ".tf", ".tftpl"];
    for path in files(&exts) {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        words.extend(
            text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .map(str::to_string),
        );
    }
    let missing: Vec<&String> = named.iter().filter(|n| !words.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "{NAMING_DOCS:?} name what the tree no longer has (renamed or removed?): {missing:?}"
    );
}

/// The function names the data flow of one pass lists under `NAME:` in the block after
/// `<!-- pass:order -->`, by section, in order.
fn documented_pass() -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(Path::new(REPO).join("ARCHITECTURE.md")).expect("read");
    let block = text
        .split("<!-- pass:order -->")
        .nth(1)
        .and_then(|rest| rest.split("```").nth(1))
        .expect("a code block after <!-- pass:order -->");
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in block.lines() {
        let Some(first) = line.split_whitespace().next() else {
            continue;
        };
        if let Some(section) = first.strip_suffix(':') {
            out.push((section.to_string(), Vec::new()));
        } else if line.starts_with("   ")
            && !line.starts_with("    ")
            && let Some((_, names)) = out.last_mut()
        {
            names.push(first.to_string());
        }
    }
    out
}

/// The `self.NAME(` calls in the body of `fn NAME(` in `file`, in order, each with whether
/// its statement awaits it.
fn calls_in(file: &str, function: &str) -> Vec<(String, bool)> {
    let text = std::fs::read_to_string(Path::new(REPO).join(file)).expect("read");
    let start = text
        .find(&format!("fn {function}("))
        .unwrap_or_else(|| panic!("{file} has no fn {function}"));
    let body = &text[start..];
    let body = &body[..body.find("\n    }\n").expect("the function's end")];
    body.split("self.")
        .skip(1)
        .filter_map(|rest| {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let statement = rest.split([';', '{']).next().unwrap_or_default();
            let awaited = statement.contains(".await");
            rest[name.len()..]
                .starts_with('(')
                .then_some((name, awaited))
        })
        .collect()
}

/// ARCHITECTURE.md's data flow of one pass names, in order, the functions the pass runs:
/// every call of `phases`, and of `reconcile_jobs` every step it awaits, in the order they
/// are called.
#[test]
fn the_data_flow_names_the_pass_in_order() {
    let documented = documented_pass();
    let sections: Vec<&str> = documented.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(sections, ["phases", "reconcile_jobs"], "{documented:?}");
    let phases: Vec<String> = calls_in("src/controller/mod.rs", "phases")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        documented[0].1, phases,
        "phases, as documented and as called"
    );
    let calls = calls_in("src/controller/provision.rs", "reconcile_jobs");
    let mut at = 0;
    for name in &documented[1].1 {
        match calls[at..].iter().position(|(c, _)| c == name) {
            Some(k) => at += k + 1,
            None => panic!("reconcile_jobs calls {name} not after the steps before it: {calls:?}"),
        }
    }
    for (name, awaited) in &calls {
        assert!(
            !awaited || documented[1].1.contains(name),
            "reconcile_jobs awaits {name}, which the data flow does not name"
        );
    }
}

/// The end-to-end tests run the binary and build offers through one harness: no test file
/// under `tests/` but `tests/common/` defines its own free `fn tern(` or `fn offer(` (the
/// binary is `common::tern()` and its wrappers; an offer is `tern_cloud::testkit::offer`).
#[test]
fn end_to_end_tests_share_one_harness() {
    let common = Path::new(REPO).join("tests").join("common");
    let mut own = Vec::new();
    for path in files(&[".rs"]) {
        let rel = relative(&path);
        if !rel.starts_with("tests/") || path.starts_with(&common) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_start_matches("pub ");
            if line.starts_with("fn tern(") || line.starts_with("fn offer(") {
                own.push(format!("{rel}:{}", n + 1));
            }
        }
    }
    assert!(own.is_empty(), "use tests/common instead: {own:?}");
}

/// Where test code begins in the file at `rel` (of `lines`): its first line for a test file
/// (under a `tests/` folder, or named `*tests.rs`), the line after `#[cfg(test)]` in others,
/// and past the end where there is none.
fn test_lines_from(rel: &str, lines: &[&str]) -> usize {
    let whole = rel.starts_with("tests/") || rel.contains("/tests/") || rel.ends_with("tests.rs");
    if whole {
        return 0;
    }
    lines
        .iter()
        .position(|l| l.trim() == "#[cfg(test)]")
        .map_or(lines.len(), |at| at + 1)
}

/// Every offer a test builds comes from one builder, `tern_cloud::testkit::offer`: no test
/// code ([`test_lines_from`]) writes an `Offer { cloud: … }` literal of its own, so a new
/// field of `Offer` is set in one place.
#[test]
fn tests_build_offers_with_the_testkit() {
    let mut own = Vec::new();
    for path in files(&[".rs"]) {
        let rel = relative(&path);
        if rel == "cloud/src/testkit.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tests_from = test_lines_from(&rel, &lines);
        for (n, line) in lines.iter().enumerate() {
            let in_test = n >= tests_from;
            let literal = line.trim_end().ends_with("Offer {")
                && !line.contains("struct ")
                && !line.contains("fn ")
                && !line.contains("impl")
                && lines[n + 1..]
                    .iter()
                    .take(3)
                    .any(|l| l.trim_start().starts_with("cloud:"));
            if in_test && literal {
                own.push(format!("{rel}:{}", n + 1));
            }
        }
    }
    assert!(
        own.is_empty(),
        "build offers with tern_cloud::testkit::offer: {own:?}"
    );
}

/// The controller's scenario tests put a controller together in one place
/// (`src/controller/testkit.rs`, `Scenario`): none opens a controller or makes a store of its
/// own.
#[test]
fn controller_scenarios_are_built_with_the_testkit() {
    let mut own = Vec::new();
    for path in files(&[".rs"]) {
        let rel = relative(&path);
        let scenario = rel.starts_with("src/controller/")
            && (rel.ends_with("tests.rs") || rel.starts_with("src/controller/tests/"));
        if !scenario {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if line.contains("Controller::open(") || line.contains("Store::in_memory(") {
                own.push(format!("{rel}:{}", n + 1));
            }
        }
    }
    assert!(
        own.is_empty(),
        "open scenario controllers with testkit::Scenario: {own:?}"
    );
}

/// The variants of `enum NAME` in `file`: the identifiers that open a line at the enum's
/// first indentation inside it.
fn variants(file: &str, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(REPO).join(file)).expect("readable");
    let mut lines = text
        .lines()
        .skip_while(|l| !l.contains(&format!("enum {name} {{")));
    assert!(lines.next().is_some(), "{file} defines enum {name}");
    lines
        .take_while(|l| !l.starts_with('}'))
        .filter_map(|l| {
            let l = l.strip_prefix("    ")?;
            let id: String = l.chars().take_while(|c| c.is_alphanumeric()).collect();
            (l.starts_with(|c: char| c.is_ascii_uppercase())).then_some(id)
        })
        .collect()
}

/// Test code under `dir` ([`test_lines_from`]).
fn test_code(dir: &str) -> String {
    let mut out = String::new();
    for path in files(&[".rs"]) {
        let rel = relative(&path);
        if !rel.starts_with(dir) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for line in &lines[test_lines_from(&rel, &lines)..] {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Whether `path` (`Enum::Variant`) occurs in `code` other than as the pattern of a match arm
/// (a helper that renders every variant names them all and proves nothing): after the path
/// and its fields, an arm's pattern goes on with `=>`, `|` or `if`.
fn named_outside_an_arm(code: &str, path: &str) -> bool {
    code.match_indices(path).any(|(at, _)| {
        let rest = &code[at + path.len()..];
        if rest.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
            return false;
        }
        let rest = rest.trim_start();
        let after = match rest.chars().next() {
            Some(open @ ('{' | '(')) => {
                let close = if open == '{' { '}' } else { ')' };
                let mut depth = 0;
                let end = rest.char_indices().find_map(|(i, c)| {
                    depth += i32::from(c == open) - i32::from(c == close);
                    (depth == 0).then_some(i + 1)
                });
                &rest[end.unwrap_or(rest.len())..]
            }
            _ => rest,
        };
        let after = after.trim_start();
        !(after.starts_with("=>") || after.starts_with('|') || after.starts_with("if "))
    })
}

#[test]
fn a_match_arm_does_not_count_as_a_named_variant() {
    let code = "match d { D::A { x, .. } => 1, D::B(_) | D::C => 2 }; assert_eq!(f(), D::C);";
    assert!(!named_outside_an_arm(code, "D::A"));
    assert!(!named_outside_an_arm(code, "D::B"));
    assert!(named_outside_an_arm(code, "D::C"));
    assert!(!named_outside_an_arm("D::Ab", "D::A"));
}

/// The pure decisions are covered by table tests: every variant of the controller's
/// `Decision` and `Need` and of the agent's `Step` is named in test code beside them.
#[test]
fn table_tests_name_every_decision_and_step() {
    let cases = [
        ("src/controller/decide.rs", "Decision", "src/controller/"),
        ("src/controller/view.rs", "Need", "src/controller/"),
        ("src/agent/step.rs", "Step", "src/agent/"),
        ("src/controller/carry_out.rs", "Aim", "src/controller/"),
    ];
    let mut missing = Vec::new();
    for (file, name, dir) in cases {
        let tests = test_code(dir);
        let all = variants(file, name);
        assert!(all.len() > 3, "{file}: {name} has variants {all:?}");
        for v in all {
            let path = format!("{name}::{v}");
            if !named_outside_an_arm(&tests, &path) {
                missing.push(path);
            }
        }
    }
    assert!(missing.is_empty(), "no table test names {missing:?}");
}

/// A job's target (what it aims its fleet at) changes one way: `carry_out::aim` over an
/// `Aim` value. No other library code assigns the record's target fields.
#[test]
fn a_jobs_target_is_written_in_one_place() {
    let mut elsewhere = Vec::new();
    for path in files(&[".rs"]) {
        let rel = relative(&path);
        if !rel.starts_with("src/") || rel == "src/controller/carry_out.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines[..test_lines_from(&rel, &lines)].iter().enumerate() {
            let assigns = [".target_offer =", ".target_count =", ".planned_count ="]
                .iter()
                .any(|f| line.contains(f));
            if assigns {
                elsewhere.push(format!("{rel}:{}", n + 1));
            }
        }
    }
    assert!(
        elsewhere.is_empty(),
        "write a job's target with carry_out::aim: {elsewhere:?}"
    );
}
