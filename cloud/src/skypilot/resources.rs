//! A task's `resources` → its candidates: one per way it may run, as SkyPilot expands them
//! (`any_of` and `ordered` entries override the fields around them; an accelerator set or
//! list gives one candidate per accelerator).

use super::yaml::{Node, Yaml};
use super::{Candidate, Reader, Recovery};
use crate::spec::{MAX_DISK_GB, SpecError};
use crate::{Amount, Offer};

/// Every field of one SkyPilot `resources` mapping, and what tern does with it.
enum Field {
    /// Read into the candidate.
    Read,
    /// Accepted; what it asks for is not applied (the reason is the warning).
    Warn(&'static str),
    /// Refused: tern cannot do what it asks.
    Refuse(&'static str),
}

fn field(key: &str) -> Option<Field> {
    use Field::*;
    Some(match key {
        "cloud" | "region" | "zone" | "infra" | "cpus" | "memory" | "accelerators"
        | "instance_type" | "use_spot" | "job_recovery" | "max_hourly_cost" | "disk_size" => Read,
        "disk_tier" | "network_tier" | "local_disk" => {
            Warn("not applied: the deployment's launch or instance template decides it")
        }
        "labels" => Warn("not applied: tern tags its VMs with its own owner, job and intent tags"),
        "autostop" => Warn("not needed: tern releases a job's VMs when the job ends"),
        "priority" | "priority_class" => {
            Warn("not applied: give tern's own `priority` in the converted spec")
        }
        "image_id" => Refuse(
            "tern boots VMs from the deployment's launch or instance template (and runs no \
             containers): build the image into it",
        ),
        "ports" => Refuse("tern opens no ports: a training job serves nothing"),
        "volumes" => Refuse("tern attaches no volumes: read data from object storage in `setup`"),
        "accelerator_args" => {
            Refuse("TPU runtime versions and accelerator arguments are not supported")
        }
        "ephemeral_storage" => Refuse("Kubernetes storage is not supported"),
        "hooks" => Refuse("lifecycle hooks are not supported: tern's agent runs `run` and `setup`"),
        _ => return None,
    })
}

const READ: &str = "cloud, region, zone, infra, cpus, memory, accelerators, instance_type, \
                    use_spot, job_recovery, disk_size, max_hourly_cost, any_of, ordered";

/// One `resources` mapping after merging: each key with the path it came from.
type Merged<'a> = Vec<(String, String, &'a Node)>;

impl Reader<'_> {
    /// The candidates of a task's `resources` (absent: SkyPilot's default, no accelerator).
    pub(super) fn resources(&mut self, r: Option<&Node>) -> Result<Vec<Candidate>, SpecError> {
        let Some(r) = r.filter(|r| r.value != Yaml::Null) else {
            return Err(self.no_accelerator("resources", 1));
        };
        let map = self.map(r, "resources")?;
        let mut base: Merged<'_> = Vec::new();
        let (mut any_of, mut ordered) = (None, None);
        for (k, v) in map {
            match k.as_str() {
                "any_of" => any_of = Some(v),
                "ordered" => ordered = Some(v),
                _ => base.push((k.clone(), format!("resources.{k}"), v)),
            }
        }
        let alternatives = match (any_of, ordered) {
            (Some(a), Some(_)) => {
                return Err(self.invalid(
                    a,
                    "resources.any_of",
                    "`any_of` or `ordered`, not both",
                    "both",
                ));
            }
            (Some(a), None) => Some(("resources.any_of", a)),
            (None, Some(o)) => {
                self.warn(
                    o,
                    "resources.ordered",
                    "read as a choice, not an order: tern picks the cheapest candidate that \
                     meets the deadline",
                );
                Some(("resources.ordered", o))
            }
            (None, None) => None,
        };
        let Some((path, alts)) = alternatives else {
            return self.single(&base);
        };
        let items = match &alts.value {
            Yaml::Seq(items) if !items.is_empty() => items,
            _ => {
                return Err(self.invalid(
                    alts,
                    path,
                    "a non-empty list of resource mappings",
                    alts.kind(),
                ));
            }
        };
        if let Some((_, p, acc)) = base.iter().find(|(k, _, _)| k == "accelerators") {
            // SkyPilot's rules: no order inside an order, and a preference list only alone.
            let several = self.accelerators(acc, p)?.len() > 1;
            let listed = matches!(acc.value, Yaml::Seq(_));
            if several && (path == "resources.ordered" || listed) {
                let expected = if listed {
                    "one accelerator or a set beside `any_of`, one beside `ordered`"
                } else {
                    "one accelerator beside `ordered`"
                };
                let found = if listed {
                    "a list of several"
                } else {
                    "several"
                };
                return Err(self.invalid(acc, p, expected, found));
            }
        }
        let mut out = Vec::new();
        let mut dropped = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let at = format!("{path}[{i}]");
            let mut merged = base.clone();
            for (k, v) in self.map(item, &at)? {
                merged.retain(|(key, _, _)| key != k);
                merged.push((k.clone(), format!("{at}.{k}"), v));
            }
            match self.single(&merged) {
                Ok(c) => out.extend(c),
                Err(SpecError::Unsupported {
                    at: loc,
                    field,
                    why,
                }) if why.starts_with(OTHER_CLOUD) => {
                    dropped.push((loc, field, why));
                }
                Err(e) => return Err(e),
            }
        }
        if out.is_empty()
            && let Some((at, field, why)) = dropped.first().cloned()
        {
            return Err(SpecError::Unsupported { at, field, why });
        }
        for (at, field, why) in dropped {
            self.warnings.push(super::Warning {
                at,
                field,
                message: format!("{why}; this alternative is left out"),
            });
        }
        Ok(out)
    }

    /// One merged mapping → its candidates, one per accelerator.
    fn single(&mut self, m: &Merged<'_>) -> Result<Vec<Candidate>, SpecError> {
        let mut c = Candidate::default();
        let mut accelerators: Option<Vec<(String, u32)>> = None;
        let infra = m.iter().find(|(k, _, _)| k == "infra");
        for (k, path, v) in m {
            match field(k) {
                None => {
                    return Err(SpecError::Unknown {
                        at: self.at(v.line),
                        field: path.clone(),
                        allowed: READ.to_string(),
                    });
                }
                Some(Field::Refuse(why)) => return Err(self.unsupported(v, path, why)),
                Some(Field::Warn(why)) => self.warn(v, path, why),
                Some(Field::Read) => {}
            }
            match k.as_str() {
                "infra" => self.infra(v, path, &mut c)?,
                "cloud" | "region" | "zone" => {
                    if let Some((_, ipath, _)) = infra {
                        let expected = format!(
                            "`infra` or `cloud`/`region`/`zone`, not both (`{ipath}` is set)"
                        );
                        return Err(self.invalid(v, path, &expected, "both"));
                    }
                    let s = self.string(v, path)?;
                    match k.as_str() {
                        "cloud" => c.cloud = Some(self.cloud(v, path, &s)?),
                        "region" => c.region = Some(s),
                        _ => c.zone = Some(s),
                    }
                }
                "cpus" => c.cpus = Some(self.amount(v, path, 1.0)?),
                "memory" => c.memory = Some(self.amount(v, path, 0.0)?),
                "accelerators" => accelerators = Some(self.accelerators(v, path)?),
                "instance_type" => c.instance_type = Some(self.string(v, path)?),
                "use_spot" => c.use_spot = self.boolean(v, path)?,
                "job_recovery" => self.recovery(v, path)?,
                "max_hourly_cost" => c.max_price = Some(self.price(v, path)?),
                "disk_size" => self.disk_size(v, path)?,
                _ => {}
            }
        }
        self.check_zone(&c, m)?;
        let accelerators = match accelerators {
            Some(list) => list,
            None => match c.instance_type.as_deref().and_then(|t| self.shape_of(t)) {
                Some((cloud, acc)) => {
                    c.cloud.get_or_insert(cloud);
                    vec![acc]
                }
                None => {
                    let line = m.first().map_or(1, |(_, _, v)| v.line);
                    return Err(self.no_accelerator("resources.accelerators", line));
                }
            },
        };
        Ok(accelerators
            .into_iter()
            .map(|(name, count)| Candidate {
                accelerator: Some(name),
                count: Some(count),
                ..c.clone()
            })
            .collect())
    }

    /// `infra: cloud[/region[/zone]]`, `*` for any.
    fn infra(&mut self, v: &Node, path: &str, c: &mut Candidate) -> Result<(), SpecError> {
        let s = self.string(v, path)?;
        let parts: Vec<&str> = s
            .trim()
            .trim_matches('/')
            .split('/')
            .map(str::trim)
            .collect();
        let expected = "`cloud`, `cloud/region` or `cloud/region/zone` (`*` for any)";
        // Kubernetes contexts hold slashes; they are refused by name below.
        let k8s = matches!(
            parts[0].to_ascii_lowercase().as_str(),
            "k8s" | "kubernetes" | "ssh"
        );
        if (parts.iter().any(|p| p.is_empty()) || parts.len() > 3) && !k8s {
            return Err(self.invalid(v, path, expected, &format!("{s:?}")));
        }
        let any = |p: Option<&&str>| p.filter(|p| **p != "*").map(|p| p.to_string());
        if let Some(cloud) = any(parts.first()) {
            c.cloud = Some(self.cloud(v, path, &cloud)?);
        }
        c.region = any(parts.get(1));
        c.zone = any(parts.get(2));
        Ok(())
    }

    /// `aws` or `gcp`, lower case.
    fn cloud(&mut self, v: &Node, path: &str, name: &str) -> Result<String, SpecError> {
        let lower = name.to_ascii_lowercase();
        match lower.as_str() {
            "aws" | "gcp" => Ok(lower),
            "k8s" | "kubernetes" | "ssh" => Err(self.unsupported(
                v,
                path,
                "Kubernetes and SSH node pools are not supported: tern provisions VMs on AWS and \
                 GCP",
            )),
            _ => Err(SpecError::Unsupported {
                at: self.at(v.line),
                field: path.to_string(),
                why: format!("{OTHER_CLOUD} ({name:?})"),
            }),
        }
    }

    /// AWS zone names (`us-east-1a`) differ per account, and tern places by zone id
    /// (`use1-az4`): such a zone keeps its region and is warned about. GCP zones are names.
    fn check_zone(&mut self, c: &Candidate, m: &Merged<'_>) -> Result<(), SpecError> {
        let (Some(zone), Some("aws")) = (&c.zone, c.cloud.as_deref()) else {
            return Ok(());
        };
        if zone.contains("-az") {
            return Ok(());
        }
        let (_, path, v) = m
            .iter()
            .find(|(k, _, _)| k == "zone" || k == "infra")
            .expect("a zone comes from `zone` or `infra`");
        self.warn(
            v,
            path,
            &format!(
                "AWS zone names differ per account and tern places by zone id: {zone} is read \
                 as its region; pin a zone with `zones = [\"<zone id>\"]` (e.g. use1-az4) in \
                 the converted spec"
            ),
        );
        Ok(())
    }

    /// `A100:8`, `{A100: 8}`, `{A100:8, H100:8}` (a set), `[A100:8, H100:8]` (a list).
    fn accelerators(&mut self, v: &Node, path: &str) -> Result<Vec<(String, u32)>, SpecError> {
        let items: Vec<(String, Option<&Node>, &Node)> = match &v.value {
            Yaml::Str(s) => {
                let s = s.trim();
                let inner = s
                    .strip_prefix('{')
                    .and_then(|x| x.strip_suffix('}'))
                    .or_else(|| s.strip_prefix('[').and_then(|x| x.strip_suffix(']')));
                match inner {
                    Some(inner) => inner
                        .split(',')
                        .map(|p| (p.trim().to_string(), None, v))
                        .collect(),
                    None => vec![(s.to_string(), None, v)],
                }
            }
            Yaml::Map(m) => m.iter().map(|(k, n)| (k.clone(), Some(n), n)).collect(),
            Yaml::Seq(s) => s
                .iter()
                .map(|n| Ok((self.string(n, path)?, None, n)))
                .collect::<Result<_, SpecError>>()?,
            _ => {
                let expected = "`NAME:COUNT`, a set `{A:N, B:N}` or a list `[A:N, B:N]`";
                return Err(self.invalid(v, path, expected, v.kind()));
            }
        };
        let mut out: Vec<(String, u32)> = Vec::new();
        for (text, count, node) in items {
            let (name, n) = self.accelerator(node, path, &text, count)?;
            if !out.iter().any(|(a, _)| a.eq_ignore_ascii_case(&name)) {
                out.push((name, n));
            }
        }
        if out.is_empty() {
            return Err(self.invalid(v, path, "at least one accelerator", "none"));
        }
        if matches!(v.value, Yaml::Seq(_)) && out.len() > 1 {
            self.warn(
                v,
                path,
                "a preference order, read as a choice: tern picks the cheapest that meets the \
                 deadline",
            );
        }
        Ok(out)
    }

    /// One accelerator: `NAME`, `NAME:COUNT`, or a mapping's `NAME: COUNT`.
    fn accelerator(
        &mut self,
        v: &Node,
        path: &str,
        text: &str,
        count: Option<&Node>,
    ) -> Result<(String, u32), SpecError> {
        let (name, from_text) = match text.split_once(':') {
            Some((n, c)) => (n.trim(), Some(c.trim().to_string())),
            None => (text.trim(), None),
        };
        // SkyPilot's `80GB+`: digits, a unit, perhaps `+` (not a name like `A100-80GB`).
        let by_memory = |s: &str| {
            let s = s.trim_end_matches('+').to_ascii_lowercase();
            ["gb", "mb", "tb"].iter().any(|u| {
                s.strip_suffix(u)
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
        };
        if name.is_empty() || by_memory(name) || from_text.as_deref().is_some_and(by_memory) {
            return Err(self.unsupported(
                v,
                path,
                "accelerators chosen by memory (`80GB+`) are not supported: name them",
            ));
        }
        let count = match (count.map(|c| &c.value), from_text) {
            (None | Some(Yaml::Null), None) => 1.0,
            (None | Some(Yaml::Null), Some(t)) => t.parse::<f64>().unwrap_or(f64::NAN),
            (Some(Yaml::Int(i)), _) => *i as f64,
            (Some(Yaml::Float(x)), _) => *x,
            (Some(_), _) => f64::NAN,
        };
        if !(count >= 1.0 && count.fract() == 0.0 && count <= 1024.0) {
            return Err(self.invalid(
                v,
                path,
                "a whole number of accelerators ≥ 1 (fractions are for Kubernetes)",
                &format!("{text:?}"),
            ));
        }
        Ok((self.canonical(name), count as u32))
    }

    /// `job_recovery`: a strategy name, or `{strategy, max_restarts_on_errors,
    /// recover_on_exit_codes}`.
    fn recovery(&mut self, v: &Node, path: &str) -> Result<(), SpecError> {
        let strategy_warning = "not applied: tern moves a job by its own deadline policy";
        match &v.value {
            Yaml::Null => Ok(()),
            Yaml::Str(_) => {
                self.warn(v, path, strategy_warning);
                Ok(())
            }
            Yaml::Map(m) => {
                for (k, n) in m {
                    let p = format!("{path}.{k}");
                    match k.as_str() {
                        "strategy" if n.value != Yaml::Null => self.warn(n, &p, strategy_warning),
                        "strategy" => {}
                        "max_restarts_on_errors" => {
                            let Yaml::Int(i) = n.value else {
                                return Err(self.invalid(n, &p, "an integer ≥ 0", n.kind()));
                            };
                            let r = u32::try_from(i).map_err(|_| {
                                self.invalid(n, &p, "an integer ≥ 0", &i.to_string())
                            })?;
                            self.set_restarts(n, &p, r)?;
                        }
                        "recover_on_exit_codes" => self.warn(
                            n,
                            &p,
                            "not applied: tern's agent restarts a failed training from its \
                             checkpoint whatever its exit code, up to max_restarts",
                        ),
                        _ => {
                            return Err(SpecError::Unknown {
                                at: self.at(n.line),
                                field: p,
                                allowed: "strategy, max_restarts_on_errors, recover_on_exit_codes"
                                    .into(),
                            });
                        }
                    }
                }
                Ok(())
            }
            _ => Err(self.invalid(v, path, "a strategy name or a mapping", v.kind())),
        }
    }

    /// Restarts are the job's: every candidate must agree.
    fn set_restarts(&mut self, v: &Node, path: &str, r: u32) -> Result<(), SpecError> {
        match self.recovery {
            Some(Recovery { max_restarts, .. }) if max_restarts != r => Err(self.invalid(
                v,
                path,
                &format!("the same max_restarts_on_errors everywhere ({max_restarts} elsewhere)"),
                &r.to_string(),
            )),
            _ => {
                self.recovery = Some(Recovery { max_restarts: r });
                Ok(())
            }
        }
    }

    /// `disk_size`: GB, or a size like `"1TB"` (whole GB, cut down as SkyPilot does). The disk is the job's:
    /// where candidates differ, the largest holds for all, and that is warned about.
    fn disk_size(&mut self, v: &Node, path: &str) -> Result<(), SpecError> {
        let expected = format!("a size in GB from 1 to {MAX_DISK_GB}, or a string like \"1TB\"");
        let gb = match &v.value {
            Yaml::Int(i) => Some(*i as f64),
            Yaml::Str(s) if !s.trim_end().ends_with('+') => parse_size(s).map(|a| a.value),
            _ => None,
        }
        .map(f64::floor)
        .filter(|g| (1.0..=f64::from(MAX_DISK_GB)).contains(g));
        let Some(gb) = gb else {
            return Err(self.invalid(v, path, &expected, &describe(v)));
        };
        let gb = gb as u32;
        match self.disk_gb {
            Some(seen) if seen != gb => {
                let larger = seen.max(gb);
                self.warn(
                    v,
                    path,
                    &format!(
                        "candidates ask for {seen} GB and {gb} GB of disk: a tern job has one \
                         disk size, so every VM gets {larger} GB"
                    ),
                );
                self.disk_gb = Some(larger);
            }
            _ => self.disk_gb = Some(gb),
        }
        Ok(())
    }

    /// `cpus`/`memory`: `8`, `"8+"`, memory also `"32GB"`/`"32GB+"` (GiB: SkyPilot's units
    /// are powers of 1024).
    fn amount(&mut self, v: &Node, path: &str, min: f64) -> Result<Amount, SpecError> {
        let expected = "a number, or a string like \"8+\" (at least) or \"32GB+\"";
        let a = match &v.value {
            Yaml::Int(i) => Some(Amount {
                value: *i as f64,
                at_least: false,
            }),
            Yaml::Float(x) => Some(Amount {
                value: *x,
                at_least: false,
            }),
            Yaml::Str(s) => parse_size(s),
            _ => None,
        };
        match a {
            Some(a) if a.value.is_finite() && a.value > 0.0 && a.value >= min => Ok(a),
            _ => Err(self.invalid(v, path, expected, &describe(v))),
        }
    }

    fn price(&mut self, v: &Node, path: &str) -> Result<f64, SpecError> {
        match v.value {
            Yaml::Int(i) if i > 0 => Ok(i as f64),
            Yaml::Float(x) if x.is_finite() && x > 0.0 => Ok(x),
            _ => Err(self.invalid(v, path, "dollars per hour > 0", &describe(v))),
        }
    }

    /// A task that names no accelerator.
    fn no_accelerator(&self, field: &str, line: usize) -> SpecError {
        SpecError::Unsupported {
            at: self.at(line),
            field: field.to_string(),
            why: "tern places accelerator jobs: name the accelerators (`accelerators: A100:8`) \
                  or an instance type that has them"
                .to_string(),
        }
    }

    /// The catalog's spelling of an accelerator (`a100` → `A100`), else as written.
    fn canonical(&self, name: &str) -> String {
        self.catalog
            .iter()
            .filter_map(Offer::accelerator)
            .find(|a| a.name.eq_ignore_ascii_case(name))
            .map_or_else(|| name.to_string(), |a| a.name.clone())
    }

    /// The cloud and accelerators of a catalog instance type.
    fn shape_of(&self, instance_type: &str) -> Option<(String, (String, u32))> {
        let o = self
            .catalog
            .iter()
            .find(|o| o.instance_type.name == instance_type)?;
        let a = o.accelerator()?;
        Some((o.cloud.as_str().to_string(), (a.name.clone(), a.count)))
    }
}

/// Why a candidate on a cloud tern does not run on is refused (an `any_of` alternative on one
/// is left out instead, when others remain).
const OTHER_CLOUD: &str = "tern provisions on AWS and GCP only";

/// `"8"`, `"8+"`, `"32GB"`, `"32GB+"`, `"1TB"` → an amount in GiB (or vCPUs).
pub(super) fn parse_size(s: &str) -> Option<Amount> {
    let s = s.trim();
    let (body, at_least) = match s.strip_suffix('+') {
        Some(b) => (b.trim_end(), true),
        None => (s, false),
    };
    let lower = body.to_ascii_lowercase();
    let units = [
        ("kb", -2),
        ("ki", -2),
        ("mb", -1),
        ("mi", -1),
        ("gb", 0),
        ("gi", 0),
        ("tb", 1),
        ("ti", 1),
        ("pb", 2),
        ("pi", 2),
    ];
    let (num, scale) = units
        .iter()
        .find_map(|(u, p)| {
            lower
                .strip_suffix(u)
                .map(|n| (n.trim().to_string(), 1024f64.powi(*p)))
        })
        .unwrap_or((lower.clone(), 1.0));
    let value: f64 = num.parse().ok()?;
    Some(Amount {
        value: value * scale,
        at_least,
    })
}

/// A value for a message: numbers and booleans as written, strings quoted.
fn describe(v: &Node) -> String {
    match &v.value {
        Yaml::Int(i) => i.to_string(),
        Yaml::Float(x) => x.to_string(),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Str(s) => format!("{s:?}"),
        _ => v.kind().to_string(),
    }
}
