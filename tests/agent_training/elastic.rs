//! A two-node elastic job loses a node to a cloud notice and finishes on the other.

use super::*;

#[test]
fn a_two_node_elastic_job_loses_a_node_to_a_notice_and_finishes_on_the_other() {
    let _one = serial();
    // The reclaim is 35 ticks of 5 s away: its 120 s notice comes ~55 s after the start,
    // well after the training started even on a busy machine, well before it ends.
    let c = Cluster::start("elastic", 30_000, 35);
    let referee = Referee::watch(&c);
    let ids = c.instances(2);
    let work = c.dir.path();
    let ckpt = work.join("ckpt.pt");
    let log = work.join("train.jsonl");
    let endpoint = format!("127.0.0.1:{}", free_port());
    let run = |id: &str| {
        let progress = work.join(format!("progress-{id}.json"));
        let p = progress.to_str().expect("utf-8").to_string();
        c.agent(
            id,
            work,
            &[
                "--progress-file",
                &p,
                "--nnodes",
                "1:2",
                "--nproc-per-node",
                "1",
                "--rdzv-endpoint",
                &endpoint,
                "--rdzv-conf",
                "last_call_timeout=2",
                "--stop-grace",
                "30",
            ],
            &[
                "python3",
                &train_ddp(),
                "--ckpt",
                ckpt.to_str().expect("utf-8"),
                "--total-samples",
                "30000",
                "--batch",
                "32",
                "--step-sleep",
                "0.15",
                "--checkpoint-every",
                "25",
                "--log-file",
                log.to_str().expect("utf-8"),
            ],
        )
    };
    let mut a = run(&ids[0]);
    let mut b = run(&ids[1]);
    let (leaving, staying) = after_the_notice(&c, &mut a, &mut b, &log);
    // The answers the simulated workers get for the same notice and regroup (`twin_tests`).
    assert_eq!(of_agent_log(&leaving), answers::LEAVING, "{leaving}");
    assert_eq!(of_agent_log(&staying), answers::REGROUPED, "{staying}");
    let saved = events(&log)
        .iter()
        .filter(|e| e["event"] == "checkpoint")
        .filter_map(|e| e["samples"].as_f64())
        .next_back();
    referee.finish(&c, saved);
}

/// The two-node test from the notice on: one agent drains, the other finishes the job. The
/// leaving and the staying agent's logs.
fn after_the_notice(c: &Cluster, a: &mut Agent, b: &mut Agent, log: &Path) -> (String, String) {
    // Which node the cloud reclaims is its choice: the one whose agent drains.
    let until = Instant::now() + Duration::from_secs(150);
    let (leaving, staying) = loop {
        if a.log().contains("drain: sending") {
            break (a, b);
        }
        if b.log().contains("drain: sending") {
            break (b, a);
        }
        assert!(
            Instant::now() < until,
            "no drain:\nA: {}\nB: {}",
            a.log(),
            b.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let status = leaving.wait(Duration::from_secs(60));
    assert!(status.success(), "the leaving agent: {}", leaving.log());
    // The drain's checkpoint is the one the controller recorded, no further.
    let ev = events(log);
    let stop = ev
        .iter()
        .find(|e| e["event"] == "stop")
        .cloned()
        .expect("the drain's stop");
    let saved = ev
        .iter()
        .filter(|e| e["event"] == "checkpoint")
        .filter_map(|e| e["samples"].as_f64())
        .next_back()
        .expect("a checkpoint");
    assert_eq!(stop["samples"].as_f64(), Some(saved), "{ev:?}");
    let s = c.status();
    assert_eq!(s["checkpoint_samples"].as_f64(), Some(saved), "{s}");
    let status = staying.wait(Duration::from_secs(150));
    assert!(status.success(), "the staying agent: {}", staying.log());
    assert_eq!(gone(&c.job, Duration::from_secs(10)), Ok(()));
    assert_eq!(c.status()["state"], "finished", "{}", c.status());
    // The survivor resumed from the drain's checkpoint, at one worker instead of two.
    let ev = events(log);
    let starts: Vec<&serde_json::Value> = ev.iter().filter(|e| e["event"] == "start").collect();
    assert!(starts.iter().any(|e| e["world_size"] == 2), "{ev:?}");
    let resumed = starts
        .iter()
        .find(|e| e["world_size"] == 1)
        .expect("a one-worker start");
    assert_eq!(resumed["resumed_from"].as_f64(), Some(saved), "{ev:?}");
    assert_eq!(resumed["incarnation"], 2, "{ev:?}");
    (leaving.log(), staying.log())
}
