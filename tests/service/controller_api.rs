//! `tern controller` as a process: the HTTP API (auth, validation, 404s), /metrics, /healthz,
//! and `tern submit/status/cancel` against it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::common;

use common::{controller_command, free_port, wait_for};

const TOKEN: &str = "s3cret-test-token";

struct Controller {
    child: Child,
    url: String,
    addr: String,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http(addr: &str, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: {}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    let (head, rest) = raw.split_once("\r\n\r\n").expect("http response");
    let status = head
        .split_whitespace()
        .nth(1)
        .expect("status")
        .parse()
        .expect("code");
    (status, rest.to_string())
}

fn start(state: &std::path::Path) -> Controller {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let child = controller_command(state, TOKEN)
        .args(["--provider", "sim", "--speed", "600", "--listen", &addr])
        .spawn()
        .expect("spawn controller");
    let c = Controller {
        child,
        url: format!("http://{addr}"),
        addr,
    };
    wait_for(&c.addr);
    c
}

#[test]
fn api_rejects_bad_requests_without_writing_and_serves_jobs_and_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = start(&dir.path().join("state.db"));
    assert_eq!(http(&c.addr, "GET", "/healthz", None, "").0, 200);

    // Auth: missing and wrong tokens.
    assert_eq!(http(&c.addr, "GET", "/v1/jobs", None, "").0, 401);
    assert_eq!(http(&c.addr, "GET", "/v1/jobs", Some("wrong"), "").0, 401);
    let spec = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/jobs/resnet50-imagenet.toml"
    ))
    .expect("example");
    assert_eq!(
        http(&c.addr, "POST", "/v1/jobs", Some("wrong"), &spec).0,
        401
    );

    // Malformed spec: 400 naming the field; nothing stored.
    let bad = spec.replace(
        "workers = { min = 4, max = 32 }",
        "workers = { min = 8, max = 2 }",
    );
    let (code, body) = http(&c.addr, "POST", "/v1/jobs", Some(TOKEN), &bad);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("workers"), "{body}");
    let (code, body) = http(&c.addr, "GET", "/v1/jobs", Some(TOKEN), "");
    assert_eq!((code, body.trim()), (200, "[]"));

    // Unknown job.
    assert_eq!(
        http(&c.addr, "GET", "/v1/jobs/nope", Some(TOKEN), "").0,
        404
    );
    assert_eq!(
        http(&c.addr, "DELETE", "/v1/jobs/nope", Some(TOKEN), "").0,
        404
    );

    // Submit through the CLI, then a duplicate is a conflict.
    let job = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/jobs/resnet50-imagenet.toml"
    );
    let out = common::tern_at(&c.url, TOKEN, &["submit", job]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(http(&c.addr, "POST", "/v1/jobs", Some(TOKEN), &spec).0, 409);

    // The controller places it: instances appear (virtual time runs 600× faster).
    let t0 = Instant::now();
    let status = loop {
        let out = common::tern_at(&c.url, TOKEN, &["status", "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let v: serde_json::Value =
            serde_json::from_str(text.lines().last().expect("line")).expect("json");
        if v["jobs"][0]["instances"].as_u64().unwrap_or(0) > 0 {
            break v;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "never placed: {v}");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(status["jobs"][0]["name"], "resnet50-imagenet");
    assert_eq!(status["jobs"][0]["state"], "running");

    let (code, metrics) = http(&c.addr, "GET", "/metrics", None, "");
    assert_eq!(code, 200);
    for family in [
        "tern_jobs{state=\"running\"} 1",
        "tern_instances{capacity=\"spot\"}",
        "tern_dollars_per_hour",
        "tern_savings_dollars",
        "tern_reconcile_seconds_bucket",
    ] {
        assert!(metrics.contains(family), "missing {family} in\n{metrics}");
    }
    // The open page names no job and no team: billed dollars are there for the fleet only.
    assert!(
        !metrics.contains("resnet50-imagenet") && !metrics.contains("vision"),
        "{metrics}"
    );
    assert!(
        metrics.contains("# TYPE tern_fleet_cost_dollars counter"),
        "{metrics}"
    );
    // Per team and job, behind the token: a counter growing from zero.
    let (code, _) = http(&c.addr, "GET", "/v1/metrics", None, "");
    assert_eq!(code, 401);
    let (code, private) = http(&c.addr, "GET", "/v1/metrics", Some(TOKEN), "");
    assert_eq!(code, 200, "{private}");
    let billed = private
        .lines()
        .find(|l| {
            l.starts_with("tern_cost_dollars_total{")
                && l.contains("job=\"resnet50-imagenet\"")
                && l.contains("team=\"vision\"")
        })
        .unwrap_or_else(|| panic!("no cost counter in\n{private}"));
    let dollars: f64 = billed
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("a value");
    assert!(dollars > 0.0, "{billed}");
    assert!(
        private.contains("# TYPE tern_cost_dollars counter"),
        "{private}"
    );

    // The cost report through the API: bearer auth like every /v1 route.
    let (code, _) = http(&c.addr, "GET", "/v1/costs", None, "");
    assert_eq!(code, 401);
    let (code, costs) = http(&c.addr, "GET", "/v1/costs?by=team", Some(TOKEN), "");
    assert_eq!(code, 200, "{costs}");
    let costs: serde_json::Value = serde_json::from_str(&costs).expect("json");
    assert_eq!(costs["by"], "team");
    assert_eq!(costs["rows"][0]["key"], "vision", "{costs}");
    let (code, body) = http(&c.addr, "GET", "/v1/costs?by=week", Some(TOKEN), "");
    assert_eq!(code, 400, "{body}");

    let (code, events) = http(
        &c.addr,
        "GET",
        "/v1/events?job=resnet50-imagenet",
        Some(TOKEN),
        "",
    );
    assert_eq!(code, 200);
    assert!(events.contains("\"kind\":\"submit\""), "{events}");

    let out = common::tern_at(&c.url, TOKEN, &["cancel", "resnet50-imagenet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t0 = Instant::now();
    loop {
        let (_, body) = http(
            &c.addr,
            "GET",
            "/v1/jobs/resnet50-imagenet",
            Some(TOKEN),
            "",
        );
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        if v["state"] == "cancelled" && v["instances"] == 0 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "not released: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Specs the controller cannot honour get 422 (or 400 when malformed) with a JSON error, and
/// nothing is stored: a profile path on the controller's disk (never read, nothing echoed),
/// an unknown accelerator, a deadline in the past; an overlong name is malformed.
#[test]
fn api_refuses_nonsense_specs_and_submit_inlines_profiles() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = start(&dir.path().join("state.db"));
    let base = "name = \"p\"\nteam = \"t\"\naccelerators = [\"T4\"]\nworkers = 1\nlocal_batch = 64\n\
                [work]\nsamples = 1_000_000\n";
    let secret = dir.path().join("secret");
    std::fs::create_dir(&secret).expect("dir");
    std::fs::write(secret.join("placements.csv"), "root:x:0:0:leaked\n").expect("write");
    let cases = [
        (
            format!(
                "{base}[profile]\npath = \"{}\"\naccelerator = \"T4\"\n",
                secret.display()
            ),
            422,
            "profile.path",
        ),
        (
            base.replace("[\"T4\"]", "[\"T4\", \"Z9000\"]"),
            422,
            "unknown accelerator \"Z9000\"",
        ),
        (
            format!("deadline = \"2020-01-01T00:00:00Z\"\n{base}"),
            422,
            "in the past",
        ),
        (
            base.replace("\"p\"", &format!("\"{}\"", "n".repeat(100_000))),
            400,
            "1–63 characters",
        ),
    ];
    for (spec, want_code, want) in &cases {
        let (code, body) = http(&c.addr, "POST", "/v1/jobs", Some(TOKEN), spec);
        assert_eq!(code, *want_code, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("JSON error body");
        let error = v["error"].as_str().expect("error field");
        assert!(error.contains(want), "{error}");
        assert!(
            !body.contains("leaked") && !body.contains("root:"),
            "{body}"
        );
        assert!(body.len() < 2000, "{} bytes", body.len());
    }
    let (code, body) = http(&c.addr, "GET", "/v1/jobs", Some(TOKEN), "");
    assert_eq!((code, body.trim()), (200, "[]"));

    // `tern submit` reads a relative profile path from the spec's folder (not the controller's
    // working directory) and sends its content.
    let jobs = dir.path().join("jobs");
    std::fs::create_dir_all(jobs.join("prof")).expect("dir");
    let profiles = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/profiles/pollux-t4/imagenet"
    );
    for f in ["placements.csv", "scalability.csv"] {
        std::fs::copy(format!("{profiles}/{f}"), jobs.join("prof").join(f)).expect("copy");
    }
    let spec = jobs.join("p.toml");
    std::fs::write(
        &spec,
        base.replace("local_batch = 64\n", "")
            + "[profile]\npath = \"prof\"\naccelerator = \"T4\"\n",
    )
    .expect("write");
    let out = common::tern_at(&c.url, TOKEN, &["submit", &spec.display().to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, body) = http(&c.addr, "GET", "/v1/jobs/p", Some(TOKEN), "");
    assert_eq!(code, 200, "{body}");
}
