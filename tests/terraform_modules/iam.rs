//! The AWS policy and interruption rules, and the GCP custom roles, against the code's lists.

use super::*;

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
