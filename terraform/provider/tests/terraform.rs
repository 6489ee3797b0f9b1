//! The provider under a real `terraform` binary, against a real `tern controller` on the
//! simulated cloud: the example in terraform/examples/jobs applied, planned again (no
//! changes), changed (a replacement), imported, drifted, destroyed, and the error paths a
//! user meets (wrong token, no controller, invalid spec) shown as diagnostics.
//!
//! Needs `terraform` on PATH (or `TERN_TERRAFORM`; `scripts/setup --test` installs one) and
//! the `tern` binary built beside this provider (`cargo test --workspace` builds both).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "terraform-test-token";

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn terraform_bin() -> String {
    let bin = std::env::var("TERN_TERRAFORM").unwrap_or_else(|_| "terraform".into());
    let found = Command::new(&bin)
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        found.is_ok_and(|s| s.success()),
        "no terraform binary ({bin}); run `scripts/setup --test`, or set TERN_TERRAFORM"
    );
    bin
}

fn tern_bin() -> PathBuf {
    let tern = Path::new(env!("CARGO_BIN_EXE_terraform-provider-tern")).with_file_name("tern");
    assert!(
        tern.exists(),
        "{} is missing: build it with `cargo build -p tern` (cargo test --workspace does)",
        tern.display()
    );
    tern
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for(addr: &str) {
    let start = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "nothing listening on {addr}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A controller on the in-process simulated cloud, and its URL.
fn controller(dir: &Path) -> (Killed, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let child = Command::new(tern_bin())
        .args([
            "controller",
            "--listen",
            &addr,
            "--period",
            "0.05",
            "--state",
        ])
        .arg(dir.join("state.db"))
        .env("TERN_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tern controller");
    wait_for(&addr);
    (Killed(child), format!("http://{addr}"))
}

/// A home folder whose implicit provider mirror (`~/.terraform.d/plugins`) holds this build,
/// laid out as terraform/README.md tells users to, so `terraform init` works with no
/// registry and no CLI configuration.
fn home(dir: &Path) -> PathBuf {
    let home = dir.join("home");
    let plat = home.join(".terraform.d/plugins/registry.terraform.io/tern/tern/0.1.0/linux_amd64");
    std::fs::create_dir_all(&plat).unwrap();
    std::fs::copy(
        env!("CARGO_BIN_EXE_terraform-provider-tern"),
        plat.join("terraform-provider-tern_v0.1.0"),
    )
    .unwrap();
    home
}

struct Tf {
    bin: String,
    work: PathBuf,
    home: PathBuf,
    /// The token's environment: `TERN_TOKEN`, or `TERN_TOKEN_FILE`.
    token: (&'static str, String),
}

impl Tf {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .args(args)
            .current_dir(&self.work)
            .env("HOME", &self.home)
            .env_remove("TF_CLI_CONFIG_FILE")
            .env_remove("TF_PLUGIN_CACHE_DIR")
            .env("TF_IN_AUTOMATION", "1")
            .env("CHECKPOINT_DISABLE", "1")
            .env_remove("TERN_TOKEN")
            .env_remove("TERN_TOKEN_FILE")
            .env(self.token.0, &self.token.1)
            .env_remove("TERN_SERVER")
            .output()
            .expect("terraform")
    }

    /// Runs and expects exit code `code`; returns stdout and stderr together.
    fn expect(&self, code: i32, args: &[&str]) -> String {
        let out = self.run(args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(code), "terraform {args:?}:\n{text}");
        assert!(
            !text.contains("panicked") && !text.contains("rpc error"),
            "terraform {args:?}:\n{text}"
        );
        text
    }
}

fn copy_example(to: &Path) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/jobs");
    std::fs::create_dir_all(to.join("jobs")).unwrap();
    std::fs::copy(from.join("main.tf"), to.join("main.tf")).unwrap();
    std::fs::copy(from.join("jobs/resnet.toml"), to.join("jobs/resnet.toml")).unwrap();
}

/// The controller's jobs: name → state.
fn jobs(server: &str) -> std::collections::BTreeMap<String, String> {
    let out = Command::new(tern_bin())
        .args(["status", "--json", "--server", server])
        .env("TERN_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["name"].as_str().unwrap().to_string(),
                j["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn outputs(tf: &Tf) -> serde_json::Value {
    serde_json::from_str(&tf.expect(0, &["output", "-json"])).unwrap()
}

#[test]
fn the_example_applies_plans_clean_replaces_imports_drifts_and_destroys() {
    let dir = tempfile::tempdir().unwrap();
    let (_ctl, server) = controller(dir.path());
    let work = dir.path().join("example");
    copy_example(&work);
    let tf = Tf {
        bin: terraform_bin(),
        work,
        home: home(dir.path()),
        token: ("TERN_TOKEN", TOKEN.into()),
    };
    let endpoint = format!("endpoint={server}");
    let var = ["-var", endpoint.as_str()];
    tf.expect(0, &["init", "-no-color"]);

    // Apply: offers and a plan read, two jobs created on the controller.
    tf.expect(
        0,
        &[&["apply", "-auto-approve", "-no-color"][..], &var].concat(),
    );
    let out = outputs(&tf);
    let (resnet, sweep) = (
        out["jobs"]["value"]["resnet"].as_str().unwrap().to_string(),
        out["jobs"]["value"]["sweep"].as_str().unwrap().to_string(),
    );
    assert!(
        resnet.starts_with("resnet50-") && sweep.starts_with("sweep-"),
        "{out}"
    );
    assert!(
        out["cheapest_t4"]["value"]
            .as_str()
            .unwrap()
            .contains(" USD/h"),
        "{out}"
    );
    assert!(
        out["resnet_plan"]["value"]["expected_cost"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{out}"
    );
    let on_controller = jobs(&server);
    assert!(
        on_controller.contains_key(&resnet) && on_controller.contains_key(&sweep),
        "{on_controller:?}"
    );

    // A second plan finds nothing to do.
    tf.expect(
        0,
        &[&["plan", "-detailed-exitcode", "-no-color"][..], &var].concat(),
    );

    // A changed spec replaces the job: the old one is cancelled, a new one submitted.
    let steps = ["-var", "sweep_steps=30000"];
    let text = tf.expect(
        0,
        &[&["apply", "-auto-approve", "-no-color"][..], &var, &steps].concat(),
    );
    assert!(text.contains("forces replacement"), "{text}");
    let new_sweep = outputs(&tf)["jobs"]["value"]["sweep"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(new_sweep, sweep);
    let on_controller = jobs(&server);
    assert_eq!(on_controller[&sweep], "cancelled");
    assert_ne!(on_controller[&new_sweep], "cancelled");

    // Import: forget the job, import it by name; the plan records the spec in place and
    // changes nothing on the controller.
    tf.expect(0, &["state", "rm", "-no-color", "tern_job.resnet"]);
    tf.expect(
        0,
        &[
            &["import", "-no-color"][..],
            &var,
            &steps,
            &["tern_job.resnet", &resnet],
        ]
        .concat(),
    );
    let text = tf.expect(
        2,
        &[
            &["plan", "-detailed-exitcode", "-no-color"][..],
            &var,
            &steps,
        ]
        .concat(),
    );
    assert!(
        text.contains("updated in-place") && !text.contains("must be replaced"),
        "{text}"
    );
    let before = jobs(&server).len();
    tf.expect(
        0,
        &[&["apply", "-auto-approve", "-no-color"][..], &var, &steps].concat(),
    );
    assert_eq!(
        jobs(&server).len(),
        before,
        "an import must not submit a job"
    );
    tf.expect(
        0,
        &[
            &["plan", "-detailed-exitcode", "-no-color"][..],
            &var,
            &steps,
        ]
        .concat(),
    );

    // Drift: a job cancelled outside Terraform plans a replacement.
    let cancel = Command::new(tern_bin())
        .args(["cancel", &resnet, "--server", &server])
        .env("TERN_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(cancel.status.success());
    let text = tf.expect(
        2,
        &[
            &["plan", "-detailed-exitcode", "-no-color"][..],
            &var,
            &steps,
        ]
        .concat(),
    );
    assert!(
        text.contains("\"cancelled\"") && text.contains("must be replaced"),
        "{text}"
    );

    // Error paths, with state to refresh: each a diagnostic naming the attribute.
    let wrong = Tf {
        token: ("TERN_TOKEN", "wrong".into()),
        bin: tf.bin.clone(),
        work: tf.work.clone(),
        home: tf.home.clone(),
    };
    let text = wrong.expect(1, &[&["plan", "-no-color"][..], &var, &steps].concat());
    assert!(
        text.contains("refused the token") && text.contains("TERN_TOKEN"),
        "{text}"
    );
    let nowhere = format!("endpoint=http://127.0.0.1:{}", free_port());
    let text = tf.expect(1, &["plan", "-no-color", "-var", &nowhere]);
    assert!(text.contains("Cannot reach the tern controller"), "{text}");

    // Destroy cancels what is left.
    tf.expect(
        0,
        &[&["destroy", "-auto-approve", "-no-color"][..], &var, &steps].concat(),
    );
    let on_controller = jobs(&server);
    assert!(
        on_controller
            .values()
            .all(|s| s == "cancelled" || s == "finished"),
        "{on_controller:?}"
    );
}

#[test]
fn an_invalid_spec_is_a_diagnostic_on_its_attribute_before_anything_is_submitted() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("bad");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(
        work.join("main.tf"),
        r#"terraform {
  required_providers {
    tern = { source = "tern/tern", version = "0.1.0" }
  }
}
provider "tern" {
  endpoint = "http://127.0.0.1:9"
}
resource "tern_job" "bad" {
  job = {
    name         = "bad"
    team         = "t"
    accelerators = ["V100"]
    local_batch  = 8
    workers      = { min = 4, max = 2 }
    work         = { steps = 10, batch = 8 }
  }
}
"#,
    )
    .unwrap();
    let tf = Tf {
        bin: terraform_bin(),
        work,
        home: home(dir.path()),
        token: ("TERN_TOKEN", TOKEN.into()),
    };
    tf.expect(0, &["init", "-no-color"]);
    let text = tf.expect(1, &["plan", "-no-color"]);
    assert!(
        text.contains("Invalid job spec") && text.contains("workers"),
        "{text}"
    );
    assert!(
        text.contains("tern_job.bad") && text.contains("job = {"),
        "the diagnostic points at the attribute:\n{text}"
    );
}

/// terraform/README.md shows the example the test above runs, verbatim, and installs the
/// provider where `home()` does.
#[test]
fn the_readme_shows_the_example_the_tests_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for file in ["examples/jobs/main.tf", "examples/jobs/jobs/resnet.toml"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        assert!(
            readme.contains(&text),
            "terraform/README.md does not show {file} as it is"
        );
    }
    assert!(
        readme.contains("~/.terraform.d/plugins/registry.terraform.io/tern/tern/0.1.0/linux_amd64")
    );
}
