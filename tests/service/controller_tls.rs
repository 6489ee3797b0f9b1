//! Security of `tern controller` and `tern sim serve` as processes: the API over TLS with a
//! private CA (and what is refused: plain HTTP, an unknown CA), tokens from files, tokens
//! refused at start, and secrets kept out of `--help`.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::common;

use common::{Reaper, free_port, quiet, tern, wait_for};

const TOKEN: &str = "tls-test-token";

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// `tern controller` on the in-process simulated cloud; `extra` adds token and TLS flags.
fn controller(state: &Path, addr: &str, extra: &[&str]) -> std::process::Child {
    let mut c = tern();
    c.args([
        "controller",
        "--provider",
        "sim",
        "--speed",
        "600",
        "--listen",
        addr,
    ])
    .arg("--state")
    .arg(state)
    .args(extra);
    quiet(&mut c).spawn().expect("controller")
}

/// Run `tern ARGS` to its end.
fn run(args: &[&str]) -> Output {
    tern().args(args).output().expect("tern")
}

/// A command that must fail at start, before it listens: its error text.
fn refused(args: &[&str]) -> String {
    let t0 = Instant::now();
    let out = run(args);
    assert!(!out.status.success(), "{args:?} started");
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "{args:?} took long to refuse"
    );
    stderr(&out)
}

#[test]
fn the_api_is_served_over_tls_to_clients_that_trust_its_ca() {
    let dir = tempfile::tempdir().expect("dir");
    let certs = tern::test_certs::write_test_certs(dir.path()).expect("certs");
    let other = tempfile::tempdir().expect("dir");
    let stranger = tern::test_certs::write_test_certs(other.path()).expect("certs");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token file");
    let addr = format!("127.0.0.1:{}", free_port());
    let (cert, key, tf) = (
        certs.cert.to_str().expect("path"),
        certs.key.to_str().expect("path"),
        token_file.to_str().expect("path"),
    );
    let _reaper = Reaper(vec![controller(
        &dir.path().join("state.db"),
        &addr,
        &["--tls-cert", cert, "--tls-key", key, "--token-file", tf],
    )]);
    wait_for(&addr);
    let https = format!("https://{addr}");
    let job = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/jobs/resnet50-imagenet.toml"
    );
    let ca = certs.ca.to_str().expect("path");

    // The CA by flag, the token from a file: submitted and listed over TLS.
    let out = run(&[
        "submit",
        job,
        "--server",
        &https,
        "--ca",
        ca,
        "--token-file",
        tf,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = tern()
        .args(["status", "--json", "--server", &https])
        .env("TERN_CA", ca)
        .env("TERN_TOKEN", TOKEN)
        .output()
        .expect("status");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("resnet50"));
    let out = run(&[
        "cancel",
        "resnet50-imagenet",
        "--server",
        &https,
        "--ca",
        ca,
        "--token",
        TOKEN,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));

    // Refused: a client that does not trust the CA, or trusts another one.
    for extra in [vec![], vec!["--ca", stranger.ca.to_str().expect("path")]] {
        let mut args = vec!["status", "--server", &https, "--token", TOKEN];
        args.extend(extra);
        let out = run(&args);
        assert!(!out.status.success(), "{args:?} trusted an unknown CA");
        let text = stderr(&out).to_lowercase();
        assert!(
            text.contains("certificate") || text.contains("issuer"),
            "{text}"
        );
    }
    // Refused: plain HTTP to the TLS port gets no answer.
    let out = run(&[
        "status",
        "--server",
        &format!("http://{addr}"),
        "--token",
        TOKEN,
    ]);
    assert!(!out.status.success(), "plain HTTP was answered");
    // A CA file that is not a certificate is named in the error.
    let out = run(&["status", "--server", &https, "--token", TOKEN, "--ca", tf]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains(tf), "{}", stderr(&out));
}

#[test]
fn bad_tokens_and_tls_files_are_refused_at_start() {
    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join("state.db");
    let state = state.to_str().expect("path");
    let blank = dir.path().join("blank");
    std::fs::write(&blank, " \n").expect("write");
    let blank = blank.to_str().expect("path");
    let controller_with = |extra: &[&str]| {
        let mut args = vec!["controller", "--provider", "sim", "--state", state];
        args.extend_from_slice(extra);
        refused(&args)
    };
    for bad in ["", "   ", "\t"] {
        let text = controller_with(&["--token", bad]);
        assert!(text.contains("--token"), "{bad:?}: {text}");
    }
    assert!(controller_with(&["--token-file", blank]).contains("blank"));
    let text = controller_with(&[]);
    assert!(text.contains("--token-file"), "{text}");
    let text = controller_with(&["--token", TOKEN, "--token-file", blank]);
    assert!(text.contains("not both"), "{text}");
    // TLS: the key without the certificate, and a certificate file that is not one.
    let text = controller_with(&["--token", TOKEN, "--tls-key", "k.pem"]);
    assert!(text.contains("--tls-cert"), "{text}");
    let text = controller_with(&["--token", TOKEN, "--tls-cert", blank, "--tls-key", blank]);
    assert!(text.contains("blank"), "{text}");
    // Nothing was started: no state file was created.
    assert!(!std::path::Path::new(state).exists());
}

#[test]
fn help_does_not_show_the_state_url_or_tokens() {
    let out = tern()
        .args(["controller", "--help"])
        .env("TERN_STATE", "postgres://tern:hunter2@db.internal/tern")
        .env("TERN_TOKEN", "s3cret-api-token")
        .env("TERN_SIM_TOKEN", "s3cret-sim-token")
        .output()
        .expect("help");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("TERN_STATE"), "{text}");
    for secret in ["hunter2", "s3cret-api-token", "s3cret-sim-token"] {
        assert!(!text.contains(secret), "--help shows {secret}:\n{text}");
    }
}

#[test]
fn sim_serve_takes_a_token() {
    let dir = tempfile::tempdir().expect("dir");
    let token_file = dir.path().join("sim-token");
    std::fs::write(&token_file, "sim-s3cret\n").expect("write");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut sim = tern();
    sim.args([
        "sim",
        "serve",
        "--listen",
        &addr,
        "--speed",
        "600",
        "--token-file",
    ])
    .arg(&token_file);
    let sim = quiet(&mut sim).spawn().expect("sim serve");
    let _reaper = Reaper(vec![sim]);
    wait_for(&addr);
    let url = format!("http://{addr}");
    let report = ["sim", "report", "--endpoint", &url, "--json"];
    let out = run(&report);
    assert!(!out.status.success(), "a report without the token");
    assert!(stderr(&out).contains("401"), "{}", stderr(&out));
    let out = tern()
        .args(report)
        .env("TERN_SIM_TOKEN", "sim-s3cret")
        .output()
        .expect("report");
    assert!(out.status.success(), "{}", stderr(&out));

    // A controller on it needs the token too; without it, it stops at start naming the 401.
    let state = dir.path().join("state.db");
    let out = tern()
        .args(["controller", "--sim-endpoint", &url, "--token", TOKEN])
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .arg("--state")
        .arg(&state)
        .output()
        .expect("controller");
    assert!(!out.status.success());
    assert!(stderr(&out).contains("401"), "{}", stderr(&out));

    // Open to the network only with a token.
    let text = refused(&["sim", "serve", "--listen", "0.0.0.0:0"]);
    assert!(text.contains("--token"), "{text}");
}

#[test]
fn every_client_of_the_controller_takes_a_ca_and_a_token_file() {
    for cmd in [
        &["submit"][..],
        &["status"],
        &["cancel"],
        &["agent"],
        &["sim", "report"],
    ] {
        let out = tern().args(cmd).arg("--help").output().expect("help");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("--ca <FILE>"), "{cmd:?}:\n{text}");
        if cmd != ["sim", "report"] {
            assert!(text.contains("--token-file <FILE>"), "{cmd:?}:\n{text}");
        }
    }
}
