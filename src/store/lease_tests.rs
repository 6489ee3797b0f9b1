//! The lease on PostgreSQL beside a slow pass (issue 52, item 5).

use super::pg_cluster::PgCluster;
use super::sql::Stmt;
use super::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The lease renews on a connection of its own, and a renewal takes no lock a write holds. A
/// leader with a 600 ms lease, renewed every 200 ms on a thread as the controller's renewer
/// does, runs a 1.5 s read, then a 1.5 s fenced write, on the pass's connection: each over
/// two renewal periods and past the TTL. All along every renewal succeeds, the lease row (read
/// by a standby) names the leader and has not expired, and the standby's takes fail (during
/// the write a take waits for its commit, by design, so it tries once the write is in). The
/// write commits.
#[test]
fn a_slow_batch_on_the_pass_connection_never_costs_the_lease() {
    let cluster = PgCluster::start().expect("PostgreSQL");
    let url = cluster.create_db("slow").expect("db");
    let leader = Store::connect(&url).expect("connect");
    let standby = Store::connect(&url).expect("connect");
    let ttl = Duration::from_millis(600);
    let fence = leader
        .take_lease("controller", "leader", ttl, None)
        .expect("take")
        .expect("free");
    leader.fence_writes(fence.clone());
    let sleep = || Stmt::query("SELECT 1 FROM pg_sleep(1.5)", vec![]);
    let write = Stmt::exec(
        "INSERT INTO settings (name, value, set_at) VALUES ('slow', 'x', 0)",
        vec![],
    );
    let (done, renewals) = (AtomicBool::new(false), AtomicUsize::new(0));
    /// Stops the renewals however the scope's body ends (a failed assertion included), so
    /// the scope's join does not wait on them forever.
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    std::thread::scope(|s| {
        let _stop = Stop(&done);
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(ttl / 3);
                assert!(leader.renew_lease(&fence, ttl).expect("renew"), "lost");
                renewals.fetch_add(1, Ordering::SeqCst);
            }
        });
        for batch in [vec![sleep()], vec![write, sleep()]] {
            let writes = batch.iter().any(Stmt::writes);
            let before = renewals.load(Ordering::SeqCst);
            let slow = s.spawn(|| leader.run(batch));
            let t0 = std::time::Instant::now();
            while !slow.is_finished() {
                let held = standby
                    .lease_holder("controller")
                    .expect("read")
                    .expect("held");
                assert!(
                    held.holder == "leader" && held.expires_in_ms > 0,
                    "{held:?} {:?} into a slow batch (writes: {writes})",
                    t0.elapsed()
                );
                if !writes {
                    let taken = standby.take_lease("controller", "standby", ttl, None);
                    assert!(taken.expect("take").is_none(), "taken {:?}", t0.elapsed());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            slow.join()
                .expect("thread")
                .expect("the slow batch commits");
            let during = renewals.load(Ordering::SeqCst) - before;
            assert!(during >= 4, "{during} renewals in 1.5 s at one per 200 ms");
            let taken = standby.take_lease("controller", "standby", ttl, None);
            assert!(taken.expect("take").is_none());
        }
    });
    let held = standby
        .lease_holder("controller")
        .expect("holder")
        .expect("held");
    assert_eq!(held.holder, "leader");
    let written = standby
        .query("SELECT value FROM settings WHERE name = 'slow'", vec![])
        .expect("read");
    assert_eq!(written.len(), 1);
}
