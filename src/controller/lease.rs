//! Leader election: several controllers may share one store (PostgreSQL, for HA); only the
//! holder of the store's `controller` lease acts. A standby polls and takes the lease once it
//! has expired, so it leads within TTL + one poll of the leader's death (15 s + 3 s by default),
//! and loads the store only after it has taken it.
//!
//! Each take is a new reign (an epoch), and the leader's store fences every write on it (see
//! `store::lease`): a deposed leader's writes are refused in their own transaction, whatever
//! it was doing when it lost the lease (paused, partitioned, mid-pass). The lease is renewed by
//! a thread of its own every third of its TTL, however long a pass takes; the loop only reads
//! what that thread found. The leader is fail-stop: once its reign is over (another controller
//! took over, or the store was unreachable for two thirds of a TTL) it stops, rather than act
//! beside a new leader. Expiry uses the database's clock, so hosts need not agree on the time.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::store::{Fence, LeaseHolder, Store};

/// The one lease every controller of a deployment competes for.
pub const LEASE: &str = "controller";

#[derive(Debug, Clone, thiserror::Error)]
pub enum LeaseError {
    #[error("lost the leadership lease to {holder}; stopping so that only one controller acts")]
    Lost { holder: String },
    #[error("could not renew the leadership lease for {}s: {reason}", .for_.as_secs())]
    Unreachable { for_: Duration, reason: String },
}

/// The leader a standby last read from the lease, for its API's 503s (shared with the server).
#[derive(Debug, Clone, Default)]
pub struct LeaderSeen(Arc<Mutex<Option<LeaseHolder>>>);

impl LeaderSeen {
    pub fn get(&self) -> Option<LeaseHolder> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, leader: Option<LeaseHolder>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = leader;
    }
}

/// A controller that wants to lead: waits for the lease.
#[derive(Debug)]
pub struct Leadership {
    store: Arc<Store>,
    holder: String,
    ttl: Duration,
    /// Where this controller serves its API, written into the lease for others to point at.
    address: Option<String>,
    fence: Option<Fence>,
    seen: LeaderSeen,
}

impl Leadership {
    pub fn new(store: Arc<Store>, holder: impl Into<String>, ttl: Duration) -> Leadership {
        Leadership {
            store,
            holder: holder.into(),
            ttl,
            address: None,
            fence: None,
            seen: LeaderSeen::default(),
        }
    }

    /// Publish the leader each poll reads to `seen` while this controller waits.
    pub fn telling(mut self, seen: LeaderSeen) -> Leadership {
        self.seen = seen;
        self
    }

    /// Advertise `address` (the API's URL) in the lease while this controller leads.
    pub fn advertising(mut self, address: impl Into<String>) -> Leadership {
        self.address = Some(address.into());
        self
    }

    /// Wait until this controller holds the lease, then fence the store's writes on its reign.
    /// Says once who leads meanwhile.
    pub async fn wait_to_lead(&mut self) {
        let poll = self.ttl / 5;
        let mut said: Option<String> = None;
        loop {
            match self
                .store
                .take_lease(LEASE, &self.holder, self.ttl, self.address.as_deref())
            {
                Ok(Some(fence)) => {
                    tracing::info!(holder = %self.holder, epoch = fence.epoch, "leading");
                    self.store.fence_writes(fence.clone());
                    self.fence = Some(fence);
                    return;
                }
                Ok(None) => {
                    let current = self.store.lease_holder(LEASE).ok().flatten();
                    let leader = current
                        .as_ref()
                        .map(|l| l.holder.clone())
                        .unwrap_or_default();
                    self.seen.set(current);
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

    /// Keep the lease taken by [`Leadership::wait_to_lead`]: renewals on a thread of their own.
    pub fn keep(self) -> std::io::Result<Lease> {
        let fence = self.fence.ok_or_else(|| {
            std::io::Error::other("keep() before wait_to_lead(): no lease is held")
        })?;
        let ended = Arc::new(Mutex::new(None));
        let (stop, stopped) = mpsc::channel();
        let renewer = Renewer {
            store: self.store.clone(),
            fence: fence.clone(),
            ttl: self.ttl,
            ended: ended.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("tern-lease".into())
            .spawn(move || renewer.run(&stopped))?;
        Ok(Lease {
            store: self.store,
            fence,
            ended,
            stop,
            thread: Some(thread),
        })
    }
}

/// The lease a leader holds, renewed in the background until it is released or lost.
#[derive(Debug)]
pub struct Lease {
    store: Arc<Store>,
    fence: Fence,
    ended: Arc<Mutex<Option<LeaseError>>>,
    stop: mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Lease {
    /// Whether this controller still leads; no store call. Errors mean it must stop acting.
    pub fn check(&self) -> Result<(), LeaseError> {
        if let Some(e) = self
            .ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            return Err(e);
        }
        match self.store.deposed() {
            Some(leader) => Err(LeaseError::Lost {
                holder: leader.map_or_else(|| "another controller".into(), |l| l.holder),
            }),
            None => Ok(()),
        }
    }

    /// The reign this controller leads in.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// Stop renewing and hand the lease over at once (a clean shutdown).
    pub fn release(mut self) {
        let _ = self.stop.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if self.check().is_ok()
            && let Err(e) = self.store.release_lease(&self.fence)
        {
            tracing::warn!("releasing the leadership lease: {e}");
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = self.stop.send(());
    }
}

/// The renewal thread's state.
struct Renewer {
    store: Arc<Store>,
    fence: Fence,
    ttl: Duration,
    ended: Arc<Mutex<Option<LeaseError>>>,
}

impl Renewer {
    /// Renew every third of the TTL until stopped or the reign ends; on its end, depose the
    /// store (its writes fail at once, the API answers 503) and say why.
    fn run(self, stopped: &mpsc::Receiver<()>) {
        let mut last = Instant::now();
        loop {
            match stopped.recv_timeout(self.ttl / 3) {
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            let error = match self.store.renew_lease(&self.fence, self.ttl) {
                Ok(true) => {
                    last = Instant::now();
                    continue;
                }
                Ok(false) => LeaseError::Lost {
                    holder: leader(&self.store).unwrap_or_else(|| "another controller".into()),
                },
                // Keep going on a transient failure while the lease we hold is still valid; a
                // margin of one renewal period keeps us from acting after a standby could take
                // it.
                Err(e) if last.elapsed() < self.ttl * 2 / 3 => {
                    tracing::warn!("renewing the leadership lease: {e}");
                    continue;
                }
                Err(e) => LeaseError::Unreachable {
                    for_: last.elapsed(),
                    reason: e.to_string(),
                },
            };
            tracing::error!("{error}");
            self.store
                .depose(self.store.lease_holder(LEASE).ok().flatten());
            *self.ended.lock().unwrap_or_else(PoisonError::into_inner) = Some(error);
            return;
        }
    }
}

/// Who holds the lease now, if the store can tell (for messages only).
fn leader(store: &Store) -> Option<String> {
    store.lease_holder(LEASE).ok().flatten().map(|h| h.holder)
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

/// This host's name: `/etc/hostname`, else `$HOSTNAME`; `None` when neither says.
pub fn host_name() -> Option<String> {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
}

/// A holder name unique to this process: host, pid and a random suffix.
pub fn default_holder() -> String {
    let host = host_name().unwrap_or_else(|| "host".into());
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
        // a "dies" without renewing: no `keep()`.
        drop(a);
        let mut b = Leadership::new(store.clone(), "b", ttl);
        let started = Instant::now();
        b.wait_to_lead().await;
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        let b = b.keep().expect("keep");
        assert!(b.check().is_ok());
        // A clean shutdown hands over at once.
        b.release();
        let mut c = Leadership::new(store, "c", ttl);
        let started = Instant::now();
        c.wait_to_lead().await;
        assert!(started.elapsed() < Duration::from_millis(50));
    }

    /// The renewal thread keeps the lease however long the loop is busy (here: never asked),
    /// and once another controller takes over it reports the loss and the store is deposed.
    #[tokio::test]
    async fn the_lease_is_kept_apart_from_the_loop_and_its_loss_is_seen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tern.db");
        let store = Arc::new(Store::open(&path).expect("store"));
        let ttl = Duration::from_millis(300);
        let mut a = Leadership::new(store.clone(), "a", ttl).advertising("http://a:1");
        a.wait_to_lead().await;
        let a = a.keep().expect("keep");
        // A "pass" of five TTLs: the standby never gets the lease.
        let other = Arc::new(Store::open(&path).expect("store"));
        let mut b = Leadership::new(other.clone(), "b", ttl);
        let took = tokio::time::timeout(ttl * 5, b.wait_to_lead()).await;
        assert!(
            took.is_err(),
            "the standby took a lease that was being renewed"
        );
        assert!(a.check().is_ok());
        // Another process restarts under the same name and takes the lease (a new reign): the
        // old one sees it at its next renewal, stops, and its store refuses writes from then on.
        let restarted = other
            .take_lease(LEASE, "a", ttl, None)
            .expect("take")
            .expect("the same name takes its own lease");
        assert!(restarted.epoch > a.fence().epoch);
        let deadline = Instant::now() + ttl * 3;
        while a.check().is_ok() {
            assert!(Instant::now() < deadline, "the loss was not seen");
            std::thread::sleep(ttl / 10);
        }
        let err = a.check().expect_err("lost");
        assert!(matches!(&err, LeaseError::Lost { .. }), "{err}");
        assert!(store.deposed().is_some());
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
