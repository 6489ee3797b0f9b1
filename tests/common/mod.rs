//! Harness pieces shared by the controller tests: ports, waiting for a server, and the
//! controller command line they all start from.

// Each test binary uses a different subset of these.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A port nothing listens on right now (the OS picks it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Wait up to 30 s for a server to accept connections on `addr`.
pub fn wait_for(addr: &str) {
    let t0 = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{addr} did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Wait for `child` to accept connections on `addr`, for up to 60 s (a debug build starting
/// on two busy cores). A child that exits first, or a timeout, fails at once with its exit
/// status and the tail of `log` (where its stderr went), so a failure says why.
pub fn wait_for_child(addr: &str, child: &mut std::process::Child, log: &Path) {
    let t0 = Instant::now();
    while TcpStream::connect(addr).is_err() {
        let exited = child.try_wait().expect("try_wait");
        let late = t0.elapsed() > Duration::from_secs(60);
        if exited.is_some() || late {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "{addr} did not come up after {:.1} s ({}); its log ends:\n{}",
                t0.elapsed().as_secs_f64(),
                exited.map_or_else(|| "still running".to_string(), |s| s.to_string()),
                tail.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`sim_controller`] with its stderr appended to `log` (for [`wait_for_child`]).
pub fn sim_controller_logged(
    sim: &str,
    state: &str,
    addr: &str,
    id: &str,
    token: &str,
    log: &Path,
) -> std::process::Child {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("controller log");
    sim_controller_command(sim, state, addr, id, token)
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .expect("controller")
}

/// Give `c` the shared data folder and silence its output: a server the test only talks to.
pub fn quiet(c: &mut Command) -> &mut Command {
    c.env(
        "TERN_DATA",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data"),
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
}

/// `tern controller --state STATE` with the API token and the shared data folder set and its
/// output silenced; callers add the provider and `--listen` arguments.
pub fn controller_command(state: &Path, token: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tern"));
    c.arg("controller")
        .arg("--state")
        .arg(state)
        .env("TERN_TOKEN", token);
    quiet(&mut c);
    c
}

/// Child processes killed (SIGKILL) and reaped when the test ends, pass or fail.
pub struct Reaper(pub Vec<std::process::Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `tern` as a user runs it, with none of tern's own settings from the caller's environment
/// (a token, a CA, a server, a state file, a price database): a test passes what it means.
/// Every test runs the binary through here.
pub fn tern() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tern"));
    for var in [
        "TERN_TOKEN",
        "TERN_TOKEN_FILE",
        "TERN_CA",
        "TERN_SERVER",
        "TERN_STATE",
        "TERN_DB",
        "TERN_SIM_TOKEN",
        "TERN_SIM_TOKEN_FILE",
    ] {
        c.env_remove(var);
    }
    c
}

/// `tern ARGS`: its output.
pub fn tern_output(args: &[&str]) -> std::process::Output {
    tern().args(args).output().expect("run tern")
}

/// `tern ARGS --server SERVER` with `token` in `TERN_TOKEN`: its output.
pub fn tern_at(server: &str, token: &str, args: &[&str]) -> std::process::Output {
    tern()
        .args(args)
        .args(["--server", server])
        .env("TERN_TOKEN", token)
        .output()
        .expect("run tern")
}

/// `tern ARGS` with `token` in `TERN_TOKEN`, in `dir` when given: (success, stdout, stderr).
pub fn tern_as(token: &str, dir: Option<&Path>, args: &[&str]) -> (bool, String, String) {
    let mut c = tern();
    c.args(args).env("TERN_TOKEN", token);
    if let Some(d) = dir {
        c.current_dir(d);
    }
    let out = c.output().expect("run tern");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The last line of stdout as JSON (`--json` prints one object there).
pub fn last_json(o: &std::process::Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().last().expect("some output");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {line}"))
}

/// Run `tern ARGS` with the API token; it must succeed; its last stdout line is JSON.
pub fn tern_json(args: &[&str], token: &str) -> serde_json::Value {
    let out = tern_ok(args, token);
    let text = String::from_utf8_lossy(&out).to_string();
    serde_json::from_str(text.lines().last().expect("output")).expect("json line")
}

/// `tern ARGS` with `TERN_TOKEN` = `token`; it must succeed. Its stdout, byte for byte.
pub fn tern_ok(args: &[&str], token: &str) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .env("TERN_TOKEN", token)
        .output()
        .expect("tern");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `tern sim report --json` (owner `tern`; orphans judged against `state` when given).
pub fn sim_report(sim_url: &str, state: Option<&str>, token: &str) -> serde_json::Value {
    let mut args = vec![
        "sim",
        "report",
        "--endpoint",
        sim_url,
        "--owner",
        "tern",
        "--json",
    ];
    if let Some(state) = state {
        args.extend(["--state", state]);
    }
    tern_json(&args, token)
}

/// Poll `tern sim report` (owner `tern`, orphans judged against `state`) until the simulated
/// cloud runs none of our instances, for at most 30 s; the last report.
pub fn sim_report_when_empty(sim_url: &str, state: &str, token: &str) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        let r = sim_report(sim_url, Some(state), token);
        if r["running_instances"] == 0 {
            return r;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "instances left: {r}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `tern submit SPEC --server URL`; it must succeed.
pub fn submit(spec: &Path, server: &str, token: &str) {
    let spec = spec.to_str().expect("a UTF-8 path");
    tern_ok(&["submit", spec, "--server", server], token);
}

/// `tern controller` on the simulated cloud of a `tern sim serve` process at `sim`, with state
/// store `state`, lease holder `id`, a fast period, and its output silenced.
pub fn sim_controller(
    sim: &str,
    state: &str,
    addr: &str,
    id: &str,
    token: &str,
) -> std::process::Child {
    sim_controller_command(sim, state, addr, id, token)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("controller")
}

/// The command line of [`sim_controller`], for callers that add flags or keep its output.
pub fn sim_controller_command(
    sim: &str,
    state: &str,
    addr: &str,
    id: &str,
    token: &str,
) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tern"));
    c.args([
        "controller",
        "--sim-endpoint",
        sim,
        "--listen",
        addr,
        "--period",
        "0.05",
        "--state",
        state,
        "--id",
        id,
    ])
    .env("TERN_TOKEN", token);
    c
}

/// `tern sim serve` with `args` on a port the OS picks as it binds (`--listen 127.0.0.1:0`),
/// and the URL it printed: no other process can hold that port, as one chosen beforehand
/// and bound later can be (tests run side by side). Panics, with what it printed, if it does
/// not say where it serves within 60 s.
// The child is the caller's to reap (a `Reaper`); every path that keeps it returns it.
#[allow(clippy::zombie_processes)]
pub fn sim_serving(args: &[&str]) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = quiet(&mut Command::new(env!("CARGO_BIN_EXE_tern")))
        .args(["sim", "serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .expect("sim serve");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    // Reads every line (so the server never blocks on a full pipe) and sends each on.
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                // Nobody listens any more: keep draining.
            }
        }
    });
    let mut seen = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                if let Some(rest) = line.split("serving the simulated cloud on ").nth(1) {
                    let url = rest.split_whitespace().next().expect("an address");
                    return (child, url.to_string());
                }
                seen.push(line);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.kill();
    panic!(
        "tern sim serve did not say where it serves; it printed:\n{}",
        seen.join("\n")
    );
}

/// A running `tern sim serve` at 600× speed with `seed` (reaped with the test) and its URL.
pub fn start_sim(seed: u64) -> (Reaper, String) {
    let (child, url) = sim_serving(&["--speed", "600", "--seed", &seed.to_string()]);
    (Reaper(vec![child]), url)
}

/// `tern agent --job JOB` running a stand-in "training script" to the end: a fake `torchrun`
/// on PATH execs the script, which writes its progress file (half the samples with a
/// checkpoint, then all of them) and exits. The cloud's VMs do not train in these tests, so
/// the agent runs here for them. Panics if the agent fails.
pub fn train_with_agent(dir: &Path, job: &str, samples: u64, server: &str, token: &str) {
    let p = dir.join("progress.json").display().to_string();
    let script = format!(
        "echo '{{\"samples\": {half}, \"checkpoint_samples\": {ckpt}}}' > {p}; sleep 1; \
         echo '{{\"samples\": {samples}, \"checkpoint_samples\": {samples}}}' > {p}",
        half = samples / 2,
        ckpt = samples * 2 / 5,
    );
    agent_running(dir, job, &script, server, token);
}

/// As [`train_with_agent`], the script also reporting a measured step (`step_seconds`, its
/// accelerator and local batch, as the `tern_train` helper writes them) over a few reports.
pub fn train_reporting_steps(
    dir: &Path,
    job: &str,
    samples: u64,
    step_s: f64,
    server: &str,
    token: &str,
) {
    let p = dir.join("progress.json").display().to_string();
    let line = |done: u64| {
        format!(
            "echo '{{\"samples\": {done}, \"checkpoint_samples\": {done}, \"step_seconds\": \
             {step_s}, \"accelerator\": \"T4\", \"local_batch\": 32}}' > {p}"
        )
    };
    let script = (1..=8)
        .map(|i| line(samples * i / 8))
        .collect::<Vec<_>>()
        .join("; sleep 0.5; ");
    agent_running(dir, job, &script, server, token);
}

/// The controller's events of `job`, as (kind, message).
pub fn events_of(server: &str, token: &str, job: &str) -> Vec<(String, String)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let http = tern::http::client().expect("http");
    let client = tern::api::client::Client::new(server, Some(token.into()), http).expect("client");
    rt.block_on(client.events(0, Some(job)))
        .expect("events")
        .into_iter()
        .map(|e| (e.kind, e.message))
        .collect()
}

/// `tern agent` for `job`'s first instance running `sh -c script` under a stand-in torchrun,
/// until it exits (successfully).
fn agent_running(dir: &Path, job: &str, script: &str, server: &str, token: &str) {
    let agent = agent_started(dir, job, script, server, token)
        .wait_with_output()
        .expect("agent");
    assert!(
        agent.status.success(),
        "agent: {}",
        String::from_utf8_lossy(&agent.stderr)
    );
}

/// `tern agent` for `job`'s first instance running `sh -c script` under a stand-in torchrun
/// (which execs the script), started now with its output piped. The cloud's VMs do not train
/// in these tests: the agent runs here, told which instance it stands for.
pub fn agent_started(
    dir: &Path,
    job: &str,
    script: &str,
    server: &str,
    token: &str,
) -> std::process::Child {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let torchrun = bin.join("torchrun");
    std::fs::write(
        &torchrun,
        "#!/bin/sh\nwhile [ \"${1#--}\" != \"$1\" ]; do shift; done\nexec \"$@\"\n",
    )
    .expect("torchrun");
    Command::new("chmod")
        .arg("+x")
        .arg(&torchrun)
        .status()
        .expect("chmod");
    let progress = dir.join("progress.json");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let status = tern_json(&["status", job, "--json", "--server", server], token);
    let instance = status["jobs"][0]["instance_ids"][0]
        .as_str()
        .expect("the job's instance")
        .to_string();
    Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["agent", "--job", job, "--server", server])
        .args([
            "--notice",
            "none",
            "--interval",
            "0.2",
            "--instance-id",
            &instance,
        ])
        .arg("--progress-file")
        .arg(&progress)
        .args(["--", "sh", "-c", script])
        .env("TERN_TOKEN", token)
        .env("PATH", path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agent")
}

/// Write and submit "t4-small": one T4 worker, 100,000 samples at 0.25 s a step, due in 12 h;
/// the job the cloud-provider scenario tests run.
pub fn submit_t4_small(dir: &Path, server: &str, token: &str) {
    submit_t4_small_with(dir, server, token, "");
}

/// [`submit_t4_small`] with `top` (top-level TOML lines) at the start of the spec.
pub fn submit_t4_small_with(dir: &Path, server: &str, token: &str, top: &str) {
    let spec = dir.join("t4.toml");
    std::fs::write(
        &spec,
        top.to_owned()
            + &tern_cloud::testkit::spec("t4-small")
                .team("ml")
                .accelerators(&["T4"])
                .deadline(Some("12h"))
                .local_batch(Some(32))
                .samples(100_000)
                .measured("T4", 1, 0.25)
                .text(),
    )
    .expect("spec");
    submit(&spec, server, token);
}

/// Wait up to 60 s until the first job is finished and `live()` (the instances the test can
/// still see in its cloud) is 0; the job's status.
pub fn wait_finished_and_released(
    server: &str,
    token: &str,
    live: impl Fn() -> usize,
) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        let v = tern_json(&["status", "--json", "--server", server], token);
        let j = v["jobs"][0].clone();
        if j["state"] == "finished" && live() == 0 {
            return j;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "job not finished and released: {v}, {} live",
            live()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The answers an agent gets, reduced alike for the simulated and the real one.
/// A request as [`respond`]'s handler sees it: the request line and the header lines.
pub struct Request {
    pub line: String,
    pub headers: Vec<String>,
}

impl Request {
    /// The path of the request line.
    pub fn path(&self) -> &str {
        self.line.split_whitespace().nth(1).unwrap_or_default()
    }

    /// Whether a header line starts with `prefix` (case-insensitive).
    pub fn has_header(&self, prefix: &str) -> bool {
        let prefix = prefix.to_ascii_lowercase();
        self.headers
            .iter()
            .any(|h| h.to_ascii_lowercase().starts_with(&prefix))
    }
}

/// A one-request-per-connection HTTP/1.1 server on loopback (fake metadata servers): `handle`
/// gives each request's status and body. Its base URL.
pub fn respond(handle: impl Fn(&Request) -> (u16, String) + Send + 'static) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut r = BufReader::new(s.try_clone().expect("clone"));
            let mut line = String::new();
            if r.read_line(&mut line).is_err() {
                continue;
            }
            let mut headers = Vec::new();
            let mut h = String::new();
            while r.read_line(&mut h).is_ok_and(|n| n > 2) {
                headers.push(std::mem::take(&mut h));
            }
            let (code, body) = handle(&Request { line, headers });
            let _ = write!(
                s,
                "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

pub mod answers;
