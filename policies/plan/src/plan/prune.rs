//! Pruning a job's configurations before the MILP: drop the dominated ones, then keep the best
//! few. Dominance pruning cannot change the optimum; the cap bounds the MILP's size.

use tern_cloud::Offer;

use super::{CandidateCounts, Entry, Status};

/// Drop dominated configurations, then keep the `keep` best. `a` dominates `b` when it uses
/// the same shared resources, no more of any, and is no worse in objective and pessimistic
/// finish (and, when teams' shares count, has no fewer accelerators): then no optimal plan
/// needs `b`, so pruning cannot change the optimum.
pub(super) fn prune(list: &mut [Entry], keep: usize, shares: bool, counts: &mut CandidateCounts) {
    let mut idx: Vec<usize> = (0..list.len())
        .filter(|&k| list[k].1 == Status::Candidate)
        .collect();
    counts.infeasible += list.len() - idx.len();
    idx.sort_by(|a, b| list[*a].3.total_cmp(&list[*b].3).then(a.cmp(b)));
    let mut survivors: Vec<usize> = Vec::new();
    for &k in &idx {
        let dominator = survivors.iter().copied().find(|&s| {
            dominates(&list[s], &list[k]) && (!shares || list[s].0.workers >= list[k].0.workers)
        });
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

/// The part of a pruned list that the MILP and the report can use: every candidate, the best
/// `alternatives + 1` entries (what a report lists, the choice aside), the best entry that is
/// not infeasible, the cheapest offer per accelerator-hour with its best entry, and the
/// dominators of what is kept. A job whose every configuration is infeasible keeps them all
/// (the report sums up why). The report is the same as from the whole list, which over the
/// whole catalog holds thousands of entries per job, most of them dominated.
pub(super) fn digest(list: Vec<Entry>, alternatives: usize, offers: &[Offer]) -> Vec<Entry> {
    if list.iter().all(|e| matches!(e.1, Status::Infeasible(_))) {
        return list;
    }
    let mut keep = vec![false; list.len()];
    let by_objective = |a: &usize, b: &usize| list[*a].3.total_cmp(&list[*b].3).then(a.cmp(b));
    let mut order: Vec<usize> = (0..list.len()).collect();
    if order.len() > alternatives + 1 {
        order.select_nth_unstable_by(alternatives, by_objective);
    }
    for &k in order.iter().take(alternatives + 1) {
        keep[k] = true;
    }
    for (k, e) in list.iter().enumerate() {
        keep[k] |= e.1 == Status::Candidate;
    }
    let first_min = |pick: &dyn Fn(&Entry) -> bool, key: &dyn Fn(&Entry) -> (f64, f64)| {
        (0..list.len())
            .filter(|&k| pick(&list[k]))
            .min_by(|&a, &b| {
                let (ka, kb) = (key(&list[a]), key(&list[b]));
                ka.0.total_cmp(&kb.0)
                    .then(ka.1.total_cmp(&kb.1))
                    .then(a.cmp(&b))
            })
    };
    let feasible = |e: &Entry| !matches!(e.1, Status::Infeasible(_));
    if let Some(k) = first_min(&feasible, &|e| (e.3, 0.0)) {
        keep[k] = true;
    }
    let per_acc = |e: &Entry| {
        offers[e.0.offer]
            .price_per_accelerator_hour()
            .unwrap_or(f64::INFINITY)
    };
    if let Some(c) = first_min(&|_| true, &|e| (per_acc(e), e.3)) {
        keep[c] = true;
        let offer = list[c].0.offer;
        if let Some(k) = first_min(&|e| e.0.offer == offer, &|e| (e.3, 0.0)) {
            keep[k] = true;
        }
    }
    for k in 0..list.len() {
        if keep[k]
            && let Status::Dominated(by) = list[k].1
        {
            keep[by] = true;
        }
    }
    compact(list, &keep)
}

/// The kept entries in their order, with `Dominated` indices renumbered.
fn compact(list: Vec<Entry>, keep: &[bool]) -> Vec<Entry> {
    let mut new_index = vec![usize::MAX; list.len()];
    let mut next = 0;
    for (k, &kept) in keep.iter().enumerate() {
        if kept {
            new_index[k] = next;
            next += 1;
        }
    }
    // A new vector, not an in-place `collect`: that would keep the whole list's allocation
    // alive for every job of the plan (gigabytes over 10,000 jobs).
    let mut out = Vec::with_capacity(next);
    for (mut e, _) in list.into_iter().zip(keep).filter(|(_, kept)| **kept) {
        if let Status::Dominated(by) = e.1 {
            e.1 = Status::Dominated(new_index[by]);
        }
        out.push(e);
    }
    out
}
