//! Making a [`Problem`] smaller without changing its optimum, before HiGHS sees it.
//!
//! - **Components.** Jobs that share no resource (no quota, availability cap or budget, even
//!   through other jobs) do not interact: each component is solved on its own, and a job alone
//!   in its component simply takes its best option that fits. An uncontended fleet of 10,000
//!   jobs is then 10,000 one-line choices, not one MILP.
//! - **Classes.** Jobs with the same penalty and the same options (objective and usage, bit for
//!   bit) are interchangeable: the MILP counts how many of a class take each option (one
//!   integer per class and option) instead of a binary per job and option. Identical jobs (a
//!   sweep, replicas of one spec) otherwise make HiGHS search symmetric copies of one answer.
//!
//! - **Teams.** With fairness terms, a team's jobs are one component (its terms add up their
//!   accelerators), and only jobs of one team, whose options have the same accelerators, are
//!   interchangeable.
//!
//! Both are exact: every assignment of the original problem maps to one of the reduced problem
//! with the same value and resource use, and back.

use std::collections::HashMap;

use crate::problem::Problem;

/// Groups of jobs that share no resource with any job outside the group, smallest job first.
pub(super) fn components(problem: &Problem) -> Vec<Vec<usize>> {
    let jobs = problem.jobs();
    let mut parent: Vec<usize> = (0..jobs).collect();
    let mut first_user: Vec<Option<usize>> = vec![None; problem.limits.len()];
    for o in &problem.options {
        for &(r, _) in &o.usage {
            match first_user[r] {
                Some(j) => union(&mut parent, j, o.job),
                None => first_user[r] = Some(o.job),
            }
        }
    }
    // A team's fairness terms depend on all its jobs together.
    if let Some(f) = &problem.fairness {
        let mut first_of_team: Vec<Option<usize>> = vec![None; f.teams.len()];
        for j in 0..jobs {
            let t = f.team_of_job[j];
            if !f.teams[t].active() {
                continue;
            }
            match first_of_team[t] {
                Some(first) => union(&mut parent, first, j),
                None => first_of_team[t] = Some(j),
            }
        }
    }
    let mut groups: HashMap<usize, Vec<usize>> = HashMap::new();
    for j in 0..jobs {
        let root = find(&mut parent, j);
        groups.entry(root).or_default().push(j);
    }
    let mut out: Vec<Vec<usize>> = groups.into_values().collect();
    out.sort_by_key(|g| g[0]);
    out
}

fn find(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

fn union(parent: &mut [usize], a: usize, b: usize) {
    let (ra, rb) = (find(parent, a), find(parent, b));
    if ra != rb {
        parent[ra.max(rb)] = ra.min(rb);
    }
}

/// Interchangeable jobs of one component.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Class {
    /// The jobs (indices into the problem), in order.
    pub(super) members: Vec<usize>,
    /// For each member, its options (indices into `Problem::options`), aligned: option `k`
    /// of every member has the same objective and usage.
    pub(super) options: Vec<Vec<usize>>,
}

impl Class {
    /// The option count of each member.
    pub(super) fn width(&self) -> usize {
        self.options[0].len()
    }
}

/// The classes of interchangeable jobs among `jobs`, in order of their first member.
pub(super) fn classes(problem: &Problem, jobs: &[usize], by_job: &[Vec<usize>]) -> Vec<Class> {
    let mut out: Vec<Class> = Vec::new();
    let mut by_signature: HashMap<Vec<u64>, usize> = HashMap::new();
    for &j in jobs {
        let mut opts = by_job[j].clone();
        opts.sort_by_cached_key(|&o| option_key(problem, o));
        let mut signature = vec![problem.unplaced_penalty[j].to_bits()];
        if let Some(f) = &problem.fairness {
            signature.push(f.team_of_job[j] as u64);
        }
        for &o in &opts {
            signature.extend(option_key(problem, o));
            signature.push(u64::MAX); // separator: usage lists differ in length
        }
        match by_signature.get(&signature) {
            Some(&c) => {
                out[c].members.push(j);
                out[c].options.push(opts);
            }
            None => {
                by_signature.insert(signature, out.len());
                out.push(Class {
                    members: vec![j],
                    options: vec![opts],
                });
            }
        }
    }
    out
}

/// An option's objective and usage as bits, the identity two interchangeable options share.
fn option_key(problem: &Problem, o: usize) -> Vec<u64> {
    let option = &problem.options[o];
    let mut usage: Vec<(u64, u64)> = option
        .usage
        .iter()
        .map(|&(r, a)| (r as u64, a.to_bits()))
        .collect();
    usage.sort_unstable();
    let mut key = vec![option.objective.to_bits()];
    if let Some(f) = &problem.fairness {
        key.push(f.accelerators[o].to_bits());
    }
    key.extend(usage.into_iter().flat_map(|(r, a)| [r, a]));
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::Choice;

    fn choice(job: usize, objective: f64, usage: &[(usize, f64)]) -> Choice {
        Choice {
            job,
            objective,
            usage: usage.to_vec(),
        }
    }

    #[test]
    fn jobs_sharing_a_resource_through_a_third_are_one_component() {
        let p = Problem {
            unplaced_penalty: vec![100.0; 4],
            options: vec![
                choice(0, 1.0, &[(0, 1.0)]),
                choice(1, 1.0, &[(0, 1.0), (1, 1.0)]),
                choice(2, 1.0, &[(1, 1.0)]),
                choice(3, 1.0, &[]),
            ],
            limits: vec![1.0, 1.0],
            fairness: None,
        };
        assert_eq!(components(&p), vec![vec![0, 1, 2], vec![3]]);
    }

    #[test]
    fn identical_jobs_form_one_class_whatever_the_order_of_their_options() {
        let p = Problem {
            unplaced_penalty: vec![100.0, 100.0, 100.0],
            options: vec![
                choice(0, 1.0, &[(0, 2.0)]),
                choice(0, 3.0, &[]),
                choice(1, 3.0, &[]),
                choice(1, 1.0, &[(0, 2.0)]),
                // Same objectives, different usage: another class.
                choice(2, 1.0, &[(0, 3.0)]),
                choice(2, 3.0, &[]),
            ],
            limits: vec![4.0],
            fairness: None,
        };
        let by_job = vec![vec![0, 1], vec![2, 3], vec![4, 5]];
        let c = classes(&p, &[0, 1, 2], &by_job);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].members, vec![0, 1]);
        // Option k of each member is the same option.
        assert_eq!(c[0].options, vec![vec![0, 1], vec![3, 2]]);
        assert_eq!(c[1].members, vec![2]);
    }
}
