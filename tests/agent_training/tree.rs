//! Every stop path ends the agent's whole process tree; a stale incarnation is refused and
//! its workers killed; a command that cannot start fails the job and says why.

use super::*;

#[test]
fn every_stop_path_ends_the_whole_tree() {
    let _one = serial();
    // A cloud notice (AWS metadata): checkpoint, stop, report, exit 0.
    // The agent reads its instance id from the metadata server too.
    let c = Cluster::start("by-notice", 30_000, 5000);
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    let noticed = Arc::new(AtomicBool::new(false));
    let url = fake_metadata(&id, noticed.clone());
    let notice = ["--notice", "aws", "--metadata-url", &url];
    let (mut agent, progress) = run_on(&c, &id, "train_ddp.py", "2", &notice);
    assert!(
        training_processes("by-notice").len() >= 3,
        "torchrun and two workers"
    );
    noticed.store(true, Ordering::SeqCst);
    assert!(
        agent.wait(Duration::from_secs(60)).success(),
        "{}",
        agent.log()
    );
    assert_eq!(gone("by-notice", Duration::ZERO), Ok(()), "{}", agent.log());
    let on_disk = checkpoint_in(&progress);
    assert!(on_disk > 0.0, "{}", agent.log());
    referee.finish(&c, Some(on_disk));
    drop(c);

    // A cancel: the next report is refused, the agent stops the training and exits 0.
    let (c, referee, mut agent, progress) = one_node("by-cancel", 30_000, &[]);
    assert!(c.tern(&["cancel", "by-cancel"]).status.success());
    assert!(
        agent.wait(Duration::from_secs(60)).success(),
        "{}",
        agent.log()
    );
    assert_eq!(gone("by-cancel", Duration::ZERO), Ok(()), "{}", agent.log());
    assert_eq!(of_agent_log(&agent.log()), answers::CANCEL);
    referee.finish(&c, Some(checkpoint_in(&progress)));
    drop(c);

    // SIGTERM to the agent: it drains and exits 0. The script speaks the contract without
    // the helper (its own SIGTERM handler and progress file).
    let c = Cluster::start("by-sigterm", 30_000, 5000);
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    let (mut agent, progress) = run_on(&c, &id, "plain_loop.py", "1", &[]);
    signal(agent.child.id(), "-TERM");
    assert!(
        agent.wait(Duration::from_secs(60)).success(),
        "{}",
        agent.log()
    );
    assert_eq!(
        gone("by-sigterm", Duration::ZERO),
        Ok(()),
        "{}",
        agent.log()
    );
    let on_disk = checkpoint_in(&progress);
    assert!(on_disk > 0.0, "{}", agent.log());
    referee.finish(&c, Some(on_disk));
    drop(c);

    // A Lightning job saving on SIGUSR1 (as Lightning's SLURM support does), through
    // torchrun, with the helper's callback; SIGTERM to the agent stops it.
    let c = Cluster::start("by-usr1", 30_000, 5000);
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    let usr1 = ["--checkpoint-signal", "SIGUSR1"];
    let (mut agent, progress) = run_on(&c, &id, "lightning_train.py", "1", &usr1);
    signal(agent.child.id(), "-TERM");
    assert!(
        agent.wait(Duration::from_secs(90)).success(),
        "{}",
        agent.log()
    );
    assert!(agent.log().contains("sending SIGUSR1"), "{}", agent.log());
    assert!(agent.log().contains("durable"), "{}", agent.log());
    assert_eq!(gone("by-usr1", Duration::ZERO), Ok(()), "{}", agent.log());
    let on_disk = checkpoint_in(&progress);
    assert!(on_disk > 0.0, "{}", agent.log());
    referee.finish(&c, Some(on_disk));
    drop(c);

    // SIGKILL to the agent: its watchdog ends the tree (the agent restarted after it is
    // `an_agent_killed_and_restarted_never_trains_beside_its_old_tree`).
    let (c, referee, mut agent, _) = one_node("by-sigkill", 30_000, &["--stop-grace", "5"]);
    signal(agent.child.id(), "-KILL");
    let _ = agent.wait(Duration::from_secs(5));
    assert_eq!(gone("by-sigkill", Duration::from_secs(20)), Ok(()));
    referee.finish(&c, None);
    drop(c);

    // The training ends by itself: the job is done, the agent exits 0.
    let (c, referee, mut agent, progress) = one_node("by-itself", 3_000, &[]);
    assert!(
        agent.wait(Duration::from_secs(120)).success(),
        "{}",
        agent.log()
    );
    assert_eq!(gone("by-itself", Duration::ZERO), Ok(()), "{}", agent.log());
    assert_eq!(c.status()["state"], "finished");
    // The answers the simulated workers get at the job's end (`twin_tests`).
    assert_eq!(
        of_agent_log(&agent.log()),
        answers::JOB_END,
        "{}",
        agent.log()
    );
    referee.finish(&c, Some(checkpoint_in(&progress)));
}

#[test]
fn a_stale_incarnation_is_refused_and_its_workers_killed() {
    let _one = serial();
    // Two incarnations overlap here on purpose (a stale one, refused): no referee's verdict.
    let (c, _referee, mut agent, _) = one_node("stale", 30_000, &[]);
    assert!(!of_incarnation("stale", 1).is_empty());
    let id = c.instances(1)[0].clone();
    let before = c.status()["checkpoint_samples"].as_f64();
    let (rt, api) = api(&c);
    // Another start on the same instance (an agent restarted beside a paused one): a new
    // incarnation opens, and incarnation 1 is stale from now on.
    let started = rt.block_on(api.start("stale", &id, None)).expect("start");
    assert_eq!(started.incarnation, 2);
    let stale = tern::api::wire::Progress {
        done_samples: 29_000.0,
        checkpoint_samples: 29_000.0,
        checkpointed: true,
        observation: None,
        incarnation: Some(1),
        instance: Some(id.clone()),
        stopped: false,
        failure: None,
        hung: false,
        crashed: false,
    };
    let err = rt
        .block_on(api.progress("stale", &stale))
        .expect_err("stale");
    assert_eq!(err.status(), Some(409), "{err}");
    assert_eq!(err.action(), Some(tern::api::wire::Action::Stop), "{err}");
    assert!(err.to_string().contains("stale"), "{err}");
    assert_eq!(
        c.status()["checkpoint_samples"].as_f64(),
        before,
        "moved nothing"
    );
    // The running agent's next report is refused the same way: it kills its workers at
    // once and starts again as a newer incarnation.
    agent.wait_for_log("killing the workers now", Duration::from_secs(20));
    let until = Instant::now() + Duration::from_secs(15);
    while !of_incarnation("stale", 1).is_empty() {
        assert!(Instant::now() < until, "{}", agent.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    agent.wait_for_log("incarnation 3 on", Duration::from_secs(20));
    assert!(c.tern(&["cancel", "stale"]).status.success());
    assert!(
        agent.wait(Duration::from_secs(60)).success(),
        "{}",
        agent.log()
    );
    assert_eq!(gone("stale", Duration::ZERO), Ok(()));
}

#[test]
fn a_command_that_cannot_start_fails_the_job_within_a_minute_and_says_why() {
    let _one = serial();
    let c = Cluster::start("broken", 3_000, 5000);
    let id = c.instances(1)[0].clone();
    let work = c.dir.path().to_path_buf();
    let t0 = Instant::now();
    let mut agent = c.agent(
        &id,
        &work,
        &["--progress-file", "progress.json", "--max-restarts", "2"],
        &["python3", "no_such_script.py", "--epochs", "3"],
    );
    let status = agent.wait(Duration::from_secs(60));
    assert!(!status.success(), "{}", agent.log());
    assert!(t0.elapsed() < Duration::from_secs(60));
    let log = agent.log();
    assert_eq!(log.matches("starting python3").count(), 3, "{log}");
    let s = c.status();
    assert_eq!(s["state"], "failed", "{s}");
    let reason = s["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("exit status"), "{reason}");
    assert!(reason.contains("no_such_script.py"), "{reason}");
    assert_eq!(gone("broken", Duration::ZERO), Ok(()));
}
