//! Scoped tokens and the audit log through the real API of a `tern controller` process: three
//! teams, each with its own team token, an agent token per job (created and derived), and
//! every refusal found again in `GET /v1/audit`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Child;

use serde_json::Value;

use crate::common::{controller_command, free_port, wait_for};

const ADMIN: &str = "s3cret-admin-token";

struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP call; the status and the body as JSON (`null` when it is not).
pub(crate) fn call(addr: &str, method: &str, path: &str, token: &str, body: &str) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: {}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    let (head, rest) = raw.split_once("\r\n\r\n").expect("http response");
    let status = head.split_whitespace().nth(1).expect("status");
    // Bodies may come chunked: the JSON is the line that parses.
    let json = rest
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    (status.parse().expect("code"), json)
}

fn spec(name: &str, team: &str) -> String {
    tern_cloud::testkit::spec(name).team(team).text()
}

/// A token made through `POST /v1/tokens` with the admin token; its secret.
fn token(addr: &str, request: Value) -> String {
    let (status, made) = call(addr, "POST", "/v1/tokens", ADMIN, &request.to_string());
    assert_eq!(status, 201, "{made}");
    made["token"].as_str().expect("secret").to_string()
}

/// Whether the audit log holds a row of `status` for `method path`.
fn audited(rows: &Value, method: &str, path: &str, status: u16) -> bool {
    rows.as_array()
        .expect("rows")
        .iter()
        .any(|r| r["method"] == method && r["path"] == path && r["status"] == u64::from(status))
}

#[test]
fn a_token_can_only_act_within_its_scope_and_every_refusal_is_audited() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state.db");
    let addr = format!("127.0.0.1:{}", free_port());
    let child = controller_command(&state, ADMIN)
        .args(["--provider", "sim", "--speed", "600", "--listen", &addr])
        .spawn()
        .expect("spawn controller");
    let _c = Controller(child);
    wait_for(&addr);

    let teams: Vec<String> = ["vision", "nlp", "speech"]
        .iter()
        .map(|t| token(&addr, serde_json::json!({ "role": "team", "team": t })))
        .collect();
    for (t, team) in teams.iter().zip(["vision", "nlp", "speech"]) {
        let (status, body) = call(
            &addr,
            "POST",
            "/v1/jobs",
            t,
            &spec(&format!("{team}-1"), team),
        );
        assert_eq!(status, 201, "{body}");
    }
    let vision = &teams[0];

    // A team token sees, cancels and submits only its own team's jobs.
    let (status, listed) = call(&addr, "GET", "/v1/jobs", vision, "");
    assert_eq!(status, 200);
    let names: Vec<&str> = listed
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["name"].as_str())
        .collect();
    assert_eq!(names, ["vision-1"]);
    for (method, path) in [
        ("GET", "/v1/jobs/nlp-1"),
        ("GET", "/v1/jobs/nlp-1/spec"),
        ("DELETE", "/v1/jobs/nlp-1"),
        ("POST", "/v1/jobs/nlp-1/progress"),
        ("GET", "/v1/costs?team=nlp"),
        ("POST", "/v1/tokens"),
    ] {
        let (status, body) = call(&addr, method, path, vision, "{}");
        assert_eq!(status, 403, "{method} {path}: {body}");
        assert!(
            body["error"].as_str().is_some_and(|e| e.contains("needs")),
            "{body}"
        );
    }
    let (status, body) = call(&addr, "POST", "/v1/jobs", vision, &spec("sneaky", "nlp"));
    assert_eq!(status, 403, "{body}");
    let (_, events) = call(&addr, "GET", "/v1/events", vision, "");
    assert!(
        events
            .as_array()
            .expect("events")
            .iter()
            .all(|e| e["job"] == "vision-1"),
        "{events}"
    );
    assert_eq!(call(&addr, "GET", "/v1/offers", vision, "").0, 200);

    // An agent token reports only for its own job: one an admin created, one derived.
    let created = token(
        &addr,
        serde_json::json!({ "role": "agent", "job": "nlp-1" }),
    );
    let derived = tern::store::Store::open(&state)
        .expect("store")
        .agent_token("nlp-1");
    let report = r#"{"done_samples": 1, "checkpoint_samples": 0}"#;
    for agent in [&created, &derived] {
        let (status, body) = call(&addr, "POST", "/v1/jobs/nlp-1/progress", agent, report);
        assert_eq!(status, 409, "past auth, fenced: no workers started: {body}");
        for (method, path) in [
            ("POST", "/v1/jobs/vision-1/progress"),
            ("POST", "/v1/jobs/vision-1/start"),
            ("DELETE", "/v1/jobs/nlp-1"),
            ("GET", "/v1/jobs"),
            ("GET", "/v1/events"),
        ] {
            assert_eq!(
                call(&addr, method, path, agent, report).0,
                403,
                "{method} {path}"
            );
        }
    }

    // A revoked token and a made-up one are unknown: 401.
    let (_, all) = call(&addr, "GET", "/v1/tokens", ADMIN, "");
    let speech_id = all
        .as_array()
        .expect("tokens")
        .iter()
        .find(|t| t["team"] == "speech")
        .expect("speech")["id"]
        .as_str()
        .expect("id")
        .to_string();
    assert_eq!(
        call(
            &addr,
            "DELETE",
            &format!("/v1/tokens/{speech_id}"),
            ADMIN,
            ""
        )
        .0,
        200
    );
    assert_eq!(
        call(&addr, "DELETE", "/v1/jobs/speech-1", &teams[2], "").0,
        401
    );
    assert_eq!(
        call(&addr, "DELETE", "/v1/jobs/speech-1", "tern_made-up", "").0,
        401
    );

    // Every refusal is in the audit log, with who made it.
    let (status, rows) = call(&addr, "GET", "/v1/audit", ADMIN, "");
    assert_eq!(status, 200);
    assert!(audited(&rows, "DELETE", "/v1/jobs/nlp-1", 403), "{rows}");
    assert!(audited(&rows, "GET", "/v1/jobs/nlp-1", 403), "{rows}");
    assert!(audited(&rows, "POST", "/v1/jobs", 403), "{rows}");
    assert!(
        audited(&rows, "POST", "/v1/jobs/vision-1/progress", 403),
        "{rows}"
    );
    assert!(audited(&rows, "DELETE", "/v1/jobs/speech-1", 401), "{rows}");
    assert!(
        audited(&rows, "POST", "/v1/jobs", 201),
        "accepted submits too: {rows}"
    );
    let rows = rows.as_array().expect("rows");
    assert!(
        rows.iter()
            .any(|r| r["token"] == "agent:nlp-1" && r["status"] == 403)
    );
    assert!(
        rows.iter()
            .any(|r| r["token"] == speech_id.as_str() && r["status"] == 201)
    );
    let sneaky = rows
        .iter()
        .find(|r| r["job"] == "sneaky")
        .expect("the refused submit");
    assert_eq!(
        (sneaky["role"].as_str(), sneaky["status"].as_u64()),
        (Some("team"), Some(403))
    );

    // A team token reads its own team's rows only.
    let (_, mine) = call(&addr, "GET", "/v1/audit", vision, "");
    assert!(
        mine.as_array()
            .expect("rows")
            .iter()
            .all(|r| r["team"] == "vision"),
        "{mine}"
    );
    assert!(!mine.as_array().expect("rows").is_empty());
    assert_eq!(call(&addr, "GET", "/v1/audit?team=nlp", vision, "").0, 403);
}
