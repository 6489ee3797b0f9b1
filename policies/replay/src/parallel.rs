//! Every window of every policy, on all cores, and the figures of one policy over them.

use std::sync::atomic::{AtomicUsize, Ordering};

use tern_policies::deadline::DeadlinePolicy;

use crate::{PolicyKind, Prepared, Summary, WindowResult};

impl Prepared {
    /// Replay every window for every policy, on all cores; `tick` is called after each window.
    pub fn replay(&self, policies: &[PolicyKind], tick: &(dyn Fn() + Sync)) -> Vec<Summary> {
        let n = self.starts.len();
        let next = AtomicUsize::new(0);
        let threads = self.threads();
        let mut results: Vec<Option<Vec<WindowResult>>> = vec![None; n];
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut mine = Vec::new();
                        // One policy object per thread, reset between windows: tern keeps its
                        // value tables, which are pure functions of their key.
                        let mut online: Vec<Option<Box<dyn DeadlinePolicy>>> =
                            policies.iter().map(|p| p.online()).collect();
                        loop {
                            let w = next.fetch_add(1, Ordering::Relaxed);
                            if w >= n {
                                break;
                            }
                            let row: Vec<WindowResult> = online
                                .iter_mut()
                                .zip(policies)
                                .map(|(p, &kind)| match p {
                                    Some(p) => {
                                        p.reset();
                                        self.run_kind(kind, p.as_mut(), self.starts[w], None)
                                    }
                                    None => self.run_optimal(self.starts[w]),
                                })
                                .collect();
                            mine.push((w, row));
                            tick();
                        }
                        mine
                    })
                })
                .collect();
            for h in handles {
                // A panicking worker is a bug in a policy; surface it rather than hide windows.
                match h.join() {
                    Ok(rows) => {
                        for (w, row) in rows {
                            results[w] = Some(row);
                        }
                    }
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
        });
        let rows: Vec<Vec<WindowResult>> = results.into_iter().flatten().collect();
        policies
            .iter()
            .enumerate()
            .map(|(i, &p)| self.summarise(p.name(), rows.iter().map(|r| r[i])))
            .collect()
    }

    /// Figures of one policy (named `policy`) over every window (in window order).
    pub fn summarise(
        &self,
        policy: &'static str,
        results: impl Iterator<Item = WindowResult>,
    ) -> Summary {
        let mut ratios = Vec::new();
        let (mut misses, mut spot, mut billed, mut moves, mut restarts) =
            (0, 0u64, 0u64, 0u64, 0u64);
        for r in results {
            ratios.push(if r.cost.is_finite() {
                r.cost / self.reference
            } else {
                f64::NAN
            });
            misses += usize::from(!r.finished);
            spot += u64::from(r.spot_ticks);
            billed += u64::from(r.spot_ticks + r.on_demand_ticks);
            moves += u64::from(r.moves);
            restarts += u64::from(r.restarts);
        }
        let n = ratios.len().max(1) as f64;
        let finite: Vec<f64> = ratios.iter().copied().filter(|r| r.is_finite()).collect();
        let mean = finite.iter().sum::<f64>() / finite.len().max(1) as f64;
        Summary {
            policy,
            windows: ratios.len(),
            mean_cost_ratio: mean,
            p90_cost_ratio: percentile(&finite, 0.9),
            deadline_misses: misses,
            spot_share: if billed > 0 {
                spot as f64 / billed as f64
            } else {
                0.0
            },
            mean_moves: moves as f64 / n,
            mean_restarts: restarts as f64 / n,
            ratios,
        }
    }
}

/// Nearest-rank percentile (`q` in 0..=1) of unsorted values; NaN when empty.
pub fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}
