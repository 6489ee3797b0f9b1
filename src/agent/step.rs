//! The agent's choices as values. [`next`] maps what the agent knows ([`State`]) and what just
//! happened ([`Seen`]) to the one thing it does ([`Step`]); `mod.rs` and `restarts.rs` carry
//! the steps out (processes, reports, sleeps) and say what they did. Every branch has a row in
//! the table test below, so a change of behaviour is a change of a value.

use std::time::Duration;

use super::Why;
use super::restarts::Restarts;
use crate::api::wire::Action;

/// How long a start refused with `Exit` (the controller does not know this instance for the
/// job yet) is asked again before the agent gives up: a VM may boot before the controller
/// records its instance.
pub(super) const UNKNOWN_FOR: Duration = Duration::from_secs(30);

/// What the agent knows when it chooses.
#[derive(Debug, Clone, Copy)]
pub(super) struct State {
    /// Workers of this job ran on this instance before (so an `Exit` means it left the job).
    pub(super) trained_here: bool,
    /// How long the agent has been asking to start the current incarnation.
    pub(super) asking_for: Duration,
    /// Restarts in a row, and their bound.
    pub(super) restarts: Restarts,
}

/// What just happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// The controller did not start workers here: its `action` (409), or no answer it could
    /// give (`retryable`: unreachable, a 5xx, a 429).
    StartRefused {
        action: Option<Action>,
        retryable: bool,
    },
    /// SIGTERM or SIGINT to the agent.
    Signal,
    /// A progress report was taken; the answer asks for a drain, or a restart of every node.
    Answered { drain: bool, stop: bool },
    /// A progress report was refused with `action`; `finished`: the job's work is done (asked
    /// of the controller on `Done` only).
    Refused { action: Action, finished: bool },
    /// A progress report reached no controller, or one that failed.
    Unanswered,
    /// The cloud's interruption notice.
    Notice,
    /// No progress for the hang limit.
    Hung,
    /// The training was stopped as hung, and its last report sent.
    StoppedHung,
    /// The training exited by itself; `over`: the controller counts the job's work as done, or
    /// the job ended.
    Exited {
        success: bool,
        progressed: bool,
        over: bool,
    },
}

/// What the agent does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Ask to start again after the interval.
    AskAgain,
    /// Nothing of the job runs here any more: the agent ends (exit 0).
    NothingToStart,
    /// The instance's workers ran and the instance left the job (released after a drain).
    LeftTheJob,
    /// The controller does not know this instance for the job: the agent fails.
    Refuse,
    /// An error that asking again will not change: the agent fails with it.
    Fail,
    /// Keep supervising.
    Continue,
    /// Stop the training (checkpoint command and signal, grace, kill) for `why`, send the last
    /// report; `again`: ask to start a new incarnation.
    Stop { why: Why, again: bool },
    /// Stale workers: kill them now, without a checkpoint, and ask to start again.
    Kill,
    /// The job is over here: let a finished job's training exit within the grace
    /// (`wait_exit`), stop what is left, send the last report, and end.
    Finish { wait_exit: bool },
    /// Nothing of the job may run here: stop, and fail as refused.
    Leave,
    /// The training hangs: stop it as for a drain, and report it hung.
    StopHung,
    /// The training finished the job's work: last report, and end.
    Finished,
    /// Start a new incarnation after `delay`, with the restarts counted so far; `crashed`: the
    /// last report says the workers failed (not an early exit 0, not a hang).
    Restart {
        delay: Duration,
        restarts: Restarts,
        crashed: bool,
    },
    /// The restarts in a row ran out: the job fails, saying why.
    GiveUp { restarts: Restarts },
}

/// The agent's one choice for `event`, given `state`.
pub(super) fn next(state: &State, event: Seen) -> Step {
    let mut restarts = state.restarts;
    match event {
        Seen::StartRefused { action, retryable } => match action {
            Some(Action::Done) => Step::NothingToStart,
            Some(Action::Exit) if state.trained_here => Step::LeftTheJob,
            Some(Action::Exit) if state.asking_for >= UNKNOWN_FOR => Step::Refuse,
            Some(_) => Step::AskAgain,
            None if retryable => Step::AskAgain,
            None => Step::Fail,
        },
        Seen::Signal => Step::Stop {
            why: Why::Signal,
            again: false,
        },
        Seen::Answered { drain: true, .. } => Step::Stop {
            why: Why::Drain,
            again: true,
        },
        Seen::Answered { stop: true, .. } => Step::Stop {
            why: Why::Restart,
            again: true,
        },
        Seen::Answered { .. } | Seen::Unanswered => Step::Continue,
        Seen::Refused { action, finished } => match action {
            Action::Stop => Step::Kill,
            Action::Done => Step::Finish {
                wait_exit: finished,
            },
            Action::Exit => Step::Leave,
            Action::Wait => Step::Continue,
        },
        Seen::Notice => Step::Stop {
            why: Why::Notice,
            again: false,
        },
        Seen::Hung => Step::StopHung,
        Seen::StoppedHung => match restarts.delay() {
            Some(delay) => Step::Restart {
                delay,
                restarts,
                crashed: false,
            },
            None => Step::GiveUp { restarts },
        },
        Seen::Exited {
            success,
            progressed,
            over,
        } => {
            if progressed {
                restarts.used = 0;
            }
            if success && over {
                return Step::Finished;
            }
            let delay = match success {
                true => restarts.early_exit(),
                false => restarts.delay(),
            };
            match delay {
                Some(delay) => Step::Restart {
                    delay,
                    restarts,
                    crashed: !success,
                },
                None => Step::GiveUp { restarts },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restarts(used: u32, early: u32) -> Restarts {
        Restarts {
            max: 3,
            used,
            early,
        }
    }

    fn state(trained_here: bool, asking_for: u64, used: u32, early: u32) -> State {
        State {
            trained_here,
            asking_for: Duration::from_secs(asking_for),
            restarts: restarts(used, early),
        }
    }

    fn stop(why: Why, again: bool) -> Step {
        Step::Stop { why, again }
    }

    fn restart(secs: u64, used: u32, early: u32, crashed: bool) -> Step {
        Step::Restart {
            delay: Duration::from_secs(secs),
            restarts: restarts(used, early),
            crashed,
        }
    }

    fn refused(action: Option<Action>, retryable: bool) -> Seen {
        Seen::StartRefused { action, retryable }
    }

    fn exited(success: bool, progressed: bool, over: bool) -> Seen {
        Seen::Exited {
            success,
            progressed,
            over,
        }
    }

    /// Every branch of [`next`]: (why, state, event, step).
    #[test]
    fn every_choice_of_the_agent_is_a_row() {
        let fresh = state(false, 0, 0, 0);
        let rows: Vec<(&str, State, Seen, Step)> = vec![
            // Before the workers start.
            (
                "job over",
                fresh,
                refused(Some(Action::Done), false),
                Step::NothingToStart,
            ),
            (
                "left after a drain",
                state(true, 0, 0, 0),
                refused(Some(Action::Exit), false),
                Step::LeftTheJob,
            ),
            (
                "not known yet",
                fresh,
                refused(Some(Action::Exit), false),
                Step::AskAgain,
            ),
            (
                "never known",
                state(false, 30, 0, 0),
                refused(Some(Action::Exit), false),
                Step::Refuse,
            ),
            (
                "old incarnation not fenced",
                fresh,
                refused(Some(Action::Wait), false),
                Step::AskAgain,
            ),
            (
                "stale",
                fresh,
                refused(Some(Action::Stop), false),
                Step::AskAgain,
            ),
            (
                "controller unreachable",
                fresh,
                refused(None, true),
                Step::AskAgain,
            ),
            ("bad request", fresh, refused(None, false), Step::Fail),
            // While they run.
            ("signal", fresh, Seen::Signal, stop(Why::Signal, false)),
            (
                "drain",
                fresh,
                Seen::Answered {
                    drain: true,
                    stop: true,
                },
                stop(Why::Drain, true),
            ),
            (
                "another node stopped",
                fresh,
                Seen::Answered {
                    drain: false,
                    stop: true,
                },
                stop(Why::Restart, true),
            ),
            (
                "report taken",
                fresh,
                Seen::Answered {
                    drain: false,
                    stop: false,
                },
                Step::Continue,
            ),
            ("report lost", fresh, Seen::Unanswered, Step::Continue),
            (
                "stale workers",
                fresh,
                Seen::Refused {
                    action: Action::Stop,
                    finished: false,
                },
                Step::Kill,
            ),
            (
                "job finished",
                fresh,
                Seen::Refused {
                    action: Action::Done,
                    finished: true,
                },
                Step::Finish { wait_exit: true },
            ),
            (
                "job cancelled",
                fresh,
                Seen::Refused {
                    action: Action::Done,
                    finished: false,
                },
                Step::Finish { wait_exit: false },
            ),
            (
                "not the job's",
                fresh,
                Seen::Refused {
                    action: Action::Exit,
                    finished: false,
                },
                Step::Leave,
            ),
            (
                "wait while running",
                fresh,
                Seen::Refused {
                    action: Action::Wait,
                    finished: false,
                },
                Step::Continue,
            ),
            ("notice", fresh, Seen::Notice, stop(Why::Notice, false)),
            ("hang", fresh, Seen::Hung, Step::StopHung),
            // After they ended by themselves.
            (
                "hung, restarts left",
                state(false, 0, 1, 0),
                Seen::StoppedHung,
                restart(2, 2, 0, false),
            ),
            (
                "hung, none left",
                state(false, 0, 3, 0),
                Seen::StoppedHung,
                Step::GiveUp {
                    restarts: restarts(3, 0),
                },
            ),
            (
                "finished",
                state(false, 0, 2, 2),
                exited(true, true, true),
                Step::Finished,
            ),
            (
                "exit 0, work left",
                fresh,
                exited(true, true, false),
                restart(1, 0, 1, false),
            ),
            (
                "exit 0 again and again",
                state(false, 0, 0, 3),
                exited(true, true, false),
                Step::GiveUp {
                    restarts: restarts(0, 3),
                },
            ),
            (
                "crash after progress",
                state(false, 0, 3, 0),
                exited(false, true, false),
                restart(1, 1, 0, true),
            ),
            (
                "crash without progress",
                state(false, 0, 2, 0),
                exited(false, false, false),
                restart(4, 3, 0, true),
            ),
            (
                "crashes ran out",
                state(false, 0, 3, 0),
                exited(false, false, false),
                Step::GiveUp {
                    restarts: restarts(3, 0),
                },
            ),
            (
                "crash of a finished job",
                fresh,
                exited(false, false, true),
                restart(1, 1, 0, true),
            ),
        ];
        for (why, state, event, step) in rows {
            assert_eq!(next(&state, event), step, "{why}: {event:?}");
        }
    }
}
