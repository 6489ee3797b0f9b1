//! Budgets at run time on the simulated cloud with simulated workers: the warning at 80 %, a
//! job over its own budget checkpointing and ending `over-budget`, and a team's budget
//! running out under `hold` (its jobs wait, and run again once a reload raises it) and under
//! `drain` (they end `over-budget`).

use tern_cloud::testkit::spec;

use super::testkit::Scenario;
use super::testkit::sim;
use super::twin_tests::answers::{BUDGET_CUT, BUDGET_STOP, CANCEL, of_simulated};
use super::world::SimWorld;
use super::*;
use crate::limits::Limits;
use crate::store::JobState;

const TICK: Duration = Duration::from_secs(60);

/// A quarter of the forecast speed: every job here costs four times its plan.
#[derive(Debug)]
struct Slow;

impl tern_plan::ThroughputModel for Slow {
    fn throughput(&self, _: &str, per_node: u32, nodes: u32) -> Option<tern_plan::Throughput> {
        let speed = 80.0 * f64::from(per_node * nodes);
        Some(tern_plan::Throughput {
            expected: speed,
            pessimistic: speed,
            prior: false,
        })
    }
}

fn world(limits: &str, jobs: &[JobSpec]) -> SimWorld {
    let sim = sim(vec![
        tern_sim::testkit::trace("us-west-2a", vec![8; 600]),
        tern_sim::testkit::trace("us-west-2b", vec![8; 600]),
    ]);
    let limits = Arc::new(Limits::parse(limits, "q.toml").expect("file"));
    let mut workers = super::workload::Workload::watching(sim.clone());
    for j in jobs {
        workers = workers.with_truth(&j.name, Arc::new(Slow));
    }
    Scenario::on(&sim, "test-owner")
        .config(|c| c.limits = limits)
        .jobs(jobs.iter().cloned())
        .world(TICK)
        .with_workers(Some(workers))
}

/// A job of team `team` forecast at 2 h on one V100 (about $2), no deadline; it runs at a
/// quarter of that speed.
fn long_job(name: &str, team: &str) -> tern_cloud::testkit::SpecBuilder {
    spec(name).team(team).deadline(None).samples(2_300_000)
}

fn kinds(ctl: &Controller, job: &str) -> Vec<&'static str> {
    ctl.typed_events(Some(job))
        .expect("events")
        .iter()
        .map(Event::kind)
        .collect()
}

#[tokio::test]
async fn a_job_over_its_own_budget_checkpoints_and_ends_over_budget() {
    let job = long_job("capped", "t")
        .section("[budget]\ntotal_usd = 3")
        .build();
    let mut w = world("", &[job]);
    w.run(600, |ctl, _| {
        ctl.job("capped").is_some_and(|j| j.state.is_final()) && ctl.instances().next().is_none()
    })
    .await
    .expect("run");
    let ctl = &w.ctl;
    let j = ctl.job("capped").expect("job");
    assert_eq!(j.state, JobState::OverBudget, "{:?}", j.reason);
    let reason = j.reason.clone().unwrap_or_default();
    assert!(reason.contains("of its $3.00"), "{reason}");
    assert!(
        j.checkpoint_samples > 0.0,
        "it checkpointed before it stopped"
    );
    let seen = kinds(ctl, "capped");
    let warned = seen
        .iter()
        .position(|k| *k == "budget-warning")
        .expect("warned");
    let over = seen
        .iter()
        .position(|k| *k == "over-budget")
        .expect("stopped");
    assert!(warned < over, "{seen:?}");
    assert!(
        ctl.spend.of("capped") <= 3.0 + 0.03,
        "{}",
        ctl.spend.of("capped")
    );
}

#[tokio::test]
async fn a_team_on_hold_waits_for_budget_and_runs_again_when_a_reload_raises_it() {
    let jobs = [long_job("h1", "nlp").build(), long_job("h2", "nlp").build()];
    let mut w = world("[team.nlp]\ntotal_usd = 6\n", &jobs);
    w.run(600, |ctl, _| {
        ctl.instances().next().is_none()
            && ctl
                .jobs()
                .all(|j| j.target_offer.is_none() || j.state.is_final())
    })
    .await
    .expect("run");
    for j in ["h1", "h2"] {
        let record = w.ctl.job(j).expect("job");
        assert!(!record.state.is_final(), "{j} is held, not ended");
        assert!(kinds(&w.ctl, j).contains(&"over-budget"), "{j}");
    }
    let spent: f64 = ["h1", "h2"].iter().map(|j| w.ctl.spend.of(j)).sum();
    assert!(spent <= 6.0 + 0.06, "the team spent ${spent:.2} of $6");
    // Held: a few more passes launch nothing.
    w.run(10, |_, _| false).await.expect("run");
    assert_eq!(w.ctl.instances().count(), 0);
    // The budget is raised: the jobs run again.
    let raised = Limits::parse("[team.nlp]\ntotal_usd = 30\n", "q.toml").expect("file");
    w.ctl.set_limits(Arc::new(raised));
    w.run(20, |ctl, _| ctl.instances().count() >= 2)
        .await
        .expect("run");
    assert!(w.ctl.instances().count() >= 2, "they run again");
}

#[tokio::test]
async fn a_team_that_drains_ends_its_jobs_over_budget() {
    let jobs = [long_job("d1", "cv").build(), long_job("d2", "cv").build()];
    let mut w = world(
        "[team.cv]\ntotal_usd = 6\non_exhausted = \"drain\"\n",
        &jobs,
    );
    w.run(600, |ctl, _| {
        ctl.jobs().all(|j| j.state.is_final()) && ctl.instances().next().is_none()
    })
    .await
    .expect("run");
    for j in ["d1", "d2"] {
        let record = w.ctl.job(j).expect("job");
        assert_eq!(record.state, JobState::OverBudget, "{j}");
        let reason = record.reason.clone().unwrap_or_default();
        assert!(reason.contains("team cv"), "{reason}");
    }
}

/// What the simulated agents were told, instance by instance.
fn answers(w: &SimWorld) -> Vec<Vec<String>> {
    w.workers
        .as_ref()
        .map(|wl| wl.answers().into_values().collect())
        .unwrap_or_default()
}

/// The stop paths reach the simulated workers only through the worker protocol, in the same
/// answers a `tern agent` gets over HTTP (README, "Fencing" and "Stopping"): a budget stop is
/// a `drain` on the report, whose last report (the checkpoint) is taken, and the agent asking
/// again is told `done`; a cancel is a 409 `done`, and the last report after it is taken too.
#[tokio::test]
async fn stops_reach_the_simulated_workers_as_answers_to_their_reports() {
    let capped = long_job("capped", "t")
        .section("[budget]\ntotal_usd = 3")
        .build();
    let mut w = world("", &[capped]);
    w.workers = w
        .workers
        .take()
        .map(super::workload::Workload::keeping_answers);
    w.run(600, |ctl, _| {
        ctl.job("capped").is_some_and(|j| j.state.is_final()) && ctl.instances().next().is_none()
    })
    .await
    .expect("run");
    let told = answers(&w);
    assert!(!told.is_empty());
    let drained = told
        .iter()
        .find(|a| a.iter().any(|s| s == "report: drain"))
        .unwrap_or_else(|| panic!("no drain answered: {told:?}"));
    let at = drained
        .iter()
        .position(|s| s == "report: drain")
        .expect("drain");
    // The last report is taken (not a 409; its answer still says the job drains).
    assert_eq!(drained[at + 1], "last report: drain", "{drained:?}");
    assert_eq!(drained[at + 2], "start: 409 done", "{drained:?}");
    assert_eq!(drained[0], "start: incarnation 1", "{drained:?}");
    assert_eq!(of_simulated(drained), BUDGET_STOP, "{drained:?}");

    // A cancel mid-run.
    let mut w = world("", &[long_job("c", "t").build()]);
    w.workers = w
        .workers
        .take()
        .map(super::workload::Workload::keeping_answers);
    w.run(30, |_, _| false).await.expect("run");
    let before = w.ctl.job("c").expect("job").checkpoint_samples;
    w.ctl.cancel("c", w.now()).expect("cancel");
    w.run(30, SimWorld::settled).await.expect("run");
    let told = answers(&w);
    let last = told.last().expect("an agent");
    let n = last.len();
    assert_eq!(
        last[n - 2..],
        [
            "report: 409 done".to_string(),
            "last report: ok".to_string()
        ],
        "{last:?}"
    );
    // As a real agent gets it (`a_cancel_records_the_checkpoint_the_training_saved_…`).
    assert_eq!(of_simulated(last), CANCEL, "{last:?}");
    cancel_keeps_the_checkpoint(&w, before);

    // An operator cuts the team's budget below what it spent (`PUT /v1/quotas`, SIGHUP): the
    // job ends over budget at once, so the next report is a 409 `done`, and the last report
    // after it is taken, as a real agent gets it
    // (`a_budget_stop_reaches_the_real_agent_and_keeps_its_checkpoint`).
    let mut w = world("", &[long_job("cut", "t").build()]);
    w.workers = w
        .workers
        .take()
        .map(super::workload::Workload::keeping_answers);
    w.run(30, |_, _| false).await.expect("run");
    let cut = "[team.t]\ntotal_usd = 0.0001\non_exhausted = \"drain\"\n";
    w.ctl
        .set_limits(Arc::new(Limits::parse(cut, "q.toml").expect("file")));
    w.run(30, SimWorld::settled).await.expect("run");
    let told = answers(&w);
    let last = told.last().expect("an agent");
    assert_eq!(of_simulated(last), BUDGET_CUT, "{last:?}");
    assert_eq!(w.ctl.job("cut").expect("job").state, JobState::OverBudget);
}

/// The cancelled job of [`stops_reach_the_simulated_workers_as_answers_to_their_reports`]
/// holds the checkpoint its workers saved on the way out.
fn cancel_keeps_the_checkpoint(w: &SimWorld, before: f64) {
    // The checkpoint saved on the way out is the job's.
    let j = w.ctl.job("c").expect("job");
    assert_eq!(j.state, JobState::Cancelled);
    assert!(
        j.checkpoint_samples > before,
        "{} <= {before}",
        j.checkpoint_samples
    );
    assert_eq!(j.checkpoint_samples, j.done_samples);
}

/// The decisions about budgets, as a table: each branch of `budget::judge` and
/// `budget::settle`.
mod table {
    use super::super::budget::{Covered, Stop, Stopping, Watched, judge, settle, short_of_own};
    use super::super::decide::Decision;
    use crate::limits::Exhausted;
    use chrono::{DateTime, Utc};

    const LEAD_H: f64 = 0.5;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).expect("time")
    }

    fn watched(scope: &'static str, spent: f64, hourly: f64, then: Exhausted) -> Watched {
        Watched {
            scope,
            name: if scope == "job" { "capped" } else { "nlp" }.into(),
            limit: 10.0,
            spent,
            hourly,
            then,
        }
    }

    fn covered(name: &str, holds: bool, draining: bool) -> Covered {
        Covered {
            name: name.into(),
            holds,
            draining,
        }
    }

    /// (job, drain) of each stop judged.
    fn stops(decisions: &[(String, Decision)]) -> Vec<(String, bool)> {
        decisions
            .iter()
            .map(|(job, d)| match d {
                Decision::StopForBudget { drain, stop, .. } => {
                    assert_eq!(stop.since, now());
                    (job.clone(), *drain)
                }
                other => panic!("{job}: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn every_budget_verdict_is_a_row() {
        let job = [covered("capped", true, false)];
        // Under the line: nothing, and a warning given is forgotten.
        let fine = judge(
            &watched("job", 7.0, 1.0, Exhausted::Drain),
            LEAD_H,
            true,
            &job,
            now(),
        );
        assert_eq!(
            (fine.decisions.len(), fine.warned, fine.exhausted),
            (0, false, false)
        );
        // At 80 %: the warning once, named after the budget.
        let warn = judge(
            &watched("team", 8.0, 1.0, Exhausted::Hold),
            LEAD_H,
            false,
            &job,
            now(),
        );
        assert!(warn.warned && !warn.exhausted);
        assert!(matches!(
            &warn.decisions[..],
            [(n, Decision::WarnBudget { scope: "team", budget, spent, limit })]
                if n == "nlp" && budget == "nlp" && *spent == 8.0 && *limit == 10.0
        ));
        let again = judge(
            &watched("team", 8.0, 1.0, Exhausted::Hold),
            LEAD_H,
            true,
            &job,
            now(),
        );
        assert_eq!((again.decisions.len(), again.warned), (0, true));
        // The limit within the lead (9.6 + 1.0 × 0.5 ≥ 10): a job's own budget stops it,
        // asking its workers to drain unless they were asked already.
        let w = watched("job", 9.6, 1.0, Exhausted::Drain);
        let stop = judge(&w, LEAD_H, true, &job, now());
        assert_eq!(stops(&stop.decisions), [("capped".to_string(), true)]);
        assert!(
            stop.warned && !stop.exhausted,
            "a stop keeps the warning as it was"
        );
        let asked = judge(&w, LEAD_H, false, &[covered("capped", true, true)], now());
        assert_eq!(stops(&asked.decisions), [("capped".to_string(), false)]);
        assert!(!asked.warned);
        // A team's: every job it covers; on hold, one that holds nothing is left to the room.
        let team = [covered("a", true, false), covered("b", false, false)];
        let hold = judge(
            &watched("team", 9.6, 1.0, Exhausted::Hold),
            LEAD_H,
            false,
            &team,
            now(),
        );
        assert_eq!(stops(&hold.decisions), [("a".to_string(), true)]);
        assert!(hold.exhausted);
        let drain = judge(
            &watched("team", 9.6, 1.0, Exhausted::Drain),
            LEAD_H,
            false,
            &team,
            now(),
        );
        assert_eq!(
            stops(&drain.decisions),
            [("a".to_string(), true), ("b".to_string(), false)]
        );
        assert!(drain.exhausted);
        // The stop carries the budget it is for.
        let Decision::StopForBudget { stop, spent, .. } = &drain.decisions[0].1 else {
            unreachable!()
        };
        assert_eq!(
            (stop.scope, stop.name.as_str(), stop.limit),
            ("team", "nlp", 10.0)
        );
        assert_eq!((stop.then, *spent), (Exhausted::Drain, 9.6));
    }

    fn stopping(then: Exhausted) -> Stopping {
        Stopping {
            stop: Stop {
                since: now(),
                scope: "team",
                name: "nlp".into(),
                limit: 10.0,
                then,
            },
            checkpointed: false,
            spent: 9.7,
            held: vec![tern_cloud::InstanceId::new("i-1")],
            ended: false,
        }
    }

    /// (release, closed) of the end settled, or `None`.
    fn ends(s: Stopping) -> Option<(usize, bool)> {
        let d = settle(s)?;
        let Decision::EndForBudget {
            release,
            closed,
            spent,
            ..
        } = d
        else {
            panic!("{d:?}")
        };
        assert!(spent > 0.0);
        Some((release.len(), closed))
    }

    #[test]
    fn every_end_of_a_budget_stop_is_a_row() {
        for then in [Exhausted::Drain, Exhausted::Hold] {
            // Still draining, under the limit: the stop goes on.
            assert_eq!(ends(stopping(then)), None, "{then:?}");
            // A hold releases what the job holds; a drain ends the job, and the pass's triage
            // releases it as for any ended job.
            let released = usize::from(then == Exhausted::Hold);
            let checkpointed = Stopping {
                checkpointed: true,
                ..stopping(then)
            };
            assert_eq!(ends(checkpointed), Some((released, false)), "{then:?}");
            let at_limit = Stopping {
                spent: 10.0,
                ..stopping(then)
            };
            assert_eq!(ends(at_limit), Some((released, false)), "{then:?}");
            let empty = Stopping {
                held: Vec::new(),
                ..stopping(then)
            };
            assert_eq!(ends(empty), Some((0, false)), "{then:?}");
            // A job that ended meanwhile (a cancel): only the stop is closed.
            let ended = Stopping {
                ended: true,
                ..stopping(then)
            };
            assert_eq!(ends(ended), Some((0, true)), "{then:?}");
        }
    }

    /// A row per branch of `short_of_own`: a job that has not run, or whose budget still
    /// pays for the rest, goes on; one whose spend and rest pass its budget ends over it.
    #[test]
    fn a_job_short_of_its_own_budget_is_a_row() {
        let rows = [
            ((0.0, 20.0), false, "it has not run"),
            ((4.0, 6.0), false, "spent and rest meet the budget exactly"),
            ((4.0, 5.0), false, "the rest fits"),
            ((4.0, 6.5), true, "the rest does not fit"),
            ((12.0, 0.0), true, "already past its budget"),
        ];
        for ((spent, rest), ends, why) in rows {
            assert_eq!(
                short_of_own("j", spent, rest, 10.0).is_some(),
                ends,
                "{why}"
            );
        }
        let Some(Decision::EndOverBudget { reason, limit }) = short_of_own("j", 4.0, 6.5, 10.0)
        else {
            panic!("a job short of its budget ends over it")
        };
        assert_eq!(limit, 10.0);
        assert!(reason.contains("spent $4.00 of its $10.00"), "{reason}");
        assert!(reason.contains("expected to cost $6.50"), "{reason}");
    }
}
