//! The agent's log: `tracing` events with fields (the job, the instance, the incarnation,
//! why a stop, how many processes…), one line each on stderr. As text, a line is
//! `tern agent: MESSAGE`, the message only, with escape sequences made visible (it quotes
//! commands and errors); with `--log-json`, one JSON object per line with every field and the
//! spans' fields, for a log pipeline.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Send the agent's events to stderr; a second call keeps the first subscriber.
pub fn init(json: bool) {
    let _ = tracing::subscriber::set_global_default(subscriber(json, std::io::stderr));
}

/// The agent's subscriber, writing lines to what `out` makes.
fn subscriber<W>(json: bool, out: W) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_writer(out)
        .with_max_level(tracing::Level::INFO);
    if json {
        Box::new(
            builder
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .finish(),
        )
    } else {
        Box::new(builder.event_format(Plain).finish())
    }
}

/// `tern agent: MESSAGE`.
struct Plain;

impl<S, N> FormatEvent<S, N> for Plain
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &FmtContext<'_, S, N>,
        mut out: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        writeln!(out, "tern agent: {}", message(event))
    }
}

/// An event's message, made safe for a terminal.
fn message(event: &tracing::Event<'_>) -> String {
    let mut m = Message(String::new());
    event.record(&mut m);
    crate::terminal::safe(&m.0).into_owned()
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logged(json: bool) -> String {
        let lines = Lines::default();
        let sink = lines.clone();
        let subscriber = subscriber(json, move || sink.clone());
        tracing::subscriber::with_default(subscriber, || {
            let agent = tracing::info_span!("agent", job = "bert", instance = "i-0abc");
            let _a = agent.enter();
            let incarnation = tracing::info_span!("incarnation", k = 3);
            let _i = incarnation.enter();
            tracing::info!(why = "drain", grace_s = 30.0, "drain: sending SIGUSR1");
            tracing::warn!(error = "x", "report failed: \u{1b}[31mred");
        });
        String::from_utf8(lines.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn a_line_is_the_message_only_and_escape_sequences_are_shown_not_sent() {
        let text = logged(false);
        let got: Vec<&str> = text.lines().collect();
        assert_eq!(got[0], "tern agent: drain: sending SIGUSR1");
        assert!(got[1].starts_with("tern agent: report failed: "), "{text}");
        assert!(!got[1].contains('\u{1b}'), "{text:?}");
    }

    #[test]
    fn a_json_line_has_the_events_fields_and_the_job_instance_and_incarnation() {
        let text = logged(true);
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(
            first["fields"]["message"], "drain: sending SIGUSR1",
            "{first}"
        );
        assert_eq!(first["fields"]["why"], "drain", "{first}");
        assert_eq!(first["fields"]["grace_s"], 30.0, "{first}");
        assert_eq!(first["span"]["k"], 3, "{first}");
        let spans = first["spans"].as_array().unwrap();
        assert_eq!(spans[0]["job"], "bert", "{first}");
        assert_eq!(spans[0]["instance"], "i-0abc", "{first}");
        assert_eq!(first["level"], "INFO");
        let second: serde_json::Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
        assert_eq!(second["level"], "WARN");
    }
}
