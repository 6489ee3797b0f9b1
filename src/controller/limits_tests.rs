//! The quota file under the controller: over random workloads, price moves and reclaims the
//! fleet never passes a quota and no team or job spends past its budget (beyond the one
//! billing minimum and one pass of what ran when the limit came); and the controller's
//! placements are `tern plan`'s on the same input.

use proptest::prelude::*;
use tern_cloud::testkit::spec;
use tern_sim::Trace;

use super::testkit::Scenario;
use super::testkit::sim;
use super::world::SimWorld;
use super::*;
use crate::limits::Limits;
use crate::store::JobState;

const TICK: Duration = Duration::from_secs(60);

/// A zone whose spot capacity and price move each tick (5 min) as `seed` says.
fn moving_zone(zone: &str, seed: u64, ticks: usize) -> Trace {
    let mut rng = tern_sim::testkit::Lcg::new(seed);
    let mut next = move || rng.next_u32();
    let available: Vec<u32> = (0..ticks).map(|_| next() % 5).collect();
    let prices: Vec<f64> = (0..ticks)
        .map(|_| 0.5 + f64::from(next() % 100) / 100.0)
        .collect();
    Trace {
        prices: Some(prices),
        ..tern_sim::testkit::trace(zone, available)
    }
}

fn quota_file(limit: u32, budgets: &[(f64, &str)]) -> String {
    let mut text = format!("[[quota]]\ncloud = \"sim\"\nfamily = \"V100\"\nlimit = {limit}\n");
    for (k, (total, then)) in budgets.iter().enumerate() {
        text.push_str(&format!(
            "[team.t{k}]\ntotal_usd = {total}\non_exhausted = \"{then}\"\n"
        ));
    }
    text
}

/// Accelerators the cloud holds for us now (pending or running), by its own listing.
async fn held(sim: &tern_sim::SimCloud) -> (u32, String) {
    let listed = sim.list("test-owner").await.expect("list");
    let live = listed.iter().filter(|i| {
        matches!(
            i.state,
            tern_cloud::InstanceState::Pending | tern_cloud::InstanceState::Running
        )
    });
    let shown: Vec<String> = listed
        .iter()
        .map(|i| format!("{} {:?}", i.id, i.state))
        .collect();
    (live.count() as u32, shown.join("; "))
}

/// What each team was billed, as the cost report bills it.
fn billed_by_team(ctl: &Controller, now: DateTime<Utc>) -> BTreeMap<String, f64> {
    let usage = ctl.store().usage_open_or_ended_since(None).expect("usage");
    let prices = ctl.store().prices().expect("prices");
    let mut out = BTreeMap::new();
    for u in &usage {
        let team = ctl.job(&u.job).expect("job").spec.team.clone();
        let steps = prices.get(&u.offer_key).map_or(&[][..], |p| &p[..]);
        let billed = crate::report::bill(u, None, steps, (None, DateTime::<Utc>::MAX_UTC), now);
        *out.entry(team).or_default() += billed.iter().map(|b| b.piece.dollars()).sum::<f64>();
    }
    out
}

#[derive(Debug, Clone)]
struct Case {
    quota: u32,
    budgets: Vec<(f64, &'static str)>,
    jobs: Vec<(usize, u32, bool)>,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1u32..6,
        prop::collection::vec(
            (1.0f64..6.0, prop::sample::select(vec!["hold", "drain"])),
            1..3,
        ),
        prop::collection::vec((0usize..3, 1u32..4, any::<bool>()), 1..5),
        any::<u64>(),
    )
        .prop_map(|(quota, budgets, jobs, seed)| Case {
            quota,
            budgets,
            jobs,
            seed,
        })
}

async fn run_case(c: Case) {
    let ticks = 400;
    let sim = sim(vec![
        moving_zone("us-west-2a", c.seed, ticks),
        moving_zone("us-west-2b", c.seed ^ 0x5eed, ticks),
    ]);
    let limits = Limits::parse(&quota_file(c.quota, &c.budgets), "q.toml").expect("file");
    let config = ControllerConfig {
        limits: Arc::new(limits.clone()),
        ..ControllerConfig::new("test-owner", vec![Region::new("us-west-2")])
    };
    let (_, mut ctl) = Scenario::on(&sim, "test-owner")
        .configured(config)
        .controller();
    for (k, (team, workers, own_budget)) in c.jobs.iter().enumerate() {
        let mut s = spec(&format!("j{k}"));
        s = s
            .team(&format!("t{team}"))
            .workers(&format!("{{ min = 1, max = {workers} }}"))
            .samples(1_500_000);
        if *own_budget {
            s = s.section("[budget]\ntotal_usd = 1.0");
        }
        ctl.submit(s.build(), sim.now()).expect("submit");
    }
    let mut world = SimWorld::new(sim.clone(), ctl, TICK);
    let mut most_per_hour: BTreeMap<String, f64> = BTreeMap::new();
    for _ in 0..ticks - 10 {
        let done = world.round(SimWorld::settled).await.expect("pass");
        let (on_cloud, shown) = held(&sim).await;
        assert!(
            on_cloud <= c.quota,
            "{on_cloud} V100s held under a quota of {}: {shown}",
            c.quota
        );
        for i in world.ctl.instances() {
            let team = world.ctl.job(&i.job).expect("job").spec.team.clone();
            let h = most_per_hour.entry(team).or_default();
            *h = h.max(i.offer.price_per_hour * c.quota as f64);
        }
        if done {
            break;
        }
    }
    let now = world.now();
    let ctl = &world.ctl;
    // One billing minimum of what could run when the limit came, plus one pass of it.
    let slack = |team: &str| most_per_hour.get(team).copied().unwrap_or(0.0) * 2.0 / 60.0 + 0.01;
    for (team, spent) in billed_by_team(ctl, now) {
        let k: usize = team[1..].parse().expect("team");
        if let Some((total, _)) = c.budgets.get(k) {
            assert!(
                spent <= total + slack(&team),
                "team {team} spent ${spent:.2} of ${total:.2}"
            );
        }
    }
    assert!(ctl.stats().launches > 0, "nothing ran: {c:?}");
    for j in ctl.jobs() {
        if j.state == JobState::OverBudget {
            assert!(
                j.reason
                    .as_deref()
                    .is_some_and(|r| r.contains("over budget"))
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
    #[test]
    fn the_fleet_keeps_within_quotas_and_budgets(c in case()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(run_case(c));
    }
}

/// The controller's first placements for `jobs` (name, team, most workers; no deadline)
/// under the quota file `text`, against what `tern_plan::plan` answers for the same jobs,
/// offers and file with the options `tern plan` builds ([`Limits::plan_options`]). A job the
/// plan puts on on-demand waits instead (without a deadline tern never pays on-demand); every
/// other placement must be the plan's. Returns how many the controller placed.
async fn places_as_tern_plan(text: &str, jobs: &[(String, String, u32)]) -> usize {
    let sim = sim(vec![
        tern_sim::testkit::trace("us-west-2a", vec![8; 50]),
        tern_sim::testkit::trace("us-west-2b", vec![8; 50]),
    ]);
    let limits = Limits::parse(text, "q.toml").expect("file");
    let config = ControllerConfig {
        limits: Arc::new(limits.clone()),
        ..ControllerConfig::new("test-owner", vec![Region::new("us-west-2")])
    };
    let (_, mut ctl) = Scenario::on(&sim, "test-owner")
        .configured(config)
        .controller();
    for (name, team, workers) in jobs {
        let s = spec(name)
            .team(team)
            .workers(&format!("{{ min = 1, max = {workers} }}"))
            .deadline(None)
            .build();
        ctl.submit(s, sim.now()).expect("submit");
    }
    let now = sim.now();
    let mut offers = Vec::new();
    for r in &ctl.config.regions {
        offers.extend(sim.offers(r).await.expect("offers"));
    }
    let names: Vec<String> = ctl.jobs().map(|j| j.name().to_string()).collect();
    let planned: Vec<_> = names.iter().filter_map(|n| ctl.plan_job(n, now)).collect();
    let options = limits.plan_options(ctl.config.plan.clone(), None);
    let cli = tern_plan::plan(&planned, &offers, &options);
    ctl.pass(now).await.expect("pass");
    let mut placed = 0;
    for jp in &cli.jobs {
        let events = ctl.typed_events(Some(&jp.job)).expect("events");
        let placement = events.iter().find_map(|e| match e {
            Event::Planned { placement, .. } => Some(placement.clone()),
            _ => None,
        });
        match (jp.choice.as_ref().filter(|_| jp.placed), placement) {
            (Some(c), Some(p)) => {
                placed += 1;
                assert_eq!(
                    (p.nodes, p.instance_type.as_str(), p.zone.as_str()),
                    (c.nodes, c.instance_type.as_str(), c.zone.as_str()),
                    "job {} under {text}",
                    jp.job
                );
            }
            (Some(c), None) => {
                assert_eq!(
                    c.capacity,
                    tern_cloud::Capacity::OnDemand,
                    "{} under {text}",
                    jp.job
                );
                assert!(
                    events.iter().any(|e| matches!(e, Event::Waiting { .. })),
                    "{} neither placed nor waiting under {text}",
                    jp.job
                );
            }
            (None, None) => {}
            (None, Some(p)) => panic!(
                "the controller placed {} ({p:?}) and the plan did not, under {text}",
                jp.job
            ),
        }
    }
    placed
}

/// Three teams compete for a spot quota under fairness, shares and both kinds of team budget.
#[tokio::test]
async fn the_controller_places_as_tern_plan_does() {
    let text = "fairness = 1.0\n[[quota]]\ncloud = \"sim\"\nfamily = \"V100\"\ncapacity = \"spot\"\nlimit = 5\n\
                [team.a]\nshare = 2\n[team.b]\nper_hour_usd = 3\n[team.c]\ntotal_usd = 40\n";
    let jobs: Vec<(String, String, u32)> = [
        ("a1", "a", 4),
        ("b1", "b", 3),
        ("c1", "c", 4),
        ("a2", "a", 2),
    ]
    .iter()
    .map(|(n, t, w)| (n.to_string(), t.to_string(), *w))
    .collect();
    let placed = places_as_tern_plan(text, &jobs).await;
    assert!(placed >= 2, "the quota leaves room for several jobs");
}

/// A random quota file: a V100 quota (spot or any), fairness, and for each of three teams an
/// optional share, $/h budget and total budget.
fn random_file() -> impl Strategy<Value = String> {
    let team = (
        prop::option::of(0.5f64..3.0),
        prop::option::of(1.0f64..10.0),
        prop::option::of(5.0f64..60.0),
    );
    (
        1u32..9,
        any::<bool>(),
        prop::sample::select(vec![0.0, 0.5, 1.0, 2.0]),
        prop::collection::vec(team, 3),
    )
        .prop_map(|(limit, spot, fairness, teams)| {
            let capacity = if spot { "capacity = \"spot\"\n" } else { "" };
            let mut text = format!(
                "fairness = {fairness}\n[[quota]]\ncloud = \"sim\"\nfamily = \"V100\"\n{capacity}limit = {limit}\n"
            );
            for (k, (share, hourly, total)) in teams.into_iter().enumerate() {
                text.push_str(&format!("[team.t{k}]\n"));
                for (key, v) in [("share", share), ("per_hour_usd", hourly), ("total_usd", total)] {
                    if let Some(v) = v {
                        text.push_str(&format!("{key} = {v}\n"));
                    }
                }
            }
            text
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, .. ProptestConfig::default() })]
    /// Over random quota files and workloads the controller places as `tern plan` does.
    #[test]
    fn the_controller_places_as_tern_plan_does_on_any_file(
        text in random_file(),
        jobs in prop::collection::vec((0usize..3, 1u32..5), 1..6),
    ) {
        let jobs: Vec<(String, String, u32)> = jobs
            .iter()
            .enumerate()
            .map(|(k, (t, w))| (format!("j{k}"), format!("t{t}"), *w))
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(places_as_tern_plan(&text, &jobs));
    }
}

/// The simulated cloud with a V100 quota of `limit` (any capacity) in us-west-2.
fn sim_with_quota(limit: u32) -> Arc<tern_sim::SimCloud> {
    let zones = vec![
        tern_sim::testkit::trace("us-west-2a", vec![8; 80]),
        tern_sim::testkit::trace("us-west-2b", vec![8; 80]),
    ];
    let config = tern_sim::cloud::SimConfig {
        start: super::testkit::start(),
        boot: Duration::from_secs(60),
        ..tern_sim::cloud::SimConfig::default()
    };
    let quota = tern_sim::SimQuota::new("us-west-2", "V100", None, limit);
    Arc::new(tern_sim::SimCloud::new(zones, config).with_quota(quota))
}

/// The cloud, with its quota listing hidden: what a provider that cannot read quotas (or an
/// account whose listing is wrong) looks like.
struct Unlisted(Arc<tern_sim::SimCloud>);

#[async_trait::async_trait]
impl Provider for Unlisted {
    fn cloud(&self) -> tern_cloud::Cloud {
        self.0.cloud()
    }
    async fn offers(&self, region: &Region) -> std::result::Result<Vec<Offer>, ProviderError> {
        self.0.offers(region).await
    }
    async fn launch(
        &self,
        request: &tern_cloud::LaunchRequest,
    ) -> std::result::Result<tern_cloud::LaunchOutcome, ProviderError> {
        self.0.launch(request).await
    }
    async fn terminate(&self, id: &InstanceId) -> std::result::Result<(), ProviderError> {
        self.0.terminate(id).await
    }
    async fn list(
        &self,
        owner: &str,
    ) -> std::result::Result<Vec<tern_cloud::Instance>, ProviderError> {
        self.0.list(owner).await
    }
    async fn interruptions(
        &self,
    ) -> std::result::Result<Vec<tern_cloud::Interruption>, ProviderError> {
        self.0.interruptions().await
    }
}

fn fixed_job(name: &str, workers: u32) -> JobSpec {
    spec(name)
        .workers(&workers.to_string())
        .deadline(None)
        .build()
}

/// The reasons of the job's `wait` events.
fn waits(ctl: &Controller, job: &str) -> Vec<String> {
    ctl.typed_events(Some(job))
        .expect("events")
        .into_iter()
        .filter_map(|e| match e {
            Event::Waiting { reason, .. } => Some(reason.to_string()),
            _ => None,
        })
        .collect()
}

/// No quota file: the quota the cloud lists is read at the first pass and planned within, so
/// the cloud never has to refuse a launch.
#[tokio::test]
async fn a_quota_the_cloud_lists_is_planned_within() {
    let sim = sim_with_quota(2);
    let mut world = Scenario::on(&sim, "test-owner")
        .jobs([fixed_job("small", 2), fixed_job("big", 4)])
        .world(TICK);
    for _ in 0..10 {
        world.round(|_, _| false).await.expect("pass");
        assert!(world.ctl.instances().count() <= 2);
    }
    let ctl = &world.ctl;
    assert_eq!(
        ctl.instances().count(),
        2,
        "the small job runs on what the quota allows"
    );
    assert!(ctl.instances().all(|i| i.job == "small"));
    let why = waits(ctl, "big");
    assert!(
        why.iter()
            .any(|w| w.contains("held back by a limit") && w.contains("quota")),
        "{why:?}"
    );
    assert_eq!(ctl.stats().cloud_errors.get("quota"), None, "never refused");
}

/// The listing is hidden: the first launch is cut short by the cloud's quota, the limit its
/// error names is kept, and no later launch asks past it.
#[tokio::test]
async fn a_quota_the_cloud_refuses_with_is_kept_and_planned_within() {
    let sim = sim_with_quota(1);
    let mut world = Scenario::on(&sim, "test-owner")
        .provider(Arc::new(Unlisted(sim.clone())))
        .jobs([fixed_job("pair", 2)])
        .world(TICK);
    let refusals = |ctl: &Controller| ctl.stats().cloud_errors.get("quota").copied();
    let mut first = None;
    for _ in 0..12 {
        world.round(|_, _| false).await.expect("pass");
        first = first.or(refusals(&world.ctl));
    }
    let ctl = &world.ctl;
    assert!(first.is_some(), "the cloud refused the first launch");
    assert_eq!(refusals(ctl), first, "and nothing after it");
    let replaced = ctl
        .typed_events(Some("pair"))
        .expect("events")
        .into_iter()
        .filter(|e| matches!(e, Event::Replacing { .. }))
        .count();
    assert_eq!(
        replaced, 0,
        "no replacement is announced that the quota holds back"
    );
    assert_eq!(ctl.instances().count(), 1);
    let why = waits(ctl, "pair");
    assert!(why.iter().any(|w| w.contains("quota")), "{why:?}");
    let kept: Vec<_> = ctl.quotas_in_force();
    assert!(
        kept.iter().any(|q| q.limit == 1 && q.family == "V100"),
        "{kept:?}"
    );
}

/// A launch is admitted (the launch budget, the limits) before anything is said or written:
/// one the limits hold back is a wait naming the limit, with no `plan` event and no aim; the
/// same launch admitted aims the job, says its plan and starts its capacity.
#[tokio::test]
async fn a_launch_the_limits_hold_back_is_a_wait_and_never_a_plan() {
    use super::decide::Decision;
    use super::events::Placement;

    let sim = sim(vec![tern_sim::testkit::trace("us-west-2a", vec![8; 100])]);
    let config = ControllerConfig {
        limits: Arc::new(Limits::parse("[team.t]\ntotal_usd = 5\n", "q.toml").expect("file")),
        ..ControllerConfig::new("test-owner", vec![Region::new("us-west-2")])
    };
    let (_, mut ctl) = Scenario::on(&sim, "test-owner")
        .configured(config)
        .controller();
    let now = sim.now();
    ctl.submit(spec("j").team("t").build(), now)
        .expect("submit");
    let offers = sim.offers(&Region::new("us-west-2")).await.expect("offers");
    let offer = offers[0].clone();
    let placement = Placement {
        solver: "milp".into(),
        nodes: 1,
        instance_type: offer.instance_type.name.clone(),
        capacity: offer.capacity,
        zone: offer.zone.to_string(),
        expected_cost: 4.0,
        egress_usd: 0.0,
        finish_h: 4.0,
        deadline_h: None,
        versus_cheapest: None,
        policy: None,
        basis: None,
    };
    let launch = Decision::Launch {
        offers: vec![offer.clone()],
        count: 1,
        why: None,
        planned: Some(Box::new(placement)),
    };
    let said = |ctl: &Controller| -> Vec<String> {
        let events = ctl.typed_events(Some("j")).expect("events");
        events.iter().map(|e| e.kind().to_string()).collect()
    };
    // The team's budget ran out: the room holds the launch back.
    ctl.exhausted.insert("t".into(), 5.0);
    ctl.watch_budgets(ctl.budgets_set(), now)
        .await
        .expect("room");
    ctl.carry_out("j", launch.clone(), now)
        .await
        .expect("carry out");
    let waits = waits(&ctl, "j");
    assert!(
        waits.iter().any(|w| w.contains("budget ran out")),
        "{waits:?}"
    );
    assert!(
        !said(&ctl).contains(&"plan".to_string()),
        "{:?}",
        said(&ctl)
    );
    assert_eq!(ctl.job("j").expect("job").target_offer, None);
    assert_eq!(ctl.instances().count(), 0);
    // Raised: the same launch is admitted, aims the job and says its plan.
    ctl.exhausted.clear();
    ctl.watch_budgets(ctl.budgets_set(), now)
        .await
        .expect("room");
    ctl.carry_out("j", launch, now).await.expect("carry out");
    assert!(said(&ctl).contains(&"plan".to_string()), "{:?}", said(&ctl));
    assert_eq!(ctl.job("j").expect("job").target_offer, Some(offer.key()));
    assert_eq!(ctl.instances().count(), 1);
}
