//! Property and behaviour tests of the forecaster as a whole.

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use tern_cloud::Observation;

use super::fit::{FitOptions, fit, objective};
use super::forecaster::{Interconnect, blend, bootstrap, pool, transfer};
use super::model::{Params, Sample, Shape};
use super::speed;
use super::{Basis, ForecastError, Forecaster, GradientNoise, Query};

/// Deterministic noise: a seeded xorshift, mapped to roughly N(0, 1) by summing uniforms.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f64 {
        let mut s = 0.0;
        for _ in 0..12 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            s += (self.0 >> 11) as f64 / (1u64 << 53) as f64;
        }
        s - 6.0
    }
}

fn grid() -> Vec<Shape> {
    let mut v = Vec::new();
    for (gpus, nodes) in [
        (1, 1),
        (2, 1),
        (3, 1),
        (4, 1),
        (2, 2),
        (4, 2),
        (8, 2),
        (8, 4),
        (16, 4),
        (32, 8),
    ] {
        for m in [16.0, 32.0, 64.0, 128.0, 256.0] {
            v.push(Shape::new(gpus, nodes, m));
        }
    }
    v
}

fn samples(p: &Params, noise_sd: f64, seed: u64) -> Vec<Sample> {
    let mut n = Noise(seed | 1);
    grid()
        .into_iter()
        .map(|shape| Sample {
            shape,
            step_s: p.step_s(&shape) * (noise_sd * n.next()).exp(),
        })
        .collect()
}

/// Known parameters as the property draws them: α_n = α_r·`cross`, β_n = α_n / e^`ln_growth`.
fn known(p: [f64; 7]) -> Params {
    let [alpha_c, beta_c, alpha_r, beta_r, cross, ln_growth, gamma] = p;
    let alpha_n = alpha_r * cross;
    Params {
        alpha_c,
        beta_c,
        alpha_r,
        beta_r,
        alpha_n,
        beta_n: alpha_n / ln_growth.exp(),
        gamma,
    }
}

/// Data generated from known parameters with 2 % noise is refitted so that every prediction is
/// within 3σ = 6 % of the truth beyond the fit's bias (below), and the identified compute terms
/// within 15 % (β_c where its slope is visible in the data, see below).
///
/// The bias: the fit is a MAP estimate that weighs its prior as if every row had
/// fit::OBS_NOISE = 10 % noise, five times the 2 % here, so a combination of parameters that
/// only a row or two can see is settled partly by the prior, and the prediction at those rows
/// is pulled toward it even when the data are exact. In this grid:
/// * 32 GPUs on 8 nodes at m = 16 is the only shape with K − 2 = 30 and a batch small enough
///   for the cross-node sync to show through overlap: when overlap hides it at larger batches,
///   that one row is all that sees γ and the growth β_n, against the prior's γ ≈ 1.5 and
///   β_n ≈ α_n / 32 (fit::RING_REF_REPLICAS).
/// * A few GPUs on one node at the smallest batches are the only rows where the intra-node
///   sync α_r shows through overlap, and the 1-GPU rows the only ones that see α_c without it.
///   The prior ties α_r to α_n / 2 (FitOptions::cross_ratio), while the drawn α_n / α_r
///   reaches 20.
///
/// Noisy data cannot pin a prediction closer than the same fit gets from exact data, so the
/// bias is measured shape by shape by refitting the grid with exact step times:
/// up to ≈ 5 % at those shapes, under 1 % at nine shapes in ten, and 0 where the rows pin the
/// prediction, which keep the full 6 % bound. That the bias is the prior's doing and not the
/// optimiser's is checked too: neither fit may score worse on its own objective than the truth.
fn check_refit(truth: &Params, seed: u64) -> Result<(), TestCaseError> {
    let opts = FitOptions::default();
    let (noisy, exact) = (samples(truth, 0.02, seed), samples(truth, 0.0, seed));
    let f = fit(&noisy, &opts, None).expect("fit");
    let e = fit(&exact, &opts, None).expect("fit exact");
    for (data, fitted) in [(&noisy, &f), (&exact, &e)] {
        let at_fit = objective(data, &opts, &fitted.theta).expect("objective");
        let at_truth = objective(data, &opts, &truth.to_theta()).expect("objective");
        prop_assert!(
            at_fit <= at_truth * (1.0 + 1e-6),
            "optimiser stopped above the truth: {at_fit} vs {at_truth}; fitted {:?}",
            fitted.params
        );
    }
    for shape in grid() {
        let want = truth.step_s(&shape);
        let got = f.params.step_s(&shape);
        let bias = (e.params.step_s(&shape) / want - 1.0).abs();
        prop_assert!(
            (got / want - 1.0).abs() < 0.06 + bias,
            "{shape:?}: {got} vs {want} (bias without noise {bias:.4}); fitted {:?}",
            f.params
        );
    }
    let one = Shape::new(1, 1, 64.0);
    prop_assert!((f.params.step_s(&one) / truth.step_s(&one) - 1.0).abs() < 0.15);
    // β_c is only as identifiable as its slope is visible over the batch sizes (16..256)
    // against α_c and 2 % noise: demand 15 % where the slope spans at least α_c, and only
    // the right magnitude where it is a small correction (the predictions above still
    // have to be within their bound everywhere).
    let (alpha_c, beta_c) = (truth.alpha_c, truth.beta_c);
    let visible = beta_c * 240.0 >= alpha_c;
    let tolerance = if visible { 0.15 } else { 0.5 };
    prop_assert!(
        (f.params.beta_c / beta_c - 1.0).abs() < tolerance,
        "beta_c {} vs {beta_c} (visible: {visible})",
        f.params.beta_c
    );
    prop_assert!(f.identified.compute && f.identified.intra_node && f.identified.cross_node);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// See [`check_refit`].
    /// Cross-node growth β_n = α_n / g is drawn with g in [4, 256], the prior's ~95 % range
    /// around 32 (fit::RING_REF_REPLICAS): far outside it, a weakly identified β_n is pulled
    /// toward the prior by design.
    #[test]
    fn refit_recovers_known_parameters(
        alpha_c in 0.005f64..0.2,
        beta_c in 1e-4f64..5e-3,
        alpha_r in 0.001f64..0.1,
        beta_r in 1e-5f64..5e-3,
        cross in 1.0f64..20.0,
        ln_growth in 4f64.ln()..256f64.ln(),
        gamma in 1.0f64..4.0,
        seed in any::<u64>(),
    ) {
        let truth = known([alpha_c, beta_c, alpha_r, beta_r, cross, ln_growth, gamma]);
        check_refit(&truth, seed)?;
    }
}

/// Draws (as proptest shrank them) on which a flat 6 % bound failed: the fit is biased there
/// by its prior, as [`check_refit`] explains, and must stay within 6 % beyond that bias.
#[test]
fn refit_cases_that_a_flat_bound_failed() {
    for (p, seed) in [
        // 32 GPUs on 8 nodes, m = 16, sync hidden by overlap γ = 2.7 (PROPTEST_RNG_SEED=9).
        (
            [
                0.1402933331389945,
                0.002601582252615881,
                0.005049911865977332,
                1e-5,
                11.509320932895795,
                2.7214919102113964,
                2.725693738245542,
            ],
            12078116545322383792,
        ),
        // The same shape at γ = 3.0 (seed 2).
        (
            [
                0.10671829679264948,
                0.004845824589381443,
                0.024884091271774496,
                1e-5,
                1.2028099013831206,
                1.9216972910302514,
                2.9861944067761765,
            ],
            681818177142736806,
        ),
        // 2 GPUs on one node, m = 16, cross-node / intra-node ratio 19 (seed 3).
        (
            [
                0.018495084216212907,
                0.0001,
                0.008029572656718373,
                0.004989996712159867,
                19.26915151143934,
                1.3862943611198906,
                3.294864929581277,
            ],
            762912010615646998,
        ),
        // 1 GPU, m = 16, ratio 20 (seed 10).
        (
            [
                0.01995740554956802,
                0.004235002649101617,
                0.0725416274571351,
                1e-5,
                19.653261514049586,
                1.3862943611198906,
                1.0,
            ],
            1504010730978470142,
        ),
        // 1 GPU, m = 16, ratio 18.5 (no seed).
        (
            [
                0.11938593068232456,
                0.004898315279296933,
                0.023165158466013355,
                1e-5,
                18.5007232540268,
                1.3862943611198906,
                1.0,
            ],
            987640293352751784,
        ),
    ] {
        if let Err(e) = check_refit(&known(p), seed) {
            panic!("{p:?}, seed {seed}: {e}");
        }
    }
}

fn at() -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH
}

fn obs(job: &str, acc: &str, gpus: u32, nodes: u32, m: u32, step: f64) -> Observation {
    Observation {
        job: job.into(),
        accelerator: acc.into(),
        gpus,
        nodes,
        local_batch: m,
        step_seconds: step,
        sync_seconds: None,
        at: at(),
    }
}

fn truth() -> Params {
    Params {
        alpha_c: 0.03,
        beta_c: 0.002,
        alpha_r: 0.01,
        beta_r: 0.001,
        alpha_n: 0.04,
        beta_n: 0.002,
        gamma: 1.5,
    }
}

fn observe_grid(f: &mut Forecaster, job: &str, acc: &str, p: &Params, multi: bool) {
    for shape in grid() {
        if !multi && shape.gpus > 1 {
            continue;
        }
        let o = obs(
            job,
            acc,
            shape.gpus,
            shape.nodes,
            shape.local_batch as u32,
            p.step_s(&shape),
        );
        f.observe(&o).expect("valid");
    }
}

#[test]
fn forecast_runtime_has_an_interval_around_the_truth() {
    let mut f = Forecaster::new();
    observe_grid(&mut f, "j", "T4", &truth(), true);
    let shape = Shape::new(8, 2, 64.0);
    let q = Query {
        job: "j",
        accelerator: "T4",
        shape,
        remaining_samples: 1e7,
        noise: None,
    };
    let (p, fc) = f.forecast(&q).expect("forecast");
    assert_eq!(p.basis, Basis::Fitted);
    let want = 1e7 / truth().throughput(&shape);
    assert!(
        (fc.runtime_s / want - 1.0).abs() < 0.02,
        "{} vs {want}",
        fc.runtime_s
    );
    assert!(fc.low_s < fc.runtime_s && fc.runtime_s < fc.high_s);
    assert!(!fc.prior_only);
    // A larger total batch is statistically less efficient, so the runtime grows.
    let noise = GradientNoise {
        batch: 128.0,
        grad_sqr: 1.0,
        grad_var: 4.0,
    };
    let with = p.forecast(1e7, Some(&noise));
    assert!(with.runtime_s > fc.runtime_s);
}

#[test]
fn repeated_reports_at_one_shape_do_not_grow_the_fit() {
    let mut f = Forecaster::new();
    observe_grid(&mut f, "j", "T4", &truth(), true);
    assert_eq!(f.refit().expect("refit"), 1);
    let n = f.model("j", "T4").expect("model").n_rows;
    for i in 0..50 {
        let o = obs("j", "T4", 4, 2, 64, 0.2 + 1e-4 * f64::from(i));
        f.observe(&o).expect("valid");
    }
    assert_eq!(f.refit().expect("refit"), 1);
    assert_eq!(f.model("j", "T4").expect("model").n_rows, n);
    // Nothing new: nothing refitted.
    assert_eq!(f.refit().expect("refit"), 0);
}

/// Job "j" observed on T4 at every shape and on A100 (3× faster compute) on one GPU only.
fn t4_and_single_gpu_a100() -> Forecaster {
    let mut f = Forecaster::new();
    observe_grid(&mut f, "j", "T4", &truth(), true);
    let fast = Params {
        alpha_c: 0.01,
        beta_c: 0.0007,
        ..truth()
    };
    observe_grid(&mut f, "j", "A100", &fast, false);
    f
}

#[test]
fn unseen_accelerators_borrow_from_observed_ones() {
    let mut f = t4_and_single_gpu_a100();
    f.refit().expect("refit");
    let shape = Shape::new(16, 2, 64.0);
    let boot = f.predict("j", "A100", &shape).expect("bootstrap");
    assert!(matches!(boot.basis, Basis::Bootstrap { ref from } if from == "T4"));
    assert!(boot.step_s < f.predict("j", "T4", &shape).expect("t4").step_s);
    // H100: never observed, so the datasheet prior is used and flagged.
    let prior = f.predict("j", "H100", &shape).expect("prior");
    assert!(matches!(prior.basis, Basis::RelativeSpeed { .. }));
    assert!(prior.forecast(1e6, None).prior_only);
    assert!(prior.step_high_s / prior.step_low_s > boot.step_high_s / boot.step_low_s * 0.9);
    assert!(matches!(
        f.predict("other", "T4", &shape),
        Err(ForecastError::NoObservations { .. })
    ));
    assert!(matches!(
        f.predict("j", "abacus", &shape),
        Err(ForecastError::UnknownAccelerator(_))
    ));
}

#[test]
fn bad_observations_are_rejected() {
    let mut f = Forecaster::new();
    for o in [
        obs("j", "T4", 0, 1, 32, 0.1),
        obs("j", "T4", 2, 3, 32, 0.1),
        obs("j", "T4", 1, 1, 0, 0.1),
        obs("j", "T4", 1, 1, 32, f64::NAN),
        obs("j", "T4", 1, 1, 32, 0.0),
    ] {
        assert!(
            matches!(f.observe(&o), Err(ForecastError::BadObservation { .. })),
            "{o:?}"
        );
    }
    // A placement's fullest node holds at least ⌈K/N⌉ and at most K.
    for busiest in [3, 9] {
        let shape = Shape::placed(8, 2, busiest, 32.0);
        assert!(
            matches!(
                f.observe_at("j", "T4", shape, 0.1),
                Err(ForecastError::BadObservation { .. })
            ),
            "{shape:?}"
        );
    }
    assert!(
        f.observe_at("j", "T4", Shape::placed(8, 2, 7, 32.0), 0.1)
            .is_ok()
    );
}

/// Stragglers do not drag the fit: one row in ten measured 3× too slow (a stalled input
/// pipeline, a noisy neighbour) moves the predictions at the clean rows by well under what a
/// squared loss would (about e^(0.1 · ln 3) − 1 ≈ 12 % on average toward the outliers).
#[test]
fn a_few_stragglers_do_not_drag_the_fit() {
    let truth = known([0.05, 0.002, 0.02, 0.004, 3.0, 3.0, 2.0]);
    let mut rows = samples(&truth, 0.02, 7);
    for (i, r) in rows.iter_mut().enumerate() {
        if i % 10 == 3 {
            r.step_s *= 3.0;
        }
    }
    let f = fit(&rows, &FitOptions::default(), None).expect("fit");
    let clean: Vec<f64> = grid()
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 10 != 3)
        .map(|(_, s)| (f.params.step_s(s) / truth.step_s(s)).ln().abs())
        .collect();
    let mean = clean.iter().sum::<f64>() / clean.len() as f64;
    assert!(mean < 0.04, "mean |log error| at clean rows {mean:.3}");
}

/// Measured 2-replica syncs across DGX nodes are often a little cheaper than inside one (Sia's
/// profiles: 0.7–1.0×), and an H100 node's NIC gains more on an A100 node's than its NVLink
/// does: scaled apart, the sync across H100 nodes would come out well below the one inside.
/// The borrowed model must not tell the planner that leaving a node makes a 2-replica step
/// faster.
#[test]
fn a_borrowed_model_never_makes_leaving_a_node_faster() {
    let mut f = Forecaster::new();
    let dgx = Params {
        alpha_r: 0.03,
        alpha_n: 0.02,
        beta_n: truth().beta_r,
        gamma: 1.2,
        ..truth()
    };
    observe_grid(&mut f, "j", "A100", &dgx, true);
    f.refit().expect("refit");
    for m in [16.0, 64.0, 256.0] {
        let inside = f
            .predict("j", "H100", &Shape::new(2, 1, m))
            .expect("inside");
        let across = f
            .predict("j", "H100", &Shape::new(2, 2, m))
            .expect("across");
        assert!(matches!(across.basis, Basis::RelativeSpeed { .. }));
        assert!(
            across.step_s >= inside.step_s * (1.0 - 1e-9),
            "m = {m}: across {} < inside {}",
            across.step_s,
            inside.step_s
        );
    }
}

/// The two bootstrap estimates agree on the target's measured compute and differ only in the
/// sync on top; toward a slower network the blend averages that sync, so it lies between them
/// and never below the compute, and a source whose sync one estimate inflates moves the step
/// less than a blend of whole steps would.
#[test]
fn the_bootstrap_blend_averages_only_the_sync() {
    let (source, target) = source_and_target();
    // A fast source network and a slow target one: the transfer's sync is far above the ratio's.
    let fast = Interconnect {
        link_gbps: 300.0,
        nic_gbps: 200.0,
    };
    let slow = Interconnect {
        link_gbps: 12.0,
        nic_gbps: 0.625,
    };
    for shape in [
        Shape::new(2, 1, 32.0),
        Shape::new(8, 2, 32.0),
        Shape::new(32, 8, 128.0),
    ] {
        let a = bootstrap(&target, &source, &shape, "s").step_s;
        let b = transfer(&target, &source, &shape, "s", slow, fast).step_s;
        let c = blend(&target, &source, &shape, "s", slow, fast).step_s;
        let grad = target.params.grad_s(shape.local_batch);
        assert!(
            a.min(b) <= c * (1.0 + 1e-9) && c <= a.max(b) * (1.0 + 1e-9),
            "{a} {b} {c}"
        );
        let want = grad + ((a - grad) * (b - grad)).sqrt();
        assert!((c - want).abs() <= 1e-9 * want, "{shape:?}: {c} vs {want}");
        assert!(
            c <= (a * b).sqrt() * (1.0 + 1e-9),
            "{shape:?}: {c} above the step blend"
        );
    }
}

/// A source and a one-GPU target for the blend tests: the target's compute is 3× faster.
fn source_and_target() -> (super::fit::Fit, super::fit::Fit) {
    let source = fit(&samples(&truth(), 0.02, 7), &FitOptions::default(), None).expect("source");
    let one: Vec<Sample> = samples(
        &Params {
            alpha_c: truth().alpha_c / 3.0,
            beta_c: truth().beta_c / 3.0,
            ..truth()
        },
        0.02,
        8,
    )
    .into_iter()
    .filter(|s| s.shape.gpus == 1)
    .collect();
    (
        source,
        fit(&one, &FitOptions::default(), None).expect("target"),
    )
}

/// Where the hop a shape crosses (link on one node, NIC across nodes) is faster on the target,
/// the blend takes the smaller of the two estimates' syncs, but not less than the source's
/// sync shrunk by the whole bandwidth gain; where it is slower, their geometric mean. A target
/// with the faster link and the slower NIC gets one rule per side of the node.
#[test]
fn toward_a_faster_hop_the_blend_takes_the_smaller_sync() {
    let (source, target) = source_and_target();
    let net = |link_gbps, nic_gbps| Interconnect {
        link_gbps,
        nic_gbps,
    };
    let slow = net(12.0, 6.25);
    let fast = net(300.0, 200.0);
    let mixed = net(300.0, 0.625);
    // Twice the bandwidth for three times the compute: Sia's ratio shrinks the sync more than
    // the network can, and the floor holds it.
    let modest = net(24.0, 12.5);
    let mut floored = 0;
    for shape in [
        Shape::new(2, 1, 32.0),
        Shape::new(4, 1, 128.0),
        Shape::new(8, 2, 32.0),
        Shape::new(32, 8, 128.0),
    ] {
        let grad = target.params.grad_s(shape.local_batch);
        let a = bootstrap(&target, &source, &shape, "s").step_s;
        for (to, faster) in [(fast, true), (modest, true), (mixed, shape.nodes == 1)] {
            let b = transfer(&target, &source, &shape, "s", to, slow).step_s;
            let c = blend(&target, &source, &shape, "s", to, slow).step_s;
            let want = if faster {
                // Never below what the source's exposed sync costs if it all scales with
                // bandwidth.
                let gain = if shape.nodes > 1 {
                    to.nic_gbps / slow.nic_gbps
                } else {
                    to.link_gbps / slow.link_gbps
                };
                let even = shape.evened();
                let exposed = source.params.step_s(&even) - source.params.grad_s(even.local_batch);
                let floor = grad + exposed.max(0.0) / gain;
                floored += usize::from(floor > a.min(b));
                a.min(b).max(floor)
            } else {
                grad + ((a - grad) * (b - grad)).sqrt()
            };
            assert!(
                a != b,
                "{shape:?}: the two estimates must differ to tell the rules apart"
            );
            assert!(
                (c - want).abs() <= 1e-9 * want,
                "{shape:?} faster={faster}: {c} vs {want} (ratio {a}, transfer {b})"
            );
        }
    }
    assert!(floored > 0, "the floor never bound");
}

/// A bandwidth-bound all-reduce (a ring moving 2(K−1)/K of the gradient over its slowest hop,
/// not the model's form) measured on a slow node type, bootstrapped onto one whose link and NIC
/// are 12.5× and 2× faster, with 3× faster compute: the blend lands nearer the target's truth
/// than the geometric middle of the two estimates, which keeps half the slow network. Across
/// nodes here Sia's ratio shrinks the sync by the compute speedup, more than the NIC's gain, so
/// the smaller sync alone undershoots: without the bandwidth-bound floor this MAPE is 15 %,
/// above the middle's 10 %.
#[test]
fn a_bandwidth_bound_sync_bootstraps_onto_a_faster_network() {
    let (slow, fast) = (
        Interconnect {
            link_gbps: 12.0,
            nic_gbps: 6.25,
        },
        Interconnect {
            link_gbps: 150.0,
            nic_gbps: 12.5,
        },
    );
    let gradient_gb = 0.4;
    let step = |net: Interconnect, speedup: f64, s: &Shape| {
        let k = f64::from(s.gpus);
        let hop = if s.nodes > 1 {
            net.nic_gbps
        } else {
            net.link_gbps
        };
        (0.05 + 0.002 * s.local_batch) / speedup + 2.0 * (k - 1.0) / k * gradient_gb / hop
    };
    let mut noise = Noise(0xb00);
    let measure = |net, speedup, noise: &mut Noise| -> Vec<Sample> {
        grid()
            .into_iter()
            .map(|shape| Sample {
                shape,
                step_s: step(net, speedup, &shape) * (0.02 * noise.next()).exp(),
            })
            .collect()
    };
    let source = fit(
        &measure(slow, 1.0, &mut noise),
        &FitOptions::default(),
        None,
    )
    .expect("source");
    let one: Vec<Sample> = measure(fast, 3.0, &mut noise)
        .into_iter()
        .filter(|s| s.shape.gpus == 1)
        .collect();
    let target = fit(&one, &FitOptions::default(), None).expect("target");
    let (mut blended, mut middle, mut n) = (0.0, 0.0, 0.0);
    for shape in grid().into_iter().filter(|s| s.gpus > 1) {
        let truth = step(fast, 3.0, &shape);
        let grad = target.params.grad_s(shape.local_batch);
        let a = bootstrap(&target, &source, &shape, "s").step_s;
        let b = transfer(&target, &source, &shape, "s", fast, slow).step_s;
        let geo = grad + ((a - grad).max(0.0) * (b - grad).max(0.0)).sqrt();
        let c = blend(&target, &source, &shape, "s", fast, slow).step_s;
        blended += (c / truth - 1.0).abs();
        middle += (geo / truth - 1.0).abs();
        n += 1.0;
    }
    let (blended, middle) = (blended / n, middle / n);
    assert!(
        blended < 0.95 * middle,
        "blend MAPE {blended:.3} vs geometric middle {middle:.3}"
    );
}

/// With several accelerators observed on more than one GPU, a bootstrap pools them all: the
/// target's compute plus the geometric mean of each donor's blended sync, named after every
/// donor.
#[test]
fn a_bootstrap_pools_every_multi_gpu_donor() {
    let mut f = t4_and_single_gpu_a100();
    let v100 = Params {
        alpha_c: 0.015,
        beta_c: 0.001,
        alpha_r: 0.004,
        alpha_n: 0.02,
        ..truth()
    };
    observe_grid(&mut f, "j", "V100", &v100, true);
    f.refit().expect("refit");
    let target = f.model("j", "A100").expect("A100 fit").clone();
    let (t4, v) = (
        f.model("j", "T4").expect("T4").clone(),
        f.model("j", "V100").expect("V100").clone(),
    );
    let net = |a: &str| {
        let h = speed::lookup(a).expect("known");
        Interconnect {
            link_gbps: h.link_gbps,
            nic_gbps: h.nic_gbps,
        }
    };
    for shape in [Shape::new(4, 1, 32.0), Shape::new(16, 2, 64.0)] {
        let p = f.predict("j", "A100", &shape).expect("bootstrap");
        assert!(matches!(p.basis, Basis::Bootstrap { ref from } if from == "T4+V100"));
        let grad = target.params.grad_s(shape.local_batch);
        let a = blend(&target, &t4, &shape, "T4", net("A100"), net("T4")).step_s;
        let b = blend(&target, &v, &shape, "V100", net("A100"), net("V100")).step_s;
        let want = grad + ((a - grad) * (b - grad)).sqrt();
        assert!(
            (p.step_s - want).abs() <= 1e-9 * want,
            "{shape:?}: {} vs {want}",
            p.step_s
        );
        // One donor's estimate passes through unchanged.
        let one = pool(
            &target,
            &shape,
            vec![blend(&target, &t4, &shape, "T4", net("A100"), net("T4"))],
        );
        assert_eq!(one.map(|p| p.step_s), Some(a));
    }
}

/// Two-node steps on nodes whose GPUs share one host bridge, as on Sia's Azure profiles: the
/// all-reduce costs what the fullest node's GPUs cost, whatever the other node holds. The rows
/// come from that rule with 3 % noise, not from the model, so the fit must find it in its form.
#[test]
fn a_fit_sees_the_fullest_node_of_an_uneven_placement() {
    let mut noise = Noise(0x5eed);
    let mut rows = Vec::new();
    for m in [4.0, 8.0, 16.0, 32.0] {
        let grad = 0.1 + 0.02 * m;
        for k in 1..=8u32 {
            let sync = if k > 1 { 0.1 * f64::from(k - 1) } else { 0.0 };
            rows.push((Shape::new(k, 1, m), grad + sync));
        }
        for a in 1..=8u32 {
            for b in a..=8u32 {
                let sync = 0.01 + 0.1 * f64::from(b - 1);
                rows.push((Shape::placed(a + b, 2, b, m), grad + sync));
            }
        }
    }
    let samples: Vec<Sample> = rows
        .iter()
        .map(|(shape, t)| Sample {
            shape: *shape,
            step_s: t * (0.03 * noise.next()).exp(),
        })
        .collect();
    let f = fit(&samples, &FitOptions::default(), None).expect("fit");
    let mape = rows
        .iter()
        .map(|(s, t)| (f.params.step_s(s) / t - 1.0).abs())
        .sum::<f64>()
        / rows.len() as f64;
    assert!(mape < 0.06, "MAPE {mape}");
    // Same replicas and nodes: `17` is the slower placement, as measured.
    let (uneven, even) = (Shape::placed(8, 2, 7, 8.0), Shape::new(8, 2, 8.0));
    assert!(
        f.params.step_s(&uneven) > 1.3 * f.params.step_s(&even),
        "{} vs {}",
        f.params.step_s(&uneven),
        f.params.step_s(&even)
    );
}
