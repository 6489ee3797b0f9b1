//! A one-node job moved by a price rise, with real PyTorch on both nodes: the new node's agent
//! is told to wait while the old node trains, the old node checkpoints and stops, its instance
//! is released within seconds of that, and the new node resumes from that checkpoint. At no
//! moment do two incarnations of the job have processes (the referee's `/proc` scan every
//! 50 ms), and the script's own log shows one incarnation writing at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Agent, Cluster, Referee, answers, events, gone, of_agent_log, serial, train_ddp};

/// The controller reads prices every 5 s (by default once per 5-minute policy tick, which a
/// test of minutes may not reach).
const PRICES_EVERY_5_S: &[&str] = &["--offers-every", "5"];

/// Two zones with room for two nodes: a at $0.90/h until `jump` 5-s ticks in, then $90/h; b
/// at $1.20/h throughout.
fn two_zones(dir: &Path, jump: usize) -> Vec<PathBuf> {
    let zone = |name: &str, price: f64, prices: Option<Vec<f64>>| {
        let mut body = serde_json::json!({
            "metadata": {"gap_seconds": 5, "zone": name, "region": "us-west-2", "cloud": "aws",
                         "price_info": {"price": price, "on_demand_price": 3.06}},
            "data": vec![2; 2000],
        });
        if let Some(p) = prices {
            body["prices"] = serde_json::json!(p);
        }
        let path = dir.join(format!("{name}_v100.json"));
        std::fs::write(&path, body.to_string()).expect("trace");
        path
    };
    let rise: Vec<f64> = (0..2000)
        .map(|t| if t < jump { 0.9 } else { 90.0 })
        .collect();
    vec![
        zone("us-west-2a", 0.9, Some(rise)),
        zone("us-west-2b", 1.2, None),
    ]
}

/// A spot job with no deadline of `workers` (TOML), measured at about the script's real
/// step (on two nodes too): the cheaper-spot rule moves it (a deadline's policy thinks in
/// 5-minute ticks, too coarse for a test of minutes).
fn spot_spec(dir: &Path, name: &str, workers: &str, samples: u64) -> PathBuf {
    let top = "capacity = \"spot-only\"\n";
    super::write_spec(dir, name, workers, top, samples, &super::observed(0.1, 0.1))
}

/// `tern agent` for the job on `id`, training `train_ddp.py` with one worker on the node
/// (alone: torchrun `--standalone`; `elastic`: the agent flags of a 1..2-node rendezvous),
/// sharing the checkpoint and log in `work` with the other nodes.
fn agent_on(c: &Cluster, id: &str, work: &Path, samples: u64, elastic: &[&str]) -> Agent {
    let progress = work.join(format!("progress-{id}.json"));
    let p = progress.to_str().expect("utf-8").to_string();
    let ckpt = work.join("ckpt.pt");
    let log = work.join("train.jsonl");
    let samples = samples.to_string();
    let mut args = vec!["--progress-file", &p, "--nproc-per-node", "1"];
    args.extend_from_slice(&["--stop-grace", "30"]);
    args.extend_from_slice(elastic);
    c.agent(
        id,
        work,
        &args,
        &[
            "python3",
            &train_ddp(),
            "--ckpt",
            ckpt.to_str().expect("utf-8"),
            "--total-samples",
            &samples,
            "--step-sleep",
            "0.05",
            "--checkpoint-every",
            "25",
            "--log-file",
            log.to_str().expect("utf-8"),
        ],
    )
}

/// The job's instances now.
fn instance_ids(c: &Cluster) -> Vec<String> {
    super::ids_in(&c.status())
}

#[test]
fn a_one_node_move_with_real_training_never_runs_two_trainings() {
    let _one = serial();
    let job = "one-move";
    let samples = 50_000;
    // The price rise comes 60 s in: the training runs well before, and far from its end.
    let c = Cluster::start_on(
        job,
        |d| two_zones(d, 12),
        |d| spot_spec(d, job, "1", samples),
        PRICES_EVERY_5_S,
    );
    let work = c.dir.path().to_path_buf();
    let referee = Referee::watch(&c);
    let old = c.instances(1)[0].clone();
    let mut a = agent_on(&c, &old, &work, samples, &[]);
    // The move's new node appears; its agent starts at once, as a boot script would.
    let until = Instant::now() + Duration::from_secs(150);
    let new = loop {
        if let Some(id) = instance_ids(&c).into_iter().find(|i| *i != old) {
            break id;
        }
        assert!(
            Instant::now() < until,
            "no move: {}\n{}",
            c.status(),
            a.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut b = agent_on(&c, &new, &work, samples, &[]);
    let status = a.wait(Duration::from_secs(120));
    assert!(status.success(), "the old node's agent: {}", a.log());
    let status = b.wait(Duration::from_secs(240));
    assert!(status.success(), "the new node's agent: {}", b.log());
    assert!(b.log().contains("waiting to start"), "{}", b.log());
    assert_eq!(gone(job, Duration::from_secs(10)), Ok(()));
    let s = c.status();
    assert_eq!(s["state"], "finished", "{s}");
    // The answers the simulated workers get for the same move (`twin_tests`).
    assert_eq!(of_agent_log(&a.log()), answers::LEAVING, "{}", a.log());
    assert_eq!(of_agent_log(&b.log()), answers::MOVED_TO, "{}", b.log());
    let log = work.join("train.jsonl");
    one_writer_at_a_time(&log);
    let kinds: Vec<String> = super::job_events(&c).into_iter().map(|(k, _)| k).collect();
    assert!(kinds.iter().any(|k| k == "migrated"), "{kinds:?}");
    // Released within 10 s of its agent's last report (the durable checkpoint).
    let seen = referee.finish(&c, last_save(&log));
    assert!(seen.incarnations.len() >= 2, "{seen:?}");
    let took = seen
        .released
        .get(&old)
        .expect("the old node released after its report");
    eprintln!("the old node was released {took:?} after its agent's last report");
}

/// The samples of the script's last checkpoint, from its log.
fn last_save(log: &Path) -> Option<f64> {
    events(log)
        .iter()
        .filter(|e| e["event"] == "checkpoint")
        .filter_map(|e| e["samples"].as_f64())
        .next_back()
}

/// The script's log: each line's incarnation (from its process's `start`) never goes back,
/// and the new incarnation resumed from the old one's last checkpoint.
pub(super) fn one_writer_at_a_time(log: &Path) {
    let ev = events(log);
    let mut of_pid: BTreeMap<i64, i64> = BTreeMap::new();
    let mut last = 0;
    let mut saved: BTreeMap<i64, f64> = BTreeMap::new();
    let mut resumed: BTreeMap<i64, f64> = BTreeMap::new();
    for e in &ev {
        let pid = e["pid"].as_i64().expect("pid");
        if e["event"] == "start" {
            let k = e["incarnation"].as_i64().expect("incarnation");
            of_pid.insert(pid, k);
            // The incarnation's first start (torchrun may restart an elastic group within it).
            if let Some(r) = e["resumed_from"].as_f64() {
                resumed.entry(k).or_insert(r);
            }
        }
        let k = *of_pid.get(&pid).expect("a start first");
        assert!(k >= last, "incarnation {k} wrote after {last}: {ev:?}");
        last = k;
        if e["event"] == "checkpoint" {
            saved.insert(k, e["samples"].as_f64().expect("samples"));
        }
    }
    let ks: Vec<i64> = of_pid
        .values()
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(ks.len() >= 2, "{ks:?}");
    for pair in ks.windows(2) {
        if let Some(s) = saved.get(&pair[0]) {
            assert_eq!(resumed.get(&pair[1]), Some(s), "{ev:?}");
        }
    }
}

#[test]
fn an_elastic_two_node_move_with_real_training_never_runs_two_trainings() {
    let _one = serial();
    let job = "elastic-move";
    let samples = 60_000;
    let c = Cluster::start_on(
        job,
        |d| two_zones(d, 8),
        // Elastic from two to three nodes: the planner runs it on two.
        |d| spot_spec(d, job, "{ min = 2, max = 3 }", samples),
        PRICES_EVERY_5_S,
    );
    let work = c.dir.path().to_path_buf();
    let referee = Referee::watch(&c);
    // Placed on two nodes before any agent starts.
    c.instances(2);
    let endpoint = format!("127.0.0.1:{}", super::common::free_port());
    let elastic = [
        "--nnodes",
        "2:3",
        "--rdzv-endpoint",
        &endpoint,
        "--rdzv-conf",
        "last_call_timeout=2",
    ];
    // An agent on every instance the job gets, as a boot script would start it.
    let mut agents: BTreeMap<String, Agent> = BTreeMap::new();
    let mut exited: BTreeSet<String> = BTreeSet::new();
    let until = Instant::now() + Duration::from_secs(420);
    loop {
        let s = c.status();
        for id in instance_ids(&c) {
            if let std::collections::btree_map::Entry::Vacant(slot) = agents.entry(id.clone()) {
                slot.insert(agent_on(&c, &id, &work, samples, &elastic));
            }
        }
        for (id, a) in agents.iter_mut() {
            if a.child.try_wait().expect("wait").is_some() {
                exited.insert(id.clone());
            }
        }
        if s["state"] == "finished" && exited.len() == agents.len() {
            break;
        }
        assert!(Instant::now() < until, "{s}");
        std::thread::sleep(Duration::from_millis(200));
    }
    for (id, a) in agents.iter_mut() {
        let status = a.wait(Duration::from_secs(5));
        assert!(status.success(), "{id}: {}", a.log());
    }
    let kinds: Vec<String> = super::job_events(&c).into_iter().map(|(k, _)| k).collect();
    assert!(kinds.iter().any(|k| k == "migrated"), "{kinds:?}");
    let log = work.join("train.jsonl");
    one_writer_at_a_time(&log);
    // Every node the move left was released within 10 s of its agent's last report.
    let seen = referee.finish(&c, last_save(&log));
    assert!(
        !seen.released.is_empty(),
        "no node left while the job ran: {seen:?}"
    );
    eprintln!(
        "released after their agents' last reports: {:?}",
        seen.released
    );
}
