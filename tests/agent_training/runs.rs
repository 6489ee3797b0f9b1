//! A job that carries what it runs (`[run]`): an agent started with nothing after `--` fetches
//! the job's command, setup, env, working directory and options from the controller and runs
//! them; a setup that fails fails the job with its own words.

use std::path::Path;
use std::time::Duration;

use super::{Cluster, Referee, checkpoint_in, observed, serial, write_spec};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// A one-node spot job whose `[run]` trains `plain_loop.py` in `work`, `steps` steps a start
/// (then it saves and exits 0, and the agent starts it again), with `setup` first.
fn run_spec(dir: &Path, name: &str, setup: &str, steps: u32) -> std::path::PathBuf {
    let work = dir.join("work");
    let tail = format!(
        "{obs}[run]\ncommand = [\"python\", \"{REPO}/tests/training/plain_loop.py\", \"--ckpt\", \
         \"ckpt.pt\", \"--total-samples\", \"3000\", \"--step-sleep\", \"0.02\", \"--max-steps\", \
         \"{steps}\"]\nsetup = {setup:?}\nworkdir = {work:?}\nlauncher = \"none\"\n\
         max_restarts = 10\n[run.env]\nGREETING = \"hello from the job's env\"\n",
        obs = observed(2.0, 2.1),
    );
    let top = "deadline = \"70m\"\ncapacity = \"spot-only\"\n";
    write_spec(dir, name, "1", top, 3000, &tail)
}

#[test]
fn an_agent_with_no_command_runs_the_jobs_own_run_section() {
    let _one = serial();
    let setup = "echo \"$GREETING\" > setup-ran.txt; echo once >> setup-count.txt";
    let c = Cluster::start_with("own-run", 5000, |d| run_spec(d, "own-run", setup, 60));
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    let work = c.dir.path().join("work");
    let progress = c.dir.path().join("progress.json");
    let p = progress.to_str().expect("utf-8");
    // Nothing after `--`: the job's [run] says what to run, where, and with which env.
    let mut agent = c.agent(&id, c.dir.path(), &["--progress-file", p], &[]);
    assert!(
        agent.wait(Duration::from_secs(180)).success(),
        "{}",
        agent.log()
    );
    let log = agent.log();
    assert!(log.contains("running job own-run's [run]: python"), "{log}");
    assert!(
        !log.contains("hello from"),
        "an env value in the agent's log: {log}"
    );
    let s = c.status();
    assert_eq!(s["state"], "finished", "{s}");
    let greeting = std::fs::read_to_string(work.join("setup-ran.txt")).expect("the setup ran");
    assert_eq!(greeting.trim(), "hello from the job's env");
    // The training ran in the workdir (its relative checkpoint is there), and started again
    // after each early exit (`max_restarts` from the [run]), but the setup ran once.
    assert!(work.join("ckpt.pt").exists());
    let starts = log.matches("tern agent: incarnation ").count();
    assert!(starts >= 2, "{log}");
    let count = std::fs::read_to_string(work.join("setup-count.txt")).expect("count");
    assert_eq!(count.lines().count(), 1, "{log}");
    referee.finish(&c, Some(checkpoint_in(&progress)));
}

#[test]
fn a_setup_that_fails_fails_the_job_with_its_own_last_lines() {
    let _one = serial();
    let setup =
        "echo 'resolving packages' >&2; echo 'no matching distribution for torchh' >&2; exit 3";
    let c = Cluster::start_with("bad-setup", 5000, |d| run_spec(d, "bad-setup", setup, 60));
    let referee = Referee::watch(&c);
    let id = c.instances(1)[0].clone();
    let progress = c.dir.path().join("progress.json");
    let p = progress.to_str().expect("utf-8");
    let mut agent = c.agent(&id, c.dir.path(), &["--progress-file", p], &[]);
    assert!(
        !agent.wait(Duration::from_secs(60)).success(),
        "{}",
        agent.log()
    );
    let s = c.status();
    assert_eq!(s["state"], "failed", "{s}");
    let reason = s["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("setup failed"), "{reason}");
    assert!(
        reason.contains("no matching distribution for torchh"),
        "{reason}"
    );
    assert!(
        !c.dir.path().join("work/ckpt.pt").exists(),
        "the training never started"
    );
    referee.finish(&c, None);
}
