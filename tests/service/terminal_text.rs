//! A worker's words reach an operator's terminal only as text: a failure reason full of escape
//! sequences (a window title, the clipboard, a clear screen, a bidi override), posted with the
//! job's agent token, is shown escaped by `tern status` and in `tern cost-report`'s CSV, byte for byte, and
//! kept exact in their JSON.

use std::time::{Duration, Instant};

use crate::common::{controller_command, free_port, tern_ok, wait_for};
use crate::controller_tokens::call;

const ADMIN: &str = "terminal-admin-token";

/// A title, the clipboard (OSC 52), a clear screen, a one-byte CSI and a right-to-left override.
const HOSTILE: &str =
    "\u{1b}]0;owned\u{7}\u{1b}]52;c;ZWNobyBoaQ==\u{7}\u{1b}[2J\u{9b}31m\u{202e}gnp.exe";

/// `tern ARGS --server SERVER` as the admin; it must succeed. Its stdout, byte for byte.
fn admin_at(server: &str, args: &[&str]) -> Vec<u8> {
    let args: Vec<&str> = args.iter().copied().chain(["--server", server]).collect();
    tern_ok(&args, ADMIN)
}

/// No byte that would act on a terminal: ESC, BEL, the C1 CSI, U+202E.
fn inert(bytes: &[u8]) -> Result<(), String> {
    let text = String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string())?;
    match text
        .chars()
        .find(|c| matches!(c, '\u{1b}' | '\u{7}' | '\u{9b}' | '\u{202e}'))
    {
        Some(c) => Err(format!("{c:?} in {text:?}")),
        None => Ok(()),
    }
}

#[test]
fn a_hostile_failure_reason_is_printed_escaped_and_kept_exact_in_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = controller_command(&dir.path().join("state.db"), ADMIN)
        .args(["--provider", "sim", "--speed", "600", "--listen", &addr])
        .spawn()
        .expect("controller");
    wait_for(&addr);
    let server = format!("http://{addr}");
    let spec = tern_cloud::testkit::spec("hostile").team("ml").text();
    assert_eq!(call(&addr, "POST", "/v1/jobs", ADMIN, &spec).0, 201);

    // The job's agent starts on its instance and reports a failure in hostile words.
    let t0 = Instant::now();
    let instance = loop {
        let (_, job) = call(&addr, "GET", "/v1/jobs/hostile", ADMIN, "");
        if let Some(id) = job["instance_ids"][0].as_str() {
            break id.to_string();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "never launched: {job}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let agent = tern::store::Store::open(&dir.path().join("state.db"))
        .expect("store")
        .agent_token("hostile");
    let start = serde_json::json!({ "instance": instance }).to_string();
    let (status, started) = call(&addr, "POST", "/v1/jobs/hostile/start", &agent, &start);
    assert_eq!(status, 200, "{started}");
    let report = serde_json::json!({
        "done_samples": 1.0, "checkpoint_samples": 0.0, "stopped": true,
        "incarnation": started["incarnation"], "instance": instance, "failure": HOSTILE,
    });
    let (status, body) = call(
        &addr,
        "POST",
        "/v1/jobs/hostile/progress",
        &agent,
        &report.to_string(),
    );
    assert_eq!(status, 200, "{body}");
    let t0 = Instant::now();
    while call(&addr, "GET", "/v1/jobs/hostile", ADMIN, "").1["state"] != "failed" {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the job did not fail"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // For people: every byte inert, the words still there, escaped.
    let table = admin_at(&server, &["status"]);
    inert(&table).unwrap();
    let shown = String::from_utf8_lossy(&table);
    assert!(shown.contains("\\x1b]0;owned\\x07"), "{shown}");
    assert!(shown.contains("\\u{202e}gnp.exe"), "{shown}");
    inert(&admin_at(&server, &["status", "hostile"])).unwrap();
    let report = admin_at(&server, &["cost-report", "--by", "job", "--format", "csv"]);
    inert(&report).unwrap();
    let report = String::from_utf8_lossy(&report);
    assert!(report.contains("\\x1b[2J"), "{report}");
    // For scripts: the exact text.
    let json = admin_at(&server, &["status", "hostile", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json).expect("json");
    let reason = v["jobs"][0]["reason"].as_str().expect("reason");
    assert!(reason.ends_with(HOSTILE), "{reason:?}");
    let _ = child.kill();
    let _ = child.wait();
}
