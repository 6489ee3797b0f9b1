//! The training's processes, owned as one tree.
//!
//! torchrun starts each worker in a session of its own (`start_new_session`), so a process
//! group does not hold them, and a SIGKILL to torchrun alone orphans them (DESIGN §5b). The
//! agent therefore marks the tree: every process it starts carries `TERN_TREE=<id>` in its
//! environment, which torchrun and Python pass on to every worker and subprocess. A member is
//! a process with that mark, or a descendant of the launcher; `/proc` is read for both, so a
//! worker that changed its session, or was reparented to init, is still found.
//!
//! Stopping is: the checkpoint signal to the launcher (torchrun forwards SIGTERM, SIGINT,
//! SIGHUP and SIGQUIT, and the others named in `TORCHELASTIC_SIGNALS_TO_HANDLE`), up to the
//! grace for the tree to exit, then SIGKILL to every member until none is left. If the agent
//! dies, a watchdog process (`tern agent-watchdog`) that holds the read end of a pipe from
//! the agent sees it close and stops the tree the same way.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process, kill_process_group};

/// The environment variable that marks the tree's processes.
pub const MARK: &str = "TERN_TREE";

/// A signal by name (`SIGTERM`, `TERM`, `usr1`, or a number).
pub fn parse_signal(name: &str) -> Result<Signal, String> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    let sig = match bare {
        "TERM" => Signal::TERM,
        "INT" => Signal::INT,
        "HUP" => Signal::HUP,
        "QUIT" => Signal::QUIT,
        "USR1" => Signal::USR1,
        "USR2" => Signal::USR2,
        other => {
            return Err(format!(
                "unknown signal {other:?}: expected SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 or SIGUSR2"
            ));
        }
    };
    Ok(sig)
}

/// The signal's name as torchrun and Python spell it (`SIGUSR1`).
pub fn signal_name(sig: Signal) -> &'static str {
    match sig {
        Signal::TERM => "SIGTERM",
        Signal::INT => "SIGINT",
        Signal::HUP => "SIGHUP",
        Signal::QUIT => "SIGQUIT",
        Signal::USR1 => "SIGUSR1",
        Signal::USR2 => "SIGUSR2",
        Signal::KILL => "SIGKILL",
        _ => "signal",
    }
}

/// One process as `/proc` shows it.
#[derive(Debug, Clone)]
struct Proc {
    ppid: i32,
    zombie: bool,
    marked: bool,
}

/// `marks`: every one of these `KEY=value` pairs is in the process's environment.
fn read_proc(pid: i32, marks: &[String]) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`: comm may hold spaces and parentheses; it ends at the last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let vars: BTreeSet<&[u8]> = environ.split(|b| *b == 0).collect();
    let marked = marks.iter().all(|m| vars.contains(m.as_bytes()));
    Some(Proc {
        ppid,
        zombie: state == "Z" || state == "X",
        marked,
    })
}

/// The live (not zombie) processes marked `TERN_TREE=id`, and the descendants of `root`.
pub fn members(id: &str, root: Option<u32>) -> BTreeSet<i32> {
    marked(&[format!("{MARK}={id}")], root)
}

/// The live processes of job `job`'s training on `instance` (`TERN_JOB` and `TERN_INSTANCE`
/// in their environment), whichever agent started them: a restarted agent's predecessor's
/// tree, which its watchdog may still be stopping.
pub fn of_job_here(job: &str, instance: &str) -> BTreeSet<i32> {
    marked(
        &[
            format!("TERN_JOB={job}"),
            format!("TERN_INSTANCE={instance}"),
        ],
        None,
    )
}

/// Wait until no process of `job`'s training on `instance` is left from an earlier agent
/// (killed, then restarted by systemd): its watchdog stops that tree within its grace, and
/// workers started before then would train beside it. Past `grace` and 10 s more (the
/// watchdog died too), whatever is left is killed. How many there were.
pub async fn outlast_predecessor(job: &str, instance: &str, grace: Duration) -> usize {
    let found = of_job_here(job, instance).len();
    if found == 0 {
        return 0;
    }
    tracing::warn!(
        found,
        "{found} process(es) of an earlier agent's training still run here (its \
         watchdog is stopping them): waiting for them to exit before starting"
    );
    let until = Instant::now() + grace + Duration::from_secs(10);
    loop {
        let left = of_job_here(job, instance);
        if left.is_empty() {
            return found;
        }
        if Instant::now() >= until {
            tracing::warn!(
                left = left.len(),
                "{} process(es) outlived the earlier agent's grace: killing them",
                left.len()
            );
            signal_all(&left, Signal::KILL);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The live processes with every one of `marks` in their environment, and the descendants of
/// `root`.
pub fn marked(marks: &[String], root: Option<u32>) -> BTreeSet<i32> {
    let me = std::process::id() as i32;
    let mut all: BTreeMap<i32, Proc> = BTreeMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            if pid == me {
                continue;
            }
            if let Some(p) = read_proc(pid, marks) {
                all.insert(pid, p);
            }
        }
    }
    let mut found: BTreeSet<i32> = all
        .iter()
        .filter(|(_, p)| p.marked)
        .map(|(pid, _)| *pid)
        .collect();
    if let Some(root) = root.and_then(|r| i32::try_from(r).ok()) {
        found.insert(root);
        // Descendants by parent id, to a fixed point (a process that cleared its environment).
        loop {
            let more: Vec<i32> = all
                .iter()
                .filter(|(pid, p)| found.contains(&p.ppid) && !found.contains(pid))
                .map(|(pid, _)| *pid)
                .collect();
            if more.is_empty() {
                break;
            }
            found.extend(more);
        }
    }
    found.retain(|pid| all.get(pid).is_some_and(|p| !p.zombie));
    found
}

pub fn signal_all(pids: &BTreeSet<i32>, sig: Signal) {
    for pid in pids {
        if let Some(p) = Pid::from_raw(*pid) {
            let _ = kill_process(p, sig);
        }
    }
}

/// The training's processes: the launcher this agent started, and everything under it.
#[derive(Debug)]
pub struct Tree {
    id: String,
    child: Child,
    /// Exit status, once reaped.
    status: Option<ExitStatus>,
    /// Keeps the watchdog's pipe open: when this agent dies, it closes, and the watchdog
    /// stops the tree.
    _watchdog: Option<(Child, ChildStdin)>,
    /// The last lines of the training's stderr (copied through to the agent's own).
    tail: Arc<Mutex<VecDeque<String>>>,
}

/// How many stderr lines a tree keeps for a failure report.
const TAIL_LINES: usize = 200;

/// The lines the training wrote, without torchrun's framing: its log lines (`W1127 …`),
/// rules, and the traceback and summary it prints when a worker failed (which hide the
/// worker's own error above them). The worker's exit code from that summary is kept.
pub fn own_lines(lines: &[String]) -> Vec<String> {
    let mut end = lines.len();
    let mut exitcode = None;
    if let Some(failed) = lines.iter().position(|l| l.contains("ChildFailedError")) {
        end = lines[..failed]
            .iter()
            .rposition(|l| l.starts_with("Traceback (most recent call last)"))
            .unwrap_or(failed);
        exitcode = lines[failed..]
            .iter()
            .find_map(|l| l.trim().strip_prefix("exitcode"))
            .map(|v| v.trim_start_matches([' ', ':']).trim().to_string());
    }
    let glog = |l: &str| {
        let b = l.as_bytes();
        b.len() > 5 && b"IWEF".contains(&b[0]) && b[1..5].iter().all(u8::is_ascii_digit)
    };
    let mut out: Vec<String> = lines[..end]
        .iter()
        .filter(|l| !glog(l) && !l.trim().chars().all(|c| c == '-' || c == '='))
        .cloned()
        .collect();
    if let Some(code) = exitcode {
        out.push(format!("(torchrun: the worker exited with code {code})"));
    }
    out
}

/// Copy the training's stderr to the agent's, keeping the last lines.
fn tee(from: ChildStderr, tail: Arc<Mutex<VecDeque<String>>>) {
    use std::io::{BufRead, Write};
    std::thread::spawn(move || {
        let mut reader = std::io::BufReader::new(from);
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            let _ = std::io::stderr().write_all(&line);
            let text = String::from_utf8_lossy(&line).trim_end().to_string();
            line.clear();
            if text.trim().is_empty() {
                continue;
            }
            let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
            if t.len() == TAIL_LINES {
                t.pop_front();
            }
            t.push_back(text);
        }
    });
}

/// How a tree was started.
#[derive(Debug, Clone)]
pub struct Spawn<'a> {
    pub argv: &'a [String],
    pub env: &'a [(String, String)],
    /// Where it runs; `None`: the agent's own working directory.
    pub dir: Option<&'a std::path::Path>,
    /// The `tern` binary that runs the watchdog, and the grace it gives the tree after the
    /// agent died; `None` runs no watchdog (unit tests, whose binary is not `tern`).
    pub watchdog: Option<(PathBuf, Duration)>,
}

impl Tree {
    /// Start `argv` in a process group of its own, marked, with a watchdog beside it.
    pub fn spawn(s: &Spawn<'_>) -> std::io::Result<Tree> {
        let (program, args) = s
            .argv
            .split_first()
            .ok_or_else(|| std::io::Error::other("empty command"))?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let watchdog = match &s.watchdog {
            Some((exe, grace)) => Some(watchdog(exe, &id, *grace)?),
            None => None,
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(s.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env(MARK, &id)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(d) = s.dir {
            command.current_dir(d);
        }
        let mut child = command.spawn()?;
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(err) = child.stderr.take() {
            tee(err, tail.clone());
        }
        Ok(Tree {
            id,
            child,
            status: None,
            _watchdog: watchdog,
            tail,
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The launcher's exit status once it has exited (reaped here).
    pub fn exited(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.child.try_wait()?;
        }
        Ok(self.status)
    }

    /// Every live process of the tree.
    pub fn members(&mut self) -> BTreeSet<i32> {
        let _ = self.exited();
        let root = self.status.is_none().then(|| self.child.id());
        members(&self.id, root)
    }

    /// Send `sig` to the launcher's process group (its workers' own sessions learn of it
    /// from torchrun; a `--launcher none` command's children share the group).
    pub fn signal(&mut self, sig: Signal) {
        if self.exited().ok().flatten().is_some() {
            // The launcher is gone: signal whatever it left behind.
            signal_all(&self.members(), sig);
            return;
        }
        if let Some(pgid) = Pid::from_raw(self.child.id() as i32) {
            let _ = kill_process_group(pgid, sig);
        }
    }

    /// SIGKILL every member until none is left (bounded: a process in uninterruptible sleep
    /// may take a while to die). True when none is left.
    pub fn kill_all(&mut self, within: Duration) -> bool {
        let until = Instant::now() + within;
        loop {
            let left = self.members();
            if left.is_empty() {
                return true;
            }
            signal_all(&left, Signal::KILL);
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last `lines` lines the training itself wrote to stderr (see [`own_lines`]).
    pub fn stderr_tail(&self, lines: usize) -> String {
        let t = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        let all: Vec<String> = t.iter().cloned().collect();
        drop(t);
        let own = own_lines(&all);
        own[own.len().saturating_sub(lines)..].join("\n")
    }
}

/// Start the watchdog: `tern agent-watchdog --tree ID --grace S`, its stdin a pipe from here.
fn watchdog(
    exe: &std::path::Path,
    id: &str,
    grace: Duration,
) -> std::io::Result<(Child, ChildStdin)> {
    let mut child = Command::new(exe)
        .args(["agent-watchdog", "--tree", id, "--grace"])
        .arg(format!("{}", grace.as_secs_f64()))
        .env_remove(MARK)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("watchdog stdin"))?;
    Ok((child, stdin))
}

/// The watchdog's body: wait for the agent's pipe to close, then stop the tree `id`:
/// SIGTERM, `grace` for it to exit, SIGKILL to whatever is left.
pub fn watch(id: &str, grace: Duration) {
    use std::io::Read;
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin();
    while stdin.read(&mut sink).is_ok_and(|n| n > 0) {}
    let left = members(id, None);
    if left.is_empty() {
        return;
    }
    eprintln!(
        "tern agent-watchdog: the agent is gone; stopping {} training process(es)",
        left.len()
    );
    signal_all(&left, Signal::TERM);
    let until = Instant::now() + grace;
    while Instant::now() < until && !members(id, None).is_empty() {
        std::thread::sleep(Duration::from_millis(100));
    }
    for _ in 0..100 {
        let left = members(id, None);
        if left.is_empty() {
            return;
        }
        signal_all(&left, Signal::KILL);
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchruns_framing_is_left_out_of_a_failure() {
        let text = "W1127 05:07:40.1 1 torch/run.py:1] setting OMP_NUM_THREADS\n\
            python3: can't open file '/w/no_such.py': [Errno 2] No such file or directory\n\
            E1127 05:07:42.2 1 api.py:9] failed (exitcode: 2) local_rank: 0\n\
            Traceback (most recent call last):\n  File \"run.py\", line 9, in <module>\n\
            torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n\
            ============================================================\n\
            no_such.py FAILED\n------\nRoot Cause (first observed failure):\n[0]:\n\
              exitcode  : 2 (pid: 5)\n";
        let lines: Vec<String> = text.lines().map(String::from).collect();
        assert_eq!(
            own_lines(&lines),
            [
                "python3: can't open file '/w/no_such.py': [Errno 2] No such file or directory",
                "(torchrun: the worker exited with code 2 (pid: 5))"
            ]
        );
        let plain: Vec<String> = vec![
            "Traceback (most recent call last):".into(),
            "ValueError: x".into(),
        ];
        assert_eq!(own_lines(&plain), plain, "a script's own traceback stays");
    }

    #[test]
    fn signals_are_read_by_name() {
        assert_eq!(parse_signal("SIGTERM"), Ok(Signal::TERM));
        assert_eq!(parse_signal("usr1"), Ok(Signal::USR1));
        assert_eq!(signal_name(Signal::USR2), "SIGUSR2");
        assert!(parse_signal("SIGFOO").expect_err("unknown").contains("FOO"));
        assert!(parse_signal("KILL").is_err());
    }

    #[test]
    fn a_tree_is_found_through_new_sessions_and_killed_whole() {
        // A launcher that starts a grandchild in a new session (as torchrun starts workers),
        // then sleeps.
        let argv: Vec<String> = ["sh", "-c", "setsid sleep 300 & sleep 300 & wait"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut tree = Tree::spawn(&Spawn {
            argv: &argv,
            env: &[],
            dir: None,
            watchdog: None,
        })
        .expect("spawn");
        let until = Instant::now() + Duration::from_secs(5);
        while tree.members().len() < 3 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(tree.members().len(), 3, "sh and both sleeps");
        assert!(tree.kill_all(Duration::from_secs(5)));
        assert!(tree.members().is_empty());
        assert!(tree.exited().expect("wait").is_some());
    }
}
