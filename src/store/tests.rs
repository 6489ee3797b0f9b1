use super::*;
use chrono::TimeDelta;
use std::time::Duration;
use tern_cloud::Tags;

fn spec() -> JobSpec {
    tern_cloud::testkit::spec("j1")
        .workers("2")
        .deadline(Some("10h"))
        .local_batch(Some(32))
        .samples(1000)
        .unmeasured()
        .build()
}

fn offer() -> Offer {
    tern_cloud::testkit::offer("p3.2xlarge", "us-west-2a", Capacity::Spot).build()
}

/// The store's life cycle on any backend; `open` opens the same database again each call.
fn survives_reopening_and_closes_usage_atomically(open: &dyn Fn() -> Store) {
    let t0 = Utc.timestamp_opt(1_800_000_000, 0).single().expect("time");
    let intent = Intent {
        id: IntentId::from_uuid(uuid::Uuid::from_u128(42)),
        job: "j1".into(),
        kind: IntentKind::Launch {
            offers: vec![offer()],
            count: 2,
        },
        state: IntentState::Pending,
        attempt: 0,
        created_at: t0,
    };
    {
        let store = open();
        assert_eq!(
            store.schema_version().expect("version"),
            Store::known_schema()
        );
        let job = JobRecord::new(spec(), t0);
        assert_eq!(job.deadline_at, Some(t0 + TimeDelta::hours(10)));
        store.insert_job(&job, t0).expect("insert");
        assert!(matches!(
            store.insert_job(&job, t0),
            Err(StoreError::Duplicate(_))
        ));
        store.insert_intent(&intent).expect("intent");
    }
    // A "crash" here: the intent is pending, nothing launched yet.
    let store = open();
    assert_eq!(
        store.schema_version().expect("no migration applied twice"),
        Store::known_schema()
    );
    let snap = store.load().expect("load");
    assert_eq!(snap.jobs.len(), 1);
    assert_eq!(snap.intents, vec![intent.clone()]);
    assert!(snap.instances.is_empty());

    let instance = Instance {
        id: InstanceId::from("sim-1"),
        offer: offer().into(),
        state: InstanceState::Pending,
        tags: Tags::new().into(),
        launched_at: t0,
    };
    store
        .record_instances(
            intent.id,
            "j1",
            std::slice::from_ref(&instance),
            Some(3.06),
            true,
            t0,
        )
        .expect("record");
    // Recording the same launch twice (a retried intent) adds nothing.
    store
        .record_instances(intent.id, "j1", &[instance], Some(3.06), true, t0)
        .expect("record again");
    let snap = store.load().expect("load");
    assert!(
        snap.intents.is_empty(),
        "launch intent closed with its instances"
    );
    assert_eq!(snap.instances.len(), 1);
    assert_eq!(
        store.intent_state(intent.id).expect("state"),
        Some(IntentState::Done)
    );

    let t1 = t0 + TimeDelta::minutes(90);
    store
        .end_instance(&InstanceId::from("sim-1"), t1)
        .expect("end");
    assert!(store.load().expect("load").instances.is_empty());
    let usage = store.usage().expect("usage");
    assert_eq!(usage.len(), 1);
    assert_eq!(usage[0].ended_at, Some(t1));
    assert!((usage[0].hours(t1) - 1.5).abs() < 1e-9);
    assert_eq!(usage[0].capacity, Capacity::Spot);
    let with_offers = store.usage_with_offers().expect("usage with offers");
    assert_eq!(with_offers.len(), 1);
    assert_eq!(with_offers[0].1.as_ref(), Some(&offer()));

    // Prices: changes per offer key, oldest first; a second write at one time keeps the first.
    let key = offer().key();
    store
        .record_prices(t0, &[(key.clone(), 0.9), ("other".into(), 2.0)])
        .expect("prices");
    store
        .record_prices(t1, &[(key.clone(), 1.2)])
        .expect("prices");
    store
        .record_prices(t1, &[(key.clone(), 7.0)])
        .expect("same time");
    let prices = store.prices().expect("prices");
    assert_eq!(prices[&key], vec![(t0, 0.9), (t1, 1.2)]);
    assert_eq!(store.latest_prices().expect("latest")[&key], 1.2);

    let mut job = store.job("j1").expect("job").expect("exists");
    job.state = JobState::Running;
    job.planned_cost = Some(41.5);
    store.update_job(&job, t1).expect("update");
    // Progress and the drain flag have statements of their own (agents write them through
    // the API while a pass runs).
    store.set_drain("j1", true, t1).expect("drain");
    let progress = job
        .progress_after(500.0, 400.0, false, t1)
        .expect("valid")
        .progress;
    store.set_progress("j1", &progress, t1).expect("progress");
    job.drain_requested = true;
    job.apply_progress(&progress);
    assert_eq!(store.job("j1").expect("job"), Some(job.clone()));
    assert!(store.job("nope").expect("query").is_none());
    assert!(store.set_progress("nope", &progress, t1).is_err());
    // The checkpoint it asked for clears the drain.
    let checkpointed = job
        .progress_after(600.0, 600.0, true, t1)
        .expect("valid")
        .progress;
    store
        .set_progress("j1", &checkpointed, t1)
        .expect("progress");
    assert!(
        !store
            .job("j1")
            .expect("job")
            .expect("exists")
            .drain_requested
    );
    // A cancel is final: a pass that has not seen it yet cannot write the job back to running.
    assert!(
        store
            .cancel_job("j1", "cancelled by the user", t1)
            .expect("cancel")
    );
    assert!(!store.cancel_job("j1", "again", t1).expect("cancel twice"));
    store
        .update_job(&job, t1)
        .expect("a stale update is not an error");
    let after = store.job("j1").expect("job").expect("exists");
    assert_eq!(after.state, JobState::Cancelled);
    assert_eq!(after.reason.as_deref(), Some("cancelled by the user"));

    let first = store
        .add_event(
            t1,
            Some("j1"),
            "launch",
            "two V100",
            Some(r#"{"event":"launched"}"#),
        )
        .expect("event");
    store
        .add_event(t1, None, "leak", "collected sim-9", None)
        .expect("event");
    assert_eq!(store.events(0, None).expect("events").len(), 2);
    assert_eq!(store.events(first, None).expect("events")[0].kind, "leak");
    let j1 = store.events(0, Some("j1")).expect("events");
    assert_eq!(j1.len(), 1);
    assert_eq!(j1[0].fields, Some(serde_json::json!({"event": "launched"})));
    assert_eq!(store.events(first, None).expect("events")[0].fields, None);
}

/// One leader at a time; a standby takes over only once the lease has expired, and a leader
/// that released its lease is replaced at once. Every take is a new, higher epoch.
fn lease_elects_one_leader(store: &Store) {
    let ttl = Duration::from_millis(600);
    assert!(store.lease_holder("controller").expect("holder").is_none());
    let a = store
        .take_lease("controller", "a", ttl, Some("http://a:7070"))
        .expect("take")
        .expect("a takes a free lease");
    assert!(
        store
            .take_lease("controller", "b", ttl, None)
            .expect("take")
            .is_none(),
        "b waits while a's lease runs"
    );
    assert!(store.renew_lease(&a, ttl).expect("a renews"));
    let held = store
        .lease_holder("controller")
        .expect("holder")
        .expect("held");
    assert_eq!(held.holder, "a");
    assert_eq!(held.epoch, a.epoch);
    assert_eq!(held.address.as_deref(), Some("http://a:7070"));
    assert!(
        held.expires_in_ms > 0 && held.expires_in_ms <= 600,
        "{held:?}"
    );
    std::thread::sleep(Duration::from_millis(700));
    let b = store
        .take_lease("controller", "b", ttl, None)
        .expect("take")
        .expect("b takes an expired lease");
    assert!(b.epoch > a.epoch, "{b:?} after {a:?}");
    assert!(!store.renew_lease(&a, ttl).expect("renew"), "a lost it");
    store.release_lease(&a).expect("not a's: no-op");
    assert!(
        store
            .take_lease("controller", "a", ttl, None)
            .expect("take")
            .is_none(),
        "still b's"
    );
    store.release_lease(&b).expect("release");
    let a2 = store
        .take_lease("controller", "a", ttl, None)
        .expect("take")
        .expect("a takes a released lease at once");
    assert!(a2.epoch > b.epoch, "a release keeps the epoch: {a2:?}");
    // A restart under the same name is a new reign too.
    let a3 = store
        .take_lease("controller", "a", ttl, None)
        .expect("take")
        .expect("the same name takes its own lease");
    assert!(a3.epoch > a2.epoch);
    assert!(!store.renew_lease(&a2, ttl).expect("renew"));
    // Leases are per name.
    assert!(
        store
            .take_lease("other", "b", ttl, None)
            .expect("take")
            .is_some()
    );
}

/// A leader's writes hold only while its reign does: once another controller takes the lease,
/// every write of the old one (a job, an event, a batch) is refused whole, nothing of it is
/// kept, the refusal names the new leader, and reads still work. `open` opens another
/// connection to the same database each call.
fn a_deposed_leader_writes_nothing(open: &dyn Fn() -> Store) {
    let t0 = Utc.timestamp_opt(1_800_000_000, 0).single().expect("time");
    let ttl = Duration::from_millis(400);
    let old = open();
    let fence = old
        .take_lease("controller", "old", ttl, Some("http://old:1"))
        .expect("take")
        .expect("free");
    old.fence_writes(fence);
    old.insert_job(&JobRecord::new(spec(), t0), t0)
        .expect("the leader writes");
    std::thread::sleep(Duration::from_millis(500));
    let new = open();
    let taken = new
        .take_lease("controller", "new", ttl, Some("http://new:2"))
        .expect("take")
        .expect("expired");
    new.fence_writes(taken);

    let mut other = spec();
    other.name = "j2".into();
    let refused = old
        .insert_job(&JobRecord::new(other.clone(), t0), t0)
        .expect_err("a deposed leader must not write");
    let StoreError::Fenced(Some(leader)) = &refused else {
        panic!("expected a fenced write naming the leader, got {refused}");
    };
    assert_eq!(leader.holder, "new");
    assert!(
        refused.to_string().contains("http://new:2"),
        "the refusal points at the leader: {refused}"
    );
    assert!(old.deposed().is_some());
    let refused = old
        .add_event(t0, Some("j1"), "launched", "late", None)
        .expect_err("nor log events");
    assert!(matches!(refused, StoreError::Fenced(_)), "{refused}");
    // Reads still work, and nothing of the refused writes is there.
    assert!(old.job("j2").expect("read").is_none());
    assert!(new.job("j2").expect("read").is_none());
    assert_eq!(new.events(0, None).expect("events").len(), 0);
    // The new leader writes.
    new.insert_job(&JobRecord::new(other, t0), t0)
        .expect("the leader writes");
    assert!(new.job("j2").expect("read").is_some());
}

/// A leader writing as fast as it can while a standby takes over: the new leader loads right
/// after its take, and every write the old one saw acknowledged is in that load (a write
/// either committed before the take or was refused).
fn a_takeover_loads_every_acknowledged_write(open: &dyn Fn() -> Store) {
    let t0 = Utc.timestamp_opt(1_800_000_000, 0).single().expect("time");
    let ttl = Duration::from_millis(300);
    let old = open();
    let fence = old
        .take_lease("controller", "old", ttl, None)
        .expect("take")
        .expect("free");
    old.fence_writes(fence);
    let new = open();
    let (acked, loaded) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut acked = Vec::new();
            for i in 0.. {
                let mut job = spec();
                job.name = format!("j-{i}");
                match old.insert_job(&JobRecord::new(job, t0), t0) {
                    Ok(()) => acked.push(format!("j-{i}")),
                    Err(StoreError::Fenced(_)) => break,
                    Err(e) => panic!("unexpected: {e}"),
                }
            }
            acked
        });
        let loaded = loop {
            if let Some(f) = new
                .take_lease("controller", "new", ttl, None)
                .expect("take")
            {
                new.fence_writes(f);
                break new.load().expect("load");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        (writer.join().expect("writer"), loaded)
    });
    let names: std::collections::BTreeSet<&str> = loaded.jobs.iter().map(|j| j.name()).collect();
    assert!(!acked.is_empty());
    for a in &acked {
        assert!(
            names.contains(a.as_str()),
            "{a} was acknowledged but not loaded"
        );
    }
}

#[test]
fn sqlite_store_survives_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tern.db");
    survives_reopening_and_closes_usage_atomically(&|| Store::open(&path).expect("open"));
}

/// Tokens are kept hashed, found by their secret until revoked, agent tokens derive from the
/// store's key and survive reopening it; the audit log filters by time and team. `open`
/// opens the same database again each call.
fn tokens_and_audit(open: &dyn Fn() -> Store) {
    let t0 = Utc.timestamp_opt(1_800_000_000, 0).single().expect("time");
    let store = open();
    let team = store
        .create_token(Role::Team, Some("vision"), None, t0)
        .expect("create");
    assert!(team.secret.starts_with(TOKEN_PREFIX) && team.secret.len() == 48);
    let agent = store
        .create_token(Role::Agent, None, Some("bert"), t0)
        .expect("agent");
    assert_ne!(team.secret, agent.secret);
    let dumped: Vec<Row> = store
        .query("SELECT hash FROM tokens", vec![])
        .expect("rows");
    for r in &dumped {
        let hash = r.text(0).expect("hash");
        assert!(!hash.contains(&team.secret[5..]) && !hash.contains(&agent.secret[5..]));
    }
    let found = store.token_by_secret(&team.secret).expect("lookup");
    assert_eq!(found.as_ref(), Some(&team.record));
    assert_eq!(store.token_by_secret("tern_nope").expect("lookup"), None);
    assert!(store.create_token(Role::Team, None, None, t0).is_err());
    assert!(
        store
            .create_token(Role::Admin, Some("x"), None, t0)
            .is_err()
    );

    let derived = store.agent_token("bert.large");
    assert!(derived.starts_with(AGENT_PREFIX));
    let store = open();
    assert!(store.revoke_token(&team.record.id, t0).expect("revoke"));
    assert!(!store.revoke_token("tok_none", t0).expect("revoke"));
    assert_eq!(store.token_by_secret(&team.secret).expect("lookup"), None);
    assert!(
        store
            .token_by_secret(&agent.secret)
            .expect("lookup")
            .is_some()
    );
    assert_eq!(store.agent_job(&derived).as_deref(), Some("bert.large"));
    assert_eq!(
        store.agent_token("bert.large"),
        derived,
        "stable across reopening"
    );
    let forged = derived.replace("bert.large.", "gpt.");
    assert_eq!(store.agent_job(&forged), None, "the MAC binds the job");

    for (i, team) in [Some("vision"), Some("nlp"), None].into_iter().enumerate() {
        let at = t0 + TimeDelta::minutes(i as i64);
        let e = AuditEntry {
            id: 0,
            at,
            token: "admin".into(),
            role: "admin".into(),
            method: "DELETE".into(),
            path: "/v1/jobs/x".into(),
            job: Some("x".into()),
            team: team.map(str::to_string),
            status: 403,
        };
        store.add_audit(&e).expect("audit");
    }
    let all = store.audit(&AuditQuery::default()).expect("read");
    assert_eq!(all.len(), 3);
    assert_eq!((all[0].status, all[0].at), (403, t0));
    let q = AuditQuery {
        since: Some(t0 + TimeDelta::seconds(30)),
        team: Some("nlp".into()),
    };
    let nlp = store.audit(&q).expect("read");
    assert_eq!(nlp.len(), 1);
    assert_eq!(nlp[0].team.as_deref(), Some("nlp"));
}

/// How nodes' workers ended, incarnation after incarnation: a node's failures count in a row
/// from the latest back while another node of the same incarnation was stopped as asked; a
/// failure every node shared (the training's, not the node's) or a stop as asked ends the row.
fn workers_failed_alone_in_a_row(store: &Store) {
    let t0 = Utc.timestamp_opt(1_800_000_000, 0).single().expect("time");
    // (node, other) per incarnation.
    let ends = [
        (Some(Ended::Hung), None),
        (None, None),
        (Some(Ended::Crashed), Some(Ended::Crashed)),
        (Some(Ended::Crashed), None),
        (Some(Ended::Hung), None),
    ];
    for (k, (node, other)) in ends.into_iter().enumerate() {
        let k = k as u64 + 1;
        store
            .start_workers("j", k, "node", None, t0)
            .expect("start");
        store
            .start_workers("j", k, "other", None, t0)
            .expect("start");
        store
            .stop_workers("j", k, "node", None, node, t0)
            .expect("stop");
        store
            .stop_workers("j", k, "other", None, other, t0)
            .expect("stop");
    }
    assert_eq!(
        store.failed_alone_in_a_row("j", "node", 5).expect("count"),
        2
    );
    assert_eq!(
        store.failed_alone_in_a_row("j", "node", 1).expect("count"),
        1
    );
    assert_eq!(
        store.failed_alone_in_a_row("j", "other", 5).expect("count"),
        0
    );
    // Workers started again in the latest incarnation run: only the ended ones count.
    store
        .start_workers("j", 5, "node", None, t0)
        .expect("restart");
    assert_eq!(
        store.failed_alone_in_a_row("j", "node", 5).expect("count"),
        1
    );
    // A node alone in its incarnation has nobody to be compared with.
    store
        .start_workers("j", 6, "node", None, t0)
        .expect("start");
    store
        .stop_workers("j", 6, "node", None, Some(Ended::Crashed), t0)
        .expect("stop");
    assert_eq!(
        store.failed_alone_in_a_row("j", "node", 5).expect("count"),
        0
    );
}

#[test]
fn sqlite_workers_failed_alone_in_a_row() {
    workers_failed_alone_in_a_row(&Store::in_memory().expect("store"));
}

/// A setting outlives the handle that wrote it, a second write replaces it, clearing it
/// says whether it was there.
fn settings_survive_reopening(open: &dyn Fn() -> Store) {
    let t0 = Utc.timestamp_opt(1_800_000_000, 0).single().expect("time");
    let store = open();
    assert_eq!(store.setting(QUOTAS).expect("read"), None);
    store
        .put_setting(QUOTAS, "[team.a]\ntotal_usd = 1\n", t0)
        .expect("put");
    let t1 = t0 + chrono::TimeDelta::seconds(5);
    store
        .put_setting(QUOTAS, "[team.a]\ntotal_usd = 2\n", t1)
        .expect("replace");
    drop(store);
    let again = open();
    assert_eq!(
        again.setting(QUOTAS).expect("read"),
        Some(("[team.a]\ntotal_usd = 2\n".to_string(), t1))
    );
    assert!(again.clear_setting(QUOTAS).expect("clear"));
    assert!(!again.clear_setting(QUOTAS).expect("clear twice"));
    assert_eq!(again.setting(QUOTAS).expect("read"), None);
}

#[test]
fn sqlite_settings_survive_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tern.db");
    settings_survive_reopening(&|| Store::open(&path).expect("open"));
}

#[test]
fn sqlite_tokens_and_audit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tern.db");
    tokens_and_audit(&|| Store::open(&path).expect("open"));
}

#[test]
fn sqlite_lease_elects_one_leader() {
    let dir = tempfile::tempdir().expect("tempdir");
    lease_elects_one_leader(&Store::open(&dir.path().join("tern.db")).expect("open"));
}

#[test]
fn sqlite_deposed_leader_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tern.db");
    a_deposed_leader_writes_nothing(&|| Store::open(&path).expect("open"));
}

#[test]
fn a_store_keeps_its_identity_and_another_file_has_another() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tern.db");
    let id = Store::open(&path).expect("open").cluster_id().to_string();
    assert_eq!(id.len(), 36, "a uuid: {id}");
    assert_eq!(Store::open(&path).expect("reopen").cluster_id(), id);
    let other = Store::open(&dir.path().join("other.db")).expect("open");
    assert_ne!(other.cluster_id(), id);
    assert_ne!(Store::in_memory().expect("mem").cluster_id(), id);
    // A 0-byte file is a new, empty store: it gets a new identity.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").expect("touch");
    assert_ne!(Store::open(&empty).expect("open").cluster_id(), id);
}

#[test]
fn a_symlink_opens_the_same_store_by_its_real_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tern.db");
    let link = dir.path().join("link.db");
    let store = Store::open(&path).expect("open");
    std::os::unix::fs::symlink(&path, &link).expect("symlink");
    assert_eq!(
        real_path(&link).expect("real"),
        real_path(&path).expect("real")
    );
    let via_link = Store::open(&link).expect("open via the link");
    assert_eq!(via_link.cluster_id(), store.cluster_id());
    // A file not created yet resolves through its folder.
    let later = dir.path().join("sub/../later.db");
    std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
    assert_eq!(
        real_path(&later).expect("real"),
        real_path(dir.path()).expect("real").join("later.db")
    );
}

#[test]
fn a_deleted_or_replaced_state_file_is_detected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tern.db");
    let store = Store::open(&path).expect("open");
    store.verify().expect("the file opened is there");
    std::fs::remove_file(&path).expect("delete");
    let err = store.verify().expect_err("deleted");
    assert!(matches!(err, StoreError::Replaced(_)), "{err}");
    assert!(err.to_string().contains("tern.db"), "{err}");
    // Replaced by another store under the same name (a restored or swapped file).
    let other = Store::open(&path).expect("new file");
    assert_ne!(other.cluster_id(), store.cluster_id());
    assert!(matches!(store.verify(), Err(StoreError::Replaced(_))));
    other.verify().expect("the new file is the new store's own");
}

#[test]
fn store_url_names_the_backend() {
    assert_eq!(
        StoreUrl::parse("postgres://tern@db/tern"),
        StoreUrl::Postgres("postgres://tern@db/tern".into())
    );
    assert_eq!(
        StoreUrl::parse("postgresql://db"),
        StoreUrl::Postgres("postgresql://db".into())
    );
    assert_eq!(
        StoreUrl::parse("sqlite:/var/lib/tern.db"),
        StoreUrl::Sqlite("/var/lib/tern.db".into())
    );
    assert_eq!(
        StoreUrl::parse("tern.db"),
        StoreUrl::Sqlite("tern.db".into())
    );
}

/// The same checks against a real PostgreSQL server (a private cluster per run), plus what
/// only a server can show: two controllers migrating at once, and a dropped connection.
#[test]
fn postgres_store_passes_the_same_checks() {
    let cluster = pg_cluster::PgCluster::start().expect("PostgreSQL for the store tests");
    let url = cluster.create_db("lifecycle").expect("db");
    survives_reopening_and_closes_usage_atomically(&|| Store::connect(&url).expect("connect"));

    let url = cluster.create_db("tokens").expect("db");
    tokens_and_audit(&|| Store::connect(&url).expect("connect"));

    let url = cluster.create_db("settings").expect("db");
    settings_survive_reopening(&|| Store::connect(&url).expect("connect"));

    let url = cluster.create_db("workers").expect("db");
    workers_failed_alone_in_a_row(&Store::connect(&url).expect("connect"));

    let url = cluster.create_db("lease").expect("db");
    lease_elects_one_leader(&Store::connect(&url).expect("connect"));

    let url = cluster.create_db("fence").expect("db");
    a_deposed_leader_writes_nothing(&|| Store::connect(&url).expect("connect"));
    let url = cluster.create_db("takeover").expect("db");
    a_takeover_loads_every_acknowledged_write(&|| Store::connect(&url).expect("connect"));

    // Controllers starting together: the migration runs once, under an advisory lock.
    let url = cluster.create_db("race").expect("db");
    let stores: Vec<Store> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| Store::connect(&url).expect("concurrent connect")))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    for s in &stores {
        assert_eq!(s.schema_version().expect("version"), Store::known_schema());
    }
    // One database, one identity, however many controllers created it at once.
    assert!(
        stores
            .iter()
            .all(|s| s.cluster_id() == stores[0].cluster_id())
    );
    assert!(stores[0].verify().is_ok());
    // Two handles on one database see each other's writes (what a standby reads on takeover).
    let t0 = Utc.timestamp_opt(1_800_000_000, 0).single().expect("time");
    stores[0]
        .insert_job(&JobRecord::new(spec(), t0), t0)
        .expect("insert");
    assert_eq!(stores[1].load().expect("load").jobs.len(), 1);
    assert!(matches!(
        stores[2].insert_job(&JobRecord::new(spec(), t0), t0),
        Err(StoreError::Duplicate(_))
    ));

    // A bad URL fails at once with the reason, and the password stays out of messages.
    let err = Store::connect(&format!(
        "postgres://tern:hunter2@127.0.0.1:{}/nope",
        cluster.port
    ))
    .expect_err("no such database");
    let msg = err.to_string();
    assert!(msg.contains("nope"), "{msg}");
    assert!(!msg.contains("hunter2"), "{msg}");
}

/// TLS to PostgreSQL: `verify-full` against the server's CA works and is really TLS (the
/// server's `pg_stat_ssl` says so); a certificate from another CA, or no TLS where it is
/// required, is refused before anything is written.
#[test]
fn postgres_store_speaks_tls_and_checks_the_certificate() {
    let dir = tempfile::tempdir().expect("dir");
    let certs = crate::test_certs::write_test_certs(dir.path()).expect("certs");
    let other = tempfile::tempdir().expect("dir");
    let stranger = crate::test_certs::write_test_certs(other.path()).expect("certs");
    let cluster =
        pg_cluster::PgCluster::start_tls(&certs.cert, &certs.key).expect("PostgreSQL with TLS");
    let base = cluster.create_db("tls").expect("db");
    let with = |query: &str| format!("{base}?{query}");

    let url = with(&format!(
        "sslmode=verify-full&sslrootcert={}",
        certs.ca.display()
    ));
    let store = Store::connect(&url).expect("verify-full against the right CA");
    assert_eq!(
        store.schema_version().expect("version"),
        Store::known_schema()
    );
    assert!(pg_ssl_in_use(&store), "the connection is not encrypted");

    for query in [
        format!("sslmode=verify-full&sslrootcert={}", stranger.ca.display()),
        format!("sslmode=verify-ca&sslrootcert={}", stranger.ca.display()),
    ] {
        let err = Store::connect(&with(&query)).expect_err("an unknown CA is refused");
        assert!(
            err.to_string().to_lowercase().contains("certificate"),
            "{query}: {err}"
        );
    }
    // `require` encrypts without checking; `disable` stays plain (the server allows both).
    let store = Store::connect(&with("sslmode=require")).expect("require");
    assert!(pg_ssl_in_use(&store));
    let store = Store::connect(&with("sslmode=disable")).expect("disable");
    assert!(!pg_ssl_in_use(&store));

    // A server without TLS: `require` fails, nothing is created.
    let plain = pg_cluster::PgCluster::start().expect("PostgreSQL");
    let url = format!("{}?sslmode=require", plain.create_db("plain").expect("db"));
    Store::connect(&url).expect_err("TLS required, the server has none");
}

/// Whether this store's own connection is encrypted, as the server sees it.
fn pg_ssl_in_use(store: &Store) -> bool {
    let rows = store
        .query(
            "SELECT CASE WHEN ssl THEN 1 ELSE 0 END FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            vec![],
        )
        .expect("pg_stat_ssl");
    rows.first().is_some_and(|r| r.int(0).is_ok_and(|v| v == 1))
}
