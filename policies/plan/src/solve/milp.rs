//! The MILP of one component on HiGHS: an integer per class of interchangeable jobs and per
//! option (how many of the class take it), at most the class's size in all, and the shared
//! resources' limits. Warm-started from the greedy answer, so a time limit still returns an
//! answer at least as good, with the bound HiGHS proved.

use std::collections::HashMap;
use std::time::Duration;

use highs::{HighsModelStatus, HighsSolutionStatus, RowProblem, Sense};

use super::split::Class;
use crate::problem::{Assignment, Problem};

/// What HiGHS answered for one component.
pub(super) struct Answer {
    /// (job, chosen option) for every placed job of the component.
    pub(super) chosen: Vec<(usize, usize)>,
    /// The answer's objective minus the best bound HiGHS proved (≥ 0; 0 when proved optimal;
    /// infinite when it proved none). In the objective's units, penalties included.
    pub(super) gap: f64,
}

/// Solve the component made of `classes` within `time_limit`, starting from `warm`.
pub(super) fn solve(
    problem: &Problem,
    classes: &[Class],
    warm: &Assignment,
    time_limit: Duration,
) -> Result<Answer, String> {
    let mut pb = RowProblem::default();
    let mut rows: HashMap<usize, HashMap<usize, f64>> = HashMap::new();
    let mut cols = Vec::new();
    for class in classes {
        let size = class.members.len() as f64;
        let first = &class.options[0];
        let penalty = problem.unplaced_penalty[class.members[0]];
        let mine: Vec<_> = first
            .iter()
            .map(|&o| {
                let option = &problem.options[o];
                let col = pb.add_integer_column(option.objective - penalty, 0.0..=size);
                for &(r, amount) in &option.usage {
                    *rows.entry(r).or_default().entry(cols.len()).or_default() += amount;
                }
                cols.push(col);
                col
            })
            .collect();
        if mine.len() > 1 && size > 0.0 {
            pb.add_row(..=size, mine.iter().map(|&c| (c, 1.0)));
        }
    }
    let teams = add_team_terms(&mut pb, problem, classes, &cols);
    let mut resources: Vec<_> = rows.into_iter().collect();
    resources.sort_by_key(|(r, _)| *r);
    for (r, terms) in resources {
        let mut terms: Vec<_> = terms.into_iter().collect();
        terms.sort_by_key(|(c, _)| *c);
        pb.add_row(
            ..=problem.limits[r],
            terms.iter().map(|&(c, a)| (cols[c], a)),
        );
    }
    let mut model = pb
        .try_optimise(Sense::Minimise)
        .map_err(|s| format!("HiGHS rejected the model: {s:?}"))?;
    model.make_quiet();
    set(
        &mut model,
        "time_limit",
        time_limit.as_secs_f64().max(0.001),
    )?;
    // Penalties make objective values large; a relative gap would then allow dollars of
    // suboptimality. Ask for a proof of optimality instead.
    set(&mut model, "mip_rel_gap", 0.0)?;
    set(&mut model, "mip_abs_gap", 1e-7)?;
    let mut start = warm_start(classes, warm);
    start.extend(teams.warm_start(problem, warm));
    // A rejected start only costs time: HiGHS then searches from nothing.
    let _ = model.try_set_solution(Some(&start), None, None, None);
    let solved = model
        .try_solve()
        .map_err(|s| format!("HiGHS failed: {s:?}"))?;
    let status = solved.status();
    let has_answer = solved.primal_solution_status() == HighsSolutionStatus::Feasible;
    if !has_answer {
        return Err(format!("HiGHS found no answer ({status:?})"));
    }
    let gap = match status {
        HighsModelStatus::Optimal => 0.0,
        _ => {
            let bound = solved
                .double_info_value(c"mip_dual_bound")
                .unwrap_or(f64::NEG_INFINITY);
            (solved.objective_value() - bound).max(0.0)
        }
    };
    let values = solved.get_solution().columns().to_vec();
    Ok(Answer {
        chosen: disaggregate(classes, &values),
        gap: if gap.is_nan() { f64::INFINITY } else { gap },
    })
}

fn set(model: &mut highs::Model, option: &str, value: f64) -> Result<(), String> {
    model
        .try_set_option(option, value)
        .map_err(|e| format!("HiGHS option {option}: {e:?}"))
}

/// The fairness columns of a component, in the order they were added: for each active team,
/// a binary "served" and a continuous shortfall.
struct TeamColumns {
    teams: Vec<usize>,
}

/// For each active team among `classes`: a binary `served` (paid `-guard`, at most the count
/// of its placed jobs) and a shortfall `short` ≥ entitled − placed accelerators (paid
/// `per_short`). The constants (every guard, every full shortfall) are left out of HiGHS'
/// objective; differences, and so the gap, are unchanged.
fn add_team_terms(
    pb: &mut RowProblem,
    problem: &Problem,
    classes: &[Class],
    cols: &[highs::Col],
) -> TeamColumns {
    let Some(fair) = &problem.fairness else {
        return TeamColumns { teams: Vec::new() };
    };
    let mut teams: Vec<usize> = Vec::new();
    let mut col = 0;
    let mut of_team: HashMap<usize, Vec<(usize, usize)>> = HashMap::new();
    for class in classes {
        let t = fair.team_of_job[class.members[0]];
        for &o in &class.options[0] {
            of_team.entry(t).or_default().push((col, o));
            col += 1;
        }
        if fair.teams[t].active() && !teams.contains(&t) {
            teams.push(t);
        }
    }
    for &t in &teams {
        let term = fair.teams[t];
        let mine = of_team.get(&t).map_or(&[][..], |v| &v[..]);
        let served = pb.add_integer_column(-term.guard, 0.0..=1.0);
        let short = pb.add_column(term.per_short, 0.0..=term.entitled.max(0.0));
        let placed = mine.iter().map(|&(c, _)| (cols[c], -1.0));
        pb.add_row(..=0.0, std::iter::once((served, 1.0)).chain(placed));
        let acc = mine
            .iter()
            .map(|&(c, o)| (cols[c], fair.accelerators[o]))
            .filter(|&(_, a)| a != 0.0);
        pb.add_row(term.entitled.., std::iter::once((short, 1.0)).chain(acc));
    }
    TeamColumns { teams }
}

impl TeamColumns {
    /// The values of the team columns under `warm`.
    fn warm_start(&self, problem: &Problem, warm: &Assignment) -> Vec<f64> {
        let Some(fair) = &problem.fairness else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for &t in &self.teams {
            let mut placed = 0.0;
            let mut served = false;
            for (j, c) in warm.iter().enumerate() {
                if let Some(c) = c
                    && fair.team_of_job[j] == t
                {
                    served = true;
                    placed += fair.accelerators[*c];
                }
            }
            let entitled = fair.teams[t].entitled.max(0.0);
            out.push(if served { 1.0 } else { 0.0 });
            out.push((entitled - placed).clamp(0.0, entitled));
        }
        out
    }
}

/// Column values of `warm` (a feasible assignment of the whole problem): how many members of
/// each class take each of its options.
fn warm_start(classes: &[Class], warm: &Assignment) -> Vec<f64> {
    let mut out = Vec::new();
    for class in classes {
        let mut counts = vec![0.0; class.width()];
        for (m, &job) in class.members.iter().enumerate() {
            if let Some(chosen) = warm[job]
                && let Some(k) = class.options[m].iter().position(|&o| o == chosen)
            {
                counts[k] += 1.0;
            }
        }
        out.extend(counts);
    }
    out
}

/// From counts per class and option back to one option per job: the first members of a
/// class take its first option, and so on.
fn disaggregate(classes: &[Class], values: &[f64]) -> Vec<(usize, usize)> {
    let mut chosen = Vec::new();
    let mut col = 0;
    for class in classes {
        let mut next = 0;
        for k in 0..class.width() {
            let count = values[col + k].round().max(0.0) as usize;
            for m in next..(next + count).min(class.members.len()) {
                chosen.push((class.members[m], class.options[m][k]));
            }
            next = (next + count).min(class.members.len());
        }
        col += class.width();
    }
    chosen
}
