//! `tern controller --provider aws` end to end against moto's EC2 server (the real AWS SDK
//! inside tern, a real EC2 API emulator outside): a job is submitted, planned on the offers
//! moto describes, launched with CreateFleet, trained by a test agent (`tern agent` running a
//! "training script" that writes its progress file), and its instance terminated when it
//! finishes. moto's instances do not train, so the agent's script stands in for the VM.

#![cfg(feature = "aws")]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{
    Reaper, free_port, submit_t4_small_with, tern_json, train_with_agent,
    wait_finished_and_released, wait_for,
};

const TOKEN: &str = "aws-scenario-token";
const OWNER: &str = "tern-scenario";

/// boto3 (installed with moto) for the test's own view of the emulated account.
fn boto(endpoint: &str, script: &str) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import boto3\nec2 = boto3.client('ec2', region_name='us-east-1', endpoint_url='{endpoint}', \
             aws_access_key_id='testing', aws_secret_access_key='testing')\n{script}"
        ))
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "boto3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn running_owned(endpoint: &str) -> usize {
    boto(
        endpoint,
        &format!(
            "r = ec2.describe_instances(Filters=[{{'Name': 'tag:tern:owner', 'Values': ['{OWNER}']}}, \
             {{'Name': 'instance-state-name', 'Values': ['pending', 'running']}}])\n\
             print(sum(len(x['Instances']) for x in r['Reservations']))"
        ),
    )
    .parse()
    .expect("count")
}

/// moto's EC2 server and `tern controller --provider aws` on it; the controller's URL.
fn moto_and_controller(dir: &std::path::Path, reaper: &mut Reaper) -> (String, String) {
    let moto_port = free_port();
    reaper.0.push(
        Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &moto_port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server must be on PATH (scripts/setup --test installs it)"),
    );
    let moto_addr = format!("127.0.0.1:{moto_port}");
    wait_for(&moto_addr);
    let moto = format!("http://{moto_addr}");
    // The launch template the user (or Terraform) would create.
    boto(
        &moto,
        "image = ec2.describe_images()['Images'][0]['ImageId']\n\
         ec2.create_launch_template(LaunchTemplateName='tern-workers', \
         LaunchTemplateData={'ImageId': image})",
    );

    let addr = format!("127.0.0.1:{}", free_port());
    let server = format!("http://{addr}");
    reaper.0.push(
        Command::new(env!("CARGO_BIN_EXE_tern"))
            .args([
                "controller",
                "--provider",
                "aws",
                "--region",
                "us-east-1",
                "--aws-endpoint",
                &moto,
                "--launch-template",
                "tern-workers",
                "--instance-type",
                "g4dn.xlarge",
                "--owner",
                OWNER,
                "--listen",
                &addr,
                "--period",
                "0.2",
            ])
            .arg("--state")
            .arg(dir.join("state.db"))
            .env("TERN_DB", dir.join("prices.db"))
            .env("TERN_TOKEN", TOKEN)
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("controller"),
    );
    wait_for(&addr);
    (moto, server)
}

#[test]
fn a_job_runs_from_submit_to_finish_on_aws_via_moto() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut reaper = Reaper(Vec::new());
    let (moto, server) = moto_and_controller(dir.path(), &mut reaper);
    submit_t4_small_with(dir.path(), &server, TOKEN, "disk_gb = 200\n");

    // The controller plans on moto's offers and launches through CreateFleet.
    let t0 = Instant::now();
    loop {
        let v = tern_json(&["status", "--json", "--server", &server], TOKEN);
        if v["jobs"][0]["instances"].as_u64() > Some(0) && running_owned(&moto) > 0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no instance launched: {v}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    // The job's disk_gb reached every override as the root device of the template's image.
    let mappings = boto(
        &moto,
        "lt = ec2.describe_launch_template_versions(LaunchTemplateName='tern-workers')\n\
         image = lt['LaunchTemplateVersions'][0]['LaunchTemplateData']['ImageId']\n\
         root = ec2.describe_images(ImageIds=[image])['Images'][0]['RootDeviceName']\n\
         got = {(m['DeviceName'] == root, m['Ebs']['VolumeSize']) \
                for f in ec2.describe_fleets()['Fleets'] for c in f['LaunchTemplateConfigs'] \
                for o in c['Overrides'] for m in o.get('BlockDeviceMappings', [])}\n\
         print(sorted(got))",
    );
    assert_eq!(mappings, "[(True, 200)]");

    // The test agent: `tern agent` runs the "training script" under a stand-in torchrun.
    train_with_agent(dir.path(), "t4-small", 100_000, &server, TOKEN);

    // Finished: the controller terminates the instance in moto.
    let job = wait_finished_and_released(&server, TOKEN, || running_owned(&moto));
    assert_eq!(job["progress"], 1.0, "{job}");
    // Every instance tern launched carries its owner, intent and job tags.
    let tags = boto(
        &moto,
        &format!(
            "r = ec2.describe_instances(Filters=[{{'Name': 'tag:tern:owner', 'Values': ['{OWNER}']}}])\n\
             print(sorted({{t['Key'] for x in r['Reservations'] for i in x['Instances'] for t in i.get('Tags', [])}}))"
        ),
    );
    for key in ["tern:owner", "tern:intent", "tern:job"] {
        assert!(tags.contains(key), "{key} missing from {tags}");
    }
    // The spot prices the controller read are in the price history `tern prices` reads, with
    // their AWS timestamps (moto's values are fake, so only their presence is checked).
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args([
            "prices",
            "history",
            "--instance-type",
            "g4dn.xlarge",
            "--capacity",
            "spot",
            "--json",
        ])
        .env("TERN_DB", dir.path().join("prices.db"))
        .output()
        .expect("prices history");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let history: serde_json::Value =
        serde_json::from_str(text.lines().last().expect("line")).expect("json");
    assert!(
        history.to_string().contains("g4dn.xlarge"),
        "no spot readings recorded: {history}"
    );
}

#[test]
fn a_job_nobody_measured_probes_on_aws_and_is_planned_on_its_reported_steps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut reaper = Reaper(Vec::new());
    let (moto, server) = moto_and_controller(dir.path(), &mut reaper);
    let spec = dir.path().join("cold.toml");
    std::fs::write(
        &spec,
        tern_cloud::testkit::spec("cold")
            .team("ml")
            .accelerators(&["T4"])
            .deadline(None)
            .local_batch(Some(32))
            .samples(100_000)
            .unmeasured()
            .text(),
    )
    .expect("spec");
    common::submit(&spec, &server, TOKEN);
    let t0 = Instant::now();
    let status = loop {
        let v = tern_json(&["status", "cold", "--json", "--server", &server], TOKEN);
        if v["jobs"][0]["instances"].as_u64() > Some(0) && running_owned(&moto) > 0 {
            break v;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no probe launched: {v}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(status["jobs"][0]["forecast"]["basis"], "none", "{status}");
    // The script reports its steps as the `tern_train` helper does.
    common::train_reporting_steps(dir.path(), "cold", 100_000, 0.25, &server, TOKEN);
    let job = wait_finished_and_released(&server, TOKEN, || running_owned(&moto));
    assert_eq!(job["progress"], 1.0, "{job}");
    let events = tern_json(&["status", "--json", "--server", &server], TOKEN);
    let log = common::events_of(&server, TOKEN, "cold");
    for (kind, text) in [
        ("probe", "no step time measured"),
        ("basis", "none → measured (0.2500 s/step)"),
        ("probed", "probe ended (measured)"),
    ] {
        assert!(
            log.iter().any(|(k, m)| k == kind && m.contains(text)),
            "no {kind} event with {text:?}: {log:#?}\n{events}"
        );
    }
}
