//! `tern token create|list|revoke` and `tern audit` against a `tern controller` process.

use std::process::{Child, Output};

use crate::common::{controller_command, free_port, wait_for};
use crate::common::{last_json, tern_at};

const ADMIN: &str = "s3cret-admin-token";

struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tern ARGS --server URL` with `token` in `TERN_TOKEN`.
fn ok(o: &Output) -> &Output {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o
}

#[test]
fn token_create_and_revoke_are_audited_and_a_team_token_works_until_revoked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let addr = format!("127.0.0.1:{}", free_port());
    let child = controller_command(&dir.path().join("state.db"), ADMIN)
        .args(["--provider", "sim", "--listen", &addr])
        .spawn()
        .expect("spawn controller");
    let _c = Controller(child);
    wait_for(&addr);
    let url = format!("http://{addr}");

    let args = [
        "token", "create", "--role", "team", "--team", "vision", "--json",
    ];
    let made = last_json(ok(&tern_at(&url, ADMIN, &args)));
    assert_eq!(
        (made["role"].as_str(), made["team"].as_str()),
        (Some("team"), Some("vision"))
    );
    let (id, secret) = (
        made["id"].as_str().expect("id"),
        made["token"].as_str().expect("token"),
    );
    assert!(secret.starts_with("tern_"), "{made}");
    let status = last_json(ok(&tern_at(&url, secret, &["status", "--json"])));
    assert_eq!(status["jobs"], serde_json::json!([]));

    // The scope is checked before anything is sent; a team token cannot make tokens.
    for (args, says) in [
        (&["token", "create", "--role", "team"][..], "needs --team"),
        (&["token", "create", "--role", "agent"], "needs --job"),
        (
            &["token", "create", "--role", "admin", "--job", "x"],
            "neither",
        ),
    ] {
        let o = tern_at(&url, ADMIN, args);
        assert!(!o.status.success(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(says),
            "{args:?}"
        );
    }
    let o = tern_at(&url, secret, &["token", "create", "--role", "admin"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("403"), "{o:?}");

    let revoked = last_json(ok(&tern_at(
        &url,
        ADMIN,
        &["token", "revoke", id, "--json"],
    )));
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    let o = tern_at(&url, secret, &["status"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("401"), "{o:?}");

    let log = last_json(ok(&tern_at(
        &url,
        ADMIN,
        &["audit", "--since", "1h", "--json"],
    )));
    let rows = log["audit"].as_array().expect("rows");
    let has = |method: &str, path: &str, status: u64| {
        rows.iter()
            .any(|r| r["method"] == method && r["path"] == path && r["status"] == status)
    };
    assert!(has("POST", "/v1/tokens", 201), "{log}");
    assert!(has("POST", "/v1/tokens", 403), "{log}");
    assert!(has("DELETE", &format!("/v1/tokens/{id}"), 200), "{log}");
    assert!(has("GET", "/v1/jobs", 401), "{log}");
}
