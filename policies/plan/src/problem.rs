//! The optimisation problem in its plainest form: choose at most one option per job, within
//! shared resource limits. Quotas, per-offer availability caps and team budgets are all
//! "resources", so one MILP, one greedy and one brute force serve every constraint.

use serde::Serialize;

/// One way to run one job (a configuration), reduced to what the optimiser needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    pub job: usize,
    /// Objective value if chosen (expected $ for the cost objective, hours for time).
    pub objective: f64,
    /// (resource index, amount used).
    pub usage: Vec<(usize, f64)>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Problem {
    /// Penalty paid by each job left unplaced (index = job).
    pub unplaced_penalty: Vec<f64>,
    pub options: Vec<Choice>,
    /// Limit of each resource.
    pub limits: Vec<f64>,
    /// Terms that weigh teams' shares against cost (`--fairness`); `None` = cost only.
    pub fairness: Option<Fairness>,
}

/// Fairness terms: each team pays `guard` when it has options but none of its jobs is placed,
/// and `per_short` for each accelerator by which its placed jobs fall short of `entitled`.
/// `guard` is set above every other term, so a plan leaves a team with nothing only when no
/// plan can serve as many teams; `per_short` is what trades cost against shares.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Fairness {
    /// Team of each job (an index into `teams`).
    pub team_of_job: Vec<usize>,
    /// Accelerators of each option, aligned with `Problem::options`.
    pub accelerators: Vec<f64>,
    pub teams: Vec<TeamTerm>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct TeamTerm {
    pub guard: f64,
    /// Accelerators the team is entitled to.
    pub entitled: f64,
    /// Objective per accelerator of shortfall.
    pub per_short: f64,
}

impl TeamTerm {
    /// Whether the term can change the objective.
    pub fn active(&self) -> bool {
        self.guard > 0.0 || self.per_short > 0.0
    }
}

impl Fairness {
    /// The team terms an assignment pays: guards of teams with options and nothing placed,
    /// and shortfalls against entitlements.
    pub fn value(&self, problem: &Problem, a: &Assignment) -> f64 {
        let teams = self.teams.len();
        let (mut has_options, mut served) = (vec![false; teams], vec![false; teams]);
        let mut placed = vec![0.0; teams];
        for o in &problem.options {
            has_options[self.team_of_job[o.job]] = true;
        }
        for (j, c) in a.iter().enumerate() {
            if let Some(c) = c {
                let t = self.team_of_job[j];
                served[t] = true;
                placed[t] += self.accelerators[*c];
            }
        }
        self.teams
            .iter()
            .enumerate()
            .map(|(t, term)| {
                let guard = if has_options[t] && !served[t] {
                    term.guard
                } else {
                    0.0
                };
                guard + term.per_short * (term.entitled - placed[t]).max(0.0)
            })
            .sum()
    }
}

/// An assignment: for each job, the chosen option index (into `Problem::options`), if any.
pub type Assignment = Vec<Option<usize>>;

impl Problem {
    pub fn jobs(&self) -> usize {
        self.unplaced_penalty.len()
    }

    /// Each job's options (indices into `options`), in order.
    pub fn options_by_job(&self) -> Vec<Vec<usize>> {
        let mut by_job = vec![Vec::new(); self.jobs()];
        for (i, o) in self.options.iter().enumerate() {
            by_job[o.job].push(i);
        }
        by_job
    }

    /// Whether `used` of resource `r` is within its limit, with a small tolerance for the
    /// solver's floating point.
    pub fn within(&self, r: usize, used: f64) -> bool {
        let limit = self.limits[r];
        used <= limit + 1e-9 * limit.abs().max(1.0)
    }

    /// Total objective of an assignment, penalties and fairness terms included.
    pub fn value(&self, a: &Assignment) -> f64 {
        let fair = self.fairness.as_ref().map_or(0.0, |f| f.value(self, a));
        fair + a
            .iter()
            .enumerate()
            .map(|(j, c)| match c {
                Some(c) => self.options[*c].objective,
                None => self.unplaced_penalty[j],
            })
            .sum::<f64>()
    }

    /// Whether an assignment respects every resource limit (with a small tolerance for the
    /// solver's floating point) and assigns options to their own jobs.
    pub fn is_feasible(&self, a: &Assignment) -> bool {
        let mut used = vec![0.0; self.limits.len()];
        for (j, c) in a.iter().enumerate() {
            if let Some(c) = c {
                let o = &self.options[*c];
                if o.job != j {
                    return false;
                }
                for &(r, amount) in &o.usage {
                    used[r] += amount;
                }
            }
        }
        used.iter().enumerate().all(|(r, u)| self.within(r, *u))
    }

    /// Exhaustive search. Exponential: for tests on small instances only.
    pub fn brute_force(&self) -> (f64, Assignment) {
        let per_job: Vec<Vec<Option<usize>>> = self
            .options_by_job()
            .into_iter()
            .map(|options| {
                std::iter::once(None)
                    .chain(options.into_iter().map(Some))
                    .collect()
            })
            .collect();
        let mut best = (f64::INFINITY, vec![None; self.jobs()]);
        let mut current = vec![None; self.jobs()];
        self.search(&per_job, 0, &mut current, &mut best);
        best
    }

    fn search(
        &self,
        per_job: &[Vec<Option<usize>>],
        j: usize,
        current: &mut Assignment,
        best: &mut (f64, Assignment),
    ) {
        if j == per_job.len() {
            if self.is_feasible(current) {
                let v = self.value(current);
                if v < best.0 {
                    *best = (v, current.clone());
                }
            }
            return;
        }
        for &c in &per_job[j] {
            current[j] = c;
            self.search(per_job, j + 1, current, best);
        }
        current[j] = None;
    }
}
