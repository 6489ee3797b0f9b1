//! The IAM actions tern's AWS provider needs: one list that the README, the Terraform module
//! (`terraform/modules/aws-controller`) and the tests read, so a new SDK call without its
//! action fails a test here instead of an `AccessDenied` in production.

/// Every IAM action `tern-aws` needs, with why. Exactly the actions of [`SDK_CALLS`], no more.
pub const ACTIONS: &[(&str, &str)] = &[
    (
        "ec2:DescribeAvailabilityZones",
        "AZ names → AZ ids (tern's zones are AZ ids)",
    ),
    (
        "ec2:DescribeInstanceTypes",
        "shapes: vCPUs, memory, GPUs and Neuron devices",
    ),
    (
        "ec2:DescribeInstanceTypeOfferings",
        "which zones offer a type",
    ),
    ("ec2:DescribeSpotPriceHistory", "spot prices"),
    (
        "ec2:DescribeInstances",
        "get, list by owner tag, the crash-safe launch check",
    ),
    (
        "ec2:DescribeLaunchTemplateVersions",
        "the template's image, for a job's disk_gb (only jobs that set it)",
    ),
    (
        "ec2:DescribeImages",
        "that image's root device name, for a job's disk_gb",
    ),
    ("ec2:CreateFleet", "launch (CreateFleet type=instant)"),
    (
        "ec2:RunInstances",
        "CreateFleet launches through it (instance, volume, network interface, subnet, \
         security group, image and launch template resources)",
    ),
    (
        "ec2:CreateTags",
        "tags at launch (TagSpecifications on instances and volumes)",
    ),
    (
        "ec2:TerminateInstances",
        "terminate, only instances tagged tern:owner",
    ),
    (
        "iam:PassRole",
        "the workers' instance profile in the launch template (that role only)",
    ),
    (
        "iam:CreateServiceLinkedRole",
        "once per account, if AWSServiceRoleForEC2Fleet or AWSServiceRoleForEC2Spot does not \
         exist yet",
    ),
    (
        "pricing:GetProducts",
        "on-demand prices (optional: without it tern keeps the bundled catalog's)",
    ),
    (
        "servicequotas:GetServiceQuota",
        "the account's accelerator vCPU quotas (optional: without it the controller learns \
         them from refused launches)",
    ),
    (
        "servicequotas:ListAWSDefaultServiceQuotas",
        "AWS's defaults, for quotas the account never changed",
    ),
    ("sqs:ReceiveMessage", "the interruption queue"),
    (
        "sqs:DeleteMessage",
        "the interruption queue (DeleteMessageBatch is authorised as sqs:DeleteMessage)",
    ),
];

/// Each AWS SDK operation `tern-aws` calls (the client method's name) and the IAM actions it
/// needs. The first action is the operation's own; the others are what AWS also checks when
/// the operation runs (CreateFleet launches, tags and passes the template's role).
pub const SDK_CALLS: &[(&str, &[&str])] = &[
    (
        "describe_availability_zones",
        &["ec2:DescribeAvailabilityZones"],
    ),
    ("describe_instance_types", &["ec2:DescribeInstanceTypes"]),
    (
        "describe_instance_type_offerings",
        &["ec2:DescribeInstanceTypeOfferings"],
    ),
    (
        "describe_spot_price_history",
        &["ec2:DescribeSpotPriceHistory"],
    ),
    ("describe_instances", &["ec2:DescribeInstances"]),
    (
        "describe_launch_template_versions",
        &["ec2:DescribeLaunchTemplateVersions"],
    ),
    ("describe_images", &["ec2:DescribeImages"]),
    (
        "create_fleet",
        &[
            "ec2:CreateFleet",
            "ec2:RunInstances",
            "ec2:CreateTags",
            "iam:PassRole",
            "iam:CreateServiceLinkedRole",
        ],
    ),
    ("terminate_instances", &["ec2:TerminateInstances"]),
    ("get_products", &["pricing:GetProducts"]),
    ("get_service_quota", &["servicequotas:GetServiceQuota"]),
    (
        "list_aws_default_service_quotas",
        &["servicequotas:ListAWSDefaultServiceQuotas"],
    ),
    ("receive_message", &["sqs:ReceiveMessage"]),
    ("delete_message_batch", &["sqs:DeleteMessage"]),
];

/// The action names alone, sorted.
pub fn names() -> Vec<&'static str> {
    let mut v: Vec<&str> = ACTIONS.iter().map(|(a, _)| *a).collect();
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;

    /// The first words of every operation name of aws-sdk-ec2, aws-sdk-sqs, aws-sdk-pricing
    /// and aws-sdk-servicequotas. A zero-argument method call in this crate whose name starts with one
    /// of them is taken for an SDK operation.
    const OPERATION_VERBS: &[&str] = &[
        "accept",
        "add",
        "advertise",
        "allocate",
        "apply",
        "assign",
        "associate",
        "attach",
        "authorize",
        "batch",
        "bundle",
        "cancel",
        "change",
        "confirm",
        "copy",
        "create",
        "delete",
        "deprovision",
        "deregister",
        "describe",
        "detach",
        "disable",
        "disassociate",
        "enable",
        "export",
        "get",
        "import",
        "list",
        "lock",
        "modify",
        "monitor",
        "move",
        "provision",
        "purchase",
        "purge",
        "reboot",
        "receive",
        "register",
        "reject",
        "release",
        "remove",
        "replace",
        "report",
        "request",
        "reset",
        "restore",
        "revoke",
        "run",
        "search",
        "send",
        "set",
        "start",
        "stop",
        "tag",
        "terminate",
        "unassign",
        "unlock",
        "unmonitor",
        "untag",
        "update",
        "validate",
        "withdraw",
    ];

    /// `describe_spot_price_history` → `DescribeSpotPriceHistory`.
    fn camel(op: &str) -> String {
        op.split('_')
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect()
    }

    /// A file's code without its `#[cfg(test)]` module (tests may call anything).
    fn without_tests(text: &str) -> &str {
        text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text)
    }

    /// Names `n` of every `.n()` call whose first word is an operation verb.
    fn operation_calls(code: &str) -> BTreeSet<String> {
        let mut found = BTreeSet::new();
        for piece in code.split('.').skip(1) {
            let name: String = piece
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let verb = name.split('_').next().unwrap_or_default();
            let called = piece[name.len()..].starts_with("()");
            if called && name.contains('_') && OPERATION_VERBS.contains(&verb) {
                found.insert(name);
            }
        }
        found
    }

    fn source_calls() -> BTreeSet<String> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = BTreeSet::new();
        for entry in std::fs::read_dir(&dir).expect("read src/") {
            let path = entry.expect("src/ entry").path();
            if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read a source file");
                found.extend(operation_calls(without_tests(&text)));
            }
        }
        found
    }

    #[test]
    fn every_sdk_call_in_the_source_is_listed_and_every_listed_call_is_made() {
        let listed: BTreeSet<String> = SDK_CALLS.iter().map(|(op, _)| op.to_string()).collect();
        let made = source_calls();
        let unlisted: Vec<_> = made.difference(&listed).collect();
        let unused: Vec<_> = listed.difference(&made).collect();
        assert!(
            unlisted.is_empty(),
            "src/ calls SDK operations missing from permissions::SDK_CALLS (add them with \
             their IAM actions, to ACTIONS and the README too): {unlisted:?}"
        );
        assert!(
            unused.is_empty(),
            "permissions::SDK_CALLS lists operations src/ no longer calls: {unused:?}"
        );
    }

    #[test]
    fn the_scan_finds_operations_and_skips_other_calls() {
        let code = "client\n .describe_instances()\n .instance_ids(&id)\n .send().await;\n\
                    x.get(1); y.create_fleet(); z.as_str(); w.run_instances ();";
        let got: Vec<String> = operation_calls(code).into_iter().collect();
        assert_eq!(got, ["create_fleet", "describe_instances"]);
    }

    #[test]
    fn each_call_needs_its_own_action_first() {
        for (op, actions) in SDK_CALLS {
            let first = actions.first().expect("an operation needs an action");
            let (_, action) = first.split_once(':').expect("service:Action");
            // SQS authorises a batch as the single-message action; IAM spells AWS in
            // capitals where the SDK's method names cannot (ListAWSDefaultServiceQuotas).
            let own = camel(op.strip_suffix("_batch").unwrap_or(op));
            assert!(action.eq_ignore_ascii_case(&own), "{op} → {first}");
        }
    }

    #[test]
    fn actions_are_exactly_what_the_calls_need() {
        let needed: BTreeSet<&str> = SDK_CALLS
            .iter()
            .flat_map(|(_, a)| a.iter().copied())
            .collect();
        let listed = names();
        let mut unique = listed.clone();
        unique.dedup();
        assert_eq!(listed, unique, "ACTIONS lists an action twice");
        let listed: BTreeSet<&str> = listed.into_iter().collect();
        assert_eq!(listed, needed, "ACTIONS vs the actions SDK_CALLS need");
        for a in &listed {
            let (service, _) = a.split_once(':').expect("service:Action");
            assert!(
                ["ec2", "iam", "pricing", "servicequotas", "sqs"].contains(&service),
                "{a}"
            );
        }
    }

    /// Actions named in the README's IAM table (`| \`ec2:X\` | why |` rows).
    fn readme_table(readme: &str) -> Vec<&str> {
        let mut listed: Vec<&str> = readme
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .filter(|a| a.contains(':'))
            .collect();
        listed.sort_unstable();
        listed
    }

    /// Actions of every statement of the README's example policy (its first JSON block).
    fn readme_policy(readme: &str) -> Vec<String> {
        let block = readme
            .split("```json\n")
            .nth(1)
            .and_then(|b| b.split("```").next())
            .expect("the README has a ```json policy");
        let policy: serde_json::Value = serde_json::from_str(block).expect("the policy parses");
        let mut actions: Vec<String> = policy["Statement"]
            .as_array()
            .expect("Statement is a list")
            .iter()
            .flat_map(|s| match &s["Action"] {
                serde_json::Value::String(a) => vec![a.clone()],
                serde_json::Value::Array(list) => list
                    .iter()
                    .filter_map(|a| a.as_str().map(str::to_owned))
                    .collect(),
                _ => Vec::new(),
            })
            .collect();
        actions.sort_unstable();
        actions.dedup();
        actions
    }

    #[test]
    fn the_readme_lists_exactly_these_actions() {
        let readme = include_str!("../README.md");
        assert_eq!(readme_table(readme), names(), "README.md's IAM table");
        assert_eq!(readme_policy(readme), names(), "README.md's example policy");
    }
}
