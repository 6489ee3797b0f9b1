//! Budgets at run time. A job's `budget.total_usd` and a team's `total_usd` (the quota file)
//! are watched as money is spent ([`super::spend`]): at 80 % a `budget-warning` event, and
//! once the spend plus what the job's capacity costs over the drain lead reaches the limit,
//! the job checkpoints and stops. A job's own budget, and a team's with `on_exhausted =
//! "drain"`, end it `over-budget`; a team's with `"hold"` releases its capacity and leaves it
//! waiting until the budget allows again (a reload that raises it). A stop that has not seen
//! its checkpoint when the limit itself is reached releases at once: the spend never passes a
//! limit by more than one pass of what was running.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use tern_cloud::InstanceId;

use super::carry_out::{Aim, aim};
use super::events::Event;
use super::room::{JobUse, Room, TeamUse};
use super::{Controller, Result, decide::Decision, hours};
use crate::limits::Exhausted;
use crate::store::JobState;

/// Spend at which the warning is given, as a fraction of the budget.
pub(super) const WARN_AT: f64 = 0.8;

/// A job stopping because a budget runs out.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Stop {
    pub since: DateTime<Utc>,
    /// `job` or `team`, and the job's or the team's name.
    pub scope: &'static str,
    pub name: String,
    pub limit: f64,
    pub then: Exhausted,
}

/// One budget being watched: whose, how much, what it has spent, what it runs per hour.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Watched {
    pub scope: &'static str,
    pub name: String,
    pub limit: f64,
    pub spent: f64,
    pub hourly: f64,
    pub then: Exhausted,
}

/// What a budget needs now, from its figures alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Fine,
    Warn,
    /// Stop its jobs: the limit comes within the lead.
    Stop,
}

/// The verdict on `w`, with `lead_h` hours for a drain to finish.
pub(super) fn verdict(w: &Watched, lead_h: f64) -> Verdict {
    if w.spent + w.hourly * lead_h >= w.limit {
        Verdict::Stop
    } else if w.spent >= WARN_AT * w.limit {
        Verdict::Warn
    } else {
        Verdict::Fine
    }
}

/// A job a budget covers, as the watch sees it (one not ended and not already stopping).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Covered {
    pub name: String,
    /// It holds capacity.
    pub holds: bool,
    /// Its workers were already asked to drain.
    pub draining: bool,
}

/// What the watch does about one budget this pass.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Judged {
    /// The decisions, each with the job it is about (a team's warning: the team's name).
    pub decisions: Vec<(String, Decision)>,
    /// Whether the budget stands warned after the pass (a warning is given once until its
    /// spend falls back under the line, a raised limit).
    pub warned: bool,
    /// A team's budget is exhausted: the room holds the team's launches back from now on.
    pub exhausted: bool,
}

/// Decide about budget `w` (`warned`: its warning was given; `covered`: the jobs it covers)
/// with `lead_h` hours for a drain: nothing, the warning, or a stop for each job it covers
/// (a held team's job that holds nothing is held back by the room alone).
pub(super) fn judge(
    w: &Watched,
    lead_h: f64,
    warned: bool,
    covered: &[Covered],
    now: DateTime<Utc>,
) -> Judged {
    let (decisions, warned) = match verdict(w, lead_h) {
        Verdict::Fine => (Vec::new(), false),
        Verdict::Warn if warned => (Vec::new(), true),
        Verdict::Warn => {
            let warning = Decision::WarnBudget {
                scope: w.scope,
                budget: w.name.clone(),
                spent: w.spent,
                limit: w.limit,
            };
            (vec![(w.name.clone(), warning)], true)
        }
        Verdict::Stop => {
            let stops = covered
                .iter()
                .filter(|c| c.holds || w.then == Exhausted::Drain)
                .map(|c| {
                    let stop = Stop {
                        since: now,
                        scope: w.scope,
                        name: w.name.clone(),
                        limit: w.limit,
                        then: w.then,
                    };
                    let drain = c.holds && !c.draining;
                    let d = Decision::StopForBudget {
                        stop,
                        spent: w.spent,
                        drain,
                    };
                    (c.name.clone(), d)
                })
                .collect();
            (stops, warned)
        }
    };
    let exhausted = w.scope == "team" && verdict(w, lead_h) == Verdict::Stop;
    Judged {
        decisions,
        warned,
        exhausted,
    }
}

/// A stopping job, as the settle sees it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Stopping {
    pub stop: Stop,
    /// A checkpoint came after the stop began, and the drain it asked for is over.
    pub checkpointed: bool,
    /// What the stop's budget has spent.
    pub spent: f64,
    /// What the job holds.
    pub held: Vec<InstanceId>,
    /// The job ended meanwhile.
    pub ended: bool,
}

/// Whether a budget stop is over, and what ends it: its checkpoint came, its job holds
/// nothing, its limit is reached now, or the job ended.
pub(super) fn settle(s: Stopping) -> Option<Decision> {
    let over = s.checkpointed || s.held.is_empty() || s.spent >= s.stop.limit || s.ended;
    if !over {
        return None;
    }
    let release = match s.stop.then {
        Exhausted::Hold if !s.ended => s.held,
        _ => Vec::new(),
    };
    Some(Decision::EndForBudget {
        stop: s.stop,
        spent: s.spent,
        release,
        closed: s.ended,
    })
}

/// A job that has run (`spent` > 0) and whose own budget (`total`) cannot pay for the rest
/// of its work (`rest`: its plan's expected cost without that budget) ends over budget now,
/// saying the figures; `None` while the two fit.
pub(super) fn short_of_own(name: &str, spent: f64, rest: f64, total: f64) -> Option<Decision> {
    if spent <= 0.0 || spent + rest <= total {
        return None;
    }
    let reason = format!(
        "over budget: job {name} spent ${spent:.2} of its ${total:.2}, and the rest of its work is expected to cost ${rest:.2}"
    );
    Some(Decision::EndOverBudget {
        reason,
        limit: total,
    })
}

impl Controller {
    /// Whether any budget is set (the spend is kept only then).
    pub(super) fn budgets_set(&self) -> bool {
        self.config
            .limits
            .team
            .values()
            .any(|t| t.total_usd.is_some())
            || self
                .fleet
                .jobs
                .values()
                .any(|e| !e.record.state.is_final() && e.record.spec.budget.total_usd.is_some())
    }

    /// Bring the spend up to `now` (first in a pass: an instance that ended since the last
    /// pass is still in the fleet, and is counted to now rather than lost). Whether any budget
    /// is set: the pass's budget watch reads it rather than walk every job again.
    pub(super) fn keep_spend(&mut self, now: DateTime<Utc>) -> Result<bool> {
        if !self.budgets_set() {
            // Read again from the usage history when a budget next appears: what ended
            // meanwhile is counted there.
            if self.spend.is_loaded() {
                self.spend = super::spend::Spend::default();
            }
            self.fleet.instances.take_fresh();
            return Ok(false);
        }
        if !self.spend.is_loaded() {
            self.spend = super::spend::Spend::load(&self.store, now)?;
            self.fleet.instances.take_fresh();
        }
        accrue(
            &mut self.fleet,
            &self.cloud.spot_prices,
            &mut self.spend,
            now,
        );
        Ok(true)
    }

    /// Watch every budget (when `budgeted`: any is set), move stops along, and build the room
    /// the pass's launches are checked against.
    pub(super) async fn watch_budgets(&mut self, budgeted: bool, now: DateTime<Utc>) -> Result<()> {
        // One walk over the jobs for the teams' figures: the watch, the stops and the room
        // read the same (a stop's release this pass shows in the next pass's room).
        let teams = self.team_use(&self.config.limits.team);
        if budgeted {
            let lead_h = self.budget_lead_h();
            for w in self.watched(&teams) {
                let key = format!("{} {}", w.scope, w.name);
                let covered = self.covered(&w);
                let judged = judge(&w, lead_h, self.warned.contains(&key), &covered, now);
                if judged.warned {
                    self.warned.insert(key);
                } else {
                    self.warned.remove(&key);
                }
                if judged.exhausted {
                    self.exhausted.insert(w.name.clone(), w.limit);
                }
                for (job, d) in judged.decisions {
                    let r = self.carry_out(&job, d, now).await;
                    self.contain(&job, r)?;
                }
            }
            for (job, d) in self.settled(&teams) {
                let r = self.carry_out(&job, d, now).await;
                self.contain(&job, r)?;
            }
        }
        self.room = self.build_room(teams);
        Ok(())
    }

    /// The jobs `w` covers that are not ended or stopping already.
    fn covered(&self, w: &Watched) -> Vec<Covered> {
        self.fleet
            .jobs
            .iter()
            .filter(|(n, e)| {
                !e.record.state.is_final()
                    && e.stopping.is_none()
                    && match w.scope {
                        "job" => **n == w.name,
                        _ => e.record.spec.team == w.name,
                    }
            })
            .map(|(n, e)| Covered {
                name: n.clone(),
                holds: self.fleet.instances.count_of(n) > 0,
                draining: e.record.drain_requested,
            })
            .collect()
    }

    /// The stops that are over this pass, and what ends each.
    fn settled(&self, teams: &BTreeMap<String, TeamUse>) -> Vec<(String, Decision)> {
        let mut out = Vec::new();
        for (name, e) in &self.fleet.jobs {
            let Some(stop) = &e.stopping else { continue };
            let spent = match stop.scope {
                "job" => self.spend.of(name),
                _ => teams.get(&stop.name).map_or(0.0, |t| t.spent),
            };
            let stopping = Stopping {
                stop: stop.clone(),
                checkpointed: e.record.checkpoint_at.is_some_and(|c| c > stop.since)
                    && !e.record.drain_requested,
                spent,
                held: self.held_by(name),
                ended: e.record.state.is_final(),
            };
            if let Some(d) = settle(stopping) {
                out.push((name.clone(), d));
            }
        }
        out
    }

    /// Every budget in force: each running job's own, and each team's.
    fn watched(&self, teams: &BTreeMap<String, TeamUse>) -> Vec<Watched> {
        let mut out = Vec::new();
        for (name, e) in &self.fleet.jobs {
            if let Some(limit) = e.record.spec.budget.total_usd
                && !e.record.state.is_final()
            {
                out.push(Watched {
                    scope: "job",
                    name: name.clone(),
                    limit,
                    spent: self.spend.of(name),
                    hourly: self.fleet.instances.hourly_of(name),
                    then: Exhausted::Drain,
                });
            }
        }
        for (team, limit) in &self.config.limits.team {
            let (Some(total), Some(used)) = (limit.total_usd, teams.get(team)) else {
                continue;
            };
            out.push(Watched {
                scope: "team",
                name: team.clone(),
                limit: total,
                spent: used.spent,
                hourly: used.hourly,
                then: limit.on_exhausted,
            });
        }
        out
    }

    /// A new quota file from now on: a team whose budget it raises is no longer held, and
    /// every job is planned again against it at the next pass.
    pub fn set_limits(&mut self, limits: std::sync::Arc<crate::limits::Limits>) {
        self.exhausted.retain(|team, was| {
            limits
                .team
                .get(team)
                .and_then(|t| t.total_usd)
                .is_some_and(|t| t <= *was)
        });
        self.config.limits = limits;
        for e in self.fleet.jobs.values_mut() {
            e.dirty = true;
        }
        tracing::info!(
            quotas = self.config.limits.quota.len(),
            teams = self.config.limits.team.len(),
            "quota file reloaded"
        );
    }

    /// [`Decision::WarnBudget`]: the warning's event.
    pub(super) fn warn_budget(
        &mut self,
        scope: &'static str,
        budget: String,
        (spent, limit): (f64, f64),
        now: DateTime<Utc>,
    ) -> Result<()> {
        let job = (scope == "job").then(|| budget.clone());
        let event = Event::BudgetWarning {
            job,
            scope: scope.into(),
            name: budget,
            spent,
            limit,
        };
        self.emit(now, event)
    }

    /// [`Decision::StopForBudget`]: say so, mark the job stopping, ask its workers to drain.
    pub(super) fn stop_for_budget(
        &mut self,
        job: &str,
        stop: Stop,
        (spent, drain): (f64, bool),
        now: DateTime<Utc>,
    ) -> Result<()> {
        let then = match stop.then {
            Exhausted::Drain => "end over-budget",
            Exhausted::Hold => "wait for budget",
        };
        let event = Event::OverBudget {
            job: job.to_string(),
            scope: stop.scope.into(),
            name: stop.name.clone(),
            spent,
            limit: stop.limit,
            then: then.into(),
        };
        self.emit(now, event)?;
        let Some(e) = self.fleet.jobs.get_mut(job) else {
            return Ok(());
        };
        e.stopping = Some(stop);
        if drain {
            e.record.drain_requested = true;
            self.store.set_drain(job, true, now)?;
        }
        Ok(())
    }

    /// [`Decision::EndForBudget`]: close the stop; end the job over budget, or hold it
    /// (no target, no drain) and release what it holds.
    pub(super) fn end_for_budget(
        &mut self,
        job: &str,
        (stop, spent): (Stop, f64),
        (release, closed): (Vec<InstanceId>, bool),
        now: DateTime<Utc>,
    ) -> Result<Option<Decision>> {
        let Some(e) = self.fleet.jobs.get_mut(job) else {
            return Ok(None);
        };
        e.stopping = None;
        if closed {
            return Ok(None);
        }
        e.record.drain_requested = false;
        e.dirty = true;
        match stop.then {
            Exhausted::Drain => {
                e.record.state = JobState::OverBudget;
                e.record.reason = Some(format!(
                    "over budget: {} {} spent ${spent:.2} of its ${:.2}",
                    stop.scope, stop.name, stop.limit
                ));
                e.record.finished_at = Some(now);
                // Its capacity is released by the pass's triage, as for any ended job.
                self.store.update_job(&e.record, now)?;
                Ok(None)
            }
            Exhausted::Hold => {
                aim(&mut e.record, Aim::Hold);
                self.store.update_job(&e.record, now)?;
                self.store.set_drain(job, false, now)?;
                Ok((!release.is_empty()).then_some(Decision::Release { ids: release }))
            }
        }
    }

    /// [`Decision::EndOverBudget`]: end `name` over its own budget now (it holds nothing: a
    /// job being placed).
    pub(super) fn end_over_budget(
        &mut self,
        name: &str,
        reason: String,
        limit: f64,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let spent = self.spend.of(name);
        self.emit(
            now,
            Event::OverBudget {
                job: name.to_string(),
                scope: "job".into(),
                name: name.to_string(),
                spent,
                limit,
                then: "end over-budget".into(),
            },
        )?;
        let Some(e) = self.fleet.jobs.get_mut(name) else {
            return Ok(());
        };
        e.record.state = JobState::OverBudget;
        e.record.reason = Some(reason);
        e.record.finished_at = Some(now);
        e.stopping = None;
        self.store.update_job(&e.record, now)?;
        Ok(())
    }

    /// Hours a drain is given before the limit: the configured lead.
    fn budget_lead_h(&self) -> f64 {
        self.config.budget_lead.as_secs_f64() / 3600.0
    }

    /// What `job` has spent, may spend, and is expected to spend still.
    pub(super) fn job_use(&self, job: &str) -> Option<JobUse> {
        let e = self.fleet.jobs.get(job)?;
        let spent = self.spend.of(job);
        Some(JobUse {
            team: e.record.spec.team.clone(),
            spent,
            total_usd: e.record.spec.budget.total_usd,
            committed: self.committed(job, &e.record, spent),
        })
    }

    /// What a job that holds capacity is still expected to cost: its plan estimate less what
    /// it has spent (0 for a job that holds nothing or has ended).
    fn committed(&self, job: &str, record: &crate::store::JobRecord, spent: f64) -> f64 {
        match record.planned_cost {
            Some(p) if self.fleet.instances.count_of(job) > 0 && !record.state.is_final() => {
                (p - spent).max(0.0)
            }
            _ => 0.0,
        }
    }

    /// What each team with a spend or hourly limit has spent, committed and runs per hour: one
    /// walk over the jobs, reading only what those limits need.
    fn team_use(
        &self,
        teams: &BTreeMap<String, crate::limits::TeamLimit>,
    ) -> BTreeMap<String, TeamUse> {
        let totals: HashMap<&str, bool, foldhash::fast::RandomState> = teams
            .iter()
            .filter(|(_, t)| t.total_usd.is_some() || t.per_hour_usd.is_some())
            .map(|(n, t)| (n.as_str(), t.total_usd.is_some()))
            .collect();
        let mut use_of: BTreeMap<&str, TeamUse> = BTreeMap::new();
        if totals.is_empty() {
            return BTreeMap::new();
        }
        for (name, e) in &self.fleet.jobs {
            let team = e.record.spec.team.as_str();
            let Some(&total) = totals.get(team) else {
                continue;
            };
            let t = use_of.entry(team).or_default();
            t.hourly += self.fleet.instances.hourly_of(name);
            if total {
                let spent = self.spend.of(name);
                t.spent += spent;
                t.committed += self.committed(name, &e.record, spent);
            }
        }
        use_of
            .into_iter()
            .map(|(t, u)| (t.to_string(), u))
            .collect()
    }

    /// The room this pass's launches are checked against: quotas from the fleet's counts
    /// (kept as instances come and go), teams' spend and $/h as [`Controller::team_use`]
    /// found them.
    fn build_room(&self, use_of: BTreeMap<String, TeamUse>) -> Room {
        let quotas = self.quotas_in_force();
        let teams = &self.config.limits.team;
        if quotas.is_empty() && teams.is_empty() {
            let mut room = Room::default();
            room.exhaust(&self.exhausted);
            return room;
        }
        let open_starts = self.fleet.intents.values().any(|i| {
            matches!(
                i.kind,
                tern_cloud::IntentKind::Launch { .. } | tern_cloud::IntentKind::Migrate { .. }
            )
        });
        let started: HashSet<tern_cloud::IntentId> = if open_starts {
            self.fleet.instances.values().map(|x| x.intent).collect()
        } else {
            HashSet::new()
        };
        let pending = self.fleet.intents.values().filter_map(|i| match &i.kind {
            tern_cloud::IntentKind::Launch { offers, count }
            | tern_cloud::IntentKind::Migrate {
                to: offers, count, ..
            } if !started.contains(&i.id) => Some((&offers[..], *count)),
            _ => None,
        });
        let mut room = Room::new(quotas, self.fleet.instances.held(), pending, teams, use_of);
        room.exhaust(&self.exhausted);
        room
    }
}

/// Add to `spend` what every live instance cost since the last pass (or its launch, counting
/// at least the clouds' one-minute minimum), at the price the controller last saw for its
/// offer. Per job and offer, from the counts the fleet keeps: no walk over the instances.
fn accrue(
    fleet: &mut super::Fleet,
    prices: &HashMap<String, f64>,
    spend: &mut super::spend::Spend,
    now: DateTime<Utc>,
) {
    let since = spend.at().unwrap_or(now);
    let price: Vec<f64> = fleet
        .instances
        .pool_offers()
        .iter()
        .map(|o| prices.get(&o.key()).copied().unwrap_or(o.price_per_hour))
        .collect();
    for (job, pools) in fleet.instances.job_pools() {
        let rate: f64 = pools.iter().map(|&(p, n)| price[p] * f64::from(n)).sum();
        spend.add(job, rate, since, now);
    }
    // An instance launched since the last pass was counted from then: count it from its
    // launch instead, a minute at least (the clouds' minimum).
    for f in fleet.instances.take_fresh() {
        if f.launched > since {
            let from = f.launched.min(now - chrono::TimeDelta::seconds(60));
            spend.adjust(&f.job, price[f.pool] * hours(since - from));
        }
    }
    spend.mark(now);
}
