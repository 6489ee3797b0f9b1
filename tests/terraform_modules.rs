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

// ---------------------------------------------------------------------------------------------
// AWS: the policy and the interruption rules

/// `(effect, actions)` of every `statement` of a policy document, dynamic ones included.
fn statements(block: &Block, file: &str) -> Vec<(String, Vec<String>)> {
    let literal = sub_blocks(block, "statement");
    let dynamic = sub_blocks(block, "dynamic").flat_map(|d| sub_blocks(d, "content"));
    literal
        .chain(dynamic)
        .map(|s| {
            let effect = match attr(s, "effect") {
                Some(Expression::String(e)) => e.clone(),
                Some(other) => panic!("{file}: a statement's effect is not literal: {other}"),
                None => "Allow".to_owned(),
            };
            let actions = attr(s, "actions")
                .map(|a| string_list(a, &format!("{file}: statement actions")))
                .unwrap_or_default();
            (effect, actions)
        })
        .collect()
}

fn policy_document<'a>(files: &'a [TfFile], name: &str) -> (&'a str, &'a Block) {
    the_block(files, "data", &["aws_iam_policy_document", name])
}

fn tern_aws_actions() -> BTreeSet<String> {
    owned(tern_aws::permissions::names())
}

#[test]
fn aws_policy_allows_exactly_the_actions_tern_aws_calls() {
    let files = tf_files(&module("aws-controller"));
    let (file, doc) = policy_document(&files, "tern_aws");
    assert_eq!(
        sub_blocks(doc, "dynamic").count(),
        0,
        "{file}: the tern_aws policy must be literal statements, so this test can read it"
    );
    let all = statements(doc, file);
    let allowed = owned(
        all.iter()
            .filter(|(e, _)| e == "Allow")
            .flat_map(|(_, a)| a),
    );
    assert_same_set(
        file,
        "the tern_aws policy's allowed actions and tern_aws::permissions::ACTIONS",
        &allowed,
        &tern_aws_actions(),
    );
    let denied = owned(all.iter().filter(|(e, _)| e == "Deny").flat_map(|(_, a)| a));
    let tern = tern_aws_actions();
    let stray: Vec<&String> = denied.difference(&tern).collect();
    assert!(
        stray.is_empty(),
        "{file}: Deny statements name actions tern-aws does not call: {stray:?}"
    );
}

#[test]
fn aws_policy_terminates_only_owned_instances_and_tags_only_at_launch() {
    let files = tf_files(&module("aws-controller"));
    let (file, doc) = policy_document(&files, "tern_aws");
    let owner_key = format!("ec2:ResourceTag/{}", tern_cloud::tag::OWNER);
    let guarded = [
        ("ec2:TerminateInstances", owner_key.as_str(), "[var.owner]"),
        (
            "ec2:CreateTags",
            "ec2:CreateAction",
            "[\"CreateFleet\",\"RunInstances\"]",
        ),
    ];
    for (action, variable, values) in guarded {
        let holders: Vec<&Block> = sub_blocks(doc, "statement")
            .filter(|s| {
                attr(s, "actions").is_some_and(|a| string_list(a, file).iter().any(|x| x == action))
            })
            .collect();
        assert!(!holders.is_empty(), "{file}: no statement allows {action}");
        for s in holders {
            let ok = sub_blocks(s, "condition").any(|c| {
                attr(c, "variable").is_some_and(|v| text(v) == format!("\"{variable}\""))
                    && attr(c, "values").is_some_and(|v| text(v) == values)
            });
            assert!(
                ok,
                "{file}: every statement allowing {action} needs the condition {variable} = {values}"
            );
        }
    }
}

#[test]
fn aws_boot_policies_hold_none_of_tern_aws_actions() {
    let files = tf_files(&module("aws-controller"));
    let tern = tern_aws_actions();
    for name in ["controller_boot", "worker_boot"] {
        let (file, doc) = policy_document(&files, name);
        let actions = owned(statements(doc, file).into_iter().flat_map(|(_, a)| a));
        let shared: Vec<&String> = actions.intersection(&tern).collect();
        assert!(
            shared.is_empty(),
            "{file}: {name} holds tern-aws actions {shared:?}; they belong in tern_aws only"
        );
    }
    let (file, _) = the_block(&files, "resource", &["aws_iam_role_policy", "tern_aws"]);
    let policies = blocks(&files, "resource", &["aws_iam_role_policy"]);
    let attached = policies.iter().any(|(_, b)| {
        attr(b, "policy").is_some_and(|p| text(p) == "data.aws_iam_policy_document.tern_aws.json")
            && attr(b, "role").is_some_and(|r| text(r).starts_with("aws_iam_role.controller."))
    });
    assert!(
        attached,
        "{file}: the controller role must carry the tern_aws document"
    );
}

/// Each EventBridge rule's name and its `event_pattern = jsonencode(…)` as JSON.
fn event_rules(files: &[TfFile]) -> Vec<(String, Value)> {
    blocks(files, "resource", &["aws_cloudwatch_event_rule"])
        .into_iter()
        .map(|(file, b)| {
            let name = labels(b)[1].to_owned();
            let what = format!("{file}: aws_cloudwatch_event_rule.{name}.event_pattern");
            let pattern = match attr(b, "event_pattern") {
                Some(Expression::FuncCall(f)) if f.name.name.as_str() == "jsonencode" => {
                    literal_json(&f.args[0], &what)
                }
                other => panic!("{what}: expected jsonencode({{…}}), found {other:?}"),
            };
            (name, pattern)
        })
        .collect()
}

#[test]
fn event_rules_match_exactly_the_event_shapes_tern_aws_parses() {
    let files = tf_files(&module("aws-controller"));
    let rules = event_rules(&files);
    let got = owned(rules.iter().map(|(_, p)| p.to_string()));
    let want = owned(
        tern_aws::events::EVENT_SHAPES
            .iter()
            .map(|s| s.pattern().to_string()),
    );
    assert_eq!(rules.len(), got.len(), "two rules have the same pattern");
    assert_same_set(
        "terraform/modules/aws-controller/interruptions.tf",
        "the EventBridge rules' patterns and tern_aws::events::EVENT_SHAPES",
        &got,
        &want,
    );
}

#[test]
fn every_event_rule_feeds_the_queue_and_only_they_may_send() {
    let files = tf_files(&module("aws-controller"));
    let (file, target) = the_block(
        &files,
        "resource",
        &["aws_cloudwatch_event_target", "interruptions"],
    );
    let targets = attr(target, "for_each").map(text).unwrap_or_default();
    assert_eq!(
        attr(target, "arn").map(text).as_deref(),
        Some("aws_sqs_queue.interruptions.arn"),
        "{file}: the rules' target must be the queue"
    );
    let (_, policy) = policy_document(&files, "interruptions_queue");
    let policy_text = hcl::to_string(policy.body()).unwrap_or_default();
    assert!(
        policy_text.contains("events.amazonaws.com"),
        "{file}: the queue policy must let EventBridge send"
    );
    for (name, _) in event_rules(&files) {
        let rule = format!("aws_cloudwatch_event_rule.{name}");
        assert!(
            targets.contains(&format!("{rule}.name")),
            "{file}: {rule} has no target"
        );
        assert!(
            policy_text.contains(&format!("{rule}.arn")),
            "{file}: the queue policy does not let {rule} send"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// GCP: the custom roles

#[test]
fn gcp_roles_hold_exactly_the_permissions_tern_gcp_calls() {
    let files = tf_files(&module("gcp-controller"));
    let roles = blocks(&files, "resource", &["google_project_iam_custom_role"]);
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (file, role) in &roles {
        let name = labels(role)[1];
        let what = format!("{file}: google_project_iam_custom_role.{name}.permissions");
        let list = attr(role, "permissions")
            .map(|p| string_list(p, &what))
            .unwrap_or_else(|| panic!("{what}: missing"));
        for p in list {
            if let Some(other) = seen.insert(p.clone(), name.to_owned()) {
                panic!("{what}: {p} is also in role {other}");
            }
        }
    }
    let file = roles.first().map(|(f, _)| *f).unwrap_or("?");
    assert_same_set(
        file,
        "the custom roles' permissions and tern_gcp::permissions::PERMISSIONS",
        &seen.into_keys().collect(),
        &owned(tern_gcp::permissions::names()),
    );
}

#[test]
fn act_as_is_granted_on_the_workers_account_only() {
    let files = tf_files(&module("gcp-controller"));
    let (file, role) = the_block(
        &files,
        "resource",
        &["google_project_iam_custom_role", "worker_user"],
    );
    let perms = attr(role, "permissions").map(|p| string_list(p, file));
    assert_eq!(
        perms,
        Some(vec!["iam.serviceAccounts.actAs".to_owned()]),
        "{file}: worker_user holds actAs alone"
    );
    let role_ref = "google_project_iam_custom_role.worker_user.id";
    for (f, b) in blocks(&files, "resource", &[]) {
        let kind = labels(b)[0];
        let grants = attr(b, "role").is_some_and(|r| text(r) == role_ref);
        if grants {
            assert_eq!(
                kind, "google_service_account_iam_member",
                "{f}: worker_user may be granted on a service account only"
            );
            assert_eq!(
                attr(b, "service_account_id").map(text).as_deref(),
                Some("google_service_account.worker.name"),
                "{f}: worker_user may be granted on the workers' account only"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// READMEs and examples

/// Names in the first column (`| \`name\` |`) of the table under a README heading.
fn readme_table(readme: &str, heading: &str) -> BTreeSet<String> {
    let Some(start) = readme.find(&format!("\n{heading}\n")) else {
        return BTreeSet::new();
    };
    readme[start + heading.len() + 2..]
        .lines()
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_owned)
        .collect()
}

fn declared(files: &[TfFile], kind: &str) -> BTreeSet<String> {
    owned(
        blocks(files, kind, &[])
            .into_iter()
            .map(|(_, b)| labels(b)[0]),
    )
}

#[test]
fn module_readmes_document_every_variable_and_output() {
    for name in ["aws-controller", "gcp-controller"] {
        let dir = module(name);
        let files = tf_files(&dir);
        let file = format!("terraform/modules/{name}/README.md");
        let readme = std::fs::read_to_string(dir.join("README.md"))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        for (kind, heading) in [("variable", "## Variables"), ("output", "## Outputs")] {
            assert_same_set(
                &file,
                &format!("the {kind}s in the table under '{heading}' and the module's {kind}s"),
                &readme_table(&readme, heading),
                &declared(&files, kind),
            );
        }
    }
}

/// `module.tern.NAME` references in an example's expressions.
fn module_outputs_used(files: &[TfFile]) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for (_, b) in blocks(files, "output", &[]) {
        let value = attr(b, "value").map(text).unwrap_or_default();
        if let Some(rest) = value.strip_prefix("module.tern.") {
            used.insert(rest.to_owned());
        }
    }
    used
}

#[test]
fn examples_call_the_modules_with_real_variables_and_outputs() {
    let meta = [
        "source",
        "version",
        "providers",
        "count",
        "for_each",
        "depends_on",
    ];
    for name in ["aws-controller", "gcp-controller"] {
        let module_files = tf_files(&module(name));
        let example = tf_files(&repo().join("terraform/examples").join(name));
        let (file, call) = the_block(&example, "module", &["tern"]);
        assert_eq!(
            attr(call, "source").map(text),
            Some(format!("\"../../modules/{name}\"")),
            "{file}: the example must use its module"
        );
        let passed = owned(
            call.body()
                .attributes()
                .map(|a| a.key())
                .filter(|k| !meta.contains(k)),
        );
        let variables = declared(&module_files, "variable");
        let unknown: Vec<&String> = passed.difference(&variables).collect();
        assert!(
            unknown.is_empty(),
            "{file}: no such module variables: {unknown:?}"
        );
        let required = owned(
            blocks(&module_files, "variable", &[])
                .into_iter()
                .filter(|(_, b)| attr(b, "default").is_none())
                .map(|(_, b)| labels(b)[0]),
        );
        let unset: Vec<&String> = required.difference(&passed).collect();
        assert!(
            unset.is_empty(),
            "{file}: required variables not passed: {unset:?}"
        );
        let outputs = declared(&module_files, "output");
        let missing: Vec<String> = module_outputs_used(&example)
            .into_iter()
            .filter(|o| !outputs.contains(o))
            .collect();
        assert!(
            missing.is_empty(),
            "{file}: no such module outputs: {missing:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The user-data and startup scripts, rendered by terraform

/// A template of a module and the values one rendering passes (HCL expressions by name).
struct Rendering {
    template: &'static str,
    vars: Vec<(&'static str, &'static str)>,
}

fn r(template: &'static str, vars: &[(&'static str, &'static str)]) -> Rendering {
    Rendering {
        template,
        vars: vars.to_vec(),
    }
}

/// Every template of both modules, each branch of its directives taken at least once.
fn renderings() -> Vec<Rendering> {
    let aws_worker = |checkpoint, args, command| {
        r(
            "aws-controller/templates/worker-user-data.sh.tftpl",
            &[
                ("install_tern", "\"# install tern\""),
                ("controller_url", "\"http://10.0.0.5:8470\""),
                ("progress_file", "\"/var/lib/tern/progress.json\""),
                ("checkpoint_command", checkpoint),
                ("agent_args", args),
                ("command", command),
            ],
        )
    };
    let gcp_worker = |checkpoint, args, command| {
        r(
            "gcp-controller/templates/worker-startup.sh.tftpl",
            &[
                ("common", "\"# common functions\""),
                ("controller_url", "\"http://10.128.0.5:8470\""),
                ("progress_file", "\"/var/lib/tern/progress.json\""),
                ("checkpoint_command", checkpoint),
                ("agent_args", args),
                ("command", command),
            ],
        )
    };
    vec![
        r(
            "aws-controller/templates/install-tern.sh.tftpl",
            &[
                ("binary_url", "\"https://example.com/tern\""),
                ("binary_sha256", "\"\""),
            ],
        ),
        r(
            "aws-controller/templates/install-tern.sh.tftpl",
            &[
                ("binary_url", "\"s3://bucket/tern\""),
                ("binary_sha256", "\"abc123\""),
            ],
        ),
        aws_controller(false),
        aws_controller(true),
        aws_worker("\"\"", "\"\"", "\"\""),
        aws_worker(
            "\"'python3 save.py'\"",
            "\"'--nnodes' '1:2'\"",
            "\"'python3' 'train.py'\"",
        ),
        r(
            "gcp-controller/templates/common.sh.tftpl",
            &[
                ("project", "\"my-project\""),
                ("binary_url", "\"https://example.com/tern\""),
                ("binary_bucket", "\"\""),
                ("binary_object", "\"\""),
                ("binary_sha256", "\"\""),
            ],
        ),
        r(
            "gcp-controller/templates/common.sh.tftpl",
            &[
                ("project", "\"my-project\""),
                ("binary_url", "\"gs://bucket/dir/tern\""),
                ("binary_bucket", "\"bucket\""),
                ("binary_object", "\"dir/tern\""),
                ("binary_sha256", "\"abc123\""),
            ],
        ),
        gcp_controller(false),
        gcp_controller(true),
        gcp_worker("\"\"", "\"\"", "\"\""),
        gcp_worker(
            "\"'python3 save.py'\"",
            "\"'--nnodes' '1:2'\"",
            "\"'python3' 'train.py'\"",
        ),
    ]
}

fn aws_controller(postgres: bool) -> Rendering {
    let pick = |a, b| if postgres { a } else { b };
    r(
        "aws-controller/templates/controller-user-data.sh.tftpl",
        &[
            ("install_tern", "\"# install tern\""),
            ("region", "\"us-east-1\""),
            ("extra_regions", pick("[]", "[\"us-west-2\"]")),
            (
                "instance_types",
                pick("[]", "[\"g5.xlarge\", \"g6.xlarge\"]"),
            ),
            (
                "quota_toml",
                pick("\"\"", "\"[team.\\\"nlp\\\"]\\ntotal_usd = 50\\n\""),
            ),
            ("postgres", pick("true", "false")),
            (
                "db_secret_arn",
                pick("\"arn:aws:secretsmanager:us-east-1:1:secret:rds\"", "\"\""),
            ),
            ("db_address", pick("\"db.example.internal\"", "\"\"")),
            ("db_port", pick("5432", "0")),
            ("db_name", pick("\"tern\"", "\"\"")),
            ("state_volume_id", pick("\"\"", "\"vol-0123456789abcdef0\"")),
            ("token_parameter", "\"/tern/api-token\""),
            ("launch_template", "\"tern-workers\""),
            (
                "queue_url",
                "\"https://sqs.us-east-1.amazonaws.com/1/tern-interruptions\"",
            ),
            ("owner", "\"tern\""),
            ("api_port", "8470"),
        ],
    )
}

fn gcp_controller(postgres: bool) -> Rendering {
    let pick = |a, b| if postgres { a } else { b };
    r(
        "gcp-controller/templates/controller-startup.sh.tftpl",
        &[
            ("common", "\"# common functions\""),
            ("project", "\"my-project\""),
            ("region", "\"us-central1\""),
            (
                "zones",
                pick("[]", "[\"us-central1-a\", \"us-central1-b\"]"),
            ),
            ("machine_types", pick("[]", "[\"g2-standard-8\"]")),
            (
                "quota_toml",
                pick("\"\"", "\"[team.\\\"nlp\\\"]\\ntotal_usd = 50\\n\""),
            ),
            ("token_secret", "\"tern-api-token\""),
            ("state_secret", pick("\"tern-state-url\"", "\"\"")),
            (
                "worker_account",
                "\"tern-worker@my-project.iam.gserviceaccount.com\"",
            ),
            ("template", "\"global/instanceTemplates/tern-workers\""),
            ("owner", "\"tern\""),
            ("api_port", "8470"),
            ("has_state_disk", pick("false", "true")),
        ],
    )
}

/// Every function call in an expression, nested ones included.
fn calls_in<'a>(expr: &'a Expression, out: &mut Vec<&'a hcl::expr::FuncCall>) {
    match expr {
        Expression::FuncCall(f) => {
            out.push(f);
            f.args.iter().for_each(|a| calls_in(a, out));
        }
        Expression::Array(items) => items.iter().for_each(|e| calls_in(e, out)),
        Expression::Object(map) => map.values().for_each(|e| calls_in(e, out)),
        Expression::Parenthesis(e) => calls_in(e, out),
        Expression::Conditional(c) => {
            [&c.cond_expr, &c.true_expr, &c.false_expr]
                .into_iter()
                .for_each(|e| calls_in(e, out));
        }
        _ => {}
    }
}

/// Every function call in a body's attributes, nested blocks included.
fn calls_in_body<'a>(body: &'a Body, out: &mut Vec<&'a hcl::expr::FuncCall>) {
    body.attributes().for_each(|a| calls_in(a.expr(), out));
    body.blocks().for_each(|b| calls_in_body(b.body(), out));
}

/// The variable names each `templatefile(".../templates/NAME", {…})` call of a module passes.
fn template_calls(files: &[TfFile]) -> Vec<(String, BTreeSet<String>)> {
    let mut calls = Vec::new();
    files
        .iter()
        .for_each(|f| calls_in_body(&f.body, &mut calls));
    calls
        .into_iter()
        .filter(|c| c.name.name.as_str() == "templatefile")
        .map(|c| {
            let path = c.args.first().map(|p| p.to_string()).unwrap_or_default();
            let name = path
                .rsplit("/templates/")
                .next()
                .unwrap_or_default()
                .trim_end_matches('"')
                .to_owned();
            let keys = match c.args.get(1) {
                Some(Expression::Object(o)) => owned(o.keys().map(|k| object_key(k, &name))),
                other => {
                    panic!("templatefile({path}, …): expected a literal object, found {other:?}")
                }
            };
            (name, keys)
        })
        .collect()
}

#[test]
fn renderings_pass_what_the_modules_pass() {
    for name in ["aws-controller", "gcp-controller"] {
        let files = tf_files(&module(name));
        let calls = template_calls(&files);
        assert!(!calls.is_empty(), "{name}: no templatefile calls found");
        for (template, keys) in calls {
            let path = format!("{name}/templates/{template}");
            for rendering in renderings().iter().filter(|r| r.template == path) {
                let given = owned(rendering.vars.iter().map(|(k, _)| *k));
                assert_same_set(
                    &format!("terraform/modules/{path}"),
                    "the module's templatefile variables and this test's renderings",
                    &given,
                    &keys,
                );
            }
            assert!(
                renderings().iter().any(|r| r.template == path),
                "terraform/modules/{path}: this test renders it nowhere"
            );
        }
    }
}

/// Every rendering through one `terraform console`, as text. The console prints only its
/// last result when reading a pipe, so one expression renders them all: each template
/// base64-encoded (no quoting to undo), joined by spaces.
fn render_all(renderings: &[Rendering]) -> Vec<String> {
    let calls: Vec<String> = renderings
        .iter()
        .map(|r| {
            let path = repo().join("terraform/modules").join(r.template);
            let vars: Vec<String> = r.vars.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            format!(
                "base64encode(templatefile(\"{}\", {{ {} }}))",
                path.display(),
                vars.join(", ")
            )
        })
        .collect();
    let input = format!("join(\" \", [{}])\n", calls.join(", "));
    let stdout = console(&input);
    let line = stdout
        .lines()
        .find(|l| l.starts_with('"'))
        .unwrap_or_else(|| panic!("terraform console printed no string: {stdout}"));
    let scripts: Vec<String> = line
        .trim_matches('"')
        .split(' ')
        .map(|b| String::from_utf8(base64_decode(b)).expect("UTF-8 script"))
        .collect();
    assert_eq!(
        scripts.len(),
        renderings.len(),
        "terraform console output: {line}"
    );
    scripts
}

/// Evaluate `input` in `terraform console` (no configuration, so no provider or init), and
/// return what it printed; a failure shows terraform's error.
fn console(input: &str) -> String {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let mut child = terraform()
        .arg("console")
        .current_dir(scratch.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start terraform console");
    child
        .stdin
        .take()
        .expect("console stdin")
        .write_all(input.as_bytes())
        .expect("write to terraform console");
    let out = child.wait_with_output().expect("terraform console");
    assert!(
        out.status.success(),
        "terraform console failed rendering the templates:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {}", c as char),
    };
    let digits: Vec<u8> = s.bytes().filter(|c| *c != b'=').map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, d)| n | (u32::from(*d) << (18 - 6 * i)));
        out.extend(n.to_be_bytes()[1..chunk.len()].iter());
    }
    out
}

fn bash_syntax_error(script: &str) -> Option<String> {
    let mut child = Command::new("bash")
        .arg("-n")
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run bash -n");
    child
        .stdin
        .take()
        .expect("bash stdin")
        .write_all(script.as_bytes())
        .expect("write to bash");
    let out = child.wait_with_output().expect("bash -n");
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The flags of each `/usr/local/bin/tern SUBCOMMAND` command line (with its `\`
/// continuation lines), by subcommand.
fn tern_flags(script: &str) -> Vec<(String, Vec<String>)> {
    let lines: Vec<&str> = script.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.split("/usr/local/bin/tern ").nth(1) else {
            continue;
        };
        let sub = rest
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned();
        let mut words: Vec<String> = Vec::new();
        let mut n = i;
        loop {
            words.extend(lines[n].split_whitespace().map(str::to_owned));
            if !lines[n].trim_end().ends_with('\\') || n + 1 == lines.len() {
                break;
            }
            n += 1;
        }
        let flags = words
            .into_iter()
            .filter(|w| w.starts_with("--") && w[2..].starts_with(|c: char| c.is_ascii_lowercase()))
            .collect();
        found.push((sub, flags));
    }
    found
}

/// The long flags a `tern SUBCOMMAND --help` lists.
fn help_flags(sub: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args([sub, "--help"])
        .output()
        .expect("run tern --help");
    assert!(out.status.success(), "tern {sub} --help failed");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        .map(|w| w.trim_end_matches([',', '.', ')']).to_owned())
        .collect()
}

#[test]
fn rendered_scripts_are_bash_and_use_only_real_tern_flags() {
    let renderings = renderings();
    let scripts = render_all(&renderings);
    let help: BTreeMap<&str, BTreeSet<String>> = ["controller", "agent"]
        .into_iter()
        .map(|s| (s, help_flags(s)))
        .collect();
    for (r, script) in renderings.iter().zip(&scripts) {
        let file = format!("terraform/modules/{}", r.template);
        if let Some(e) = bash_syntax_error(script) {
            panic!(
                "{file} rendered with {:?} is not valid bash: {e}\n{script}",
                r.vars
            );
        }
        let commands = tern_flags(script);
        let runs_tern = r.template.contains("/controller-") || r.template.contains("/worker-");
        assert!(
            !runs_tern || !commands.is_empty(),
            "{file}: no `/usr/local/bin/tern …` command line found"
        );
        for (sub, flags) in commands {
            let known = help
                .get(sub.as_str())
                .unwrap_or_else(|| panic!("{file}: runs `tern {sub}`, not controller or agent"));
            let unknown: Vec<&String> = flags.iter().filter(|f| !known.contains(*f)).collect();
            assert!(
                unknown.is_empty(),
                "{file}: `tern {sub}` has no flags {unknown:?} (see tern {sub} --help)"
            );
        }
    }
}

#[test]
fn scripts_run_the_right_provider_and_read_the_job_where_tern_writes_it() {
    let renderings = renderings();
    let scripts = render_all(&renderings);
    let job = tern_cloud::tag::JOB;
    for (r, script) in renderings.iter().zip(&scripts) {
        let file = format!("terraform/modules/{}", r.template);
        let cloud = if r.template.starts_with("aws") {
            "aws"
        } else {
            "gcp"
        };
        for (sub, _) in tern_flags(script) {
            let wanted = match sub.as_str() {
                "controller" => format!("--provider {cloud}"),
                _ => format!("--notice {cloud}"),
            };
            assert!(
                script.contains(&wanted),
                "{file}: `tern {sub}` without {wanted}"
            );
        }
        if r.template.ends_with("worker-user-data.sh.tftpl") {
            for tag in [job, tern::store::AGENT_TOKEN_TAG] {
                let path = format!("meta-data/tags/instance/{tag}");
                assert!(
                    script.contains(&path),
                    "{file}: read from the {tag} tag: {path}"
                );
            }
        }
        if r.template.contains("worker") {
            // A worker holds its job's agent token only, never the admin token.
            assert!(
                !script.contains("ssm get-parameter") && !script.contains("secret '"),
                "{file}: a worker reads the admin token"
            );
        }
        if r.template.ends_with("worker-startup.sh.tftpl") {
            let prefix = tern_gcp::labels::DESCRIPTION_PREFIX;
            assert!(
                script.contains(&format!("\"{prefix}\"")) && script.contains(&format!("\"{job}\"")),
                "{file}: the job is {job} in the description after '{prefix}'"
            );
            let token = tern::store::AGENT_TOKEN_TAG;
            assert!(
                script.contains(&format!("\"{token}\"")),
                "{file}: the agent token is {token} in the description"
            );
        }
    }
}
