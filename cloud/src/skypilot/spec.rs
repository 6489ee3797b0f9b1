//! Candidates → the TOML of a tern job spec, and back: [`candidates`] reads any parsed spec
//! the way SkyPilot's candidates are written, so the two can be compared.

use std::fmt::Write as _;

use super::{Candidate, Task, TaskOptions, capacity_of, work_lines};
use crate::spec::{Location, SpecError};
use crate::{Amount, CapacityRule, Constraints, JobSpec};

/// One placement of the converted spec: the candidates that differ only in accelerator and
/// `use_spot`.
struct Entry {
    like: Candidate,
    accelerators: Vec<String>,
    capacity: CapacityRule,
}

/// Everything but the accelerator and `use_spot`, as a comparable key.
fn key(c: &Candidate) -> String {
    format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
        c.cloud, c.region, c.zone, c.instance_type, c.cpus, c.memory, c.max_price
    )
}

/// Groups candidates into as few entries as say exactly the same set.
fn entries(candidates: &[Candidate]) -> Vec<Entry> {
    // First the accelerators of each (placement, use_spot), then the use_spot values of each
    // (placement, accelerators): every entry is then a full product of the two.
    let mut by_spot: Vec<(String, bool, Candidate, Vec<String>)> = Vec::new();
    for c in candidates {
        let (k, acc) = (key(c), c.accelerator.clone().unwrap_or_default());
        match by_spot
            .iter_mut()
            .find(|(kk, s, _, _)| *kk == k && *s == c.use_spot)
        {
            Some((_, _, _, list)) if list.contains(&acc) => {}
            Some((_, _, _, list)) => list.push(acc),
            None => by_spot.push((k, c.use_spot, c.clone(), vec![acc])),
        }
    }
    let mut out: Vec<(String, Entry, bool, bool)> = Vec::new();
    for (k, spot, like, accelerators) in by_spot {
        match out
            .iter_mut()
            .find(|(kk, e, _, _)| *kk == k && e.accelerators == accelerators)
        {
            Some((_, _, s, d)) => {
                *s |= spot;
                *d |= !spot;
            }
            None => out.push((
                k,
                Entry {
                    like,
                    accelerators,
                    capacity: CapacityRule::Any,
                },
                spot,
                !spot,
            )),
        }
    }
    out.into_iter()
        .map(|(_, mut e, spot, on_demand)| {
            e.capacity = capacity_of(spot, on_demand);
            e
        })
        .collect()
}

/// The spec's TOML.
pub(super) fn render(
    task: &Task,
    candidates: &[Candidate],
    max_restarts: Option<u32>,
    disk_gb: Option<u32>,
    opts: &TaskOptions<'_>,
    path: &str,
) -> Result<String, SpecError> {
    let counts: Vec<u32> = candidates.iter().filter_map(|c| c.count).collect();
    let per_node = counts[0];
    if let Some(other) = counts.iter().find(|c| **c != per_node) {
        return Err(SpecError::Unsupported {
            at: Location {
                file: path.to_string(),
                line: None,
            },
            field: "resources.accelerators".into(),
            why: format!(
                "candidates with {per_node} and {other} accelerators per node: a tern job has \
                 one size, so give every candidate the same count"
            ),
        });
    }
    let entries = entries(candidates);
    let mut all: Vec<String> = Vec::new();
    for e in &entries {
        for a in &e.accelerators {
            if !all.iter().any(|x| x.eq_ignore_ascii_case(a)) {
                all.push(a.clone());
            }
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# A SkyPilot task, converted by tern (`tern convert skypilot`)."
    );
    let _ = writeln!(out, "name = {}", quote(&task.name));
    let _ = writeln!(out, "team = {}", quote(&opts.team));
    let _ = writeln!(out, "accelerators = {}", list(&all));
    let _ = writeln!(
        out,
        "# num_nodes {} × {per_node} accelerators per node",
        task.num_nodes
    );
    let _ = writeln!(out, "workers = {}", task.num_nodes * per_node);
    let _ = writeln!(out, "gpus_per_node = {per_node}");
    if task.num_nodes > 1 {
        let _ = writeln!(out, "gang = true");
    }
    if let Some(gb) = disk_gb {
        let _ = writeln!(out, "disk_gb = {gb}");
    }
    if let Some(d) = &opts.deadline {
        let _ = writeln!(out, "deadline = {}", quote(d));
    }
    if let [only] = entries.as_slice() {
        placement(&mut out, only, &[]);
    }
    out.push_str("\n[work]\n");
    work_lines(&opts.work, &mut out);
    run_table(&mut out, task, max_restarts);
    if entries.len() > 1 {
        for e in &entries {
            out.push_str("\n[[any_of]]\n");
            placement(&mut out, e, &all);
        }
    }
    Ok(out)
}

/// An entry's fields; `accelerators` only when they are not all of the job's.
fn placement(out: &mut String, e: &Entry, all: &[String]) {
    let c = &e.like;
    let mut field = |k: &str, v: String| {
        let _ = writeln!(out, "{k} = {v}");
    };
    if !all.is_empty() && e.accelerators.len() < all.len() {
        field("accelerators", list(&e.accelerators));
    }
    if let Some(cloud) = &c.cloud {
        field("clouds", list(std::slice::from_ref(cloud)));
    }
    if let Some(r) = &c.region {
        field("regions", list(std::slice::from_ref(r)));
    }
    // An AWS zone name is not a zone id: its region stands for it (warned about).
    if let Some(z) = c
        .zone
        .as_ref()
        .filter(|z| c.cloud.as_deref() != Some("aws") || z.contains("-az"))
    {
        field("zones", list(std::slice::from_ref(z)));
    }
    if let Some(t) = &c.instance_type {
        field("instance_types", list(std::slice::from_ref(t)));
    }
    if let Some(a) = c.cpus {
        field("cpus", quote(&a.to_string()));
    }
    if let Some(a) = c.memory {
        field("memory", quote(&a.to_string()));
    }
    if let Some(p) = c.max_price {
        field("max_price_per_hour", p.to_string());
    }
    field("capacity", quote(e.capacity.as_str()));
}

fn run_table(out: &mut String, task: &Task, max_restarts: Option<u32>) {
    out.push_str("\n[run]\n");
    let _ = writeln!(out, "command = {}", quote(&task.run));
    if let Some(s) = &task.setup {
        let _ = writeln!(out, "setup = {}", quote(s));
    }
    // SkyPilot runs both with bash; the task's script starts its own launcher.
    let _ = writeln!(
        out,
        "shell = \"bash\"\nlauncher = \"none\"\nnode_env = \"skypilot\""
    );
    if let Some(w) = &task.workdir {
        let _ = writeln!(out, "workdir = {}", quote(w));
    }
    if let Some(n) = max_restarts {
        let _ = writeln!(out, "max_restarts = {n}");
    }
    if !task.env.is_empty() {
        out.push_str("\n[run.env]\n");
        for (k, v) in &task.env {
            let _ = writeln!(out, "{k} = {}", quote(v));
        }
    }
}

/// A TOML string: multi-line text as a literal block when it can be, else escaped.
fn quote(s: &str) -> String {
    if s.contains('\n')
        && !s.contains("'''")
        && !s.chars().any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        // A newline right after the opening quotes is trimmed by TOML.
        format!("'''\n{s}'''")
    } else {
        toml::Value::String(s.to_string()).to_string()
    }
}

fn list(items: &[String]) -> String {
    toml::Value::Array(items.iter().cloned().map(toml::Value::String).collect()).to_string()
}

/// The candidates a parsed spec allows, written as SkyPilot writes a task's: one per
/// accelerator × `use_spot` × listed cloud, region, zone and instance type, for each
/// `[[any_of]]` entry (or the spec's own placement when it has none).
pub fn candidates(spec: &JobSpec) -> Vec<Candidate> {
    let top = &spec.constraints;
    let entries: Vec<&Constraints> = if top.any_of.is_empty() {
        vec![top]
    } else {
        top.any_of.iter().collect()
    };
    let mut out = Vec::new();
    for e in entries {
        let pick = |a: &[String], b: &[String]| -> Vec<Option<String>> {
            let l = if a.is_empty() { b } else { a };
            if l.is_empty() {
                vec![None]
            } else {
                l.iter().cloned().map(Some).collect()
            }
        };
        let clouds: Vec<String> = e.clouds.iter().map(|c| c.as_str().to_string()).collect();
        let top_clouds: Vec<String> = top.clouds.iter().map(|c| c.as_str().to_string()).collect();
        let accelerators = if e.accelerators.is_empty() {
            &spec.accelerators
        } else {
            &e.accelerators
        };
        let spot = match (e.capacity, top.capacity) {
            (CapacityRule::SpotOnly, _) | (CapacityRule::Any, CapacityRule::SpotOnly) => vec![true],
            (CapacityRule::OnDemandOnly, _) | (CapacityRule::Any, CapacityRule::OnDemandOnly) => {
                vec![false]
            }
            _ => vec![true, false],
        };
        let or = |a: Option<Amount>, b: Option<Amount>| a.or(b);
        for cloud in pick(&clouds, &top_clouds) {
            for region in pick(&e.regions, &top.regions) {
                for zone in pick(&e.zones, &top.zones) {
                    for instance_type in pick(&e.instance_types, &top.instance_types) {
                        for a in accelerators {
                            for s in &spot {
                                out.push(Candidate {
                                    cloud: cloud.clone(),
                                    region: region.clone(),
                                    zone: zone.clone(),
                                    accelerator: Some(a.clone()),
                                    count: e.gpus_per_node.or(top.gpus_per_node),
                                    use_spot: *s,
                                    instance_type: instance_type.clone(),
                                    cpus: or(e.cpus, top.cpus),
                                    memory: or(e.memory_gib, top.memory_gib),
                                    max_price: e.max_price_per_hour.or(top.max_price_per_hour),
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    out
}
