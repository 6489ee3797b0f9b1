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
    // Each day's spend is drawn above its bar, each job's cost above its own, as in the JSON.
    let daily_at = dom.find("id=\"chart-daily\"").expect("daily chart");
    let daily = &dom[daily_at..daily_at + dom[daily_at..].find("</figure>").expect("end")];
    let days = report["days"].as_array().expect("days");
    assert!(!days.is_empty());
    for d in days {
        let total = d["spot"].as_f64().expect("spot") + d["on_demand"].as_f64().expect("od");
        assert!(
            daily.contains(&format!("${total:.2}")),
            "{} ${total:.2}",
            d["day"]
        );
    }
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
