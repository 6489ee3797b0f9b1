//! Incarnations of a job's training workers, as `tern agent` starts and stops them: the
//! fencing record (the controller's `fencing` module decides on it; this file only keeps it).

use chrono::{DateTime, Utc};

use super::sql::{Row, params};
use super::{Result, Store, ms, time};

/// How a node's workers ended by themselves (the `ended` column): a failure exit status, or
/// no progress for the agent's hang timeout. Workers stopped as asked have none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Crashed,
    Hung,
}

impl Ended {
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::Crashed => "crashed",
            Ended::Hung => "hung",
        }
    }
}

/// One instance's workers in one incarnation.
#[derive(Debug, Clone, PartialEq)]
pub struct Worker {
    pub instance: String,
    /// Still running as far as the controller knows (no `stopped` report yet).
    pub running: bool,
    pub started_at: DateTime<Utc>,
    pub stopped_at: Option<DateTime<Utc>>,
    /// How they ended when they failed for good.
    pub failure: Option<String>,
    /// The node's address, as its agent gave it when they started.
    pub address: Option<String>,
    /// Its rank in the incarnation: how many nodes had started in it before it first did.
    pub rank: u32,
}

/// A job's current incarnation: its number (0 before any start) and its workers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Incarnation {
    pub number: u64,
    pub workers: Vec<Worker>,
}

impl Incarnation {
    pub fn worker(&self, instance: &str) -> Option<&Worker> {
        self.workers.iter().find(|w| w.instance == instance)
    }
}

fn worker_from_row(r: &Row) -> Result<Worker> {
    Ok(Worker {
        instance: r.text(0)?,
        running: r.flag(1)?,
        started_at: time(r.int(2)?),
        stopped_at: r.opt_int(3)?.map(time),
        failure: r.opt_text(4)?,
        address: r.opt_text(6)?,
        rank: r
            .opt_int(7)?
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
    })
}

impl Store {
    /// The job's current (highest) incarnation and its workers.
    pub fn incarnation(&self, job: &str) -> Result<Incarnation> {
        let rows = self.query(
            "SELECT instance, running, started_at, stopped_at, failure, incarnation, address,
                 node_rank
             FROM workers
             WHERE job = ?1 AND incarnation = (SELECT MAX(incarnation) FROM workers WHERE job = ?1)
             ORDER BY instance",
            params![job],
        )?;
        let number = match rows.first() {
            Some(r) => u64::try_from(r.int(5)?).unwrap_or(0),
            None => 0,
        };
        Ok(Incarnation {
            number,
            workers: rows.iter().map(worker_from_row).collect::<Result<_>>()?,
        })
    }

    /// `instance`'s workers start in `incarnation` (joining it or opening it), at `address`
    /// when the agent gave one; a row left from an earlier start in the same incarnation is
    /// reset to running.
    pub fn start_workers(
        &self,
        job: &str,
        incarnation: u64,
        instance: &str,
        address: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let n = i64::try_from(incarnation).unwrap_or(i64::MAX);
        self.exec(
            "INSERT INTO workers (job, incarnation, instance, running, started_at, address,
                 node_rank)
             VALUES (?1, ?2, ?3, 1, ?4, ?5,
                 (SELECT COUNT(*) FROM workers WHERE job = ?1 AND incarnation = ?2))
             ON CONFLICT (job, incarnation, instance)
             DO UPDATE SET running = 1, started_at = ?4, stopped_at = NULL, failure = NULL,
                 ended = NULL, address = ?5",
            params![job, n, instance, ms(now), address],
        )?;
        Ok(())
    }

    /// `instance`'s workers of `incarnation` are gone (their agent said so, or it asks to
    /// start again); `failure` when they failed for good, `ended` when they ended by
    /// themselves.
    pub fn stop_workers(
        &self,
        job: &str,
        incarnation: u64,
        instance: &str,
        failure: Option<&str>,
        ended: Option<Ended>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let n = i64::try_from(incarnation).unwrap_or(i64::MAX);
        self.exec(
            "UPDATE workers SET running = 0, stopped_at = ?4, failure = ?5, ended = ?6
             WHERE job = ?1 AND incarnation = ?2 AND instance = ?3 AND running <> 0",
            params![job, n, instance, ms(now), failure, ended.map(Ended::as_str)],
        )?;
        Ok(())
    }

    /// In how many of its last incarnations of `job`, in a row up to the latest, `instance`'s
    /// workers ended by themselves (crashed or hung) while another node's workers in the same
    /// incarnation were stopped as asked: the node failed, not the training (which fails on
    /// every node alike). At most `limit` are looked at; call it once they all ended.
    pub fn failed_alone_in_a_row(&self, job: &str, instance: &str, limit: u32) -> Result<u32> {
        let rows = self.query(
            "SELECT CASE WHEN w.ended IS NOT NULL AND EXISTS (
                 SELECT 1 FROM workers o WHERE o.job = w.job AND o.incarnation = w.incarnation
                 AND o.instance <> w.instance AND o.running = 0 AND o.ended IS NULL)
                 THEN 1 ELSE 0 END
             FROM workers w WHERE w.job = ?1 AND w.instance = ?2 AND w.running = 0
             ORDER BY w.incarnation DESC LIMIT ?3",
            params![job, instance, i64::from(limit)],
        )?;
        let mut n = 0;
        for r in &rows {
            if !r.flag(0)? {
                break;
            }
            n += 1;
        }
        Ok(n)
    }
}
