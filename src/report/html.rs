//! The cost report as one self-contained HTML page: a summary, the three charts inline as
//! SVG, and the tables (rows, budgets, the buckets' numbers, segments). No scripts, no
//! external files: it opens anywhere and can be mailed.

use std::fmt::Write as _;

use super::chart::{self, ChartError};
use super::{CostReport, CostRow, GroupBy};
use crate::api::wire::decisions::Timeline;

pub(super) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn dollars(v: f64) -> String {
    format!("${v:.2}")
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), dollars)
}

const STYLE: &str = "body{font-family:sans-serif;margin:24px;color:#222}\
table{border-collapse:collapse;margin:12px 0}td,th{padding:4px 10px;border-bottom:1px solid #ddd}\
td.n,th.n{text-align:right}tr.total td{font-weight:bold;border-top:2px solid #444}\
.summary{display:flex;gap:32px;margin:12px 0}.summary div{font-size:14px}\
.summary b{display:block;font-size:22px}figure{margin:8px 0}";

fn row_html(out: &mut String, r: &CostRow, by: GroupBy, class: &str) {
    let _ = write!(out, "<tr class=\"{class}\"><td>{}</td>", escape(&r.key));
    if by == GroupBy::Job {
        let _ = write!(out, "<td>{}</td>", escape(r.state.as_deref().unwrap_or("")));
    }
    let cells = super::render::number_cells(r, "$");
    for c in cells {
        let _ = write!(out, "<td class=\"n\">{c}</td>");
    }
    out.push_str("</tr>\n");
}

/// The whole page; `decisions` (each job's timeline, `tern explain`) is its last section.
pub fn page(report: &CostReport, decisions: &[Timeline]) -> Result<String, ChartError> {
    let t = &report.total;
    let mut out = String::new();
    let window = match report.since {
        Some(s) => format!("{} – {}", s.to_rfc3339(), report.until.to_rfc3339()),
        None => format!("up to {}", report.until.to_rfc3339()),
    };
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>tern cost report</title><style>{STYLE}</style></head><body>\n\
         <h1>tern cost report</h1><p>{}; by {}; generated {}</p>\n\
         <div class=\"summary\">\
         <div>spent<b id=\"total-cost\">{}</b></div>\
         <div>probes<b id=\"total-probe\">{}</b></div>\
         <div>besides probes<b id=\"total-rest\">{}</b></div>\
         <div>on demand<b id=\"total-on-demand\">{}</b></div>\
         <div>saved<b id=\"total-savings\">{} ({:.0}%)</b></div>\
         <div>spot share<b>{:.0}%</b></div>\
         <div>plan<b>{}</b></div>{}</div>\n",
        escape(&window),
        report.by.as_str(),
        report.generated_at.to_rfc3339(),
        dollars(t.cost),
        dollars(t.probe_usd),
        dollars(t.rest_usd()),
        dollars(t.on_demand_cost),
        dollars(t.savings),
        t.savings_pct,
        100.0 * t.spot_share,
        opt(t.planned_cost),
        report
            .projection
            .as_ref()
            .map_or_else(String::new, |p| format!(
                "<div>projected to {}<b id=\"projection\">{}</b></div>",
                p.until.to_rfc3339(),
                dollars(p.dollars)
            )),
    );
    for (id, svg) in [
        ("chart-daily", chart::daily(report)?),
        ("chart-cumulative", chart::cumulative(report)?),
        ("chart-rows", chart::rows(report)?),
    ] {
        let _ = writeln!(out, "<figure id=\"{id}\">{svg}</figure>");
    }
    out.push_str("<h2>Rows</h2><table><tr>");
    let _ = write!(out, "<th>{}</th>", report.by.as_str());
    if report.by == GroupBy::Job {
        out.push_str("<th>state</th>");
    }
    for h in [
        "instances",
        "inst-h",
        "cost",
        "probe",
        "on demand",
        "saved",
        "saved",
        "spot",
        "plan",
        "vs plan",
    ] {
        let _ = write!(out, "<th class=\"n\">{h}</th>");
    }
    out.push_str("</tr>\n");
    for r in &report.rows {
        row_html(&mut out, r, report.by, "row");
    }
    row_html(&mut out, t, report.by, "total");
    out.push_str("</table>\n");
    attribution_html(&mut out, report);
    budgets_html(&mut out, report);
    buckets_html(&mut out, report);
    segments_html(&mut out, report);
    decisions_html(&mut out, decisions);
    out.push_str("</body></html>\n");
    Ok(out)
}

/// Where the dollars went: the waterfall of the total and of each row (the costliest 24),
/// then the parts as a table (every row).
fn attribution_html(out: &mut String, report: &CostReport) {
    let Some(total) = super::waterfall::svg(&report.total, "Total: plan to actual, by cause")
    else {
        return;
    };
    out.push_str("<h2 id=\"attribution\">Where the dollars went</h2>\n");
    let _ = writeln!(out, "<figure id=\"waterfall-total\">{total}</figure>");
    let mut rows: Vec<&CostRow> = report
        .rows
        .iter()
        .filter(|r| r.attribution.is_some())
        .collect();
    rows.sort_by(|a, b| b.cost.total_cmp(&a.cost));
    for r in rows.iter().take(24) {
        let caption = format!("{}: plan to actual, by cause", r.key);
        if let Some(svg) = super::waterfall::svg(r, &caption) {
            let _ = writeln!(out, "<figure class=\"waterfall-row\">{svg}</figure>");
        }
    }
    let _ = write!(
        out,
        "<table id=\"attribution-table\"><tr><th>{}</th>",
        report.by.as_str()
    );
    for p in super::Attribution::PARTS {
        let _ = write!(out, "<th class=\"n\">{p}</th>");
    }
    out.push_str("<th class=\"n\">vs plan</th></tr>\n");
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    for (r, class) in rows
        .iter()
        .map(|r| (*r, "row"))
        .chain([(&report.total, "total")])
    {
        let Some(a) = r.attribution else { continue };
        let _ = write!(
            out,
            "<tr class=\"{class}\" data-row=\"{}\"><td>{}</td>",
            escape(&r.key),
            escape(&r.key)
        );
        for (name, v) in a.parts() {
            let _ = write!(out, "<td class=\"n\" data-part=\"{name}\">{v:+.2}</td>");
        }
        let _ = writeln!(out, "<td class=\"n\">{:+.2}</td></tr>", a.total());
    }
    out.push_str("</table>\n");
}

fn budgets_html(out: &mut String, report: &CostReport) {
    if report.budgets.is_empty() {
        return;
    }
    out.push_str(
        "<h2>Budgets</h2><table><tr><th>team</th><th class=\"n\">spent</th>\
         <th class=\"n\">budget</th><th class=\"n\">left</th><th class=\"n\">burn $/h</th>\
         <th class=\"n\">at deadline</th></tr>\n",
    );
    for b in &report.budgets {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{:.2}</td><td class=\"n\">{}</td></tr>",
            escape(&b.team),
            dollars(b.spent),
            opt(b.budget_usd),
            opt(b.left),
            b.burn_per_hour,
            opt(b.projected_at_deadline),
        );
    }
    out.push_str("</table>\n");
}

/// The numbers of the cost-per-bucket chart, folded away (a long span has many buckets).
fn buckets_html(out: &mut String, report: &CostReport) {
    if report.buckets.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<details id=\"buckets\"><summary>Cost per {} (UTC)</summary><table><tr>\
         <th>{}</th><th class=\"n\">spot</th><th class=\"n\">on demand</th>\
         <th class=\"n\">cost</th></tr>",
        report.bucket.as_str(),
        report.bucket.as_str(),
    );
    for b in &report.buckets {
        let _ = writeln!(
            out,
            "<tr class=\"bucket\"><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td></tr>",
            escape(&b.label),
            dollars(b.spot),
            dollars(b.on_demand),
            dollars(b.spot + b.on_demand),
        );
    }
    out.push_str("</table></details>\n");
}

fn segments_html(out: &mut String, report: &CostReport) {
    if report.segments.is_empty() {
        return;
    }
    out.push_str(
        "<h2>Segments</h2><table><tr><th>job</th><th>instance</th><th>where</th>\
         <th>capacity</th><th>from</th><th>to</th><th class=\"n\">billed h</th>\
         <th class=\"n\">cost</th></tr>\n",
    );
    for g in &report.segments {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{} {}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"n\">{:.3}</td><td class=\"n\">{}</td></tr>",
            escape(&g.job),
            escape(&g.instance),
            escape(&g.instance_type),
            escape(&g.zone),
            g.capacity,
            g.started_at.to_rfc3339(),
            g.ended_at
                .map_or_else(|| "running".into(), |e| e.to_rfc3339()),
            g.billed_hours,
            dollars(g.cost),
        );
    }
    out.push_str("</table>\n");
}

/// Why each job ran where it ran (`tern explain`): its decisions, folded per job, with a
/// move's expected and realised saving.
fn decisions_html(out: &mut String, timelines: &[Timeline]) {
    if timelines.iter().all(|t| t.decisions.is_empty()) {
        return;
    }
    out.push_str("<h2 id=\"decisions\">Decisions</h2>\n");
    for t in timelines.iter().filter(|t| !t.decisions.is_empty()) {
        let _ = writeln!(
            out,
            "<details class=\"decisions\" data-job=\"{}\"><summary>{} ({} decisions)</summary>\
             <table><tr><th>at (UTC)</th><th>decision</th><th>reason</th>\
             <th class=\"n\">expected saving</th><th class=\"n\">realised saving</th></tr>",
            escape(&t.job),
            escape(&t.job),
            t.decisions.len()
        );
        for d in &t.decisions {
            let _ = writeln!(
                out,
                "<tr class=\"decision\" data-kind=\"{}\"><td>{}</td><td>{}</td><td>{}</td>\
                 <td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                escape(&d.kind),
                d.at.format("%Y-%m-%d %H:%M:%S"),
                escape(&d.kind),
                escape(&d.reason),
                opt(d.expected_saving),
                opt(d.realised_saving),
            );
        }
        out.push_str("</table></details>\n");
    }
}
