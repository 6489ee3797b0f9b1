//! The answers a worker's agent gets, in one vocabulary for both twins: the simulated workers'
//! record (`Workload::answers`, in `src/controller`'s unit tests) and a real `tern agent`'s log
//! (`tests/agent_training`). Both sides reduce to the same list and assert the same constant,
//! so a stop path that tells the two twins different things fails one of them. Included by
//! path from both (it uses nothing outside `std`).

// Each includer uses its half.
#![allow(dead_code)]

/// A reduced list: reports answered plainly left out, repeats once; a last report (the
/// workers stopped) is `taken` or `refused`, whatever else its answer said.
///
/// A drained node's agent asks to start again after its last report and waits until its
/// instance is released; whether it asks before the release (the simulated agent, in the
/// same step) or after it (a real one, after the controller's pass on its report) is timing,
/// so that `start: wait` is left out.
fn push(out: &mut Vec<String>, said: &str) {
    let n = out.len();
    let drained = n >= 2 && out[n - 2] == "report: drain" && out[n - 1] == "last report: taken";
    if said == "start: wait" && drained {
        return;
    }
    if out.last().map(String::as_str) != Some(said) {
        out.push(said.to_string());
    }
}

/// The simulated workers' record of one agent (`start: incarnation 1`, `report: ok`,
/// `report: drain`, `last report: drain`, `start: 409 done`, …), reduced.
pub fn of_simulated(told: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for s in told {
        let said = match s.as_str() {
            "report: ok" => continue,
            s if s.starts_with("last report: 409") => "last report: refused",
            s if s.starts_with("last report: ") => "last report: taken",
            s if s.starts_with("start: incarnation ") => s,
            "start: wait" => "start: wait",
            "start: 409 done" => "start: 409 done",
            "report: drain" => "report: drain",
            "report: stop" => "report: stop",
            "report: 409 stop" => "report: 409 stop",
            "report: 409 done" => "report: 409 done",
            other => panic!("an answer this vocabulary lacks: {other}"),
        };
        push(&mut out, said);
    }
    out
}

/// A real agent's log, reduced. A released instance's agent asking once more and told the
/// instance left the job is not listed: on a real cloud the agent ends with its instance.
pub fn of_agent_log(log: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in log.lines() {
        let k = line
            .strip_prefix("tern agent: incarnation ")
            .and_then(|rest| rest.split_whitespace().next());
        let started;
        let said = if let Some(k) = k {
            started = format!("start: incarnation {k}");
            started.as_str()
        } else if line.contains("drain: sending") {
            "report: drain"
        } else if line.contains("another node of this incarnation stopped") {
            "report: stop"
        } else if line.contains("killing the workers now") {
            "report: 409 stop"
        } else if line.contains("reported the workers stopped") {
            "last report: taken"
        } else if line.contains("last report not taken") {
            "last report: refused"
        } else if line.contains("nothing to start here") {
            "start: 409 done"
        } else if line.ends_with(": waiting for the training to exit") {
            // The job's end, heard before the training's own exit made the last report:
            // the same end (the simulated training exits in the step that does the work).
            continue;
        } else if line.ends_with(": stopping") {
            "report: 409 done"
        } else if line.contains("waiting to start") {
            "start: wait"
        } else {
            continue;
        };
        push(&mut out, said);
    }
    out
}

/// A job's own budget running out: its agent drains, its last report is taken, and asking
/// again it is told the job is done.
pub const BUDGET_STOP: [&str; 4] = [
    "start: incarnation 1",
    "report: drain",
    "last report: taken",
    "start: 409 done",
];

/// A team's budget cut below what it spent: the job ends at once, so the next report is a 409
/// `done`, and the last report after it is taken.
pub const BUDGET_CUT: [&str; 3] = [
    "start: incarnation 1",
    "report: 409 done",
    "last report: taken",
];

/// A cancel: as a budget cut.
pub const CANCEL: [&str; 3] = BUDGET_CUT;

/// The node a reclaim notice takes (the controller's drain; the agent watches no metadata),
/// and the node a move leaves: it drains, its last report is taken, and it is released.
pub const LEAVING: [&str; 3] = [
    "start: incarnation 1",
    "report: drain",
    "last report: taken",
];

/// The node an elastic job keeps after another's notice: told to stop, its last report taken,
/// it starts the next incarnation and trains to the job's end.
pub const REGROUPED: [&str; 5] = [
    "start: incarnation 1",
    "report: stop",
    "last report: taken",
    "start: incarnation 2",
    "last report: taken",
];

/// The node a one-node job moves to: it waits until the old node's workers stopped, then
/// starts the next incarnation and trains to the job's end.
pub const MOVED_TO: [&str; 3] = ["start: wait", "start: incarnation 2", "last report: taken"];

/// The job's end: the training saves and exits at the job's work (a real agent may hear
/// first that the job finished, and waits for that exit), and the last report is taken; the
/// instance is kept for it.
pub const JOB_END: [&str; 2] = ["start: incarnation 1", "last report: taken"];
