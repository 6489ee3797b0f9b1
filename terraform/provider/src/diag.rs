//! Diagnostics as Terraform shows them: a summary, a detail, and the attribute they are
//! about, so an error points at the line of the configuration that caused it.

use crate::tfplugin6::attribute_path::{Step, step::Selector};
use crate::tfplugin6::{AttributePath, Diagnostic, diagnostic::Severity};

pub type Diags = Vec<Diagnostic>;

/// An error about attribute `attr` (or the whole block when `None`).
pub fn error(
    attr: Option<&str>,
    summary: impl Into<String>,
    detail: impl Into<String>,
) -> Diagnostic {
    Diagnostic {
        severity: Severity::Error as i32,
        summary: summary.into(),
        detail: detail.into(),
        attribute: attr.map(path),
    }
}

/// The path of a top-level attribute.
pub fn path(attr: &str) -> AttributePath {
    AttributePath {
        steps: vec![Step {
            selector: Some(Selector::AttributeName(attr.to_string())),
        }],
    }
}
