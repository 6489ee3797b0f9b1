//! The `leases` table: the leader lease HA controllers share, by the database's clock, and the
//! fence that keeps a deposed leader from writing.
//!
//! Every take of the lease starts a new reign (`epoch` + 1). Once a controller leads, its store
//! prepends a guard to every batch that writes: a read of the lease row, in the same
//! transaction, that must still name this holder and epoch (PostgreSQL: `FOR KEY SHARE`, and a
//! take locks the row `FOR UPDATE` first, so a takeover waits for the write's commit and a
//! write waits for the takeover's, while a renewal, a plain `UPDATE`, waits for neither). A
//! write therefore either commits before the next leader takes over, and that leader loads
//! it, or is rolled back with [`StoreError::Fenced`]. Reads are not fenced.
//!
//! On PostgreSQL the lease's statements run on a connection of their own (`tern-lease`), so a
//! slow batch on the pass's connection cannot hold a renewal back past the lease's TTL.

use std::sync::{Mutex, PoisonError};

use super::*;

/// One reign of a lease: what a leader's writes are conditional on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub name: String,
    pub holder: String,
    pub epoch: i64,
}

/// The store's fencing state: the fence in force, and whether it was found broken.
#[derive(Debug, Default)]
pub(super) struct Fencing {
    fence: Mutex<Option<Fence>>,
    /// Set once a write or a renewal found another reign: later writes fail at once.
    deposed: Mutex<Option<Deposed>>,
}

#[derive(Debug, Clone)]
struct Deposed {
    leader: Option<LeaseHolder>,
}

/// What a refused write says.
pub(super) fn fenced_message(leader: Option<&LeaseHolder>) -> String {
    let base = "this controller no longer holds the leader lease, so it writes nothing";
    match leader {
        Some(LeaseHolder {
            holder,
            address: Some(a),
            ..
        }) => format!("{base}; {holder} leads, at {a}"),
        Some(l) => format!("{base}; {} leads", l.holder),
        None => format!("{base}; the leader is not known"),
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2)
}

impl Store {
    /// Take the lease `name` for `holder` if it is free, expired, or already `holder`'s (a
    /// restart under the same name): a new reign, with a higher epoch than any before it, so a
    /// paused process of the same name is fenced too. `None` while another holder's lease runs.
    pub fn take_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
        address: Option<&str>,
    ) -> Result<Option<Fence>> {
        let now = self.lease_now_ms()?;
        let mut batch = Vec::with_capacity(2);
        if let Backend::Postgres(_) = &self.backend {
            // Waits for the fenced writes in flight (`FOR KEY SHARE`) to commit.
            batch.push(Stmt::query(
                "SELECT epoch FROM leases WHERE name = ?1 FOR UPDATE",
                params![name],
            ));
        }
        batch.push(Stmt::query(
            "INSERT INTO leases (name, holder, expires_at, renewed_at, epoch, address)
                 VALUES (?1, ?2, ?3, ?4, 1, ?5)
                 ON CONFLICT (name) DO UPDATE
                    SET holder = excluded.holder, expires_at = excluded.expires_at,
                        renewed_at = excluded.renewed_at, epoch = leases.epoch + 1,
                        address = excluded.address
                    WHERE leases.holder = excluded.holder OR leases.expires_at < ?4
                 RETURNING epoch",
            params![name, holder, now + millis(ttl), now, address],
        ));
        let rows = self
            .run_lease(batch)?
            .pop()
            .map(Outcome::rows)
            .unwrap_or_default();
        rows.first()
            .map(|r| {
                Ok(Fence {
                    name: name.to_string(),
                    holder: holder.to_string(),
                    epoch: r.int(0)?,
                })
            })
            .transpose()
    }

    /// Extend the reign `fence` by `ttl` from now. False once another take has ended it.
    pub fn renew_lease(&self, fence: &Fence, ttl: Duration) -> Result<bool> {
        let now = self.lease_now_ms()?;
        let n = self
            .run_lease(vec![Stmt::exec(
                "UPDATE leases SET expires_at = ?1, renewed_at = ?2
                 WHERE name = ?3 AND holder = ?4 AND epoch = ?5",
                params![
                    now + millis(ttl),
                    now,
                    &fence.name,
                    &fence.holder,
                    fence.epoch
                ],
            )])?
            .remove(0)
            .count();
        Ok(n == 1)
    }

    /// End the reign `fence` at once (a clean shutdown), so a standby need not wait for expiry.
    /// The row stays, expired, so the next take's epoch is still higher than this one's.
    pub fn release_lease(&self, fence: &Fence) -> Result<()> {
        self.run_lease(vec![Stmt::exec(
            "UPDATE leases SET expires_at = 0
             WHERE name = ?1 AND holder = ?2 AND epoch = ?3",
            params![&fence.name, &fence.holder, fence.epoch],
        )])?;
        Ok(())
    }

    /// Who holds the lease `name`, if anyone ever took it.
    pub fn lease_holder(&self, name: &str) -> Result<Option<LeaseHolder>> {
        let now = self.lease_now_ms()?;
        let rows = self
            .run_lease(vec![Stmt::query(
                "SELECT holder, expires_at, epoch, address FROM leases WHERE name = ?1",
                params![name],
            )])?
            .remove(0)
            .rows();
        rows.first()
            .map(|r| {
                Ok(LeaseHolder {
                    holder: r.text(0)?,
                    expires_in_ms: r.int(1)? - now,
                    epoch: r.int(2)?,
                    address: r.opt_text(3)?,
                })
            })
            .transpose()
    }

    /// From now on every batch that writes holds only while `fence` is the lease's reign.
    pub fn fence_writes(&self, fence: Fence) {
        *self
            .fencing
            .fence
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(fence);
    }

    /// Record that this process's reign is over (its renewal found another holder, or it could
    /// not renew in time): writes fail at once from now on, and the API answers 503.
    pub fn depose(&self, leader: Option<LeaseHolder>) {
        let mut d = self
            .fencing
            .deposed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Keep the first news of the leader unless this one knows more.
        if d.as_ref().is_none_or(|d| d.leader.is_none()) {
            *d = Some(Deposed { leader });
        }
    }

    /// `Some` once this process was deposed, with the leader that took over if the store could
    /// tell.
    pub fn deposed(&self) -> Option<Option<LeaseHolder>> {
        let known = self
            .fencing
            .deposed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        Some(known.leader)
    }

    /// The fence this process writes under, if it leads.
    pub fn fence(&self) -> Option<Fence> {
        self.fencing
            .fence
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// `batch`, with the guard in front when this process leads and the batch writes.
    pub(super) fn run_fenced(&self, batch: Vec<Stmt>) -> Result<Vec<Outcome>> {
        let Some(fence) = self.fence().filter(|_| batch.iter().any(Stmt::writes)) else {
            return self.run_unfenced(batch);
        };
        if let Some(leader) = self.deposed() {
            return Err(StoreError::Fenced(leader));
        }
        let mut guarded = Vec::with_capacity(batch.len() + 1);
        guarded.push(self.guard(&fence));
        guarded.extend(batch);
        match self.run_unfenced(guarded) {
            Ok(mut out) => {
                out.remove(0);
                Ok(out)
            }
            Err(StoreError::Fenced(_)) => {
                let leader = self.lease_holder(&fence.name).ok().flatten();
                self.depose(leader.clone());
                Err(StoreError::Fenced(leader))
            }
            Err(e) => Err(e),
        }
    }

    fn guard(&self, fence: &Fence) -> Stmt {
        let sql = match &self.backend {
            Backend::Sqlite(_) => {
                "SELECT epoch FROM leases WHERE name = ?1 AND holder = ?2 AND epoch = ?3"
            }
            Backend::Postgres(_) => {
                "SELECT epoch FROM leases WHERE name = ?1 AND holder = ?2 AND epoch = ?3
                 FOR KEY SHARE"
            }
        };
        Stmt::guard(sql, params![&fence.name, &fence.holder, fence.epoch])
    }

    /// A batch of the lease's: on its own connection where the store has one.
    fn run_lease(&self, batch: Vec<Stmt>) -> Result<Vec<Outcome>> {
        match &self.lease_db {
            Some(db) => db.run(batch),
            None => self.run_unfenced(batch),
        }
    }

    /// The database's clock: leases of controllers on different hosts must not depend on
    /// their clocks agreeing.
    fn lease_now_ms(&self) -> Result<i64> {
        let sql = match &self.backend {
            Backend::Sqlite(_) => {
                "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
            }
            Backend::Postgres(_) => {
                "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
            }
        };
        self.run_lease(vec![Stmt::query(sql, vec![])])?
            .remove(0)
            .rows()
            .first()
            .ok_or_else(|| StoreError::Invalid("the database did not tell its time".into()))?
            .int(0)
    }
}
