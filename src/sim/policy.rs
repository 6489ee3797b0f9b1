//! The policies `tern simulate` runs: the ones the replay crate replays tick by tick
//! ([`PolicyKind`]), and the controller itself in a closed loop ([`super::closed_loop`]),
//! warm or cold, which only this crate can run (the replay crate sits below the controller).

use tern_replay::{PolicyKind, ReplayError};

/// One policy of `tern simulate --policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimPolicy {
    Replayed(PolicyKind),
    /// The real controller in a closed loop (`controller`).
    Controller,
    /// The same closed loop with a job nobody has measured (`controller-cold`): the
    /// controller probes it first and plans on what its simulated workers measure.
    ControllerCold,
}

impl SimPolicy {
    pub fn name(self) -> &'static str {
        match self {
            SimPolicy::Replayed(p) => p.name(),
            SimPolicy::Controller => "controller",
            SimPolicy::ControllerCold => "controller-cold",
        }
    }

    /// The replayed policy, or `None` for a closed loop.
    pub fn replayed(self) -> Option<PolicyKind> {
        match self {
            SimPolicy::Replayed(p) => Some(p),
            _ => None,
        }
    }

    pub fn is_closed_loop(self) -> bool {
        self.replayed().is_none()
    }
}

/// The replayed policies among `policies`, in their order.
pub fn replayed(policies: &[SimPolicy]) -> Vec<PolicyKind> {
    policies.iter().filter_map(|p| p.replayed()).collect()
}

impl std::str::FromStr for SimPolicy {
    type Err = ReplayError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "controller" => return Ok(SimPolicy::Controller),
            "controller-cold" => return Ok(SimPolicy::ControllerCold),
            _ => {}
        }
        s.parse::<PolicyKind>()
            .map(SimPolicy::Replayed)
            .map_err(|_| ReplayError::Invalid {
                reason: format!(
                    "unknown policy '{s}' (expected od, greedy, up, optimal, tern, informed, \
                     controller or controller-cold)"
                ),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_round_trip_and_bad_ones_name_every_policy() {
        let all = PolicyKind::ALL
            .into_iter()
            .chain([PolicyKind::Informed])
            .map(SimPolicy::Replayed)
            .chain([SimPolicy::Controller, SimPolicy::ControllerCold]);
        for p in all {
            assert_eq!(p.name().parse::<SimPolicy>().unwrap(), p);
            assert_eq!(p.is_closed_loop(), p.replayed().is_none());
        }
        assert_eq!(
            " Controller ".parse::<SimPolicy>().unwrap(),
            SimPolicy::Controller
        );
        let err = "cheap".parse::<SimPolicy>().unwrap_err().to_string();
        assert!(
            err.contains("'cheap'") && err.contains("controller-cold"),
            "{err}"
        );
        let mixed = [
            SimPolicy::Controller,
            SimPolicy::Replayed(PolicyKind::Tern),
            SimPolicy::ControllerCold,
            SimPolicy::Replayed(PolicyKind::Optimal),
        ];
        assert_eq!(
            replayed(&mixed),
            vec![PolicyKind::Tern, PolicyKind::Optimal]
        );
    }
}
