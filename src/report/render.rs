//! A cost report as text: an aligned table for people, CSV with stable column names for
//! spreadsheets and scripts.

use comfy_table::{CellAlignment, ContentArrangement, Table, presets};

use super::{Attribution, CostReport, CostRow, GroupBy};

/// CSV columns, in order (README "Cost reports" documents each).
pub const CSV_COLUMNS: [&str; 23] = [
    "row",
    "by",
    "key",
    "state",
    "reason",
    "jobs",
    "instances",
    "instance_hours",
    "spot_hours",
    "cost",
    "probe_usd",
    "on_demand_cost",
    "savings",
    "savings_pct",
    "spot_share",
    "planned_cost",
    "plan_error",
    "attribution_forecast",
    "attribution_prices",
    "attribution_interruptions",
    "attribution_moves",
    "attribution_fallback",
    "attribution_probe",
];

/// Segment CSV columns (`--split`).
pub const SEGMENT_COLUMNS: [&str; 11] = [
    "job",
    "instance",
    "cloud",
    "zone",
    "instance_type",
    "capacity",
    "started_at",
    "ended_at",
    "billed_hours",
    "cost",
    "on_demand_cost",
];

fn table(header: Vec<String>) -> Table {
    let mut t = Table::new();
    t.load_style(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header);
    for i in 1..t.column_count() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

fn dollars(v: f64) -> String {
    format!("{v:.2}")
}

fn opt_dollars(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), dollars)
}

/// The numbers of a row, in table order; money with `currency` before it ("" or "$"). Probe
/// spend sits next to the cost it is part of.
pub(super) fn number_cells(r: &CostRow, currency: &str) -> [String; 10] {
    let money = |v: f64| format!("{currency}{v:.2}");
    [
        r.instances.to_string(),
        format!("{:.1}", r.instance_hours),
        money(r.cost),
        money(r.probe_usd),
        money(r.on_demand_cost),
        money(r.savings),
        format!("{:.0}%", r.savings_pct),
        format!("{:.0}%", 100.0 * r.spot_share),
        r.planned_cost.map_or_else(|| "-".into(), money),
        r.plan_error
            .map_or_else(|| "-".into(), |e| format!("{e:+.2}")),
    ]
}

fn row_cells(r: &CostRow, by: GroupBy) -> Vec<String> {
    let mut cells = vec![r.key.clone()];
    if by == GroupBy::Job {
        cells.push(r.state.clone().unwrap_or_default());
    }
    cells.extend(number_cells(r, ""));
    cells
}

/// The report as aligned tables: rows and a total, then segments (`--split`) and budgets.
pub fn table_text(report: &CostReport) -> String {
    let mut header = vec![report.by.as_str().to_string()];
    if report.by == GroupBy::Job {
        header.push("state".into());
    }
    header.extend(
        [
            "instances",
            "inst-h",
            "cost $",
            "probe $",
            "on-demand $",
            "saved $",
            "saved",
            "spot",
            "plan $",
            "vs plan $",
        ]
        .map(String::from),
    );
    let mut t = table(header);
    if let Some(c) = t.column_mut(1).filter(|_| report.by == GroupBy::Job) {
        c.set_cell_alignment(CellAlignment::Left);
    }
    for r in &report.rows {
        t.add_row(row_cells(r, report.by));
    }
    t.add_row(row_cells(&report.total, report.by));
    let mut out = format!("{t}\n");
    out.push_str(&attribution_text(report));
    out.push_str(&segments_text(report));
    out.push_str(&budgets_text(report));
    out
}

/// Rows with an attribution: `vs plan $` split into its parts (they add up to it).
fn attribution_text(report: &CostReport) -> String {
    let rows: Vec<&CostRow> = report
        .rows
        .iter()
        .chain([&report.total])
        .filter(|r| r.attribution.is_some())
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut header = vec![format!("{} (vs plan, by cause)", report.by.as_str())];
    header.extend(Attribution::PARTS.iter().map(|p| format!("{p} $")));
    header.push("vs plan $".into());
    let mut t = table(header);
    for r in rows {
        let Some(a) = r.attribution else { continue };
        let mut cells = vec![r.key.clone()];
        cells.extend(a.parts().iter().map(|(_, v)| format!("{v:+.2}")));
        cells.push(format!("{:+.2}", a.total()));
        t.add_row(cells);
    }
    format!("\n{t}\n")
}

/// Each usage segment (one instance's billed interval), after the rows; empty without any.
fn segments_text(report: &CostReport) -> String {
    let mut out = String::new();
    if !report.segments.is_empty() {
        let mut s = table(
            [
                "job", "instance", "where", "capacity", "from", "to", "billed h", "cost $",
            ]
            .map(String::from)
            .to_vec(),
        );
        for g in &report.segments {
            s.add_row(vec![
                g.job.clone(),
                g.instance.clone(),
                format!("{} {}", g.instance_type, g.zone),
                g.capacity.clone(),
                g.started_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                g.ended_at.map_or_else(
                    || "running".into(),
                    |e| e.format("%Y-%m-%d %H:%M:%S").to_string(),
                ),
                format!("{:.3}", g.billed_hours),
                dollars(g.cost),
            ]);
        }
        out.push_str(&format!("\n{s}\n"));
    }
    out
}

/// Teams with a budget (every team when grouped by team): spend, budget, what is left, the
/// budget per hour, the burn rate and the projection to the deadline.
fn budgets_text(report: &CostReport) -> String {
    let mut out = String::new();
    let with_budget: Vec<_> = report
        .budgets
        .iter()
        .filter(|b| {
            b.budget_usd.is_some() || b.budget_per_hour_usd.is_some() || report.by == GroupBy::Team
        })
        .collect();
    if !with_budget.is_empty() {
        let mut b = table(
            [
                "team",
                "spent $",
                "budget $",
                "left $",
                "budget $/h",
                "burn $/h",
                "at deadline $",
            ]
            .map(String::from)
            .to_vec(),
        );
        for x in with_budget {
            b.add_row(vec![
                x.team.clone(),
                dollars(x.spent),
                opt_dollars(x.budget_usd),
                opt_dollars(x.left),
                opt_dollars(x.budget_per_hour_usd),
                dollars(x.burn_per_hour),
                opt_dollars(x.projected_at_deadline),
            ]);
        }
        out.push_str(&format!("\n{b}\n"));
    }
    out
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| format!("{v:.6}"))
}

/// A text cell (names, states, reasons): never a formula to a spreadsheet.
fn text(s: &str) -> String {
    crate::terminal::csv_cell(s).into_owned()
}

fn csv_record(kind: &str, by: GroupBy, r: &CostRow) -> Vec<String> {
    let mut cells = vec![
        kind.into(),
        by.as_str().into(),
        text(&r.key),
        text(r.state.as_deref().unwrap_or_default()),
        text(r.reason.as_deref().unwrap_or_default()),
        r.jobs.to_string(),
        r.instances.to_string(),
        format!("{:.6}", r.instance_hours),
        format!("{:.6}", r.spot_hours),
        format!("{:.6}", r.cost),
        format!("{:.6}", r.probe_usd),
        format!("{:.6}", r.on_demand_cost),
        format!("{:.6}", r.savings),
        format!("{:.4}", r.savings_pct),
        format!("{:.6}", r.spot_share),
        opt(r.planned_cost),
        opt(r.plan_error),
    ];
    let parts = r.attribution.map(|a| a.parts());
    for i in 0..Attribution::PARTS.len() {
        cells.push(opt(parts.map(|p| p[i].1)));
    }
    cells
}

/// The rows (`row` = `group`) and the total (`row` = `total`) as CSV; with `--split`, the
/// segments follow as a second CSV after an empty line.
pub fn csv_text(report: &CostReport) -> Result<String, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(CSV_COLUMNS)?;
    for r in &report.rows {
        w.write_record(csv_record("group", report.by, r))?;
    }
    w.write_record(csv_record("total", report.by, &report.total))?;
    let mut out = into_string(w)?;
    if !report.segments.is_empty() {
        let mut s = csv::Writer::from_writer(Vec::new());
        s.write_record(SEGMENT_COLUMNS)?;
        for g in &report.segments {
            s.write_record([
                text(&g.job),
                text(&g.instance),
                text(&g.cloud),
                text(&g.zone),
                text(&g.instance_type),
                text(&g.capacity),
                g.started_at.to_rfc3339(),
                g.ended_at.map(|e| e.to_rfc3339()).unwrap_or_default(),
                format!("{:.6}", g.billed_hours),
                format!("{:.6}", g.cost),
                format!("{:.6}", g.on_demand_cost),
            ])?;
        }
        out.push('\n');
        out.push_str(&into_string(s)?);
    }
    Ok(out)
}

fn into_string(w: csv::Writer<Vec<u8>>) -> Result<String, csv::Error> {
    let bytes = w
        .into_inner()
        .map_err(|e| csv::Error::from(std::io::Error::other(e.to_string())))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
