//! Stop paths of a real training that only a real agent meets: the checkpoint a cancel saves
//! on the way out is the job's, a script whose own step limit is below the job's work fails
//! the job instead of restarting forever, and a wedged training is caught and restarted.

use std::time::{Duration, Instant};

use super::{
    Cluster, Referee, answers, checkpoint_in, gone, of_agent_log, of_incarnation, run_with, serial,
    signal, training_processes,
};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// Wait until the controller shows the job holding no instance; how long that took.
fn released(c: &Cluster, within: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let s = c.status();
        if s["instance_ids"].as_array().is_some_and(|a| a.is_empty()) {
            return t0.elapsed();
        }
        assert!(t0.elapsed() < within, "still held: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The kinds of the job's events, in order.
fn kinds(c: &Cluster) -> Vec<String> {
    super::job_events(c).into_iter().map(|(k, _)| k).collect()
}

#[test]
fn a_cancel_records_the_checkpoint_the_training_saved_on_the_way_out() {
    let _one = serial();
    let c = Cluster::start("cancel-saves", 30_000, 5000);
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    // No periodic checkpoint: the only one is the save on the agent's signal.
    let never = ["--checkpoint-every", "1000000"];
    let (mut agent, progress) = run_with(&c, &id, "plain_loop.py", "1", &[], &never);
    super::wait_for_samples(&progress, 2000.0, Duration::from_secs(60), &agent);
    assert_eq!(c.status()["checkpoint_samples"].as_f64(), Some(0.0));
    assert!(c.tern(&["cancel", "cancel-saves"]).status.success());
    assert!(
        agent.wait(Duration::from_secs(60)).success(),
        "{}",
        agent.log()
    );
    let on_disk = checkpoint_in(&progress);
    assert!(on_disk >= 2000.0, "{}", agent.log());
    // The answers the simulated workers get for a cancel (`budget_tests`).
    assert_eq!(
        of_agent_log(&agent.log()),
        answers::CANCEL,
        "{}",
        agent.log()
    );
    let s = c.status();
    assert_eq!(s["state"], "cancelled", "{s}");
    assert_eq!(s["checkpoint_samples"].as_f64(), Some(on_disk), "{s}");
    // Kept while the agent saved, released once it said its workers stopped.
    let took = released(&c, Duration::from_secs(10));
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(gone("cancel-saves", Duration::ZERO), Ok(()));
    referee.finish(&c, Some(on_disk));
}

#[test]
fn a_training_that_exits_0_early_every_time_fails_the_job_saying_so() {
    let _one = serial();
    let c = Cluster::start("exits-early", 30_000, 5000);
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    // Its own limit: five steps a start, then a save and exit 0; every start makes progress.
    let work = c.dir.path().to_path_buf();
    let progress = work.join("progress.json");
    let ckpt = work.join("ckpt.pt");
    let train = format!("{REPO}/tests/training/plain_loop.py");
    let p = progress.to_str().expect("utf-8");
    let mut agent = c.agent(
        &id,
        &work,
        &[
            "--progress-file",
            p,
            "--launcher",
            "none",
            "--max-restarts",
            "2",
        ],
        &[
            "python",
            &train,
            "--ckpt",
            ckpt.to_str().expect("utf-8"),
            "--total-samples",
            "30000",
            "--max-steps",
            "5",
        ],
    );
    let status = agent.wait(Duration::from_secs(90));
    assert!(!status.success(), "{}", agent.log());
    let log = agent.log();
    assert_eq!(
        log.matches("exited 0 with the job's work not done").count(),
        2,
        "{log}"
    );
    let s = c.status();
    assert_eq!(s["state"], "failed", "{s}");
    let reason = s["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("exited 0 at"), "{reason}");
    assert!(
        reason.contains("of 30000 samples, 3 times in a row"),
        "{reason}"
    );
    // Three starts of five steps of 16 samples each, all saved.
    assert_eq!(checkpoint_in(&progress), 240.0, "{log}");
    assert_eq!(gone("exits-early", Duration::ZERO), Ok(()));
    referee.finish(&c, Some(240.0));
}

#[test]
fn a_training_that_hangs_is_stopped_and_restarted_from_its_checkpoint() {
    let _one = serial();
    let c = Cluster::start("hangs", 30_000, 5000);
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    let agent_args = ["--hang-timeout", "10", "--stop-grace", "3"];
    let (agent, progress) = run_with(&c, &id, "plain_loop.py", "1", &agent_args, &[]);
    super::wait_for_samples(&progress, 1000.0, Duration::from_secs(60), &agent);
    // Wedge the whole tree, as a collective that never returns would.
    let first = of_incarnation("hangs", 1);
    assert!(!first.is_empty());
    for pid in &first {
        signal(*pid as u32, "-STOP");
    }
    let saved = checkpoint_in(&progress);
    agent.wait_for_log("the training hangs", Duration::from_secs(30));
    agent.wait_for_log("incarnation 2 on", Duration::from_secs(30));
    // Nothing of the wedged incarnation is left, stopped processes included.
    let until = Instant::now() + Duration::from_secs(10);
    while !of_incarnation("hangs", 1).is_empty() {
        assert!(Instant::now() < until, "{}", agent.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    // The new incarnation resumed from the checkpoint and trains on.
    super::wait_for_samples(&progress, saved + 500.0, Duration::from_secs(60), &agent);
    assert!(kinds(&c).iter().any(|k| k == "hung"), "{:?}", kinds(&c));
    assert!(
        training_processes("hangs").len() >= 2,
        "torchrun and its worker"
    );
    assert!(c.tern(&["cancel", "hangs"]).status.success());
    let mut agent = agent;
    assert!(
        agent.wait(Duration::from_secs(60)).success(),
        "{}",
        agent.log()
    );
    assert_eq!(gone("hangs", Duration::ZERO), Ok(()));
    let seen = referee.finish(&c, Some(checkpoint_in(&progress)));
    assert!(seen.incarnations.len() >= 2, "{seen:?}");
}

#[test]
fn a_budget_stop_reaches_the_real_agent_and_keeps_its_checkpoint() {
    let _one = serial();
    let c = Cluster::start("over-budget", 30_000, 5000);
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    // No periodic checkpoint: the only one is the save the budget's drain asks for.
    let never = ["--checkpoint-every", "1000000"];
    let (mut agent, progress) = run_with(&c, &id, "plain_loop.py", "1", &[], &never);
    super::wait_for_samples(&progress, 1000.0, Duration::from_secs(60), &agent);
    assert_eq!(c.status()["checkpoint_samples"].as_f64(), Some(0.0));
    // An operator cuts the team's budget below what it has spent: its jobs end over budget at
    // once, and their agents checkpoint on the way out (the instances are kept for that).
    let quota = "[team.ml]\ntotal_usd = 0.0001\non_exhausted = \"drain\"\n";
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let http = tern::http::client().expect("http");
    let url = format!("{}/v1/quotas", c.server);
    let put = async {
        let req = http.put(url).bearer_auth(super::TOKEN).body(quota);
        req.send().await
    };
    let answer = rt.block_on(put).expect("PUT /v1/quotas");
    assert!(answer.status().is_success(), "{}", answer.status());
    assert!(
        agent.wait(Duration::from_secs(90)).success(),
        "{}",
        agent.log()
    );
    let log = agent.log();
    assert!(log.contains("sending SIGTERM"), "{}\n{log}", c.status());
    // The answers the simulated workers get for the same cut (`budget_tests`): the job ended
    // at once, so the report is a 409 `done`, and the last report is taken.
    assert_eq!(of_agent_log(&log), answers::BUDGET_CUT, "{log}");
    let on_disk = checkpoint_in(&progress);
    assert!(on_disk >= 1000.0, "{}", agent.log());
    let until = Instant::now() + Duration::from_secs(20);
    while c.status()["state"] != "over-budget" {
        assert!(Instant::now() < until, "{}", c.status());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(c.status()["checkpoint_samples"].as_f64(), Some(on_disk));
    let took = released(&c, Duration::from_secs(10));
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(gone("over-budget", Duration::ZERO), Ok(()));
    referee.finish(&c, Some(on_disk));
}

/// A training that ignores the checkpoint signal: the agent kills it at the grace, and the
/// job keeps the last checkpoint the training itself made durable, no later one.
#[test]
fn a_training_that_ignores_the_signal_is_killed_at_the_grace_and_keeps_its_last_checkpoint() {
    let _one = serial();
    let c = Cluster::start("deaf", 30_000, 5000);
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    let work = c.dir.path().to_path_buf();
    let log = work.join("train.jsonl");
    let log_arg = log.to_str().expect("utf-8").to_string();
    let script = [
        "--ignore-signal",
        "--checkpoint-every",
        "10",
        "--log-file",
        &log_arg,
    ];
    let (mut agent, progress) = run_with(
        &c,
        &id,
        "plain_loop.py",
        "1",
        &["--stop-grace", "3"],
        &script,
    );
    super::wait_for_samples(&progress, 1000.0, Duration::from_secs(60), &agent);
    let asked = Instant::now();
    assert!(c.tern(&["cancel", "deaf"]).status.success());
    assert!(
        agent.wait(Duration::from_secs(60)).success(),
        "{}",
        agent.log()
    );
    let took = asked.elapsed();
    let text = agent.log();
    assert!(text.contains("left at the grace: killing them"), "{text}");
    assert!(
        took >= Duration::from_secs(3),
        "killed before the grace: {took:?}"
    );
    assert_eq!(gone("deaf", Duration::ZERO), Ok(()));
    // Never a stop of its own: the training was killed, and the job has the checkpoint the
    // progress file says is durable (the log's last save, or the one just before it when the
    // kill fell between the save and the progress file).
    let ev = super::events(&log);
    assert!(!ev.iter().any(|e| e["event"] == "stop"), "{ev:?}");
    let saves: Vec<f64> = ev
        .iter()
        .filter(|e| e["event"] == "checkpoint")
        .filter_map(|e| e["samples"].as_f64())
        .collect();
    let on_disk = checkpoint_in(&progress);
    let last_two = &saves[saves.len().saturating_sub(2)..];
    assert!(
        on_disk > 0.0 && last_two.contains(&on_disk),
        "{on_disk} {saves:?}"
    );
    let s = c.status();
    assert_eq!(s["checkpoint_samples"].as_f64(), Some(on_disk), "{s}");
    let took = released(&c, Duration::from_secs(10));
    assert!(took < Duration::from_secs(10), "{took:?}");
    referee.finish(&c, Some(on_disk));
}

/// The agent is killed (SIGKILL) and started again at once on the same instance, as systemd
/// restarts it (`Restart=on-failure` in the worker templates, 10 s later; here sooner). The
/// old training ignores the checkpoint signal, so the dead agent's watchdog ends it only at
/// the 5-s grace: the new agent waits for it rather than start a second training beside it,
/// then resumes from the checkpoint on disk.
#[test]
fn an_agent_killed_and_restarted_never_trains_beside_its_old_tree() {
    let _one = serial();
    let c = Cluster::start("restarted", 30_000, 5000);
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    let log = c.dir.path().join("train.jsonl");
    let log_arg = log.to_str().expect("utf-8").to_string();
    let deaf = [
        "--ignore-signal",
        "--checkpoint-every",
        "10",
        "--log-file",
        &log_arg,
    ];
    let grace = ["--stop-grace", "5"];
    let (mut agent, progress) = run_with(&c, &id, "plain_loop.py", "1", &grace, &deaf);
    super::wait_for_samples(&progress, 1000.0, Duration::from_secs(60), &agent);
    signal(agent.child.id(), "-KILL");
    let _ = agent.wait(Duration::from_secs(5));
    assert!(
        !of_incarnation("restarted", 1).is_empty(),
        "the old tree runs on"
    );
    let heeds = ["--checkpoint-every", "10", "--log-file", &log_arg];
    let (mut again, _) = run_with(&c, &id, "plain_loop.py", "1", &grace, &heeds);
    again.wait_for_log("earlier agent's training", Duration::from_secs(10));
    again.wait_for_log("incarnation 2 on", Duration::from_secs(30));
    assert!(of_incarnation("restarted", 1).is_empty(), "{}", again.log());
    let saved = checkpoint_in(&progress);
    super::wait_for_samples(&progress, saved + 500.0, Duration::from_secs(60), &again);
    assert!(c.tern(&["cancel", "restarted"]).status.success());
    assert!(
        again.wait(Duration::from_secs(60)).success(),
        "{}",
        again.log()
    );
    // Incarnation 2 resumed from incarnation 1's last save, and never wrote beside it.
    super::moves::one_writer_at_a_time(&log);
    referee.finish(&c, Some(checkpoint_in(&progress)));
}

/// A job's own budget runs out while it trains: the controller drains it through the report
/// the real agent makes, the agent checkpoints and makes its last report, and asking again it
/// is told the job is done (the answers the simulated workers get, `budget_tests`).
#[test]
fn a_jobs_own_budget_running_out_drains_the_real_agent_and_keeps_its_checkpoint() {
    let _one = serial();
    // One spot node at $0.90/h: $0.05 is about 200 s of it, less the drain's lead (the
    // controller stops a job whose spend will reach its budget within the time a drain
    // takes), and the work (30000 samples at about 80 a second) needs more. The spec claims a
    // step 20 times faster than the real one, so the planner expects the job within its
    // budget and places it.
    let tail = format!(
        "{}[budget]\ntotal_usd = 0.05\n",
        super::observed(0.01, 0.01)
    );
    let c = Cluster::start_with("own-budget", 5000, |d| {
        let top = "capacity = \"spot-only\"\n";
        super::write_spec(d, "own-budget", "1", top, 30_000, &tail)
    });
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    let never = ["--checkpoint-every", "1000000", "--step-sleep", "0.2"];
    let (mut agent, progress) = run_with(&c, &id, "plain_loop.py", "1", &[], &never);
    assert!(
        agent.wait(Duration::from_secs(360)).success(),
        "{}",
        agent.log()
    );
    let log = agent.log();
    assert_eq!(of_agent_log(&log), answers::BUDGET_STOP, "{log}");
    let s = c.status();
    assert_eq!(s["state"], "over-budget", "{s}");
    let on_disk = checkpoint_in(&progress);
    assert!(on_disk > 0.0 && on_disk < 30_000.0, "{on_disk}");
    assert!(
        kinds(&c).iter().any(|k| k == "over-budget"),
        "{:?}",
        kinds(&c)
    );
    referee.finish(&c, Some(on_disk));
}
