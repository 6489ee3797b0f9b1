//! The user-data and startup scripts, rendered by the real terraform: bash, and only real
//! `tern` flags.

use super::*;

// ---------------------------------------------------------------------------------------------
// The user-data and startup scripts, rendered by terraform

/// A template of a module and the values one rendering passes (HCL expressions by name).
pub(super) struct Rendering {
    pub(super) template: &'static str,
    pub(super) vars: Vec<(&'static str, &'static str)>,
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
pub(super) fn render_all(renderings: &[Rendering]) -> Vec<String> {
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
