//! The Pollux-form throughput model (DESIGN.md §4.1) and its parameterisation.

use serde::{Deserialize, Serialize};

/// Where a data-parallel step runs: replicas (GPUs), nodes and the per-replica batch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    /// Total replicas K.
    pub gpus: u32,
    /// Nodes N the replicas span.
    pub nodes: u32,
    /// Per-replica (local) batch m.
    pub local_batch: f64,
}

impl Shape {
    pub fn new(gpus: u32, nodes: u32, local_batch: f64) -> Self {
        Self {
            gpus,
            nodes,
            local_batch,
        }
    }

    /// Samples processed by one step, K·m.
    pub fn global_batch(&self) -> f64 {
        f64::from(self.gpus) * self.local_batch
    }

    pub fn is_multi_node(&self) -> bool {
        self.nodes > 1
    }
}

/// One measured step time at a shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub shape: Shape,
    pub step_s: f64,
}

/// Number of free parameters in [`Params`].
pub const N_PARAMS: usize = 7;

/// Index of each parameter in the unconstrained vector θ.
pub(crate) mod ix {
    pub const ALPHA_C: usize = 0;
    pub const BETA_C: usize = 1;
    pub const ALPHA_R: usize = 2;
    pub const BETA_R: usize = 3;
    pub const ALPHA_N: usize = 4;
    pub const BETA_N: usize = 5;
    pub const GAMMA: usize = 6;
}

/// Upper bound of the overlap exponent γ. γ = 1 is no overlap (times add); large γ approaches
/// max(T_grad, T_sync), i.e. perfect overlap, so 10 already covers the useful range.
pub const GAMMA_MAX: f64 = 10.0;

/// Physical parameters, all seconds except `gamma`:
/// T_grad(m) = alpha_c + beta_c·m; T_sync = alpha_x + beta_x·max(K−2, 0) with x = r inside one
/// node and x = n across nodes (0 for K = 1); T_iter = (T_grad^γ + T_sync^γ)^(1/γ).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Params {
    pub alpha_c: f64,
    pub beta_c: f64,
    pub alpha_r: f64,
    pub beta_r: f64,
    pub alpha_n: f64,
    pub beta_n: f64,
    pub gamma: f64,
}

impl Params {
    /// Bounds are enforced by construction: the optimiser works on θ where every time is exp(θ)
    /// (so it stays > 0) and γ = 1 + (GAMMA_MAX − 1)·sigmoid(θ).
    pub fn from_theta(t: &[f64]) -> Self {
        Self {
            alpha_c: t[ix::ALPHA_C].exp(),
            beta_c: t[ix::BETA_C].exp(),
            alpha_r: t[ix::ALPHA_R].exp(),
            beta_r: t[ix::BETA_R].exp(),
            alpha_n: t[ix::ALPHA_N].exp(),
            beta_n: t[ix::BETA_N].exp(),
            gamma: 1.0 + (GAMMA_MAX - 1.0) / (1.0 + (-t[ix::GAMMA]).exp()),
        }
    }

    pub fn to_theta(&self) -> [f64; N_PARAMS] {
        let g = ((self.gamma - 1.0) / (GAMMA_MAX - 1.0)).clamp(1e-6, 1.0 - 1e-6);
        [
            self.alpha_c.max(1e-12).ln(),
            self.beta_c.max(1e-12).ln(),
            self.alpha_r.max(1e-12).ln(),
            self.beta_r.max(1e-12).ln(),
            self.alpha_n.max(1e-12).ln(),
            self.beta_n.max(1e-12).ln(),
            (g / (1.0 - g)).ln(),
        ]
    }

    /// Compute time of one replica at local batch m.
    pub fn grad_s(&self, local_batch: f64) -> f64 {
        self.alpha_c + self.beta_c * local_batch
    }

    /// Gradient all-reduce time; zero for a single replica.
    pub fn sync_s(&self, shape: &Shape) -> f64 {
        if shape.gpus <= 1 {
            return 0.0;
        }
        let extra = f64::from(shape.gpus.saturating_sub(2));
        if shape.nodes > 1 {
            self.alpha_n + self.beta_n * extra
        } else {
            self.alpha_r + self.beta_r * extra
        }
    }

    /// Predicted seconds per step.
    pub fn step_s(&self, shape: &Shape) -> f64 {
        let grad = self.grad_s(shape.local_batch);
        let sync = self.sync_s(shape);
        if sync <= 0.0 {
            return grad;
        }
        // Scale by the larger term so that x^γ cannot overflow for large γ.
        let top = grad.max(sync);
        let g = self.gamma;
        top * ((grad / top).powf(g) + (sync / top).powf(g)).powf(1.0 / g)
    }

    /// Samples per second at `shape`.
    pub fn throughput(&self, shape: &Shape) -> f64 {
        shape.global_batch() / self.step_s(shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            alpha_c: 0.02,
            beta_c: 0.001,
            alpha_r: 0.01,
            beta_r: 0.002,
            alpha_n: 0.05,
            beta_n: 0.01,
            gamma: 2.0,
        }
    }

    #[test]
    fn theta_round_trip() {
        let p = params();
        let q = Params::from_theta(&p.to_theta());
        for (a, b) in [
            (p.alpha_c, q.alpha_c),
            (p.beta_n, q.beta_n),
            (p.gamma, q.gamma),
        ] {
            assert!((a - b).abs() < 1e-9 * a.abs().max(1.0), "{a} vs {b}");
        }
    }

    #[test]
    fn single_replica_is_pure_compute_and_overlap_bounds_hold() {
        let p = params();
        let one = Shape::new(1, 1, 64.0);
        assert!((p.step_s(&one) - p.grad_s(64.0)).abs() < 1e-12);
        // With γ ≥ 1, the step lies between max(grad, sync) and grad + sync.
        let s = Shape::new(8, 2, 64.0);
        let (g, y, t) = (p.grad_s(64.0), p.sync_s(&s), p.step_s(&s));
        assert!(t >= g.max(y) - 1e-12 && t <= g + y + 1e-12);
        // Crossing nodes uses the (slower here) cross-node terms.
        assert!(p.step_s(&Shape::new(4, 2, 64.0)) > p.step_s(&Shape::new(4, 1, 64.0)));
    }
}
