//! The controller's side of events ([`crate::event`]): [`Controller::emit`] writes each to the
//! store's event log (what `tern demo` prints and `/v1/events` serves), logs it as one
//! structured line and counts it, so no decision is reported in two different ways.

use chrono::{DateTime, Utc};

use super::{Controller, Result};

pub use crate::event::{Event, Placement, ResizeWhy, Tally, WaitReason};

/// A job's current wait: `key` names the kind (a policy's reasons carry costs that move every
/// pass, so they share one key), `reason` is the latest text, `since` when this kind began.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Current {
    pub key: String,
    pub reason: String,
    pub since: chrono::DateTime<chrono::Utc>,
}

impl Controller {
    /// Record a decision: event log (kind, rendered message and typed fields), structured log
    /// line and counts, in one place.
    pub(super) fn emit(&self, at: DateTime<Utc>, event: Event) -> Result<()> {
        let kind = event.kind();
        let job = event.job();
        let message = event.to_string();
        let fields = serde_json::to_string(&event).ok();
        let id = self
            .store
            .add_event(at, job, kind, &message, fields.as_deref())?;
        if event.needs_attention() {
            tracing::warn!(event = id, at = %at, job = job.unwrap_or("-"), kind, "{message}");
        } else {
            tracing::info!(event = id, at = %at, job = job.unwrap_or("-"), kind, "{message}");
        }
        self.tally
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .count(&event);
        Ok(())
    }

    /// The typed events of `job` (or all) stored so far, oldest first: what tests assert and
    /// tools read, rather than the rendered messages.
    pub fn typed_events(&self, job: Option<&str>) -> Result<Vec<Event>> {
        Ok(self
            .store
            .events(0, job)?
            .into_iter()
            .filter_map(|e| crate::event::read(&e.fields?))
            .collect())
    }

    /// Events emitted so far by kind (for `/metrics`).
    pub fn event_counts(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.tally
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_kind
            .clone()
    }
}
