//! The quota file (`--quota FILE`, `PUT /v1/quotas`): account quotas, team budgets, team
//! shares, fairness, and what happens when a team's budget runs out. `tern plan` and the
//! controller read it through the same [`Limits`] and build the planner's options from it
//! with the same [`Limits::plan_options`], so the CLI and the service plan alike.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};
use tern_cloud::{Budget, Offer};
use tern_plan::{PlanOptions, Quota};

/// A quota file that cannot be used: where, which field, and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    #[error("reading {file}: {source}")]
    Read {
        file: String,
        source: tern_cloud::input::ReadError,
    },
    #[error("{file}{}: {field}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Invalid {
        file: String,
        line: Option<usize>,
        field: String,
        message: String,
    },
}

/// What a team's jobs do once its budget is spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Exhausted {
    /// Checkpoint, release the capacity and wait (pending) until the budget allows again,
    /// e.g. after a reload raised it.
    #[default]
    Hold,
    /// Checkpoint, release the capacity and end the jobs `over-budget`.
    Drain,
}

/// One `[team.NAME]` table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamLimit {
    pub total_usd: Option<f64>,
    pub per_hour_usd: Option<f64>,
    /// The team's weight in the pool when fairness is on (1 when absent).
    pub share: Option<f64>,
    #[serde(default)]
    pub on_exhausted: Exhausted,
}

/// The whole file: `[[quota]]` tables, `[team.NAME]` tables and an optional `fairness`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// How much teams' shares weigh against cost (`--fairness` overrides it).
    pub fairness: Option<f64>,
    #[serde(default)]
    pub quota: Vec<Quota>,
    #[serde(default)]
    pub team: BTreeMap<String, TeamLimit>,
}

impl Limits {
    /// Read and check a quota file.
    pub fn load(path: &Path) -> Result<Limits, LimitsError> {
        let file = path.display().to_string();
        let text = tern_cloud::input::read_text_capped(path, tern_cloud::input::Limit::SETTINGS)
            .map_err(|source| LimitsError::Read {
                file: file.clone(),
                source,
            })?;
        Limits::parse(&text, &file)
    }

    /// Parse and check `text`, naming `file` in errors.
    pub fn parse(text: &str, file: &str) -> Result<Limits, LimitsError> {
        let limits: Limits = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            LimitsError::Invalid {
                file: file.to_string(),
                line,
                field: e
                    .span()
                    .map(|s| key_at(text, s.start))
                    .unwrap_or_else(|| "(file)".into()),
                message: e.message().to_string(),
            }
        })?;
        limits.check(text, file)?;
        Ok(limits)
    }

    fn check(&self, text: &str, file: &str) -> Result<(), LimitsError> {
        let bad = |field: String, needle: &str, message: String| LimitsError::Invalid {
            file: file.to_string(),
            line: line_of(text, needle),
            field,
            message,
        };
        if let Some(f) = self.fairness
            && !(f.is_finite() && f >= 0.0)
        {
            return Err(bad(
                "fairness".into(),
                "fairness",
                format!("expected a number ≥ 0, got {f}"),
            ));
        }
        for (name, t) in &self.team {
            let header = format!("[team.{name}]");
            if let Err(found) = tern_cloud::name::check_name(name) {
                // Shown escaped, never raw: a name may hold control characters.
                let message = format!("expected {}", tern_cloud::name::NAME_RULE);
                return Err(bad(format!("team name {found}"), &header, message));
            }
            for (key, v) in [("total_usd", t.total_usd), ("per_hour_usd", t.per_hour_usd)] {
                if let Some(v) = v
                    && !(v.is_finite() && v >= 0.0)
                {
                    let message = format!("expected a non-negative number of dollars, got {v}");
                    return Err(bad(format!("team.{name}.{key}"), &header, message));
                }
            }
            if let Some(share) = t.share
                && !(share.is_finite() && share > 0.0)
            {
                let message = format!("expected a weight > 0, got {share}");
                return Err(bad(format!("team.{name}.share"), &header, message));
            }
        }
        Ok(())
    }

    /// Refuses quotas that no offer could ever count against: an unknown family or region is
    /// a typo that would otherwise leave the real limit unenforced.
    pub fn check_against(&self, offers: &[Offer], file: &str) -> Result<(), LimitsError> {
        for (i, q) in self.quota.iter().enumerate() {
            let of_cloud = || offers.iter().filter(|o| o.cloud == q.cloud);
            let bad = |field: &str, message: String| LimitsError::Invalid {
                file: file.to_string(),
                line: None,
                field: format!("quota[{i}].{field}"),
                message,
            };
            if !of_cloud().any(|o| same_family(q, o)) {
                let families: BTreeSet<String> = of_cloud()
                    .filter_map(|o| o.accelerator().map(|a| a.family()))
                    .collect();
                let message = format!(
                    "no {} offer in the catalog has family {}; known: {}",
                    q.cloud,
                    tern_cloud::name::shown(&q.family),
                    families.into_iter().collect::<Vec<_>>().join(", ")
                );
                return Err(bad("family", message));
            }
            if let Some(r) = &q.region {
                let regions: BTreeSet<&str> = of_cloud().map(|o| o.region.as_str()).collect();
                if !regions.contains(r.as_str()) {
                    let message = format!(
                        "no {} offer in the catalog is in region {}; known: {}",
                        q.cloud,
                        tern_cloud::name::shown(r),
                        regions.into_iter().collect::<Vec<_>>().join(", ")
                    );
                    return Err(bad("region", message));
                }
            }
        }
        Ok(())
    }

    /// Each team's budget, where it has one.
    pub fn budgets(&self) -> BTreeMap<String, Budget> {
        self.team
            .iter()
            .map(|(k, t)| {
                let budget = Budget {
                    total_usd: t.total_usd,
                    per_hour_usd: t.per_hour_usd,
                };
                (k.clone(), budget)
            })
            .collect()
    }

    /// Teams' weights for fairness (`share`), where set.
    pub fn weights(&self) -> BTreeMap<String, f64> {
        self.team
            .iter()
            .filter_map(|(k, t)| Some((k.clone(), t.share?)))
            .collect()
    }

    /// `base` with this file's quotas, budgets, weights and fairness (`fairness` given on the
    /// command line wins over the file's). Both `tern plan` and the controller call it.
    pub fn plan_options(&self, base: PlanOptions, fairness: Option<f64>) -> PlanOptions {
        PlanOptions {
            team_budgets: self.budgets(),
            team_weights: self.weights(),
            fairness: fairness.or(self.fairness).unwrap_or(base.fairness),
            quotas: self.quota.clone(),
            ..base
        }
    }
}

/// Whether offer `o` is of quota `q`'s family (accelerators) or class (vCPUs), ignoring
/// region and capacity.
fn same_family(q: &Quota, o: &Offer) -> bool {
    let any = Quota {
        region: None,
        capacity: None,
        ..q.clone()
    };
    any.per_node(o).is_some()
}

/// The 1-based line of the first line containing `needle`.
fn line_of(text: &str, needle: &str) -> Option<usize> {
    text.lines().position(|l| l.contains(needle)).map(|i| i + 1)
}

/// The key written on the line holding byte `at`, or its table header: what an error there
/// is about.
fn key_at(text: &str, at: usize) -> String {
    let at = at.min(text.len());
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or("").trim();
    match line.split_once('=') {
        Some((key, _)) => key.trim().to_string(),
        None => line.trim_matches(|c| c == '[' || c == ']').to_string(),
    }
}

#[cfg(test)]
mod tests;
