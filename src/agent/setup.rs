//! A job's `[run] setup`: shell text run once per instance before its training first starts
//! there, in the job's working directory and environment, within its timeout. Done once: a
//! marker beside the progress file holds the text that ran, so an agent restarted on the
//! same instance does not run it again, and a changed setup runs anew.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What to run and for how long at most.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The program that runs the script with `-c` (`sh`, or `[run] shell`).
    pub shell: String,
    pub script: String,
    pub timeout: Duration,
}

/// The marker a finished setup leaves beside the progress file.
fn marker(progress: &Path) -> PathBuf {
    let mut name = progress.file_name().unwrap_or_default().to_os_string();
    name.push(".setup-done");
    progress.with_file_name(name)
}

/// Whether this setup already ran to success on this instance.
pub fn done(setup: &Setup, progress: &Path) -> bool {
    std::fs::read_to_string(marker(progress)).is_ok_and(|d| d == setup.script)
}

/// Before incarnation `k` starts on `instance`: the job's setup, unless it already ran here. A
/// failure fails the job, its reason the setup's own last lines (as a command that cannot
/// start does).
pub(super) async fn before_start(
    config: &super::AgentConfig,
    client: &crate::api::client::Client,
    instance: &str,
    k: u64,
) -> Result<(), super::AgentError> {
    let Some(setup) = &config.setup else {
        return Ok(());
    };
    if done(setup, &config.progress_file) {
        return Ok(());
    }
    tracing::info!(
        timeout_s = setup.timeout.as_secs_f64(),
        "running the job's setup (at most {:.0} s)",
        setup.timeout.as_secs_f64()
    );
    let dir = config.workdir.as_deref();
    match run(setup, dir, &config.env, &config.progress_file).await {
        Ok(()) => {
            tracing::info!("the setup finished");
            Ok(())
        }
        Err(why) => {
            super::give_up(config, client, instance, k, &why).await;
            Err(super::AgentError::Setup(why))
        }
    }
}

/// Run the setup (`SHELL -c`) in `dir` with `env` added; `Err` says why it failed, with the
/// last lines it wrote to stderr (never its environment).
pub async fn run(
    setup: &Setup,
    dir: Option<&Path>,
    env: &[(String, String)],
    progress: &Path,
) -> Result<(), String> {
    let (setup, dir, env) = (setup.clone(), dir.map(Path::to_path_buf), env.to_vec());
    let progress = progress.to_path_buf();
    tokio::task::spawn_blocking(move || run_blocking(&setup, dir.as_deref(), &env, &progress))
        .await
        .map_err(|e| format!("the setup's task: {e}"))?
}

fn run_blocking(
    setup: &Setup,
    dir: Option<&Path>,
    env: &[(String, String)],
    progress: &Path,
) -> Result<(), String> {
    let mut cmd = Command::new(&setup.shell);
    cmd.args(["-c", &setup.script])
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("the setup could not start: {e}"))?;
    let mut stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text);
        text
    });
    let until = Instant::now() + setup.timeout;
    let status = loop {
        if let Some(s) = child
            .try_wait()
            .map_err(|e| format!("waiting for the setup: {e}"))?
        {
            break s;
        }
        if Instant::now() >= until {
            // Its whole process group: a setup's own children go with it.
            if let Some(pgid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
            }
            let _ = child.wait();
            return Err(format!(
                "the setup ran past its timeout ({:.0} s) and was stopped",
                setup.timeout.as_secs_f64()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = reader.join().unwrap_or_default();
    if status.success() {
        let _ = std::fs::write(marker(progress), &setup.script);
        return Ok(());
    }
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(10)..].join("\n");
    Err(format!("the setup failed ({status}): {tail}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_setup_runs_once_in_its_folder_with_its_env_and_a_failure_says_why() {
        let dir = tempfile::tempdir().expect("dir");
        let progress = dir.path().join("progress.json");
        let ok = Setup {
            shell: "sh".into(),
            script: "echo \"$GREETING\" > here.txt".into(),
            timeout: Duration::from_secs(10),
        };
        let env = vec![("GREETING".to_string(), "hello".to_string())];
        assert!(!done(&ok, &progress));
        run(&ok, Some(dir.path()), &env, &progress)
            .await
            .expect("ran");
        let written = std::fs::read_to_string(dir.path().join("here.txt")).expect("file");
        assert_eq!(written.trim(), "hello");
        assert!(done(&ok, &progress));
        let changed = Setup {
            script: format!("{} # v2", ok.script),
            ..ok.clone()
        };
        assert!(!done(&changed, &progress), "a changed setup runs anew");

        let bad = Setup {
            shell: "sh".into(),
            script: "echo first >&2; echo 'no such package: torchh' >&2; exit 3".into(),
            timeout: Duration::from_secs(10),
        };
        let e = run(&bad, Some(dir.path()), &env, &progress)
            .await
            .expect_err("fails");
        assert!(
            e.contains("exit status: 3") && e.contains("no such package: torchh"),
            "{e}"
        );
        let slow = Setup {
            shell: "sh".into(),
            script: "sleep 30".into(),
            timeout: Duration::from_millis(300),
        };
        let e = run(&slow, None, &[], &progress)
            .await
            .expect_err("times out");
        assert!(e.contains("past its timeout"), "{e}");
    }
}
