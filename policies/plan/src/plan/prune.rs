//! Pruning a job's configurations before the MILP: drop the dominated ones, then keep the best
//! few. Dominance pruning cannot change the optimum; the cap bounds the MILP's size.

use super::{CandidateCounts, Entry, Status};

/// Drop dominated configurations, then keep the `keep` best. `a` dominates `b` when it uses
/// the same shared resources, no more of any, and is no worse in objective and pessimistic
/// finish: then no optimal plan needs `b`, so pruning cannot change the optimum.
pub(super) fn prune(list: &mut [Entry], keep: usize, counts: &mut CandidateCounts) {
    let mut idx: Vec<usize> = (0..list.len())
        .filter(|&k| list[k].1 == Status::Candidate)
        .collect();
    counts.infeasible += list.len() - idx.len();
    idx.sort_by(|a, b| list[*a].3.total_cmp(&list[*b].3).then(a.cmp(b)));
    let mut survivors: Vec<usize> = Vec::new();
    for &k in &idx {
        let dominator = survivors
            .iter()
            .copied()
            .find(|&s| dominates(&list[s], &list[k]));
        match dominator {
            Some(s) => {
                list[k].1 = Status::Dominated(s);
                counts.dominated += 1;
            }
            None => survivors.push(k),
        }
    }
    for &k in survivors.iter().skip(keep) {
        list[k].1 = Status::Truncated;
        counts.truncated += 1;
    }
}

fn dominates(a: &Entry, b: &Entry) -> bool {
    a.3 <= b.3
        && a.0.finish_high_h <= b.0.finish_high_h
        && a.2.len() == b.2.len()
        && a.2
            .iter()
            .all(|&(r, amount)| b.2.iter().any(|&(r2, a2)| r2 == r && amount <= a2))
}
