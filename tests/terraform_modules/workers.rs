//! The workers' rendered start scripts run each job's own `[run]`: both modules' worker
//! templates, rendered by terraform with no command, start real `tern agent`s for two jobs of
//! one controller (on the simulated cloud), and each job runs its own program. Only the
//! scripts' machine paths are pointed at the test's (the metadata server's address, the
//! token's file, where `tern` and the GCP helpers are); what they read and run is theirs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::common::{
    Reaper, controller_command, free_port, respond, submit, tern_json, wait_for_child,
};
use super::templates::{Rendering, render_all};

const TOKEN: &str = "terraform-workers-admin";

/// A metadata server for one VM: AWS IMDSv2 (a session token, `instance-id`, the instance's
/// tags, no spot notice) and GCE (`instance/description` with tern's tags, not preempted).
fn metadata_server(instance: &str, job: &str, agent_token: &str) -> String {
    let tags = serde_json::json!({ "tern:job": job, "tern:agent-token": agent_token });
    let (instance, job, agent_token) = (
        instance.to_string(),
        job.to_string(),
        agent_token.to_string(),
    );
    respond(move |r| {
        let found = match r.path() {
            "/latest/api/token" => Some("session".to_string()),
            "/latest/meta-data/instance-id" => Some(instance.clone()),
            "/latest/meta-data/tags/instance/tern:job" => Some(job.clone()),
            "/latest/meta-data/tags/instance/tern:agent-token" => Some(agent_token.clone()),
            "/computeMetadata/v1/instance/description" => Some(format!("tern tags: {tags}")),
            "/computeMetadata/v1/instance/preempted" => Some("FALSE".into()),
            _ => None,
        };
        found.map_or((404, String::new()), |b| (200, b))
    })
}

/// The `start-agent` script a worker template writes (between its heredoc markers).
fn start_agent(script: &str) -> String {
    let begin = "cat > /usr/local/lib/tern/start-agent <<'SCRIPT'\n";
    let from = script.find(begin).expect("the start-agent heredoc") + begin.len();
    let to = from + script[from..].find("\nSCRIPT\n").expect("its end");
    script[from..to].to_string()
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// The worker templates (AWS, GCP) and GCP's helpers, as the modules render them with no
/// command, for a controller at `server` and progress files in `dir`.
fn rendered(server: &str, dir: &Path) -> (String, String, String) {
    let url = leak(format!("{server:?}"));
    let progress = |who| {
        leak(format!(
            "{:?}",
            dir.join(format!("progress-{who}.json"))
                .display()
                .to_string()
        ))
    };
    let worker = |template, first: (&'static str, &'static str), who| Rendering {
        template,
        vars: vec![
            first,
            ("controller_url", url),
            ("progress_file", progress(who)),
            ("checkpoint_command", "\"\""),
            ("agent_args", "\"\""),
            ("command", "\"\""),
        ],
    };
    let common = Rendering {
        template: "gcp-controller/templates/common.sh.tftpl",
        vars: vec![
            ("project", "\"my-project\""),
            ("binary_url", "\"https://example.com/tern\""),
            ("binary_bucket", "\"\""),
            ("binary_object", "\"\""),
            ("binary_sha256", "\"\""),
        ],
    };
    let mut scripts = render_all(&[
        worker(
            "aws-controller/templates/worker-user-data.sh.tftpl",
            ("install_tern", "\"# install tern\""),
            "a",
        ),
        worker(
            "gcp-controller/templates/worker-startup.sh.tftpl",
            ("common", "\"# common functions\""),
            "b",
        ),
        common,
    ])
    .into_iter();
    let mut next = || scripts.next().expect("a rendering");
    (next(), next(), next())
}

/// A one-node job whose `[run]` writes `who` into `dir/who.txt` and reports its work done.
fn spec(dir: &Path, who: &str) -> PathBuf {
    let command = format!(
        "echo {who} > {out:?}; printf '{{\"samples\": 100, \"checkpoint_samples\": 100}}' \
         > \"$TERN_PROGRESS_FILE\"",
        out = dir.join(format!("{who}.txt")),
    );
    let text = format!(
        "name = \"job-{who}\"\nteam = \"ml\"\naccelerators = [\"V100\"]\nworkers = 1\n\
         local_batch = 16\ndeadline = \"70m\"\ncapacity = \"spot-only\"\n[work]\nsamples = 100\n\
         [[observation]]\naccelerator = \"V100\"\ngpus = 1\nlocal_batch = 16\nstep_seconds = 1\n\
         [run]\ncommand = {command:?}\nlauncher = \"none\"\n"
    );
    let path = dir.join(format!("job-{who}.toml"));
    std::fs::write(&path, text).expect("spec");
    path
}

/// A controller on the simulated cloud at wall speed whose jobs only agents move.
struct Controller {
    _reaper: Reaper,
    server: String,
}

impl Controller {
    fn start(dir: &Path) -> Controller {
        let trace = dir.join("us-west-2a_v100_8.json");
        let body = serde_json::json!({
            "metadata": {"gap_seconds": 60, "zone": "us-west-2a", "region": "us-west-2",
                         "cloud": "aws", "price_info": {"price": 0.9, "on_demand_price": 3.06}},
            "data": vec![8; 500],
        });
        std::fs::write(&trace, body.to_string()).expect("trace");
        let addr = format!("127.0.0.1:{}", free_port());
        let log = dir.join("controller.log");
        let mut child = controller_command(&dir.join("state.db"), TOKEN)
            .arg("--trace")
            .arg(&trace)
            .args(["--listen", &addr, "--speed", "1", "--sim-boot-seconds", "1"])
            .args(["--no-simulated-workers", "--period", "0.5"])
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("controller");
        wait_for_child(&addr, &mut child, &log);
        Controller {
            _reaper: Reaper(vec![child]),
            server: format!("http://{addr}"),
        }
    }

    /// `tern ARGS --server …`: its last line, JSON.
    fn tern(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["--server", &self.server]);
        tern_json(&all, TOKEN)
    }

    /// The job's first instance, once it has one.
    fn instance(&self, job: &str) -> String {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let s = self.tern(&["status", job, "--json"]);
            if let Some(id) = s["jobs"][0]["instance_ids"][0].as_str() {
                return id.to_string();
            }
            assert!(Instant::now() < until, "{job} got no instance: {s}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Run `script` (a rendered start-agent, its machine paths replaced) in `dir`.
fn run_script(dir: &Path, name: &str, script: &str, env: &[(&str, &str)]) -> Child {
    let path = dir.join(name);
    std::fs::write(&path, script).expect("script");
    let mut cmd = Command::new("bash");
    cmd.arg(&path)
        .env_remove("TERN_TOKEN")
        .env("TERN_AGENT_INTERVAL", "0.5")
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("{name}.log"))).expect("log"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("bash")
}

fn wait(child: &mut Child, log: &Path) {
    let until = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            assert!(s.success(), "{s}: {text}");
            return;
        }
        if Instant::now() >= until {
            let _ = child.kill();
            panic!("{}", std::fs::read_to_string(log).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_rendered_worker_scripts_run_each_jobs_own_program() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let c = Controller::start(d);
    let tern = env!("CARGO_BIN_EXE_tern");
    let (aws, gcp, common) = rendered(&c.server, d);
    for who in ["a", "b"] {
        submit(&spec(d, who), &c.server, TOKEN);
    }
    // Each VM's metadata names its job and holds that job's agent token.
    let agent_token = |job: &str| {
        let t = c.tern(&["token", "create", "--role", "agent", "--job", job, "--json"]);
        t["token"].as_str().expect("token").to_string()
    };
    let (ia, ib) = (c.instance("job-a"), c.instance("job-b"));
    let md_a = metadata_server(&ia, "job-a", &agent_token("job-a"));
    let md_b = metadata_server(&ib, "job-b", &agent_token("job-b"));
    // job-a on an AWS worker: its IMDS gives the job, the token and the instance id.
    let script_a = start_agent(&aws)
        .replace("http://169.254.169.254/latest", &format!("{md_a}/latest"))
        .replace("/run/tern/token", &d.join("token-a").display().to_string())
        .replace("/usr/local/bin/tern", tern);
    // job-b on a GCP worker: its description gives the job and the token; tern's instance
    // ids on GCE are ZONE/NAME, the simulated cloud's are not, so it is told its id.
    let common = common.replace("http://metadata.google.internal", &md_b);
    std::fs::write(d.join("common.sh"), common).expect("common.sh");
    let script_b = start_agent(&gcp)
        .replace(
            "/usr/local/lib/tern/common.sh",
            &d.join("common.sh").display().to_string(),
        )
        .replace("/run/tern/token", &d.join("token-b").display().to_string())
        .replace("/usr/local/bin/tern", tern);
    // Nothing after `--`: the agent runs the job's `[run]`.
    for s in [&script_a, &script_b] {
        assert!(s.trim_end().ends_with(" --"), "{s}");
    }
    let mut a = run_script(
        d,
        "start-agent-a",
        &script_a,
        &[("TERN_METADATA_URL", &md_a)],
    );
    let mut b = run_script(
        d,
        "start-agent-b",
        &script_b,
        &[("TERN_METADATA_URL", &md_b), ("TERN_INSTANCE_ID", &ib)],
    );
    wait(&mut a, &d.join("start-agent-a.log"));
    wait(&mut b, &d.join("start-agent-b.log"));
    for who in ["a", "b"] {
        let said = std::fs::read_to_string(d.join(format!("{who}.txt")));
        assert_eq!(said.expect("its program ran").trim(), who);
        let log =
            std::fs::read_to_string(d.join(format!("start-agent-{who}.log"))).unwrap_or_default();
        assert!(
            log.contains(&format!("running job job-{who}'s [run]: ")),
            "{log}"
        );
        let s = c.tern(&["status", &format!("job-{who}"), "--json"]);
        assert_eq!(s["jobs"][0]["state"], "finished", "{s}");
    }
}
