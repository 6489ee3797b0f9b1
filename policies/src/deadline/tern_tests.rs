use super::*;
use crate::deadline::ZoneView;

/// Zones that lose capacity together must not look like independent chances: "some zone
/// is up" is learned from its own series, so two zones failing in lockstep are as likely
/// to be all down as one of them.
#[test]
fn zones_that_fail_together_are_learned_as_one_outage() {
    let history: Vec<u32> = (0..2000).map(|i| u32::from((i / 20) % 2 == 0)).collect();
    let zones = [0, 1].map(|region| ZoneView {
        history: &history,
        spot_price: 0.9,
        region,
    });
    let obs = TickView {
        tick: 0,
        zones: &zones,
        on_demand_price: 3.0,
        tick_hours: 0.05,
        egress_cost: 0.0,
    };
    let job = Job::gang(100, 400, 2, 1);
    let mut tern = Tern::new();
    tern.learn(&job, &obs);
    let one = tern.counts[0].hazard();
    let m = tern.pooled_model(&job, &obs, 0);
    assert!(
        (m.hu - one).abs() < 0.1 * one,
        "hu {} vs one zone {one}",
        m.hu
    );
    assert!(
        m.hu > 5.0 * one * one,
        "independence would give {}",
        one * one
    );
    let back = tern.counts[0].recovery();
    assert!(
        (m.qu - back).abs() < 0.1 * back,
        "qu {} vs one zone {back}",
        m.qu
    );
}

/// One zone whose capacity lasts `up` ticks, then is gone for `down`, over `len` ticks.
fn cycle(len: usize, up: usize, down: usize) -> Vec<u32> {
    (0..len).map(|i| u32::from(i % (up + down) < up)).collect()
}

fn obs<'a>(tick: u32, zones: &'a [ZoneView<'a>]) -> TickView<'a> {
    TickView {
        tick,
        zones,
        on_demand_price: 3.0,
        tick_hours: 0.1,
        egress_cost: 0.0,
    }
}

/// The price of a restart's slack is the slack alone: about nothing with time to spare
/// (the boot's billed hours are priced apart), much more than the boot when slack is short.
#[test]
fn slack_is_worth_nothing_with_time_to_spare_and_much_when_short() {
    let history = cycle(2000, 40, 5);
    let zones = [view(&history)];
    let obs = obs(0, &zones);
    let job = Job::gang(200, 400, 2, 1);
    let mut tern = Tern::new();
    tern.learn(&job, &obs);
    let raw = tern.pooled_model(&job, &obs, 0);
    let m = tern.refresh_table(&job, &obs, raw, 400, 200);
    let boot = f64::from(job.restart) * m.spot_tick;
    let ample = tern.slack_value(&job, &m, 400, 200);
    let short = tern.slack_value(&job, &m, 206, 6);
    assert!(
        ample < 0.05 * boot,
        "ample slack priced at {ample}, boot {boot}"
    );
    assert!(short > boot, "short slack priced at {short}, boot {boot}");
}

fn view(history: &[u32]) -> ZoneView<'_> {
    ZoneView {
        history,
        spot_price: 1.0,
        region: 0,
    }
}

/// A window with no past: every zone down on its first tick. With slack that waiting can
/// spend, tern waits that one tick rather than commit to on-demand on the prior alone; one
/// tick later, the same outage seen twice, it takes on-demand.
#[test]
fn nothing_seen_yet_is_no_reason_to_commit_to_on_demand() {
    let job = Job::gang(100, 104, 2, 1);
    let down = [0u32, 0];
    let decide = |ticks: usize| {
        let zones = [view(&down[..ticks]), view(&down[..ticks])];
        let mut tern = Tern::new();
        let choice = tern.decide(&job, &JobProgress::new(), &obs(ticks as u32 - 1, &zones));
        (choice, tern.why().map(|w| (w.on_demand, w.wait)))
    };
    let (first, first_why) = decide(1);
    let (second, second_why) = decide(2);
    assert_eq!(first, Placement::Idle, "{first_why:?}");
    assert_eq!(second, Placement::OnDemand, "{second_why:?}");
}

/// The move rates tern weighs for a job running in zone 0, with slack worth `lost` a restart.
fn move_rates(here: &[u32], there: &[u32], lost: f64) -> (f64, f64) {
    let zones = [view(here), view(there)];
    let obs = obs(0, &zones);
    let job = Job::gang(4000, 4600, 2, 1);
    let mut tern = Tern::new();
    tern.learn(&job, &obs);
    let state = JobProgress {
        placement: Placement::Spot(0),
        ..JobProgress::new()
    };
    let c = tern.move_candidate(&job, &state, &obs, 0, 1, lost);
    (c.current_rate, c.candidate_rate)
}

/// Two zones of one price: a hazard gap smaller than what the counts can tell apart must
/// not look like a saving (at point estimates it would: 1/62 against 1/77 per tick); a gap
/// well beyond it must.
#[test]
fn only_a_hazard_gap_the_counts_are_sure_of_pays_for_a_move() {
    let lost = 5.0;
    // 3,000 ticks: the running zone lost capacity 48 times, the other 39 times.
    let (here, there) = (cycle(3000, 60, 2), cycle(3000, 75, 2));
    let (now, then) = move_rates(&here, &there, lost);
    assert!(then >= now, "noise looks like a saving: {now} → {then} $/h");
    // 6,000 ticks: the running zone loses capacity every 10 ticks, the other every 40.
    let (here, there) = (cycle(6000, 10, 2), cycle(6000, 40, 2));
    let (now, then) = move_rates(&here, &there, lost);
    assert!(
        then < 0.8 * now,
        "a real gap is not a saving: {now} → {then} $/h"
    );
}

/// What tern does with a job that is not running, zone 0 (price 0.3, capacity that comes
/// back within a tick or two) down at this tick and zone 1 (price `dear`) up, with `deadline`
/// ticks for 100 of work.
fn start_beside_a_cheaper_zone_that_is_down(dear: f64, deadline: u32) -> Placement {
    let mut cheap = cycle(2000, 30, 2);
    cheap.push(0);
    let steady = vec![1u32; cheap.len()];
    let zones = [
        ZoneView {
            history: &cheap,
            spot_price: 0.3,
            region: 0,
        },
        ZoneView {
            history: &steady,
            spot_price: dear,
            region: 0,
        },
    ];
    let job = Job::gang(100, deadline, 2, 1);
    let mut tern = Tern::new();
    tern.decide(&job, &JobProgress::new(), &obs(0, &zones))
}

/// With slack to spare, a start in a dearer zone waits for a cheaper one that is down but
/// usually back within a tick or two; with slack short, or zones of one price, it starts.
#[test]
fn with_slack_to_spare_a_start_waits_for_the_cheaper_zone() {
    assert_eq!(
        start_beside_a_cheaper_zone_that_is_down(0.6, 400),
        Placement::Idle
    );
    assert_eq!(
        start_beside_a_cheaper_zone_that_is_down(0.6, 106),
        Placement::Spot(1)
    );
    assert_eq!(
        start_beside_a_cheaper_zone_that_is_down(0.3, 400),
        Placement::Spot(1)
    );
}

/// A restart after a preemption prices moving the checkpoint ([`egress_to`]): two zones that
/// fail alike, the far one a little cheaper (0.01 $ a tick). Free egress sends the restart to
/// the far zone, and so does one worth less than the gap over the run a start buys (about 40
/// ticks here); one worth more keeps it in the checkpoint's region.
#[test]
fn a_restart_prices_the_checkpoints_move_between_regions() {
    let history = cycle(1000, 40, 5);
    let now = &history[..970];
    let zones = home_and_far(now, now);
    let job = Job::gang(200, 400, 2, 1);
    let preempted = preempted_at_home();
    let restart = |egress_cost| {
        let obs = TickView {
            egress_cost,
            ..obs(0, &zones)
        };
        Tern::new().decide(&job, &preempted, &obs)
    };
    assert_eq!(restart(0.0), Placement::Spot(1));
    assert_eq!(restart(0.1), Placement::Spot(1));
    assert_eq!(restart(5.0), Placement::Spot(0));
    // Its reasons say what the zone it starts in costs to reach.
    let why = |egress_cost| {
        let obs = TickView {
            egress_cost,
            ..obs(0, &zones)
        };
        let mut p = Tern::new();
        p.decide(&job, &preempted, &obs);
        p.why().expect("tern says why")
    };
    let across = why(0.1);
    assert_eq!(across.egress, 0.1);
    assert!(
        across
            .to_string()
            .contains("needs the checkpoint moved: $0.10 egress")
    );
    assert_eq!(why(5.0).egress, 0.0, "it stays in the checkpoint's region");
    // A job with no checkpoint yet pays no egress anywhere.
    let obs = TickView {
        egress_cost: 5.0,
        ..obs(0, &zones)
    };
    assert_eq!(
        Tern::new().decide(&job, &JobProgress::new(), &obs),
        Placement::Spot(1)
    );
}

/// A zone at $1 in region 0 (the checkpoint's) and one at $0.9 in region 1.
fn home_and_far<'a>(home: &'a [u32], far: &'a [u32]) -> [ZoneView<'a>; 2] {
    [
        ZoneView {
            history: home,
            spot_price: 1.0,
            region: 0,
        },
        ZoneView {
            history: far,
            spot_price: 0.9,
            region: 1,
        },
    ]
}

/// A job that lost its node, its checkpoint in region 0.
fn preempted_at_home() -> JobProgress {
    JobProgress {
        checkpoint_region: Some(0),
        ..JobProgress::new()
    }
}
