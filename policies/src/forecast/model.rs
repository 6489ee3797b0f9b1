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
    /// GPUs on the fullest node: ⌈K/N⌉ for an even placement, more for an uneven one such as
    /// a profile's `17`. (Absent in a serialised shape: 0, no node term.)
    #[serde(default)]
    pub busiest: u32,
}

impl Shape {
    /// An even placement: every node holds ⌈K/N⌉ replicas or one fewer.
    pub fn new(gpus: u32, nodes: u32, local_batch: f64) -> Self {
        Self {
            gpus,
            nodes,
            local_batch,
            busiest: gpus.div_ceil(nodes.max(1)),
        }
    }

    /// A placement with `busiest` replicas on its fullest node.
    pub fn placed(gpus: u32, nodes: u32, busiest: u32, local_batch: f64) -> Self {
        Self {
            busiest,
            ..Self::new(gpus, nodes, local_batch)
        }
    }

    /// Samples processed by one step, K·m.
    pub fn global_batch(&self) -> f64 {
        f64::from(self.gpus) * self.local_batch
    }

    /// The even placement of the same replicas, nodes and batch.
    pub fn evened(&self) -> Shape {
        Shape::new(self.gpus, self.nodes, self.local_batch)
    }

    /// Same replicas, nodes and batch, whatever the placement.
    pub fn same_size(&self, other: &Shape) -> bool {
        (self.gpus, self.nodes, self.local_batch) == (other.gpus, other.nodes, other.local_batch)
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

/// Exponent of the smooth maximum of the NIC and fullest-node sync terms. A hard maximum has a
/// kink the fit's quasi-Newton steps stumble on; 4 is within 19 % of it where the two are equal
/// and within 1 % once one is twice the other.
pub const HOP_NORM: f64 = 4.0;

/// Physical parameters, all seconds except `gamma`:
/// T_grad(m) = alpha_c + beta_c·m; inside one node T_sync = alpha_r + beta_r·(K−2), across nodes
/// the smooth maximum of alpha_n + beta_n·(K−2) and the fullest node's own intra-node sync (0 for
/// K = 1); T_iter = (T_grad^γ + T_sync^γ)^(1/γ).
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

    /// Gradient all-reduce time; zero for a single replica. Across nodes the all-reduce also
    /// passes through the fullest node's own links, and a ring moves at the pace of its slowest
    /// hop: the sync is the larger of the NIC term and that node's intra-node sync (a smooth
    /// maximum, [`HOP_NORM`]). On PCIe nodes whose GPUs share the host bridge the node term
    /// wins: on Sia's Azure profiles `18` syncs like `88` and like one node of 8.
    pub fn sync_s(&self, shape: &Shape) -> f64 {
        if shape.gpus <= 1 {
            return 0.0;
        }
        if shape.nodes == 1 {
            return self.intra_sync_s(shape.gpus);
        }
        let nic = self.alpha_n + self.beta_n * f64::from(shape.gpus.saturating_sub(2));
        let node = self.intra_sync_s(shape.busiest);
        let top = nic.max(node);
        top * ((nic / top).powf(HOP_NORM) + (node / top).powf(HOP_NORM)).powf(1.0 / HOP_NORM)
    }

    /// All-reduce among `gpus` replicas on one node; zero for one.
    fn intra_sync_s(&self, gpus: u32) -> f64 {
        if gpus <= 1 {
            return 0.0;
        }
        self.alpha_r + self.beta_r * f64::from(gpus - 2)
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

    /// A PCIe node whose GPUs share the host bridge: a cheap NIC hop, a dear node.
    fn bridge_bound() -> Params {
        Params {
            beta_r: 0.1,
            alpha_n: 0.02,
            beta_n: 0.001,
            ..params()
        }
    }

    #[test]
    fn an_uneven_placement_syncs_like_its_fullest_node() {
        let p = bridge_bound();
        let m = 16.0;
        // `18` pays one node of 8's all-reduce, within the smooth maximum's slack.
        let one_and_seven = p.sync_s(&Shape::placed(8, 2, 7, m));
        let seven = p.sync_s(&Shape::new(7, 1, m));
        assert!(
            one_and_seven >= seven && one_and_seven < 1.01 * seven,
            "{one_and_seven} vs {seven}"
        );
        // Same replicas and nodes, fuller node, slower step.
        assert!(p.step_s(&Shape::placed(8, 2, 7, m)) > 1.3 * p.step_s(&Shape::new(8, 2, m)));
        // An even placement's fullest node is ⌈K/N⌉.
        assert_eq!(Shape::new(9, 2, m).busiest, 5);
        assert_eq!(Shape::placed(8, 2, 7, m).evened(), Shape::new(8, 2, m));
    }

    #[test]
    fn the_cross_node_sync_is_at_least_each_hop() {
        for p in [params(), bridge_bound()] {
            for (gpus, nodes, busiest) in [(2, 2, 1), (8, 2, 4), (8, 2, 7), (32, 4, 8), (40, 5, 8)]
            {
                let s = Shape::placed(gpus, nodes, busiest, 32.0);
                let nic = p.alpha_n + p.beta_n * f64::from(gpus - 2);
                let node = p.sync_s(&Shape::new(busiest, 1, 32.0));
                let sync = p.sync_s(&s);
                assert!(
                    sync >= nic.max(node) - 1e-12,
                    "{s:?}: {sync} < {nic} | {node}"
                );
                assert!(
                    sync <= 1.2 * nic.max(node),
                    "{s:?}: {sync} ≫ {nic} | {node}"
                );
            }
        }
    }
}
