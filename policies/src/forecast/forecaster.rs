//! Online forecaster state: observations per (job, accelerator), refitted when they change.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tern_cloud::{Forecast, Observation};

use super::ForecastError;
use super::fit::{Fit, FitOptions, Spread, fit};
use super::hint::{self, Hint};
use super::model::{Params, Sample, Shape};
use super::profile::GradientNoise;
use super::speed;

/// Two-sided 90 % normal quantile: intervals are [T·e^(−zσ), T·e^(zσ)] in log space.
pub const Z_90: f64 = 1.645;

/// Extra log-space sd of a Sia-style bootstrap: the single-GPU ratio ignores how the two types'
/// interconnects and node sizes differ (assumed ±35 % at 90 %, the error budget).
pub const BOOTSTRAP_SD: f64 = 0.30 / Z_90;

/// How a prediction was obtained; anything but `Fitted` leans on another accelerator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Basis {
    /// The job's own model on this accelerator.
    Fitted,
    /// Sia's bootstrap: this accelerator's single-GPU speed × `from`'s scaling curve.
    Bootstrap { from: String },
    /// No observation on this accelerator: `from`'s model scaled by datasheet relative speed.
    RelativeSpeed { from: String, ratio: f64 },
    /// No observation of the job anywhere: the spec's [`Hint`] against datasheet figures.
    Hint,
}

/// A step-time prediction with its 90 % interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub shape: Shape,
    pub step_s: f64,
    pub step_low_s: f64,
    pub step_high_s: f64,
    /// sds of ln(step time) below and above `step_s`.
    pub spread: Spread,
    pub basis: Basis,
}

impl Prediction {
    pub(crate) fn new(shape: Shape, step_s: f64, spread: Spread, basis: Basis) -> Self {
        Self {
            shape,
            step_s,
            step_low_s: step_s * (-Z_90 * spread.down).exp(),
            step_high_s: step_s * (Z_90 * spread.up).exp(),
            spread,
            basis,
        }
    }

    /// Samples per second (expected).
    pub fn throughput(&self) -> f64 {
        self.shape.global_batch() / self.step_s
    }

    /// Runtime of `samples` more samples. With `noise`, the samples are counted at the batch
    /// the noise was measured at, and a larger global batch needs 1/E more of them.
    pub fn forecast(&self, samples: f64, noise: Option<&GradientNoise>) -> Forecast {
        let eff = noise
            .map(|n| n.efficiency(self.shape.global_batch()))
            .unwrap_or(1.0)
            .clamp(1e-6, f64::MAX);
        let work = samples / eff;
        let per_sample = |step: f64| step / self.shape.global_batch();
        Forecast {
            throughput_samples_per_s: self.throughput() * eff,
            runtime_s: work * per_sample(self.step_s),
            low_s: work * per_sample(self.step_low_s),
            high_s: work * per_sample(self.step_high_s),
            prior_only: matches!(self.basis, Basis::RelativeSpeed { .. } | Basis::Hint),
        }
    }
}

/// What to forecast.
#[derive(Debug, Clone, PartialEq)]
pub struct Query<'a> {
    pub job: &'a str,
    pub accelerator: &'a str,
    pub shape: Shape,
    pub remaining_samples: f64,
    pub noise: Option<GradientNoise>,
}

/// A change of a shape's mean ln(step time) smaller than this (1 %) does not trigger a refit:
/// per-step jitter should not cost a fit on every tick.
pub const MATERIAL_CHANGE: f64 = 0.01;

/// Running statistics of one shape.
#[derive(Debug, Clone)]
struct ShapeStat {
    shape: Shape,
    /// Running mean of ln(step time).
    mean: f64,
    n: u32,
    /// `mean` when the model was last fitted.
    fitted: Option<f64>,
}

/// Observations of one job on one accelerator, one entry per distinct shape. Repeated reports at
/// a shape (the agent sends one per tick) update a running mean of ln(step time), so the fit's
/// size is the number of shapes tried, not the number of reports; and only a new shape or a
/// material change of a mean marks the series for refit.
#[derive(Debug, Clone, Default)]
struct Series {
    shapes: Vec<ShapeStat>,
    fit: Option<Fit>,
    dirty: bool,
}

impl Series {
    fn add(&mut self, shape: Shape, step_s: f64) {
        let ln = step_s.ln();
        match self.shapes.iter_mut().find(|s| s.shape == shape) {
            Some(s) => {
                s.n = s.n.saturating_add(1);
                s.mean += (ln - s.mean) / f64::from(s.n);
                if s.fitted
                    .is_none_or(|f| (s.mean - f).abs() > MATERIAL_CHANGE)
                {
                    self.dirty = true;
                }
            }
            None => {
                self.shapes.push(ShapeStat {
                    shape,
                    mean: ln,
                    n: 1,
                    fitted: None,
                });
                self.dirty = true;
            }
        }
    }

    fn samples(&self) -> Vec<Sample> {
        self.shapes
            .iter()
            .map(|s| Sample {
                shape: s.shape,
                step_s: s.mean.exp(),
            })
            .collect()
    }

    fn mark_fitted(&mut self, fit: Fit) {
        for s in &mut self.shapes {
            s.fitted = Some(s.mean);
        }
        self.fit = Some(fit);
        self.dirty = false;
    }

    fn multi_gpu(&self) -> bool {
        self.shapes.iter().any(|s| s.shape.gpus > 1)
    }
}

/// Learns per-(job, accelerator) throughput models from observations and forecasts runtimes.
#[derive(Debug, Clone, Default)]
pub struct Forecaster {
    series: BTreeMap<(String, String), Series>,
    /// Override of the interconnect prior (ratio of cross- to intra-node sync) per accelerator.
    cross_ratio: BTreeMap<String, f64>,
    /// Spec hints per job: the last resort of [`Forecaster::predict`].
    hints: BTreeMap<String, Hint>,
}

impl Forecaster {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the cross-node prior ratio for an accelerator (e.g. a node type with a faster NIC).
    pub fn set_cross_ratio(&mut self, accelerator: &str, ratio: f64) {
        self.cross_ratio.insert(accelerator.to_string(), ratio);
    }

    /// Sets a job's spec hint, used only while the job has no fitted observation on any
    /// accelerator: measured data always wins, however few.
    pub fn set_hint(&mut self, job: &str, hint: Hint) {
        self.hints.insert(job.to_string(), hint);
    }

    /// The job's spec hint, if any.
    pub fn hint(&self, job: &str) -> Option<&Hint> {
        self.hints.get(job)
    }

    fn options(&self, accelerator: &str) -> FitOptions {
        FitOptions {
            cross_ratio: self
                .cross_ratio
                .get(accelerator)
                .copied()
                .unwrap_or_else(|| speed::interconnect_ratio(accelerator)),
            ..FitOptions::default()
        }
    }

    /// Records one measured step. Cheap: marks the series for refit.
    pub fn observe(&mut self, o: &Observation) -> Result<(), ForecastError> {
        let shape = Shape::new(o.gpus, o.nodes, f64::from(o.local_batch));
        self.observe_at(&o.job, &o.accelerator, shape, o.step_seconds)
    }

    /// Records one measured step at a shape that may be placed unevenly (a profile row's
    /// `17`); an [`Observation`] only knows even placements.
    pub fn observe_at(
        &mut self,
        job: &str,
        accelerator: &str,
        shape: Shape,
        step_s: f64,
    ) -> Result<(), ForecastError> {
        let bad = |reason: &str| ForecastError::BadObservation {
            job: job.to_string(),
            reason: reason.to_string(),
        };
        if shape.gpus == 0 || shape.nodes == 0 || shape.nodes > shape.gpus {
            return Err(bad("need 1 ≤ nodes ≤ gpus"));
        }
        if shape.busiest < shape.gpus.div_ceil(shape.nodes) || shape.busiest > shape.gpus {
            return Err(bad(
                "the fullest node must hold between ⌈gpus/nodes⌉ and gpus",
            ));
        }
        if !(shape.local_batch.is_finite() && shape.local_batch > 0.0) {
            return Err(bad("local_batch must be > 0"));
        }
        if !(step_s.is_finite() && step_s > 0.0) {
            return Err(bad("step_seconds must be a positive number"));
        }
        self.series
            .entry((job.to_string(), accelerator.to_string()))
            .or_default()
            .add(shape, step_s);
        Ok(())
    }

    /// Refits every series with new observations, warm-started from its previous optimum.
    /// Returns how many were refitted.
    pub fn refit(&mut self) -> Result<usize, ForecastError> {
        let mut n = 0;
        let keys: Vec<(String, String)> = self
            .series
            .iter()
            .filter(|(_, s)| s.dirty)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let opts = self.options(&key.1);
            if let Some(s) = self.series.get_mut(&key) {
                let warm = s.fit.as_ref().map(|f| f.theta);
                let fitted = fit(&s.samples(), &opts, warm.as_ref())?;
                s.mark_fitted(fitted);
                n += 1;
            }
        }
        Ok(n)
    }

    /// The fitted model of a job on an accelerator, if any (after [`Forecaster::refit`]).
    pub fn model(&self, job: &str, accelerator: &str) -> Option<&Fit> {
        self.series
            .get(&(job.to_string(), accelerator.to_string()))
            .and_then(|s| s.fit.as_ref())
    }

    /// The job's best-observed other accelerator: most distinct shapes, multi-GPU preferred.
    fn donor(&self, job: &str, except: &str) -> Option<(&str, &Fit, bool)> {
        self.series
            .iter()
            .filter(|((j, a), s)| j == job && a != except && s.fit.is_some())
            .max_by_key(|(_, s)| (s.multi_gpu(), s.shapes.len()))
            .and_then(|((_, a), s)| s.fit.as_ref().map(|f| (a.as_str(), f, s.multi_gpu())))
    }

    /// Every other accelerator the job has run on with several GPUs, in name order.
    fn multi_gpu_donors(&self, job: &str, except: &str) -> Vec<(&str, &Fit)> {
        self.series
            .iter()
            .filter(|((j, a), s)| j == job && a != except && s.multi_gpu())
            .filter_map(|((_, a), s)| s.fit.as_ref().map(|f| (a.as_str(), f)))
            .collect()
    }

    /// Predicts the step time of `job` on `accelerator` at `shape` from the current fits.
    pub fn predict(
        &self,
        job: &str,
        accelerator: &str,
        shape: &Shape,
    ) -> Result<Prediction, ForecastError> {
        let own = self.series.get(&(job.to_string(), accelerator.to_string()));
        let donor = self.donor(job, accelerator);
        match (own, donor) {
            (Some(s), donor) if s.fit.is_some() => {
                let f = s.fit.as_ref().ok_or(ForecastError::NoData)?;
                match donor {
                    Some((_, _, true)) if shape.gpus > 1 && !s.multi_gpu() => {
                        let each: Vec<Prediction> = self
                            .multi_gpu_donors(job, accelerator)
                            .into_iter()
                            .map(|(from, src)| match (net(accelerator), net(from)) {
                                (Some(t), Some(s)) => blend(f, src, shape, from, t, s),
                                _ => bootstrap(f, src, shape, from),
                            })
                            .collect();
                        pool(f, shape, each).ok_or(ForecastError::NoData)
                    }
                    _ => Ok(Prediction::new(
                        *shape,
                        f.params.step_s(shape),
                        f.log_spread(shape),
                        Basis::Fitted,
                    )),
                }
            }
            (_, Some((from, src, _))) => {
                let (sa, sb) = (
                    speed::relative_speed(accelerator)
                        .ok_or_else(|| ForecastError::UnknownAccelerator(accelerator.into()))?,
                    speed::relative_speed(from)
                        .ok_or_else(|| ForecastError::UnknownAccelerator(from.into()))?,
                );
                let ratio = sa / sb;
                // Compute scales with chip speed; the exposed sync with the usual nodes'
                // interconnects, as in `transfer` (unscaled where one is not in the table).
                let grad = src.params.grad_s(shape.local_batch) / ratio;
                let step = match (net(accelerator), net(from)) {
                    (Some(t), Some(s)) => transferred_step(grad, &src.params, shape, t, s),
                    _ => grad + exposed_sync(&src.params, shape),
                };
                let sd = src
                    .log_spread(shape)
                    .plus(Spread::symmetric(speed::RELATIVE_SPEED_SD));
                Ok(Prediction::new(
                    *shape,
                    step,
                    sd,
                    Basis::RelativeSpeed {
                        from: from.to_string(),
                        ratio,
                    },
                ))
            }
            // Nothing fitted anywhere (observations not yet refitted count as nothing).
            _ => match self.hints.get(job) {
                Some(h) => hint::predict(h, accelerator, shape).ok_or_else(|| {
                    if speed::lookup(accelerator).is_none()
                        && speed::node_type(accelerator).is_none()
                    {
                        ForecastError::UnknownAccelerator(accelerator.into())
                    } else {
                        ForecastError::NoObservations {
                            job: job.to_string(),
                        }
                    }
                }),
                None => Err(ForecastError::NoObservations {
                    job: job.to_string(),
                }),
            },
        }
    }

    /// Refits what changed, then forecasts the runtime of the remaining work.
    pub fn forecast(&mut self, q: &Query<'_>) -> Result<(Prediction, Forecast), ForecastError> {
        self.refit()?;
        let p = self.predict(q.job, q.accelerator, &q.shape)?;
        let f = p.forecast(q.remaining_samples, q.noise.as_ref());
        Ok((p, f))
    }
}

/// The usual cloud node's interconnect for an accelerator, if it is in the hardware table.
fn net(accelerator: &str) -> Option<Interconnect> {
    speed::lookup(accelerator).map(|h| Interconnect {
        link_gbps: h.link_gbps,
        nic_gbps: h.nic_gbps,
    })
}

/// Sia's bootstrap: T_target(shape) = T_source(shape) · T1_target(m) / T1_source(m). The source
/// is read at the even placement of the shape's size: how an uneven placement loads a node is
/// the source's own hardware (which GPUs share a host bridge) and does not carry over (held-out
/// Sia applications 33.0 → 31.3 % MAPE once the model saw placements).
pub fn bootstrap(target: &Fit, source: &Fit, shape: &Shape, from: &str) -> Prediction {
    let one = Shape::new(1, 1, shape.local_batch);
    let ratio = target.params.step_s(&one) / source.params.step_s(&one);
    let step = source.params.step_s(&shape.evened()) * ratio;
    let sd = source
        .log_spread(shape)
        .plus(target.log_spread(&one))
        .plus(source.log_spread(&one))
        .plus(Spread::symmetric(BOOTSTRAP_SD));
    Prediction::new(
        *shape,
        step,
        sd,
        Basis::Bootstrap {
            from: from.to_string(),
        },
    )
}

/// Several donors' bootstrap estimates for one shape, pooled: the target's compute plus the
/// geometric mean of their syncs. Each donor's sync misses by its own hardware quirks (a node
/// whose measured all-reduce fits neither its NVLink nor its InfiniBand figures, a CPU-bound
/// input pipeline), so the misses partly cancel: every other node type pooled, held-out Sia
/// applications reach 24.6 % MAPE where one donor at a time averages 29.4 % (`shared/data`:
/// 15.9 % vs 19.0 %; `scripts/forecast_accuracy.sh`). The spread is not narrowed, since the
/// donors share the target's compute and the model form (narrowing it by √n left held-out
/// coverage at 85 % and one `shared/data` target at 38 %): each side is the donors' mean plus
/// the sd of their log steps (half their gap for two, as in [`blend`]). `None` without
/// estimates.
pub fn pool(target: &Fit, shape: &Shape, estimates: Vec<Prediction>) -> Option<Prediction> {
    if estimates.len() <= 1 {
        return estimates.into_iter().next();
    }
    let grad = target.params.grad_s(shape.local_batch);
    let n = estimates.len() as f64;
    let sync = mean_sync(grad, estimates.iter().map(|e| e.step_s));
    let mean_ln = estimates.iter().map(|e| e.step_s.ln()).sum::<f64>() / n;
    let disagreement = (estimates
        .iter()
        .map(|e| (e.step_s.ln() - mean_ln).powi(2))
        .sum::<f64>()
        / n)
        .sqrt();
    let sd = Spread {
        down: estimates.iter().map(|e| e.spread.down).sum::<f64>() / n,
        up: estimates.iter().map(|e| e.spread.up).sum::<f64>() / n,
    }
    .plus(Spread::symmetric(disagreement));
    let from = estimates
        .iter()
        .filter_map(|e| match &e.basis {
            Basis::Bootstrap { from } => Some(from.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("+");
    Some(Prediction::new(
        *shape,
        grad + sync,
        sd,
        Basis::Bootstrap { from },
    ))
}

/// Geometric mean of what each estimated step adds to the compute `grad`.
fn mean_sync(grad: f64, steps: impl ExactSizeIterator<Item = f64>) -> f64 {
    let n = steps.len() as f64;
    (steps.map(|t| sync_above(grad, t).ln()).sum::<f64>() / n).exp()
}

/// What a step `t` adds to the compute `grad`. Any sync may round to zero (a fully hidden
/// all-reduce); a floor of a millionth of the compute keeps its logarithm defined.
fn sync_above(grad: f64, t: f64) -> f64 {
    (t - grad).max(1e-6 * grad)
}

/// Interconnect of a node type, for transferring sync costs between node types.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interconnect {
    /// Intra-node GPU link bandwidth, GB/s.
    pub link_gbps: f64,
    /// Node NIC bandwidth, GB/s.
    pub nic_gbps: f64,
}

/// Component transfer: the target's own compute (from its single-GPU fit) plus the sync the
/// source left exposed at this shape, scaled by √(bandwidth ratio) of the two node types' links
/// (one node) or NICs (across nodes) — the same "between overhead-bound and bandwidth-bound"
/// middle as the cross-node prior. Unlike Sia's ratio it does not make a faster chip's
/// all-reduce faster too. Only the exposed part travels: a fast node's fit may hide a large
/// all-reduce under compute (large γ, the data cannot tell), and scaling that hidden sync up
/// for a slower network made it all visible (ImageNet aws ← dgx: transfer 344 → 28 %,
/// blend 80 → 10 % MAPE).
pub fn transfer(
    target: &Fit,
    source: &Fit,
    shape: &Shape,
    from: &str,
    target_net: Interconnect,
    source_net: Interconnect,
) -> Prediction {
    let grad = target.params.grad_s(shape.local_batch);
    let step = transferred_step(grad, &source.params, shape, target_net, source_net);
    let one = Shape::new(1, 1, shape.local_batch);
    let sd = source
        .log_spread(shape)
        .plus(target.log_spread(&one))
        .plus(Spread::symmetric(BOOTSTRAP_SD));
    Prediction::new(
        *shape,
        step,
        sd,
        Basis::Bootstrap {
            from: from.to_string(),
        },
    )
}

/// What the source's all-reduce adds to a step at `shape` beyond its compute: the sync it
/// leaves exposed, which is what a measurement sees, whatever the fit's split into sync and
/// overlap.
fn exposed_sync(source: &Params, shape: &Shape) -> f64 {
    (source.step_s(shape) - source.grad_s(shape.local_batch)).max(0.0)
}

/// A step on the target: its compute `grad` plus the source's exposed sync at `shape`, scaled
/// by √(bandwidth ratio) of the links (one node) or NICs (across nodes). Scaled apart, the two
/// can cross; across nodes the sync is kept at least what a 2-replica all-reduce costs inside a
/// target node (leaving a node never makes it cheaper), so that more nodes never look faster.
/// Like [`bootstrap`], it reads the source at the even placement of the shape's size.
fn transferred_step(
    grad: f64,
    source: &Params,
    shape: &Shape,
    target_net: Interconnect,
    source_net: Interconnect,
) -> f64 {
    let intra = (source_net.link_gbps / target_net.link_gbps).sqrt();
    let cross = (source_net.nic_gbps / target_net.nic_gbps).sqrt();
    let sync = if shape.nodes > 1 {
        let pair = Shape::new(2, 1, shape.local_batch);
        (cross * exposed_sync(source, &shape.evened())).max(intra * exposed_sync(source, &pair))
    } else {
        intra * exposed_sync(source, shape)
    };
    grad + sync
}

/// Both bootstrap estimates combined. Both start from the target's measured compute and differ
/// only in the sync on top: scaled with compute speed (Sia's ratio) or with √bandwidth (the
/// transfer). Where the shape's hop (link on one node, NIC across nodes) is faster on the
/// target ([`faster_hop`]), both err high for a bandwidth-bound all-reduce, which a sync slow
/// enough to show on the source usually is: the ratio keeps the source's slower network unless
/// the compute gained more, and √ scaling shrinks the sync less than the bandwidth grows. So
/// the smaller sync is taken, but never below the source's exposed sync divided by the whole
/// bandwidth gain, the most a faster network can save (without that floor, a target whose
/// compute gained more than its network let the ratio undershoot). Otherwise the two err in
/// opposite directions (the ratio keeps the faster network, √ scaling overstates an
/// overhead-bound sync), and the geometric mean of the two syncs is taken, not of the two
/// steps (mixing whole steps also averaged the compute both agree on). One donor at a time on
/// held-out Sia applications: geometric mean everywhere 31.3 % MAPE, this 29.4 %
/// (`shared/data` 22.3 → 19.0 %); `scripts/forecast_accuracy.sh`. Half the two estimates'
/// disagreement is counted as extra uncertainty either way.
pub fn blend(
    target: &Fit,
    source: &Fit,
    shape: &Shape,
    from: &str,
    target_net: Interconnect,
    source_net: Interconnect,
) -> Prediction {
    let a = bootstrap(target, source, shape, from);
    let b = transfer(target, source, shape, from, target_net, source_net);
    let grad = target.params.grad_s(shape.local_batch);
    let sync = if let Some(gain) = faster_hop(shape, target_net, source_net) {
        let bandwidth_bound = exposed_sync(&source.params, &shape.evened()) / gain;
        sync_above(grad, a.step_s.min(b.step_s)).max(bandwidth_bound)
    } else {
        mean_sync(grad, [a.step_s, b.step_s].into_iter())
    };
    let half_gap = (a.step_s.ln() - b.step_s.ln()).abs() / 2.0;
    let sd = Spread {
        down: a.spread.down.max(b.spread.down),
        up: a.spread.up.max(b.spread.up),
    }
    .plus(Spread::symmetric(half_gap));
    Prediction::new(*shape, grad + sync, sd, a.basis)
}

/// How many times faster the hop a shape's all-reduce crosses is on the target than on the
/// source (the intra-node link on one node, the NIC across nodes), if it is faster at all.
fn faster_hop(shape: &Shape, target_net: Interconnect, source_net: Interconnect) -> Option<f64> {
    let gain = if shape.nodes > 1 {
        target_net.nic_gbps / source_net.nic_gbps
    } else {
        target_net.link_gbps / source_net.link_gbps
    };
    (gain > 1.0).then_some(gain)
}
