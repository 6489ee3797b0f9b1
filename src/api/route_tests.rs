//! The API's metrics and decisions routes, on the same running service as `api::tests`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

/// Every `name="value"` label of every sample line of an exposition page.
fn labels_of(page: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for line in page
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let Some((family, rest)) = line.split_once('{') else {
            continue;
        };
        let (set, _) = rest.rsplit_once('}').expect("a closed label set");
        let mut rest = set;
        while let Some((name, tail)) = rest.split_once("=\"") {
            let end = tail.find('"').expect("a closed label value");
            let name = name.trim_start_matches(',').to_string();
            out.push((family.to_string(), name, tail[..end].to_string()));
            rest = &tail[end + 1..];
        }
    }
    out
}

/// The open `/metrics` names no job and no team, whatever family it grows; the per-team and
/// per-job series are on `/v1/metrics` behind a token, a team token seeing its own team's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_open_metrics_name_no_job_or_team_and_the_per_job_series_need_a_token() {
    let sim = idle_sim();
    let (c, store, running) = serve_on(sim.clone(), Arc::new(SimTime(sim.clone()))).await;
    let jobs = [("secret-alpha", "crimson"), ("secret-beta", "azure")];
    for (job, team) in jobs {
        let spec = tern_cloud::testkit::spec(job)
            .team(team)
            .deadline(Some("400h"))
            .text();
        c.submit(&spec).await.expect("submit");
    }
    let http = crate::http::client().expect("http");
    let page = |path: &'static str, token: Option<String>| {
        let (http, base) = (http.clone(), c.base());
        async move {
            let mut r = http.get(format!("{base}{path}"));
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            let r = r.send().await.expect("send");
            (r.status().as_u16(), r.text().await.expect("body"))
        }
    };
    // Both jobs run and have been billed for a while.
    let until = Instant::now() + Duration::from_secs(20);
    let private = loop {
        sim.advance(Duration::from_secs(60));
        tokio::time::sleep(Duration::from_millis(30)).await;
        let (code, text) = page("/v1/metrics", Some("t0k".into())).await;
        assert_eq!(code, 200, "{text}");
        if jobs
            .iter()
            .all(|(j, _)| text.contains(&format!("job=\"{j}\"")))
        {
            break text;
        }
        assert!(Instant::now() < until, "never billed:\n{text}");
    };
    for (job, team) in jobs {
        assert!(
            private
                .lines()
                .any(|l| l.starts_with("tern_cost_dollars_total{")
                    && l.contains(&format!("team=\"{team}\",job=\"{job}\""))),
            "{private}"
        );
    }

    // The open page: every label of every family is one that counts things, and no value
    // (nor anything else on the page) names a job or a team.
    let (code, open) = page("/metrics", None).await;
    assert_eq!(code, 200);
    assert!(open.contains("tern_fleet_cost_dollars_total{"), "{open}");
    let labels = labels_of(&open);
    assert!(labels.len() > 10, "{open}");
    for (family, name, value) in &labels {
        assert!(
            ["state", "capacity", "kind", "le"].contains(&name.as_str()),
            "{family} has a label {name}={value:?}: the open page shows aggregates only"
        );
    }
    for (job, team) in jobs {
        assert!(
            !open.contains(job) && !open.contains(team),
            "{job}/{team} on the open page:\n{open}"
        );
    }

    // The private page: a token, and a team token sees its own team only.
    let (code, body) = page("/v1/metrics", None).await;
    assert_eq!(code, 401, "{body}");
    let crimson = c
        .create_token(&wire::access::TokenRequest {
            role: "team".into(),
            team: Some("crimson".into()),
            job: None,
        })
        .await
        .expect("token");
    let (code, own) = page("/v1/metrics", crimson.token.clone()).await;
    assert_eq!(code, 200, "{own}");
    assert!(own.contains("job=\"secret-alpha\""), "{own}");
    assert!(
        !own.contains("secret-beta") && !own.contains("azure"),
        "another team's series:\n{own}"
    );
    let teams: std::collections::BTreeSet<String> = labels_of(&own)
        .into_iter()
        .filter(|(_, name, _)| name == "team")
        .map(|(_, _, v)| v)
        .collect();
    assert_eq!(teams, ["crimson".to_string()].into());
    // An agent's token is for its own job's routes, not the metrics.
    let agent = store.agent_token("secret-alpha");
    let (code, body) = page("/v1/metrics", Some(agent)).await;
    assert_eq!(code, 403, "{body}");
    tokio::task::spawn_blocking(move || running.stop())
        .await
        .expect("join")
        .expect("stop");
}

/// `GET /v1/jobs/NAME/decisions`: a job that ran shows its plan and launch with the numbers
/// compared, the same timeline `tern explain --state` builds from the store; an unknown job is
/// a 404, and a team token reads its own team's jobs only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_ran_explains_its_plan_and_launch_with_their_numbers() {
    let (c, store, running) = serve(idle_sim()).await;
    c.submit(&spec("a").replace("48h", "400h"))
        .await
        .expect("submit");
    started(&c, "a").await;
    let until = Instant::now() + Duration::from_secs(20);
    let t = loop {
        let t = c.decisions("a").await.expect("decisions");
        let has = |k: &str| t.decisions.iter().any(|d| d.kind == k);
        if has("plan") && has("launch") {
            break t;
        }
        assert!(Instant::now() < until, "no plan and launch yet: {t:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(t.job, "a");
    let plan = t.decisions.iter().find(|d| d.kind == "plan").expect("plan");
    assert!(plan.numbers["expected_cost"] > 0.0, "{plan:?}");
    assert!(plan.numbers["finish_h"] > 0.0, "{plan:?}");
    assert!(plan.reason.starts_with("planner ("), "{plan:?}");
    let launch = t
        .decisions
        .iter()
        .find(|d| d.kind == "launch")
        .expect("launch");
    assert!(launch.numbers["nodes"] >= 1.0, "{launch:?}");
    assert!(launch.numbers["price_per_h"] > 0.0, "{launch:?}");
    assert!(plan.at <= launch.at);
    assert!(t.decisions.iter().all(|d| d.expected_saving.is_none()));
    // The same timeline as the store's, up to the events written since the answer.
    let (s, job) = (store.clone(), "a");
    let now = chrono::Utc::now();
    let direct =
        tokio::task::spawn_blocking(move || crate::controller::explain::load(&s, job, now))
            .await
            .expect("join")
            .expect("load");
    assert_eq!(direct.decisions[..t.decisions.len()], t.decisions[..]);

    let missing = c.decisions("nope").await.expect_err("unknown job");
    assert_eq!(missing.status(), Some(404), "{missing}");
    assert!(
        missing.to_string().contains("unknown job nope"),
        "{missing}"
    );

    let own_team = store.job("a").expect("read").expect("a").spec.team;
    let mine = team_client(&c, &store, &own_team).await;
    assert_eq!(mine.decisions("a").await.expect("its own job").job, "a");
    let other = team_client(&c, &store, "someone-else").await;
    let refused = other.decisions("a").await.expect_err("another team's job");
    assert_eq!(refused.status(), Some(403), "{refused}");
    tokio::task::spawn_blocking(move || running.stop())
        .await
        .expect("join")
        .expect("stop");
}

/// A client holding a new team token of `team`.
async fn team_client(c: &client::Client, store: &Arc<Store>, team: &str) -> client::Client {
    let (s, name) = (store.clone(), team.to_string());
    let t = tokio::task::spawn_blocking(move || {
        s.create_token(crate::store::Role::Team, Some(&name), None, start())
    })
    .await
    .expect("join")
    .expect("token");
    let http = crate::http::client().expect("http");
    client::Client::new(&c.base(), Some(t.secret), http).expect("client")
}

/// A job's `[run]` shows in `GET /v1/jobs/NAME` and the job list: with its env values to an
/// admin and to the job's team, with the names only to the job's agent, never to another team.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_run_shows_its_env_values_to_its_team_and_admins_only() {
    let (c, store, running) = serve(idle_sim()).await;
    let text = tern_cloud::testkit::spec("r")
        .team("crimson")
        .deadline(Some("400h"))
        .section(
            "[run]\ncommand = [\"python\", \"train.py\"]\nenv = { WANDB_API_KEY = \"s3cr3t\" }",
        )
        .text();
    c.submit(&text).await.expect("submit");
    let shown = |s: &wire::JobStatus| {
        let r = s.run.as_ref().expect("run");
        assert_eq!(r.command, ["python", "train.py"]);
        r.env["WANDB_API_KEY"].clone()
    };
    let until = Instant::now() + Duration::from_secs(20);
    while c.job("r").await.is_err() {
        assert!(Instant::now() < until, "never listed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(shown(&c.job("r").await.expect("admin")), "s3cr3t");
    let team = team_client(&c, &store, "crimson").await;
    assert_eq!(shown(&team.job("r").await.expect("team")), "s3cr3t");
    let listed = team.jobs().await.expect("list");
    assert_eq!(shown(&listed[0]), "s3cr3t");
    let http = crate::http::client().expect("http");
    let agent = client::Client::new(&c.base(), Some(store.agent_token("r")), http).expect("client");
    let seen = agent.job("r").await.expect("agent");
    assert_eq!(shown(&seen), tern_cloud::run::REDACTED);
    let other = team_client(&c, &store, "azure").await;
    assert_eq!(
        other.job("r").await.expect_err("other team").status(),
        Some(403)
    );
    tokio::task::spawn_blocking(move || running.stop())
        .await
        .expect("join")
        .expect("stop");
}
