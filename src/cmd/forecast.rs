//! `tern forecast`: predicted throughput and runtime of a job spec per accelerator and worker
//! count, and `tern forecast evaluate`: the forecaster's error on measured profiles.

use std::path::{Path, PathBuf};

use anyhow::bail;
use serde::Serialize;
use tern_cloud::JobSpec;
use tern_policies::forecast::{
    Basis, BootstrapMethod, Donor, Evaluation, FitOn, FitOptions, Forecaster, Interconnect,
    ProfileRow, Shape, evaluate, evaluate_bootstrap, speed,
};

use tern::jobs::{LoadedJob, load_profile};

use super::output::{print_json_line, table};

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Job spec (TOML) to forecast.
    #[arg(long, value_name = "FILE")]
    pub job: Option<PathBuf>,
    /// GPUs per node when a worker count needs several nodes (default: the most seen working
    /// together on one node in the job's observations for that accelerator, else its usual
    /// cloud node, else 8).
    #[arg(long, value_name = "N")]
    pub gpus_per_node: Option<u32>,
    /// Print one JSON object as the last line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Fit on part of a measured profile and report the step-time error (MAPE) on the rest.
    Evaluate(EvaluateArgs),
}

#[derive(Debug, clap::Args)]
pub struct EvaluateArgs {
    /// Profile directory: `placements.csv` + `scalability.csv`, or the `-<gpu>` variants.
    #[arg(long, value_name = "DIR")]
    pub profile: PathBuf,
    /// Node type of `placements-<gpu>.csv` / `scalability-<gpu>.csv` (aws, azure, dgx, ...).
    #[arg(long, value_name = "TYPE")]
    pub gpu: Option<String>,
    /// Rows to fit on: all, single-node, or single-node plus two chosen probes.
    #[arg(long, value_enum, default_value = "all")]
    pub fit_on: FitOnArg,
    /// Bootstrap: fit all of these node types (comma-separated) plus the single-GPU rows of
    /// --gpu, predict the rest; several sources are pooled (geometric mean of their syncs).
    #[arg(long, value_name = "SOURCE[,SOURCE...]", requires = "gpu")]
    pub bootstrap_from: Option<String>,
    /// ratio: Sia's single-GPU speed ratio applied to the whole step; transfer: target compute +
    /// source sync scaled by interconnect (needs known node types); blend: target compute +
    /// the smaller of the two syncs where the target's hop is faster (floored at the source's
    /// sync over the bandwidth gain), else their geometric mean.
    #[arg(long, value_enum, default_value = "blend")]
    pub bootstrap_method: BootstrapArg,
    /// Accelerator name for the interconnect prior (default: derived from --gpu; a profile in the
    /// unsuffixed Pollux layout is read as the Pollux testbed's g4dn.12xlarge, 4 × T4).
    #[arg(long, value_name = "NAME")]
    pub accelerator: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum BootstrapArg {
    Blend,
    Transfer,
    Ratio,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum FitOnArg {
    All,
    SingleNode,
    Probes,
}

impl From<FitOnArg> for FitOn {
    fn from(a: FitOnArg) -> Self {
        match a {
            FitOnArg::All => FitOn::All,
            FitOnArg::SingleNode => FitOn::SingleNode,
            FitOnArg::Probes => FitOn::Probes,
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match (args.command, args.job) {
        (Some(Command::Evaluate(e)), _) => run_evaluate(e),
        (None, Some(job)) => run_job(&job, args.gpus_per_node.map(|n| n.max(1)), args.json),
        (None, None) => bail!("give --job FILE, or use `tern forecast evaluate --profile DIR`"),
    }
}

/// Accelerator of a profile's node type (Sia's names, see data/profiles/README.md).
fn node_accelerator(node_type: &str) -> Option<&'static str> {
    speed::node_type(node_type)
        .map(|n| n.accelerator)
        .or_else(|| speed::lookup(node_type).map(|h| h.name))
}

/// The node type an unsuffixed (Pollux-layout) profile was measured on when the command does not
/// say: that layout is the Pollux artifact's (`simulator/traces` of petuum/adaptdl), recorded on
/// AWS g4dn.12xlarge nodes, the same nodes Sia's layout names `aws`. Without it such a profile
/// would get the generic interconnect prior, whose cross-node ratio (≈ 2.3) is a fifth of what
/// those nodes show over TCP.
const POLLUX_LAYOUT_NODE_TYPE: &str = "g4dn.12xlarge";

/// The node type the interconnect prior describes: --gpu names it (Sia layout); with neither
/// --gpu nor --accelerator, the Pollux layout's testbed.
fn profile_node_type<'a>(gpu: Option<&'a str>, accelerator: Option<&str>) -> Option<&'a str> {
    match (gpu, accelerator) {
        (Some(g), _) => Some(g),
        (None, None) => Some(POLLUX_LAYOUT_NODE_TYPE),
        (None, Some(_)) => None,
    }
}

/// A node type's interconnect, when its figures are known.
fn interconnect(node_type: &str) -> Option<Interconnect> {
    speed::node_type(node_type).map(|n| Interconnect {
        link_gbps: n.link_gbps,
        nic_gbps: n.nic_gbps,
    })
}

/// The donor node types of `--bootstrap-from A[,B...]`: distinct, none empty, none the target.
fn donor_names(list: &str, target: Option<&str>) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    for n in list.split(',').map(str::trim) {
        if n.is_empty() {
            bail!("--bootstrap-from {list:?}: an empty node type; expected TYPE[,TYPE...]");
        }
        if Some(n) == target {
            bail!("--bootstrap-from {list:?}: {n} is the target (--gpu) itself");
        }
        if names.iter().any(|m| m == n) {
            bail!("--bootstrap-from {list:?}: {n} is listed twice");
        }
        names.push(n.to_string());
    }
    Ok(names)
}

/// The interconnect prior: the node type's own link/NIC figures when known, else the
/// accelerator's usual cloud node, else the generic default.
fn fit_options(node_type: Option<&str>, accelerator: Option<&str>) -> FitOptions {
    let cross_ratio = match (node_type.and_then(speed::node_type), accelerator) {
        (Some(n), None) => speed::cross_ratio(n.link_gbps, n.nic_gbps),
        (_, Some(a)) => speed::interconnect_ratio(a),
        (None, None) => speed::default_cross_ratio(),
    };
    FitOptions {
        cross_ratio,
        ..FitOptions::default()
    }
}

/// `evaluate --bootstrap-from`: each listed node type lends its rows; the interconnects pick the
/// method (ratio whenever one of them is not known).
fn bootstrap_evaluation(
    a: &EvaluateArgs,
    from: &str,
    target: &[ProfileRow],
    opts: &FitOptions,
) -> anyhow::Result<(&'static str, Evaluation)> {
    let names = donor_names(from, a.gpu.as_deref())?;
    let rows = names
        .iter()
        .map(|n| load_profile(&a.profile, Some(n)))
        .collect::<Result<Vec<_>, _>>()?;
    let opts_of: Vec<FitOptions> = names.iter().map(|n| fit_options(Some(n), None)).collect();
    let donors: Vec<Donor<'_>> = names
        .iter()
        .zip(&rows)
        .zip(&opts_of)
        .map(|((n, r), o)| Donor {
            name: n,
            rows: r,
            opts: o,
            net: interconnect(n),
        })
        .collect();
    let target_net = a.gpu.as_deref().and_then(interconnect);
    let known = target_net.is_some() && donors.iter().all(|d| d.net.is_some());
    let method = match (a.bootstrap_method, known) {
        (BootstrapArg::Blend, true) => BootstrapMethod::Blend,
        (BootstrapArg::Transfer, true) => BootstrapMethod::Transfer,
        _ => BootstrapMethod::Ratio,
    };
    let mode = match method {
        BootstrapMethod::Blend => "bootstrap-blend",
        BootstrapMethod::Transfer => "bootstrap-transfer",
        BootstrapMethod::Ratio => "bootstrap-ratio",
    };
    let e = evaluate_bootstrap(&donors, target, opts, target_net, method)?;
    Ok((mode, e))
}

#[derive(Debug, Serialize)]
struct EvaluateReport<'a> {
    profile: String,
    gpu: Option<&'a str>,
    mode: &'a str,
    bootstrap_from: Option<&'a str>,
    accelerator: Option<&'a str>,
    /// Node type whose link / NIC figures gave the interconnect prior, when one did.
    node_type: Option<&'a str>,
    cross_ratio_prior: f64,
    mape: Option<f64>,
    n_fit: usize,
    n_eval: usize,
    #[serde(flatten)]
    evaluation: &'a Evaluation,
}

fn run_evaluate(a: EvaluateArgs) -> anyhow::Result<()> {
    let node_type = profile_node_type(a.gpu.as_deref(), a.accelerator.as_deref());
    let opts = fit_options(node_type, a.accelerator.as_deref());
    let accelerator = a
        .accelerator
        .clone()
        .or_else(|| node_type.and_then(node_accelerator).map(String::from));
    let target = load_profile(&a.profile, a.gpu.as_deref())?;
    let (mode, evaluation) = match &a.bootstrap_from {
        Some(from) => bootstrap_evaluation(&a, from, &target, &opts)?,
        None => {
            let mode = match a.fit_on {
                FitOnArg::All => "all",
                FitOnArg::SingleNode => "single-node",
                FitOnArg::Probes => "probes",
            };
            (mode, evaluate(&target, a.fit_on.into(), &opts)?)
        }
    };
    let report = EvaluateReport {
        profile: a.profile.display().to_string(),
        gpu: a.gpu.as_deref(),
        mode,
        bootstrap_from: a.bootstrap_from.as_deref(),
        accelerator: accelerator.as_deref(),
        // --accelerator, when given, gave the prior (see `fit_options`).
        node_type: node_type.filter(|n| a.accelerator.is_none() && speed::node_type(n).is_some()),
        cross_ratio_prior: opts.cross_ratio,
        mape: evaluation.mape,
        n_fit: evaluation.n_fit,
        n_eval: evaluation.n_eval,
        evaluation: &evaluation,
    };
    print_evaluation(&report);
    if a.json {
        print_json_line(&report)?;
    }
    Ok(())
}

fn pct(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1} %")).unwrap_or_else(|| "-".into())
}

fn print_evaluation(r: &EvaluateReport<'_>) {
    let e = r.evaluation;
    say!(
        "{} ({}{}), fit on {}: {} rows fitted, {} evaluated, MAPE {}",
        r.profile,
        r.gpu.unwrap_or("default files"),
        r.bootstrap_from
            .map(|s| format!(", bootstrapped from {s}"))
            .unwrap_or_default(),
        r.mode,
        e.n_fit,
        e.n_eval,
        pct(e.mape),
    );
    let basis = match (r.node_type, r.accelerator) {
        (Some(n), _) => format!("node type {n}"),
        (None, Some(a)) => format!("accelerator {a}"),
        (None, None) => "generic hardware".into(),
    };
    say!(
        "interconnect prior: cross-node / intra-node sync ratio {:.2} ({basis})",
        r.cross_ratio_prior
    );
    say!(
        "90 % interval: covers {} of evaluated rows, mean high/low ratio {}",
        pct(e.coverage.map(|c| c * 100.0)),
        e.mean_interval_ratio
            .map(|w| format!("{w:.2}"))
            .unwrap_or_else(|| "-".into())
    );
    for p in &e.probes {
        say!(
            "probe: {} GPUs on {} nodes, local batch {}",
            p.gpus,
            p.nodes,
            p.local_batch
        );
    }
    let p = &e.params;
    say!(
        "params: alpha_c {:.3e} beta_c {:.3e} alpha_r {:.3e} beta_r {:.3e} alpha_n {:.3e} beta_n {:.3e} gamma {:.2}; identified compute={} intra={} cross={}",
        p.alpha_c,
        p.beta_c,
        p.alpha_r,
        p.beta_r,
        p.alpha_n,
        p.beta_n,
        p.gamma,
        e.identified.compute,
        e.identified.intra_node,
        e.identified.cross_node
    );
    if !e.groups.is_empty() {
        let mut t = table(&["rows", "n", "MAPE", "bias (pred/measured)"]);
        for g in &e.groups {
            t.add_row(vec![
                g.name.clone(),
                g.n.to_string(),
                format!("{:.1} %", g.mape),
                format!("{:+.1} %", (g.bias.exp() - 1.0) * 100.0),
            ]);
        }
        say!("{t}");
    }
}

#[derive(Debug, Serialize)]
struct Row {
    accelerator: String,
    workers: u32,
    nodes: u32,
    local_batch: f64,
    step_s: f64,
    throughput_samples_per_s: f64,
    throughput_low: f64,
    throughput_high: f64,
    runtime_s: f64,
    runtime_low_s: f64,
    runtime_high_s: f64,
    basis: Basis,
    prior_only: bool,
}

#[derive(Debug, Serialize)]
struct JobReport<'a> {
    job: &'a str,
    samples: u64,
    forecasts: Vec<Row>,
    unavailable: Vec<String>,
}

fn run_job(path: &Path, gpus_per_node: Option<u32>, json: bool) -> anyhow::Result<()> {
    let job = LoadedJob::load(path, chrono::Utc::now())?;
    let per_node = |acc: &str| job.gpus_per_node(acc, gpus_per_node);
    let batch = job.batch(&path.display().to_string())?;
    let report = job_report(&job.forecaster, &job.spec, batch, &per_node);
    print_job(&report, &job.spec);
    if json {
        print_json_line(&report)?;
    }
    Ok(())
}

fn job_report<'a>(
    f: &Forecaster,
    spec: &'a JobSpec,
    local_batch: f64,
    gpus_per_node: &dyn Fn(&str) -> u32,
) -> JobReport<'a> {
    let samples = spec.work.samples();
    let mut rows = Vec::new();
    let mut unavailable = Vec::new();
    for acc in &spec.accelerators {
        for w in tern_plan::sizes_between(spec.workers.min, spec.workers.max) {
            let shape = Shape::new(w, w.div_ceil(gpus_per_node(acc)), local_batch);
            match f.predict(&spec.name, acc, &shape) {
                Ok(p) => {
                    let fc = p.forecast(samples as f64, None);
                    rows.push(Row {
                        accelerator: acc.clone(),
                        workers: w,
                        nodes: shape.nodes,
                        local_batch,
                        step_s: p.step_s,
                        throughput_samples_per_s: fc.throughput_samples_per_s,
                        throughput_low: shape.global_batch() / p.step_high_s,
                        throughput_high: shape.global_batch() / p.step_low_s,
                        runtime_s: fc.runtime_s,
                        runtime_low_s: fc.low_s,
                        runtime_high_s: fc.high_s,
                        basis: p.basis,
                        prior_only: fc.prior_only,
                    });
                }
                Err(e) => {
                    let msg = format!("{acc}: {e}");
                    if !unavailable.contains(&msg) {
                        unavailable.push(msg);
                    }
                }
            }
        }
    }
    JobReport {
        job: &spec.name,
        samples,
        forecasts: rows,
        unavailable,
    }
}

fn hours(s: f64) -> String {
    format!("{:.1}", s / 3600.0)
}

fn print_job(r: &JobReport<'_>, spec: &JobSpec) {
    say!(
        "{} ({}): {} samples, workers {}..{}",
        r.job,
        spec.team,
        r.samples,
        spec.workers.min,
        spec.workers.max
    );
    let mut t = table(&[
        "accelerator",
        "workers",
        "nodes",
        "step s",
        "samples/s",
        "90 % range",
        "runtime h",
        "90 % range h",
        "basis",
    ]);
    for row in &r.forecasts {
        t.add_row(vec![
            row.accelerator.clone(),
            row.workers.to_string(),
            row.nodes.to_string(),
            format!("{:.3}", row.step_s),
            format!("{:.0}", row.throughput_samples_per_s),
            format!("{:.0}–{:.0}", row.throughput_low, row.throughput_high),
            hours(row.runtime_s),
            format!("{}–{}", hours(row.runtime_low_s), hours(row.runtime_high_s)),
            match &row.basis {
                Basis::Fitted => "fitted".to_string(),
                Basis::Bootstrap { from } => format!("bootstrap from {from}"),
                Basis::RelativeSpeed { from, ratio } => {
                    format!("PRIOR: {from} × {ratio:.2} (datasheet)")
                }
                Basis::Hint => "HINT: the spec's FLOPs per sample (datasheet)".to_string(),
            },
        ]);
    }
    say!("{t}");
    for u in &r.unavailable {
        say!("no forecast: {u}");
    }
}
