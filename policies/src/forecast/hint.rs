//! A cold-start prior from the job spec: step time from the job's training FLOPs per sample and
//! the accelerator's datasheet figures, for a job with no measured step on any accelerator.
//!
//! The model is deliberately crude (compute at an assumed fraction of peak, plus a ring
//! all-reduce at line rate), so the interval is wide: what it must be honest about is how far
//! real jobs stray from a datasheet. Its numbers were measured on every profile in
//! `shared/data/profiles` (Sia's five node types, ResNet-18/CIFAR-10 and ResNet-50/ImageNet;
//! Pollux's T4 files are the same rows as Sia's `aws`), 133 single-GPU and 7625 multi-GPU rows,
//! with the published training FLOPs (3 × 2 × forward MACs: 3.3e9 and 2.46e10 per sample).
//! Measured: single-GPU MAPE 46 %, 90 % coverage 95 % (per node type 82–100 %; leave one app
//! out 43 %, 92 %); multi-GPU with `params` 42 %, 96 %; without 47 %, 96 %. The spread is
//! that of utilisation across chips and batch sizes, so more data from these two apps would
//! not narrow it. `hint_tests.rs` re-measures it on every run.

use serde::{Deserialize, Serialize};

use super::fit::Spread;
use super::forecaster::{Basis, Prediction};
use super::model::Shape;
use super::speed;

/// What a user can say about a job before it has run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Hint {
    /// Training FLOPs per sample, forward + backward (≈ 3 × forward; ≈ 6 × params × tokens per
    /// sample for a transformer).
    pub flops_per_sample: f64,
    /// Parameter count, for the gradient all-reduce; without it a multi-GPU prior is wider.
    #[serde(default)]
    pub params: Option<f64>,
}

impl Hint {
    /// Positive, finite figures; anything else gives no prior rather than a nonsense one.
    pub fn is_valid(&self) -> bool {
        positive(self.flops_per_sample) && self.params.is_none_or(positive)
    }
}

fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

/// Assumed model-FLOPs utilisation U (achieved / datasheet peak). Implied U = batch·F /
/// (peak·step) on the profiles' single-GPU rows spans 0.009–0.20 (small batches are
/// overhead-bound; likely fp32 against tensor-core peaks); geometric means: ResNet-18 0.058, ResNet-50
/// 0.056 (per GPU type 0.035 A100 … 0.11 RTX 2080 Ti). An independent point, ResNet-50 at
/// batch 128 in bf16 on an H200 (0.0295 s/step), gives 0.108. The centre is the geometric mean
/// of the two apps and that point, so it is not fitted to the profiles alone.
pub const UTILISATION: f64 = 0.070;

/// Log-space sd above the centre (slower than predicted): the 95th percentile of
/// ln(measured / predicted) over the single-GPU rows is 1.67, ÷ z₉₀ ≈ 1.0. Misses this way are
/// input- or overhead-bound steps (A100 CIFAR at batch 32 runs at U ≈ 0.01).
pub const SD_UP: f64 = 1.0;

/// Log-space sd below the centre (faster than predicted). The profiles alone need only 0.46
/// (5th percentile −0.75), but they are all small CNNs: this is the floor that keeps the
/// interval covering a well-tuned large transformer, ln(0.46 / U)/z₉₀ with 0.46 the best
/// published training MFU (PaLM).
pub const SD_DOWN: f64 = 1.14;

/// Extra upward sd (in quadrature) for a multi-GPU shape when `params` is unknown, so no sync
/// term: without it the multi-GPU rows' 95th percentile of ln(measured / predicted) is 1.81,
/// needing an up sd of 1.10 = √(SD_UP² + 0.46²).
pub const NO_SYNC_SD: f64 = 0.5;

/// Bytes per gradient element on the wire (fp32 all-reduce, what DDP sends by default).
const GRAD_BYTES: f64 = 4.0;

/// Prior step time of a job with `hint` on `accelerator` (a chip of [`speed::TABLE`], or a node
/// type of [`speed::NODE_TYPES`], whose own interconnect is then used) at `shape`. `None` for an
/// unknown accelerator or an invalid hint.
pub fn predict(hint: &Hint, accelerator: &str, shape: &Shape) -> Option<Prediction> {
    if !hint.is_valid() || shape.gpus == 0 || !positive(shape.local_batch) {
        return None;
    }
    let (tflops, link, nic) = match speed::lookup(accelerator) {
        Some(h) => (h.tflops, h.link_gbps, h.nic_gbps),
        None => {
            let n = speed::node_type(accelerator)?;
            (
                speed::lookup(n.accelerator)?.tflops,
                n.link_gbps,
                n.nic_gbps,
            )
        }
    };
    let compute = shape.local_batch * hint.flops_per_sample / (tflops * 1e12 * UTILISATION);
    let mut up = SD_UP;
    let sync = match (shape.gpus > 1, hint.params) {
        (false, _) => 0.0,
        (true, Some(p)) => {
            let k = f64::from(shape.gpus);
            // A ring crossing nodes still runs over the node's links; the slower hop sets it.
            let gbps = if shape.nodes > 1 { nic.min(link) } else { link };
            2.0 * (k - 1.0) / k * GRAD_BYTES * p / (gbps * 1e9)
        }
        (true, None) => {
            up = up.hypot(NO_SYNC_SD);
            0.0
        }
    };
    Some(Prediction::new(
        *shape,
        compute + sync,
        Spread { down: SD_DOWN, up },
        Basis::Hint,
    ))
}
