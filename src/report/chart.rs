//! The cost report's charts as SVG, drawn with plotters: cost per day stacked by capacity,
//! cumulative spend against budget, and actual vs on-demand vs plan per row.

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::CostReport;

const SIZE: (u32, u32) = (760, 380);
const SPOT: RGBColor = RGBColor(46, 134, 193);
const ON_DEMAND: RGBColor = RGBColor(230, 126, 34);
const PLAN: RGBColor = RGBColor(140, 140, 140);
/// Bars past this many rows are left out of the per-row chart (the costliest are kept).
const MAX_BARS: usize = 24;

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

/// Cost per day (UTC), spot below on-demand.
pub fn daily(report: &CostReport) -> Result<String, ChartError> {
    let e = fail("cost per day");
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(&e)?;
        let max = report
            .days
            .iter()
            .map(|d| d.spot + d.on_demand)
            .fold(0.0, f64::max);
        let days = &report.days;
        let names: Vec<&str> = days.iter().map(|d| d.day.as_str()).collect();
        let caption = "Cost per day (UTC), by capacity";
        let mut chart = frame(&root, caption, &names, max, false).map_err(&e)?;
        let bar = |i: usize, lo: f64, hi: f64, c: RGBColor| {
            Rectangle::new([(i as f64 - 0.35, lo), (i as f64 + 0.35, hi)], c.filled())
        };
        chart
            .draw_series(
                days.iter()
                    .enumerate()
                    .map(|(i, d)| bar(i, 0.0, d.spot, SPOT)),
            )
            .map_err(&e)?
            .label("spot")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], SPOT.filled()));
        chart
            .draw_series(
                days.iter()
                    .enumerate()
                    .map(|(i, d)| bar(i, d.spot, d.spot + d.on_demand, ON_DEMAND)),
            )
            .map_err(&e)?
            .label("on-demand")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], ON_DEMAND.filled()));
        chart
            .draw_series(
                days.iter()
                    .enumerate()
                    .map(|(i, d)| value_label(i as f64, d.spot + d.on_demand)),
            )
            .map_err(&e)?;
        legend(&mut chart)?;
        root.present().map_err(&e)?;
    }
    Ok(svg)
}

/// Cumulative spend over the report's days, against the budgets of the teams in it.
pub fn cumulative(report: &CostReport) -> Result<String, ChartError> {
    let e = fail("cumulative spend");
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(&e)?;
        let mut running = 0.0;
        let points: Vec<(f64, f64)> = report
            .days
            .iter()
            .enumerate()
            .map(|(i, d)| {
                running += d.spot + d.on_demand;
                (i as f64, running)
            })
            .collect();
        let budget: Option<f64> = report
            .budgets
            .iter()
            .filter_map(|b| b.budget_usd)
            .fold(None, |a, b| Some(a.unwrap_or(0.0) + b));
        let n = points.len().max(1);
        let max = running.max(budget.unwrap_or(0.0));
        let names: Vec<&str> = report.days.iter().map(|d| d.day.as_str()).collect();
        let caption = "Cumulative spend against budget";
        let mut chart = frame(&root, caption, &names, max, true).map_err(&e)?;
        chart
            .draw_series(LineSeries::new(points.clone(), SPOT.stroke_width(3)))
            .map_err(&e)?
            .label("spent")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], SPOT.stroke_width(3)));
        chart
            .draw_series(points.iter().map(|p| Circle::new(*p, 4, SPOT.filled())))
            .map_err(&e)?;
        if let Some(last) = points.last() {
            chart
                .draw_series(std::iter::once(value_label(last.0, last.1)))
                .map_err(&e)?;
        }
        if let Some(b) = budget {
            let line = vec![(-0.5, b), (n as f64 - 0.5, b)];
            chart
                .draw_series(LineSeries::new(line, RED.stroke_width(2)))
                .map_err(&e)?
                .label(format!("budget ${b:.2}"))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], RED.stroke_width(2)));
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
        let mut chart = frame(&root, &caption, &names, max, false).map_err(&e)?;
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

/// A chart with one x position per name (labelled with it, at most 24 labels), dollars up to
/// `max` with headroom, and its mesh drawn.
fn frame<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: &str,
    names: &[&str],
    max: f64,
    x_mesh: bool,
) -> Result<Chart<'a, 'b>, DrawingAreaErrorKind<std::io::Error>> {
    let n = names.len().max(1);
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..top(max))?;
    let label = |x: &f64| label_at(*x, names.iter().copied());
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(WHITE)
        .x_labels(n.min(MAX_BARS))
        .x_label_formatter(&label)
        .y_desc("dollars");
    if !x_mesh {
        mesh.disable_x_mesh();
    }
    mesh.draw()?;
    Ok(chart)
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
