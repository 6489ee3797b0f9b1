//! The spec-hint prior: measured against the real profiles, and its place in the forecaster.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::hint::{self, Hint, UTILISATION};
use super::model::Shape;
use super::profile::parse_profile;
use super::speed;
use super::{Basis, ForecastError, Forecaster, Query};

/// Published training FLOPs per sample (3 × forward, forward = 2 × MACs) and parameter counts:
/// ResNet-18 for 32×32 CIFAR (0.56 GMACs, 11.2 M) and ResNet-50 at 224 (4.1 GMACs, 25.6 M).
const APPS: [(&str, Hint); 2] = [
    (
        "cifar10",
        Hint {
            flops_per_sample: 3.3e9,
            params: Some(11.2e6),
        },
    ),
    (
        "imagenet",
        Hint {
            flops_per_sample: 2.46e10,
            params: Some(25.6e6),
        },
    ),
];

/// The independent point behind [`UTILISATION`]: ResNet-50, batch 128, bf16, 0.0295 s/step on
/// an H200.
const H200_U: f64 = 128.0 * 2.46e10 / (989e12 * 0.0295);

/// `shared/data/profiles` beside the checkout (CI has it; its absence is a failure).
fn profiles() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    [
        "../../shared/data/profiles",
        "../shared/data/profiles",
        "shared/data/profiles",
    ]
    .iter()
    .map(|p| here.join(p))
    .find(|p| p.is_dir())
    .unwrap_or_else(|| panic!("no shared/data/profiles near {}", here.display()))
}

/// One measured row: app, node type, shape, step time.
type Row = (usize, String, Shape, f64);

/// Every row of every placements/scalability file, once: Pollux's T4 files repeat Sia's `aws`
/// rows and Sia's scalability files repeat some placements rows, so duplicates are dropped.
fn rows() -> Vec<Row> {
    let root = profiles();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (app, (name, _)) in APPS.iter().enumerate() {
        let mut files: Vec<(PathBuf, String)> = Vec::new();
        for stem in ["placements", "scalability"] {
            files.push((
                root.join(format!("pollux-t4/{name}/{stem}.csv")),
                "aws".into(),
            ));
        }
        let dir = root.join(format!("sia-multigpu/{name}"));
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for e in entries {
            let path = e.expect("dir entry").path();
            let file = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            if let Some((_, node)) = file.split_once('-') {
                files.push((path.clone(), node.to_string()));
            }
        }
        for (path, node) in files {
            assert!(speed::node_type(&node).is_some(), "unknown node {node}");
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let parsed = parse_profile(&text, &path.display().to_string()).expect("profile");
            for r in parsed {
                let s = r.shape;
                let key = (
                    app,
                    node.clone(),
                    s.gpus,
                    s.nodes,
                    s.busiest,
                    s.local_batch.to_bits(),
                    r.step_s.to_bits(),
                );
                if seen.insert(key) {
                    out.push((app, node.clone(), s, r.step_s));
                }
            }
        }
    }
    out
}

/// Hits, count and summed |predicted/measured − 1| of a group of rows.
#[derive(Default, Clone, Copy)]
struct Tally {
    hit: usize,
    n: usize,
    ape: f64,
}

impl Tally {
    fn add(&mut self, low: f64, mid: f64, high: f64, measured: f64) {
        self.n += 1;
        self.hit += usize::from(low <= measured && measured <= high);
        self.ape += (mid / measured - 1.0).abs();
    }
    fn coverage(&self) -> f64 {
        self.hit as f64 / self.n.max(1) as f64
    }
    fn mape(&self) -> f64 {
        self.ape / self.n.max(1) as f64
    }
}

fn geo_mean(xs: &[f64]) -> f64 {
    (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp()
}

/// The hint's 90 % interval on every profile row: single-GPU, multi-GPU with the parameter
/// count, and multi-GPU without it. Also the implied utilisation of the single-GPU rows and a
/// leave-one-app-out check of the centre (the other app's geometric mean with the H200 point).
#[test]
fn hint_interval_covers_the_measured_profiles() {
    let rows = rows();
    let mut groups: BTreeMap<String, Tally> = BTreeMap::new();
    let mut implied: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for (app, node, shape, step) in &rows {
        let (name, hint) = APPS[*app];
        let classes: &[(&str, Hint)] = if shape.gpus == 1 {
            &[("single", hint)]
        } else {
            &[
                ("multi", hint),
                (
                    "multi-no-params",
                    Hint {
                        params: None,
                        ..hint
                    },
                ),
            ]
        };
        for (class, h) in classes {
            let p = hint::predict(h, node, shape).expect("node type in the table");
            assert_eq!(p.basis, Basis::Hint);
            for key in [class.to_string(), format!("{class} {name} {node}")] {
                groups
                    .entry(key)
                    .or_default()
                    .add(p.step_low_s, p.step_s, p.step_high_s, *step);
            }
        }
        if shape.gpus == 1 {
            let acc = speed::node_type(node).expect("node").accelerator;
            let peak = speed::lookup(acc).expect("chip").tflops * 1e12;
            implied
                .entry(*app)
                .or_default()
                .push(shape.local_batch * hint.flops_per_sample / (peak * step));
        }
    }
    for (k, t) in &groups {
        eprintln!(
            "hint {k:<32} rows {:>5}  MAPE {:>5.1} %  90 % coverage {:>5.1} %",
            t.n,
            100.0 * t.mape(),
            100.0 * t.coverage()
        );
    }
    let mut held_out = Tally::default();
    for (app, us) in &implied {
        let lo = us.iter().copied().fold(f64::MAX, f64::min);
        let hi = us.iter().copied().fold(0.0, f64::max);
        eprintln!(
            "hint implied U {}: geometric mean {:.4}, range {lo:.4}–{hi:.4} ({} rows)",
            APPS[*app].0,
            geo_mean(us),
            us.len()
        );
        // Centre from the other app and the H200 point only; single-GPU steps scale as 1/U.
        let other: Vec<f64> = implied
            .iter()
            .filter(|(a, _)| *a != app)
            .map(|(_, v)| geo_mean(v))
            .chain([H200_U])
            .collect();
        let scale = UTILISATION / geo_mean(&other);
        for (a, node, shape, step) in rows.iter().filter(|r| r.0 == *app && r.2.gpus == 1) {
            let p = hint::predict(&APPS[*a].1, node, shape).expect("predict");
            held_out.add(
                p.step_low_s * scale,
                p.step_s * scale,
                p.step_high_s * scale,
                *step,
            );
        }
    }
    eprintln!(
        "hint leave-one-app-out single-GPU: MAPE {:.1} %, coverage {:.1} % (H200 U {H200_U:.3})",
        100.0 * held_out.mape(),
        100.0 * held_out.coverage()
    );
    for class in ["single", "multi", "multi-no-params"] {
        let t = groups[class];
        assert!(t.n > 0, "no {class} rows");
        assert!(
            t.coverage() >= 0.8,
            "{class}: 90 % interval covers only {:.1} % of {} rows",
            100.0 * t.coverage(),
            t.n
        );
    }
    assert!(
        held_out.coverage() >= 0.8,
        "held-out coverage {:.1} %",
        100.0 * held_out.coverage()
    );
}

fn resnet50() -> Hint {
    APPS[1].1
}

/// A hint stands in only while nothing is fitted for the job: an observation on the
/// accelerator replaces it, and one on another accelerator wins over it too.
#[test]
fn hint_is_used_only_without_observations() {
    let mut f = Forecaster::new();
    let shape = Shape::new(1, 1, 32.0);
    assert!(matches!(
        f.predict("j", "T4", &shape),
        Err(ForecastError::NoObservations { .. })
    ));
    assert!(f.hint("j").is_none());
    f.set_hint("j", resnet50());
    assert_eq!(f.hint("j"), Some(&resnet50()));
    let q = Query {
        job: "j",
        accelerator: "T4",
        shape,
        remaining_samples: 1e6,
        noise: None,
    };
    let (p, fc) = f.forecast(&q).expect("hint forecast");
    assert_eq!(p.basis, Basis::Hint);
    assert!(fc.prior_only);
    assert!(p.step_low_s < p.step_s && p.step_s < p.step_high_s);
    assert!(matches!(
        f.predict("j", "abacus", &shape),
        Err(ForecastError::UnknownAccelerator(_))
    ));
    // Other jobs are not affected.
    assert!(f.predict("k", "T4", &shape).is_err());

    // Observed elsewhere: the relative-speed prior, not the hint.
    f.observe_at("j", "V100", shape, 0.15).expect("observe");
    let (p, _) = f.forecast(&q).expect("forecast");
    assert!(
        matches!(p.basis, Basis::RelativeSpeed { .. }),
        "{:?}",
        p.basis
    );

    // Observed here: fitted.
    f.observe_at("j", "T4", shape, 0.2).expect("observe");
    let (p, fc) = f.forecast(&q).expect("forecast");
    assert_eq!(p.basis, Basis::Fitted);
    assert!(!fc.prior_only);
    assert!((p.step_s / 0.2 - 1.0).abs() < 0.05, "{}", p.step_s);
}

/// More work is slower, a faster chip is faster, a sync term only adds, and an unknown
/// parameter count only widens the upper side.
#[test]
fn hint_is_monotone() {
    let shape = Shape::new(1, 1, 64.0);
    let step = |h: &Hint, acc: &str, s: &Shape| hint::predict(h, acc, s).expect("known").step_s;
    let small = resnet50();
    let big = Hint {
        flops_per_sample: 2.0 * small.flops_per_sample,
        ..small
    };
    for acc in ["T4", "V100", "A100", "H100"] {
        assert!(step(&big, acc, &shape) > step(&small, acc, &shape), "{acc}");
    }
    let chips = ["T4", "V100", "A100", "H100", "B200"];
    for w in chips.windows(2) {
        assert!(
            step(&small, w[1], &shape) < step(&small, w[0], &shape),
            "{w:?}"
        );
    }
    assert!(step(&small, "T4", &Shape::new(1, 1, 128.0)) > step(&small, "T4", &shape));

    let across = Shape::new(8, 2, 64.0);
    let within = Shape::new(4, 1, 64.0);
    let more = Hint {
        params: Some(4.0 * 25.6e6),
        ..small
    };
    let unknown = Hint {
        params: None,
        ..small
    };
    for s in [&across, &within] {
        assert!(step(&small, "T4", s) > step(&small, "T4", &shape));
        assert!(step(&more, "T4", s) > step(&small, "T4", s));
        let (a, b) = (
            hint::predict(&small, "T4", s).expect("known"),
            hint::predict(&unknown, "T4", s).expect("known"),
        );
        assert!(b.spread.up > a.spread.up && b.spread.down == a.spread.down);
    }
    // Leaving the node costs more on T4 nodes (TCP between nodes).
    assert!(step(&small, "T4", &Shape::new(4, 2, 64.0)) > step(&small, "T4", &within));

    let bad = [
        Hint {
            flops_per_sample: 0.0,
            params: None,
        },
        Hint {
            flops_per_sample: f64::NAN,
            params: None,
        },
        Hint {
            flops_per_sample: 1e9,
            params: Some(-1.0),
        },
    ];
    for h in bad {
        assert!(hint::predict(&h, "T4", &shape).is_none(), "{h:?}");
    }
    assert!(hint::predict(&small, "abacus", &shape).is_none());
    // A node type resolves to its chip.
    assert_eq!(step(&small, "dgx", &shape), step(&small, "A100", &shape));
}
