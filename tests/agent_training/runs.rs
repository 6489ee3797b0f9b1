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
    let command = format!(
        "[\"python\", \"{REPO}/tests/training/plain_loop.py\", \"--ckpt\", \"ckpt.pt\", \
         \"--total-samples\", \"3000\", \"--step-sleep\", \"0.02\", \"--max-steps\", \"{steps}\"]"
    );
    spec_running(dir, name, &command, setup, &work)
}

/// A one-node spot job whose `[run]` runs `command` (TOML) in `work` after `setup`.
fn spec_running(
    dir: &Path,
    name: &str,
    command: &str,
    setup: &str,
    work: &Path,
) -> std::path::PathBuf {
    let tail = format!(
        "{obs}[run]\ncommand = {command}\nsetup = {setup:?}\nworkdir = {work:?}\n\
         launcher = \"none\"\nmax_restarts = 10\n\
         [run.env]\nGREETING = \"hello from the job's env\"\n",
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

/// Two teams' jobs on one controller, each with its own `[run]`, and an agent with no command
/// on each job's instance: each runs its own job's program.
#[test]
fn two_jobs_on_one_controller_each_run_their_own_program() {
    let _one = serial();
    let dir_of = |d: &Path, j: &str| d.join(format!("work-{j}"));
    let program = |j: &str| {
        format!(
            "\"echo program-{j} >> ran.txt && exec python {REPO}/tests/training/plain_loop.py \
             --ckpt ckpt.pt --total-samples 3000 --step-sleep 0.02\""
        )
    };
    let c = Cluster::start_with("job-a", 5000, |d| {
        spec_running(d, "job-a", &program("a"), "", &dir_of(d, "job-a"))
    });
    let referee = Referee::watch(&c);
    let b = spec_running(
        c.dir.path(),
        "job-b",
        &program("b"),
        "",
        &dir_of(c.dir.path(), "job-b"),
    );
    let out = c.tern(&["submit", b.to_str().expect("utf-8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let a = c.instances(1)[0].clone();
    let until = std::time::Instant::now() + Duration::from_secs(60);
    let b_id = loop {
        let ids = c.status_of("job-b")["instance_ids"].clone();
        if let Some(id) = ids.get(0).and_then(|v| v.as_str()) {
            break id.to_string();
        }
        assert!(std::time::Instant::now() < until, "job-b never placed");
        std::thread::sleep(Duration::from_millis(200));
    };
    // Both agents at once, each with no command.
    let mut agents: Vec<_> = [("job-a", a), ("job-b", b_id)]
        .into_iter()
        .map(|(job, id)| {
            let progress = c.dir.path().join(format!("progress-{job}.json"));
            let p = progress.to_str().expect("utf-8").to_string();
            let args = ["--progress-file", p.as_str()];
            (job, c.agent_of(job, &id, c.dir.path(), &args, &[]))
        })
        .collect();
    for (job, agent) in &mut agents {
        let status = agent.wait(Duration::from_secs(120));
        assert!(status.success(), "{job}: {}", agent.log());
    }
    for j in ["a", "b"] {
        let ran =
            std::fs::read_to_string(dir_of(c.dir.path(), &format!("job-{j}")).join("ran.txt"))
                .expect("ran.txt");
        assert_eq!(ran.trim(), format!("program-{j}"), "job-{j}");
    }
    assert_eq!(c.status()["state"], "finished");
    referee.finish(&c, None);
}

/// A job without `[run]` and an agent with no command: the agent exits at once, saying what to
/// give it, and nothing starts.
#[test]
fn an_agent_with_no_command_for_a_job_without_a_run_section_says_what_is_missing() {
    let _one = serial();
    let c = Cluster::start("no-run", 3000, 5000);
    let id = c.instances(1)[0].clone();
    let progress = c.dir.path().join("progress.json");
    let p = progress.to_str().expect("utf-8");
    let mut agent = c.agent(&id, c.dir.path(), &["--progress-file", p], &[]);
    assert!(!agent.wait(Duration::from_secs(30)).success());
    let log = agent.log();
    assert!(log.contains("no command after `--`"), "{log}");
    assert!(log.contains("job no-run has no [run]"), "{log}");
    assert_eq!(c.status()["checkpoint_samples"].as_f64(), Some(0.0));
    assert!(!log.contains("incarnation"), "{log}");
}
