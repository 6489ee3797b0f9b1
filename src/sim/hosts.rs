//! Real agents on the simulated cloud (`tern controller --local-agents`): each instance the
//! simulated cloud runs is a folder and a `tern agent` process tree on this machine, as a VM
//! would be. Its agent is started as the worker templates start it on a cloud (the job from
//! the instance's tags, the job's agent token in a file, the job's `[run]` fetched from the
//! controller) and sees its reclaim notice in its own instance metadata (an IMDSv2 look-alike
//! served here from the simulated cloud). When the instance ends (reclaimed, terminated), its
//! whole tree is killed, as a VM vanishes; an agent that fails is started again, as systemd's
//! `Restart=on-failure` does.
//!
//! Every process a host starts carries two marks in its environment ([`HOSTS_MARK`], the hosts'
//! folder, and [`HOST_MARK`], the instance), which torchrun and Python pass on: the tree is
//! found in `/proc` whatever sessions its workers made. Stopping the hosts stops every tree;
//! starting them kills whatever an earlier controller on the same folder left (killed -9).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::routing::{get, put};
use rustix::process::Signal;
use tern_cloud::{InstanceId, InstanceState, WorkerRange};
use tern_sim::SimCloud;
use tokio::sync::watch;

use crate::agent::tree;
use crate::store::{AGENT_TOKEN_TAG, Store};

/// Marks every process of this controller's hosts: the hosts' folder.
pub const HOSTS_MARK: &str = "TERN_LOCAL_HOSTS";
/// Marks every process of one host: its instance id.
pub const HOST_MARK: &str = "TERN_LOCAL_HOST";
/// How often the hosts look at the simulated cloud's instances.
const LOOK_EVERY: Duration = Duration::from_millis(200);
/// systemd's `RestartSec` in the worker templates: a failed agent starts again after this.
const RESTART_AFTER: Duration = Duration::from_secs(10);
/// How long a stopped agent has to stop its training before every process left is killed.
const STOP_WITHIN: Duration = Duration::from_secs(20);
/// The controller's own variables no worker may inherit (its admin token above all).
const NOT_INHERITED: &[&str] = &[
    "TERN_TOKEN",
    "TERN_TOKEN_FILE",
    "TERN_STATE",
    "TERN_INSTANCE_ID",
    "TERN_NOTICE",
    "TERN_METADATA_URL",
    "TERN_SERVER",
];

/// Where the hosts' agents find the controller, and where the hosts live.
#[derive(Debug, Clone)]
pub struct HostsConfig {
    /// The `tern` binary the agents run.
    pub exe: PathBuf,
    /// The controller's API as the agents reach it.
    pub server: String,
    /// A PEM CA the agents trust for an `https://` server.
    pub ca: Option<PathBuf>,
    /// One folder per instance under this.
    pub root: PathBuf,
    /// The owner tag of the controller's instances; no other instance gets a host.
    pub owner: String,
    /// Simulated workers run the jobs without a `[run]`: their instances get no agent.
    pub simulated_workers: bool,
}

/// One instance's machine: its folder and its agent.
#[derive(Debug)]
struct Host {
    dir: PathBuf,
    job: String,
    /// torchrun's `--nnodes` and `--rdzv-endpoint` for a job of more than one node.
    rendezvous: Option<(String, String)>,
    agent: Option<Child>,
    /// A failed agent starts again at this time.
    restart_at: Option<Instant>,
}

/// The running hosts; [`RunningHosts::stop`] ends them.
#[derive(Debug)]
pub struct RunningHosts {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    /// The base URL of the instances' metadata (`{base}/{instance}` is one instance's).
    pub metadata: String,
}

impl RunningHosts {
    /// Stop every agent (SIGTERM: it stops its training as on a drain), and after
    /// [`STOP_WITHIN`] kill whatever of their trees is left.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Start the hosts of `sim`'s instances: kill what an earlier controller's hosts left on the
/// same folder, serve the instances' metadata, and follow the instances from now on.
pub async fn start(
    sim: Arc<SimCloud>,
    store: Arc<Store>,
    config: HostsConfig,
) -> std::io::Result<RunningHosts> {
    std::fs::create_dir_all(&config.root)?;
    let config = HostsConfig {
        root: config.root.canonicalize()?,
        ..config
    };
    let left = kill_marked(&[root_mark(&config.root)], None, Duration::from_secs(5)).await;
    if left > 0 {
        tracing::warn!(
            "--local-agents: killed {left} process(es) an earlier controller's hosts left in {}",
            config.root.display()
        );
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let metadata = format!("http://{}", listener.local_addr()?);
    let routes = metadata_routes(sim.clone());
    tokio::spawn(async move {
        if let Err(e) = crate::serve::run_within(listener, None, routes, Default::default()).await {
            tracing::error!("--local-agents: the instances' metadata server stopped: {e}");
        }
    });
    let (stop, stopped) = watch::channel(false);
    let hosts = Hosts {
        sim,
        store,
        ports: BTreeMap::new(),
        config,
        metadata: metadata.clone(),
        running: BTreeMap::new(),
        ended: BTreeSet::new(),
    };
    let task = tokio::spawn(hosts.follow(stopped));
    Ok(RunningHosts {
        stop,
        task,
        metadata,
    })
}

/// The instances' metadata, per instance under `/{id}`: enough of AWS's IMDSv2 for the agent
/// (a session token, `instance-id`, `local-ipv4`: every host is this machine,
/// `spot/instance-action` once the notice is out).
fn metadata_routes(sim: Arc<SimCloud>) -> Router {
    async fn token() -> &'static str {
        "local-imds-session"
    }
    async fn instance_id(
        State(sim): State<Arc<SimCloud>>,
        UrlPath(id): UrlPath<String>,
    ) -> Result<String, StatusCode> {
        let known = sim.machines().iter().any(|i| i.id.as_str() == id);
        known.then_some(id).ok_or(StatusCode::NOT_FOUND)
    }
    async fn local_ipv4(
        State(sim): State<Arc<SimCloud>>,
        UrlPath(id): UrlPath<String>,
    ) -> Result<&'static str, StatusCode> {
        let known = sim.machines().iter().any(|i| i.id.as_str() == id);
        known.then_some("127.0.0.1").ok_or(StatusCode::NOT_FOUND)
    }
    async fn instance_action(
        State(sim): State<Arc<SimCloud>>,
        UrlPath(id): UrlPath<String>,
    ) -> Result<axum::Json<serde_json::Value>, StatusCode> {
        let notice = sim
            .agent_notice(&InstanceId::new(id))
            .ok_or(StatusCode::NOT_FOUND)?;
        Ok(axum::Json(serde_json::json!({
            "action": "terminate",
            "time": notice.reclaim_at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        })))
    }
    Router::new()
        .route("/{id}/latest/api/token", put(token))
        .route("/{id}/latest/meta-data/instance-id", get(instance_id))
        .route("/{id}/latest/meta-data/local-ipv4", get(local_ipv4))
        .route(
            "/{id}/latest/meta-data/spot/instance-action",
            get(instance_action),
        )
        .with_state(sim)
}

fn root_mark(root: &Path) -> String {
    format!("{HOSTS_MARK}={}", root.display())
}

/// The live processes of the hosts in folder `root` (`controller.db.hosts`): none once the
/// controller that started them has stopped.
pub fn processes_in(root: &Path) -> BTreeSet<i32> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    tree::marked(&[root_mark(&root)], None)
}

/// SIGKILL every live process with all of `marks` (and the descendants of `root`) until none
/// is left or `within` passed. How many there were.
async fn kill_marked(marks: &[String], root: Option<u32>, within: Duration) -> usize {
    let found = tree::marked(marks, root).len();
    let until = Instant::now() + within;
    loop {
        let left = tree::marked(marks, root);
        if left.is_empty() || Instant::now() >= until {
            return found;
        }
        tree::signal_all(&left, Signal::KILL);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Hosts {
    sim: Arc<SimCloud>,
    /// Read only: a job's `[run]` and node range.
    store: Arc<Store>,
    /// Each multi-node job's rendezvous port.
    ports: BTreeMap<String, u16>,
    config: HostsConfig,
    metadata: String,
    running: BTreeMap<InstanceId, Host>,
    /// Instances whose host is gone for good (the instance ended, or its agent finished).
    ended: BTreeSet<InstanceId>,
}

impl Hosts {
    async fn follow(mut self, mut stopped: watch::Receiver<bool>) {
        loop {
            self.look().await;
            tokio::select! {
                _ = tokio::time::sleep(LOOK_EVERY) => {}
                _ = stopped.changed() => break,
            }
        }
        self.stop_all().await;
    }

    /// One look at the instances: start a host for each new running one, end the host of
    /// each that ended, reap agents that exited and restart the ones that failed.
    async fn look(&mut self) {
        let mut live = BTreeSet::new();
        for i in self.sim.machines() {
            if i.owner() != Some(self.config.owner.as_str()) || self.ended.contains(&i.id) {
                continue;
            }
            match i.state {
                InstanceState::Running => {
                    live.insert(i.id.clone());
                    if !self.running.contains_key(&i.id)
                        && let (Some(job), Some(token)) = (i.job(), i.tags.get(AGENT_TOKEN_TAG))
                    {
                        self.boot(&i.id, job, token);
                    }
                }
                InstanceState::Queued | InstanceState::Pending => {}
                InstanceState::Stopping | InstanceState::Terminated => {}
            }
        }
        let gone: Vec<InstanceId> = self
            .running
            .keys()
            .filter(|id| !live.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            self.vanish(&id).await;
        }
        let ids: Vec<InstanceId> = self.running.keys().cloned().collect();
        for id in ids {
            self.tend(&id);
        }
    }

    /// A new instance's machine: a fresh folder, the job's agent token in a file, its agent.
    /// A job without a `[run]` has none when the simulated workers run it.
    fn boot(&mut self, id: &InstanceId, job: &str, token: &str) {
        let range = match self.store.job(job) {
            Ok(Some(r)) if r.spec.run.is_some() || !self.config.simulated_workers => r.spec.workers,
            Ok(_) => {
                tracing::info!(
                    instance = %id,
                    job,
                    "--local-agents: the job has no [run]: simulated workers run it"
                );
                self.ended.insert(id.clone());
                return;
            }
            Err(e) => {
                tracing::warn!(instance = %id, "--local-agents: reading job {job}: {e}");
                return;
            }
        };
        let dir = self.config.root.join(id.as_str());
        // A folder of the same name is an earlier controller's instance: a new disk.
        let _ = std::fs::remove_dir_all(&dir);
        let made = std::fs::create_dir_all(&dir).and_then(|()| write_secret(&dir, token));
        if let Err(e) = made {
            tracing::error!("--local-agents: preparing {}: {e}", dir.display());
            self.ended.insert(id.clone());
            return;
        }
        let mut host = Host {
            dir,
            job: job.to_string(),
            rendezvous: self.rendezvous(job, range),
            agent: None,
            restart_at: None,
        };
        self.start_agent(id, &mut host);
        self.running.insert(id.clone(), host);
    }

    /// A job of more than one node runs one torchrun per node, all on this machine: they
    /// meet at a loopback port of the job's own, over the job's node range (`range`). `None`
    /// for a one-node job.
    fn rendezvous(&mut self, job: &str, range: WorkerRange) -> Option<(String, String)> {
        if range.max <= 1 {
            return None;
        }
        let nnodes = if range.is_elastic() {
            format!("{}:{}", range.min, range.max)
        } else {
            range.max.to_string()
        };
        let port = match self.ports.get(job) {
            Some(p) => *p,
            None => {
                let p = std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .ok()?
                    .port();
                self.ports.insert(job.to_string(), p);
                p
            }
        };
        Some((nnodes, format!("127.0.0.1:{port}")))
    }

    fn start_agent(&self, id: &InstanceId, host: &mut Host) {
        match self.agent_command(id, host).and_then(|mut c| c.spawn()) {
            Ok(child) => {
                tracing::info!(
                    instance = %id,
                    job = %host.job,
                    pid = child.id(),
                    "--local-agents: started `tern agent` in {}",
                    host.dir.display()
                );
                host.agent = Some(child);
                host.restart_at = None;
            }
            Err(e) => {
                tracing::error!(instance = %id, "--local-agents: starting `tern agent`: {e}");
                host.restart_at = Some(Instant::now() + RESTART_AFTER);
            }
        }
    }

    /// The agent as a worker template starts it: the job and token from the instance, the
    /// notice and instance id from its metadata, nothing after `--` (the job's `[run]`).
    fn agent_command(&self, id: &InstanceId, host: &Host) -> std::io::Result<Command> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(host.dir.join("agent.log"))?;
        let mut cmd = Command::new(&self.config.exe);
        for name in NOT_INHERITED {
            cmd.env_remove(name);
        }
        cmd.arg("agent")
            .args(["--job", &host.job, "--server", &self.config.server])
            .arg("--token-file")
            .arg(host.dir.join("token"))
            .arg("--progress-file")
            .arg(host.dir.join("progress.json"))
            .args(["--notice", "aws", "--metadata-url"])
            .arg(format!("{}/{}", self.metadata, id.0));
        if let Some(ca) = &self.config.ca {
            cmd.arg("--ca").arg(ca);
        }
        if let Some((nnodes, endpoint)) = &host.rendezvous {
            cmd.args(["--nnodes", nnodes, "--rdzv-endpoint", endpoint]);
        }
        cmd.env(HOSTS_MARK, &self.config.root)
            .env(HOST_MARK, id.as_str())
            .current_dir(&host.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        // Its own process group: a Ctrl-C at the controller's terminal is the controller's
        // to pass on, not every training's.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        Ok(cmd)
    }

    /// Reap an agent that exited; start a failed one again when its time comes.
    fn tend(&mut self, id: &InstanceId) {
        let Some(mut host) = self.running.remove(id) else {
            return;
        };
        if let Some(child) = &mut host.agent
            && let Ok(Some(status)) = child.try_wait()
        {
            host.agent = None;
            if status.success() {
                tracing::info!(instance = %id, "--local-agents: the agent finished");
                // Its instance stays until the controller releases it; nothing more runs.
                self.ended.insert(id.clone());
            } else {
                tracing::warn!(
                    instance = %id,
                    "--local-agents: the agent exited with {status} (see {}); starting it \
                     again in {} s",
                    host.dir.join("agent.log").display(),
                    RESTART_AFTER.as_secs()
                );
                host.restart_at = Some(Instant::now() + RESTART_AFTER);
            }
        }
        if host.agent.is_none()
            && host
                .restart_at
                .is_some_and(|at| Instant::now() >= at && !self.ended.contains(id))
        {
            self.start_agent(id, &mut host);
        }
        if host.agent.is_some() || host.restart_at.is_some() {
            self.running.insert(id.clone(), host);
        }
    }

    /// The instance ended: everything on it dies at once, as with a VM.
    async fn vanish(&mut self, id: &InstanceId) {
        let Some(mut host) = self.running.remove(id) else {
            return;
        };
        let root = host.agent.as_ref().map(Child::id);
        let killed = kill_marked(&self.host_marks(id), root, Duration::from_secs(5)).await;
        if let Some(child) = &mut host.agent {
            let _ = child.kill();
            let _ = child.wait();
        }
        tracing::info!(
            instance = %id,
            "--local-agents: the instance ended; its {killed} process(es) killed"
        );
        self.ended.insert(id.clone());
    }

    fn host_marks(&self, id: &InstanceId) -> [String; 2] {
        [
            root_mark(&self.config.root),
            format!("{HOST_MARK}={}", id.0),
        ]
    }

    /// Stop every agent and its training: SIGTERM to each agent (it stops its training as on
    /// a drain), then SIGKILL to whatever of any host is left after [`STOP_WITHIN`].
    async fn stop_all(&mut self) {
        for host in self.running.values() {
            if let Some(pid) = host
                .agent
                .as_ref()
                .and_then(|c| rustix::process::Pid::from_raw(c.id() as i32))
            {
                let _ = rustix::process::kill_process(pid, Signal::TERM);
            }
        }
        let until = Instant::now() + STOP_WITHIN;
        let root = [root_mark(&self.config.root)];
        while Instant::now() < until && !tree::marked(&root, None).is_empty() {
            for host in self.running.values_mut() {
                if let Some(c) = &mut host.agent {
                    let _ = c.try_wait();
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let killed = kill_marked(&root, None, Duration::from_secs(5)).await;
        for host in self.running.values_mut() {
            if let Some(c) = &mut host.agent {
                let _ = c.wait();
            }
        }
        if killed > 0 {
            tracing::warn!("--local-agents: killed {killed} process(es) that outlived their stop");
        }
        tracing::info!("--local-agents: {} host(s) stopped", self.running.len());
        self.running.clear();
    }
}

/// The agent token, readable by this user only (as `/run/tern/token` on a worker).
fn write_secret(dir: &Path, token: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(dir.join("token"))?;
    f.write_all(token.as_bytes())
}
