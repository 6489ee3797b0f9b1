//! The HTML cost report in a real browser: `tern demo` writes it, headless Chromium (Debian's
//! package, installed by `scripts/setup --test`) renders it, and the rendered page carries the
//! three charts and the numbers of `tern cost-report --json` for the same store.

use std::path::Path;
use std::process::Command;

use crate::common;
use common::tern_json;

/// The commands here read no token; `tern_json` sets one anyway.
const TOKEN: &str = "unused";

/// Chromium, headless, with the flags a closed network and a root user need.
fn chromium(profile: &Path, args: &[&str], page: &Path) -> std::process::Output {
    let browser = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").output().is_ok())
        .expect("no Chromium on PATH: run scripts/setup --test");
    Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium")
}

#[test]
fn the_html_report_renders_its_charts_with_the_reports_numbers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("demo.db");
    let page = dir.path().join("report.html");
    let summary = tern_json(
        &[
            "demo",
            "--json",
            "--state",
            &state.display().to_string(),
            "--report",
            &page.display().to_string(),
        ],
        TOKEN,
    );
    let report = tern_json(
        &[
            "cost-report",
            "--state",
            &state.display().to_string(),
            "--json",
        ],
        TOKEN,
    );
    let cost = report["total"]["cost"].as_f64().expect("cost");
    assert!(cost > 0.0, "{report}");
    // The demo's bill is the report's.
    assert!((summary["cost_usd"].as_f64().expect("demo cost") - cost).abs() < 1e-6);

    let dom = chromium(&dir.path().join("p1"), &["--dump-dom"], &page);
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    for id in ["chart-daily", "chart-cumulative", "chart-rows"] {
        let at = dom
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("no {id}"));
        let figure = &dom[at..at + dom[at..].find("</figure>").expect("figure end")];
        assert!(figure.contains("<svg"), "{id}: no svg");
        assert!(figure.matches("<rect").count() >= 3, "{id}: empty chart");
        assert!(figure.contains("<text"), "{id}: no labels");
    }
    assert!(
        dom.contains(&format!("id=\"total-cost\">${cost:.2}<")),
        "total ${cost:.2} not on the page"
    );
    // The demo's few virtual hours are drawn per hour; each hour's spend is written above its
    // bar and in the buckets table, as in the JSON of a report to the same end (a report on
    // its own runs to the wall clock's now, days after the demo's virtual hours).
    let until_at = dom.find("up to ").expect("the page's end") + "up to ".len();
    let until = &dom[until_at..until_at + dom[until_at..].find(';').expect("end")];
    let to_end = tern_json(
        &[
            "cost-report",
            "--state",
            &state.display().to_string(),
            "--until",
            until,
            "--json",
        ],
        TOKEN,
    );
    assert_eq!(to_end["bucket"], "hour", "{to_end}");
    let daily_at = dom.find("id=\"chart-daily\"").expect("daily chart");
    let daily = &dom[daily_at..daily_at + dom[daily_at..].find("</figure>").expect("end")];
    assert!(daily.contains("Cost per hour (UTC), by capacity"));
    let buckets = to_end["buckets"].as_array().expect("buckets");
    assert!(buckets.len() > 1, "{report}");
    let table_at = dom.find("id=\"buckets\"").expect("buckets table");
    let table = &dom[table_at..table_at + dom[table_at..].find("</table>").expect("end")];
    let cells: Vec<&str> = table.split("<tr class=\"bucket\">").skip(1).collect();
    assert_eq!(cells.len(), buckets.len());
    let mut sum = 0.0;
    for (b, row) in buckets.iter().zip(cells) {
        let label = b["label"].as_str().expect("label");
        let (spot, od) = (
            b["spot"].as_f64().expect("spot"),
            b["on_demand"].as_f64().expect("od"),
        );
        sum += spot + od;
        let total = spot + od;
        assert!(
            daily.contains(&format!("${total:.2}")),
            "{label} ${total:.2}"
        );
        let want = format!(
            "<td>{label}</td><td class=\"n\">${spot:.2}</td><td class=\"n\">${od:.2}</td>\
             <td class=\"n\">${total:.2}</td>"
        );
        assert!(row.contains(&want), "{row} vs {want}");
    }
    assert!(
        (sum - cost).abs() < 0.005,
        "buckets ${sum} vs total ${cost}"
    );
    // The waterfall: the total's and each job's parts, as the JSON has them, and the steps
    // add up from the plan to the cost.
    let total = &to_end["total"];
    waterfall_matches(&dom, "total", total);
    for row in to_end["rows"].as_array().expect("rows") {
        if !row["attribution"].is_null() {
            waterfall_matches(&dom, row["key"].as_str().expect("key"), row);
        }
    }
    // The decisions section: each job's timeline as `tern explain` has it, with the demo's
    // move and its expected saving.
    let moved = summary["migrations"][0]["job"]
        .as_str()
        .expect("the demo migrates");
    let explained = tern_json(
        &[
            "explain",
            moved,
            "--state",
            &state.display().to_string(),
            "--json",
        ],
        TOKEN,
    );
    let at = dom
        .find(&format!("class=\"decisions\" data-job=\"{moved}\""))
        .expect("the moved job's decisions");
    let section = &dom[at..at + dom[at..].find("</details>").expect("end")];
    let decisions = explained["decisions"].as_array().expect("decisions");
    assert_eq!(
        section.matches("<tr class=\"decision\"").count(),
        decisions.len(),
        "{section}"
    );
    let expected = decisions
        .iter()
        .find(|d| d["kind"] == "move")
        .and_then(|d| d["expected_saving"].as_f64())
        .expect("a move with its expected saving");
    assert!(
        section.contains(&format!("${expected:.2}")),
        "${expected:.2} not in {section}"
    );
    // Each job's cost is written above its own bar.
    let rows_at = dom.find("id=\"chart-rows\"").expect("rows chart");
    for row in report["rows"].as_array().expect("rows") {
        let c = row["cost"].as_f64().expect("cost");
        assert!(
            dom[rows_at..].contains(&format!("${c:.2}")),
            "{} ${c:.2}",
            row["key"]
        );
    }

    let shot = dir.path().join("shot.png");
    let arg = format!("--screenshot={}", shot.display());
    let out = chromium(
        &dir.path().join("p2"),
        &[&arg, "--window-size=1100,1500"],
        &page,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&shot).expect("screenshot");
    assert_eq!(&png[1..4], b"PNG");
    // A blank 1100×1500 page compresses to a few kB; three charts and tables do not.
    assert!(png.len() > 30_000, "screenshot of {} bytes", png.len());
}

/// The waterfall of `key` on the page carries `row`'s plan, parts and cost (to the cent it
/// writes), and its parts sum to cost − plan within a cent.
fn waterfall_matches(dom: &str, key: &str, row: &serde_json::Value) {
    let at = dom
        .find(&format!("class=\"waterfall\" data-row=\"{key}\""))
        .unwrap_or_else(|| panic!("no waterfall for {key}"));
    let svg = &dom[at..at + dom[at..].find("</svg>").expect("svg end")];
    let on_page = |part: &str| -> f64 {
        let tag = format!("data-part=\"{part}\" data-usd=\"");
        let from = svg
            .find(&tag)
            .unwrap_or_else(|| panic!("{key}: no {part} in {svg}"))
            + tag.len();
        svg[from..from + svg[from..].find('"').expect("quote")]
            .parse()
            .expect("dollars")
    };
    let a = &row["attribution"];
    let cost = row["cost"].as_f64().expect("cost");
    let mut sum = 0.0;
    for part in tern::report::Attribution::PARTS {
        let v = a[part]
            .as_f64()
            .unwrap_or_else(|| panic!("{key}: {part} in {row}"));
        sum += v;
        assert!(
            (on_page(part) - v).abs() < 0.006,
            "{key}: {part} {v} vs {svg}"
        );
    }
    let plan = row["planned_cost"].as_f64().unwrap_or(0.0);
    assert!(
        (sum - (cost - plan)).abs() < 0.01,
        "{key}: parts {sum} vs cost − plan {}",
        cost - plan
    );
    assert!(
        (on_page("plan") - plan).abs() < 0.011,
        "{key}: plan {plan} vs {svg}"
    );
    assert!(
        (on_page("actual") - cost).abs() < 0.006,
        "{key}: cost {cost} vs {svg}"
    );
}
