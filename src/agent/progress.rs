//! The progress file the training keeps up to date, read and checked (see the agent's docs).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The progress file's content.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ProgressFile {
    pub samples: f64,
    #[serde(default)]
    pub checkpoint_samples: f64,
    pub step_seconds: Option<f64>,
    accelerator: Option<String>,
    gpus: Option<u32>,
    nodes: Option<u32>,
    local_batch: Option<u32>,
    /// The incarnation whose workers wrote it (`TERN_INCARNATION`), when they say.
    pub incarnation: Option<u64>,
}

/// The progress file, checked: `Ok(None)` while the training script has not written it yet;
/// an error that names the file, the line and column or the field, and what was expected.
pub fn read_progress(path: &Path) -> Result<Option<ProgressFile>, String> {
    use tern_cloud::input::{Limit, ReadError, read_text_capped};
    let shown = path.display();
    let text = match read_text_capped(path, Limit::SETTINGS) {
        Ok(t) => t,
        Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    let f: ProgressFile = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{shown}:{}:{}: {e}; expected {{\"samples\": N, \"checkpoint_samples\": N, ...}}",
            e.line(),
            e.column()
        )
    })?;
    f.check().map_err(|why| format!("{shown}: {why}"))?;
    Ok(Some(f))
}

impl ProgressFile {
    /// A file with every field: a data-parallel job on two nodes of 8 A100s, incarnation 3.
    pub(super) fn example() -> ProgressFile {
        ProgressFile {
            samples: 38400.0,
            checkpoint_samples: 32000.0,
            step_seconds: Some(0.42),
            accelerator: Some("A100".into()),
            gpus: Some(16),
            nodes: Some(2),
            local_batch: Some(32),
            incarnation: Some(3),
        }
    }

    /// The numbers must be progress, and an observation needs its shape.
    fn check(&self) -> Result<(), String> {
        for (field, v) in [
            ("samples", Some(self.samples)),
            ("checkpoint_samples", Some(self.checkpoint_samples)),
            ("step_seconds", self.step_seconds),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(format!("{field}: expected a finite number >= 0, got {v}"));
            }
        }
        if self.checkpoint_samples > self.samples {
            return Err(format!(
                "checkpoint_samples: expected at most samples = {}, got {}",
                self.samples, self.checkpoint_samples
            ));
        }
        if self.step_seconds.is_some() {
            for (field, present) in [
                ("accelerator", self.accelerator.is_some()),
                ("local_batch", self.local_batch.is_some()),
            ] {
                if !present {
                    return Err(format!(
                        "{field}: required with step_seconds (an observation)"
                    ));
                }
            }
        }
        match self.observation("") {
            Some(o) => o.check(),
            None => Ok(()),
        }
    }

    /// The measured step in the file, when it has one (`step_seconds`, `accelerator` and
    /// `local_batch`; one GPU on one node unless it says otherwise).
    pub fn observation(&self, job: &str) -> Option<tern_cloud::Observation> {
        Some(tern_cloud::Observation {
            job: job.to_string(),
            accelerator: self.accelerator.clone()?,
            gpus: self.gpus.unwrap_or(1),
            nodes: self.nodes.unwrap_or(1),
            local_batch: self.local_batch?,
            step_seconds: self.step_seconds?,
            sync_seconds: None,
            at: chrono::Utc::now(),
        })
    }
}

/// Says what is wrong with the progress file once per distinct problem, not every interval.
#[derive(Debug, Default)]
pub struct Complaints {
    last: Option<String>,
}

impl Complaints {
    pub fn read(&mut self, path: &Path) -> Option<ProgressFile> {
        match read_progress(path) {
            Ok(f) => {
                self.last = None;
                f
            }
            Err(why) => {
                if self.last.as_deref() != Some(why.as_str()) {
                    tracing::warn!(problem = %why, "progress file not reported: {why}");
                    self.last = Some(why);
                }
                None
            }
        }
    }

    /// Print what the controller clamped, once per distinct answer.
    pub fn clamped(&mut self, notes: &[String]) {
        if notes.is_empty() {
            return;
        }
        let said = notes.join("; ");
        if self.last.as_deref() != Some(said.as_str()) {
            tracing::warn!(clamped = %said, "the controller adjusted the report: {said}");
            self.last = Some(said);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_file_is_checked_and_its_faults_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("progress.json");
        assert_eq!(
            read_progress(&path).map(|f| f.is_some()),
            Ok(false),
            "not yet written"
        );
        let cases = [
            (
                "{\"samples\": 10,\n \"checkpoint_samples\": }",
                "progress.json:2:",
            ),
            ("{\"sample\": 10}", "missing field `samples`"),
            (
                "{\"samples\": -5}",
                "samples: expected a finite number >= 0",
            ),
            (
                "{\"samples\": 5, \"checkpoint_samples\": 9}",
                "checkpoint_samples: expected at most samples",
            ),
            (
                "{\"samples\": 5, \"step_seconds\": 0.2, \"local_batch\": 8}",
                "accelerator: required with step_seconds",
            ),
            (
                "{\"samples\": 5, \"step_seconds\": 0.2, \"local_batch\": 8, \
                 \"accelerator\": \"A100\", \"gpus\": 0}",
                "observation.gpus: expected an integer >= 1",
            ),
        ];
        for (text, want) in cases {
            std::fs::write(&path, text).expect("write");
            let err = read_progress(&path).expect_err(text);
            assert!(err.contains(want), "{text}: {err}");
            assert!(err.contains("progress.json"), "{err}");
        }
        std::fs::write(&path, vec![b' '; 2 << 20]).expect("write");
        assert!(
            read_progress(&path)
                .expect_err("big")
                .contains("larger than")
        );
        std::fs::write(
            &path,
            "{\"samples\": 5, \"checkpoint_samples\": 4, \"step_seconds\": 0.2, \
             \"local_batch\": 8, \"accelerator\": \"A100\", \"gpus\": 8, \"nodes\": 2}",
        )
        .expect("write");
        let f = read_progress(&path).expect("valid").expect("present");
        let o = f.observation("j").expect("an observation");
        assert_eq!((o.gpus, o.nodes, o.local_batch), (8, 2, 8));
    }
}
