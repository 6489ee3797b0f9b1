//! Shared output conventions: aligned tables for people, one JSON object per line for scripts.

use comfy_table::{ContentArrangement, Table, presets};

/// A borderless, aligned table that wraps to the terminal width when there is one.
pub fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    t
}

/// Print a JSON value as a single line: scripts read the last line of stdout.
pub fn print_json_line<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}

/// `$1.234` with as many decimals as catalog prices carry, or `-` when absent.
pub fn money(v: Option<f64>) -> String {
    match v {
        Some(v) if v >= 100.0 => format!("{v:.2}"),
        Some(v) => format!("{v:.4}"),
        None => "-".into(),
    }
}
