//! Decisions the controller takes about one job's fleet: wait for spot or pay for on-demand,
//! and which nodes move to cheaper capacity. Pure, like the rest of this crate, so the
//! controller and the replay call the same functions and a test can state their arithmetic.

use crate::migrate::{self, Decision, MoveCandidate, MoveRule};

/// Fraction of a job's nodes one migration may move at once (at least one node): every move
/// restarts all torchrun workers, so moves come in small batches (Karpenter's disruption
/// budgets are the analogue).
pub const DISRUPTION_BUDGET: f64 = 0.25;
/// Cross-region egress for a checkpoint, USD per GB (one constant with the simulated cloud's).
pub use tern_cloud::EGRESS_DOLLARS_PER_GB;
/// Waiting for spot stops when the slack falls to this fraction of the job's whole window.
pub const WAIT_RESERVE: f64 = 0.25;
/// Throughput below this (samples/s) counts as none, so work hours stay finite.
const MIN_THROUGHPUT: f64 = 1e-9;

/// Hours to do `remaining_samples` at `samples_per_s`.
pub fn work_hours(remaining_samples: f64, samples_per_s: f64) -> f64 {
    remaining_samples.max(0.0) / samples_per_s.max(MIN_THROUGHPUT) / 3600.0
}

/// A job's deadline as the wait rule sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Deadline {
    /// Hours until the deadline.
    pub left_h: f64,
    /// Hours from submission to the deadline.
    pub window_h: f64,
}

/// Whether a job with no spot capacity waits or runs on on-demand now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SpotWait {
    /// No deadline: tern never pays on-demand for such a job.
    NoDeadline,
    /// Slack above the reserve: wait for spot.
    Wait {
        slack_h: f64,
        left_h: f64,
        work_h: f64,
        reserve_h: f64,
    },
    /// The deadline needs the work now.
    OnDemandNow,
}

/// tern's wait rule (a variant of Uniform Progress, DESIGN.md §4.4): wait while the slack
/// (time left − pessimistic work − two restarts) stays above a reserve of a quarter of the
/// job's window. Plain Uniform Progress's straight line would leave spot at the first minute
/// without capacity, since zero progress is always "behind".
pub fn spot_wait(deadline: Option<Deadline>, work_h: f64, restart_h: f64) -> SpotWait {
    let Some(d) = deadline else {
        return SpotWait::NoDeadline;
    };
    let reserve_h = WAIT_RESERVE * d.window_h.max(0.0);
    let slack_h = d.left_h - work_h - 2.0 * restart_h;
    if slack_h <= reserve_h {
        return SpotWait::OnDemandNow;
    }
    SpotWait::Wait {
        slack_h,
        left_h: d.left_h,
        work_h,
        reserve_h,
    }
}

/// How many of `nodes` one migration may move.
pub fn disruption_quota(nodes: u32, fraction: f64) -> u32 {
    ((f64::from(nodes) * fraction).floor() as u32).max(1)
}

/// A running node of the job, as the move rule sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Node {
    /// What it costs now, $/h.
    pub price: f64,
    pub on_demand: bool,
    /// Already in the target pool (same offer): nothing to gain by moving it.
    pub in_target: bool,
    /// In another region than the target: moving it pays egress.
    pub other_region: bool,
}

/// The cheapest spot pool of the job's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    pub price: f64,
    /// Nodes the pool can take, when the cloud says.
    pub room: Option<u32>,
}

/// Everything the move decision reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoveInput<'a> {
    /// The running nodes that could move.
    pub nodes: &'a [Node],
    /// Every node the job holds (running or booting): the disruption budget is a share of it.
    pub fleet_nodes: u32,
    pub target: Target,
    /// A gang moves whole or not at all.
    pub gang: bool,
    pub budget_fraction: f64,
    pub work_h: f64,
    pub restart_h: f64,
    /// Hours to the deadline minus work hours (∞ without a deadline).
    pub slack_h: f64,
    pub hours_since_last_move: Option<f64>,
    pub checkpoint_gb: f64,
    /// Egress $/GB across regions, the rate the cloud bills the checkpoint's move at.
    pub egress_per_gb: f64,
    /// Dollars to read the job's data from the target's region once (0 where the data lives):
    /// every move is a new start that pays it.
    pub data_egress: f64,
    /// On-demand $/h of one node of the shape: the rule's floor is one restart at this price.
    pub on_demand_rate: f64,
}

/// A move worth making: which nodes (indices into [`MoveInput::nodes`], dearest first) and
/// what it saves.
#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    pub movers: Vec<usize>,
    /// $/h of the movers now.
    pub current_rate: f64,
    pub net_saving: f64,
}

/// Why nothing moves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stay {
    /// No node is dearer than the target, the budget or the pool's room is zero, or a gang
    /// could not move whole.
    NothingToMove,
    /// The rule of [`migrate::decide`] says no.
    Rule(Decision),
}

/// Nodes dearest first, on-demand before spot: those are the ones worth moving.
pub fn dearest_first(nodes: &[Node]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by(|&a, &b| {
        (nodes[b].on_demand, nodes[b].price)
            .partial_cmp(&(nodes[a].on_demand, nodes[a].price))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    order
}

/// A disruption budget's worth of the dearest nodes not in the target that `worth` accepts (at
/// most the target's room); a gang moves whole or not at all (then: none).
pub fn movers(input: &MoveInput<'_>, worth: impl Fn(&Node) -> bool) -> Vec<usize> {
    let n = input.nodes.len() as u32;
    let candidates: Vec<usize> = dearest_first(input.nodes)
        .into_iter()
        .filter(|&i| !input.nodes[i].in_target && worth(&input.nodes[i]))
        .collect();
    let k = disruption_quota(input.fleet_nodes, input.budget_fraction)
        .min(candidates.len() as u32)
        .min(input.target.room.unwrap_or(u32::MAX));
    if k == 0 || (input.gang && k < n) {
        return Vec::new();
    }
    candidates[..k as usize].to_vec()
}

/// Pick a disruption budget's worth of the dearest nodes that the target beats, and apply the
/// move rule (DESIGN.md §4.3) to moving them.
pub fn plan_move(input: &MoveInput<'_>) -> Result<Move, Stay> {
    let movers = movers(input, |n| n.price > input.target.price);
    if movers.is_empty() {
        return Err(Stay::NothingToMove);
    }
    let k = movers.len() as u32;
    let current_rate: f64 = movers.iter().map(|&i| input.nodes[i].price).sum();
    let egress = if movers.iter().any(|&i| input.nodes[i].other_region) {
        input.checkpoint_gb * input.egress_per_gb
    } else {
        0.0
    } + input.data_egress;
    let candidate = MoveCandidate {
        remaining_work_hours: input.work_h,
        current_rate,
        candidate_rate: input.target.price * f64::from(k),
        restart_hours: input.restart_h,
        held_rate: current_rate,
        lost_progress_cost: 0.0,
        egress,
        slack_hours: input.slack_h,
        hours_since_last_move: input.hours_since_last_move,
    };
    let rule = MoveRule::for_job(input.restart_h, input.on_demand_rate);
    match migrate::decide(&rule, &candidate) {
        Decision::Move { net_saving } => Ok(Move {
            movers,
            current_rate,
            net_saving,
        }),
        other => Err(Stay::Rule(other)),
    }
}

/// The on-demand option that costs least for the work left: its `price` × `node_hours`, plus
/// `egress` where it is `away` from the region of the last checkpoint. Ties go to the first.
/// The replay's on-demand start and the controller's on-demand pick both choose with this.
pub fn cheapest_on_demand(
    options: impl IntoIterator<Item = (f64, bool)>,
    node_hours: f64,
    egress: f64,
) -> Option<usize> {
    let cost = |(price, away): (f64, bool)| price * node_hours + if away { egress } else { 0.0 };
    options
        .into_iter()
        .map(cost)
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(price: f64, on_demand: bool) -> Node {
        Node {
            price,
            on_demand,
            in_target: false,
            other_region: false,
        }
    }

    fn input(nodes: &[Node]) -> MoveInput<'_> {
        MoveInput {
            nodes,
            fleet_nodes: nodes.len() as u32,
            target: Target {
                price: 0.9,
                room: None,
            },
            gang: false,
            budget_fraction: DISRUPTION_BUDGET,
            work_h: 40.0,
            restart_h: 0.2,
            slack_h: 10.0,
            hours_since_last_move: None,
            checkpoint_gb: 50.0,
            egress_per_gb: EGRESS_DOLLARS_PER_GB,
            data_egress: 0.0,
            on_demand_rate: 3.06,
        }
    }

    #[test]
    fn waits_only_while_slack_stays_above_a_quarter_of_the_window() {
        let d = Deadline {
            left_h: 60.0,
            window_h: 70.0,
        };
        // slack = 60 − 40 − 2·0.2 = 19.6 > 17.5 reserve: wait.
        assert_eq!(
            spot_wait(Some(d), 40.0, 0.2),
            SpotWait::Wait {
                slack_h: 60.0 - 40.0 - 0.4,
                left_h: 60.0,
                work_h: 40.0,
                reserve_h: 17.5
            }
        );
        // slack = 60 − 42.5 − 0.4 = 17.1 ≤ 17.5: on-demand now.
        assert_eq!(spot_wait(Some(d), 42.5, 0.2), SpotWait::OnDemandNow);
        assert_eq!(spot_wait(None, 1e9, 0.2), SpotWait::NoDeadline);
    }

    #[test]
    fn work_hours_stay_finite_without_throughput() {
        assert_eq!(work_hours(3600.0, 1.0), 1.0);
        assert_eq!(work_hours(-5.0, 1.0), 0.0);
        assert!(work_hours(1.0, 0.0).is_finite());
    }

    #[test]
    fn moves_a_budget_of_the_dearest_nodes_on_demand_first() {
        let nodes = [
            node(1.2, false),
            node(3.06, true),
            node(1.5, false),
            node(0.8, false),
            node(3.06, true),
            node(1.4, false),
            node(1.3, false),
            node(1.1, false),
        ];
        let m = plan_move(&input(&nodes)).expect("a move");
        // 25 % of 8 = 2 nodes: the two on-demand ones.
        assert_eq!(m.movers, vec![1, 4]);
        assert!((m.current_rate - 6.12).abs() < 1e-9);
        // saving (6.12 − 1.8)·40 − restart 0.2·6.12 = 171.576.
        assert!((m.net_saving - (4.32 * 40.0 - 0.2 * 6.12)).abs() < 1e-9);
    }

    #[test]
    fn on_demand_is_picked_on_price_and_checkpoint_egress() {
        // $3/h at home against $2.90/h away, 10 node-hours: $1 saved.
        let options = [(3.0, false), (2.9, true)];
        assert_eq!(cheapest_on_demand(options, 10.0, 0.5), Some(1));
        assert_eq!(cheapest_on_demand(options, 10.0, 1.5), Some(0));
        assert_eq!(
            cheapest_on_demand([(2.0, false), (2.0, false)], 1.0, 0.0),
            Some(0)
        );
        assert_eq!(cheapest_on_demand([], 1.0, 0.0), None);
    }

    #[test]
    fn egress_is_paid_only_across_regions() {
        let mut nodes = [node(1.0, false); 4];
        let same = plan_move(&input(&nodes)).expect("move");
        nodes[0].other_region = true;
        let across = plan_move(&input(&nodes)).expect("move");
        assert!((same.net_saving - across.net_saving - 50.0 * EGRESS_DOLLARS_PER_GB).abs() < 1e-9);
        // Data read from another region is paid on every move, and can outweigh the saving.
        let mut far = input(&nodes);
        far.data_egress = 0.1;
        let paid = plan_move(&far).expect("move");
        assert!((across.net_saving - paid.net_saving - 0.1).abs() < 1e-9);
        far.data_egress = 1e4;
        assert!(
            plan_move(&far).is_err(),
            "a move that reads 500 TB across regions never pays"
        );
    }

    #[test]
    fn nothing_moves_when_the_target_is_no_cheaper_or_a_gang_cannot_move_whole() {
        let cheap = [node(0.9, false), node(0.5, false)];
        assert_eq!(plan_move(&input(&cheap)), Err(Stay::NothingToMove));
        let dear = [node(2.0, false); 8];
        let mut gang = input(&dear);
        gang.gang = true;
        assert_eq!(plan_move(&gang), Err(Stay::NothingToMove));
        // The budget is a share of the whole fleet, booting nodes included.
        let mut booting = input(&dear[..1]);
        booting.fleet_nodes = 8;
        assert_eq!(plan_move(&booting).expect("move").movers, vec![0]);
        let mut full = input(&dear);
        full.target.room = Some(0);
        assert_eq!(plan_move(&full), Err(Stay::NothingToMove));
    }

    #[test]
    fn a_recent_move_or_a_tight_deadline_keeps_the_job_in_place() {
        let dear = [node(2.0, false); 4];
        let mut recent = input(&dear);
        recent.hours_since_last_move = Some(0.1);
        assert_eq!(plan_move(&recent), Err(Stay::Rule(Decision::CoolingDown)));
        let mut tight = input(&dear);
        tight.slack_h = 0.5;
        assert_eq!(plan_move(&tight), Err(Stay::Rule(Decision::DeadlineAtRisk)));
    }

    #[test]
    fn quota_is_at_least_one_node() {
        assert_eq!(disruption_quota(1, 0.25), 1);
        assert_eq!(disruption_quota(8, 0.25), 2);
        assert_eq!(disruption_quota(10, 0.25), 2);
    }
}
