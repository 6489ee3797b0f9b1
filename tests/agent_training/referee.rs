//! What every stop path must hold, watched for a whole test: never two trainings of the job
//! at once (a `/proc` scan every 50 ms: processes of two incarnations alive together, or two
//! process trees on one instance), the checkpoint the controller recorded is the one on disk,
//! no process left, and each instance released while it was held is released within 10 s of
//! its agent's last report (the durable checkpoint).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Cluster, TOKEN, gone, training_processes};

/// What an agent logs once its last report (the workers stopped, the checkpoint durable) is
/// taken.
pub const LAST_REPORT: &str = "reported the workers stopped";

/// The longest an instance may stay held after its agent's last report.
pub const RELEASE_WITHIN: Duration = Duration::from_secs(10);

/// Watches a cluster's job from its start; [`Referee::finish`] says what it saw.
pub struct Referee {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Seen>>,
}

impl Drop for Referee {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

#[derive(Debug, Default)]
pub struct Seen {
    /// Scans that found two trainings at once: the incarnations, and each instance's trees.
    pub together: Vec<String>,
    /// Every incarnation whose processes were seen.
    pub incarnations: BTreeSet<String>,
    /// Instances released after their agent's last report: how long after it.
    pub released: BTreeMap<String, Duration>,
    /// Instances released with no last report from their agent (the job's end releases every
    /// node at once; an agent that was killed reports nothing).
    pub released_unreported: BTreeSet<String>,
}

/// The marks of one training process: its incarnation, instance and tree.
fn marks(pid: i32) -> Option<(String, String, String)> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let get = |key: &[u8]| {
        env.split(|b| *b == 0)
            .find_map(|kv| kv.strip_prefix(key))
            .map(|v| String::from_utf8_lossy(v).to_string())
    };
    Some((
        get(b"TERN_INCARNATION=")?,
        get(b"TERN_INSTANCE=")?,
        get(b"TERN_TREE=")?,
    ))
}

/// One `/proc` scan: a line saying why, when two trainings of `job` run at once.
fn scan(job: &str, seen: &mut Seen) {
    let mut incarnations = BTreeSet::new();
    let mut trees: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for pid in training_processes(job) {
        if let Some((k, instance, tree)) = marks(pid) {
            incarnations.insert(k);
            trees.entry(instance).or_default().insert(tree);
        }
    }
    let doubled = trees.values().any(|t| t.len() > 1);
    if incarnations.len() > 1 || doubled {
        seen.together
            .push(format!("incarnations {incarnations:?}, trees {trees:?}"));
    }
    seen.incarnations.extend(incarnations);
}

/// Each agent whose workers are stopped, by instance (from `agent-ID.log` in `dir`): how many
/// last reports its log shows, when no incarnation started after the latest.
fn last_reports(dir: &Path) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (id, path) in agent_logs(dir) {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        let (mut n, mut stopped) = (0, false);
        for line in log.lines() {
            if line.contains(LAST_REPORT) {
                n += 1;
                stopped = true;
            } else if line.starts_with("tern agent: incarnation ") {
                stopped = false;
            }
        }
        if stopped {
            out.insert(id.to_string(), n);
        }
    }
    out
}

/// Each instance's agent log: `agent-ID.log` in the test's folder (agents the test started),
/// or `state.db.hosts/ID/agent.log` (agents `--local-agents` started).
fn agent_logs(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if let Some(id) = name
            .strip_prefix("agent-")
            .and_then(|n| n.strip_suffix(".log"))
        {
            out.push((id.to_string(), entry.path()));
        }
    }
    let hosts = dir.join("state.db.hosts");
    for entry in std::fs::read_dir(hosts).into_iter().flatten().flatten() {
        let id = entry.file_name().to_string_lossy().to_string();
        out.push((id, entry.path().join("agent.log")));
    }
    out
}

/// The job's instances now (`None` when the controller did not answer).
fn instance_ids(server: &str, job: &str) -> Option<BTreeSet<String>> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["status", job, "--json", "--server", server])
        .env("TERN_TOKEN", TOKEN)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(text.lines().last()?).ok()?;
    let job = &v["jobs"][0];
    job["instance_ids"]
        .is_array()
        .then(|| super::ids_in(job).into_iter().collect())
}

/// The watch loop: `/proc` every 50 ms, the agents' logs and the job's instances every 200.
fn watch(server: String, job: String, dir: PathBuf, stop: Arc<AtomicBool>) -> Seen {
    let mut seen = Seen::default();
    let mut reported: BTreeMap<String, (usize, Instant)> = BTreeMap::new();
    let mut held: BTreeSet<String> = BTreeSet::new();
    let mut k = 0u64;
    while !stop.load(Ordering::SeqCst) {
        scan(&job, &mut seen);
        k += 1;
        if k.is_multiple_of(4) {
            let stopped = last_reports(&dir);
            reported.retain(|id, _| stopped.contains_key(id));
            for (id, n) in stopped {
                if reported.get(&id).is_none_or(|(m, _)| *m != n) {
                    reported.insert(id, (n, Instant::now()));
                }
            }
            if let Some(now) = instance_ids(&server, &job) {
                // A last report written while the status call ran (the release follows it
                // within the call on a busy machine): read the logs again before calling a
                // release unreported.
                if held.difference(&now).any(|id| !reported.contains_key(id)) {
                    for (id, n) in last_reports(&dir) {
                        reported.entry(id).or_insert((n, Instant::now()));
                    }
                }
                for id in held.difference(&now) {
                    match reported.get(id) {
                        Some((_, at)) => {
                            seen.released.insert(id.clone(), at.elapsed());
                        }
                        None => {
                            seen.released_unreported.insert(id.clone());
                        }
                    }
                }
                held = now;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    seen
}

impl Referee {
    /// Watch `c`'s job from now on.
    pub fn watch(c: &Cluster) -> Referee {
        let stop = Arc::new(AtomicBool::new(false));
        let (server, job) = (c.server.clone(), c.job.clone());
        let dir = c.dir.path().to_path_buf();
        let flag = stop.clone();
        let handle = std::thread::spawn(move || watch(server, job, dir, flag));
        Referee {
            stop,
            handle: Some(handle),
        }
    }

    /// Stop watching once nothing of the job is left (within 10 s), and check what every stop
    /// path must hold. `on_disk`: the checkpoint the training made durable last, which the
    /// controller must show (`None` where the test checks it itself). What was seen.
    pub fn finish(mut self, c: &Cluster, on_disk: Option<f64>) -> Seen {
        let left = gone(&c.job, Duration::from_secs(10));
        // A job that ended holds nothing once its agents made their last reports.
        let state = c.status()["state"].as_str().unwrap_or_default().to_string();
        let ended = ["finished", "cancelled", "failed", "over-budget"].contains(&state.as_str());
        let until = Instant::now() + RELEASE_WITHIN;
        let empty = || {
            c.status()["instance_ids"]
                .as_array()
                .is_some_and(|a| a.is_empty())
        };
        while ended && !empty() {
            assert!(
                Instant::now() < until,
                "still held after the job ended: {}",
                c.status()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // The watcher sees the last release.
        std::thread::sleep(Duration::from_millis(300));
        self.stop.store(true, Ordering::SeqCst);
        let seen = self
            .handle
            .take()
            .expect("watching")
            .join()
            .expect("the referee");
        assert_eq!(left, Ok(()), "processes left: {seen:?}");
        assert!(seen.together.is_empty(), "two trainings at once: {seen:?}");
        if let Some(d) = on_disk {
            // The controller counts no more than the job's work (a last step may overshoot).
            let s = c.status();
            let total = s["total_samples"].as_f64().expect("total_samples");
            assert_eq!(s["checkpoint_samples"].as_f64(), Some(d.min(total)), "{s}");
        }
        for (id, took) in &seen.released {
            assert!(
                *took < RELEASE_WITHIN,
                "{id} released {took:?} after its agent's last report: {seen:?}"
            );
        }
        seen
    }
}
