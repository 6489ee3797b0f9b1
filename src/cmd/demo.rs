//! `tern demo`: the simulated cloud and the controller in one process, on an accelerated clock,
//! with the bundled catalog's prices, real spot availability traces and the example jobs.
//! Prints each decision as it happens and ends with a cost summary against on-demand and the
//! teams' budgets, and each migration with its expected and realised saving. One pool of the
//! simulated cloud is a scenario: cheaper H100 capacity that opens mid-run, so a move pays.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, TimeZone, Utc};
use serde::Serialize;
use tern::sim::{DemoPools, SimTraces, demo_pools, regions_of, sim_traces};
use tern_cloud::parse_job_spec;
use tern_sim::cloud::SimConfig;
use tern_sim::{FaultSchedule, SimCloud};

use tern::api::wire::decisions::Timeline;
use tern::controller::workload::Workload;
use tern::controller::world::SimWorld;
use tern::controller::{Controller, ControllerConfig};
use tern::report::{self, CostQuery, CostReport, Ledger};
use tern::scratch::TempDir;
use tern::store::{JobState, Store};

/// The example jobs, embedded so `tern demo` runs from any directory.
const EXAMPLE_JOBS: &[(&str, &str)] = &[
    (
        "gang-bert-v100.toml",
        include_str!("../../examples/jobs/gang-bert-v100.toml"),
    ),
    (
        "resnet50-imagenet.toml",
        include_str!("../../examples/jobs/resnet50-imagenet.toml"),
    ),
    (
        "small-t4-job.toml",
        include_str!("../../examples/jobs/small-t4-job.toml"),
    ),
    (
        "llm-finetune-a100.toml",
        include_str!("../../examples/jobs/llm-finetune-a100.toml"),
    ),
];

/// The teams' budgets the demo's cost report shows (`tern controller --quota` reads the same
/// format): each team of the example jobs, with room for what its jobs cost.
const DEMO_LIMITS: &str = include_str!("../../examples/demo-budgets.toml");

/// The demo's budgets file, parsed and checked.
fn demo_limits() -> anyhow::Result<tern::limits::Limits> {
    Ok(tern::limits::Limits::parse(
        DEMO_LIMITS,
        "examples/demo-budgets.toml",
    )?)
}

/// The demo's scenario for a proactive move: a third H100 spot pool opens in
/// [`CHEAP_ZONE`] after [`OPENS_AFTER`] with steady room, at [`CHEAP_SHARE`] of what the same
/// shape costs in [`CHEAP_BESIDE`]. A job running there has most of its work left when it
/// opens, so the move rule's own test (saving beyond the cost of moving) says move.
const CHEAP_SHAPE: &str = "p5.48xlarge";
const CHEAP_BESIDE: &str = "us-east-2b";
const CHEAP_ZONE: &str = "us-east-2c";
const OPENS_AFTER: Duration = Duration::from_secs(3600);
const CHEAP_SHARE: f64 = 0.5;
const CHEAP_ROOM: u32 = 4;

/// Add the pool of the demo's move scenario (no capacity until [`OPENS_AFTER`], then
/// [`CHEAP_ROOM`] instances for the rest of the trace), with a line saying what it is.
fn cheaper_pool_opens(pools: &mut DemoPools) -> anyhow::Result<()> {
    let Some(k) = (0..pools.traces.len())
        .find(|&k| pools.types[k].name == CHEAP_SHAPE && pools.traces[k].zone == CHEAP_BESIDE)
    else {
        return Ok(());
    };
    let base = &pools.traces[k];
    let price = base
        .spot_price
        .context("the scenario's base pool has a spot price")?;
    let gap = base.gap_seconds.max(1);
    let closed = (OPENS_AFTER.as_secs() / u64::from(gap)) as usize;
    let data: Vec<String> = (0..base.available.len().max(closed + 1))
        .map(|i| if i < closed { 0 } else { CHEAP_ROOM }.to_string())
        .collect();
    let json = format!(
        "{{\"metadata\": {{\"gap_seconds\": {gap}, \"zone\": \"{CHEAP_ZONE}\"}}, \"data\": [{}]}}",
        data.join(",")
    );
    let mut t = tern_sim::Trace::parse(
        std::path::Path::new(&format!("scenario/{CHEAP_ZONE}_{CHEAP_SHAPE}.json")),
        json.as_bytes(),
    )?;
    t.spot_price = Some(price * CHEAP_SHARE);
    t.on_demand_price = base.on_demand_price;
    pools.notes.push(format!(
        "{CHEAP_ZONE} {CHEAP_SHAPE}: scenario, no capacity for the first {:.0} h, then {CHEAP_ROOM} spot instances at ${:.2}/h ({:.0} % of {CHEAP_BESIDE}'s)",
        OPENS_AFTER.as_secs_f64() / 3600.0,
        price * CHEAP_SHARE,
        CHEAP_SHARE * 100.0
    ));
    let shape = pools.types[k].clone();
    pools.traces.push(t);
    pools.types.push(shape);
    Ok(())
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Spot availability traces (one zone each). Default: the AWS V100 16-node traces under
    /// the shared data folder (`$TERN_DATA`, else `../shared/data`).
    #[arg(long = "trace", value_name = "FILE")]
    traces: Vec<PathBuf>,
    /// Virtual seconds per reconcile pass.
    #[arg(long, default_value_t = 60)]
    tick: u64,
    /// Stop after this many virtual hours even if jobs are still running.
    #[arg(long, default_value_t = 120.0, value_parser = super::number::positive, allow_negative_numbers = true)]
    hours: f64,
    /// Seed of the simulated cloud's fault injection (throttling, transient errors).
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Fraction of cloud calls that are throttled (seeded).
    #[arg(long, default_value_t = 0.02, value_parser = super::number::fraction, allow_negative_numbers = true)]
    throttle: f64,
    /// Keep the state database here (default: a temporary file, removed at the end).
    #[arg(long)]
    state: Option<PathBuf>,
    /// Print only the summary; the last line of stdout is one JSON object.
    #[arg(long)]
    json: bool,
    /// Print every pass's events (by default a waiting job's repeated wait/plan lines are
    /// left out).
    #[arg(long)]
    verbose: bool,
    /// Write the HTML cost report here (default: tern-demo-report.html in the temp folder).
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Run a real training through a real reclaim instead, on this machine and in real time
    /// (a few minutes): `tern controller --local-agents` from just before a reclaim in the
    /// traces, and a job whose `[run]` is examples/train/train.py.
    #[arg(long, conflicts_with_all = ["state", "report", "hours", "tick"])]
    local_agents: bool,
    #[command(flatten)]
    local: super::demo_local::LocalArgs,
}

#[derive(Debug, Serialize)]
struct JobLine {
    job: String,
    state: &'static str,
    progress: f64,
    cost_usd: f64,
    on_demand_usd: f64,
    gpu_hours: f64,
    reason: Option<String>,
    lost_samples: f64,
}

/// One migration of the demo: where the job went, when, and what it saved.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct MigrationLine {
    job: String,
    /// The zone it left (with the capacity when that was on-demand).
    from: String,
    to: String,
    at: DateTime<Utc>,
    /// The move rule's net saving when the move began (the `migrate` event's).
    expected_saving: f64,
    /// What the bill says it saved ([`tern::report::saving::realised`]); `None` when the move
    /// was cut short before its old nodes went.
    realised_saving: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Summary {
    virtual_hours: f64,
    wall_seconds: f64,
    passes: u64,
    jobs: Vec<JobLine>,
    cost_usd: f64,
    on_demand_usd: f64,
    savings_usd: f64,
    savings_percent: f64,
    spot_hours: f64,
    on_demand_hours: f64,
    notices: u64,
    launches: u64,
    /// Each migration the controller started, with what it expected to save and what it did.
    migrations: Vec<MigrationLine>,
    leaks_collected: u64,
    cloud_errors: BTreeMap<&'static str, u64>,
    instances_left: usize,
    /// Each team against its budget (the demo's budgets file), as the cost report has it.
    budgets: Vec<report::TeamBudget>,
    /// Where the HTML cost report was written.
    report_html: Option<PathBuf>,
}

/// Say on stderr when seeded synthetic availability stands in for the real traces.
pub fn print_trace_note(traces: &SimTraces) {
    if let Some(why) = &traces.synthetic_because {
        say_err!(
            "note: {why}; using seeded synthetic spot availability instead (pass --trace FILE or set TERN_DATA for real traces)"
        );
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.local_agents {
        return super::demo_local::run(&args.local, &args.traces, args.json);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(demo(args))
}

/// The demo's world before it runs: the simulated cloud, the controller with the example
/// jobs submitted, and where its state lives.
struct Setup {
    world: SimWorld,
    store: Arc<Store>,
    start: DateTime<Utc>,
    state: PathBuf,
    notes: Vec<String>,
    zones: Vec<String>,
    _tmp: TempDir,
}

fn setup(args: &Args) -> anyhow::Result<Setup> {
    let config = SimConfig {
        start: Utc
            .with_ymd_and_hms(2026, 11, 23, 0, 0, 0)
            .single()
            .context("start time")?,
        boot: Duration::from_secs(90),
        faults: FaultSchedule {
            seed: args.seed,
            throttle: args.throttle,
            ..FaultSchedule::default()
        },
        ..SimConfig::default()
    };
    let traces = sim_traces(&args.traces, args.seed, &config.instance_type.name)?;
    print_trace_note(&traces);
    let mut pools = demo_pools(traces, args.seed, &config.instance_type)?;
    cheaper_pool_opens(&mut pools)?;
    let regions = regions_of(&pools.traces);
    let mut zones: Vec<String> = pools.traces.iter().map(|t| t.zone.clone()).collect();
    zones.sort();
    zones.dedup();
    let start = config.start;
    let notes = pools.notes.clone();
    let sim = Arc::new(SimCloud::with_types(pools.traces, pools.types, config));
    let tmp = TempDir::new("tern-demo")?;
    let state = args
        .state
        .clone()
        .unwrap_or_else(|| tmp.path().join("tern-demo.db"));
    let store =
        Arc::new(Store::open(&state).with_context(|| format!("opening {}", state.display()))?);
    let mut config = ControllerConfig::new("tern-demo", regions);
    config.limits = Arc::new(demo_limits()?);
    let mut ctl = Controller::open(store.clone(), sim.clone(), config)?;
    for (file, text) in EXAMPLE_JOBS {
        ctl.submit(parse_job_spec(text, file)?, start)?;
    }
    let tick = Duration::from_secs(args.tick.max(1));
    Ok(Setup {
        world: SimWorld::new(sim, ctl, tick),
        store,
        start,
        state,
        notes,
        zones,
        _tmp: tmp,
    })
}

async fn demo(args: Args) -> anyhow::Result<()> {
    let wall = std::time::Instant::now();
    let Setup {
        mut world,
        store,
        start,
        state,
        notes,
        zones,
        _tmp,
    } = setup(&args)?;
    if !args.json {
        say!(
            "tern demo: simulated cloud with {} spot pools in {} zones ({}), bundled catalog prices; one reconcile pass every {} virtual seconds. Pools:",
            notes.len(),
            zones.len(),
            zones.join(", "),
            args.tick
        );
        for n in &notes {
            say!("  {n}");
        }
        say!("state: {}\n", state.display());
    }
    let horizon = chrono::TimeDelta::milliseconds((args.hours * 3_600_000.0) as i64);
    let mut log = EventLog {
        verbose: args.verbose,
        ..EventLog::default()
    };
    let mut last_event = 0;
    let mut printed = Ok(());
    world
        .run(usize::MAX, |ctl, now| {
            printed = print_new_events(&store, &mut last_event, &mut log, &args, start);
            let active = ctl
                .jobs()
                .any(|j| matches!(j.state, JobState::Pending | JobState::Running));
            printed.is_err()
                || (!active && ctl.instances().next().is_none())
                || now - start >= horizon
        })
        .await?;
    printed?;
    let now = world.now();
    // The demo's bill is the cost report's: one billing for every figure.
    let ledger = Ledger::load(&store, demo_limits()?.budgets())?;
    let report = report::build(&ledger, &CostQuery::default(), now)?;
    let workload = world.workers.take().unwrap_or_default();
    let decisions: Vec<Timeline> = report
        .rows
        .iter()
        .map(|r| tern::controller::explain::timeline(&r.key, &ledger.events, ledger.bills(), now))
        .collect();
    let mut summary = summarise(&world.ctl, &report, &workload, now, start, wall.elapsed());
    summary.migrations = migrations(&ledger, &decisions);
    let html = args
        .report
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("tern-demo-report.html"));
    std::fs::write(&html, report::html::page(&report, &decisions)?)
        .with_context(|| format!("writing {}", html.display()))?;
    summary.report_html = Some(html);
    if args.json {
        crate::cmd::output::print_json_line(&summary)?;
    } else {
        log.finish();
        if log.hidden > 0 {
            say!(
                "({} repeated wait/plan lines of jobs still waiting hidden; --verbose prints every pass)",
                log.hidden
            );
        }
        print_summary(&summary, &report, start);
    }
    Ok(())
}

/// Print the events stored since `last` (the pass's), unless `--json`.
fn print_new_events(
    store: &Store,
    last: &mut i64,
    log: &mut EventLog,
    args: &Args,
    start: DateTime<Utc>,
) -> anyhow::Result<()> {
    let events = store.events(*last, None)?;
    *last = events.last().map_or(*last, |e| e.id);
    if !args.json {
        for line in log.pass(&events, start) {
            say!("{line}");
        }
    }
    Ok(())
}

/// The demo's event log: state changes, not the same wait every pass. While a job waits, its
/// re-plans and capacity errors are held back: dropped when it waits again, printed when they
/// lead somewhere (a launch). `--verbose` prints every event as it comes.
#[derive(Debug, Default)]
struct EventLog {
    verbose: bool,
    /// Jobs waiting, with the retry events held back since their last wait.
    waiting: std::collections::HashMap<String, Vec<tern::store::StoredEvent>>,
    hidden: usize,
}

impl EventLog {
    /// The lines to print for one pass's events.
    fn pass(&mut self, events: &[tern::store::StoredEvent], start: DateTime<Utc>) -> Vec<String> {
        let mut shown: Vec<tern::store::StoredEvent> = Vec::new();
        for e in events {
            let Some(job) = e.job.as_deref().filter(|_| !self.verbose) else {
                shown.push(e.clone());
                continue;
            };
            let retry = matches!(e.kind.as_str(), "plan" | "capacity");
            match self.waiting.get_mut(job) {
                Some(held) if e.kind == "wait" => self.hidden += 1 + std::mem::take(held).len(),
                Some(held) if retry => held.push(e.clone()),
                Some(_) => {
                    let held = self.waiting.remove(job).unwrap_or_default();
                    shown.extend(held);
                    shown.push(e.clone());
                }
                None => {
                    if e.kind == "wait" {
                        self.waiting.insert(job.to_string(), Vec::new());
                    }
                    shown.push(e.clone());
                }
            }
        }
        shown
            .iter()
            .map(|e| {
                format!(
                    "[{}] {:<26} {:<11} {}",
                    clock(e.at - start),
                    e.job.as_deref().unwrap_or("-"),
                    e.kind,
                    e.message
                )
            })
            .collect()
    }

    /// Events still held back at the end count as hidden.
    fn finish(&mut self) {
        self.hidden += self.waiting.values().map(Vec::len).sum::<usize>();
        self.waiting.clear();
    }
}

fn clock(d: chrono::TimeDelta) -> String {
    let m = d.num_minutes();
    format!("+{:02}h{:02}m", m / 60, m % 60)
}

fn summarise(
    ctl: &Controller,
    report: &CostReport,
    workload: &Workload,
    now: DateTime<Utc>,
    start: DateTime<Utc>,
    wall: Duration,
) -> Summary {
    let jobs = ctl
        .jobs()
        .map(|j| {
            let row = report.rows.iter().find(|r| r.key == j.name());
            JobLine {
                job: j.name().to_string(),
                state: j.state.as_str(),
                progress: j.done_samples / j.total_samples.max(1.0),
                cost_usd: row.map_or(0.0, |r| r.cost),
                on_demand_usd: row.map_or(0.0, |r| r.on_demand_cost),
                gpu_hours: row.map_or(0.0, |r| r.instance_hours),
                reason: j.reason.clone(),
                lost_samples: workload.lost_samples.get(j.name()).copied().unwrap_or(0.0),
            }
        })
        .collect();
    let t = &report.total;
    let s = ctl.stats();
    Summary {
        virtual_hours: (now - start).num_seconds() as f64 / 3600.0,
        wall_seconds: wall.as_secs_f64(),
        passes: s.passes,
        jobs,
        cost_usd: t.cost,
        on_demand_usd: t.on_demand_cost,
        savings_usd: t.savings,
        savings_percent: t.savings_pct,
        spot_hours: t.spot_hours,
        on_demand_hours: t.instance_hours - t.spot_hours,
        notices: s.notices,
        launches: s.launches,
        migrations: Vec::new(),
        leaks_collected: s.leaks_collected,
        cloud_errors: s.cloud_errors.clone(),
        instances_left: ctl.instances().count(),
        budgets: report.budgets.clone(),
        report_html: None,
    }
}

fn print_summary(s: &Summary, report: &CostReport, start: DateTime<Utc>) {
    say!(
        "\nCost report after {:.1} virtual hours ({} passes, {:.1} s wall):",
        s.virtual_hours,
        s.passes,
        s.wall_seconds
    );
    print!(
        "{}",
        tern::terminal::safe(&report::render::table_text(report))
    );
    for j in s.jobs.iter().filter(|j| j.reason.is_some()) {
        say!("{}: {}", j.job, j.reason.as_deref().unwrap_or(""));
    }
    say!(
        "total ${:.2} vs ${:.2} on demand: saved ${:.2} ({:.0} %); {:.1} spot and {:.1} on-demand instance-hours",
        s.cost_usd,
        s.on_demand_usd,
        s.savings_usd,
        s.savings_percent,
        s.spot_hours,
        s.on_demand_hours
    );
    for m in &s.migrations {
        say!(
            "migrated {} {} → {} at {}: expected ${:.2}, realised {}",
            m.job,
            m.from,
            m.to,
            clock(m.at - start),
            m.expected_saving,
            m.realised_saving.map_or_else(
                || "not known (cut short)".to_string(),
                |r| format!("${r:.2}")
            )
        );
    }
    let errors: Vec<String> = s
        .cloud_errors
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    say!(
        "{} launches, {} interruption notices, {} migrations, {} leaks collected, cloud API errors: {}; {} instances left running",
        s.launches,
        s.notices,
        s.migrations.len(),
        s.leaks_collected,
        if errors.is_empty() {
            "none".to_string()
        } else {
            errors.join(", ")
        },
        s.instances_left
    );
    if let Some(html) = &s.report_html {
        say!("HTML cost report: {}", html.display());
    }
}

/// Where a node ran, as a migration line names it.
fn place(zone: &tern_cloud::Zone, capacity: tern_cloud::Capacity) -> String {
    match capacity {
        tern_cloud::Capacity::Spot => zone.to_string(),
        c => format!("{zone} ({c})"),
    }
}

/// Every migration the controller started, read back from the ledger's events (the store's,
/// as the cost report read them), with its realised saving as the jobs' decision timelines
/// have it ([`tern::report::saving::realised`], one formula for every report).
fn migrations(ledger: &Ledger, timelines: &[Timeline]) -> Vec<MigrationLine> {
    use tern::controller::Event;
    let realised = |job: &str, at: DateTime<Utc>| {
        let t = timelines.iter().find(|t| t.job == job)?;
        let d = t
            .decisions
            .iter()
            .find(|d| d.kind == "move" && d.at == at)?;
        d.realised_saving
    };
    let mut out = Vec::new();
    for e in ledger.events.iter().filter(|e| e.kind == "migrate") {
        let Some(Event::Migrating {
            job,
            from_capacity,
            from_zone,
            to_capacity,
            to_zone,
            net_saving,
            ..
        }) = e.fields.as_ref().and_then(tern::event::read)
        else {
            continue;
        };
        out.push(MigrationLine {
            realised_saving: realised(&job, e.at),
            job,
            from: place(&from_zone, from_capacity),
            to: place(&to_zone, to_capacity),
            at: e.at,
            expected_saving: net_saving,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: i64, kind: &str) -> tern::store::StoredEvent {
        tern::store::StoredEvent {
            id,
            at: DateTime::from_timestamp(1_800_000_000 + id * 60, 0).expect("time"),
            job: Some("j".into()),
            kind: kind.into(),
            message: format!("{kind} {id}"),
            fields: None,
        }
    }

    #[test]
    fn a_waiting_jobs_failed_replans_are_left_out_and_counted() {
        let kinds = [
            "wait", "plan", "capacity", "wait", "plan", "launched", "wait",
        ];
        let events: Vec<_> = kinds.iter().zip(1..).map(|(k, i)| event(i, k)).collect();
        let start = events[0].at;
        let mut quiet = EventLog::default();
        let shown: Vec<String> = events
            .iter()
            .flat_map(|e| quiet.pass(std::slice::from_ref(e), start))
            .collect();
        let kinds_shown: Vec<&str> = shown
            .iter()
            .map(|l| l.split_whitespace().nth(2).unwrap_or(""))
            .collect();
        // The first wait; the re-plan that failed and its wait are dropped; the re-plan that
        // led to a launch is printed with it; the job waits again later.
        assert_eq!(kinds_shown, ["wait", "plan", "launched", "wait"]);
        assert_eq!(quiet.hidden, 3);
        let mut verbose = EventLog {
            verbose: true,
            ..EventLog::default()
        };
        assert_eq!(verbose.pass(&events, start).len(), kinds.len());
        assert_eq!(verbose.hidden, 0);
    }
}
