//! Cost reports (`tern cost-report`, `GET /v1/costs`, `tern simulate --report`): what each job
//! cost, billed at the prices that held while it ran (never today's catalog), against the
//! same instance-hours on demand and against the plan's estimate.
//!
//! [`build`] is pure: a [`Ledger`] (jobs, usage intervals, recorded prices, budgets) and a
//! [`CostQuery`] in, a [`CostReport`] out. `render`, `chart` and `html` turn it into tables,
//! CSV, SVG charts and a self-contained HTML page.

pub mod attribution;
pub mod bill;
pub mod buckets;
pub mod chart;
pub mod html;
pub mod render;
pub mod saving;
pub mod waterfall;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use tern_cloud::{Budget, Capacity, Offer};

pub use crate::api::wire::costs::{
    Attribution, BucketCost, BucketUnit, CostQuery, CostReport, CostRow, DayCost, GroupBy,
    Projection, Segment, TeamBudget,
};
use bill::dollars_within;
pub use bill::{Billed, bill, by_day, cloud_of};

use crate::store::{JobRecord, JobState, PriceLog, Store, StoreError, Usage};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("--since {since} is after --until {until}")]
    SinceAfterUntil {
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    },
    #[error("no job named '{name}' in this store{}", known_list(known))]
    UnknownJob { name: String, known: Vec<String> },
    #[error("no team named '{name}' in this store{}", known_list(known))]
    UnknownTeam { name: String, known: Vec<String> },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ReportError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, ReportError::Store(e) if e.is_retryable())
    }

    /// Bad input (HTTP 400), as opposed to a store failure.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, ReportError::Store(_))
    }
}

fn known_list(known: &[String]) -> String {
    match known.len() {
        0 => String::new(),
        n if n <= 10 => format!(" (known: {})", known.join(", ")),
        n => format!(" (known: {}, and {} more)", known[..10].join(", "), n - 10),
    }
}

/// Everything a report is computed from.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    pub jobs: Vec<JobRecord>,
    pub usage: Vec<(Usage, Option<Offer>)>,
    /// Offer key → recorded price changes, oldest first.
    pub prices: PriceLog,
    /// Team → budget (from the quota/budget file).
    pub budgets: BTreeMap<String, Budget>,
    /// The controller's events, oldest first: what attribution reads (plans, notices, moves).
    pub events: Vec<crate::store::StoredEvent>,
}

impl Ledger {
    pub fn load(store: &Store, budgets: BTreeMap<String, Budget>) -> Result<Ledger, StoreError> {
        Ok(Ledger {
            jobs: store.load()?.jobs,
            usage: store.usage_with_offers()?,
            prices: store.prices()?,
            budgets,
            events: store.events(0, None)?,
        })
    }

    /// What the ledger billed, as [`saving::realised`] reads it.
    pub fn bills(&self) -> saving::Bills<'_> {
        saving::Bills {
            usage: &self.usage,
            prices: &self.prices,
        }
    }

    /// The latest time the ledger records (a launch, an end or a price change). A report on a
    /// store written in virtual time (the simulated cloud) runs up to it, not to the wall clock.
    pub fn latest(&self) -> Option<DateTime<Utc>> {
        let usage = self
            .usage
            .iter()
            .flat_map(|(u, _)| [Some(u.started_at), u.ended_at])
            .flatten();
        let prices = self.prices.values().flatten().map(|p| p.0);
        usage.chain(prices).max()
    }
}

#[derive(Default)]
struct Acc {
    jobs: BTreeSet<String>,
    instances: BTreeSet<String>,
    hours: f64,
    spot_hours: f64,
    cost: f64,
    on_demand: f64,
    probe: f64,
}

/// A stretch of time, `[from, to)`.
type Window = (DateTime<Utc>, DateTime<Utc>);

impl Acc {
    /// `pieces` of `u`; the part inside `probe` (its job's probe window) is also probe spend.
    fn add(&mut self, u: &Usage, pieces: &[Billed], probe: Option<Window>) {
        self.jobs.insert(u.job.clone());
        self.instances.insert(u.instance.clone());
        for b in pieces {
            let h = b.piece.hours();
            self.hours += h;
            if u.capacity == Capacity::Spot {
                self.spot_hours += h;
            }
            self.cost += b.piece.dollars();
            self.on_demand += b.on_demand_dollars();
        }
        if let Some(w) = probe {
            self.probe += dollars_within(pieces, w);
        }
    }

    fn row(&self, key: String) -> CostRow {
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        CostRow {
            key,
            state: None,
            reason: None,
            jobs: self.jobs.len(),
            instances: self.instances.len(),
            instance_hours: self.hours,
            spot_hours: self.spot_hours,
            cost: self.cost,
            probe_usd: self.probe,
            on_demand_cost: self.on_demand,
            savings: self.on_demand - self.cost,
            savings_pct: 100.0 * ratio(self.on_demand - self.cost, self.on_demand),
            spot_share: ratio(self.spot_hours, self.hours),
            planned_cost: None,
            plan_error: None,
            attribution: None,
        }
    }
}

/// Build the report for `query` over `ledger` as of `now` (or the ledger's latest record,
/// if later: see [`Ledger::latest`]).
pub fn build(
    ledger: &Ledger,
    query: &CostQuery,
    now: DateTime<Utc>,
) -> Result<CostReport, ReportError> {
    let now = ledger.latest().map_or(now, |l| l.max(now));
    let until = query.until.unwrap_or(now);
    if let Some(since) = query.since.filter(|s| *s > until) {
        return Err(ReportError::SinceAfterUntil { since, until });
    }
    let jobs = select_jobs(ledger, query)?;
    // Without an explicit end, an ended interval is billed in full (its one-minute minimum
    // may reach past now); open intervals run until now.
    let end = query.until.unwrap_or(DateTime::<Utc>::MAX_UTC);
    let billed = bill_all(ledger, &jobs, (query.since, end), now);
    let probes: BTreeMap<&str, Window> = jobs
        .iter()
        .filter_map(|(name, j)| probe_window(j, now).map(|w| (*name, w)))
        .collect();
    let mut groups: BTreeMap<String, Acc> = BTreeMap::new();
    let mut total = Acc::default();
    let mut days: BTreeMap<String, DayCost> = BTreeMap::new();
    for (u, offer, pieces) in &billed {
        let probe = probes.get(u.job.as_str()).copied();
        total.add(u, pieces, probe);
        for (day, p) in by_day(pieces) {
            let d = days.entry(day.clone()).or_default();
            let dollars: f64 = p.iter().map(|b| b.piece.dollars()).sum();
            match u.capacity {
                Capacity::Spot => d.spot += dollars,
                _ => d.on_demand += dollars,
            }
            if query.by == GroupBy::Day {
                groups.entry(day).or_default().add(u, &p, probe);
            }
        }
        if query.by != GroupBy::Day {
            let key = group_key(query.by, u, offer.as_ref(), &jobs);
            groups.entry(key).or_default().add(u, pieces, probe);
        }
    }
    let parts = attributions(ledger, &jobs, &billed, &probes);
    let mut rows: Vec<CostRow> = match query.by {
        GroupBy::Job => job_rows(&jobs, &groups, query.launched_only),
        GroupBy::Team => team_rows(&jobs, &groups),
        _ => groups.iter().map(|(k, a)| a.row(k.clone())).collect(),
    };
    for r in &mut rows {
        r.attribution = match query.by {
            GroupBy::Job => parts.get(r.key.as_str()).copied(),
            GroupBy::Team => summed(
                jobs.iter()
                    .filter(|(_, j)| j.spec.team == r.key)
                    .filter_map(|(n, _)| parts.get(n)),
            ),
            _ => None,
        };
    }
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    let mut total_row = total.row("total".into());
    total_row.jobs = match query.by {
        GroupBy::Job | GroupBy::Team if !query.launched_only => jobs.len(),
        _ => total.jobs.len(),
    };
    total_row.planned_cost = sum_planned(jobs.values().copied());
    total_row.plan_error = total_row.planned_cost.map(|p| total_row.cost - p);
    total_row.attribution = summed(parts.values());
    let deadline = jobs
        .values()
        .filter(|j| !j.state.is_final())
        .filter_map(|j| j.deadline_at)
        .max();
    let series = buckets::series(&billed, until, deadline);
    Ok(CostReport {
        generated_at: now,
        since: query.since,
        until,
        by: query.by,
        rows,
        total: total_row,
        segments: if query.split {
            segments(&billed)
        } else {
            Vec::new()
        },
        days: days
            .into_iter()
            .map(|(day, d)| DayCost { day, ..d })
            .collect(),
        budgets: budgets(ledger, &jobs, until, now),
        bucket: series.unit,
        buckets: series.buckets,
        projection: series.projection,
    })
}

/// Each job's attribution (`report::attribution`), over the pieces its row bills: jobs that
/// were planned or cost something.
fn attributions<'a>(
    ledger: &Ledger,
    jobs: &BTreeMap<&'a str, &JobRecord>,
    billed: &[BilledUsage<'_>],
    probes: &BTreeMap<&str, Window>,
) -> BTreeMap<&'a str, Attribution> {
    let mut events = attribution::typed_events(&ledger.events);
    let rates = attribution::work_rates(ledger.usage.iter().filter_map(|(_, o)| o.as_ref()));
    jobs.iter()
        .filter_map(|(name, record)| {
            let mine: Vec<_> = billed
                .iter()
                .filter(|(u, _, _)| u.job == *name)
                .map(|(u, _, p)| (*u, &p[..]))
                .collect();
            if record.planned_cost.is_none() && mine.is_empty() {
                return None;
            }
            let run = attribution::JobRun {
                record,
                billed: mine,
                prices: &ledger.prices,
                events: events.remove(*name).unwrap_or_default(),
                probe: probes.get(name).copied(),
                rates: &rates,
            };
            Some((*name, attribution::attribute(&run)))
        })
        .collect()
}

/// Part-wise sum; `None` when nothing is summed.
fn summed<'a>(parts: impl Iterator<Item = &'a Attribution>) -> Option<Attribution> {
    parts.fold(None, |acc, a| {
        let mut sum = acc.unwrap_or_default();
        sum.add(a);
        Some(sum)
    })
}

/// A job's probe window: from when the probe's capacity ran to its end (`now` while open).
/// None without a probe, before it ran, or when it ended before it ran. Its instances are the
/// job's own, and may run on after it, so the window, not the instance, marks probe spend.
fn probe_window(job: &JobRecord, now: DateTime<Utc>) -> Option<Window> {
    let p = job.probe.as_ref()?;
    let from = p.probing_since.or(p.running_at)?;
    let to = p.ended_at.unwrap_or(now);
    (to > from).then_some((from, to))
}

/// The jobs in scope, by name; an unknown `--job` or `--team` is an error naming the known ones.
fn select_jobs<'a>(
    ledger: &'a Ledger,
    query: &CostQuery,
) -> Result<BTreeMap<&'a str, &'a JobRecord>, ReportError> {
    if let Some(name) = &query.job
        && !ledger.jobs.iter().any(|j| j.name() == name)
    {
        return Err(ReportError::UnknownJob {
            name: name.clone(),
            known: ledger.jobs.iter().map(|j| j.name().to_string()).collect(),
        });
    }
    if let Some(team) = &query.team
        && !ledger.jobs.iter().any(|j| &j.spec.team == team)
    {
        let known: BTreeSet<String> = ledger.jobs.iter().map(|j| j.spec.team.clone()).collect();
        return Err(ReportError::UnknownTeam {
            name: team.clone(),
            known: known.into_iter().collect(),
        });
    }
    Ok(ledger
        .jobs
        .iter()
        .filter(|j| query.job.as_ref().is_none_or(|n| j.name() == n))
        .filter(|j| query.team.as_ref().is_none_or(|t| &j.spec.team == t))
        .map(|j| (j.name(), j))
        .collect())
}

type BilledUsage<'a> = (&'a Usage, Option<Offer>, Vec<Billed>);

/// Every interval of the jobs in scope, billed inside the window (empty ones dropped).
fn bill_all<'a>(
    ledger: &'a Ledger,
    jobs: &BTreeMap<&str, &JobRecord>,
    window: (Option<DateTime<Utc>>, DateTime<Utc>),
    now: DateTime<Utc>,
) -> Vec<BilledUsage<'a>> {
    ledger
        .usage
        .iter()
        .filter(|(u, _)| jobs.contains_key(u.job.as_str()))
        .map(|(u, o)| {
            let prices = ledger.prices.get(&u.offer_key).map_or(&[][..], |p| &p[..]);
            let pieces = bill(u, o.as_ref(), prices, window, now);
            (u, o.clone(), pieces)
        })
        .filter(|(_, _, p)| !p.is_empty())
        .collect()
}

/// One part of an offer key, or `?` when the key is malformed.
fn key_part(key: &str, part: impl Fn(tern_cloud::OfferKey<'_>) -> &str) -> String {
    tern_cloud::OfferKey::parse(key)
        .map_or("?", part)
        .to_string()
}

fn group_key(
    by: GroupBy,
    u: &Usage,
    offer: Option<&Offer>,
    jobs: &BTreeMap<&str, &JobRecord>,
) -> String {
    let kind = || key_part(&u.offer_key, |k| k.instance_type);
    match by {
        GroupBy::Job | GroupBy::Day => u.job.clone(),
        GroupBy::Team => jobs
            .get(u.job.as_str())
            .map_or_else(|| "?".into(), |j| j.spec.team.clone()),
        GroupBy::Cloud => cloud_of(u, offer).to_string(),
        GroupBy::Capacity => u.capacity.as_str().to_string(),
        GroupBy::InstanceType => offer.map_or_else(kind, |o| o.instance_type.name.clone()),
    }
}

fn sum_planned<'a>(jobs: impl Iterator<Item = &'a JobRecord>) -> Option<f64> {
    jobs.filter_map(|j| j.planned_cost)
        .fold(None, |acc, p| Some(acc.unwrap_or(0.0) + p))
}

/// One row per job in scope, launched or not (a job that never ran costs $0 and says why).
fn job_rows(
    jobs: &BTreeMap<&str, &JobRecord>,
    groups: &BTreeMap<String, Acc>,
    launched_only: bool,
) -> Vec<CostRow> {
    jobs.values()
        .filter_map(|j| {
            let acc = groups.get(j.name());
            if launched_only && acc.is_none() {
                return None;
            }
            let mut row = acc.map_or_else(
                || Acc::default().row(j.name().into()),
                |a| a.row(j.name().into()),
            );
            row.jobs = 1;
            row.state = Some(j.state.as_str().to_string());
            row.reason = j.reason.clone().filter(|_| j.state != JobState::Running);
            row.planned_cost = j.planned_cost;
            row.plan_error = j.planned_cost.map(|p| row.cost - p);
            Some(row)
        })
        .collect()
}

fn team_rows(jobs: &BTreeMap<&str, &JobRecord>, groups: &BTreeMap<String, Acc>) -> Vec<CostRow> {
    let teams: BTreeSet<&str> = jobs.values().map(|j| j.spec.team.as_str()).collect();
    teams
        .into_iter()
        .map(|team| {
            let mut row = groups
                .get(team)
                .map_or_else(|| Acc::default().row(team.into()), |a| a.row(team.into()));
            let members = jobs.values().copied().filter(|j| j.spec.team == team);
            row.jobs = members.clone().count();
            row.planned_cost = sum_planned(members);
            row.plan_error = row.planned_cost.map(|p| row.cost - p);
            row
        })
        .collect()
}

fn segments(billed: &[BilledUsage<'_>]) -> Vec<Segment> {
    let mut out: Vec<Segment> = billed
        .iter()
        .map(|(u, offer, pieces)| Segment {
            job: u.job.clone(),
            instance: u.instance.clone(),
            cloud: cloud_of(u, offer.as_ref()).to_string(),
            zone: offer.as_ref().map_or_else(
                || key_part(&u.offer_key, |k| k.zone),
                |o| o.zone.to_string(),
            ),
            instance_type: offer.as_ref().map_or_else(
                || key_part(&u.offer_key, |k| k.instance_type),
                |o| o.instance_type.name.clone(),
            ),
            capacity: u.capacity.as_str().to_string(),
            started_at: u.started_at,
            ended_at: u.ended_at,
            billed_hours: pieces.iter().map(|b| b.piece.hours()).sum(),
            cost: pieces.iter().map(|b| b.piece.dollars()).sum(),
            on_demand_cost: pieces.iter().map(Billed::on_demand_dollars).sum(),
        })
        .collect();
    out.sort_by(|a, b| {
        (&a.job, a.started_at, &a.instance).cmp(&(&b.job, b.started_at, &b.instance))
    });
    out
}

/// Each team in scope against its budget: all-time spend up to `until`, the burn rate of what
/// runs at `until`, and the spend projected at the team's latest open deadline.
fn budgets(
    ledger: &Ledger,
    jobs: &BTreeMap<&str, &JobRecord>,
    until: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Vec<TeamBudget> {
    let teams: BTreeSet<&str> = jobs.values().map(|j| j.spec.team.as_str()).collect();
    teams
        .into_iter()
        .map(|team| {
            let members: BTreeMap<&str, &JobRecord> = jobs
                .iter()
                .filter(|(_, j)| j.spec.team == team)
                .map(|(k, j)| (*k, *j))
                .collect();
            let billed = bill_all(ledger, &members, (None, until), now);
            // `+ 0.0`: an empty f64 sum is -0.0.
            let spent: f64 = billed
                .iter()
                .flat_map(|(_, _, p)| p)
                .map(|b| b.piece.dollars())
                .sum::<f64>()
                + 0.0;
            let burn_per_hour: f64 = billed
                .iter()
                .filter(|(u, _, _)| u.started_at <= until && u.ended_at.is_none_or(|e| e > until))
                .filter_map(|(_, _, p)| p.last().map(|b| b.piece.price_per_hour))
                .sum::<f64>()
                + 0.0;
            let deadline = members
                .values()
                .filter(|j| !j.state.is_final())
                .filter_map(|j| j.deadline_at)
                .max();
            let budget = ledger.budgets.get(team).copied().unwrap_or_default();
            let hours_to = |d: DateTime<Utc>| (d - until).num_milliseconds().max(0) as f64 / 3.6e6;
            TeamBudget {
                team: team.to_string(),
                spent,
                budget_usd: budget.total_usd,
                budget_per_hour_usd: budget.per_hour_usd,
                left: budget.total_usd.map(|b| b - spent),
                burn_per_hour,
                deadline,
                projected_at_deadline: deadline.map(|d| spent + burn_per_hour * hours_to(d)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
