//! Leader election: several controllers may share one store (PostgreSQL, for HA); only the
//! holder of the store's `controller` lease acts. The leader renews the lease every third of
//! its TTL; a standby polls and takes the lease once it has expired, so it leads within
//! TTL + one poll of the leader's death (15 s + 3 s by default).
//!
//! The leader is fail-stop: if it cannot renew (another controller took over, or the store was
//! unreachable for a whole TTL) it stops, rather than act beside a new leader. Expiry uses the
//! database's clock, so controllers on different hosts need not agree on the time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::store::{Store, StoreError};

/// The one lease every controller of a deployment competes for.
pub const LEASE: &str = "controller";

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lost the leadership lease to {holder}; stopping so that only one controller acts")]
    Lost { holder: String },
    #[error("could not renew the leadership lease for {}s: {source}", .for_.as_secs())]
    Unreachable {
        for_: Duration,
        #[source]
        source: StoreError,
    },
}

/// This controller's claim on the lease.
#[derive(Debug)]
pub struct Leadership {
    store: Arc<Store>,
    holder: String,
    ttl: Duration,
    /// When the lease was last known to be ours (renewed or taken).
    held_since_renewal: Option<Instant>,
}

impl Leadership {
    pub fn new(store: Arc<Store>, holder: impl Into<String>, ttl: Duration) -> Leadership {
        Leadership {
            store,
            holder: holder.into(),
            ttl,
            held_since_renewal: None,
        }
    }

    /// Wait until this controller holds the lease. Says once who leads meanwhile.
    pub async fn wait_to_lead(&mut self) {
        let poll = self.ttl / 5;
        let mut said: Option<String> = None;
        loop {
            match self.store.acquire_lease(LEASE, &self.holder, self.ttl) {
                Ok(true) => {
                    self.held_since_renewal = Some(Instant::now());
                    if said.is_some() {
                        tracing::info!(holder = %self.holder, "took over as leader");
                    }
                    return;
                }
                Ok(false) => {
                    let leader = self.leader().unwrap_or_default();
                    if said.as_deref() != Some(leader.as_str()) {
                        tracing::info!(
                            holder = %self.holder,
                            "standby: {leader} leads; taking over if its lease expires"
                        );
                        said = Some(leader);
                    }
                }
                Err(e) => tracing::warn!("standby: cannot reach the state store: {e}"),
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// Renew the lease when a third of its TTL has passed since the last renewal. Errors mean
    /// this controller must stop acting.
    pub fn renew_if_due(&mut self) -> Result<(), LeaseError> {
        let last = self.held_since_renewal.unwrap_or_else(Instant::now);
        if self.held_since_renewal.is_some() && last.elapsed() < self.ttl / 3 {
            return Ok(());
        }
        match self.store.acquire_lease(LEASE, &self.holder, self.ttl) {
            Ok(true) => {
                self.held_since_renewal = Some(Instant::now());
                Ok(())
            }
            Ok(false) => Err(LeaseError::Lost {
                holder: self.leader().unwrap_or_else(|| "another controller".into()),
            }),
            // Keep going on a transient failure while the lease we hold is still valid; a
            // margin of one renewal period keeps us from acting after a standby could take it.
            Err(e) if last.elapsed() < self.ttl * 2 / 3 => {
                tracing::warn!("renewing the leadership lease: {e}");
                Ok(())
            }
            Err(source) => Err(LeaseError::Unreachable {
                for_: last.elapsed(),
                source,
            }),
        }
    }

    /// Who holds the lease now, if the store can tell (for messages only).
    fn leader(&self) -> Option<String> {
        self.store
            .lease_holder(LEASE)
            .ok()
            .flatten()
            .map(|h| h.holder)
    }

    /// Hand the lease over at once on a clean shutdown.
    pub fn release(&self) {
        if let Err(e) = self.store.release_lease(LEASE, &self.holder) {
            tracing::warn!("releasing the leadership lease: {e}");
        }
    }
}

/// The embedded store's guard against two controllers on one SQLite file: an exclusive OS
/// lock on `<state>.lock` next to the file's real path (symlinks resolved, so two names for
/// one file are one lock), which the OS drops the moment the process dies, so a restarted
/// controller goes on at once. Waits (as a standby) while another process holds it.
pub async fn lock_state_file(state: &std::path::Path) -> std::io::Result<std::fs::File> {
    let mut path = crate::store::real_path(state)?.into_os_string();
    path.push(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    let mut said = false;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => {
                if !said {
                    tracing::info!(
                        "standby: another controller holds {}; waiting for it to exit",
                        std::path::Path::new(&path).display()
                    );
                    said = true;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// A holder name unique to this process: host, pid and a random suffix.
pub fn default_holder() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "host".into());
    // std's per-process random hash keys; no extra RNG dependency for eight hex digits.
    let salt = {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish() as u32
    };
    format!("{host}-{}-{salt:08x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_standby_takes_over_when_the_leader_stops_renewing() {
        let store = Arc::new(Store::in_memory().expect("store"));
        let ttl = Duration::from_millis(300);
        let mut a = Leadership::new(store.clone(), "a", ttl);
        a.wait_to_lead().await;
        let mut b = Leadership::new(store.clone(), "b", ttl);
        let started = Instant::now();
        // a stops renewing (it "died"): b leads after the TTL, not before.
        b.wait_to_lead().await;
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        // a comes back: it must notice it lost the lease and stop.
        std::thread::sleep(ttl / 2);
        let err = a.renew_if_due().expect_err("a lost the lease");
        assert!(
            matches!(&err, LeaseError::Lost { holder } if holder == "b"),
            "{err}"
        );
        assert!(b.renew_if_due().is_ok());
        // A clean shutdown hands over at once.
        b.release();
        let mut c = Leadership::new(store, "c", ttl);
        let started = Instant::now();
        c.wait_to_lead().await;
        assert!(started.elapsed() < Duration::from_millis(50));
    }

    #[tokio::test]
    async fn one_process_at_a_time_holds_a_state_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state.db");
        let held = lock_state_file(&state).await.expect("lock");
        let second = tokio::time::timeout(Duration::from_millis(700), lock_state_file(&state));
        assert!(second.await.is_err(), "a second holder must wait");
        drop(held);
        let again = tokio::time::timeout(Duration::from_secs(2), lock_state_file(&state));
        assert!(
            again.await.is_ok(),
            "the lock is free once its holder is gone"
        );
    }

    #[tokio::test]
    async fn a_symlink_to_a_held_state_file_is_the_same_lock() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state.db");
        std::fs::write(&state, b"").expect("touch");
        let link = dir.path().join("alias.db");
        std::os::unix::fs::symlink(&state, &link).expect("symlink");
        let _held = lock_state_file(&state).await.expect("lock");
        let second = tokio::time::timeout(Duration::from_millis(700), lock_state_file(&link));
        assert!(
            second.await.is_err(),
            "a second name for the file must wait too"
        );
    }

    #[test]
    fn holders_are_unique_per_process_start() {
        assert_ne!(default_holder(), default_holder());
    }
}
