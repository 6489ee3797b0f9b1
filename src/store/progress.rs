//! How a worker's progress report changes a job's progress: what is refused, what is clamped
//! and why. One rule for the API, the demo's simulated workers and tests.
//!
//! - Numbers that are not finite or are negative are refused.
//! - `done_samples` may exceed the job's total by [`DONE_TOLERANCE`] (the last batch overshoots,
//!   or the total was rounded from steps); it is then taken as the total. Beyond that the report
//!   is refused: it is not this job's progress.
//! - `done_samples` below the last checkpoint is raised to it: the workers restart from that
//!   checkpoint, so the work in it is never lost.
//! - A checkpoint never moves back, and never counts for more than the done work.

use chrono::{DateTime, Utc};

use super::JobRecord;

/// How far (as a fraction of the job's total) a report may overshoot before it is refused.
pub const DONE_TOLERANCE: f64 = 0.01;

/// A job's progress as the store keeps it (absolute values, already checked and clamped).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    pub done_samples: f64,
    pub checkpoint_samples: f64,
    pub checkpoint_at: Option<DateTime<Utc>>,
    /// The report follows the checkpoint a drain asked for: the drain is over.
    pub clear_drain: bool,
}

/// A report taken: the progress to store, and what was clamped (said back to the worker).
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub progress: Progress,
    pub clamped: Vec<String>,
}

impl JobRecord {
    /// The job's progress after a worker's report of `done` samples and a checkpoint holding
    /// `checkpoint`; `checkpointed` says the report follows a checkpoint the controller asked
    /// for. Refused (with the reason) when the numbers cannot be this job's progress.
    pub fn progress_after(
        &self,
        done: f64,
        checkpoint: f64,
        checkpointed: bool,
        now: DateTime<Utc>,
    ) -> Result<Checked, String> {
        let total = self.total_samples;
        for (field, v) in [("done_samples", done), ("checkpoint_samples", checkpoint)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{field}: expected a finite number >= 0, got {v}"));
            }
            if v > total * (1.0 + DONE_TOLERANCE) {
                return Err(format!(
                    "{field}: {v} is more than {:.0} % above the job's {total} samples; \
                     this is not the job's progress",
                    DONE_TOLERANCE * 100.0
                ));
            }
        }
        let mut clamped = Vec::new();
        let mut done = done;
        if done > total {
            clamped.push(format!(
                "done_samples {done} above the job's total: taken as {total}"
            ));
            done = total;
        }
        let last = self.checkpoint_samples;
        if done < last {
            clamped.push(format!(
                "done_samples {done} below the last checkpoint: taken as {last} (the workers \
                 restart from it)"
            ));
            done = last;
        }
        let mut checkpoint = checkpoint;
        if checkpoint > done {
            clamped.push(format!(
                "checkpoint_samples {checkpoint} above done_samples: taken as {done}"
            ));
            checkpoint = done;
        }
        let (checkpoint_samples, checkpoint_at) = if checkpoint > last || checkpointed {
            (checkpoint.max(last), Some(now))
        } else {
            (last, self.checkpoint_at)
        };
        Ok(Checked {
            progress: Progress {
                done_samples: done,
                checkpoint_samples,
                checkpoint_at,
                clear_drain: checkpointed,
            },
            clamped,
        })
    }

    /// All the job's samples are done (it finishes on the next pass, whatever is open).
    pub fn work_done(&self) -> bool {
        self.done_samples >= self.total_samples
    }

    /// Take `p` into this in-memory record.
    pub fn apply_progress(&mut self, p: &Progress) {
        self.done_samples = p.done_samples;
        self.checkpoint_samples = p.checkpoint_samples;
        self.checkpoint_at = p.checkpoint_at;
        if p.clear_drain {
            self.drain_requested = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn job(done: f64, checkpoint: f64) -> JobRecord {
        let spec = tern_cloud::testkit::spec("p")
            .deadline(Some("10h"))
            .local_batch(Some(32))
            .samples(1000)
            .unmeasured()
            .build();
        let t0 = Utc.timestamp_opt(1_800_000_000, 0).single().expect("time");
        let mut r = JobRecord::new(spec, t0);
        r.done_samples = done;
        r.checkpoint_samples = checkpoint;
        r.checkpoint_at = Some(t0);
        r
    }

    fn now() -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_003_600, 0).single().expect("time")
    }

    #[test]
    fn garbage_is_refused_with_the_field() {
        let j = job(100.0, 50.0);
        for (done, ckpt, field) in [
            (f64::NAN, 0.0, "done_samples"),
            (f64::INFINITY, 0.0, "done_samples"),
            (-1.0, 0.0, "done_samples"),
            (10.0, -5.0, "checkpoint_samples"),
            (10.0, f64::NAN, "checkpoint_samples"),
            (1011.0, 0.0, "done_samples"),
            (1e30, 0.0, "done_samples"),
            (1000.0, 2000.0, "checkpoint_samples"),
        ] {
            let err = j.progress_after(done, ckpt, false, now()).expect_err(field);
            assert!(err.starts_with(field), "{done}/{ckpt}: {err}");
        }
    }

    #[test]
    fn what_is_clamped_is_said() {
        let j = job(500.0, 400.0);
        // Within the tolerance above the total: the total.
        let c = j.progress_after(1005.0, 900.0, false, now()).expect("ok");
        assert_eq!(c.progress.done_samples, 1000.0);
        assert_eq!(c.progress.checkpoint_samples, 900.0);
        assert_eq!(c.progress.checkpoint_at, Some(now()));
        assert_eq!(c.clamped.len(), 1, "{:?}", c.clamped);
        // Below the last checkpoint: the checkpoint (work in it is never lost).
        let c = j.progress_after(100.0, 100.0, false, now()).expect("ok");
        assert_eq!(c.progress.done_samples, 400.0);
        assert_eq!(c.progress.checkpoint_samples, 400.0);
        assert_eq!(
            c.progress.checkpoint_at, j.checkpoint_at,
            "no new checkpoint"
        );
        assert!(
            c.clamped[0].contains("below the last checkpoint"),
            "{:?}",
            c.clamped
        );
        // A checkpoint beyond the done work counts as the done work.
        let c = j.progress_after(600.0, 700.0, false, now()).expect("ok");
        assert_eq!(c.progress.checkpoint_samples, 600.0);
        assert!(
            c.clamped[0].contains("checkpoint_samples"),
            "{:?}",
            c.clamped
        );
        // A drain's checkpoint that reports less than the last one keeps the last one.
        let c = j.progress_after(450.0, 300.0, true, now()).expect("ok");
        assert_eq!(c.progress.checkpoint_samples, 400.0);
        assert!(c.progress.clear_drain);
        // An ordinary report clamps nothing; done may fall back to the checkpoint's level
        // (the workers restarted from it).
        let c = j.progress_after(420.0, 400.0, false, now()).expect("ok");
        assert_eq!(c.progress.done_samples, 420.0);
        assert!(c.clamped.is_empty());
    }
}
