//! The attribution as a waterfall: the plan, each part as a step up (over plan, red) or down
//! (under plan, green) from where the last one ended, and the actual cost. Plain SVG with each
//! bar's part and dollars as `data-` attributes, so a browser test reads the page's numbers.

use std::fmt::Write as _;

use super::html::escape;
use super::{Attribution, CostRow};

const W: f64 = 760.0;
const H: f64 = 300.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 40.0;

/// The waterfall of `row` (a job or the total), or `None` without an attribution.
pub fn svg(row: &CostRow, caption: &str) -> Option<String> {
    let a: Attribution = row.attribution?;
    let plan = row.cost - a.total();
    // Bars: (label, start, end, kind).
    let mut bars = vec![("plan", 0.0, plan, "plan")];
    let mut level = plan;
    for (name, v) in a.parts() {
        let kind = if v >= 0.005 {
            "up"
        } else if v <= -0.005 {
            "down"
        } else {
            "flat"
        };
        bars.push((name, level, level + v, kind));
        level += v;
    }
    bars.push(("actual", 0.0, row.cost, "actual"));
    let lo = bars.iter().map(|b| b.1.min(b.2)).fold(0.0, f64::min);
    let hi = bars.iter().map(|b| b.1.max(b.2)).fold(0.0, f64::max);
    let span = if hi > lo { hi - lo } else { 1.0 };
    let y = |v: f64| TOP + (hi - v) / span * (H - TOP - BOTTOM);
    let slot = (W - LEFT - RIGHT) / bars.len() as f64;
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         viewBox=\"0 0 {W} {H}\" class=\"waterfall\" data-row=\"{}\">\
         <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"15\" \
         font-family=\"sans-serif\">{}</text>\
         <line x1=\"{LEFT}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#444\"/>",
        escape(&row.key),
        W / 2.0,
        escape(caption),
        W - RIGHT,
        y(0.0),
        y(0.0),
    );
    for (i, (name, from, to, kind)) in bars.iter().enumerate() {
        let x = LEFT + slot * i as f64 + slot * 0.15;
        let (top, bottom) = (y(from.max(*to)), y(from.min(*to)));
        let color = match *kind {
            "plan" | "actual" => "#8c8c8c",
            "up" => "#c0392b",
            "down" => "#27ae60",
            _ => "#bbbbbb",
        };
        let value = if matches!(*kind, "plan" | "actual") {
            *to
        } else {
            to - from
        };
        let shown = if matches!(*kind, "plan" | "actual") {
            format!("${value:.2}")
        } else {
            format!("{value:+.2}")
        };
        let _ = write!(
            out,
            "<g class=\"bar\" data-part=\"{name}\" data-usd=\"{value:.2}\">\
             <rect x=\"{x:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\" \
             font-family=\"sans-serif\">{shown}</text>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"12\" \
             font-family=\"sans-serif\">{name}</text></g>",
            slot * 0.7,
            (bottom - top).max(1.0),
            x + slot * 0.35,
            top - 4.0,
            x + slot * 0.35,
            H - BOTTOM + 18.0,
        );
    }
    out.push_str("</svg>");
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_step_starts_where_the_last_ended_and_the_bars_carry_the_json_numbers() {
        let row = CostRow {
            key: "bert".into(),
            cost: 12.0,
            attribution: Some(Attribution {
                forecast: 3.0,
                prices: -1.0,
                ..Attribution::default()
            }),
            ..CostRow::default()
        };
        let svg = svg(&row, "bert").expect("svg");
        for (part, usd) in [
            ("plan", "10.00"),
            ("forecast", "3.00"),
            ("prices", "-1.00"),
            ("moves", "0.00"),
            ("actual", "12.00"),
        ] {
            assert!(
                svg.contains(&format!("data-part=\"{part}\" data-usd=\"{usd}\"")),
                "{part}: {svg}"
            );
        }
        assert!(svg.contains("#c0392b") && svg.contains("#27ae60"));
        assert!(super::svg(&CostRow::default(), "x").is_none());
    }
}
