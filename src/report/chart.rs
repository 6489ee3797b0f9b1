//! The cost report's charts as SVG, drawn with plotters: cost per hour, day or week (the
//! report's buckets) stacked by capacity, cumulative spend against budget with the projection
//! to the latest deadline, and actual vs on-demand vs plan per row.

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use chrono::{DateTime, Utc};

use super::CostReport;
use super::buckets::{self, BucketUnit};

const SIZE: (u32, u32) = (760, 380);
const SPOT: RGBColor = RGBColor(46, 134, 193);
const ON_DEMAND: RGBColor = RGBColor(230, 126, 34);
const PLAN: RGBColor = RGBColor(140, 140, 140);
/// Bars past this many rows are left out of the per-row chart (the costliest are kept); also
/// the most x labels any chart has.
const MAX_BARS: usize = 24;
/// About the width of the plotting area, and of a character of a 12-pixel label, in pixels:
/// how many labels fit side by side.
const PLOT_PX: usize = 680;
const CHAR_PX: usize = 7;

#[derive(Debug, thiserror::Error)]
#[error("drawing the {chart} chart: {message}")]
pub struct ChartError {
    chart: &'static str,
    message: String,
}

fn fail<E: std::fmt::Display>(chart: &'static str) -> impl Fn(E) -> ChartError {
    move |e| ChartError {
        chart,
        message: e.to_string(),
    }
}

/// Headroom above the tallest bar for its label and the legend (and a non-empty axis when
/// everything is zero).
fn top(max: f64) -> f64 {
    if max > 0.0 { max * 1.4 } else { 1.0 }
}

/// Cost per bucket (hour, day or week, UTC: the report's `bucket`), spot below on-demand. Each
/// bar's total is written above it when they all fit side by side.
pub fn daily(report: &CostReport) -> Result<String, ChartError> {
    let e = fail("cost per bucket");
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(&e)?;
        let buckets = &report.buckets;
        let max = buckets
            .iter()
            .map(|d| d.spot + d.on_demand)
            .fold(0.0, f64::max);
        let n = buckets.len().max(1);
        let caption = format!("Cost per {} (UTC), by capacity", report.bucket.as_str());
        let axis = TimeAxis::new(report);
        let mut chart =
            frame(&root, &caption, &axis.frame((-0.5, n as f64 - 0.5)), max).map_err(&e)?;
        let bar = |i: usize, lo: f64, hi: f64, c: RGBColor| {
            Rectangle::new([(i as f64 - 0.35, lo), (i as f64 + 0.35, hi)], c.filled())
        };
        chart
            .draw_series(
                buckets
                    .iter()
                    .enumerate()
                    .map(|(i, d)| bar(i, 0.0, d.spot, SPOT)),
            )
            .map_err(&e)?
            .label("spot")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], SPOT.filled()));
        chart
            .draw_series(
                buckets
                    .iter()
                    .enumerate()
                    .map(|(i, d)| bar(i, d.spot, d.spot + d.on_demand, ON_DEMAND)),
            )
            .map_err(&e)?
            .label("on-demand")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], ON_DEMAND.filled()));
        let widest = buckets
            .iter()
            .map(|d| format!("${:.2}", d.spot + d.on_demand).len())
            .max()
            .unwrap_or(0);
        if n * (widest * CHAR_PX + 4) <= PLOT_PX {
            chart
                .draw_series(
                    buckets
                        .iter()
                        .enumerate()
                        .map(|(i, d)| value_label(i as f64, d.spot + d.on_demand)),
                )
                .map_err(&e)?;
        }
        legend(&mut chart)?;
        root.present().map_err(&e)?;
    }
    Ok(svg)
}

/// Cumulative spend over the report's buckets (a point at each bucket's end, the last at the
/// report's end), against the budgets of the teams in it, and the report's projection dashed
/// from the last point to the deadline it runs to.
pub fn cumulative(report: &CostReport) -> Result<String, ChartError> {
    let e = fail("cumulative spend");
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(&e)?;
        let axis = TimeAxis::new(report);
        let end = report
            .projection
            .as_ref()
            .map_or(report.until, |p| p.from)
            .max(report.until);
        let last_x = axis.x(end).min(report.buckets.len() as f64);
        let mut running = 0.0;
        let mut points: Vec<(f64, f64)> = vec![(0.0, 0.0)];
        for (i, b) in report.buckets.iter().enumerate() {
            running += b.spot + b.on_demand;
            points.push((((i + 1) as f64).min(last_x).max(i as f64), running));
        }
        let projection = report
            .projection
            .as_ref()
            .map(|p| [(axis.x(p.from), p.spent), (axis.x(p.until), p.dollars)]);
        let budget: Option<f64> = report
            .budgets
            .iter()
            .filter_map(|b| b.budget_usd)
            .fold(None, |a, b| Some(a.unwrap_or(0.0) + b));
        // Room at the right end for the last value's label.
        let right = projection
            .map_or(0.0, |p| p[1].0)
            .max(points.last().map_or(0.0, |p| p.0))
            .max(1.0)
            * 1.06;
        let max = running
            .max(budget.unwrap_or(0.0))
            .max(projection.map_or(0.0, |p| p[1].1));
        let dot = if points.len() > 2 * MAX_BARS { 2 } else { 4 };
        let caption = "Cumulative spend against budget";
        let mut chart = frame(&root, caption, &axis.frame((0.0, right)), max).map_err(&e)?;
        chart
            .draw_series(LineSeries::new(points.clone(), SPOT.stroke_width(3)))
            .map_err(&e)?
            .label("spent")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], SPOT.stroke_width(3)));
        chart
            .draw_series(
                points
                    .iter()
                    .skip(1)
                    .map(|p| Circle::new(*p, dot, SPOT.filled())),
            )
            .map_err(&e)?;
        if let Some(last) = points.last().filter(|_| points.len() > 1) {
            chart
                .draw_series(std::iter::once(value_label(last.0, last.1)))
                .map_err(&e)?;
        }
        if let Some(b) = budget {
            chart
                .draw_series(LineSeries::new([(0.0, b), (right, b)], RED.stroke_width(2)))
                .map_err(&e)?
                .label(format!("budget ${b:.2}"))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], RED.stroke_width(2)));
        }
        if let Some(p) = projection {
            let style = SPOT.stroke_width(2);
            chart
                .draw_series(DashedLineSeries::new(p, 8, 6, style))
                .map_err(&e)?
                .label("projected to the deadline")
                .legend(move |(x, y)| {
                    plotters::element::DashedPathElement::new(
                        vec![(x, y), (x + 14, y)],
                        4,
                        3,
                        style,
                    )
                });
            chart
                .draw_series(std::iter::once(value_label(p[1].0, p[1].1)))
                .map_err(&e)?;
        }
        legend(&mut chart)?;
        root.present().map_err(&e)?;
    }
    Ok(svg)
}

/// Per row (job, team, …): what it cost, what the same hours cost on demand, and the plan.
pub fn rows(report: &CostReport) -> Result<String, ChartError> {
    let e = fail("per-row cost");
    let mut rows: Vec<_> = report.rows.iter().collect();
    rows.sort_by(|a, b| b.on_demand_cost.total_cmp(&a.on_demand_cost));
    rows.truncate(MAX_BARS);
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(&e)?;
        let max = rows
            .iter()
            .map(|r| {
                r.cost
                    .max(r.on_demand_cost)
                    .max(r.planned_cost.unwrap_or(0.0))
            })
            .fold(0.0, f64::max);
        let caption = format!("Actual vs on-demand vs plan, by {}", report.by.as_str());
        let names: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
        let mut chart = frame(&root, &caption, &names_axis(&names), max).map_err(&e)?;
        let series: [Series; 3] = [
            ("actual", SPOT, -0.3, |r| r.cost),
            ("on-demand", ON_DEMAND, -0.1, |r| r.on_demand_cost),
            ("plan", PLAN, 0.1, |r| r.planned_cost.unwrap_or(0.0)),
        ];
        for (name, color, offset, value) in series {
            chart
                .draw_series(rows.iter().enumerate().map(|(i, r)| {
                    let x = i as f64 + offset;
                    Rectangle::new([(x, 0.0), (x + 0.2, value(r))], color.filled())
                }))
                .map_err(&e)?
                .label(name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
        }
        chart
            .draw_series(
                rows.iter()
                    .enumerate()
                    .map(|(i, r)| value_label(i as f64 - 0.2, r.cost)),
            )
            .map_err(&e)?;
        legend(&mut chart)?;
        root.present().map_err(&e)?;
    }
    Ok(svg)
}

/// An x axis: its range, how many key points to ask plotters for, and the label of each.
struct Axis<'l> {
    range: (f64, f64),
    points: usize,
    label: Box<dyn Fn(&f64) -> String + 'l>,
}

/// A chart over `axis`, dollars up to `max` with headroom, and its mesh drawn (horizontal
/// lines only).
fn frame<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: &str,
    axis: &Axis<'_>,
    max: f64,
) -> Result<Chart<'a, 'b>, DrawingAreaErrorKind<std::io::Error>> {
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(axis.range.0..axis.range.1, 0f64..top(max))?;
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(WHITE)
        .x_labels(axis.points)
        .x_label_formatter(&axis.label)
        .y_desc("dollars")
        .disable_x_mesh();
    mesh.draw()?;
    Ok(chart)
}

/// One x position per name (labelled with it, at most 24 labels).
fn names_axis<'l>(names: &'l [&'l str]) -> Axis<'l> {
    let n = names.len().max(1);
    Axis {
        range: (-0.5, n as f64 - 0.5),
        points: n.min(MAX_BARS),
        label: Box::new(move |x| label_at(*x, names.iter().copied())),
    }
}

/// Time in the report's buckets: x = 0 at the first bucket's start, 1 a bucket later.
struct TimeAxis {
    unit: BucketUnit,
    first: i64,
    /// No buckets: no labels (there is no time to name).
    empty: bool,
}

/// Up to this many positions get a tick each (every `step`-th labelled); past it, plotters
/// spaces at most as many ticks as labels fit, and each is labelled.
const EVERY_TICK: usize = 200;

impl TimeAxis {
    fn new(report: &CostReport) -> TimeAxis {
        let unit = report.bucket;
        let first = report
            .buckets
            .first()
            .map_or(0, |b| buckets::index(unit, b.start));
        TimeAxis {
            unit,
            first,
            empty: report.buckets.is_empty(),
        }
    }

    /// Where `t` is on the axis.
    fn x(&self, t: DateTime<Utc>) -> f64 {
        let from = buckets::start_of(self.unit, self.first);
        (t - from).num_milliseconds() as f64 / buckets::length(self.unit).num_milliseconds() as f64
    }

    /// The axis over `range`: ticks at bucket starts, at most 24 labelled with
    /// [`buckets::tick`] and as many as fit side by side, every `step`-th bucket counted from
    /// 1970-01-05 (so hours fall on 00:00, 06:00, … and weeks of days start on Mondays).
    fn frame(&self, range: (f64, f64)) -> Axis<'static> {
        let (unit, first) = (self.unit, self.first);
        let chars = buckets::tick(unit, buckets::start_of(unit, first)).len();
        let labels = (PLOT_PX / (chars * CHAR_PX + 12)).clamp(1, MAX_BARS);
        let positions = (range.1.floor() - range.0.ceil()).max(0.0) as usize + 1;
        let wanted = positions.div_ceil(labels) as i64;
        let nice: &[i64] = match unit {
            BucketUnit::Hour => &[1, 2, 3, 4, 6, 12, 24, 48, 72, 168],
            BucketUnit::Day => &[1, 2, 7, 14, 28],
            BucketUnit::Week => &[1, 2, 4, 13, 26, 52],
        };
        let step = nice
            .iter()
            .copied()
            .find(|s| *s >= wanted)
            .unwrap_or(wanted);
        let every = positions <= EVERY_TICK;
        let empty = self.empty;
        Axis {
            range,
            points: if every { positions } else { labels },
            label: Box::new(move |x: &f64| {
                let x = *x;
                if empty || (x - x.round()).abs() > 1e-6 {
                    return String::new();
                }
                let i = first + x.round() as i64;
                if every && i.rem_euclid(step) != 0 {
                    return String::new();
                }
                buckets::tick(unit, buckets::start_of(unit, i))
            }),
        }
    }
}

/// The name at integer position `x` (label positions plotters picks between bars stay empty).
fn label_at<'a>(x: f64, mut names: impl Iterator<Item = &'a str>) -> String {
    if (x - x.round()).abs() > 1e-6 || x < -0.01 {
        return String::new();
    }
    names.nth(x.round() as usize).unwrap_or("").to_string()
}

/// "$12.34" above a bar, so the chart's numbers can be read and checked.
fn value_label(x: f64, y: f64) -> Text<'static, (f64, f64), String> {
    Text::new(
        format!("${y:.2}"),
        (x, y),
        ("sans-serif", 12)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Bottom)),
    )
}

/// A bar series: name, colour, offset within the group, value of a row.
type Series = (&'static str, RGBColor, f64, fn(&super::CostRow) -> f64);

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

fn legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>) -> Result<(), ChartError> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(fail("legend"))
}
