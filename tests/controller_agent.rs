//! `tern agent` against a running controller and a fake AWS instance-metadata server: it
//! reports progress, sees the spot notice, runs the checkpoint command, reports the
//! checkpoint and exits.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

mod common;

use common::{controller_command, free_port, wait_for};

const TOKEN: &str = "agent-test-token";

/// IMDSv2: PUT /latest/api/token gives a token; instance-action is 404 for the first polls.
fn fake_metadata(quiet_polls: u32) -> (String, Arc<AtomicU32>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let polls = Arc::new(AtomicU32::new(0));
    let seen = polls.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut line = String::new();
            let mut r = BufReader::new(s.try_clone().expect("clone"));
            if r.read_line(&mut line).is_err() {
                continue;
            }
            let mut h = String::new();
            while r.read_line(&mut h).is_ok_and(|n| n > 2) {
                h.clear();
            }
            let (code, body) = if line.starts_with("PUT /latest/api/token") {
                (200, "tok".to_string())
            } else if line.contains("/spot/instance-action") {
                if seen.fetch_add(1, Ordering::SeqCst) < quiet_polls {
                    (404, String::new())
                } else {
                    (
                        200,
                        r#"{"action":"terminate","time":"2026-11-23T00:02:00Z"}"#.into(),
                    )
                }
            } else {
                (404, String::new())
            };
            let _ = write!(
                s,
                "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, polls)
}

fn get(addr: &str, path: &str) -> String {
    use std::io::Read;
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    raw.split_once("\r\n\r\n").expect("response").1.to_string()
}

#[test]
fn agent_reports_progress_and_checkpoints_on_a_spot_notice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut controller = controller_command(&dir.path().join("state.db"), TOKEN)
        .args(["--no-simulated-workers", "--listen", &addr])
        .spawn()
        .expect("controller");
    wait_for(&addr);
    let server = format!("http://{addr}");
    let job = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/jobs/resnet50-imagenet.toml"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["submit", job, "--server", &server])
        .env("TERN_TOKEN", TOKEN)
        .output()
        .expect("submit");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let progress = dir.path().join("progress.json");
    std::fs::write(
        &progress,
        r#"{"samples": 5000, "checkpoint_samples": 4000}"#,
    )
    .expect("write");
    let marker = dir.path().join("checkpointed");
    // The checkpoint command also advances the file, as a real script's save would.
    let checkpoint = format!(
        "echo done > {m} && echo '{{\"samples\": 6000, \"checkpoint_samples\": 6000}}' > {p}",
        m = marker.display(),
        p = progress.display()
    );
    let (metadata, polls) = fake_metadata(3);
    let agent = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["agent", "--job", "resnet50-imagenet", "--server", &server])
        .args([
            "--notice",
            "aws",
            "--metadata-url",
            &metadata,
            "--interval",
            "0.2",
        ])
        .arg("--progress-file")
        .arg(&progress)
        .args(["--checkpoint-command", &checkpoint])
        .env("TERN_TOKEN", TOKEN)
        .output()
        .expect("agent");
    let _ = controller.kill();
    let _ = controller.wait();
    assert!(
        agent.status.success(),
        "agent failed: {}",
        String::from_utf8_lossy(&agent.stderr)
    );
    assert!(
        polls.load(Ordering::SeqCst) >= 4,
        "the agent polled the metadata"
    );
    assert!(marker.exists(), "the checkpoint command ran");
    let stderr = String::from_utf8_lossy(&agent.stderr);
    assert!(stderr.contains("interruption notice"), "{stderr}");
    // Relaunch the controller on the same state to read what the agent reported.
    let addr2 = format!("127.0.0.1:{}", free_port());
    let mut again = controller_command(&dir.path().join("state.db"), TOKEN)
        .args(["--no-simulated-workers", "--listen", &addr2])
        .spawn()
        .expect("controller");
    wait_for(&addr2);
    let body = get(&addr2, "/v1/jobs/resnet50-imagenet");
    let _ = again.kill();
    let _ = again.wait();
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["done_samples"], 6000.0, "{v}");
    assert_eq!(v["checkpoint_samples"], 6000.0, "{v}");
}
