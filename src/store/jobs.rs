//! The `jobs` table: a job's record, progress, drain flag and end.

use super::*;

impl Store {
    /// Insert a new job. Fails with [`StoreError::Duplicate`] if the name is taken.
    pub fn insert_job(&self, job: &JobRecord, now: DateTime<Utc>) -> Result<()> {
        let spec = json("job spec", &job.spec)?;
        let n = self.exec(
            "INSERT INTO jobs (name, team, spec, state, reason, submitted_at, deadline_at,
                total_samples, done_samples, checkpoint_samples, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
             ON CONFLICT (name) DO NOTHING",
            params![
                job.name(),
                &job.spec.team,
                spec,
                job.state.as_str(),
                job.reason.clone(),
                ms(job.submitted_at),
                job.deadline_at.map(ms),
                job.total_samples,
                job.done_samples,
                job.checkpoint_samples,
                ms(now),
            ],
        )?;
        if n == 0 {
            return Err(StoreError::Duplicate(job.name().to_string()));
        }
        Ok(())
    }

    /// Write what the reconcile pass decides about a job: state, reason, target, moves. Progress
    /// and the drain flag have statements of their own ([`Store::set_progress`],
    /// [`Store::set_drain`]), since agents write them through the API while a pass runs. A
    /// cancelled job stays cancelled: the cancel is written by the API and no pass that has not
    /// seen it yet may overwrite it.
    pub fn update_job(&self, job: &JobRecord, now: DateTime<Utc>) -> Result<()> {
        let probe = job
            .probe
            .as_ref()
            .map(|p| json("job probe", p))
            .transpose()?;
        let n = self.exec(
            "UPDATE jobs SET state = ?2, reason = ?3, target_offer = ?4, target_count = ?5,
                last_move_at = ?6, finished_at = ?7, updated_at = ?8, planned_count = ?9,
                planned_cost = ?10, probe = ?11
             WHERE name = ?1 AND (state <> 'cancelled' OR ?2 = 'cancelled')",
            params![
                job.name(),
                job.state.as_str(),
                job.reason.clone(),
                job.target_offer.clone(),
                job.target_count,
                job.last_move_at.map(ms),
                job.finished_at.map(ms),
                ms(now),
                job.planned_count,
                job.planned_cost,
                probe,
            ],
        )?;
        self.changed_job(n, job.name())
    }

    /// A statement that changed no row of an existing job is fine (it was cancelled meanwhile);
    /// one for a job that does not exist is a bug or a swapped store.
    pub(super) fn changed_job(&self, rows: u64, name: &str) -> Result<()> {
        if rows == 0 && !self.job_exists(name)? {
            return Err(StoreError::Invalid(format!("no job {name}")));
        }
        Ok(())
    }

    pub(super) fn job_exists(&self, name: &str) -> Result<bool> {
        Ok(!self
            .query("SELECT 1 FROM jobs WHERE name = ?1", params![name])?
            .is_empty())
    }

    /// Progress as the workers report it; `clear_drain` when the report follows the
    /// checkpoint a drain asked for.
    pub fn set_progress(&self, name: &str, p: &Progress, now: DateTime<Utc>) -> Result<()> {
        let n = self.exec(
            "UPDATE jobs SET done_samples = ?2, checkpoint_samples = ?3, checkpoint_at = ?4,
                drain_requested = CASE WHEN ?5 <> 0 THEN 0 ELSE drain_requested END, updated_at = ?6
             WHERE name = ?1",
            params![
                name,
                p.done_samples,
                p.checkpoint_samples,
                p.checkpoint_at.map(ms),
                p.clear_drain,
                ms(now),
            ],
        )?;
        self.changed_job(n, name)
    }

    /// Ask the job's workers to checkpoint now (a notice or a migration).
    pub fn set_drain(&self, name: &str, drain: bool, now: DateTime<Utc>) -> Result<()> {
        let n = self.exec(
            "UPDATE jobs SET drain_requested = ?2, updated_at = ?3 WHERE name = ?1",
            params![name, drain, ms(now)],
        )?;
        self.changed_job(n, name)
    }

    /// Cancel a job that has not ended. Returns false when it had already ended.
    pub fn cancel_job(&self, name: &str, reason: &str, now: DateTime<Utc>) -> Result<bool> {
        self.end_job(name, JobState::Cancelled, reason, now)
    }

    /// End a job that has not ended, as `state` (cancelled or failed) with `reason`. Returns
    /// false when it had already ended.
    pub fn end_job(
        &self,
        name: &str,
        state: JobState,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let n = self.exec(
            "UPDATE jobs SET state = ?4, reason = ?2, finished_at = ?3, updated_at = ?3
             WHERE name = ?1 AND state NOT IN ('finished', 'cancelled', 'failed', 'over-budget')",
            params![name, reason, ms(now), state.as_str()],
        )?;
        self.changed_job(n, name)?;
        Ok(n > 0)
    }

    pub fn job(&self, name: &str) -> Result<Option<JobRecord>> {
        self.query(&format!("{JOB_SELECT} WHERE name = ?1"), params![name])?
            .first()
            .map(job_from_row)
            .transpose()
    }
}

pub(super) const JOB_SELECT: &str =
    "SELECT spec, state, reason, submitted_at, deadline_at, total_samples,
    done_samples, checkpoint_samples, checkpoint_at, drain_requested, target_offer, target_count,
    last_move_at, finished_at, planned_count, planned_cost, probe FROM jobs";

pub(super) fn job_from_row(r: &Row) -> Result<JobRecord> {
    Ok(JobRecord {
        spec: parse("job spec", &r.text(0)?)?,
        state: JobState::parse(&r.text(1)?)?,
        reason: r.opt_text(2)?,
        submitted_at: time(r.int(3)?),
        deadline_at: r.opt_int(4)?.map(time),
        total_samples: r.real(5)?,
        done_samples: r.real(6)?,
        checkpoint_samples: r.real(7)?,
        checkpoint_at: r.opt_int(8)?.map(time),
        drain_requested: r.flag(9)?,
        target_offer: r.opt_text(10)?,
        target_count: r.u32(11)?,
        last_move_at: r.opt_int(12)?.map(time),
        finished_at: r.opt_int(13)?.map(time),
        planned_count: r.u32(14)?,
        planned_cost: r.opt_real(15)?,
        probe: r
            .opt_text(16)?
            .map(|t| parse("job probe", &t))
            .transpose()?,
    })
}
