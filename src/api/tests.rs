//! The API against a running service whose cloud is slow: no request waits for a pass.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use tern_cloud::{Cloud, ProviderError, Region};
use tern_sim::cloud::SimConfig;
use tern_sim::{Delayed, SimCloud, Trace};

use super::*;
use crate::controller::service::{Service, ServiceConfig};
use crate::controller::{Controller, ControllerConfig};

pub(super) fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0)
        .single()
        .expect("time")
}

/// Time stands still: the test is about waiting, not about what the passes decide.
struct Fixed;

#[async_trait]
impl Clock for Fixed {
    async fn read(&self) -> Result<DateTime<Utc>, ProviderError> {
        Ok(start())
    }
    fn last(&self) -> DateTime<Utc> {
        start()
    }
}

fn spec(name: &str) -> String {
    tern_cloud::testkit::spec(name).workers("2").text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_answered_while_a_pass_waits_on_the_cloud() {
    // Every cloud call takes a second: a pass takes several.
    let slow = Delayed::new(idle_sim(), Duration::from_secs(1));
    let (c, store, running) = serve(Arc::new(slow)).await;

    // A pass is under way (its first cloud call alone takes a second).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t0 = Instant::now();
    assert_eq!(c.submit(&spec("a")).await.expect("submit"), "a");
    let jobs = c.jobs().await.expect("list");
    assert_eq!(jobs.len(), 1, "a client reads its own write at once");
    assert_eq!(jobs[0].state, "pending");
    // No agent started workers for it: a report is refused at once, and says why.
    let p = report(10.0, 5.0, None, ("i-none", 1));
    let err = c.progress("a", &p).await.expect_err("no workers started");
    assert_eq!(err.status(), Some(409), "{err}");
    assert_eq!(err.action(), Some(wire::Action::Stop), "{err}");
    assert!(err.to_string().contains("never started"), "{err}");
    assert_eq!(c.job("a").await.expect("status").done_samples, 0.0);
    let cancelled = c.cancel("a").await.expect("cancel").expect("a status");
    assert_eq!(cancelled.state, "cancelled");
    let waited = t0.elapsed();
    assert!(
        waited < Duration::from_millis(900),
        "five requests took {waited:?} while the pass waited on the cloud"
    );
    // Durable whether or not a pass has taken it yet.
    let stored = store.job("a").expect("read").expect("stored");
    assert_eq!(stored.state, crate::store::JobState::Cancelled);
    assert_eq!(stored.done_samples, 0.0, "a refused report moved nothing");
    tokio::task::spawn_blocking(move || running.stop())
        .await
        .expect("join")
        .expect("stop");
}

/// One zone of plenty: nothing the passes decide matters to these tests.
fn idle_sim() -> Arc<SimCloud> {
    let zone = Trace {
        source: PathBuf::from("a.json"),
        cloud: Cloud::Aws,
        region: "us-west-2".into(),
        zone: "us-west-2a".into(),
        gap_seconds: 300,
        available: vec![8; 100],
        prices: None,
        spot_price: Some(0.9),
        on_demand_price: Some(3.06),
    };
    Arc::new(SimCloud::new(
        vec![zone],
        SimConfig {
            start: start(),
            ..SimConfig::default()
        },
    ))
}

/// A controller on `provider` serving the API; its client and store.
async fn serve(
    provider: Arc<dyn tern_cloud::Provider>,
) -> (
    client::Client,
    Arc<Store>,
    crate::controller::service::Running,
) {
    serve_on(provider, Arc::new(Fixed)).await
}

/// The simulated cloud's own time as the controller's clock: it moves only when the test
/// advances the cloud, so instances end (reclaims) when the test says.
pub(super) struct SimTime(pub(super) Arc<SimCloud>);

#[async_trait]
impl Clock for SimTime {
    async fn read(&self) -> Result<DateTime<Utc>, ProviderError> {
        Ok(self.0.now())
    }
    fn last(&self) -> DateTime<Utc> {
        self.0.now()
    }
}

/// [`serve`] with the controller and the API reading `clock`.
pub(super) async fn serve_on(
    provider: Arc<dyn tern_cloud::Provider>,
    clock: Arc<dyn Clock>,
) -> (
    client::Client,
    Arc<Store>,
    crate::controller::service::Running,
) {
    let store = Arc::new(Store::in_memory().expect("store"));
    let config = ControllerConfig::new("t", vec![Region::new("us-west-2")]);
    let ctl = Controller::open(store.clone(), provider, config).expect("open");
    let shared = Shared::new();
    let metrics = Arc::new(Metrics::new());
    let service = Service::new(
        ctl,
        shared.clone(),
        clock.clone(),
        metrics.clone(),
        None,
        &ServiceConfig {
            period: Duration::from_millis(10),
            workers: crate::controller::service::Workers::Agents,
        },
    );
    let state = ApiState {
        shared,
        store: store.clone(),
        token: "t0k".into(),
        metrics,
        clock,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, router(state)).await });
    let running = service.spawn().expect("service");
    let http = crate::http::client().expect("http");
    let c = client::Client::new(&base, Some("t0k".into()), http).expect("client");
    (c, store, running)
}

pub(super) fn observation(job: &str, gpus: u32) -> tern_cloud::Observation {
    tern_cloud::Observation {
        job: job.into(),
        accelerator: "V100".into(),
        gpus,
        nodes: 1,
        local_batch: 64,
        step_seconds: 0.25,
        sync_seconds: None,
        at: start(),
    }
}

/// A report from `by`'s workers (instance, incarnation).
pub(super) fn report(
    done: f64,
    checkpoint: f64,
    o: Option<tern_cloud::Observation>,
    by: (&str, u64),
) -> wire::Progress {
    wire::Progress {
        done_samples: done,
        checkpoint_samples: checkpoint,
        checkpointed: false,
        observation: o,
        incarnation: Some(by.1),
        instance: Some(by.0.to_string()),
        stopped: false,
        failure: None,
        hung: false,
        crashed: false,
    }
}

/// Wait for the job's first instance and start workers on it, as an agent does.
pub(super) async fn started(c: &client::Client, job: &str) -> (String, u64) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let ids = c.job(job).await.expect("status").instance_ids;
        if let Some(id) = ids.first() {
            let r = c.start(job, id, None).await.expect("start");
            return (id.clone(), r.incarnation);
        }
        assert!(
            Instant::now() < until,
            "no instance for {job}: {:?}",
            c.events(0, Some(job)).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_report_is_refused_whole_and_never_blocks_the_good_ones() {
    let (c, store, running) = serve(idle_sim()).await;
    // A deadline it can meet at the pessimistic forecast, so it is placed.
    c.submit(&spec("a").replace("48h", "400h"))
        .await
        .expect("submit");
    let (id, k) = started(&c, "a").await;
    let by = (id.as_str(), k);
    let unchanged = |store: &Store| {
        let j = store.job("a").expect("read").expect("job");
        (
            j.done_samples,
            j.checkpoint_samples,
            store.observations("a").expect("obs").len(),
        )
    };
    // The probe's case: gpus = 0. Refused with the field, nothing written.
    let err = c
        .progress("a", &report(100.0, 50.0, Some(observation("a", 0)), by))
        .await
        .expect_err("gpus = 0");
    assert_eq!(err.status(), Some(422), "{err}");
    assert!(err.to_string().contains("observation.gpus"), "{err}");
    assert_eq!(unchanged(&store), (0.0, 0.0, 0));
    // A good observation in a report whose numbers are garbage is not stored either.
    let err = c
        .progress("a", &report(1e12, 0.0, Some(observation("a", 2)), by))
        .await
        .expect_err("done far beyond the total");
    assert_eq!(err.status(), Some(422), "{err}");
    assert!(err.to_string().contains("done_samples"), "{err}");
    assert_eq!(unchanged(&store), (0.0, 0.0, 0));
    // The next good report is taken, observation and all.
    let ok = c
        .progress("a", &report(1_000.0, 800.0, Some(observation("a", 2)), by))
        .await
        .expect("a good report after bad ones");
    assert!(ok.clamped.is_empty(), "{:?}", ok.clamped);
    assert_eq!(unchanged(&store), (1_000.0, 800.0, 1));
    // A step the script labelled itself is filed under what the instance has (the sim's
    // V100), where the planner looks for it.
    let mut named = observation("a", 2);
    named.accelerator = "NVIDIA Tesla V100-SXM2-16GB".into();
    c.progress("a", &report(1_000.0, 800.0, Some(named), by))
        .await
        .expect("a step labelled by the script");
    let filed: Vec<String> = store
        .observations("a")
        .expect("obs")
        .into_iter()
        .map(|o| o.accelerator)
        .collect();
    assert_eq!(filed, ["V100", "V100"]);
    // Below the last checkpoint: raised to it, and the answer says so.
    let ok = c
        .progress("a", &report(10.0, 10.0, None, by))
        .await
        .expect("clamped");
    assert_eq!(ok.clamped.len(), 1, "{:?}", ok.clamped);
    assert!(ok.clamped[0].contains("below the last checkpoint"));
    assert_eq!(unchanged(&store), (800.0, 800.0, 2));
    tokio::task::spawn_blocking(move || running.stop())
        .await
        .expect("join")
        .expect("stop");
    // A restart refits from what was stored: the job is as placeable as before.
    let sim = Arc::new(SimCloud::new(Vec::new(), SimConfig::default()));
    let config = ControllerConfig::new("t", vec![Region::new("us-west-2")]);
    let ctl = Controller::open(store.clone(), sim, config).expect("reopen");
    assert!(ctl.model("a").is_some(), "the job keeps its forecast");
}

#[test]
fn an_observation_an_older_tern_stored_unchecked_does_not_poison_the_job() {
    let store = Arc::new(Store::in_memory().expect("store"));
    let sim = Arc::new(SimCloud::new(Vec::new(), SimConfig::default()));
    let config = ControllerConfig::new("t", vec![Region::new("us-west-2")]);
    let mut ctl = Controller::open(store.clone(), sim.clone(), config.clone()).expect("open");
    let spec = tern_cloud::parse_job_spec(&spec("old"), "old.toml").expect("spec");
    ctl.submit(spec, start()).expect("submit");
    // Written straight to the store, as a version without the check did.
    store
        .add_observation(&observation("old", 0))
        .expect("raw write");
    let mut ctl = Controller::open(store.clone(), sim, config).expect("reopen");
    assert!(ctl.model("old").is_some(), "the bad row is skipped on load");
    ctl.observe(&observation("old", 2))
        .expect("later good observations are taken");
    assert_eq!(store.observations("old").expect("obs").len(), 2);
}

/// A server on an idle controller (no loop running): enough for what the API answers itself.
async fn idle_server(token: &str) -> String {
    serve_store(Arc::new(Store::in_memory().expect("store")), token).await
}

/// The API alone (no loop running) on `store`, its base URL.
async fn serve_store(store: Arc<Store>, token: &str) -> String {
    let state = ApiState {
        shared: Shared::new(),
        store,
        token: token.into(),
        metrics: Arc::new(Metrics::new()),
        clock: Arc::new(Fixed),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, router(state)).await });
    base
}

/// Once another controller takes the lease, every route of the old one answers 503 with the
/// leader's address and `Retry-After`, `/healthz` included, and its writes are not kept; a
/// write acknowledged before the takeover is in the store the new leader reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_controller_answers_503_naming_the_leader_and_writes_nothing() {
    use crate::controller::lease::LEASE;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tern.db");
    let store = Arc::new(Store::open(&path).expect("store"));
    let ttl = Duration::from_millis(200);
    let fence = store
        .take_lease(LEASE, "old", ttl, Some("http://old:1"))
        .expect("take")
        .expect("free");
    store.fence_writes(fence);
    let base = serve_store(store.clone(), "t0k").await;
    let http = crate::http::client().expect("http");
    let post = |name: &str| {
        http.post(format!("{base}/v1/jobs"))
            .bearer_auth("t0k")
            .body(spec(name))
            .send()
    };
    assert_eq!(post("before").await.expect("submit").status(), 201);

    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    let other = Store::open(&path).expect("store");
    other
        .take_lease(LEASE, "new", Duration::from_secs(30), Some("http://new:2"))
        .expect("take")
        .expect("expired");
    let reply = post("after").await.expect("submit");
    assert_eq!(reply.status(), 503);
    assert_eq!(
        reply
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let body: serde_json::Value = reply.json().await.expect("json");
    assert_eq!(body["leader"], "http://new:2", "{body}");
    assert!(
        body["error"].as_str().is_some_and(|e| e.contains("new")),
        "{body}"
    );
    for path in ["/healthz", "/v1/jobs", "/metrics"] {
        let reply = http
            .get(format!("{base}{path}"))
            .bearer_auth("t0k")
            .send()
            .await
            .expect("get");
        assert_eq!(reply.status(), 503, "{path}");
    }
    assert!(other.job("before").expect("read").is_some());
    assert!(other.job("after").expect("read").is_none());
}

/// Status and the `error` field of a JSON error body (the test fails on any other shape).
async fn json_error_of(reply: reqwest::Response) -> (u16, String) {
    let status = reply.status().as_u16();
    let kind = reply
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = reply.text().await.expect("body");
    assert!(
        kind.starts_with("application/json"),
        "{status} {kind}: {body}"
    );
    let parsed: wire::ErrorBody = serde_json::from_str(&body).expect("{\"error\": ...}");
    assert!(!parsed.error.is_empty(), "{status}: empty message");
    (status, parsed.error)
}

#[tokio::test]
async fn every_error_answer_is_json() {
    let base = idle_server("t0k").await;
    let http = crate::http::client().expect("http");
    let auth = |r: reqwest::RequestBuilder| r.bearer_auth("t0k");

    // A body over the limit (axum's default 2 MiB).
    let big = "x".repeat(3 << 20);
    let r = auth(http.post(format!("{base}/v1/jobs")).body(big))
        .send()
        .await;
    let (code, _) = json_error_of(r.expect("send")).await;
    assert_eq!(code, 413);

    // Bytes that are not UTF-8: a spec (text) and a progress report (JSON).
    let bad = vec![b'n', b'a', 0xff, 0xfe, b'\n'];
    let r = auth(http.post(format!("{base}/v1/jobs")).body(bad.clone()));
    let (code, message) = json_error_of(r.send().await.expect("send")).await;
    assert_eq!(code, 400);
    assert!(message.contains("UTF-8"), "{message}");
    let r = auth(http.post(format!("{base}/v1/jobs/a/progress")))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(bad);
    assert_eq!(json_error_of(r.send().await.expect("send")).await.0, 400);

    // JSON of the wrong shape, the wrong content type, a wrong method, an unknown route.
    let r = auth(http.post(format!("{base}/v1/jobs/a/progress")))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body("{\"done_samples\": \"many\"}");
    assert_eq!(json_error_of(r.send().await.expect("send")).await.0, 422);
    let r = auth(http.post(format!("{base}/v1/jobs/a/progress"))).body("{}");
    assert_eq!(json_error_of(r.send().await.expect("send")).await.0, 415);
    let r = auth(http.put(format!("{base}/v1/jobs")))
        .send()
        .await
        .expect("send");
    assert!(
        r.headers().contains_key(reqwest::header::ALLOW),
        "405 keeps Allow"
    );
    assert_eq!(json_error_of(r).await.0, 405);
    let r = auth(http.get(format!("{base}/v2/nothing"))).send().await;
    assert_eq!(json_error_of(r.expect("send")).await.0, 404);
    let r = auth(http.get(format!("{base}/v1/events?after=soon")))
        .send()
        .await;
    assert_eq!(json_error_of(r.expect("send")).await.0, 400);
    // And the ones tern writes itself stay as they are.
    let r = http
        .get(format!("{base}/v1/jobs"))
        .send()
        .await
        .expect("send");
    assert_eq!(json_error_of(r).await.0, 401);
}

#[tokio::test]
async fn the_auth_scheme_is_case_insensitive() {
    let base = idle_server("t0k").await;
    let http = crate::http::client().expect("http");
    for scheme in ["Bearer", "bearer", "BEARER", "BeArEr"] {
        let r = http
            .get(format!("{base}/v1/jobs"))
            .header(reqwest::header::AUTHORIZATION, format!("{scheme} t0k"))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status().as_u16(), 200, "{scheme}");
    }
    for wrong in ["Basic t0k", "Bearer t0k0", "Bearer t0", "t0k"] {
        let r = http
            .get(format!("{base}/v1/jobs"))
            .header(reqwest::header::AUTHORIZATION, wrong)
            .send()
            .await
            .expect("send");
        assert_eq!(r.status().as_u16(), 401, "{wrong}");
    }
}

#[tokio::test]
async fn the_library_client_speaks_tls_to_a_trusted_ca_only() {
    let dir = tempfile::tempdir().expect("dir");
    let certs = crate::test_certs::write_test_certs(dir.path()).expect("certs");
    let other = tempfile::tempdir().expect("dir");
    let stranger = crate::test_certs::write_test_certs(other.path()).expect("certs");
    let tls = crate::serve::tls::server_config(&certs.cert, &certs.key).expect("tls config");
    let state = ApiState {
        shared: Shared::new(),
        store: Arc::new(Store::in_memory().expect("store")),
        token: "t0k".into(),
        metrics: Arc::new(Metrics::new()),
        clock: Arc::new(Fixed),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(crate::serve::run(listener, Some(tls), router(state)));
    let client = |base: String, ca: Option<&std::path::Path>| {
        let http = crate::http::client_with_ca(ca).expect("http");
        client::Client::new(&base, Some("t0k".into()), http).expect("client")
    };

    let trusted = client(
        format!("https://localhost:{}", addr.port()),
        Some(&certs.ca),
    );
    assert!(trusted.jobs().await.expect("jobs over TLS").is_empty());
    let by_ip = client(format!("https://{addr}"), Some(&certs.ca));
    assert!(
        by_ip.jobs().await.is_ok(),
        "the certificate names 127.0.0.1"
    );

    for (base, ca) in [
        (format!("https://{addr}"), Some(stranger.ca.as_path())),
        (format!("https://{addr}"), None),
    ] {
        let err = client(base, ca).jobs().await.expect_err("unknown CA");
        assert!(err.to_string().contains("certificate"), "{err}");
    }
    let plain = client(format!("http://{addr}"), Some(&certs.ca));
    plain.jobs().await.expect_err("plain HTTP to a TLS port");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_controller_shows_its_offers_and_a_job_its_admitted_spec() {
    let (c, _store, running) = serve(idle_sim()).await;
    // No job yet: the first pass still reads the cloud's offers for `GET /v1/offers`.
    let t0 = Instant::now();
    let offers = loop {
        let o = c.offers().await.expect("offers");
        if !o.is_empty() || t0.elapsed() > Duration::from_secs(10) {
            break o;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        offers
            .iter()
            .any(|o| o.zone.as_str() == "us-west-2a" && o.instance_type.name == "p3.2xlarge"),
        "{offers:?}"
    );
    c.submit(&spec("s")).await.expect("submit");
    let admitted = c.job_spec("s").await.expect("spec");
    assert_eq!(
        admitted,
        tern_cloud::parse_job_spec(&spec("s"), "x").expect("parse")
    );
    let missing = c.job_spec("nope").await.expect_err("unknown job");
    assert_eq!(missing.status(), Some(404));
    tokio::task::spawn_blocking(move || running.stop())
        .await
        .expect("join")
        .expect("stop");
}

/// A launch carries its job's agent token in its tags, and the API takes that token for that
/// job's agent routes only; the refusals are audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_carries_its_jobs_agent_token_and_only_that_job_accepts_it() {
    use tern_cloud::Provider as _;
    let sim = idle_sim();
    let (c, store, running) = serve(sim.clone()).await;
    for job in ["a", "b"] {
        c.submit(&spec(job).replace("48h", "400h"))
            .await
            .expect("submit");
    }
    let (id, k) = started(&c, "a").await;
    let listed = sim.list("t").await.expect("list");
    let launched = listed
        .iter()
        .find(|i| i.id.as_str() == id)
        .expect("the instance");
    let token = launched
        .tags
        .get(crate::store::AGENT_TOKEN_TAG)
        .expect("tagged with its agent token")
        .clone();
    assert_eq!(store.agent_job(&token).as_deref(), Some("a"));
    let http = crate::http::client().expect("http");
    let agent = client::Client::new(&c.base(), Some(token), http).expect("client");
    let p = report(10.0, 5.0, None, (id.as_str(), k));
    agent.progress("a", &p).await.expect("its own job");
    assert_eq!(agent.job("a").await.expect("its status").name, "a");
    let refused = [
        agent.progress("b", &p).await.expect_err("another job"),
        agent.start("b", &id, None).await.expect_err("another job"),
        agent.cancel("a").await.expect_err("not an agent's call"),
    ];
    for e in &refused {
        assert_eq!(e.status(), Some(403), "{e}");
    }
    let rows = store.audit(&Default::default()).expect("audit");
    let of = |path: &str| rows.iter().any(|r| r.token == "agent:a" && r.path == path);
    assert!(of("/v1/jobs/b/progress") && of("/v1/jobs/b/start") && of("/v1/jobs/a"));
    assert!(
        !of("/v1/jobs/a/progress"),
        "accepted reports are not audited"
    );
    tokio::task::spawn_blocking(move || running.stop())
        .await
        .expect("join")
        .expect("stop");
}

/// `PUT /v1/quotas`: a file that does not check is refused with its line and field and
/// changes nothing; one that checks is in force at once (`GET /v1/quotas`) and reaches the
/// controller, whose plans it limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_file_replaces_the_one_in_force_only_when_it_checks() {
    let (c, _store, running) = serve(idle_sim()).await;
    let http = crate::http::client().expect("http");
    let url = format!("{}/v1/quotas", c.base());
    let put = |body: &'static str| http.put(&url).bearer_auth("t0k").body(body).send();
    let bad = put("[team.nlp]\ntotal_usd = 10\non_exhausted = \"pause\"\n")
        .await
        .expect("send");
    assert_eq!(bad.status().as_u16(), 400);
    let why = bad.text().await.expect("body");
    assert!(why.contains("request body:3: on_exhausted"), "{why}");
    let good = "fairness = 0.5\n[team.nlp]\ntotal_usd = 10\non_exhausted = \"drain\"\n";
    let ok = put(good).await.expect("send");
    assert_eq!(ok.status().as_u16(), 200);
    let now: crate::limits::Limits = http
        .get(&url)
        .bearer_auth("t0k")
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(now, crate::limits::Limits::parse(good, "x").expect("parse"));
    let anonymous = http.put(&url).body(good).send().await.expect("send");
    assert_eq!(anonymous.status().as_u16(), 401);
    tokio::task::spawn_blocking(move || running.stop())
        .await
        .expect("join")
        .expect("stop");
}

#[path = "route_tests.rs"]
mod routes;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_learn_their_rank_and_the_addresses_of_the_nodes_started_before_them() {
    let (c, store, running) = serve(idle_sim()).await;
    let text = tern_cloud::testkit::spec("g")
        .workers("2")
        .gang(true)
        .deadline(None)
        .text();
    c.submit(&text).await.expect("submit");
    let until = Instant::now() + Duration::from_secs(20);
    let ids = loop {
        let ids = c.job("g").await.expect("status").instance_ids;
        if ids.len() == 2 {
            break ids;
        }
        assert!(
            Instant::now() < until,
            "two instances: {ids:?} {:?}",
            c.events(0, Some("g")).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let first = c
        .start("g", &ids[1], Some("10.0.0.2"))
        .await
        .expect("first");
    assert_eq!(first.node_rank, 0);
    assert_eq!(first.nodes, Some(2));
    assert_eq!(first.node_addresses, ["10.0.0.2"]);
    let second = c
        .start("g", &ids[0], Some("10.0.0.1"))
        .await
        .expect("second");
    assert_eq!(
        second.incarnation, first.incarnation,
        "one training, two nodes"
    );
    assert_eq!(second.node_rank, 1);
    assert_eq!(
        second.node_addresses,
        ["10.0.0.2", "10.0.0.1"],
        "rank 0's address first"
    );
    let bad = c.start("g", &ids[0], Some("10.0.0.1\nx")).await;
    assert_eq!(bad.expect_err("control characters").status(), Some(400));
    let stored = store.incarnation("g").expect("incarnation");
    assert!(stored.workers.iter().all(|w| w.address.is_some()));
    tokio::task::spawn_blocking(move || running.stop())
        .await
        .expect("join")
        .expect("stop");
}
