//! Prometheus metrics of the controller, refreshed after every reconcile pass and rendered in
//! the text exposition format: the fleet's aggregates on the open `/metrics` ([`Metrics::render`]:
//! no job or team names, so a scraper needs no secret), the per-team and per-job series behind a
//! token on `GET /v1/metrics` ([`Metrics::render_private`], narrowed to a team token's team).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use chrono::{DateTime, Utc};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::Controller;
use crate::report;
use crate::store::StoreError;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CapacityLabel {
    capacity: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct CostLabel {
    team: String,
    job: String,
    capacity: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

/// What the cost counter has billed: ended intervals once and for all, and what each label's
/// counter holds.
#[derive(Debug, Default)]
struct CostBook {
    /// The latest end of an interval billed into `closed`.
    watermark: Option<DateTime<Utc>>,
    /// Intervals billed into `closed` that ended within `LATE_END` of the watermark (an end
    /// can be written after a later one, e.g. a reclaim noticed late): never billed twice.
    closed_ids: std::collections::HashMap<String, DateTime<Utc>>,
    closed: BTreeMap<CostLabel, f64>,
    closed_saved: f64,
    /// What each label's counter has been raised to.
    counted: BTreeMap<CostLabel, f64>,
}

/// How far before the newest end already billed an interval's end may still arrive and count.
const LATE_END: chrono::TimeDelta = chrono::TimeDelta::hours(24);

/// The controller's metric families.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    jobs: Family<StateLabel, Gauge>,
    instances: Family<CapacityLabel, Gauge>,
    dollars_per_hour: Gauge<f64, AtomicU64>,
    savings: Gauge<f64, AtomicU64>,
    reconcile: Histogram,
    open_intents: Gauge,
    foreign: Gauge,
    cloud_errors: Family<KindLabel, Counter>,
    job_errors: Family<KindLabel, Counter>,
    events: Family<KindLabel, Counter>,
    /// Billed dollars by capacity type, all jobs together (the open page's cost).
    fleet_cost: Family<CapacityLabel, Counter<f64, AtomicU64>>,
    /// The per-(team, job, capacity) counters: in the book, rendered only behind a token.
    costs: Mutex<CostBook>,
    /// Counts already added to the counters (the controller keeps totals).
    seen_errors: Mutex<std::collections::BTreeMap<&'static str, u64>>,
    seen_job_errors: Mutex<std::collections::BTreeMap<&'static str, u64>>,
    seen_events: Mutex<std::collections::BTreeMap<&'static str, u64>>,
    passes: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let jobs = Family::<StateLabel, Gauge>::default();
        registry.register("tern_jobs", "Jobs by state", jobs.clone());
        let instances = Family::<CapacityLabel, Gauge>::default();
        registry.register(
            "tern_instances",
            "Live instances by capacity type",
            instances.clone(),
        );
        let dollars_per_hour = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "tern_dollars_per_hour",
            "What the live fleet costs now, USD per hour",
            dollars_per_hour.clone(),
        );
        let savings = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "tern_savings_dollars",
            "Saved so far against the same instance-hours on demand, USD",
            savings.clone(),
        );
        let reconcile = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "tern_reconcile_seconds",
            "Duration of one reconcile pass",
            reconcile.clone(),
        );
        let open_intents = Gauge::default();
        registry.register(
            "tern_open_intents",
            "Intents persisted and not yet carried out",
            open_intents.clone(),
        );
        let foreign = Gauge::default();
        registry.register(
            "tern_foreign_instances",
            "Instances with this controller's owner tag that another state store launched \
             (left running; see the `foreign` events)",
            foreign.clone(),
        );
        let cloud_errors = Family::<KindLabel, Counter>::default();
        registry.register(
            "tern_cloud_api_errors",
            "Cloud API errors by kind",
            cloud_errors.clone(),
        );
        let job_errors = Family::<KindLabel, Counter>::default();
        registry.register(
            "tern_job_step_errors",
            "Job steps that failed and were left to their job while the pass went on, by kind",
            job_errors.clone(),
        );
        let events = Family::<KindLabel, Counter>::default();
        registry.register(
            "tern_events",
            "Controller decisions by kind (the event log's kinds)",
            events.clone(),
        );
        let fleet_cost = Family::<CapacityLabel, Counter<f64, AtomicU64>>::default();
        registry.register(
            "tern_fleet_cost_dollars",
            "Dollars billed for the whole fleet, per capacity type, as cost reports bill them \
             (per team and job: tern_cost_dollars on the token-guarded /v1/metrics)",
            fleet_cost.clone(),
        );
        Metrics {
            registry,
            fleet_cost,
            costs: Mutex::new(CostBook::default()),
            jobs,
            instances,
            dollars_per_hour,
            savings,
            reconcile,
            open_intents,
            foreign,
            cloud_errors,
            job_errors,
            events,
            seen_errors: Mutex::new(Default::default()),
            seen_job_errors: Mutex::new(Default::default()),
            seen_events: Mutex::new(Default::default()),
            passes: AtomicU64::new(0),
        }
    }

    /// Refresh from the controller after a pass that took `took`.
    pub fn update(
        &self,
        ctl: &Controller,
        took: Duration,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.reconcile.observe(took.as_secs_f64());
        self.open_intents.set(ctl.open_intents() as i64);
        self.foreign.set(ctl.foreign_instances() as i64);
        for state in [
            "pending",
            "running",
            "finished",
            "unplaceable",
            "cancelled",
            "failed",
            "over-budget",
        ] {
            let n = ctl.jobs().filter(|j| j.state.as_str() == state).count();
            self.jobs
                .get_or_create(&StateLabel {
                    state: state.into(),
                })
                .set(n as i64);
        }
        for capacity in ["spot", "on-demand", "reserved"] {
            let n = ctl
                .instances()
                .filter(|i| i.offer.capacity.as_str() == capacity)
                .count();
            self.instances
                .get_or_create(&CapacityLabel {
                    capacity: capacity.into(),
                })
                .set(n as i64);
        }
        self.dollars_per_hour
            .set(ctl.instances().map(|i| i.offer.price_per_hour).sum::<f64>() + 0.0);
        self.update_costs(ctl, now)?;
        add_totals(
            &self.cloud_errors,
            &self.seen_errors,
            &ctl.stats().cloud_errors,
        );
        add_totals(
            &self.job_errors,
            &self.seen_job_errors,
            &ctl.stats().job_errors,
        );
        add_totals(&self.events, &self.seen_events, &ctl.event_counts());
        self.passes
            .store(ctl.stats().passes, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Billed dollars per (team, job, capacity) and the savings against on-demand, through the
    /// cost report's billing; the counter grows by what was billed since the last update. Only
    /// open intervals and those ended since the last update are read: an ended interval is
    /// billed once and kept in `CostBook::closed`, so a pass does not read the whole history.
    fn update_costs(&self, ctl: &Controller, now: DateTime<Utc>) -> Result<(), StoreError> {
        let store = ctl.store();
        let mut book = self.costs.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = store.usage_open_or_ended_since(book.watermark.map(|w| w - LATE_END))?;
        let prices = if fresh.is_empty() {
            Default::default()
        } else {
            store.prices()?
        };
        let teams: std::collections::HashMap<&str, &str> = ctl
            .jobs()
            .map(|j| (j.name(), j.spec.team.as_str()))
            .collect();
        let mut open: BTreeMap<CostLabel, f64> = BTreeMap::new();
        let mut open_saved = 0.0;
        let mut newest = book.watermark;
        for u in &fresh {
            if book.closed_ids.contains_key(&u.instance) {
                continue;
            }
            let steps = prices.get(&u.offer_key).map_or(&[][..], |p| &p[..]);
            let billed = report::bill(u, None, steps, (None, DateTime::<Utc>::MAX_UTC), now);
            let dollars: f64 = billed.iter().map(|b| b.piece.dollars()).sum();
            let saved: f64 = billed
                .iter()
                .map(|b| b.on_demand_dollars() - b.piece.dollars())
                .sum();
            let label = CostLabel {
                team: teams.get(u.job.as_str()).unwrap_or(&"").to_string(),
                job: u.job.clone(),
                capacity: u.capacity.as_str().to_string(),
            };
            match u.ended_at {
                Some(end) => {
                    *book.closed.entry(label).or_default() += dollars;
                    book.closed_saved += saved;
                    book.closed_ids.insert(u.instance.clone(), end);
                    newest = newest.max(Some(end));
                }
                None => {
                    *open.entry(label).or_default() += dollars;
                    open_saved += saved;
                }
            }
        }
        if let Some(w) = newest {
            book.closed_ids.retain(|_, end| *end >= w - LATE_END);
        }
        book.watermark = newest;
        self.savings.set(book.closed_saved + open_saved + 0.0);
        let labels: Vec<CostLabel> = book.closed.keys().chain(open.keys()).cloned().collect();
        for label in labels {
            let total = book.closed.get(&label).copied().unwrap_or(0.0)
                + open.get(&label).copied().unwrap_or(0.0);
            let before = book.counted.entry(label.clone()).or_default();
            if total > *before {
                self.fleet_cost
                    .get_or_create(&CapacityLabel {
                        capacity: label.capacity.clone(),
                    })
                    .inc_by(total - *before);
                *before = total;
            }
        }
        Ok(())
    }

    /// Reconcile passes run so far (as of the last update).
    pub fn passes(&self) -> u64 {
        self.passes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The open page, in the text exposition format: aggregates only. No family here has a
    /// label that names a job or a team (`tests`: every label of every family is checked).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The per-team and per-job series (`tern_cost_dollars{team,job,capacity}`), in the same
    /// format: every team's for `team: None` (an admin), else that team's only. Rebuilt from
    /// the book on each call, so a team's page holds no other team's series, not even empty.
    pub fn render_private(&self, team: Option<&str>) -> String {
        let cost = Family::<CostLabel, Counter<f64, AtomicU64>>::default();
        {
            let book = self.costs.lock().unwrap_or_else(|e| e.into_inner());
            for (label, total) in &book.counted {
                if *total > 0.0 && team.is_none_or(|t| t == label.team) {
                    cost.get_or_create(label).inc_by(*total);
                }
            }
        }
        let mut registry = Registry::default();
        registry.register(
            "tern_cost_dollars",
            "Dollars billed, per team, job and capacity type, as cost reports bill them \
             (per second, one-minute minimum, at the prices that held)",
            cost,
        );
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

/// Add what `totals` grew by since the last call to a counter family.
fn add_totals(
    family: &Family<KindLabel, Counter>,
    seen: &Mutex<std::collections::BTreeMap<&'static str, u64>>,
    totals: &std::collections::BTreeMap<&'static str, u64>,
) {
    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    for (kind, total) in totals {
        let before = seen.insert(kind, *total).unwrap_or(0);
        family
            .get_or_create(&KindLabel {
                kind: (*kind).into(),
            })
            .inc_by(total.saturating_sub(before));
    }
}
